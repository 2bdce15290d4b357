from django.db import migrations

import shop.models


class Migration(migrations.Migration):
    dependencies = [("shop", "0001_initial")]
    operations = [
        # every row already stored gets an id of its own: the DEFAULT is evaluated per row
        migrations.AddField(model_name="order", name="public_id", field=shop.models.SnowflakeField(unique=True)),
    ]
