"""Runs the shop app against a database: migrate to 0001, rows, migrate to 0002 (the column
added with DEFAULT snowflake_next() to stored rows), more rows through the ORM; prints JSON.

    python run.py <socket dir> <port> <database>"""
import json
import sys

import django
from django.conf import settings

settings.configure(
    INSTALLED_APPS=["shop"],
    DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", "HOST": sys.argv[1], "PORT": sys.argv[2],
                           "NAME": sys.argv[3], "USER": "postgres"}},
    USE_TZ=True,
)
django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402


def main():
    call_command("migrate", "shop", "0001", verbosity=0)
    with connection.cursor() as cur:
        cur.execute("INSERT INTO shop_order (customer) SELECT 'before ' || g FROM generate_series(1, 500) g")
    call_command("migrate", "shop", "0002", verbosity=0)
    from shop.models import Note, Order
    one = Order.objects.create(customer="ada")
    note = Note.objects.create(text="save() reads the key back")
    notes = Note.objects.bulk_create([Note(text="bulk_create() does not")])
    many = Order.objects.bulk_create([Order(customer=f"c{i}") for i in range(200)])
    with connection.cursor() as cur:
        cur.execute("SELECT a.attname, pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d JOIN pg_attribute a"
                    " ON a.attrelid = d.adrelid AND a.attnum = d.adnum WHERE d.adrelid = 'shop_order'::regclass")
        defaults = dict(cur.fetchall())
        cur.execute("SELECT count(*), count(DISTINCT public_id) FROM shop_order WHERE customer LIKE 'before %'")
        before = cur.fetchone()
    print(json.dumps({"one": [one.id, one.public_id], "note_pk": type(note.pk).__name__,
                      "bulk_note_pk": type(notes[0].pk).__name__, "notes_stored": Note.objects.count(),
                      "many": [[o.id, o.public_id] for o in many],
                      "defaults": defaults, "before": before,
                      "stored": list(Order.objects.order_by("id").values_list("id", flat=True))}))


if __name__ == "__main__":
    main()
