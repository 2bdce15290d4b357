"""The generators under concurrent load on one preloaded server: nothing lost, nothing
duplicated, ordered per backend, and parallel workers share the generator."""

import pytest

pytestmark = pytest.mark.version_specific("shmem")


def insert_from_four_backends(c, tmp_path, table, key_type, generator, transactions):
    """4 pgbench clients, each transaction inserting 1,000 rows keyed by `generator` into a
    primary key, with the order they were made in (n) and the backend that made them (pid)."""
    c.q(f"CREATE TABLE {table} (n bigint, id {key_type} PRIMARY KEY, pid int)", f"CREATE SEQUENCE {table}_n")
    script = tmp_path / f"insert_{table}.sql"
    script.write_text(f"INSERT INTO {table} SELECT nextval('{table}_n'), {generator}, pg_backend_pid() "
                      "FROM generate_series(1, 1000);\n")
    out = c.pgbench("-n", "-c", "4", "-j", "2", "-t", str(transactions), "-f", str(script))
    assert "number of failed transactions: 0" in out


def not_increasing_within_a_backend(c, table):
    return c.one(f"SELECT count(*) FROM (SELECT id, lag(id) OVER (PARTITION BY pid ORDER BY n) AS prev"
                 f" FROM {table}) t WHERE id <= prev")


def test_a_million_snowflake_ids_from_four_backends(preloaded, tmp_path):
    c = preloaded
    insert_from_four_backends(c, tmp_path, "ids", "bigint", "snowflake_next()", 250)
    # none lost, none duplicated, all from worker 1, from 4 backends
    assert c.q("SELECT count(*), count(DISTINCT id), count(DISTINCT pid), min(snowflake_worker_id(id)),"
               " max(snowflake_worker_id(id)) FROM ids") == [(1_000_000, 1_000_000, 4, 1, 1)]
    assert not_increasing_within_a_backend(c, "ids") == 0
    # concurrent backends racing for one millisecond are not taken for clock steps back
    assert c.one("SELECT clock_regressions FROM idgen_stats()") == 0


def test_uuid_v7_from_four_backends(preloaded, tmp_path):
    c = preloaded
    insert_from_four_backends(c, tmp_path, "uuid_rows", "uuid", "uuid_v7()", 100)
    assert c.q("SELECT count(*), count(DISTINCT id), count(DISTINCT pid) FROM uuid_rows") == [(400_000, 400_000, 4)]
    assert not_increasing_within_a_backend(c, "uuid_rows") == 0


def test_a_parallel_query_runs_snowflake_next_in_workers_without_duplicates(preloaded):
    c = preloaded
    c.q("CREATE TABLE IF NOT EXISTS big AS SELECT g FROM generate_series(1, 1000000) g", "ANALYZE big")
    forced = ["SET parallel_setup_cost = 0", "SET parallel_tuple_cost = 0",
              "SET min_parallel_table_scan_size = 0"]
    plan = c.q(*forced, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT snowflake_next() FROM big")
    launched = [line for (line,) in plan if "Workers Launched" in line]
    assert launched and launched[0].split(":")[1].strip() in ("1", "2"), plan
    assert c.q(*forced, "CREATE TEMP TABLE par AS SELECT snowflake_next() AS id FROM big",
               "SELECT count(*), count(DISTINCT id) FROM par") == [(1_000_000, 1_000_000)]


def test_uuid_v7_from_two_backends_called_in_turn(preloaded):
    """Strictly increasing across backends (shared state when preloaded), and no shared random
    stream: the 52 random bits never repeat between them (a stream inherited from the
    postmaster would repeat them one for one)."""
    this, other = preloaded.connect(), preloaded.connect()
    made = []
    try:
        with this.cursor() as a, other.cursor() as b:
            for _ in range(500):
                for name, cur in (("this", a), ("other", b)):
                    cur.execute("SELECT uuid_v7()::text")
                    made.append((name, cur.fetchone()[0]))
    finally:
        this.close()
        other.close()
    uuids = [u for _, u in made]
    assert len(uuids) == 1000 and all(x < y for x, y in zip(uuids, uuids[1:], strict=False)), "not strictly increasing"
    tails = {name: {u[-13:] for n, u in made if n == name} for name in ("this", "other")}
    assert tails["this"].isdisjoint(tails["other"])


def test_a_sequence_with_cache_1000_hands_each_session_its_own_block(preloaded):
    """Short codes from a sequence: CACHE 1000 gives a session 1,000 numbers per round trip to
    the shared counter, so a second session starts at 1001, and codes have gaps, never
    duplicates."""
    c = preloaded
    c.q("CREATE SEQUENCE short_codes CACHE 1000")
    first = c.connect()
    try:
        with first.cursor() as cur:
            cur.execute("SELECT base62_encode(nextval('short_codes'), 6), base62_encode(nextval('short_codes'), 6)")
            assert cur.fetchone() == ("000001", "000002")
            assert c.one("SELECT nextval('short_codes')") == 1001  # another session
            cur.execute("SELECT nextval('short_codes')")
            assert cur.fetchone() == (3,)
    finally:
        first.close()
