"""Connecting to the server under study, with errors a person can act on. A module of
benches/run, benches/speed and benches/portable, not run on its own.

Uses the standard libpq environment (PGHOST, PGPORT, PGUSER, PGDATABASE), so the benchmarks
run against any server with idgen preloaded.
"""
import sys

import psycopg2  # Debian's python3-psycopg2: the standard PostgreSQL driver for Python


class BenchError(Exception):
    """A problem the user must fix before the benchmark can run."""


def connect(autocommit=True):
    try:
        conn = psycopg2.connect("")
    except psycopg2.OperationalError as e:
        raise BenchError(
            f"cannot reach the server: {str(e).strip()}\n"
            "Set PGHOST/PGPORT/PGUSER/PGDATABASE, or run `make run`, which starts a throwaway cluster."
        ) from e
    conn.autocommit = autocommit
    return conn


def one(cur, sql, args=None):
    cur.execute(sql, args)
    return cur.fetchone()


def require_idgen(cur):
    """idgen must be installed and preloaded (its generators keep state in shared memory)."""
    if not one(cur, "SELECT count(*) FROM pg_available_extensions WHERE name = 'idgen'")[0]:
        raise BenchError("idgen is not installed on this server: run `make run` or `cargo pgrx install`.")
    cur.execute("CREATE EXTENSION IF NOT EXISTS idgen")
    # Asked of idgen itself, so it works for any role (reading shared_preload_libraries needs
    # privileges): without preload its shared-memory functions raise SQLSTATE 55000.
    try:
        cur.execute("SELECT 1 FROM idgen_stats()")
    except psycopg2.Error as e:
        if e.pgcode == "55000":
            raise BenchError(
                "idgen is not in shared_preload_libraries on this server.\n"
                "HINT: ALTER SYSTEM SET shared_preload_libraries = 'idgen'; set idgen.worker_id; restart."
            ) from e
        raise


def server_build(cur):
    """The server's version and its random source, for every report: a build without OpenSSL
    reads /dev/urandom on every gen_random_uuid() and core uuidv7() call, which moves their
    speed (and every ratio against them) several times."""
    version = one(cur, "SELECT version()")[0].split(" on ")[0].split(",")[0]
    try:
        cur.execute("SAVEPOINT build" if not cur.connection.autocommit else "SELECT 1")
        configure = one(cur, "SELECT setting FROM pg_config WHERE name = 'CONFIGURE'")[0]
    except psycopg2.Error:  # pg_config is for superusers
        if not cur.connection.autocommit:
            cur.execute("ROLLBACK TO SAVEPOINT build")
        return f"{version} (random source unknown: reading pg_config needs a superuser)"
    if "--with-openssl" in configure or "--with-ssl=openssl" in configure:
        return f"{version}, built with OpenSSL (gen_random_uuid() and uuidv7() draw from it)"
    return (f"{version}, built without OpenSSL: gen_random_uuid() and uuidv7() read /dev/urandom on every call "
            "(several times slower than a distribution's build; ratios against them flatter idgen)")


def main_guard(main):
    """Runs main(), turning BenchError and database errors into one clear line and exit 2."""
    try:
        return main()
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except psycopg2.Error as e:
        print(f"error: {e.pgcode or ''} {str(e).strip()}", file=sys.stderr)
        return 2
