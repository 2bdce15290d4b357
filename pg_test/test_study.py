"""The fragmentation study (benches/run) end to end at a tiny scale, and its errors."""

import os
import subprocess

import pytest
from conftest import ROOT
from idgen_harness import cluster, report

pytestmark = pytest.mark.version_specific("pg_stat_io")
# The tests marked with it run on 15 and 18 only (docs/testing.md).
MEASUREMENT = "a measurement; the tiny study reads every version's I/O counters"
# The B-tree's shape under late keys is the same on every major: these measure it on 15 alone.
DEFAULT_ONLY = pytest.mark.skipif(cluster.server_major() != 15,
                                  reason="a B-tree shape measurement, the same on every version: on 15")

BENCH = os.path.join(ROOT, "benches", "run")
STRATEGIES = ["bigserial", "uuid_v4", "uuid_v7", "snowflake", "snowflake_instagram", "snowflake_js53", "base62_padded",
              "base62_text"]


def skip_without_contrib(c):
    """The study reads splits with pg_walinspect and density with pgstattuple (contrib)."""
    missing = [e for e in ("pg_walinspect", "pgstattuple")
               if not c.one(f"SELECT count(*) FROM pg_available_extensions WHERE name = '{e}'")]
    if missing:
        pytest.skip(f"this server build has no contrib modules {', '.join(missing)} (the PostgreSQL 16 wheel ships "
                    "core only): the study reads splits with "
                    "pg_walinspect and density with pgstattuple")


def run_study(c, *args, user="postgres", env=None):
    e = {**os.environ, **c.env(db="postgres", user=user), **(env or {})}
    done = subprocess.run([BENCH, *args], capture_output=True, text=True, env=e)
    return done.returncode, done.stdout + done.stderr


@pytest.fixture(scope="module")
def study_server(module_factory):
    # As make run's cluster (benches/main): no timed checkpoint inside a run. The study places its
    # own CHECKPOINTs at equal points of every strategy's run; one of the server's every 5 minutes,
    # landing in one strategy's run only, gives it full-page images the others do not get (CI saw
    # bigserial log as many as uuid_v4 on 16, with this module's server up for minutes beside
    # other tests).
    return module_factory("study", conf=["checkpoint_timeout = '1h'", "max_wal_size = '8GB'"])


def test_a_tiny_study_writes_physically_sane_figures(study_server, tmp_path, pg_major):
    skip_without_contrib(study_server)
    # PostgreSQL 18 adds core's uuidv7() as a ninth strategy.
    strategies = STRATEGIES + (["uuidv7_core"] if pg_major >= 18 else [])
    out = tmp_path / "study"
    rc, log = run_study(study_server, "--rows", "30000", "--clients", "1,2", "--checkpoints", "1", "--layouts",
                        "--out", str(out))
    assert rc == 0, log
    for name in ("results.csv", "report.md", "study.png"):
        assert (out / name).stat().st_size > 0
    rows = report.read_csv(str(out / "results.csv"))
    assert len(rows) == 2 * len(strategies)
    # every strategy, splits = leaf pages - 1, uuid_v4 sparser, larger, more full-page images
    assert report.sanity(rows, strategies, [1, 2]) == []
    # An index far inside shared_buffers reads nothing: the pages it adds are counted apart, on 15
    # too (whose pg_statio counts each new page as a block read: 10 per 1,000 rows here before
    # they were taken out). 15 counts the study table's own blocks; 16+'s pg_stat_io counts every
    # relation of the server, so there a run also reads the catalog pages its fresh connections
    # bring in: a few dozen blocks whatever the rows (17 read 35 here, 1.2 per 1,000 rows at this
    # size, 0.04 at 1M), bounded in blocks, not per row. 16+ evict nothing either; 15's "evicted"
    # is buffers_alloc, which also counts those catalog pages (an upper bound).
    # Under any layout a server's snowflake ids only grow: the index fills its leaves as far as
    # Twitter's layout does (rightmost splits), whatever the split of the bits.
    by = {(r["strategy"], r["clients"]): r for r in rows}
    for layout in ("snowflake_instagram", "snowflake_js53"):
        for clients in (1, 2):
            mine, twitter = by[(layout, clients)], by[("snowflake", clients)]
            assert abs(mine["avg_leaf_density"] - twitter["avg_leaf_density"]) < 5, (mine, twitter)
            assert mine["avg_leaf_density"] > 80, mine
    for r in rows:
        if r["strategy"] == "bigserial":
            assert r["index_to_shared_buffers"] < 0.1 and r["blks_extended_per_1k_rows"] > 5, r
            if pg_major == 15:
                assert r["blks_read_per_1k_rows"] < 1, r
            else:
                assert r["blks_read_per_1k_rows"] * r["rows"] / 1000 < 100, r
                assert r["blks_evicted_per_1k_rows"] < 1, r


@pytest.mark.default_and_newest(MEASUREMENT)
def test_two_sizes_past_a_tiny_buffer_cache_read_and_evict_more_for_random_keys(module_factory, tmp_path):
    """--sizes with shared_buffers at 2 MB: at the larger size every index is several times the
    cache; UUID v4's inserts read and evict far more blocks per row than bigserial's, no count is
    negative, and index_to_shared_buffers is the index size over shared_buffers."""
    c = module_factory("study-io", conf=["shared_buffers = '2MB'"])
    skip_without_contrib(c)
    out = tmp_path / "io"
    rc, log = run_study(c, "--sizes", "20000,150000", "--clients", "1", "--checkpoints", "0",
                        "--strategies", "bigserial,uuid_v4", "--out", str(out))
    assert rc == 0, log
    rows = report.read_csv(str(out / "results.csv"))
    assert sorted((r["strategy"], r["rows"]) for r in rows) == [
        ("bigserial", 20000), ("bigserial", 150000), ("uuid_v4", 20000), ("uuid_v4", 150000)]
    assert report.sanity(rows, ["bigserial", "uuid_v4"], [1]) == []
    big = {r["strategy"]: r for r in rows if r["rows"] == 150000}
    assert big["uuid_v4"]["index_to_shared_buffers"] > 1.5, big
    assert big["uuid_v4"]["blks_read_per_1k_rows"] > 3 * big["bigserial"]["blks_read_per_1k_rows"] + 10, big
    assert big["uuid_v4"]["blks_evicted_per_1k_rows"] > big["bigserial"]["blks_evicted_per_1k_rows"], big
    assert all(r["shared_buffers_bytes"] == 2 * 1048576 for r in rows)
    assert (out / "study_io.png").stat().st_size > 10_000
    text = (out / "report.md").read_text()
    assert "## Buffer I/O as the index grows" in text and "**uuid_v4**, 1 client:" in text


@pytest.mark.alone
@pytest.mark.default_and_newest(MEASUREMENT)
@DEFAULT_ONLY
def test_a_wide_disorder_window_leaves_ordered_keys_leaves_half_empty_as_the_model_predicts(module_factory, tmp_path):
    """--disorder at a tiny scale: 200 writers holding each row 40 ms on average between making its
    snowflake key and inserting it leave the leaves far less dense and out of order, against the
    same writers with no wait; the measured disorder says the rows arrived late, and the model,
    replaying the measured arrival order, lands within two points of pgstatindex."""
    c = module_factory("study-disorder", conf=["max_connections = 250"])
    skip_without_contrib(c)
    out = tmp_path / "disorder"
    rc, log = run_study(c, "--disorder", "0,40", "--strategies", "snowflake", "--rows", "20000",
                        "--checkpoints", "0", "--out", str(out))
    assert rc == 0, log
    rows = {r["window_ms"]: r for r in report.read_disorder_csv(str(out / "disorder.csv"))}
    assert sorted(rows) == [0.0, 40.0], rows
    assert report.disorder_sanity(list(rows.values())) == []
    calm, wide = rows[0.0], rows[40.0]
    assert wide["held_ms_mean"] > 30 and wide["late_rows_pct"] > 50, wide
    assert wide["avg_leaf_density"] < calm["avg_leaf_density"] - 15, (calm, wide)
    assert wide["leaf_fragmentation"] > calm["leaf_fragmentation"] + 20, (calm, wide)
    assert abs(wide["model_density"] - wide["avg_leaf_density"]) < 2, wide
    assert wide["late_keys_p50"] > wide["room_after_rightmost_split"] == 40, wide
    text = (out / "disorder.md").read_text()
    assert "## Why: what nbtree does with a late key" in text and (out / "disorder.png").stat().st_size > 10_000


@pytest.mark.alone
@pytest.mark.default_and_newest(MEASUREMENT)
@pytest.mark.soak("a minute alone; the wide disorder window above measures the same late keys in make test")
@DEFAULT_ONLY
def test_day_partitions_do_not_mitigate_late_keys_all_writers_share_todays(module_factory, tmp_path):
    """--mitigations at a tiny scale, snowflake keys, 200 writers, 40 ms: the table partitioned by
    UTC days of keys sends every row to today's partition, and its key index ends as sparse as the
    unpartitioned one's; the other mitigations are there too."""
    c = module_factory("study-mitigations", conf=["max_connections = 250"])
    skip_without_contrib(c)
    out = tmp_path / "mitigations"
    rc, log = run_study(c, "--disorder", "40", "--mitigations", "--strategies", "snowflake", "--rows", "20000",
                        "--checkpoints", "0", "--out", str(out))
    assert rc == 0, log
    rows = {r["mitigation"]: r for r in report.read_disorder_csv(str(out / "disorder.csv"))}
    assert {"none", "fillfactor 80", "key made after the wait", "day partitions"} <= set(rows), sorted(rows)
    assert report.disorder_sanity(list(rows.values())) == []
    none, parted = rows["none"], rows["day partitions"]
    assert parted["late_rows_pct"] > 50 and parted["avg_leaf_density"] < 80, parted
    assert abs(parted["avg_leaf_density"] - none["avg_leaf_density"]) < 12, (none, parted)
    assert rows["key made after the wait"]["avg_leaf_density"] > 85, rows["key made after the wait"]
    assert "| snowflake | day partitions |" in (out / "disorder.md").read_text()


def test_the_disorder_study_asks_for_enough_connections(study_server, tmp_path):
    rc, log = run_study(study_server, "--disorder", "0", "--strategies", "snowflake", "--rows", "100",
                        "--out", str(tmp_path))
    assert rc == 2 and "max_connections is 40: 200 pgbench clients" in log, log


def test_the_study_refuses_a_role_that_is_not_a_superuser(study_server, tmp_path):
    study_server.q("DROP ROLE IF EXISTS idgen_bench_user", "CREATE ROLE idgen_bench_user LOGIN")
    rc, log = run_study(study_server, "--rows", "10", "--out", str(tmp_path), user="idgen_bench_user")
    assert rc == 2 and "error: the study needs a superuser" in log, log


def test_the_study_names_an_unreachable_server(study_server, tmp_path):
    rc, log = run_study(study_server, "--rows", "10", "--out", str(tmp_path), env={"PGPORT": "1"})
    assert rc == 2 and "error: cannot reach the server" in log, log


def test_the_study_refuses_a_server_without_idgen_preloaded(cluster_factory, tmp_path):
    c = cluster_factory("plain", preload=False)
    rc, log = run_study(c, "--rows", "10", "--out", str(tmp_path))
    assert rc == 2, log
    assert "idgen is not in shared_preload_libraries" in log and "HINT: ALTER SYSTEM" in log, log


@pytest.mark.alone
@pytest.mark.default_and_newest(MEASUREMENT)
def test_the_speed_table_has_every_generator_and_a_sane_cap(study_server, tmp_path, pg_major):
    # benches/speed at a tiny scale: every row present, the build named, ratios to the baselines
    # self-consistent (the baseline's own ratio is 1.00).
    speed = os.path.join(ROOT, "benches", "speed")
    e = {**os.environ, **study_server.env(db="postgres")}
    done = subprocess.run([speed, "--rows", "20000", "--repeat", "2", "--out", str(tmp_path)],
                          capture_output=True, text=True, env=e)
    assert done.returncode == 0, done.stdout + done.stderr
    table = (tmp_path / "speed.md").read_text()
    assert f"PostgreSQL {pg_major}." in table and "median of 2 rounds" in table
    assert "The horizon's cost" in table and "the 20 slowest" in table
    # benches/speed adds fboulnois/pg_uuidv7's uuid_generate_v7() where the server has it: the
    # table is checked against what this server offers, not against one machine's extensions
    has_pg_uuidv7 = study_server.one("SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_uuidv7'") > 0
    names = ["snowflake_next()", "nextval() CACHE 1", "instagram next_id()", "uuid_v7()", "gen_random_uuid()",
             "base62_encode(g)", "to_hex(g)"] + (["core uuidv7()"] if pg_major >= 18 else []) + \
        (["uuid_generate_v7()"] if has_pg_uuidv7 else [])
    rows = {line.split("|")[1].strip().strip("`"): line for line in table.splitlines() if line.startswith("| `")}
    assert sorted(rows) == sorted(names)
    cells = [c.strip() for c in rows["nextval() CACHE 1"].split("|")]
    assert cells[5] == "1.00", rows["nextval() CACHE 1"]
    cells = [c.strip() for c in rows["gen_random_uuid()"].split("|")]
    assert cells[6] == "1.00", rows["gen_random_uuid()"]
    # net of the bare scan timed in the same rounds: gen_random_uuid()'s own net ratio is 1.00,
    # and core uuidv7()'s column is filled on 18 only
    assert cells[9] == "1.00", rows["gen_random_uuid()"]
    cells = [c.strip() for c in rows["uuid_v7()"].split("|")]
    assert (cells[10] != "—") == (pg_major >= 18), rows["uuid_v7()"]
    assert "Goals, as measured in this run:" in table
    goals = [line for line in table.splitlines() if line.startswith("- ") and "(goal " in line]
    assert len(goals) == (4 if pg_major >= 18 else 3), goals


@pytest.mark.alone
@pytest.mark.default_and_newest(MEASUREMENT)
def test_the_layout_row_measures_snowflake_next_against_the_servers_layouts_cap(study_server, tmp_path):
    # benches/speed --layout-row, as benches/layouts runs it on each layout's server: this
    # server's layout (Twitter's), its cap, and ratios to nextval() and Instagram's next_id().
    speed = os.path.join(ROOT, "benches", "speed")
    e = {**os.environ, **study_server.env(db="postgres")}
    done = subprocess.run([speed, "--layout-row", "0.05", "--repeat", "1", "--out", str(tmp_path)],
                          capture_output=True, text=True, env=e)
    assert done.returncode == 0, done.stdout + done.stderr
    cells = [c.strip() for c in (tmp_path / "layout-row.md").read_text().split("|")[1:-1]]
    assert cells[:3] == ["`twitter`", "4,096,000", "204,800"], cells
    assert all(c.endswith("%") for c in cells[3:5]) and all(float(c) > 0 for c in cells[5:]), cells
