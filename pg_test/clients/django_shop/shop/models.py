"""Django 5 and idgen (docs/clients.md): db_default makes the database's DEFAULT the key.

Django 5.2 leaves a primary key out of the INSERT and reads it back from RETURNING only for an
AutoField whose value is None, in save() and bulk_create() alike; a field with db_default starts
as a DatabaseDefault placeholder instead, which bulk_create() takes for a key already set and
never replaces. So SnowflakeAutoField is a BigAutoField whose new instances start at None, and
whose column is a plain bigint (no identity, which comes with BigAutoField's internal type) with
DEFAULT snowflake_next() (db_default, in the migration). SnowflakeField is a bigint column, not
the key, that the database fills: db_returning, an AutoField's flag, has Django 5.2 read it back
from RETURNING in save() and bulk_create()."""
from django.db import models
from django.db.models import Func


class SnowflakeNext(Func):
    function = "snowflake_next"
    template = "%(function)s()"
    output_field = models.BigIntegerField()


class SnowflakeAutoField(models.BigAutoField):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("db_default", SnowflakeNext())
        super().__init__(*args, **kwargs)

    def get_default(self):
        return None  # new instances start at None: left out of the INSERT, read back

    def get_internal_type(self):
        return "BigIntegerField"  # a plain bigint column, no GENERATED ... AS IDENTITY

    def rel_db_type(self, connection):
        return "bigint"


class SnowflakeField(models.BigIntegerField):
    db_returning = True  # a column, not the key, read back from RETURNING too

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("db_default", SnowflakeNext())
        super().__init__(*args, **kwargs)


class Order(models.Model):
    id = SnowflakeAutoField(primary_key=True)
    customer = models.TextField()
    public_id = SnowflakeField(unique=True)  # added by the second migration, to stored rows


class Note(models.Model):
    # the trap: the DEFAULT is there and the key is made, save() reads it back, but an instance
    # from bulk_create() keeps the DatabaseDefault placeholder
    id = models.BigIntegerField(primary_key=True, db_default=SnowflakeNext())
    text = models.TextField()
