"""The generators under concurrent load on one preloaded server: nothing lost, nothing
duplicated, ordered per backend, and parallel workers share the generator."""


def test_a_million_snowflake_ids_from_four_backends(preloaded, tmp_path):
    c = preloaded
    c.q("CREATE TABLE ids (n bigint, id bigint PRIMARY KEY, pid int)", "CREATE SEQUENCE ids_n")
    script = tmp_path / "insert_ids.sql"
    script.write_text("INSERT INTO ids SELECT nextval('ids_n'), snowflake_next(), pg_backend_pid() "
                      "FROM generate_series(1, 1000);\n")
    out = c.pgbench("-n", "-c", "4", "-j", "2", "-t", "250", "-f", str(script))
    assert "number of failed transactions: 0" in out
    # none lost, none duplicated, all from worker 1, from 4 backends
    assert c.q("SELECT count(*), count(DISTINCT id), count(DISTINCT pid), min(snowflake_worker_id(id)),"
               " max(snowflake_worker_id(id)) FROM ids") == [(1_000_000, 1_000_000, 4, 1, 1)]
    # strictly increasing within each backend
    assert c.one("SELECT count(*) FROM (SELECT id, lag(id) OVER (PARTITION BY pid ORDER BY n) AS prev"
                 " FROM ids) t WHERE id <= prev") == 0
    # concurrent backends racing for one millisecond are not taken for clock steps back
    assert c.one("SELECT clock_regressions FROM idgen_stats()") == 0


def test_uuid_v7_from_four_backends(preloaded, tmp_path):
    c = preloaded
    c.q("CREATE TABLE uuid_rows (n bigint, u uuid PRIMARY KEY, pid int)", "CREATE SEQUENCE uuid_rows_n")
    script = tmp_path / "insert_uuids.sql"
    script.write_text("INSERT INTO uuid_rows SELECT nextval('uuid_rows_n'), uuid_v7(), pg_backend_pid() "
                      "FROM generate_series(1, 1000);\n")
    c.pgbench("-n", "-c", "4", "-j", "2", "-t", "100", "-f", str(script))
    assert c.q("SELECT count(*), count(DISTINCT u), (SELECT count(*) FROM (SELECT u, lag(u) OVER "
               "(PARTITION BY pid ORDER BY n) AS prev FROM uuid_rows) t WHERE u <= prev) FROM uuid_rows") \
        == [(400_000, 400_000, 0)]


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
