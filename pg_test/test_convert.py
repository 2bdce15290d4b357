"""snowflake_convert_column() and uuid_v7_convert_column(): an existing key moves to idgen's
generators in one call, keeping its rows; what cannot be done safely is refused with nothing
changed; a cancel halfway leaves the database exactly as it was; the result dumps and restores."""

import os
import subprocess
import threading
import time

import psycopg2
import pytest


@pytest.fixture
def db(cluster_factory):
    c = cluster_factory("convert")
    c.q("CREATE EXTENSION idgen")
    return c


def pg_dump(c, *args, db="postgres"):
    return subprocess.run([os.path.join(c.bin_dir, "pg_dump"), "-h", c.socket_dir, "-p", str(c.port),
                           "-U", "postgres", *args, db], check=True, capture_output=True, text=True).stdout


def snapshot(c):
    """The schema and every row: what must be exactly as before after a refusal or a cancel.
    (Without pg_dump's per-run random \\restrict key.)"""
    return [[line for line in pg_dump(c, *args).splitlines() if not line.startswith(("\\restrict", "\\unrestrict"))]
            for args in (["--schema-only"], ["--data-only", "--inserts"])]


def column(c, table, col="id"):
    """(type, default, identity) of a column."""
    return c.q("SELECT format_type(a.atttypid, a.atttypmod), pg_get_expr(d.adbin, d.adrelid), a.attidentity"
               f" FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
               f" WHERE a.attrelid = '{table}'::regclass AND a.attname = '{col}'")[0]


def test_a_serial_key_and_the_columns_that_reference_it(db):
    db.q("CREATE TABLE customers (id serial PRIMARY KEY, name text, referred_by int REFERENCES customers)",
         "CREATE TABLE orders (id bigserial PRIMARY KEY,"
         " customer_id integer NOT NULL REFERENCES customers ON DELETE CASCADE)",
         "CREATE TABLE visits (customer_id int REFERENCES customers, at date NOT NULL) PARTITION BY RANGE (at)",
         "CREATE TABLE visits_2026 PARTITION OF visits FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')",
         "INSERT INTO customers (name, referred_by) SELECT 'c' || g, NULLIF(g - 1, 0) FROM generate_series(1, 1000) g",
         "INSERT INTO orders (customer_id) SELECT 1 + g % 1000 FROM generate_series(1, 3000) g",
         "INSERT INTO visits SELECT 1 + g % 1000, '2026-06-01' FROM generate_series(1, 2000) g")
    rows_before = db.q("SELECT id, name, referred_by FROM customers ORDER BY id")
    db.q("SELECT snowflake_convert_column('customers')")
    assert column(db, "customers") == ("bigint", "snowflake_next()", "")
    for table, col in (("customers", "referred_by"), ("orders", "customer_id"), ("visits", "customer_id"),
                       ("visits_2026", "customer_id")):
        assert column(db, table, col)[0] == "bigint", (table, col)
    # the old rows and their ids are kept; the serial's sequence is kept (drop_sequence => false)
    assert db.q("SELECT id, name, referred_by FROM customers ORDER BY id") == rows_before
    assert db.one("SELECT pg_get_serial_sequence('customers', 'id')") == "public.customers_id_seq"
    # new rows get snowflake ids, above every old one, and the foreign keys still hold
    db.q("INSERT INTO customers (name, referred_by) VALUES ('new', 1000)")
    new_id = db.one("SELECT id FROM customers WHERE name = 'new'")
    assert new_id > 1000 and db.one(f"SELECT snowflake_worker_id({new_id})") == 1
    db.q(f"INSERT INTO orders (customer_id) VALUES ({new_id})",
         f"INSERT INTO visits VALUES ({new_id}, '2026-07-01')")
    e = db.error("INSERT INTO orders (customer_id) VALUES (999999999999)")
    assert e.pgcode == "23503"
    assert db.one("SELECT confdeltype FROM pg_constraint WHERE conrelid = 'orders'::regclass AND contype = 'f'") == "c"
    # a second call has nothing to do
    db.q("SELECT snowflake_convert_column('customers')")
    assert column(db, "customers") == ("bigint", "snowflake_next()", "")


def test_bigserial_with_its_sequence_dropped_is_not_rewritten(db):
    db.q("CREATE TABLE t (id bigserial PRIMARY KEY, v text)",
         "INSERT INTO t (v) SELECT g::text FROM generate_series(1, 100) g")
    file_before = db.one("SELECT pg_relation_filenode('t')")
    db.q("SELECT snowflake_convert_column('t', 'id', drop_sequence => true)")
    assert column(db, "t") == ("bigint", "snowflake_next()", "")
    assert db.one("SELECT count(*) FROM pg_class WHERE relname = 't_id_seq'") == 0
    assert db.one("SELECT pg_relation_filenode('t')") == file_before, "a bigint key was rewritten"


@pytest.mark.parametrize("kind", ["ALWAYS", "BY DEFAULT"])
@pytest.mark.parametrize("drop", [False, True])
def test_identity_columns(db, kind, drop):
    db.q(f"CREATE TABLE t (id int GENERATED {kind} AS IDENTITY (START WITH 10 INCREMENT BY 5) PRIMARY KEY, v int)",
         "INSERT INTO t (v) SELECT g FROM generate_series(1, 10) g")
    db.q(f"SELECT snowflake_convert_column('t', drop_sequence => {drop})")
    assert column(db, "t") == ("bigint", "snowflake_next()", "")
    assert db.q("SELECT min(id), max(id), count(*) FROM t WHERE v <= 10") == [(10, 55, 10)]
    kept = db.q("SELECT last_value, increment_by FROM pg_sequences WHERE sequencename = 't_id_seq'")
    # an identity's sequence goes with the identity; kept, it is a plain sequence where it was
    assert kept == ([] if drop else [(55, 5)])
    if not drop:
        assert db.one("SELECT nextval('t_id_seq')") == 60
    db.q("INSERT INTO t (v) VALUES (11)")
    assert db.one("SELECT id FROM t WHERE v = 11") > 55


def test_a_nextval_default_on_a_shared_sequence(db):
    db.q("CREATE SEQUENCE shared_ids",
         "CREATE TABLE a (id integer PRIMARY KEY DEFAULT nextval('shared_ids'))",
         "CREATE TABLE b (id integer PRIMARY KEY DEFAULT nextval('shared_ids'))",
         "CREATE TABLE c (id integer PRIMARY KEY DEFAULT nextval('shared_ids'))",
         "INSERT INTO a DEFAULT VALUES", "INSERT INTO b DEFAULT VALUES", "INSERT INTO c DEFAULT VALUES")
    db.q("SELECT snowflake_convert_column('a')")
    assert column(db, "a") == ("bigint", "snowflake_next()", "")
    assert column(db, "b") == ("integer", "nextval('shared_ids'::regclass)", "")
    # c still needs the sequence: dropping it with b's conversion is refused, b is left as it was
    before = snapshot(db)
    e = db.error("SELECT snowflake_convert_column('b', drop_sequence => true)")
    assert e.pgcode == "2BP01", e  # PostgreSQL's own: other objects depend on it
    assert snapshot(db) == before


def test_uuid_v4_key_to_uuid_v7(db):
    db.q("CREATE TABLE docs (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), n int)",
         "INSERT INTO docs (n) SELECT g FROM generate_series(1, 100) g")
    old = db.q("SELECT id, n FROM docs ORDER BY n")
    db.q("SELECT uuid_v7_convert_column('docs')")
    assert column(db, "docs") == ("uuid", "uuid_v7()", "")
    db.q("INSERT INTO docs (n) SELECT g FROM generate_series(101, 200) g")
    assert db.q("SELECT id, n FROM docs WHERE n <= 100 ORDER BY n") == old
    assert db.one("SELECT count(*) FROM docs WHERE n > 100 AND uuid_v7_timestamp(id) IS NOT NULL"
                  " AND substr(id::text, 15, 1) = '7'") == 100
    e = db.error("SELECT uuid_v7_convert_column('docs', 'n')")
    assert e.pgcode == "42804" and "snowflake_convert_column" in e.diag.message_hint


REFUSALS = [
    # (setup, call, SQLSTATE, words in the message)
    ("CREATE TABLE t (id text PRIMARY KEY)", "snowflake_convert_column('t')", "42804", "not an integer"),
    ("CREATE TABLE t (id serial, v int)", "snowflake_convert_column('t')", "55000", "is not a key"),
    ("CREATE TABLE t (id int PRIMARY KEY)", "snowflake_convert_column('t')", "55000", "no sequence"),
    ("CREATE TABLE t (id serial PRIMARY KEY)", "snowflake_convert_column('t', 'nope')", "42703", "does not exist"),
    ("CREATE TABLE t (id bigserial PRIMARY KEY);"
     " INSERT INTO t VALUES (snowflake_from_timestamp(now() + interval '1 day'))",
     "snowflake_convert_column('t')", "55000", "at or above the first snowflake id"),
    ("CREATE TABLE t (id serial PRIMARY KEY); CREATE VIEW v AS SELECT * FROM t",
     "snowflake_convert_column('v')", "42809", "is not a table"),
    ("CREATE TABLE t (id serial PRIMARY KEY); CREATE VIEW v AS SELECT id FROM t",
     "snowflake_convert_column('t')", "0A000", "view public.v"),
    ("CREATE TABLE t (id bigserial, at date, PRIMARY KEY (id, at)) PARTITION BY RANGE (at)",
     "snowflake_convert_column('t')", "0A000", "partitioned"),
    ("CREATE TABLE t (id uuid PRIMARY KEY)", "snowflake_convert_column('t')", "42804", "not an integer"),
    ("CREATE TABLE t (id uuid)", "uuid_v7_convert_column('t')", "55000", "is not a key"),
    ("CREATE TABLE t (id serial PRIMARY KEY)", "snowflake_convert_column(NULL)", "22004", "must not be null"),
    ("CREATE TABLE t (id serial PRIMARY KEY)", "snowflake_convert_column('t', drop_sequence => NULL)", "22004",
     "must not be null"),
    ("CREATE TABLE t (id uuid PRIMARY KEY)", "uuid_v7_convert_column('t', NULL)", "22004", "must not be null"),
]


@pytest.mark.parametrize("setup,call,sqlstate,words", REFUSALS, ids=[r[1] + " " + r[3] for r in REFUSALS])
def test_what_it_refuses_changes_nothing(db, setup, call, sqlstate, words):
    db.q(setup)
    before = snapshot(db)
    e = db.error(f"SELECT {call}")
    assert e.pgcode == sqlstate and words in e.diag.message_primary, (e.pgcode, e.diag.message_primary)
    assert e.diag.message_hint, "no HINT"
    assert snapshot(db) == before


def test_a_cancel_halfway_leaves_everything_as_it_was(db):
    """The conversion is cancelled after it has widened both tables and switched the DEFAULT,
    while it waits to drop the sequence (another session holds it): one transaction, so the
    cancel takes all of it back."""
    db.q("CREATE TABLE parent (id serial PRIMARY KEY, v text)",
         "CREATE TABLE child (parent_id int REFERENCES parent)",
         "INSERT INTO parent (v) SELECT g::text FROM generate_series(1, 20000) g",
         "INSERT INTO child SELECT 1 + g % 20000 FROM generate_series(1, 20000) g")
    holder = db.connect()
    holder.autocommit = False
    holder.cursor().execute("SELECT nextval('parent_id_seq')")  # holds a lock on the sequence
    before = snapshot(db)
    victim = db.connect()
    victim_pid = victim.get_backend_pid()
    result = {}

    def convert():
        try:
            victim.cursor().execute("SELECT snowflake_convert_column('parent', drop_sequence => true)")
        except psycopg2.Error as e:
            result["error"] = e

    t = threading.Thread(target=convert)
    t.start()
    deadline = time.monotonic() + 60
    while db.one(f"SELECT count(*) FROM pg_locks WHERE pid = {victim_pid} AND NOT granted"
                 f" AND relation = 'parent_id_seq'::regclass") == 0:
        assert time.monotonic() < deadline and t.is_alive(), result
        time.sleep(0.05)
    # halfway: both tables rewritten (new files) and the DEFAULT switched, all uncommitted
    assert db.one(f"SELECT count(*) FROM pg_locks WHERE pid = {victim_pid} AND granted AND mode = 'AccessExclusiveLock'"
                  " AND relation IN ('parent'::regclass, 'child'::regclass)") == 2
    db.q(f"SELECT pg_cancel_backend({victim_pid})")
    t.join(60)
    assert result["error"].pgcode == "57014"
    holder.rollback()
    holder.close()
    victim.close()
    assert snapshot(db) == before
    db.q("INSERT INTO parent (v) VALUES ('after')")
    assert db.one("SELECT id FROM parent WHERE v = 'after'") == 20002  # the sequence, one value used by holder


def test_a_converted_database_dumps_and_restores(db, tmp_path):
    db.q("CREATE DATABASE app")
    db.q("CREATE EXTENSION idgen", db="app")
    db.q("CREATE TABLE customers (id serial PRIMARY KEY, name text)",
         "CREATE TABLE orders (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
         " customer_id int REFERENCES customers)",
         "CREATE TABLE docs (id uuid PRIMARY KEY DEFAULT gen_random_uuid())",
         "INSERT INTO customers (name) SELECT 'c' || g FROM generate_series(1, 100) g",
         "INSERT INTO orders (customer_id) SELECT 1 + g % 100 FROM generate_series(1, 300) g",
         "INSERT INTO docs SELECT FROM generate_series(1, 10)",
         "SELECT snowflake_convert_column('customers', drop_sequence => true)",
         "SELECT snowflake_convert_column('orders')",
         "SELECT uuid_v7_convert_column('docs')",
         "INSERT INTO customers (name) VALUES ('new')", db="app")
    dump = str(tmp_path / "app.dump")
    subprocess.run([os.path.join(db.bin_dir, "pg_dump"), "-Fc", "-h", db.socket_dir, "-p", str(db.port),
                    "-U", "postgres", "-f", dump, "app"], check=True)
    db.q("CREATE DATABASE restored")
    subprocess.run([os.path.join(db.bin_dir, "pg_restore"), "-h", db.socket_dir, "-p", str(db.port),
                    "-U", "postgres", "-d", "restored", "--exit-on-error", dump], check=True)
    high = db.one("SELECT max(id) FROM customers", db="restored")
    db.q("INSERT INTO customers (name) VALUES ('after restore')",
         f"INSERT INTO orders (customer_id) VALUES ({high})", "INSERT INTO docs DEFAULT VALUES", db="restored")
    assert db.q("SELECT count(*), count(DISTINCT id) FROM customers", db="restored") == [(102, 102)]
    assert db.one("SELECT id FROM customers WHERE name = 'after restore'", db="restored") > high
    assert db.one("SELECT max(id) FROM orders", db="restored") > 300


@pytest.mark.parametrize("server", ["no worker id", "not preloaded"])
def test_convert_refuses_a_default_that_cannot_run_and_changes_nothing(cluster_factory, server):
    if server == "no worker id":
        c = cluster_factory("unset", worker_id=None)
    else:
        c = cluster_factory("plain", preload=False)
    c.q("CREATE EXTENSION idgen", "CREATE TABLE orders (id bigserial PRIMARY KEY, n int)",
        "INSERT INTO orders (n) VALUES (1), (2)")
    want = c.error("SELECT snowflake_next()")
    e = c.error("SELECT snowflake_convert_column('orders')")
    assert e.pgcode == want.pgcode == "55000", (e, want)
    assert e.diag.message_primary.startswith(
        'snowflake_convert_column: snowflake_next() cannot run on this server, so it cannot be the DEFAULT'
        ' of column "id" of public.orders: '), e
    assert e.diag.message_primary.endswith(want.diag.message_primary)
    assert e.diag.message_hint == want.diag.message_hint and e.diag.message_hint
    assert c.one("SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'orders'::regclass") \
        == "nextval('orders_id_seq'::regclass)"
    c.q("INSERT INTO orders (n) VALUES (3)")
    assert c.one("SELECT max(id) FROM orders") == 3


def test_under_js53_a_key_converts_below_two_to_the_53_and_one_past_its_first_id_is_refused(cluster_factory):
    """The conversion follows the server's layout: it compares the stored keys with the first id
    snowflake_next() makes, whatever the layout. Under js53 ids are near 2^50 (not 2^61): a
    bigserial key whose values reach them is refused, where Twitter's layout would convert it."""
    c = cluster_factory("convert_js53", worker_id=3, conf=["idgen.layout = 'js53'"])
    c.q("CREATE EXTENSION idgen",
        "CREATE TABLE small (id serial PRIMARY KEY, v text)",
        "INSERT INTO small (v) SELECT 'x' FROM generate_series(1, 1000)",
        "CREATE TABLE big (id bigserial PRIMARY KEY, v text)",
        "SELECT setval('big_id_seq', 1::bigint << 58)",
        "INSERT INTO big (v) VALUES ('beyond js53, below twitter')")
    assert c.one("SELECT max(id) FROM big") < c.one("SELECT snowflake_from_timestamp(now(), 1288834974657)"), \
        "Twitter's layout would convert it"
    before = snapshot(c)
    e = c.error("SELECT snowflake_convert_column('big')")
    assert e.pgcode == "55000" and "at or above the first snowflake id" in e.diag.message_primary, e
    assert snapshot(c) == before
    c.q("SELECT snowflake_convert_column('small')")
    assert column(c, "small")[:2] == ("bigint", "snowflake_next()")
    c.q("INSERT INTO small (v) SELECT 'y' FROM generate_series(1, 1000)")
    assert c.one("SELECT count(*) FILTER (WHERE id > 1000) = 1000 AND max(id) < 2^53 AND count(DISTINCT id) = 2000"
                 " FROM small")
    assert c.one("SELECT bool_and(snowflake_worker_id(id, 'js53') = 3) FROM small WHERE id > 1000")
