"""The base62 key file (idgen.base62_key_file): named only in the server configuration, read by the
server alone and again at each reload, never shown to a role, a log line or a parallel worker
that is not the leader's; the retired setting refused; keys hashed as bytes; 0.1.0's codes kept."""

import os
import subprocess
import threading
import time

import psycopg2
import pytest
from conftest import sqlstate_and_hint

pytestmark = pytest.mark.version_specific("guc")

KEY = "correct horse battery staple"
KEYED_CODES_PAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "base62.md")


def readme_move_line():
    """docs/base62.md's one line that moves a 0.2.0 key from the setting into the key file."""
    with open(KEYED_CODES_PAGE) as f:
        found = [line.strip() for line in f if line.startswith("(umask 077; psql -XAtc")]
    assert len(found) == 1, found
    return found[0]
# Codes made by idgen 0.1.0 under KEY (pg_test/expected/base62.out): they must keep decoding.
CODES_0_1_0 = {1: "6IzK9jCkdg2", 2: "1A79K7nnAk1", 3: "9JpQw5aqrvC"}


def write_key_file(c, key: bytes, name="idgen_base62.key", mode=0o600):
    """The key file as the server's OS user writes it (this harness runs as that user)."""
    path = os.path.join(c.data_dir, name)
    with open(path, "wb") as f:
        f.write(key + b"\n")
    os.chmod(path, mode)
    return path


def keyed_code_after_reload(c, n=1, db="postgres", old=None):
    """Reloads, then waits until a new session's base62_encode_keyed(n) differs from old."""
    c.q("SELECT pg_reload_conf()")
    for _ in range(100):
        try:
            code = c.one(f"SELECT base62_encode_keyed({n})", db=db)
        except psycopg2.Error:
            code = None
        if code is not None and code != old:
            return code
        time.sleep(0.1)
    raise AssertionError(f"the reload never changed the code from {old!r}")


@pytest.fixture(scope="module")
def keyed(module_factory):
    c = module_factory("keyed")
    c.q("CREATE EXTENSION idgen", "CREATE ROLE app LOGIN", "CREATE ROLE monitor LOGIN",
        "GRANT pg_monitor TO monitor")
    write_key_file(c, KEY.encode())
    c.q("ALTER SYSTEM SET idgen.base62_key_file = 'idgen_base62.key'")
    keyed_code_after_reload(c)
    return c


def test_codes_made_under_the_key_by_0_1_0_still_decode_and_any_role_can_use_them(keyed):
    for n, code in CODES_0_1_0.items():
        assert keyed.one(f"SELECT base62_encode_keyed({n})", user="app") == code
        assert keyed.one(f"SELECT base62_decode_keyed('{code}')", user="app") == n


def test_the_key_file_can_only_be_named_in_the_server_configuration(keyed):
    """Per-database, per-role and per-function settings are stored in catalogs every role can
    read, and a session must not pick another key: each is refused."""
    for sql in ["ALTER DATABASE postgres SET idgen.base62_key_file = 'mine.key'",
                "ALTER ROLE app SET idgen.base62_key_file = 'mine.key'",
                "CREATE FUNCTION f() RETURNS int LANGUAGE sql SET idgen.base62_key_file = 'mine.key' AS 'SELECT 1'",
                "SET idgen.base62_key_file = 'mine.key'",
                "SELECT set_config('idgen.base62_key_file', 'mine.key', false)"]:
        e = keyed.error(sql)
        assert e.pgcode == "55P02", (sql, e)
    assert keyed.one("SELECT base62_encode_keyed(1)") == CODES_0_1_0[1]


ROUTES = [
    "SELECT array_to_string(setconfig, ',') FROM pg_db_role_setting",
    "SELECT array_to_string(rolconfig, ',') FROM pg_roles",
    "SELECT array_to_string(proconfig, ',') FROM pg_proc",
    "SELECT string_agg(concat_ws('|', name, setting, reset_val, boot_val, sourcefile), ',') FROM pg_settings",
    "SHOW idgen.base62_key",
    "SHOW idgen.base62_key_file",
    "SELECT current_setting('idgen.base62_key')",
    "SELECT current_setting('idgen.base62_key', true)",
    "SELECT current_setting('idgen.base62_key_file')",
    "SHOW ALL",
    "SELECT * FROM pg_file_settings",
    "SELECT pg_read_file('postgresql.auto.conf')",
    "SELECT pg_read_file('idgen_base62.key')",
    "SELECT pg_read_binary_file('idgen_base62.key')",
    "SELECT pg_read_file(pg_current_logfile())",
    "EXPLAIN (VERBOSE) SELECT base62_encode_keyed(g) FROM generate_series(1, 3) g",
    "SELECT base62_decode_keyed('not base62!')",
    "SELECT base62_encode_keyed(-1)",
    "SELECT base62_encode_keyed(1, 1)",
    "ALTER SYSTEM SET idgen.base62_key = 'x'",
]


@pytest.mark.parametrize("user", ["app", "monitor"])
@pytest.mark.parametrize("route", ROUTES)
def test_neither_an_ordinary_role_nor_a_pg_monitor_member_can_read_the_key(keyed, route, user):
    """pg_monitor includes pg_read_all_settings, which PostgreSQL lets read every setting:
    idgen 0.2.0's idgen.base62_key was readable there. The key is in no setting now."""
    try:
        result = repr(keyed.q(route, user=user))
    except psycopg2.Error as e:
        result = f"{e.pgcode} {e} {e.diag.message_detail} {e.diag.message_hint}"
    assert KEY not in result, result
    assert "horse" not in result, result


def test_a_pg_read_all_settings_member_sees_the_path_and_no_key(keyed):
    keyed.q("GRANT pg_read_all_settings TO monitor")
    try:
        assert keyed.one("SHOW idgen.base62_key_file", user="monitor") == "idgen_base62.key"
        assert keyed.one("SHOW idgen.base62_key", user="monitor") == ""
    finally:
        keyed.q("REVOKE pg_read_all_settings FROM monitor")


def test_the_file_is_read_again_at_each_reload_and_a_bad_one_keeps_the_old_key(keyed):
    try:
        other = None
        write_key_file(keyed, b"another passphrase")
        other = keyed_code_after_reload(keyed, old=CODES_0_1_0[1])
        assert other != CODES_0_1_0[1]
        # readable by the group: refused at the reload, with the reason in the log, the key in
        # use unchanged
        write_key_file(keyed, KEY.encode(), mode=0o640)
        keyed.q("SELECT pg_reload_conf()")
        time.sleep(1.5)
        assert keyed.one("SELECT base62_encode_keyed(1)") == other
        assert "readable or writable by other OS users (mode 0640)" in keyed.log()
        e = keyed.error("ALTER SYSTEM SET idgen.base62_key_file = 'idgen_base62.key'")
        assert e.pgcode == "22023" and "mode 0640" in e.diag.message_primary, e
        assert "chmod 600" in e.diag.message_hint
        e = keyed.error("ALTER SYSTEM SET idgen.base62_key_file = 'none.key'")
        assert e.pgcode == "22023" and 'idgen.base62_key_file "none.key" cannot be used' in e.diag.message_primary
        assert "umask 077" in e.diag.message_hint
    finally:
        write_key_file(keyed, KEY.encode())
        keyed_code_after_reload(keyed, old=other)
    assert keyed.one("SELECT base62_encode_keyed(1)") == CODES_0_1_0[1]


def test_parallel_workers_use_the_leaders_key(keyed):
    force = "debug_parallel_query" if keyed.one("SHOW server_version_num") >= "160000" else "force_parallel_mode"
    serial = keyed.one("SELECT string_agg(base62_encode_keyed(g), ',' ORDER BY g) FROM generate_series(1, 2000) g")
    parallel = keyed.q(f"SET {force} = on", "SET parallel_setup_cost = 0", "SET parallel_tuple_cost = 0",
                       "SET min_parallel_table_scan_size = 0",
                       "CREATE TEMP TABLE IF NOT EXISTS g AS SELECT generate_series(1, 2000) AS g",
                       "SELECT string_agg(base62_encode_keyed(g), ',' ORDER BY g) FROM g")[0][0]
    assert parallel == serial


def test_the_log_never_carries_the_key(keyed):
    """Using the key, failing to read it, refusing the retired setting and reloading write it
    nowhere (0.2.0's setting put it in the postmaster's 'parameter changed to' line)."""
    # each route goes where it should (the key used, or refused before or after reading it), so
    # that the log below is read after every route ran
    assert keyed.one("SELECT base62_encode_keyed(1)") == CODES_0_1_0[1], "the key file's key was used"
    outcomes = {}
    for route in ["SELECT base62_encode_keyed(-1)", "SELECT base62_decode_keyed('!')",
                  "ALTER SYSTEM SET idgen.base62_key = 'x'"]:
        outcomes[route] = keyed.error(route).pgcode
    outcomes["SHOW idgen.base62_key"] = keyed.one("SHOW idgen.base62_key")
    assert outcomes == {"SELECT base62_encode_keyed(-1)": "22003", "SELECT base62_decode_keyed('!')": "22P02",
                        "ALTER SYSTEM SET idgen.base62_key = 'x'": "22023", "SHOW idgen.base62_key": ""}, outcomes
    keyed.q("SELECT pg_reload_conf()")
    time.sleep(1)
    assert KEY not in keyed.log()
    for route in ["SELECT pg_ls_logdir()", "SELECT pg_read_file(pg_current_logfile())",
                  "SELECT pg_read_file('log/postgresql.log')"]:
        assert keyed.error(route, user="app").pgcode == "42501", route


def test_the_retired_setting_refuses_its_value_without_repeating_it(keyed):
    """(A value typed into a statement that fails is in the log's STATEMENT line, as for any
    failing statement: so this one is not the module's key.)"""
    e = keyed.error("ALTER SYSTEM SET idgen.base62_key = 'tr0ub4dor'")
    assert e.pgcode == "22023", e
    assert e.diag.message_primary.startswith("idgen.base62_key is no longer read"), e
    assert "idgen.base62_key_file" in e.diag.message_hint and "pg_file_settings" in e.diag.message_hint
    # the HINT's move is docs/base62.md's line, word for word (the one test_..._in_one_step runs)
    assert e.diag.message_hint.endswith(readme_move_line()), e.diag.message_hint
    assert "tr0ub4dor" not in f"{e} {e.diag.message_detail} {e.diag.message_hint}"


def test_a_key_left_in_the_setting_moves_to_the_file_in_one_step_with_the_same_codes(cluster_factory):
    """A server upgraded from 0.2.0 with the key in postgresql.auto.conf: it starts, warns without
    the key, keyed functions refuse with the way out, and docs/base62.md's one line (run here as
    the server's OS user, as the page says) moves it: the same codes as before."""
    c = cluster_factory("moved", start=False)
    with open(os.path.join(c.data_dir, "postgresql.auto.conf"), "a") as f:
        f.write(f"idgen.base62_key = '{KEY}'\n")
    c.start()
    c.q("CREATE EXTENSION idgen")
    assert "idgen.base62_key is no longer read" in c.log()
    assert KEY not in c.log()
    e = c.error("SELECT base62_encode_keyed(1)")
    assert e.pgcode == "55000" and "idgen.base62_key_file is not set" in e.diag.message_primary, e
    assert 'docs/base62.md in idgen\'s source, "Keyed codes"' in e.diag.message_hint
    env = {**os.environ, **c.env(), "PGDATA": c.data_dir, "PATH": f"{c.bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", readme_move_line()], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert oct(os.stat(os.path.join(c.data_dir, "idgen_base62.key")).st_mode & 0o777) == "0o600"
    assert keyed_code_after_reload(c) == CODES_0_1_0[1]
    assert c.one("SELECT count(*) FROM pg_file_settings WHERE name = 'idgen.base62_key'") == 0


def test_keys_are_hashed_as_bytes(cluster_factory):
    """In a SQL_ASCII database, keys one non-ASCII byte apart ('caf\\xe9', 'caf\\xe8') are
    different keys (0.1.0 read both as 'caf\\ufffd')."""
    c = cluster_factory("bytes")
    c.q("CREATE DATABASE raw ENCODING 'SQL_ASCII' LOCALE_PROVIDER libc LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
    c.q("CREATE EXTENSION idgen", db="raw")
    codes = []
    for last in (b"\xe9", b"\xe8"):
        write_key_file(c, b"caf" + last, name="bytes.key")
        if not codes:
            c.q("ALTER SYSTEM SET idgen.base62_key_file = 'bytes.key'")
        codes.append(keyed_code_after_reload(c, db="raw", old=codes[-1] if codes else None))
    assert codes[0] != codes[1], codes


def within(seconds, what, call):
    """call()'s result, on another thread; fails if it has not returned within `seconds` (a
    backend stuck in open() ignores cancels: the cluster's immediate stop ends it afterwards)."""
    done = {}
    t = threading.Thread(target=lambda: done.setdefault("result", call()), daemon=True)
    t.start()
    t.join(seconds)
    assert "result" in done, f"{what} did not return within {seconds} s"
    return done["result"]


SPECIAL = {  # name in the data directory -> how to make it, and what the refusal calls it
    "key-fifo": (lambda p: os.mkfifo(p, 0o600), "a FIFO"),
    "key-device": (lambda p: os.symlink("/dev/zero", p), "a character device"),
    "key-folder": (lambda p: os.mkdir(p, 0o700), "a folder"),
    "key-link-to-fifo": (lambda p: (os.mkfifo(p + ".target", 0o600), os.symlink(p + ".target", p)), "a FIFO"),
}


@pytest.mark.parametrize("name", list(SPECIAL))
def test_a_key_file_path_that_is_no_regular_file_is_refused_and_never_blocks(cluster_factory, name):
    """Opening a FIFO waits for a writer, deaf to cancels: a FIFO named by the setting once hung
    ALTER SYSTEM's backend and, in postgresql.conf, the postmaster at every reload (no new
    connection). Refused by its type, at ALTER SYSTEM, at a reload and at start-up, with the
    server answering throughout."""
    make, kind = SPECIAL[name]
    c = cluster_factory("special")
    c.q("CREATE EXTENSION idgen")
    make(os.path.join(c.data_dir, name))
    e = within(10, "ALTER SYSTEM", lambda: c.error(f"ALTER SYSTEM SET idgen.base62_key_file = '{name}'"))
    assert sqlstate_and_hint(e).startswith(
        f'22023: idgen.base62_key_file "{name}" cannot be used: it is {kind}, not a regular file\nHINT: Name a '
        "regular file"), sqlstate_and_hint(e)

    # the configuration file names it, and the server reloads: the postmaster reads it too
    c.append_conf(f"idgen.base62_key_file = '{name}'")
    c.reload()
    for _ in range(5):  # new sessions, each within seconds, over the next few seconds
        assert within(5, "a new connection after the reload", lambda: c.one("SELECT 1")) == 1
        time.sleep(0.5)
    assert within(5, "a keyed code", lambda: c.error("SELECT base62_encode_keyed(1)")).pgcode == "55000"
    # and a restart: the server starts, says why there is no key, and answers
    c.stop()
    within(30, "a restart", c.start)
    assert within(5, "a query after the restart", lambda: c.one("SELECT 1")) == 1
    assert f"it is {kind}, not a regular file" in c.log()
