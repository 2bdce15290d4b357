"""Replicas, failover and point-in-time recovery: the snowflake horizon travels in the WAL
(PostgreSQL 15 and later: a custom resource manager), so a promoted standby or a restored backup
never reissues an id or goes back, even with a clock behind the old primary's.

Every server runs on a Unix socket of this machine; every load is pgbench with -T, so it stops
by itself. Each scenario can fail: without the WAL record a standby knows only the horizon file
pg_basebackup copied, and with its clock 3 s behind it would issue ids (snowflake ids of the
same worker id, or UUIDs) below those already stored.
"""

import os
import subprocess
import time

import pytest
from idgen_harness.cluster import wait_for_replay

pytestmark = pytest.mark.version_specific("wal", "replication")

LOAD = """\\set n random(1, 1000000)
INSERT INTO t (n) VALUES (:n);
"""
TABLE = """CREATE TABLE t (sf bigint PRIMARY KEY DEFAULT snowflake_next(),
                         u uuid UNIQUE DEFAULT uuid_v7(),
                         n int,
                         after_promotion bool NOT NULL DEFAULT false)"""
BEHIND = "-3s"


def load(c, tmp_path, seconds, clients=4):
    script = tmp_path / "load.sql"
    script.write_text(LOAD)
    c.pgbench("-n", "-c", str(clients), "-j", "2", "-T", str(seconds), "-f", str(script))


def highest(c):
    """(max snowflake id, greatest uuid, row count) of t."""
    return c.q("SELECT (SELECT max(sf) FROM t), (SELECT u FROM t ORDER BY u DESC LIMIT 1)::text, "
               "(SELECT count(*) FROM t)")[0]


def assert_all_new_ids_above(c, old_sf, old_u):
    rows = c.q("SELECT count(*), count(DISTINCT sf), count(DISTINCT u), min(sf), "
               "(SELECT u FROM t WHERE after_promotion ORDER BY u LIMIT 1)::text "
               "FROM t WHERE after_promotion")[0]
    n, distinct_sf, distinct_u, low_sf, low_u = rows
    assert n > 0
    assert n == distinct_sf == distinct_u
    assert low_sf > old_sf, f"snowflake id {low_sf} issued after promotion is not above {old_sf}"
    assert low_u > old_u, f"uuid {low_u} issued after promotion is not above {old_u}"
    assert c.one("SELECT count(*) = count(DISTINCT sf) AND count(*) = count(DISTINCT u) FROM t")


@pytest.fixture
def primary(cluster_factory):
    c = cluster_factory("primary", worker_id=1)
    c.q("CREATE EXTENSION idgen", TABLE)
    return c


@pytest.mark.parametrize("standby_worker", [1, 2], ids=["same worker id", "own worker id"])
def test_a_promoted_standby_with_a_slower_clock_never_reissues_or_goes_back(
        primary, cluster_factory, tmp_path, standby_worker):
    standby = primary.base_backup(os.path.join(cluster_factory.base, "standby"), worker_id=standby_worker,
                                  conf=["idgen.max_clock_wait = 10000"])
    cluster_factory.made.append(standby)
    standby.with_fake_clock()
    standby.clock.set(BEHIND)
    standby.start()

    load(primary, tmp_path, 3)
    wait_for_replay(primary, standby)
    old_sf, old_u, old_rows = highest(primary)
    assert old_rows > 1000

    # Before promotion the standby refuses ids as nextval() does, and serves everything else.
    e = standby.error("SELECT snowflake_next()")
    assert e.pgcode == "25006", e
    assert "standby" in e.diag.message_detail and "primary" in e.diag.message_hint
    assert standby.one("SELECT uuid_v7_timestamp(uuid_v7()) IS NOT NULL")
    assert standby.one(f"SELECT snowflake_worker_id({old_sf})") == 1
    assert standby.one("SELECT base62_decode(base62_encode(42))") == 42

    primary.stop("immediate")
    standby.promote()
    assert highest(standby) == (old_sf, old_u, old_rows)
    standby.q("ALTER TABLE t ALTER after_promotion SET DEFAULT true")
    load(standby, tmp_path, 2)
    assert_all_new_ids_above(standby, old_sf, old_u)
    first = standby.one("SELECT min(sf) FROM t WHERE after_promotion")
    assert standby.one(f"SELECT snowflake_worker_id({first})") == standby_worker


def test_the_promoted_standby_waits_for_its_clock_or_says_so(primary, cluster_factory, tmp_path):
    # idgen.max_clock_wait at its default (1 s) is shorter than the 3 s the clock is behind:
    # right after promotion snowflake_next() raises 58000, as after a restart with the clock
    # set back, and issues ids once the clock has caught up.
    standby = primary.base_backup(os.path.join(cluster_factory.base, "standby"))
    cluster_factory.made.append(standby)
    standby.with_fake_clock()
    standby.clock.set(BEHIND)
    standby.start()
    load(primary, tmp_path, 1, clients=1)
    wait_for_replay(primary, standby)
    primary.stop("immediate")
    standby.promote()
    e = standby.error("SELECT snowflake_next()")
    assert e.pgcode == "58000", e
    standby.clock.set("+0")
    assert standby.one("SELECT snowflake_next() > (SELECT max(sf) FROM t)")


def test_a_standby_with_a_damaged_horizon_file_replays_but_leaves_it_for_the_operator(primary, cluster_factory,
                                                                                    tmp_path):
    """The one rule for a damaged file: replay moves the generator but does not overwrite the
    file (it used to, while the damaged flag stayed set until a restart), and after promotion
    nothing that depends on the horizon runs until the file is repaired and the server restarted."""
    standby = primary.base_backup(os.path.join(cluster_factory.base, "standby"))
    cluster_factory.made.append(standby)
    with open(os.path.join(standby.data_dir, "idgen_horizon"), "w") as f:
        f.write("garbage\n")
    standby.start()
    assert "idgen: could not read idgen_horizon" in standby.log()
    load(primary, tmp_path, 2, clients=1)
    wait_for_replay(primary, standby)
    with open(os.path.join(standby.data_dir, "idgen_horizon")) as f:
        assert f.read() == "garbage\n", "replay overwrote the damaged file"
    primary.stop("immediate")
    standby.promote()
    for call in ("snowflake_next()", "uuid_v7()"):
        assert standby.error(f"SELECT {call}").pgcode == "XX001", call
    standby.stop()
    highest_sf = primary.start().one("SELECT max(sf) FROM t")
    with open(os.path.join(standby.data_dir, "idgen_horizon"), "w") as f:
        f.write(f"idgen-horizon-v1 {int(time.time() * 1000) + 1000}\n")
    standby.start()
    assert standby.one(f"SELECT snowflake_next() > {highest_sf}")


def test_a_standby_that_cannot_write_the_horizon_file_stops_saying_what_to_do_and_resumes(primary, cluster_factory,
                                                                                         tmp_path):
    """Replay must not go on without a durable copy of what it replayed (a restart would begin at
    the last restartpoint and not see the record again): when the file cannot be written (here a
    directory where its temporary file goes, as good as a full disk) recovery stops with a
    message that says what to do, and replay resumes where it stopped once that is done."""
    standby = primary.base_backup(os.path.join(cluster_factory.base, "standby"))
    cluster_factory.made.append(standby)
    standby.start()
    blocker = os.path.join(standby.data_dir, "idgen_horizon.tmp")
    os.mkdir(blocker)
    load(primary, tmp_path, 2, clients=1)
    wait_until_stopped(standby)
    log = standby.log()
    assert "idgen: could not record idgen_horizon while replaying WAL" in log, log[-3000:]
    assert "HINT:  Free space (or fix permissions) in the data directory, then start the server again" in log
    os.rmdir(blocker)
    standby.start()
    wait_for_replay(primary, standby)
    with open(os.path.join(standby.data_dir, "idgen_horizon")) as f:
        on_disk = int(f.read().split()[1])
    assert on_disk >= primary.one("SELECT (extract(epoch FROM horizon) * 1000)::bigint FROM idgen_stats()")


def test_a_point_in_time_restore_with_the_clock_set_back_never_reissues(cluster_factory, tmp_path):
    archive = tmp_path / "archive"
    archive.mkdir()
    primary = cluster_factory("primary", worker_id=1, conf=[
        "archive_mode = on", f"archive_command = 'cp %p {archive}/%f'"])
    primary.q("CREATE EXTENSION idgen", TABLE)
    backup = primary.base_backup(os.path.join(cluster_factory.base, "restored"), standby=False,
                                 conf=["idgen.max_clock_wait = 10000", f"restore_command = 'cp {archive}/%f %p'",
                                       "recovery_target_name = 'before'", "recovery_target_action = 'promote'"])
    cluster_factory.made.append(backup)
    load(primary, tmp_path, 3)
    at_target = highest(primary)
    primary.q("SELECT pg_create_restore_point('before')")
    load(primary, tmp_path, 1)   # rows after the target: not part of the restored data
    # The segment holding the restore point, completed by the switch (its end + 1 names it).
    wal = primary.one("SELECT pg_walfile_name(pg_switch_wal())")
    deadline = time.monotonic() + 60
    while (primary.one("SELECT last_archived_wal FROM pg_stat_archiver") or "") < wal:
        assert time.monotonic() < deadline, "WAL was not archived"
        time.sleep(0.2)
    primary.stop()

    open(os.path.join(backup.data_dir, "recovery.signal"), "w").close()
    backup.with_fake_clock()
    backup.clock.set(BEHIND)
    backup.start()
    backup.wait_for_connections()
    deadline = time.monotonic() + 60
    while backup.one("SELECT pg_is_in_recovery()"):
        assert time.monotonic() < deadline, "the restore did not finish"
        time.sleep(0.2)
    old_sf, old_u, rows = highest(backup)
    assert (old_sf, old_u, rows) == at_target, "restored to the restore point"
    backup.q("ALTER TABLE t ALTER after_promotion SET DEFAULT true")
    load(backup, tmp_path, 1)
    assert_all_new_ids_above(backup, old_sf, old_u)


def test_pg_waldump_shows_the_record_by_number_only(primary):
    # pg_waldump is a client program and cannot load idgen: it names a custom resource manager
    # by its id and prints no description (what the README says). Every build has it.
    start = primary.one("SELECT pg_current_wal_insert_lsn()")
    primary.q("INSERT INTO t DEFAULT VALUES")
    end = primary.one("SELECT pg_current_wal_insert_lsn()")
    done = subprocess.run([os.path.join(primary.bin_dir, "pg_waldump"), "-p", os.path.join(primary.data_dir, "pg_wal"),
                           "-s", start, "-e", end], capture_output=True, text=True)
    ours = [line for line in done.stdout.splitlines() if "rmgr: custom173" in line]
    assert len(ours) == 1, done.stdout + done.stderr
    assert "rmid: 173" in ours[0]


def test_the_horizon_record_reads_in_pg_walinspect(primary):
    if not primary.one("SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_walinspect'"):
        pytest.skip("this server build has no contrib module pg_walinspect (the PostgreSQL 16 wheel ships core "
                    "only)")
    primary.q("CREATE EXTENSION pg_walinspect")
    start = primary.one("SELECT pg_current_wal_insert_lsn()")
    primary.q("INSERT INTO t DEFAULT VALUES")  # the first id of this server pushes the horizon
    end = primary.one("SELECT pg_current_wal_insert_lsn()")
    rows = primary.q(f"SELECT record_type, description FROM pg_get_wal_records_info('{start}', '{end}') "
                     "WHERE resource_manager = 'idgen'")
    assert len(rows) == 1, rows
    record_type, description = rows[0]
    assert record_type == "HORIZON"
    horizon_ms = primary.one("SELECT (extract(epoch FROM horizon) * 1000)::bigint FROM idgen_stats()")
    epoch_ms = primary.one("SELECT (extract(epoch FROM snowflake_timestamp(0)) * 1000)::bigint")
    assert description == f"horizon {horizon_ms} (Unix ms); worker_id 1; epoch {epoch_ms} (Unix ms)"


def wait_until_stopped(c, timeout=60):
    deadline = time.monotonic() + timeout
    while c.running():
        assert time.monotonic() < deadline, "the server kept running"
        time.sleep(0.2)


UNKNOWN_RMGR = "resource manager with ID 173 not registered"


def test_a_standby_without_idgen_preloaded_stops_at_its_first_record_and_runs_once_it_is(
        primary, cluster_factory, tmp_path):
    standby = primary.base_backup(os.path.join(cluster_factory.base, "standby"), preload=False)
    cluster_factory.made.append(standby)
    load(primary, tmp_path, 1, clients=1)   # horizon records after the backup's checkpoint
    standby.try_start()
    wait_until_stopped(standby)
    assert UNKNOWN_RMGR in standby.log()
    assert "shared_preload_libraries" in standby.log()
    # The documented way: preload idgen on every standby.
    standby.append_conf("shared_preload_libraries = 'idgen'")
    standby.start()
    wait_for_replay(primary, standby)
    assert standby.one("SELECT count(*) FROM t") == primary.one("SELECT count(*) FROM t")


def test_removing_idgen_after_a_crash_needs_a_checkpoint_first(primary, tmp_path):
    load(primary, tmp_path, 1, clients=1)
    primary.stop("immediate")     # horizon records after the last checkpoint, not yet replayed
    primary.append_conf("shared_preload_libraries = ''")
    assert not primary.try_start()
    assert UNKNOWN_RMGR in primary.log()
    # The documented way: start with idgen once more, CHECKPOINT, stop cleanly, then remove it.
    primary.append_conf("shared_preload_libraries = 'idgen'")
    primary.start()
    primary.q("CHECKPOINT")
    primary.stop()
    primary.append_conf("shared_preload_libraries = ''")
    primary.start()
    assert primary.one("SELECT count(*) FROM t") > 0
    e = primary.error("SELECT snowflake_next()")
    assert e.pgcode == "55000" and "shared_preload_libraries" in e.diag.message_hint, e
