"""Custom base62 alphabets: each call uses its own row's or variable's alphabet, never the first
one a call site saw (a PL/pgSQL variable, a trigger over a multi-row insert, a column of
alphabets under a generic plan), and each one is checked."""

import psycopg2
import pytest
from conftest import sqlstate_and_hint

DEFAULT = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
REVERSED = DEFAULT[::-1]
BAD = "0" * 62  # 62 bytes, every one the same
UUID = "0192d7b4-7c2e-7a3b-8f00-123456789abc"


@pytest.fixture(scope="module")
def ext(module_factory):
    c = module_factory("alphabets")
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
