"""The portable edition (sql/portable/idgen_portable.sql) against roles that are not its
installer: no object of a caller's runs with the installer's rights in the SECURITY DEFINER
snowflake_next(); only the roles -v grant_to names may call it; no role can hold its lock, and
cancels at any instant leave none held; it refuses state objects another role made first; a
caller's search path cannot change what the deterministic functions return; and
switch_to_extension.sql refuses a generator that cannot run and lets no portable id through
while it switches."""

import random
import re
import threading
import time

import psycopg2
import pytest
from test_portable import EDITIONS, PORTABLE, SWITCH, TLE_CONF, TLE_CONF_WITH_IDGEN, install, psql, require_pg_tle

WORKER = 5


@pytest.fixture(params=EDITIONS)
def sec(request):
    """sec_psql or sec_pg_tle: each test runs against both installs (test_portable.both)."""
    return request.getfixturevalue(f"sec_{request.param}")


@pytest.fixture(scope="module")
def sec_psql(module_factory):
    return sec_server(module_factory, "psql")


@pytest.fixture(scope="module")
def sec_pg_tle(module_factory):
    return sec_server(module_factory, "pg_tle")


# a test of the psql script's -v grant_to (the pg_tle edition's grants are plain GRANTs)
PSQL_ONLY = pytest.mark.parametrize("sec", ["psql"], indirect=True)


def sec_server(module_factory, edition):
    """A server without idgen preloaded; the portable edition installed in schema keys by the
    role installer (not a superuser; with pgtle_admin for the pg_tle edition) with grant_to=app;
    intruder, an ordinary role with USAGE on keys but no grant."""
    c = module_factory(f"sec-{edition}", preload=False, worker_id=None, conf=[TLE_CONF] if edition == "pg_tle" else [])
    c.edition = edition
    c.q("CREATE ROLE installer LOGIN", "CREATE ROLE app LOGIN", "CREATE ROLE intruder LOGIN",
        "CREATE DATABASE app")
    if edition == "pg_tle":
        require_pg_tle(c)
        c.q("CREATE EXTENSION pg_tle", db="app")
        c.q("GRANT pgtle_admin TO installer")
    c.q("CREATE SCHEMA keys AUTHORIZATION installer", "GRANT USAGE ON SCHEMA keys TO app, intruder", db="app")
    install(c, f"worker_id={WORKER}", "schema=keys", "grant_to=app", db="app", user="installer")
    return c


def state_oid(c):
    return c.one("SELECT 'keys.idgen_portable_snowflake_state'::regclass::oid", db="app")


def ids(c, n, user="app", db="app"):
    return [r[0] for r in c.q(f"SELECT keys.snowflake_next() FROM generate_series(1, {n})", db=db, user=user)]


def assert_good_ids(values, above=0):
    assert values == sorted(values) and len(set(values)) == len(values), values[:5]
    assert values[0] > above
    assert all((v >> 12) & 1023 == WORKER for v in values)


# ---- item 1: nothing of the caller's runs with the installer's rights ---------------------------

# (name of the pg_temp domain, its base type): every type the body of snowflake_next() uses, by
# its SQL name and its internal one
TRAPS = [("regclass", "regclass"), ("oid", "oid"), ("int8", "int8"), ('"bigint"', "int8"), ("int4", "int4"),
         ('"integer"', "int4"), ('"int"', "int4"), ('"numeric"', "numeric"), ("text", "text"),
         ("timestamptz", "timestamptz"), ('"timestamp"', "timestamp"), ("float8", "float8"), ("bool", "bool")]


def test_every_security_definer_function_pins_a_search_path_that_ends_with_pg_temp(sec):
    """PostgreSQL searches pg_temp first when a search_path leaves it out: a function that runs
    with its owner's rights pins one that names pg_temp last. Today every name in the bodies is
    qualified as well, so the traps above find nothing to catch even without it (a planted bug,
    pg_test/mutants, showed that); this keeps the second wall standing for the next edit."""
    rows = sec.q("SELECT p.oid::regprocedure::text, array_to_string(p.proconfig, ',') FROM pg_proc p "
                 "WHERE p.prosecdef AND p.pronamespace = 'keys'::regnamespace", db="app")
    assert rows, "the portable edition has a SECURITY DEFINER function (snowflake_next)"
    for fn, config in rows:
        assert config and config.startswith("search_path=") and config.split(",")[-1].strip() == "pg_temp", \
            (fn, config)


@pytest.mark.parametrize("name,base", TRAPS, ids=[t[0].strip('"') for t in TRAPS])
def test_a_temporary_domain_of_the_caller_never_runs_as_the_installer(sec, name, base):
    before = max(ids(sec, 1))
    conn = sec.connect("app", user="app")
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE FUNCTION pg_temp.evil(v anyelement) RETURNS boolean LANGUAGE plpgsql AS"
                        " $$ BEGIN RAISE NOTICE 'evil runs as %', current_user; RETURN true; END $$")
            cur.execute(f"CREATE DOMAIN pg_temp.{name} AS pg_catalog.{base} CHECK (pg_temp.evil(VALUE))")
            # the trap is live: the caller's own use of the name runs it
            cur.execute(f"SELECT NULL::{name}")
            assert any("evil runs as app" in n for n in conn.notices), conn.notices
            del conn.notices[:]
            cur.execute("SELECT keys.snowflake_next() FROM generate_series(1, 50)")
            got = [r[0] for r in cur.fetchall()]
    finally:
        conn.close()
    assert not any("evil runs as" in n for n in conn.notices), conn.notices
    assert_good_ids(got, above=before)


def test_temporary_relations_named_like_the_state_are_not_used(sec):
    before = max(ids(sec, 1))
    conn = sec.connect("app", user="app")
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE TEMP SEQUENCE idgen_portable_snowflake_state MINVALUE 0 START 0")
            cur.execute("CREATE TEMP TABLE idgen_portable_snowflake_jump_lock ()")
            cur.execute("CREATE TEMP SEQUENCE idgen_portable_snowflake_seqlock MINVALUE 0 START 1")
            cur.execute("CREATE TEMP TABLE pg_class ()")  # a table named like a catalog, too
            cur.execute("SELECT keys.snowflake_next() FROM generate_series(1, 50)")
            got = [r[0] for r in cur.fetchall()]
            cur.execute("SELECT last_value FROM pg_temp.idgen_portable_snowflake_state")
            assert cur.fetchone()[0] == 0  # never advanced
    finally:
        conn.close()
    assert_good_ids(got, above=before)
    state = sec.one("SELECT last_value FROM keys.idgen_portable_snowflake_state", db="app", user="installer")
    assert (state >> 12) == (got[-1] >> 22) and (state & 4095) == (got[-1] & 4095)


# ---- item 1: EXECUTE only for the roles grant_to names ------------------------------------------


@PSQL_ONLY
def test_only_the_roles_grant_to_names_may_call_snowflake_next(sec):
    e = sec.error("SELECT keys.snowflake_next()", db="app", user="intruder")
    assert e.pgcode == "42501", e
    assert_good_ids(ids(sec, 3, user="app"))
    assert_good_ids(ids(sec, 3, user="installer"))
    assert sec.one("SELECT has_function_privilege('public', 'keys.snowflake_next()', 'EXECUTE')", db="app") is False
    # a role that does not exist, or an empty name: refused, nothing changed
    for bad, code in (("grant_to=app,nosuchrole", "42704"), ("grant_to=app,,intruder", "22023")):
        done = psql(sec, PORTABLE, "VERBOSITY=verbose", f"worker_id={WORKER}", "schema=keys", bad, db="app",
                    user="installer")
        assert done.returncode != 0 and f"ERROR:  {code}" in done.stderr and "HINT:" in done.stderr, done.stderr
    assert sec.error("SELECT keys.snowflake_next()", db="app", user="intruder").pgcode == "42501"
    # again without grant_to: the grants made before to named roles stay
    install(sec, f"worker_id={WORKER}", "schema=keys", db="app", user="installer")
    assert_good_ids(ids(sec, 3, user="app"))
    assert sec.error("SELECT keys.snowflake_next()", db="app", user="intruder").pgcode == "42501"
    # PUBLIC, in a schema of its own
    sec.q("CREATE SCHEMA pub AUTHORIZATION installer", "GRANT USAGE ON SCHEMA pub TO intruder", db="app")
    install(sec, "worker_id=6", "schema=pub", "grant_to= public ", db="app", user="installer")
    assert sec.one("SELECT pub.snowflake_worker_id(pub.snowflake_next())", db="app", user="intruder") == 6


# ---- item 2: the lock ---------------------------------------------------------------------------


def test_a_storm_of_cancels_leaves_no_lock_held(sec):
    """Sessions calling snowflake_next() in loops, cancelled at random instants, 300 times at
    most or for 20 s: afterwards no lock of theirs is left and another session gets an id at
    once."""
    conns = [sec.connect("app", user="app") for _ in range(3)]
    pids = [c.get_backend_pid() for c in conns]
    stop = threading.Event()
    counts = {"cancelled": 0, "done": 0, "other": []}

    def loop(conn):
        with conn.cursor() as cur:
            cur.execute("SET lock_timeout = '5s'")  # a lock left held stops the others: fail, not hang
            while not stop.is_set():
                try:
                    cur.execute("SELECT count(keys.snowflake_next()) FROM generate_series(1, %s)",
                                (random.randint(1, 3000),))
                    counts["done"] += 1
                except psycopg2.errors.QueryCanceled:
                    counts["cancelled"] += 1
                except psycopg2.Error as e:
                    counts["other"].append(e)
                    return

    threads = [threading.Thread(target=loop, args=(c,)) for c in conns]
    for t in threads:
        t.start()
    rng = random.Random(7)
    killer = sec.connect("app")
    deadline = time.monotonic() + 20
    try:
        with killer.cursor() as cur:
            for _ in range(300):
                if time.monotonic() > deadline:
                    break
                time.sleep(rng.uniform(0, 0.02))
                cur.execute("SELECT pg_cancel_backend(%s)", (rng.choice(pids),))
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        killer.close()
    assert not counts["other"], counts["other"][:3]
    assert counts["cancelled"] > 10, counts
    # every session is idle now: none holds a lock of the generator's
    held = sec.q("SELECT pid, locktype, coalesce(relation::regclass::text, ''), mode FROM pg_locks"
                 f" WHERE pid IN ({', '.join(map(str, pids))}) AND (locktype = 'advisory'"
                 " OR relation IN (to_regclass('keys.idgen_portable_snowflake_jump_lock'),"
                 " 'keys.idgen_portable_snowflake_state'::regclass,"
                 " 'keys.idgen_portable_snowflake_seqlock'::regclass))",
                 db="app")
    assert held == [], held
    started = time.monotonic()
    assert_good_ids([sec.one("SET statement_timeout = '5s'", "SELECT keys.snowflake_next()", db="app", user="app")])
    assert time.monotonic() - started < 2
    for c in conns:
        c.close()


def test_no_role_without_a_grant_can_hold_the_lock(sec):
    """intruder, in an open transaction, takes every lock it can on the generator's objects
    (the old advisory key included) and keeps them; in another session it tries the commands
    that lock before they check privileges; the writers' snowflake_next() still returns."""
    oid = state_oid(sec)
    attempts = [
        f"SELECT pg_advisory_lock(1768187749, {oid})",
        f"SELECT pg_advisory_xact_lock(1768187749, {oid})",
        f"SELECT pg_advisory_xact_lock_shared(1768187749, {oid})",
        "SELECT pg_relation_size(to_regclass('keys.idgen_portable_snowflake_jump_lock')),"
        " pg_relation_size(to_regclass('keys.idgen_portable_snowflake_state'))",
        "LOCK TABLE keys.idgen_portable_snowflake_jump_lock IN SHARE UPDATE EXCLUSIVE MODE",
        "LOCK TABLE keys.idgen_portable_snowflake_jump_lock IN ACCESS EXCLUSIVE MODE",
        "LOCK TABLE keys.idgen_portable_snowflake_jump_lock IN ACCESS SHARE MODE",
        "LOCK TABLE keys.idgen_portable_snowflake_state IN EXCLUSIVE MODE",
        "SELECT * FROM keys.idgen_portable_snowflake_jump_lock FOR UPDATE",
        "SELECT * FROM keys.idgen_portable_snowflake_state FOR UPDATE",
        "SELECT nextval('keys.idgen_portable_snowflake_state')",
        "SELECT pg_relation_size('keys.idgen_portable_snowflake_seqlock')",
        "LOCK TABLE keys.idgen_portable_snowflake_seqlock IN EXCLUSIVE MODE",
        "SELECT * FROM keys.idgen_portable_snowflake_seqlock FOR UPDATE",
        "SELECT setval('keys.idgen_portable_snowflake_seqlock', 1)",
        "ANALYZE keys.idgen_portable_snowflake_jump_lock",
    ]
    holder = sec.connect("app", user="intruder")
    holder.autocommit = False
    outcomes = []
    try:
        with holder.cursor() as cur:
            for i, sql in enumerate(attempts):
                cur.execute(f"SAVEPOINT s{i}")
                try:
                    cur.execute(sql)
                    cur.execute(f"RELEASE SAVEPOINT s{i}")
                    outcomes.append((sql, "ok"))
                except psycopg2.Error as e:
                    cur.execute(f"ROLLBACK TO SAVEPOINT s{i}")
                    outcomes.append((sql, e.pgcode))
        # commands that take a stronger lock, each tried while the holder keeps its own
        other = sec.connect("app", user="intruder")
        with other.cursor() as cur:
            cur.execute("SET statement_timeout = '3s'")
            for sql in ["COMMENT ON TABLE keys.idgen_portable_snowflake_jump_lock IS 'x'",
                        "CREATE RULE r AS ON INSERT TO keys.idgen_portable_snowflake_jump_lock DO INSTEAD NOTHING",
                        "CREATE TABLE kid () INHERITS (keys.idgen_portable_snowflake_jump_lock)",
                        "VACUUM keys.idgen_portable_snowflake_jump_lock",
                        "CLUSTER keys.idgen_portable_snowflake_jump_lock",
                        "ALTER SEQUENCE keys.idgen_portable_snowflake_state RESTART",
                        "ALTER SEQUENCE keys.idgen_portable_snowflake_seqlock RESTART"]:
                try:
                    cur.execute(sql)
                except psycopg2.Error as e:
                    assert e.pgcode != "57014", f"{sql} waited"
        other.close()
        started = time.monotonic()
        got = sec.one("SET statement_timeout = '5s'", "SELECT keys.snowflake_next()", db="app", user="app")
        assert time.monotonic() - started < 3, outcomes
        assert_good_ids([got])
        held = sec.q("SELECT locktype, coalesce(relation::regclass::text, ''), mode FROM pg_locks"
                     f" WHERE pid = {holder.get_backend_pid()} AND granted ORDER BY 1, 2, 3", db="app")
        assert ("advisory", "", "ExclusiveLock") in held, held  # it did keep what it could take
    finally:
        holder.rollback()
        holder.close()


# ---- item 3: state objects made by another role -------------------------------------------------


@pytest.mark.parametrize("made", ["CREATE SEQUENCE shared.idgen_portable_snowflake_state MINVALUE 0 START 0",
                                  "CREATE SEQUENCE shared.idgen_portable_snowflake_seqlock MINVALUE 0 START 0",
                                  "CREATE TABLE shared.idgen_portable_snowflake_jump_lock ()",
                                  "CREATE TABLE shared.idgen_portable_snowflake_lock ()"],
                         ids=["state sequence", "seqlock", "lock table", "previous lock table"])
def test_it_refuses_state_made_by_another_role(cluster_factory, made):
    c = cluster_factory("squat", preload=False, worker_id=None)
    c.q("CREATE ROLE installer LOGIN", "CREATE ROLE intruder LOGIN", "CREATE SCHEMA shared",
        "GRANT USAGE, CREATE ON SCHEMA shared TO installer, intruder")
    c.q(made, user="intruder")
    done = psql(c, PORTABLE, "VERBOSITY=verbose", "worker_id=1", "schema=shared", "grant_to=installer",
                user="installer")
    assert done.returncode != 0, done.stdout
    assert re.search(r"ERROR:  42501: idgen portable: shared\.idgen_portable_snowflake_\w+ belongs to intruder",
                     done.stderr), done.stderr
    assert "HINT:  Install as its owner" in done.stderr, done.stderr
    # nothing was installed, the intruder's object is as it was
    assert c.one("SELECT count(*) FROM pg_proc WHERE pronamespace = 'shared'::regnamespace") == 0
    name = made.split("shared.")[1].split()[0]
    assert c.q("SELECT relname, relowner::regrole::text FROM pg_class"
               " WHERE relnamespace = 'shared'::regnamespace") == [(name, "intruder")]


# ---- item 4: a caller's search path cannot change the deterministic functions --------------------

CAPTURED = [
    "keys.base62_encode(x)", "keys.base62_encode(x, 11)",
    "keys.base62_encode(x, 20, 'zyxwvutsrqponmlkjihgfedcbaZYXWVUTSRQPONMLKJIHGFEDCBA9876543210')",
    "keys.base62_decode(keys.base62_encode(x, 11))", "keys.uuid_to_base62(u)",
    "keys.base62_to_uuid(keys.uuid_to_base62(u))",
    "keys.snowflake_timestamp(x)", "keys.snowflake_timestamp(x, 0)", "keys.snowflake_worker_id(x)",
    "keys.snowflake_sequence(x)", "keys.snowflake_from_timestamp(ts)", "keys.snowflake_from_timestamp(ts, 0)",
    "keys.uuid_v7_timestamp(v)", "keys.uuid_v7_boundary(ts)", "keys.uuid_v7_timestamp(keys.uuid_v7(ts))",
    "keys.snowflake_timestamp(x, 0, 'sonyflake')", "keys.snowflake_worker_id(x, 'instagram')",
    "keys.snowflake_sequence(x, ' 40 / 12 / 11 / 10ms ')", "keys.snowflake_worker_id(x, 'sonyflake')",
    "keys.snowflake_from_timestamp(ts, 0, '40/12/11/10')",
]
EVIL = [
    # operators whose exact argument types pg_catalog lacks (found first even after pg_catalog)
    ("evil_mod", "bigint, integer", "bigint", "0", "%"), ("evil_and", "bigint, integer", "bigint", "7", "&"),
    ("evil_mul", "numeric, integer", "numeric", "1", "*"), ("evil_plus", "numeric, integer", "numeric", "1", "+"),
    # and ones it has, found first when a path puts pg_catalog after evil
    ("evil_shr", "bigint, integer", "bigint", "1", ">>"), ("evil_div", "bigint, integer", "bigint", "0", "/"),
    ("evil_cat", "text, text", "text", "'9'", "||"), ("evil_eq", "text, text", "boolean", "false", "="),
    ("evil_lt", "bigint, bigint", "boolean", "false", "<"),
]
EVIL_FUNCTIONS = [("substr", "text, integer, integer", "text", "'Z'"),
                  ("lpad", "text, integer, text", "text", "'evil'"),
                  ("replace", "text, text, text", "text", "'0'"), ("to_hex", "bigint", "text", "'1'"),
                  ("strpos", "text, text", "integer", "1"), ("length", "text", "integer", "1"),
                  ("div", "numeric, numeric", "numeric", "0"), ("round", "numeric", "numeric", "0"),
                  ("floor", "numeric", "numeric", "0"), ("isfinite", "timestamp with time zone", "boolean", "true")]


def test_a_callers_search_path_does_not_change_the_results(sec):
    sec.q("CREATE SCHEMA evil AUTHORIZATION intruder", db="app")
    statements = []
    for name, args, result, value, op in EVIL:
        statements.append(f"CREATE FUNCTION evil.{name}({args}) RETURNS {result} LANGUAGE sql IMMUTABLE"
                          f" AS $$ SELECT {value}::{result} $$")
        left, right = (a.strip() for a in args.split(","))
        statements.append(f"CREATE OPERATOR evil.{op} (LEFTARG = {left}, RIGHTARG = {right}, FUNCTION = evil.{name})")
    for name, args, result, value in EVIL_FUNCTIONS:
        statements.append(f"CREATE FUNCTION evil.{name}({args}) RETURNS {result} LANGUAGE sql IMMUTABLE"
                          f" AS $$ SELECT {value}::{result} $$")
    sec.q(*statements, db="app", user="intruder")
    inputs = ("CREATE TEMP TABLE i AS SELECT g::bigint * 7919 * 104729 * 31 AS x, gen_random_uuid() AS u,"
              " keys.uuid_v7('2026-01-01'::timestamptz + g * interval '1 ms') AS v,"
              " '2026-01-01'::timestamptz + g * interval '1.5 ms' AS ts FROM generate_series(1, 200) g")
    query = "SELECT " + ", ".join(f"array_agg({e} ORDER BY x)" for e in CAPTURED) + " FROM i"
    conn = sec.connect("app", user="intruder")
    try:
        with conn.cursor() as cur:
            cur.execute(inputs)
            cur.execute(query)
            clean = cur.fetchone()
            for path in ("evil, public", "evil, pg_catalog, public", "evil, pg_catalog, pg_temp, public"):
                cur.execute(f"SET search_path = {path}")
                # the evil objects are live under this path
                cur.execute("SELECT 5::bigint % 3, substr('abc', 1, 1)")
                assert cur.fetchone() == (0, "a" if path == "evil, public" else "Z")
                cur.execute(query)
                captured = cur.fetchone()
                differ = [e for e, a, b in zip(CAPTURED, clean, captured, strict=True) if a != b]
                assert not differ, (path, differ)
                cur.execute("RESET search_path")
            # and rows inserted under the evil path get the clean values in an expression index
            cur.execute("CREATE TEMP TABLE t (x bigint)")
            cur.execute("CREATE INDEX ON pg_temp.t (keys.base62_encode(x))")
            cur.execute("SET search_path = evil, public")
            cur.execute("INSERT INTO pg_temp.t SELECT x FROM pg_temp.i")
            cur.execute("RESET search_path")
            cur.execute("SET enable_seqscan = off")
            cur.execute("SELECT count(*) FROM t"
                        " WHERE keys.base62_encode(x) = keys.base62_encode(7919::bigint * 104729 * 31)")
            assert cur.fetchone()[0] == 1
    finally:
        conn.close()


# ---- item 5: the switch -------------------------------------------------------------------------


def test_the_switch_refuses_when_the_extensions_generator_cannot_run(cluster_factory):
    c = cluster_factory("switch-unset", worker_id=None)  # preloaded, idgen.worker_id not set
    c.q("CREATE DATABASE app")
    install(c, "worker_id=3", db="app")
    c.q("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_next())",
        "INSERT INTO orders DEFAULT VALUES", db="app")
    expected = c.error("CREATE EXTENSION idgen", "SELECT snowflake_next()", db="postgres")
    done = psql(c, SWITCH, "VERBOSITY=verbose", db="app")
    assert done.returncode != 0, done.stderr
    assert f"ERROR:  {expected.pgcode}: the extension's snowflake_next() cannot run" in done.stderr, done.stderr
    assert "HINT:" in done.stderr and "Nothing was changed" in done.stderr, done.stderr
    assert c.one("SELECT count(*) FROM pg_extension WHERE extname = 'idgen'", db="app") == 0
    assert c.one("SELECT to_regnamespace('idgen_portable_retired') IS NULL", db="app")
    c.q("INSERT INTO orders DEFAULT VALUES", db="app")
    assert c.one("SELECT count(*) FROM orders", db="app") == 2


@pytest.mark.parametrize("edition", EDITIONS)
def test_no_portable_id_is_issued_while_the_switch_runs(cluster_factory, edition):
    """Clients call snowflake_next() in loops while the switch runs, the extension with the
    portable edition's worker id: every id is unique, and the extension's first is greater than
    every portable one (the retired state sequence holds the last one issued). From the psql
    edition and from the pg_tle one, which is dropped."""
    c = cluster_factory("switch-race", worker_id=3, conf=[TLE_CONF_WITH_IDGEN] if edition == "pg_tle" else [])
    c.edition = edition
    c.q("CREATE DATABASE app")
    install(c, "worker_id=3", db="app")
    # an index keeps the retired schema, and in it the portable edition's state
    c.q("CREATE TABLE keep (id bigint)", "CREATE INDEX ON keep (snowflake_worker_id(id))", db="app")
    stop = threading.Event()
    got = []  # (client, started, id)
    errors = []

    def client(n):
        conn = c.connect("app")
        with conn.cursor() as cur:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    cur.execute("SELECT snowflake_next() FROM generate_series(1, 20)")
                    got.extend((n, started, r[0]) for r in cur.fetchall())
                except psycopg2.Error as e:
                    errors.append(e)
        conn.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    time.sleep(1)
    done = psql(c, SWITCH, db="app")
    switched = time.monotonic()
    time.sleep(1)
    stop.set()
    for t in threads:
        t.join(60)
    assert done.returncode == 0, done.stderr
    values = [g[2] for g in got]
    assert len(values) == len(set(values)), "an id was issued twice"
    last_portable = c.one("SELECT ((last_value >> 12) << 22) | (3 << 12) | (last_value & 4095)"
                          " FROM idgen_portable_retired.idgen_portable_snowflake_state", db="app")
    after = [g[2] for g in got if g[1] > switched]
    assert after and min(after) > last_portable
    first = re.search(r"its first id is (\d+)", done.stderr)
    if first:  # the switch's own call of the extension's generator
        assert int(first.group(1)) > last_portable
        assert all(v <= last_portable or v >= int(first.group(1)) for v in values)
    before = [g[2] for g in got if g[2] <= last_portable]
    assert before, "no portable id was issued"
    # each client's ids increase: its portable ones, then the extension's
    for n in range(4):
        mine = [g[2] for g in got if g[0] == n]
        assert mine == sorted(mine), n
    # the errors are the callers that waited for the lock during the switch: refused it after
    assert all(e.pgcode == "42P01" for e in errors), errors[:3]
    assert c.one("SELECT count(*) FROM pg_extension WHERE extname = 'idgen_portable'", db="app") == 0
