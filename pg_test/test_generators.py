"""The generators under concurrent load on one preloaded server: nothing lost, nothing
duplicated, ordered per backend, and parallel workers share the generator."""


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
