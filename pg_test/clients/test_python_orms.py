"""SQLAlchemy 2 and Django 5 read back the keys idgen makes (docs/clients.md): each makes the
table with its own schema tool or migrations, with DEFAULT snowflake_next(), inserts through its
normal paths and reads the generated keys back. The client code is in this folder, run as it
would be in an application: sqlalchemy_orders.py and django_shop/."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = 7


def worker_of(i):
    return (i >> 12) & 1023


@pytest.fixture(scope="module")
def server(module_factory):
    c = module_factory("orms", worker_id=WORKER)
    for db in ("alchemy", "django"):
        c.q(f"CREATE DATABASE {db}")  # without the extension: each stack's schema tool makes it
    return c


def run(*args):
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_sqlalchemy_reads_back_the_keys_of_its_flush_and_of_an_insert_of_many(server):
    out = run(os.path.join(HERE, "sqlalchemy_orders.py"),
              f"postgresql+psycopg2://postgres@/alchemy?host={server.socket_dir}&port={server.port}")
    assert out["defaults"] == {"id": "snowflake_next()", "ref": "uuid_v7()"}, "create_all() wrote the DEFAULTs"
    first, many = out["first"], out["many"]
    assert isinstance(first, int) and worker_of(first) == WORKER
    assert len(many) == 1000 and many == sorted(many) and many[0] > first
    assert all(worker_of(i) == WORKER for i in many)
    assert out["stored"] == [first, *many], "what the client got is what the table holds, not rounded"


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
