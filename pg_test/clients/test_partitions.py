"""Time partitions keyed by idgen's ids (docs/partitions.md): a snowflake-keyed table whose
partitions are days of ids, made and kept ahead by pg_partman (Debian's 4.7, packaged for
Debian's PostgreSQL 15 only: skipped elsewhere), and a uuid_v7-keyed one by idgen's documented
helper (pg_partman 4.7 partitions by time or by integer, not by UUID); each pruned to the days a
time range on the key touches, shown by EXPLAIN."""
import os
import subprocess

import pytest
from conftest import ROOT

EPOCH = 1288834974657
DAY_OF_IDS = 86_400_000 << 22  # a day of milliseconds, shifted past the worker and sequence

# idgen's helper for uuid_v7 keys, as docs/partitions.md gives it
UUID_DAYS = """
CREATE FUNCTION make_uuid_v7_days(parent regclass, first_day date, days integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  made integer := 0;
  d date;
BEGIN
  FOR i IN 0 .. days - 1 LOOP
    d := first_day + i;
    IF to_regclass(format('%s_%s', parent, to_char(d, 'YYYYMMDD'))) IS NULL THEN
      EXECUTE format('CREATE TABLE %I PARTITION OF %s FOR VALUES FROM (%L) TO (%L)',
                     format('%s_%s', parent, to_char(d, 'YYYYMMDD')), parent,
                     uuid_v7_boundary(d::timestamp AT TIME ZONE 'UTC'),
                     uuid_v7_boundary((d + 1)::timestamp AT TIME ZONE 'UTC'));
      made := made + 1;
    END IF;
  END LOOP;
  RETURN made;
END $$;
"""


BOUNDS = r"\('(\d+)'\) TO \('(\d+)'\)"  # FOR VALUES FROM ('lo') TO ('hi')


def partitions(c):
    """[(lower, upper)] of events' id-range partitions, in order."""
    return c.q("SELECT (regexp_match(pg_get_expr(c.relpartbound, c.oid), %s))::bigint[]"
               " FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
               " WHERE i.inhparent = 'events'::regclass AND c.relname <> 'events_default' ORDER BY 1"
               .replace("%s", "$re$" + BOUNDS + "$re$"))


def plan(c, sql):
    return "\n".join(r[0] for r in c.q(f"EXPLAIN (COSTS OFF) {sql}"))


@pytest.fixture
def server(cluster_factory):
    c = cluster_factory("partitions", worker_id=4)
    c.q("CREATE EXTENSION idgen")
    return c


def test_pg_partman_keeps_days_of_snowflake_ids_and_a_time_range_prunes_to_its_days(server):
    if not server.one("SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_partman'"):
        pytest.skip("no pg_partman for this server build (Debian packages it for its own PostgreSQL 15 only)")
    c = server
    c.q("CREATE SCHEMA partman", "CREATE EXTENSION pg_partman SCHEMA partman",
        "CREATE TABLE events (id bigint NOT NULL DEFAULT snowflake_next(), body text) PARTITION BY RANGE (id)",
        f"SELECT partman.create_parent('public.events', 'id', 'native', '{DAY_OF_IDS}', p_premake => 3,"
        f" p_start_partition => snowflake_from_timestamp(now() - interval '2 days', {EPOCH})::text)")
    bounds = partitions(c)
    assert len(bounds) >= 4
    for (lo, hi), in bounds:
        # each partition is one day of ids, starting a whole number of days after the epoch
        assert hi - lo == DAY_OF_IDS and lo % DAY_OF_IDS == 0
    c.q("INSERT INTO events (body) SELECT 'x' FROM generate_series(1, 20000)")
    where = c.q("SELECT tableoid::regclass::text, count(*) FROM events GROUP BY 1")
    assert len(where) == 1 and where[0][0] != "events_default" and where[0][1] == 20000, where
    # maintenance keeps p_premake days of partitions ahead of the newest id
    c.q("CALL partman.run_maintenance_proc()")
    newest = c.one("SELECT max(id) FROM events")
    assert len([lo for (lo, _), in partitions(c) if lo > newest]) >= 3, partitions(c)
    # a time range on the key, as literals: pruned when planned, to the one day that holds it
    today = c.one("SELECT now()::date::text")
    q = (f"SELECT count(*) FROM events WHERE id >= snowflake_from_timestamp('{today} 12:00+00', {EPOCH})"
         f" AND id < snowflake_from_timestamp('{today} 13:00+00', {EPOCH})")
    p = plan(c, q)
    assert p.count("Scan on events_p") == 1 and "events_default" not in p, p


def test_uuid_v7_days_by_idgens_helper_and_a_time_range_prunes_to_its_days(server):
    c = server
    c.q(UUID_DAYS, "CREATE TABLE docs (id uuid NOT NULL DEFAULT uuid_v7(), body text) PARTITION BY RANGE (id)",
        "SELECT make_uuid_v7_days('docs', current_date - 1, 3)")
    assert c.one("SELECT make_uuid_v7_days('docs', current_date - 1, 3)") == 0, "made once"
    c.q("INSERT INTO docs (body) SELECT 'x' FROM generate_series(1, 5000)")
    today = c.one("SELECT to_char(current_date, 'YYYYMMDD')")
    assert c.q("SELECT tableoid::regclass::text, count(*) FROM docs GROUP BY 1") == [(f"docs_{today}", 5000)]
    day = c.one("SELECT current_date::text")
    q = (f"SELECT count(*) FROM docs WHERE id >= uuid_v7_boundary('{day} 08:00+00')"
         f" AND id < uuid_v7_boundary('{day} 09:00+00')")
    p = plan(c, q)
    assert p.count("Scan on docs_") == 1 and f"docs_{today}" in p, p


def test_the_partitions_bench_measures_both_tables(server):
    if not server.one("SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_partman'"):
        pytest.skip("no pg_partman for this server build (Debian packages it for its own PostgreSQL 15 only)")
    done = subprocess.run([os.path.join(ROOT, "benches", "partitions"), "--rows", "4000", "--repeat", "1"],
                          capture_output=True, text=True, env={**os.environ, **server.env(db="postgres")}, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| idgen_")]
    assert len(rows) == 4 and all(" %" in r for r in rows), done.stdout
    assert any("idgen_parted_p" in r for r in rows), "the partitioned runs' rows went to a day's partition"
