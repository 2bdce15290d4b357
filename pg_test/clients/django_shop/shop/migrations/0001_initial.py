from django.contrib.postgres.operations import CreateExtension
from django.db import migrations, models

import shop.models


class Migration(migrations.Migration):
    initial = True
    dependencies = []
    operations = [
        CreateExtension("idgen"),  # the functions the DEFAULTs call, before the tables
        migrations.CreateModel(
            name="Order",
            fields=[
                ("id", shop.models.SnowflakeAutoField(primary_key=True, serialize=False)),
                ("customer", models.TextField()),
            ],
        ),
        migrations.CreateModel(
            name="Note",  # a plain db_default key: save() reads it back, bulk_create() does not
            fields=[
                ("id", models.BigIntegerField(primary_key=True, serialize=False,
                                              db_default=shop.models.SnowflakeNext())),
                ("text", models.TextField()),
            ],
        ),
    ]
