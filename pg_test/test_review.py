"""The review's findings (issue 7), each checked where a user would meet it."""

import time

import psycopg2
import pytest
from conftest import sqlstate_and_hint

KEY = "correct horse battery staple"
# Codes made by idgen 0.1.0 under KEY (pg_test/expected/base62.out): they must keep decoding.
CODES_0_1_0 = {1: "6IzK9jCkdg2", 2: "1A79K7nnAk1", 3: "9JpQw5aqrvC"}


def set_key_and_wait(c, key_sql_literal, db="postgres"):
    """ALTER SYSTEM, reload, and wait until new sessions see it."""
    c.q(f"ALTER SYSTEM SET idgen.base62_key = {key_sql_literal}", "SELECT pg_reload_conf()")
    want = c.one(f"SELECT encode(convert_to({key_sql_literal}, 'UTF8'), 'hex')")
    for _ in range(100):
        if c.one("SELECT encode(convert_to(current_setting('idgen.base62_key'), 'UTF8'), 'hex')", db=db) == want:
            return
        time.sleep(0.1)
    raise AssertionError("the reloaded key never reached new sessions")


@pytest.fixture(scope="module")
def keyed(module_factory):
    c = module_factory("keyed")
    c.q("CREATE EXTENSION idgen", "CREATE ROLE app LOGIN", "CREATE ROLE monitor LOGIN",
        "GRANT pg_monitor TO monitor")
    set_key_and_wait(c, f"'{KEY}'")
    return c


def test_codes_made_under_the_key_by_0_1_0_still_decode_and_any_role_can_use_them(keyed):
    for n, code in CODES_0_1_0.items():
        assert keyed.one(f"SELECT base62_encode_keyed({n})", user="app") == code
        assert keyed.one(f"SELECT base62_decode_keyed('{code}')", user="app") == n


def test_the_key_can_only_live_in_the_server_configuration(keyed):
    """Per-database, per-role and per-function settings are stored in catalogs every role can
    read (pg_db_role_setting, pg_roles.rolconfig, pg_proc.proconfig): each is refused."""
    for sql in ["ALTER DATABASE postgres SET idgen.base62_key = 'leaked'",
                "ALTER ROLE app SET idgen.base62_key = 'leaked'",
                "ALTER ROLE ALL SET idgen.base62_key = 'leaked'",
                "CREATE FUNCTION f() RETURNS int LANGUAGE sql SET idgen.base62_key = 'leaked' AS 'SELECT 1'",
                "SET idgen.base62_key = 'leaked'",
                "SELECT set_config('idgen.base62_key', 'leaked', false)"]:
        e = keyed.error(sql)
        assert e.pgcode == "55P02", (sql, e)
    assert keyed.one("SELECT encode(convert_to(current_setting('idgen.base62_key'), 'UTF8'), 'hex')") \
        == KEY.encode().hex()


@pytest.mark.parametrize("route", [
    "SELECT array_to_string(setconfig, ',') FROM pg_db_role_setting",
    "SELECT array_to_string(rolconfig, ',') FROM pg_roles",
    "SELECT array_to_string(proconfig, ',') FROM pg_proc",
    "SELECT string_agg(name || '=' || setting, ',') FROM pg_settings",
    "SHOW idgen.base62_key",
    "SELECT current_setting('idgen.base62_key')",
    "SELECT current_setting('idgen.base62_key', true)",
    "SHOW ALL",
    "SELECT * FROM pg_file_settings",
    "SELECT pg_read_file('postgresql.auto.conf')",
    "EXPLAIN (VERBOSE) SELECT base62_encode_keyed(g) FROM generate_series(1, 3) g",
    "SELECT base62_decode_keyed('not base62!')",
    "SELECT base62_encode_keyed(-1)",
    "SELECT base62_encode_keyed(1, 1)",
])
def test_an_ordinary_role_cannot_read_the_key(keyed, route):
    try:
        result = repr(keyed.q(route, user="app"))
    except psycopg2.Error as e:
        result = f"{e.pgcode} {e} {e.diag.message_detail} {e.diag.message_hint}"
    assert KEY not in result, result
    assert "horse" not in result, result


def test_members_of_pg_read_all_settings_may_read_it_as_postgres_intends(keyed):
    keyed.q("GRANT pg_read_all_settings TO monitor")
    assert keyed.one("SHOW idgen.base62_key", user="monitor") == KEY


def test_the_server_log_carries_the_key_only_where_postgres_logs_every_reload(keyed):
    """Using the key, and failing to read it, writes it nowhere. The one line that holds it is
    the postmaster's own `parameter "idgen.base62_key" changed to "..."`, which PostgreSQL
    writes (at LOG) for every setting a reload changes; the server log is readable only by the
    OS user and by roles that may read postgresql.auto.conf itself (superusers,
    pg_read_server_files), and not by an ordinary role."""
    for route in ["SELECT base62_encode_keyed(-1)", "SELECT base62_decode_keyed('!')", "SHOW idgen.base62_key",
                  "SELECT base62_encode_keyed(7)"]:
        try:
            keyed.q(route, user="app")
        except psycopg2.Error:
            pass
    holding = [line for line in keyed.log().splitlines() if KEY in line]
    assert holding and all('parameter "idgen.base62_key" changed to' in line for line in holding), holding
    for route in ["SELECT pg_ls_logdir()", "SELECT pg_read_file(pg_current_logfile())",
                  "SELECT pg_read_file('log/postgresql.log')"]:
        assert keyed.error(route, user="app").pgcode == "42501", route


def test_keys_are_hashed_as_bytes(cluster_factory):
    """In a SQL_ASCII database, keys one non-ASCII byte apart ('caf\\xe9', 'caf\\xe8') are
    different keys (0.1.0 read both as 'caf\\ufffd')."""
    c = cluster_factory("bytes")
    c.q("CREATE DATABASE raw ENCODING 'SQL_ASCII' LOCALE_PROVIDER libc LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
    c.q("CREATE EXTENSION idgen", db="raw")
    codes = []
    for last in (b"\xe9", b"\xe8"):
        with open(f"{c.data_dir}/postgresql.conf", "ab") as f:
            f.write(b"\nidgen.base62_key = 'caf" + last + b"'\n")
        c.q("SELECT pg_reload_conf()")
        want = (b"caf" + last).hex()
        for _ in range(100):
            setting = "SELECT encode(convert_to(current_setting('idgen.base62_key'), 'SQL_ASCII'), 'hex')"
            if c.one(setting, db="raw") == want:
                break
            time.sleep(0.1)
        codes.append(c.one("SELECT base62_encode_keyed(1)", db="raw"))
    assert codes[0] != codes[1], codes


def test_idgen_stats_is_for_superusers_and_pg_monitor(keyed):
    e = keyed.error("SELECT * FROM idgen_stats()", user="app")
    assert sqlstate_and_hint(e) == ("42501: permission denied for function idgen_stats\n"
                                    "HINT: A superuser can GRANT pg_monitor TO the role that needs it.")
    assert keyed.one("SELECT worker_id FROM idgen_stats()", user="monitor") == 1
    assert keyed.one("SELECT worker_id FROM idgen_stats()") == 1


@pytest.mark.parametrize("sql, file", [
    ("SELECT snowflake_worker_id(-5)", "snowflake.rs"),
    ("SELECT snowflake_timestamp(1, -1)", "snowflake.rs"),
    ("SELECT base62_decode('ab-c')", "base62.rs"),
    ("SELECT base62_encode(-1)", "base62.rs"),
    ("SELECT uuid_v7_timestamp('c232ab00-9414-11ec-b3c8-9f6bdeced846')", "uuid7.rs"),
    ("SELECT * FROM idgen_stats()", "snowflake.rs"),
])
def test_each_error_points_at_the_function_that_raised_it(keyed, sql, file):
    """Postgres keeps a LOCATION's file name only (src/sql/snowflake.rs is reported as
    snowflake.rs); 0.1.0 reported errors.rs for every error."""
    e = keyed.error(sql, user="app")
    assert e.diag.source_file == file, (sql, e.diag.source_file, e.diag.source_line)


def test_errors_from_different_places_report_different_lines(keyed):
    lines = {keyed.error(sql).diag.source_line for sql in [
        "SELECT snowflake_worker_id(-5)", "SELECT snowflake_timestamp(1, -1)",
        "SELECT snowflake_from_timestamp('infinity')"]}
    assert len(lines) == 3, lines


# random() * 0 keeps the planner from folding repeat() into a constant, which would hold a
# second copy of the gigabyte while planning.
HUGE = "repeat('a', 1000000000 + (random() * 0)::int)"


@pytest.mark.parametrize("sql", [
    f"SELECT base62_encode(1, 0, {HUGE})",
    f"SELECT base62_decode('1', {HUGE})",
    f"SELECT uuid_to_base62(gen_random_uuid(), {HUGE})",
])
def test_a_huge_alphabet_is_refused_by_its_length_without_crashing_the_server(cluster_factory, sql):
    """Each server process may map 1.8 GB: enough for the 1 GB argument, not for a Rust copy
    of it, whose failed allocation would abort the backend and make the postmaster restart every
    session (0.1.0 copied the alphabet before checking it; with that copy put back, this test
    fails)."""
    c = cluster_factory("huge", start=False)
    c.start(limit_address_space=1800 * 1024 * 1024)
    c.q("CREATE EXTENSION idgen")
    bystander = c.connect()
    assert c.one(f"SELECT length({HUGE})") == 1_000_000_000
    e = c.error(sql)
    assert sqlstate_and_hint(e).startswith("22023: invalid base62 alphabet: it has 1000000000 bytes, not 62"), e
    with bystander.cursor() as cur:  # the server did not restart under it
        cur.execute("SELECT 1")
        assert cur.fetchone() == (1,)
    bystander.close()
