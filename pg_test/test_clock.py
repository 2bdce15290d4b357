"""The clock and the durable horizon on a live server: libfaketime shifts the server's clock
while it runs, and restarts and crashes happen with the clock set back."""

import os
import re
import subprocess
import time

import pytest
from conftest import sqlstate_and_hint
from idgen_harness import cluster

pytestmark = pytest.mark.version_specific("wal", "shmem")


def test_clock_steps_back_while_running(cluster_factory):
    c = cluster_factory("clock", fake_clock=True)
    c.q("CREATE EXTENSION idgen")
    before = c.one("SELECT max(snowflake_next()) FROM generate_series(1, 10)")

    # 0.5 s back, within idgen.max_clock_wait (1 s): the generator waits, then goes on above.
    # The step lands within FakeClock.SETTLE_S, so ids are issued for longer than that.
    c.clock.set("-0.5s", settle=False)
    c.q("""DO $$
           DECLARE stop timestamptz := clock_timestamp() + interval '3.5 s';
           BEGIN
             WHILE clock_timestamp() < stop LOOP PERFORM snowflake_next(); END LOOP;
           END $$""")
    assert c.one(f"SELECT snowflake_next() > {before}") is True
    assert c.q("SELECT clock_regressions, max_regression_ms BETWEEN 300 AND 500 FROM idgen_stats()") \
        == [(1, True)]

    uuid_before = c.one("SELECT uuid_v7()::text")
    c.clock.set("-8s")  # about 5 s behind the last id once set() returns
    # uuid_v7() neither waits nor goes backwards
    assert c.q(f"SELECT uuid_v7() > '{uuid_before}',"
               f" uuid_v7_timestamp(uuid_v7()) >= uuid_v7_timestamp('{uuid_before}')") == [(True, True)]
    # snowflake_next(): SQLSTATE 58000 with a HINT, nothing issued
    e = c.error("SELECT snowflake_next()")
    assert re.match(r"58000: the system clock is \d+ ms behind .*\nHINT: Check the system clock",
                    sqlstate_and_hint(e)), e
    # statement_timeout interrupts a long clock wait
    e = c.error("SET idgen.max_clock_wait = '1h'", "SET statement_timeout = '300ms'", "SELECT snowflake_next()")
    assert e.pgcode == "57014" and "statement timeout" in str(e)


def test_clean_restart_with_the_clock_back_refuses_then_resumes_above(cluster_factory):
    c = cluster_factory("restart", fake_clock=True)
    c.q("CREATE EXTENSION idgen")
    last = c.one("SELECT snowflake_next()")
    last_ms = c.one(f"SELECT (extract(epoch FROM snowflake_timestamp({last})) * 1000)::bigint")
    c.stop()
    with open(f"{c.data_dir}/idgen_horizon") as f:
        # a clean shutdown records the exact last millisecond issued
        assert f.read().strip() == f"idgen-horizon-v1 {last_ms} epoch=1288834974657"
    c.clock.set("-5s")
    c.start()
    assert c.error("SELECT snowflake_next()").pgcode == "58000"
    # given a long enough wait, it resumes above the last id
    assert c.one("SET idgen.max_clock_wait = '10s'", f"SELECT snowflake_next() > {last}") is True


def test_crash_recovery_with_the_clock_back_refuses_then_resumes_above(cluster_factory):
    c = cluster_factory("crash", fake_clock=True)
    c.q("CREATE EXTENSION idgen")
    last = c.one("SELECT snowflake_next()")
    victim = subprocess.Popen([os.path.join(cluster.pg_bin(), "psql"), "-X", "-h", c.socket_dir,
                               "-p", str(c.port), "-U", "postgres",
                               "-c", "SET application_name = 'victim'", "-c", "SELECT pg_sleep(60)"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):
            pid = c.q("SELECT pid FROM pg_stat_activity WHERE application_name = 'victim'")
            if pid:
                break
            time.sleep(0.1)
        assert pid, "the victim backend never appeared"
        c.clock.set("-8s")  # still about 5 s behind once set() returns
        c.kill_backend(pid[0][0])
        time.sleep(1)
        c.wait_for_connections()
    finally:
        victim.wait(timeout=30)
    assert "terminated by signal 9" in c.log()
    assert c.error("SELECT snowflake_next()").pgcode == "58000"
    # given a long enough wait, it resumes above every id issued before the crash
    assert c.one("SET idgen.max_clock_wait = '10s'", f"SELECT snowflake_next() > {last}") is True


def test_uuid_v7_sorts_above_every_earlier_uuid_across_a_restart_and_a_crash_with_the_clock_back(cluster_factory):
    # Only UUIDs here, no snowflake id: uuid_v7() pushes the shared horizon itself, and its
    # word starts past it at start-up, so a clock set back cannot put new UUIDs below old ones.
    c = cluster_factory("uuids", fake_clock=True)
    c.q("CREATE EXTENSION idgen")
    newest = c.one("SELECT max(u::text) FROM (SELECT uuid_v7() AS u FROM generate_series(1, 1000)) s")
    c.stop()
    c.clock.set("-5s")
    c.start()
    after_restart = c.one("SELECT uuid_v7()::text")
    assert after_restart > newest
    newest = c.one("SELECT max(u::text) FROM (SELECT uuid_v7() AS u FROM generate_series(1, 1000)) s")
    c.stop("immediate")
    c.clock.set("-10s")
    c.start()
    assert c.one("SELECT uuid_v7()::text") > newest


@pytest.mark.alone
def test_the_lead_a_crash_leaves_is_waited_out_and_is_no_clock_regression(cluster_factory):
    """After a crash the generator starts past the horizon on disk, up to 1 s (the lead) ahead of
    the clock that wrote it. That wait used to count as a clock regression and, for a session
    with idgen.max_clock_wait under the lead, to fail with 58000 after every crash, blaming a
    clock behind "the last snowflake id issued" when none had been issued since the start."""
    c = cluster_factory("lead")
    c.q("CREATE EXTENSION idgen")
    # Keep pushing the horizon, so that at the crash it is about a second ahead of the clock.
    c.one("SELECT count(snowflake_next()) FROM generate_series(1, 200000)")
    horizon_ms = c.one("SELECT (extract(epoch FROM horizon) * 1000)::bigint FROM idgen_stats()")
    now_ms = c.one("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
    assert horizon_ms - now_ms > 400, "the horizon is ahead of the clock when the crash comes"
    c.stop("immediate")
    c.start()
    first = c.one("SET idgen.max_clock_wait = 0", "SELECT snowflake_next()")
    first_ms = c.one(f"SELECT (extract(epoch FROM snowflake_timestamp({first})) * 1000)::bigint")
    assert first_ms > horizon_ms, "the first id after the crash is past the horizon on disk"
    regressions, worst = c.q("SELECT clock_regressions, max_regression_ms FROM idgen_stats()")[0]
    assert (regressions, worst) == (0, 0)
