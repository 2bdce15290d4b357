"""Django 5 and idgen (docs/clients.md): db_default makes the database's DEFAULT the key."""
from django.db import models
from django.db.models import Func


class SnowflakeNext(Func):
    function = "snowflake_next"
    template = "%(function)s()"
    output_field = models.BigIntegerField()


class SnowflakeField(models.BigIntegerField):
    """A bigint column, not the key, that the database fills: db_returning, an AutoField's flag,
    has Django 5.2 read it back from RETURNING in save() and bulk_create()."""
    db_returning = True

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("db_default", SnowflakeNext())
        super().__init__(*args, **kwargs)


class SnowflakeAutoField(models.BigAutoField):
    """The key the database makes. Django 5.2 leaves a primary key out of the INSERT and reads
    it back from RETURNING only for an AutoField whose value is None, in save() and bulk_create()
    alike; a field with db_default starts as a DatabaseDefault placeholder instead, which
    bulk_create() takes for a key already set and never replaces. So: a BigAutoField whose new
    instances start at None, and whose column is a plain bigint (no identity, which comes with
    BigAutoField's internal type) with DEFAULT snowflake_next() (db_default, in the migration)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("db_default", SnowflakeNext())
        super().__init__(*args, **kwargs)

    def get_default(self):
        return None

    def get_internal_type(self):
        return "BigIntegerField"

    def rel_db_type(self, connection):
        return "bigint"


class Order(models.Model):
    id = SnowflakeAutoField(primary_key=True)
    customer = models.TextField()
    # added by the second migration, to a table that already holds rows
    public_id = SnowflakeField(unique=True)

    class Meta:
        app_label = "shop"


class Note(models.Model):
    # the trap: the DEFAULT is there and the key is made, save() reads it back, but an instance
    # from bulk_create() keeps the DatabaseDefault placeholder
    id = models.BigIntegerField(primary_key=True, db_default=SnowflakeNext())
    text = models.TextField()

    class Meta:
        app_label = "shop"
