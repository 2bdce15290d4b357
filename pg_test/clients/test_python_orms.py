"""SQLAlchemy 2, SQLModel and Django 5 read back the keys idgen makes (docs/clients.md): each makes
the table with its own schema tool or migrations, with DEFAULT snowflake_next(), inserts through
its normal paths and reads the generated keys back. The client code is in this folder, run as it
would be in an application: sqlalchemy_orders.py, sqlmodel_orders.py and django_shop/."""
import json
import os
import subprocess
import sys

import pytest
from shop import check_keys_and_pages, made_the_extension

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = 7


def worker_of(i):
    return (i >> 12) & 1023


@pytest.fixture(scope="module")
def server(module_factory):
    c = module_factory("orms", worker_id=WORKER)
    for db in ("alchemy", "sqlmodel", "django"):
        c.q(f"CREATE DATABASE {db}")  # without the extension: each stack's schema tool makes it
    return c


def run(*args):
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def url(server, db):
    """SQLAlchemy's URL for psycopg 3 (the driver its documentation and docs/clients.md name)."""
    return f"postgresql+psycopg://postgres@/{db}?host={server.socket_dir}&port={server.port}"


def defaults(server, db):
    return dict(server.q("SELECT a.attname, pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d JOIN pg_attribute a"
                         " ON a.attrelid = d.adrelid AND a.attnum = d.adnum WHERE d.adrelid = 'orders'::regclass",
                         db=db))


def test_sqlalchemy_reads_back_the_keys_of_its_flush_and_of_an_insert_of_many(server):
    out = run(os.path.join(HERE, "sqlalchemy_orders.py"), url(server, "alchemy"))
    assert made_the_extension(server, "alchemy")
    assert defaults(server, "alchemy") == {"id": "snowflake_next()", "ref": "uuid_v7()"}, \
        "create_all() wrote the DEFAULTs"
    first, many = out["first"], out["many"]
    assert isinstance(first, int) and worker_of(first) == WORKER
    assert len(many) == 1000 and many == sorted(many) and many[0] > first
    assert all(worker_of(i) == WORKER for i in many)
    stored = [i for (i,) in server.q("SELECT id FROM orders ORDER BY id", db="alchemy")]
    assert stored == [first, *many], "what the client got is what the table holds, not rounded"


def test_sqlmodel_with_a_bigint_key_reads_back_every_key_and_pages_by_it_and_a_plain_int_key_overflows(server):
    out = run(os.path.join(HERE, "sqlmodel_orders.py"), url(server, "sqlmodel"))
    assert defaults(server, "sqlmodel") == {"id": "snowflake_next()"}
    assert server.one("SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
                      " WHERE attrelid = 'orders'::regclass AND attname = 'id'", db="sqlmodel") == "bigint"
    assert isinstance(out["first"], int)
    check_keys_and_pages(server, "sqlmodel", WORKER, out["first"], out["many"], out["pages"])
    # The trap: the natural `id: int | None` makes an INTEGER column, and the first insert fails.
    trap = run(os.path.join(HERE, "sqlmodel_int_trap.py"), url(server, "sqlmodel"))
    assert trap["column"] == "integer"
    assert trap["error"] == {"sqlstate": "22003", "message": "integer out of range"}, trap["error"]
    assert server.one("SELECT count(*) FROM int_orders", db="sqlmodel") == 0
    # what docs/clients.md says of the session: one INSERT per new row
    assert trap["inserts"] == 1000 and server.one("SELECT count(*) FROM counted", db="sqlmodel") == 1000


def test_django_reads_back_its_keys_and_a_migration_gives_each_stored_row_its_own(server):
    out = run(os.path.join(HERE, "django_shop", "run.py"), server.socket_dir, str(server.port), "django")
    assert out["defaults"] == {"id": "snowflake_next()", "public_id": "snowflake_next()"}
    assert out["before"] == [500, 500], "AddField with db_default: a distinct public_id for each stored row"
    one_id, one_public = out["one"]
    pairs = out["many"]
    assert all(isinstance(i, int) and worker_of(i) == WORKER for pair in [out["one"], *pairs] for i in pair)
    ids = [p[0] for p in pairs]
    assert len(set(ids)) == 200 and min(ids) > one_id and one_public != one_id
    assert set(ids) | {one_id} <= set(out["stored"]) and len(out["stored"]) == 701
    # The trap the page warns of: a plain db_default key is read back by save(), not by
    # bulk_create(), whose instances keep Django's placeholder (the key is made and stored).
    assert out["note_pk"] == "int" and out["bulk_note_pk"] == "DatabaseDefault" and out["notes_stored"] == 2
