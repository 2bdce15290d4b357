"""The fleet watch (sql/fleet/idgen_fleet_watch.sql) keeps a worker-id clash even when the
transaction that met it rolls back: above all when the clashing row is itself a duplicate key, so
the apply worker fails on it and retries it forever. Plain SQL on every server here (no idgen
preloaded): the watch needs none, and the ids are written out by hand."""

import os

import psycopg2
import pytest
from conftest import ROOT
from idgen_harness.waiting import wait_until

WATCH_SQL = os.path.join(ROOT, "sql", "fleet", "idgen_fleet_watch.sql")
PUB_CONF = ["wal_level = logical", "max_wal_senders = 10", "max_replication_slots = 10"]
# A failed apply worker is started again after wal_retrieve_retry_interval: retries come fast.
SUB_CONF = ["wal_retrieve_retry_interval = '100ms'"]
TABLE = "CREATE TABLE events (id bigint PRIMARY KEY, publisher int NOT NULL)"
# Once in the log per failed apply: "duplicate key value violates unique constraint "events_pkey""
# (15, 16), or from 18 "conflict detected ...: conflict=insert_exists" with "Key already exists in
# unique index "events_pkey"".
DUPLICATE = '"events_pkey"'
WARNING = "idgen fleet: snowflake worker id 1 arrives from two origins"


def snowflake(ms, worker, seq):
    return (ms << 22) | (worker << 12) | seq


X = snowflake(10**12, 1, 5)   # worker id 1


def install_watch(c):
    with open(WATCH_SQL) as f:
        c.q(f.read())


def clashes(c):
    """idgen_fleet.clashes, with the columns it has always had."""
    return c.q("SELECT worker_id, origin, first_origin, id, watched::text FROM idgen_fleet.clashes "
               "ORDER BY worker_id, origin")


def pending(c):
    """Which clashes only a slot holds (their transaction has not committed)."""
    return [p for (p,) in c.q("SELECT pending FROM idgen_fleet.clashes ORDER BY worker_id, origin")]


def fleet_of_two(cluster_factory):
    """Two publishers of `events` and a subscriber of both that watches it (subscriptions s1, s2)."""
    pubs = [cluster_factory(f"pub{i}", preload=False, conf=PUB_CONF) for i in (1, 2)]
    for p in pubs:
        p.q(TABLE, "CREATE PUBLICATION p FOR TABLE events")
    sub = cluster_factory("sub", preload=False, conf=SUB_CONF)
    sub.q(TABLE)
    install_watch(sub)
    sub.q("SELECT idgen_fleet.watch('events', 'id')")
    for i, p in enumerate(pubs, 1):
        sub.q(f"CREATE SUBSCRIPTION s{i} CONNECTION 'host={p.socket_dir} port={p.port} user=postgres "
              f"dbname=postgres' PUBLICATION p WITH (copy_data = false)")
    return pubs, sub


def test_a_clash_whose_first_row_is_a_duplicate_is_kept_across_the_retries(cluster_factory):
    (pub1, pub2), sub = fleet_of_two(cluster_factory)
    pub1.q(f"INSERT INTO events VALUES ({X}, 1), ({X + 1}, 1)")
    wait_until("publisher 1's rows", lambda: sub.one("SELECT count(*) FROM events") == 2, timeout=60)
    assert sub.q("SELECT worker_id, origin FROM idgen_fleet.worker_origins") == [(1, "subscription s1")]
    assert clashes(sub) == []

    # The very first row of worker id 1 from the second publisher is a duplicate of a row the
    # first one sent: the apply transaction rolls back, and again on every retry.
    pub2.q(f"INSERT INTO events VALUES ({X}, 2)")
    wait_until("the apply worker to fail on the duplicate four times", lambda: sub.log().count(DUPLICATE) >= 4,
               timeout=60)
    expected = [(1, "subscription s2", "subscription s1", X, "events")]
    assert clashes(sub) == expected, "the clash was lost with the rolled-back transaction"
    assert pending(sub) == [True]
    log = sub.log()
    assert log.find(WARNING) < log.find(DUPLICATE)
    assert log.count(WARNING) >= 4, "a WARNING in every apply session that meets the clash"
    # More retries neither multiply nor lose it.
    retries = sub.log().count(DUPLICATE)
    wait_until("three more retries", lambda: sub.log().count(DUPLICATE) >= retries + 3, timeout=60)
    assert clashes(sub) == expected
    assert sub.q("SELECT worker_id, origin FROM idgen_fleet.worker_origins") == [(1, "subscription s1")]

    # The operator removes the subscriber's row: the retry commits, with the clash in the log.
    sub.q(f"DELETE FROM events WHERE id = {X}")
    wait_until("publisher 2's row", lambda: sub.q(f"SELECT publisher FROM events WHERE id = {X}") == [(2,)], timeout=60)
    assert clashes(sub) == expected and pending(sub) == [False]
    pub2.q(f"INSERT INTO events VALUES ({X + 2}, 2)")
    wait_until("publisher 2's next row", lambda: sub.one("SELECT count(*) FROM events") == 3, timeout=60)
    assert clashes(sub) == expected and pending(sub) == [False]
    # settle_clashes() frees the slot of a clash the log holds.
    sub.q("CALL idgen_fleet.settle_clashes()")
    assert sub.one("SELECT count(*) FROM idgen_fleet.pending_clashes()") == 0
    assert clashes(sub) == expected and pending(sub) == [False]


def test_a_clash_whose_transaction_never_commits_is_settled_into_the_log(cluster_factory):
    (pub1, pub2), sub = fleet_of_two(cluster_factory)
    pub1.q(f"INSERT INTO events VALUES ({X}, 1)")
    wait_until("publisher 1's row", lambda: sub.one("SELECT count(*) FROM events") == 1, timeout=60)
    pub2.q(f"INSERT INTO events VALUES ({X}, 2)")
    wait_until("the apply worker to fail on the duplicate", lambda: sub.log().count(DUPLICATE) >= 2, timeout=60)
    # The operator stops the second subscription instead: its transaction never commits.
    sub.q("ALTER SUBSCRIPTION s2 DISABLE")
    wait_until("s2's apply worker to stop",
               lambda: sub.one("SELECT count(*) FROM pg_stat_subscription WHERE subname = 's2' AND pid IS NOT NULL")
               == 0, timeout=60)
    expected = [(1, "subscription s2", "subscription s1", X, "events")]
    assert clashes(sub) == expected and pending(sub) == [True]
    sub.q("CALL idgen_fleet.settle_clashes()")
    assert clashes(sub) == expected and pending(sub) == [False]
    assert sub.one("SELECT count(*) FROM idgen_fleet.pending_clashes()") == 0
    # Even once the subscription is gone.
    sub.q("DROP SUBSCRIPTION s2")
    assert clashes(sub) == expected


def local_node(cluster_factory):
    """One server, watching t, whose worker id 1 was first seen from another origin."""
    c = cluster_factory("node", preload=False)
    install_watch(c)
    c.q("CREATE TABLE t (id bigint PRIMARY KEY)", "SELECT idgen_fleet.watch('t', 'id')")
    c.q("INSERT INTO idgen_fleet.worker_origins (worker_id, origin, first_id) "
        f"SELECT w, 'subscription far', {snowflake(10**12, 0, 0)} | (w << 12) FROM generate_series(0, 20) w")
    return c


def test_a_local_clash_rolled_back_again_and_again_is_kept_once(cluster_factory):
    c = local_node(cluster_factory)
    conn = c.connect()
    try:
        with conn.cursor() as cur:
            for i in range(3):
                cur.execute("BEGIN")
                cur.execute(f"INSERT INTO t VALUES ({X + i})")
                cur.execute("ROLLBACK")
                # with a savepoint rolled back inside a transaction that commits
                cur.execute("BEGIN")
                cur.execute("SAVEPOINT a")
                cur.execute(f"INSERT INTO t VALUES ({X + 10 + i})")
                cur.execute("ROLLBACK TO SAVEPOINT a")
                cur.execute("COMMIT")
            # the slots' lock is released once the slot is written, not at the end of the
            # transaction: none is held between statements
            cur.execute("SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid()"
                        " AND (locktype = 'advisory' OR relation = 'idgen_fleet.slot_guard'::regclass)")
            assert cur.fetchone() == (0,)
    finally:
        conn.close()
    assert c.one("SELECT count(*) FROM t") == 0
    assert clashes(c) == [(1, "local", "subscription far", X, "t")] and pending(c) == [True]
    # Running the file again (an upgrade) keeps the slots.
    install_watch(c)
    assert clashes(c) == [(1, "local", "subscription far", X, "t")] and pending(c) == [True]
    # A role that may read the clashes: SELECT on the view and EXECUTE on pending_clashes().
    c.q("CREATE ROLE looker LOGIN", "GRANT USAGE ON SCHEMA idgen_fleet TO looker",
        "GRANT SELECT ON idgen_fleet.clashes TO looker")
    assert c.error("SELECT * FROM idgen_fleet.clashes", user="looker").pgcode == "42501"
    c.q("GRANT EXECUTE ON FUNCTION idgen_fleet.pending_clashes() TO looker")
    assert c.q("SELECT worker_id, pending FROM idgen_fleet.clashes", user="looker") == [(1, True)]
    # A later clashing row that commits puts the clash in the log, as first met (id X).
    c.q(f"INSERT INTO t VALUES ({X + 100})")
    assert clashes(c) == [(1, "local", "subscription far", X, "t")] and pending(c) == [False]
    assert c.one("SELECT count(*) FROM idgen_fleet.clash_log") == 1


def test_no_other_role_can_hold_the_slots_lock_and_stall_a_clash(cluster_factory):
    """Another role tries every lock it can reach on the watch's objects and keeps its
    transaction open; a clash met meanwhile is still kept at once (an advisory lock, which any
    role can take, would have stalled it, and with it the apply worker that met it)."""
    c = local_node(cluster_factory)
    c.q("CREATE ROLE mallory LOGIN", "GRANT USAGE ON SCHEMA idgen_fleet TO mallory")
    mallory = c.connect(user="mallory")
    mallory.autocommit = False
    try:
        with mallory.cursor() as cur:
            # the advisory lock an earlier design took, held
            cur.execute("SELECT pg_advisory_lock('idgen_fleet.clash_log'::regclass::oid::integer, 0)")
            c.q("SET statement_timeout = '10s'", f"INSERT INTO t VALUES ({X})")
            assert clashes(c) == [(1, "local", "subscription far", X, "t")] and pending(c) == [False]
            # the watch's own lock, refused; a lock taken on the way to a refusal goes with it
            for attempt in ["LOCK TABLE idgen_fleet.slot_guard IN SHARE UPDATE EXCLUSIVE MODE",
                            "LOCK TABLE idgen_fleet.slot_guard IN ACCESS EXCLUSIVE MODE",
                            "SELECT * FROM idgen_fleet.slot_guard FOR UPDATE",
                            "SELECT pg_relation_size('idgen_fleet.slot_guard')",
                            "LOCK TABLE idgen_fleet.clash_log IN ACCESS EXCLUSIVE MODE"]:
                cur.execute("SAVEPOINT s")
                try:
                    cur.execute(attempt)
                except psycopg2.Error as refused:
                    assert refused.pgcode == "42501", (attempt, refused)
                    cur.execute("ROLLBACK TO SAVEPOINT s")
                else:
                    assert attempt.startswith("SELECT pg_relation_size"), f"{attempt} was allowed"
            c.q("SET statement_timeout = '10s'", "BEGIN", f"INSERT INTO t VALUES ({snowflake(10**12, 2, 1)})",
                "ROLLBACK")
            assert [w for (w,) in c.q("SELECT worker_id FROM idgen_fleet.clashes WHERE pending")] == [2]
    finally:
        mallory.rollback()
        mallory.close()


def test_when_every_slot_is_taken_the_warning_says_so(cluster_factory):
    c = local_node(cluster_factory)
    slots = c.one("SELECT idgen_fleet.clash_slots()")
    for w in range(1, slots + 1):
        c.error("BEGIN", f"INSERT INTO t VALUES ({snowflake(10**12, w, 0)})", "SELECT 1/0")
    assert c.one("SELECT count(*) FROM idgen_fleet.clashes WHERE pending") == slots
    conn = c.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO t VALUES ({snowflake(10**12, slots + 1, 0)})")
            notices = "".join(conn.notices)
    finally:
        conn.close()
    assert f"snowflake worker id {slots + 1} arrives from two origins" in notices
    assert "could not be kept outside this transaction" in notices, notices
    # It committed, so it is in the log all the same; settling frees the slots of the others.
    assert c.one("SELECT count(*) FROM idgen_fleet.clashes") == slots + 1
    c.q("CALL idgen_fleet.settle_clashes()")
    assert c.one("SELECT count(*) FROM idgen_fleet.pending_clashes()") == 0
    assert c.q("SELECT count(*), count(*) FILTER (WHERE NOT pending) FROM idgen_fleet.clashes") == [(slots + 1,) * 2]


def test_rerunning_the_file_over_the_old_table_keeps_its_clashes(cluster_factory):
    c = cluster_factory("node", preload=False)
    # The watch as it was before the clashes became a view over a log and the slots.
    c.q("CREATE SCHEMA idgen_fleet",
        """CREATE TABLE idgen_fleet.worker_origins (
            worker_id integer PRIMARY KEY CHECK (worker_id BETWEEN 0 AND 1023), origin text NOT NULL,
            first_id bigint NOT NULL, first_seen timestamptz NOT NULL DEFAULT now())""",
        """CREATE TABLE idgen_fleet.clashes (
            worker_id integer NOT NULL, origin text NOT NULL, first_origin text NOT NULL, id bigint NOT NULL,
            watched regclass NOT NULL, seen timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (worker_id, origin))""",
        "CREATE TABLE t (id bigint PRIMARY KEY)",
        f"INSERT INTO idgen_fleet.worker_origins (worker_id, origin, first_id) VALUES (1, 'subscription a', {X})",
        "INSERT INTO idgen_fleet.clashes (worker_id, origin, first_origin, id, watched) "
        f"VALUES (1, 'subscription b', 'subscription a', {X + 1}, 't')")
    for _ in range(2):
        install_watch(c)
        assert c.one("SELECT relkind FROM pg_class WHERE oid = 'idgen_fleet.clashes'::regclass") == "v"
        assert clashes(c) == [(1, "subscription b", "subscription a", X + 1, "t")] and pending(c) == [False]
    c.q("SELECT idgen_fleet.watch('t', 'id')", f"INSERT INTO t VALUES ({X + 2})")
    assert clashes(c) == [(1, "local", "subscription a", X + 2, "t"),
                          (1, "subscription b", "subscription a", X + 1, "t")]
    assert pending(c) == [False, False]


def instagram(ms, worker, seq):
    return (ms << 23) | (worker << 10) | seq


def sonyflake(ticks, worker, seq):
    return (ticks << 24) | (seq << 16) | worker   # Sonyflake's sequence lies above its machine id


@pytest.mark.parametrize("layout, make", [("instagram", instagram), ("sonyflake", sonyflake)])
def test_a_watch_of_another_layout_reads_the_worker_id_from_that_layouts_field(cluster_factory, layout, make):
    c = cluster_factory("node", preload=False)
    install_watch(c)
    c.q("CREATE TABLE t (id bigint PRIMARY KEY)", f"SELECT idgen_fleet.watch('t', 'id', '{layout}')")
    first, clash = make(10**11, 5000, 0), make(10**11 + 1, 5000, 7)
    assert (clash >> 12) & 1023 != 5000, "Twitter's field would name another worker id"
    c.q("INSERT INTO idgen_fleet.worker_origins (worker_id, origin, first_id) "
        f"VALUES (5000, 'subscription far', {first})")
    conn = c.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(f"INSERT INTO t VALUES ({clash})")
            cur.execute("ROLLBACK")
    finally:
        conn.close()
    assert clashes(c) == [(5000, "local", "subscription far", clash, "t")] and pending(c) == [True]
    c.q(f"INSERT INTO t VALUES ({clash + (1 << 30)})")
    assert clashes(c) == [(5000, "local", "subscription far", clash, "t")] and pending(c) == [False]
    # an id of another worker id is no clash
    c.q(f"INSERT INTO t VALUES ({make(10**11 + 2, 4999, 0)})")
    assert c.one("SELECT count(*) FROM idgen_fleet.worker_origins") == 2
    # one fleet, one layout; a layout that is not one
    c.q("CREATE TABLE u (id bigint PRIMARY KEY)")
    e = c.error("SELECT idgen_fleet.watch('u', 'id')")
    assert e.pgcode == "55000" and f"t is watched with layout {layout}" in e.diag.message_primary, e
    e = c.error("SELECT idgen_fleet.watch('u', 'id', '40/17/6/1ms')")
    assert e.pgcode == "22023" and "is not a snowflake layout" in e.diag.message_primary, e
    c.q(f"SELECT idgen_fleet.watch('u', 'id', '{layout}')")
