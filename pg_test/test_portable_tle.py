"""The portable edition as a pg_tle extension (benches/idgen_harness/tle.py, sql/portable/pg_tle.sql):
made from the psql edition's own source; installed, configured, updated, dumped and restored by a
role with pgtle_admin and no superuser; its settings changed by no one else. (The parity suite and
the generator's tests run against this install too: test_portable.py's `both` and `bare`.)"""

import os
import subprocess
import threading

import psycopg2
import pytest
from idgen_harness import tle
from test_portable import TLE_CONF, install, psql, require_pg_tle, tle_files

VERSION = tle.version()


def create_database(c, name):
    """A database with pg_tle (made by the superuser: CREATE EXTENSION pg_tle needs one), a
    schema keys that admin owns, and idgen_portable stored in it by admin (pg_tle keeps an
    extension's files in the database), not yet created."""
    c.q(f"CREATE DATABASE {name} OWNER admin")
    c.q("CREATE EXTENSION pg_tle", "CREATE SCHEMA keys AUTHORIZATION admin", db=name)
    stored = psql(c, c.files[2], db=name, user="admin")
    assert stored.returncode == 0, stored.stderr


@pytest.fixture(scope="module")
def tle_server(module_factory, tmp_path_factory):
    """A server with pg_tle preloaded and no idgen; admin (pgtle_admin, no superuser) has stored
    and created idgen_portable in schema keys of database app; app may only call it."""
    c = module_factory("tle", preload=False, worker_id=None, conf=[TLE_CONF], fake_clock=True)
    require_pg_tle(c)
    c.files = tle_files(tmp_path_factory.mktemp("tle-package"))
    c.q("CREATE ROLE admin LOGIN", "CREATE ROLE app LOGIN")
    c.q("CREATE EXTENSION pg_tle")  # makes the role pgtle_admin
    c.q("GRANT pgtle_admin TO admin")
    create_database(c, "app")
    c.q("GRANT USAGE ON SCHEMA keys TO app", db="app")
    c.q("CREATE EXTENSION idgen_portable SCHEMA keys", db="app", user="admin")
    return c


def test_the_script_is_the_psql_edition_without_its_psql_only_regions():
    with open(tle.PORTABLE) as f:
        source = f.read()
    script = tle.script()
    assert "\n\\" not in script and "BEGIN;\n" not in script and "COMMIT;" not in script
    # every line of the shared part is the psql edition's, in its order
    shared = tle.without_psql_only(source)
    assert shared in script and len(shared) > 0.9 * len(source)
    with open(tle.TLE_PART) as f:
        assert script.endswith(f.read())
    for broken in (source.replace(tle.END, "-- (closed no more)", 1), "\\set x 1\n" + source):
        with pytest.raises(ValueError):
            tle.without_psql_only(broken)


def test_created_by_a_role_without_superuser_and_configured_by_its_owner_alone(tle_server):
    c = tle_server
    assert c.one("SELECT rolsuper FROM pg_roles WHERE rolname = 'admin'") is False
    assert c.one("SELECT extversion FROM pg_extension WHERE extname = 'idgen_portable'", db="app") == VERSION
    assert c.one("SELECT extowner::regrole::text FROM pg_extension WHERE extname = 'idgen_portable'",
                 db="app") == "admin"
    # unconfigured: 55000, and the HINT says how
    e = c.error("SELECT keys.snowflake_next()", db="app", user="admin")
    assert e.pgcode == "55000" and "keys.idgen_portable_configure(worker_id =>" in e.diag.message_hint, e
    # nobody else may call it, configure it or write its table
    assert c.error("SELECT keys.idgen_portable_configure(worker_id => 3)", db="app", user="app").pgcode == "42501"
    assert c.error("INSERT INTO keys.idgen_portable_config (worker_id) VALUES (3)", db="app",
                   user="app").pgcode == "42501"
    row = c.q("SELECT * FROM keys.idgen_portable_configure(worker_id => 5, layout => ' Instagram ')", db="app",
              user="admin")
    assert row == [(True, 5, 1288834974657, "instagram", 1000)]
    assert c.error("SELECT keys.snowflake_next()", db="app", user="app").pgcode == "42501"  # not yet granted
    c.q("GRANT EXECUTE ON FUNCTION keys.snowflake_next() TO app", db="app", user="admin")
    first = c.one("SELECT keys.snowflake_next()", db="app", user="app")
    # a role allowed to write the table still cannot change the settings: the trigger's call that
    # writes snowflake_next() is the owner's alone
    c.q("GRANT SELECT, UPDATE ON keys.idgen_portable_config TO app", db="app", user="admin")
    assert c.error("UPDATE keys.idgen_portable_config SET worker_id = 6", db="app", user="app").pgcode == "42501"
    c.q("REVOKE ALL ON keys.idgen_portable_config FROM app", db="app", user="admin")
    assert c.one("SELECT keys.snowflake_worker_id(keys.snowflake_next(), 'instagram')", db="app", user="app") == 5
    assert c.one(f"SELECT keys.snowflake_worker_id({first}, 'instagram')", db="app") == 5
    # no session, role or database setting changes what is written into snowflake_next()
    c.q("ALTER DATABASE app SET idgen_portable.worker_id = '9'", "ALTER ROLE app SET idgen_portable.layout = 'js53'")
    assert c.one("SET idgen_portable.worker_id = '11'",
                 "SELECT keys.snowflake_worker_id(keys.snowflake_next(), 'instagram')", db="app", user="app") == 5
    c.q("ALTER DATABASE app RESET ALL", "ALTER ROLE app RESET ALL")
    # bad settings: refused with their SQLSTATE and HINT, nothing changed
    for call, code, hint in [("worker_id => 8192", "22023", "worker_id => <0-8191> to keys.idgen_portable_configure()"),
                             ("max_clock_wait => -1", "22023", "max_clock_wait => <ms, 0 to 99999999> to keys."),
                             ("epoch => -5", "22023", "epoch => <Unix ms between 0 and 2147483647000> to keys."),
                             ("layout => 'banana'", "22023", ""),
                             ("layout => 'twitter'", "55000", "Keep layout instagram")]:
        e = c.error(f"SELECT keys.idgen_portable_configure({call})", db="app", user="admin")
        assert e.pgcode == code and hint in (e.diag.message_hint or ""), (call, e, e.diag.message_hint)
    assert c.q("SELECT * FROM keys.idgen_portable_config", db="app") == [(True, 5, 1288834974657, "instagram", 1000)]
    assert c.error("DELETE FROM keys.idgen_portable_config", db="app", user="admin").pgcode == "55000"
    assert c.error("TRUNCATE keys.idgen_portable_config", db="app", user="admin").pgcode == "55000"
    assert c.one("SELECT keys.snowflake_next()", db="app", user="app") > first


def ids_of(c, db, n, user="app"):
    return [r[0] for r in c.q(f"SELECT keys.snowflake_next() FROM generate_series(1, {n})", db=db, user=user)]


def test_alter_extension_update_with_writers_running_keeps_the_state_and_every_id_above_the_old(tle_server):
    """The script is its own update script: the path from this version to a next one made of
    the same source (what a release's update path is), run with ALTER EXTENSION ... UPDATE while
    two writers call snowflake_next(): no id twice, every id after the update above every id
    before it, the settings and the grants kept."""
    c = tle_server
    create_database(c, "upd")
    c.q("CREATE EXTENSION idgen_portable SCHEMA keys",
        "CREATE TABLE keys.t (id bigint PRIMARY KEY DEFAULT keys.snowflake_next(), phase int)", db="upd", user="admin")
    c.q("SELECT keys.idgen_portable_configure(worker_id => 12, layout => 'js53', max_clock_wait => 2500)",
        "GRANT EXECUTE ON FUNCTION keys.snowflake_next() TO app", "GRANT USAGE ON SCHEMA keys TO app",
        "GRANT INSERT ON keys.t TO app", db="upd", user="admin")
    before = ids_of(c, "upd", 2000)
    nxt = VERSION + "-next"
    c.q(f"SELECT pgtle.install_update_path('idgen_portable', '{VERSION}', '{nxt}', $_x$" + tle.script() + "$_x$)",
        db="upd", user="admin")
    def update():
        c.q(f"ALTER EXTENSION idgen_portable UPDATE TO '{nxt}'", db="upd", user="admin")
        c.q("INSERT INTO keys.t (phase) SELECT 2 FROM generate_series(1, 500)", db="upd", user="app")

    assert writers_during(c, "upd", update) == []
    assert c.one("SELECT extversion FROM pg_extension WHERE extname = 'idgen_portable'", db="upd") == nxt
    assert c.q("SELECT worker_id, layout, max_clock_wait FROM keys.idgen_portable_config", db="upd") == [
        (12, "js53", 2500)]
    after = ids_of(c, "upd", 2000)
    rows = c.one("SELECT count(*) FROM keys.t", db="upd")
    assert rows > 500 and rows == c.one("SELECT count(DISTINCT id) FROM keys.t", db="upd")
    assert c.one(f"SELECT min(id) > {max(before)} FROM keys.t", db="upd") is True
    assert min(after) > c.one("SELECT max(id) FROM keys.t", db="upd") > max(before)
    assert c.one("SELECT bool_and(keys.snowflake_worker_id(id, 'js53') = 12) FROM keys.t", db="upd") is True
    # 2,500 ms still written into the new body (a refusal names it)
    assert "max_clock_wait (2500 ms)" in c.one("SELECT prosrc FROM pg_proc WHERE proname = 'snowflake_next'", db="upd")


# what a restore by the extension's owner into a database where pg_tle was made fails to do: make
# pg_tle's own schema, and comment on pg_tle (the superuser's); nothing of idgen_portable's
EXPECTED_RESTORE_ERRORS = ['schema "pgtle" already exists', "must be owner of extension pg_tle"]


def restore_errors(stderr):
    return [line.split("ERROR:", 1)[1].strip() for line in stderr.splitlines() if "ERROR:" in line]


def test_pg_dump_and_restore_resume_above_every_stored_id(tle_server, tmp_path):
    """pg_dump as admin; restored as admin into a new database where the superuser made pg_tle:
    the stored extension, then CREATE EXTENSION (the unconfigured generator), then the settings'
    row (whose trigger writes the configured one), then the state's value; the generator goes on
    above every stored id, under the same settings and grants."""
    c = tle_server
    create_database(c, "src")
    c.q("CREATE EXTENSION idgen_portable SCHEMA keys",
        "SELECT keys.idgen_portable_configure(worker_id => 77, epoch => 1600000000000)",
        "GRANT EXECUTE ON FUNCTION keys.snowflake_next() TO app",
        "CREATE TABLE keys.orders (id bigint PRIMARY KEY DEFAULT keys.snowflake_next(), u uuid DEFAULT keys.uuid_v7())",
        "GRANT USAGE ON SCHEMA keys TO app", "GRANT INSERT, SELECT ON keys.orders TO app", db="src", user="admin")
    c.q("INSERT INTO keys.orders SELECT FROM generate_series(1, 5000)", db="src", user="app")
    high = c.one("SELECT max(id) FROM keys.orders", db="src")
    dump = tmp_path / "src.sql"
    done = subprocess.run([os.path.join(c.bin_dir, "pg_dump"), "-h", c.socket_dir, "-p", str(c.port), "-U", "admin",
                           "-d", "src", "-f", str(dump)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    text = dump.read_text()
    order = [text.index(s) for s in (f'CREATE FUNCTION pgtle."idgen_portable--{VERSION}.sql"()',
                                     'CREATE FUNCTION pgtle."idgen_portable.control"()',
                                     "CREATE EXTENSION IF NOT EXISTS idgen_portable WITH SCHEMA keys",
                                     "COPY keys.idgen_portable_config",
                                     "SELECT pg_catalog.setval('keys.idgen_portable_snowflake_state'",
                                     "GRANT ALL ON FUNCTION keys.snowflake_next() TO app")]
    assert order == sorted(order), order
    # the restore: a new database with pg_tle, the dump run as admin (the superuser's objects it
    # names, pg_tle's schema and extension, are already there: those statements fail, no other)
    c.q("CREATE DATABASE dst OWNER admin")
    c.q("CREATE EXTENSION pg_tle", db="dst")
    restored = psql(c, str(dump), "ON_ERROR_STOP=0", db="dst", user="admin")
    assert restore_errors(restored.stderr) == EXPECTED_RESTORE_ERRORS, restored.stderr
    assert c.one("SELECT count(*) FROM keys.orders", db="dst") == 5000
    assert c.q("SELECT worker_id, epoch FROM keys.idgen_portable_config", db="dst") == [(77, 1600000000000)]
    # the state comes back as dumped; with the clock half a second behind the newest id, the
    # restored generator waits for it (a fresh state would issue ids below the stored ones)
    state = "SELECT last_value FROM keys.idgen_portable_snowflake_state"
    assert c.one(state, db="dst") == c.one(state, db="src")
    c.clock.set("-0.5s")
    try:
        c.q("INSERT INTO keys.orders SELECT FROM generate_series(1, 1000)", db="dst", user="app")
    finally:
        c.clock.set("+0")
    assert c.one(f"SELECT count(*) FROM keys.orders WHERE id > {high}", db="dst") == 1000
    assert c.one("SELECT bool_and(keys.snowflake_worker_id(id) = 77) FROM keys.orders", db="dst") is True
    # decoded under the restored epoch, the newest id is from about now
    assert c.one("SELECT abs(extract(epoch FROM now() - keys.snowflake_timestamp(max(id)))) < 600 FROM keys.orders",
                 db="dst") is True



def test_pg_restore_with_the_state_before_the_settings_row_restores_another_layout(tle_server, tmp_path):
    """pg_restore does not keep the plain dump's order (with -j, or a -L list): the state's value
    may come back before the settings' row. Restored so, on purpose, a generator of Instagram's
    layout is still written again from its row (its trigger takes another layout than the
    unconfigured default's while no worker id is set, whatever the state holds) and resumes
    above every stored id."""
    c = tle_server
    create_database(c, "src2")
    c.q("CREATE EXTENSION idgen_portable SCHEMA keys",
        "SELECT keys.idgen_portable_configure(worker_id => 300, layout => 'instagram')",
        "CREATE TABLE keys.orders (id bigint PRIMARY KEY DEFAULT keys.snowflake_next())",
        "INSERT INTO keys.orders SELECT FROM generate_series(1, 3000)", db="src2", user="admin")
    high = c.one("SELECT max(id) FROM keys.orders", db="src2")
    dump, listing = tmp_path / "src2.dump", tmp_path / "src2.list"
    tool = [os.path.join(c.bin_dir, "pg_dump"), "-h", c.socket_dir, "-p", str(c.port), "-U", "admin"]
    done = subprocess.run([*tool, "-Fc", "-d", "src2", "-f", str(dump)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    restore = [os.path.join(c.bin_dir, "pg_restore"), *tool[1:]]
    items = subprocess.run([*restore, "-l", str(dump)], capture_output=True, text=True, check=True).stdout.splitlines()
    state = next(i for i, line in enumerate(items) if "SEQUENCE SET keys idgen_portable_snowflake_state" in line)
    row = next(i for i, line in enumerate(items) if "TABLE DATA keys idgen_portable_config" in line)
    assert row < state
    items.insert(row, items.pop(state))  # the state's value first
    listing.write_text("\n".join(items) + "\n")
    c.q("CREATE DATABASE dst2 OWNER admin")
    c.q("CREATE EXTENSION pg_tle", db="dst2")
    done = subprocess.run([*restore, "-L", str(listing), "-d", "dst2", str(dump)], capture_output=True, text=True)
    assert restore_errors(done.stderr) == EXPECTED_RESTORE_ERRORS, done.stderr
    assert c.q("SELECT worker_id, layout FROM keys.idgen_portable_config", db="dst2") == [(300, "instagram")]
    c.q("INSERT INTO keys.orders SELECT FROM generate_series(1, 1000)", db="dst2", user="admin")
    assert c.one(f"SELECT count(*) FROM keys.orders WHERE id > {high}", db="dst2") == 1000
    assert c.one("SELECT bool_and(keys.snowflake_worker_id(id, 'instagram') = 300) FROM keys.orders",
                 db="dst2") is True


MOVE = os.path.join(os.path.dirname(tle.PORTABLE), "move_to_pg_tle.sql")


def writers_during(c, db, action, n=2):
    """n sessions of app inserting into keys.t (phase 1) in a loop while action() runs; returns
    the errors they met."""
    stop, failures = threading.Event(), []

    def writer():
        conn = c.connect(db, user="app")
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                while not stop.is_set():
                    cur.execute("INSERT INTO keys.t (phase) SELECT 1 FROM generate_series(1, 50)")
        except psycopg2.Error as e:
            failures.append(e)
        finally:
            conn.close()

    threads = [threading.Thread(target=writer) for _ in range(n)]
    for t in threads:
        t.start()
    try:
        action()
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    return failures


def test_moving_from_the_psql_edition_with_writers_running_reissues_nothing_and_keeps_settings_and_grants(tle_server):
    """The psql edition, installed by admin with its variables and used by app, moved to the
    extension by move_to_pg_tle.sql while two writers insert: its objects become the extension's
    (the same snowflake_next(), so the table's DEFAULT is untouched), its settings the row, no id
    twice and every id after the move above every id before it; app may still call it, and
    pg_dump keeps that grant (were it recorded as the extension's own, a restore would lose it)."""
    c = tle_server
    create_database(c, "move")
    c.q("GRANT USAGE ON SCHEMA keys TO app", db="move", user="admin")
    install(c, "worker_id=21", "layout=discord", "max_clock_wait=3000", "grant_to=app", "schema=keys", db="move",
            user="admin")
    c.q("CREATE TABLE keys.t (id bigint PRIMARY KEY DEFAULT keys.snowflake_next(), phase int)",
        "GRANT INSERT ON keys.t TO app", db="move", user="admin")
    c.q("INSERT INTO keys.t (phase) SELECT 0 FROM generate_series(1, 1000)", db="move", user="app")
    high = c.one("SELECT max(id) FROM keys.t", db="move")
    fn = c.one("SELECT 'keys.snowflake_next()'::regprocedure::oid", db="move")

    def move():
        moved = psql(c, MOVE, "schema=keys", db="move", user="admin")
        assert moved.returncode == 0, moved.stderr

    assert writers_during(c, "move", move) == []
    c.q("INSERT INTO keys.t (phase) SELECT 2 FROM generate_series(1, 1000)", db="move", user="app")
    assert c.one("SELECT extversion FROM pg_extension WHERE extname = 'idgen_portable'", db="move") == VERSION
    assert c.one("SELECT 'keys.snowflake_next()'::regprocedure::oid", db="move") == fn
    assert c.one("SELECT count(*) FROM pg_depend WHERE objid = %s AND deptype = 'e'" % fn, db="move") == 1
    assert c.q("SELECT worker_id, epoch, layout, max_clock_wait FROM keys.idgen_portable_config", db="move") == [
        (21, 1288834974657, "discord", 3000)]
    assert c.one("SELECT count(*) = count(DISTINCT id) FROM keys.t", db="move") is True
    assert c.one(f"SELECT min(id) > {high} FROM keys.t WHERE phase > 0", db="move") is True
    assert c.one("SELECT bool_and(keys.snowflake_worker_id(id, 'discord') = 21) FROM keys.t", db="move") is True
    assert c.one("SELECT min(id) FROM keys.t WHERE phase = 2", db="move") > c.one(
        "SELECT max(id) FROM keys.t WHERE phase = 1", db="move")
    # the grant is app's own, not the extension's: pg_dump writes it
    assert c.one("SELECT initprivs::text FROM pg_init_privs WHERE objoid = %s" % fn, db="move") == "{admin=X/admin}"
    dump = subprocess.run([os.path.join(c.bin_dir, "pg_dump"), "-h", c.socket_dir, "-p", str(c.port), "-U", "admin",
                           "-d", "move"], capture_output=True, text=True)
    assert dump.returncode == 0 and "GRANT ALL ON FUNCTION keys.snowflake_next() TO app;" in dump.stdout


def test_an_unconfigured_psql_install_that_issued_ids_is_not_taken_in(tle_server):
    """Run again without -v worker_id, a psql install keeps its state but no longer its settings:
    taken in as it is, another layout could then be configured over ticks of its own. The move
    refuses it (55000, with the HINT to give it its worker id again) and changes nothing."""
    c = tle_server
    create_database(c, "unset")
    for variables in (["worker_id=4", "layout=js53"], ["layout=js53"]):
        install(c, *variables, "schema=keys", db="unset", user="admin")
        if "worker_id=4" in variables:
            c.q("SELECT keys.snowflake_next() FROM generate_series(1, 10)", db="unset", user="admin")
    moved = psql(c, MOVE, "VERBOSITY=verbose", "schema=keys", db="unset", user="admin")
    assert moved.returncode != 0 and "ERROR:  55000" in moved.stderr, moved.stderr
    assert "has issued ids but has no worker id now" in moved.stderr and "-v worker_id=" in moved.stderr
    assert c.one("SELECT count(*) FROM pg_extension WHERE extname = 'idgen_portable'", db="unset") == 0
    assert c.one("SELECT keys.idgen_portable_installed_layout()", db="unset") == "js53"
