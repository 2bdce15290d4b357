"""Cursor pagination and "latest first" on the key alone, without a created_at column's index
(docs/clients.md): the plans and the pages of `WHERE id < :cursor ORDER BY id DESC LIMIT n`
against the same on created_at, and the index space the snowflake key saves."""
import os
import subprocess

import pytest
from conftest import ROOT

ROWS = 200_000
# The page's two queries, as docs/clients.md shows them: :cursor and :since are the values the
# application passes (here replaced by the test's)
QUERIES = """
-- docs/clients.md: pages
SELECT id FROM events WHERE id < :cursor ORDER BY id DESC LIMIT 20;   -- the next page
SELECT id FROM events WHERE id >= snowflake_from_timestamp(:since, 1288834974657);  -- since a time
-- end docs/clients.md
"""
NEXT_PAGE, SINCE = (line.split(";")[0] for line in QUERIES.strip().splitlines()[1:-1])


@pytest.fixture(scope="module")
def events(module_factory):
    c = module_factory("pages", worker_id=3)
    c.q("CREATE EXTENSION idgen",
        "CREATE TABLE events (id bigint PRIMARY KEY DEFAULT snowflake_next(),"
        " created_at timestamptz NOT NULL DEFAULT clock_timestamp(), payload text NOT NULL)",
        "CREATE INDEX events_created_at ON events (created_at)",
        f"INSERT INTO events (payload) SELECT 'p' || g FROM generate_series(1, {ROWS}) g",
        "VACUUM ANALYZE events")
    return c


def plan(c, sql):
    return "\n".join(r[0] for r in c.q(f"EXPLAIN (COSTS OFF) {sql}"))


def test_the_key_pages_latest_first_as_created_at_does_on_its_own_index(events):
    by_id = NEXT_PAGE.replace(":cursor", "{cursor}")
    by_time = ("SELECT id, created_at FROM events WHERE (created_at, id) < ('{ts}', {cursor})"
               " ORDER BY created_at DESC, id DESC LIMIT 20")
    assert "Index Only Scan Backward using events_pkey" in plan(events, by_id.format(cursor=2**62)), \
        plan(events, by_id.format(cursor=2**62))
    assert "events_created_at" in plan(events, by_time.format(ts="infinity", cursor=2**62))
    cursor, ts = 2**63 - 1, "infinity"
    for _ in range(5):
        page = [i for (i,) in events.q(by_id.format(cursor=cursor))]
        rows = events.q(by_time.format(ts=ts, cursor=cursor))
        assert page == [i for i, _ in rows] and len(page) == 20, "the same page, newest first"
        cursor, ts = page[-1], rows[-1][1]
    # "since a time" on the key: a range scan of the primary key, bounded by the IMMUTABLE form,
    # returns the rows whose id was taken in that time's millisecond or later (ids count whole
    # milliseconds). The id is taken before created_at's clock_timestamp() in the same row, so
    # each of them has created_at at or after that millisecond; a row whose id was taken just
    # before the moment and its created_at just after is not among them (CI on 15 saw one).
    moment = events.one("SELECT (max(created_at) - interval '2 ms')::text FROM events")
    since = SINCE.replace(":since", f"'{moment}'")
    assert "events_pkey" in plan(events, since), plan(events, since)
    tick = f"date_trunc('milliseconds', '{moment}'::timestamptz)"
    assert len(events.q(since)) == events.one(
        f"SELECT count(*) FROM events WHERE snowflake_timestamp(id, 1288834974657) >= {tick}") > 0
    assert events.q(f"{since} AND created_at < {tick}") == []


def test_dropping_the_created_at_index_saves_its_space_and_the_time_stays_readable(events):
    size = events.one("SELECT pg_relation_size('events_created_at')")
    key = events.one("SELECT pg_relation_size('events_pkey')")
    # a timestamptz and a bigint are both 8 bytes: the second index is as large as the key's
    assert 0.8 < size / key < 1.25, (size, key)
    # and the key holds the time: the millisecond its value was taken, at or before the row's
    # clock reading, in the same order (one writer)
    assert events.one("SELECT bool_and(snowflake_timestamp(id) <= created_at) FROM events")
    assert events.one("SELECT count(*) FROM (SELECT id, lag(id) OVER (ORDER BY created_at, id) AS before"
                      " FROM events) s WHERE id < before") == 0


def test_the_pagination_bench_reports_both_plans_and_the_sizes(events):
    done = subprocess.run([os.path.join(ROOT, "benches", "pagination"), "--rows", "3000", "--repeat", "1"],
                          capture_output=True, text=True, env={**os.environ, **events.env(db="postgres")}, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Index Only Scan Backward on idgen_pages_pkey" in done.stdout, done.stdout
    assert "on idgen_pages_created_at" in done.stdout and "created_at index" in done.stdout, done.stdout
