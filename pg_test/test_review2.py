"""The second review's findings (issue 19) on the extension's side, each where a user meets it:
a custom alphabet reused from another row, timestamps at the end of PostgreSQL's range, a horizon
file typed in the wrong unit, and a conversion that committed a DEFAULT that cannot run. (The key
file is in test_review.py, the portable edition's findings in test_portable.py.)"""

import psycopg2
import pytest
from conftest import sqlstate_and_hint

DEFAULT = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
REVERSED = DEFAULT[::-1]
BAD = "0" * 62  # 62 bytes, every one the same
UUID = "0192d7b4-7c2e-7a3b-8f00-123456789abc"


@pytest.fixture(scope="module")
def ext(module_factory):
    c = module_factory("review2")
    c.q("CREATE EXTENSION idgen")
    return c


def expected(c, n=12345):
    """What each alphabet gives, each from its own statement (a literal per call site)."""
    return {a: c.q(f"SELECT base62_encode({n}, 0, '{a}'), base62_decode('7', '{a}'),"
                   f" uuid_to_base62('{UUID}', '{a}')")[0] for a in (DEFAULT, REVERSED)}


def test_a_plpgsql_variable_alphabet_is_used_for_each_call_not_the_first(ext):
    """0.2.0 kept the first alphabet a call site saw whenever the argument was "stable", and a
    PL/pgSQL variable is: the same number gave the same code under two alphabets."""
    got = ext.q(
        "CREATE OR REPLACE FUNCTION pg_temp.codes(alphabets text[]) RETURNS SETOF text LANGUAGE plpgsql AS $$"
        " DECLARE a text; BEGIN FOREACH a IN ARRAY alphabets LOOP"
        " RETURN NEXT concat_ws('|', base62_encode(12345, 0, a), base62_decode('7', a), uuid_to_base62("
        f"'{UUID}', a)); END LOOP; END $$",
        f"SELECT array_agg(c) FROM pg_temp.codes(ARRAY['{DEFAULT}', '{REVERSED}', '{DEFAULT}']) c")[0][0]
    want = expected(ext)
    assert got == ["|".join(map(str, want[a])) for a in (DEFAULT, REVERSED, DEFAULT)]
    assert want[DEFAULT][0] != want[REVERSED][0]


def test_a_later_alphabet_in_the_same_loop_is_still_checked(ext):
    e = ext.error(
        "DO $$ DECLARE a text; BEGIN FOREACH a IN ARRAY ARRAY["
        f"'{DEFAULT}', '{BAD}'] LOOP PERFORM base62_encode(1, 0, a); END LOOP; END $$")
    assert sqlstate_and_hint(e).startswith("22023: invalid base62 alphabet: '0' appears twice"), e


def test_a_trigger_encodes_each_row_of_a_multi_row_insert_with_its_own_alphabet(ext):
    rows = ext.q(
        "CREATE TEMP TABLE coded (n bigint, alphabet text, code text, back bigint)",
        "CREATE FUNCTION pg_temp.code() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        " NEW.code := base62_encode(NEW.n, 0, NEW.alphabet); NEW.back := base62_decode(NEW.code, NEW.alphabet);"
        " RETURN NEW; END $$",
        "CREATE TRIGGER code BEFORE INSERT ON coded FOR EACH ROW EXECUTE FUNCTION pg_temp.code()",
        f"INSERT INTO coded (n, alphabet) VALUES (12345, '{DEFAULT}'), (12345, '{REVERSED}'), (12345, '{DEFAULT}')",
        "SELECT alphabet, code, back FROM coded")
    want = expected(ext)
    assert rows == [(a, want[a][0], 12345) for a in (DEFAULT, REVERSED, DEFAULT)]


def test_a_column_of_alphabets_and_a_prepared_generic_plan(ext):
    rows = ext.q(f"SELECT base62_encode(12345, 0, a) FROM unnest(ARRAY['{DEFAULT}', '{REVERSED}']) a")
    want = expected(ext)
    assert [r[0] for r in rows] == [want[DEFAULT][0], want[REVERSED][0]]
    got = ext.q("SET plan_cache_mode = force_generic_plan",
                "PREPARE p(text) AS SELECT base62_encode(12345, 0, $1) || base62_encode(12345, 0, $1)",
                f"EXECUTE p('{DEFAULT}')")[0][0]
    assert got == want[DEFAULT][0] * 2
    conn = ext.connect()
    with conn.cursor() as cur:
        cur.execute("SET plan_cache_mode = force_generic_plan")
        cur.execute("PREPARE p(text) AS SELECT base62_encode(12345, 0, $1)")
        for a in (DEFAULT, REVERSED, DEFAULT):
            cur.execute("EXECUTE p(%s)", (a,))
            assert cur.fetchone()[0] == want[a][0], a
        with pytest.raises(psycopg2.Error) as bad:
            cur.execute("EXECUTE p(%s)", (BAD,))
        assert bad.value.pgcode == "22023"
    conn.close()


# ---- the end of PostgreSQL's timestamp range --------------------------------------------------

LAST = "'294276-12-31 23:59:59.999999+00'::timestamptz"


@pytest.mark.parametrize("sql, message", [
    (f"SELECT snowflake_from_timestamp({LAST})", "timestamp out of range for a snowflake id"),
    (f"SELECT snowflake_from_timestamp({LAST}, 0)", "timestamp out of range for a snowflake id"),
    (f"SELECT uuid_v7_boundary({LAST})", "uuid_v7_boundary: timestamp out of range for a UUID v7"),
    (f"SELECT uuid_v7({LAST})", "uuid_v7: timestamp out of range for a UUID v7"),
])
def test_the_last_timestamps_are_out_of_range_with_22008(ext, sql, message):
    """The Unix time of these timestamps once wrapped around i64 in this (release) build, and
    the call failed for the wrong reason or none; the debug build panicked (src/pg_tests.rs)."""
    e = ext.error(sql)
    assert (e.pgcode, e.diag.message_primary) == ("22008", message), e
    assert e.diag.message_hint


# ---- a horizon file typed in the wrong unit ---------------------------------------------------


def test_a_horizon_in_microseconds_is_refused_with_the_unit_named(cluster_factory):
    """The repair HINT asks for Unix milliseconds; a value in microseconds was accepted and stopped
    the generator for millennia (every call waited for a clock 1,000 times ahead)."""
    c = cluster_factory("micro", start=False, worker_id=3)
    with open(f"{c.data_dir}/idgen_horizon", "w") as f:
        f.write("idgen-horizon-v1 1767225600000000\n")
    c.start()
    c.q("CREATE EXTENSION idgen")
    assert "not microseconds or nanoseconds" in c.log()
    text = sqlstate_and_hint(c.error("SELECT snowflake_next()"))
    assert text.startswith("XX001: ") and "\nHINT: Stop the server and write" in text, text
    # repaired as the HINT says, in milliseconds: ids again
    c.stop()
    with open(f"{c.data_dir}/idgen_horizon", "w") as f:
        f.write("idgen-horizon-v1 1767225600000\n")
    c.start()
    assert c.one("SELECT snowflake_worker_id(snowflake_next())") == 3


# ---- snowflake_convert_column() on a server where snowflake_next() cannot run -----------------


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
