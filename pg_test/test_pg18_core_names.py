"""PostgreSQL 18 has its own uuidv7() and uuid_extract_timestamp(): idgen's pg18 build does not
define them, and a database pg_upgrade'd from 15 with idgen's versions keeps working."""

import os
import subprocess

import psycopg2
import pytest
from idgen_harness import cluster

pytestmark = pytest.mark.version_specific("core_uuidv7", "pg_upgrade")

PG15_BIN = "/usr/lib/postgresql/15/bin"


def test_on_18_the_names_are_cores_and_idgen_keeps_its_own(preloaded, pg_major):
    if pg_major < 18:
        pytest.skip(f"PostgreSQL {pg_major} has no core uuidv7(): idgen defines it (pg_test/sql/uuid7.sql)")
    schemas = preloaded.q("SELECT p.proname, n.nspname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
                          " WHERE proname IN ('uuidv7', 'uuid_extract_timestamp') ORDER BY 1, 2")
    assert {s for _, s in schemas} == {"pg_catalog"}, schemas
    assert preloaded.one("SELECT count(*) FROM pg_proc WHERE proname IN ('uuid_v7', 'uuid_v7_timestamp',"
                         " 'uuid_v7_boundary')") == 4  # uuid_v7() and uuid_v7(ts) too


def test_a_database_upgraded_from_15_keeps_idgens_uuidv7_working(cluster_factory, pg_major, tmp_path):
    """pg_upgrade 15 -> 18 of a database whose DEFAULT and generated column use idgen's uuidv7() and
    uuid_extract_timestamp(): they come across as idgen's (the pg18 library still exports
    their C symbols) and keep working; unqualified calls now reach core's; and once the DEFAULT
    is re-pointed (the README's step), the database dumps and restores on 18."""
    if pg_major < 18:
        pytest.skip("an upgrade to 18 needs PostgreSQL 18")
    if not os.path.exists(os.path.join(PG15_BIN, "postgres")) or not os.path.exists(
            "/usr/share/postgresql/15/extension/idgen.control"):
        pytest.skip("needs Debian's PostgreSQL 15 with idgen installed (make test installs it)")
    libc = ["--locale=en_US.UTF-8"]  # pg_upgrade needs the same locale provider on both sides
    old = cluster_factory("old15", bin_dir=PG15_BIN, initdb_options=libc)
    old.q("CREATE EXTENSION idgen",
          "CREATE TABLE t (id uuid PRIMARY KEY DEFAULT uuidv7(), n int,"
          " made timestamptz GENERATED ALWAYS AS (uuid_extract_timestamp(id)) STORED)",
          "INSERT INTO t (n) SELECT g FROM generate_series(1, 1000) g")
    before = old.one("SELECT id::text FROM t ORDER BY id DESC LIMIT 1")
    # This machine's Debian 15.20 build stamps every column with an attribute option, pg_attver,
    # that PostgreSQL 18.6 rejects when pg_upgrade restores the schema (with or without idgen),
    # and ALTER ... RESET does not remove it: clear it in the catalog of this throwaway cluster.
    old.q("UPDATE pg_attribute SET attoptions = NULL WHERE attoptions::text LIKE '%pg_attver%'"
          " AND attrelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'public'::regnamespace)")
    old.stop()
    # and the same data checksums: 18's initdb turns them on by default, 15's did not
    new = cluster_factory("new18", start=False, initdb_options=[*libc, "--no-data-checksums"])
    done = subprocess.run([os.path.join(cluster.pg_bin(), "pg_upgrade"), "-b", PG15_BIN, "-B", cluster.pg_bin(),
                           "-d", old.data_dir, "-D", new.data_dir, "-s", new.socket_dir,
                           "-p", str(old.port), "-P", str(new.port)],
                          cwd=str(tmp_path), capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    new.start()
    # the DEFAULT still calls idgen's public.uuidv7(), by the symbol the pg18 library keeps
    assert new.one("SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 't'::regclass AND adnum = 1") \
        == "public.uuidv7()"
    new.q("INSERT INTO t (n) SELECT g FROM generate_series(1001, 2000) g")
    assert new.q("SELECT count(*), count(DISTINCT id), min(id::text) > '' FROM t") == [(2000, 2000, True)]
    assert new.one(f"SELECT count(*) FROM t WHERE n > 1000 AND id <= '{before}'") == 0
    assert new.one("SELECT bool_and(substr(id::text, 15, 1) = '7') FROM t") is True
    assert new.one("SELECT count(*) FROM t WHERE made = uuid_v7_timestamp(id)") == 2000
    # unqualified, the names are core's now
    assert new.one("SELECT pronamespace::regnamespace::text FROM pg_proc WHERE oid = 'uuidv7()'::regprocedure") \
        == "pg_catalog"
    # a dump of it does not restore on 18 until its expressions stop naming idgen's old functions
    new.q("CREATE DATABASE restored")
    dump = str(tmp_path / "before.dump")
    bin18 = cluster.pg_bin()
    subprocess.run([os.path.join(bin18, "pg_dump"), "-Fc", "-h", new.socket_dir, "-p", str(new.port),
                    "-U", "postgres", "-f", dump, "postgres"], check=True)
    failed = subprocess.run([os.path.join(bin18, "pg_restore"), "-h", new.socket_dir, "-p", str(new.port),
                             "-U", "postgres", "-d", "restored", "--exit-on-error", dump],
                            capture_output=True, text=True, check=False)
    assert failed.returncode != 0 and "public.uuidv7()" in failed.stderr, failed.stderr
    # the README's step: re-point DEFAULTs, generated columns and views at core's names (or at
    # idgen's uuid_v7() and uuid_v7_timestamp())
    new.q("ALTER TABLE t ALTER COLUMN id SET DEFAULT uuid_v7()",
          "ALTER TABLE t ALTER COLUMN made SET EXPRESSION AS (pg_catalog.uuid_extract_timestamp(id))",
          "DROP DATABASE restored", "CREATE DATABASE restored")
    subprocess.run([os.path.join(bin18, "pg_dump"), "-Fc", "-h", new.socket_dir, "-p", str(new.port),
                    "-U", "postgres", "-f", dump, "postgres"], check=True)
    subprocess.run([os.path.join(bin18, "pg_restore"), "-h", new.socket_dir, "-p", str(new.port),
                    "-U", "postgres", "-d", "restored", "--exit-on-error", dump], check=True)
    assert new.q("SELECT count(*), count(made) FROM t", db="restored") == [(2000, 2000)]
    new.q("INSERT INTO t (n) VALUES (0)", db="restored")
    try:
        new.q("SELECT public.uuidv7()", db="restored")
        raise AssertionError("a fresh 18 install defines public.uuidv7()")
    except psycopg2.errors.UndefinedFunction:
        pass
