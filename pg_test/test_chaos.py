"""The fault schedule (benches/idgen_harness/chaos.py) under `make test`: a short schedule with a fixed seed, and
one with a bug planted that the checker must catch; under `make soak` one with a random seed (printed, to replay it).
Each starts its own six servers on this machine's loopback and stops them all at the end."""
import argparse
import json
import os
import random
import subprocess

import pytest
from idgen_harness import chaos, cluster

pytestmark = pytest.mark.version_specific("wal", "syncrep", "replication", "bgworker")

# due in its first 40 s: w3's clock (a fixed worker id, no registry) set 18 s back and then a
# crash, w2's too, failovers (one to a standby whose clock went 15 s back), a cut link, clock steps
# (the registry's too), a registry outage. The planted bug horizon-never-persisted
# (pg_test/mutants) fails it: 20,529 violations in the run that chose it.
FIXED_SEED = 1016  # its 40 s hold every kind of fault; with the horizon off it found 10,537 violations
SHORT_S = 40


def run(tmp_path, *args):
    out = tmp_path / "out"
    rc = chaos.main([*args, "--out", str(out)])
    with open(out / "chaos.json") as f:
        summary = json.load(f)
    with open(out / "chaos.md") as f:
        report = f.read()
    return rc, summary, report


def assert_clean(rc, s, report):
    assert rc == 0 and s["violations"] == 0, report
    # the run did what it says: every fault it drew was carried out, none is left hanging, and
    # there were ids to check from both sides of the history
    failed = {k: v["failed"] for k, v in s["faults_by_kind"].items() if v["failed"]}
    assert not failed and s["faults_unfinished"] == 0, report
    assert sum(v["done"] for v in s["faults_by_kind"].values()) == s["faults_scheduled"], report
    assert s["ids_by_source"]["select"] > 1000 and s["ids_by_source"]["stored"] > 1000, report


@pytest.mark.default_and_newest("the schedule's paths (WAL, synchronous replication, pg_rewind) run on every version "
                                "in the failover test below; the whole schedule on 15 and 18")
def test_a_short_schedule_with_a_fixed_seed_hands_out_no_id_twice(tmp_path):
    scheduled = {f.kind for f in chaos.schedule(FIXED_SEED, SHORT_S)}
    wanted = {"failover", "failover_async", "link_cut", "client_cut", "clock_step", "registry_outage",
              "clock_back_crash", "clock_back_failover", *chaos.CONFIG_KINDS, *chaos.REGISTRY_KINDS}
    assert wanted <= scheduled, wanted - scheduled
    rc, s, report = run(tmp_path, "--seed", str(FIXED_SEED), "--seconds", str(SHORT_S))
    assert_clean(rc, s, report)
    assert s["promotions"] >= 1, report


@pytest.mark.soak("a new seed each run explores; the fixed seed's schedule above, every kind of fault, is make "
                  "test's, on 15 and 18")
def test_a_short_schedule_with_a_random_seed_hands_out_no_id_twice(tmp_path):
    seed = random.SystemRandom().randrange(1, 2**31)
    print(f"chaos seed {seed}: replay with bash pg_test/faults/run --seconds {SHORT_S} --seed {seed}")
    rc, s, report = run(tmp_path, "--seed", str(seed), "--seconds", str(SHORT_S))
    assert_clean(rc, s, report)


@pytest.mark.skipif(cluster.server_major() != 15, reason="the checker is the same on every version: run on 15")
def test_the_checker_catches_a_worker_id_shared_by_two_writers(tmp_path):
    """w2 given the lineage's worker id and no registry: the same ids come from two writers."""
    rc, s, report = run(tmp_path, "--seed", str(FIXED_SEED), "--seconds", "20", "--plant", "shared-worker-id")
    assert rc == 1 and s["violations"] > 0, report
    assert "handed out 2 times" in report and " from w2 " in report, report
    assert os.path.exists(tmp_path / "out" / "faults.csv")



@pytest.fixture
def c_ahead_of_b(tmp_path):
    """The lineage built (no load) with c holding WAL that b never got: commits wait for the
    synchronous standby, but WAL goes to both, so with b's link held c receives what b does not
    (here with synchronous_commit = local; in a schedule, a commit still waiting for b). After b
    is promoted, c cannot follow b's timeline until it is rewound."""
    run = chaos.Run(argparse.Namespace(plant=None), str(tmp_path), cluster)
    try:
        run.build()
        a, b, c = (run.servers[n] for n in chaos.LINEAGE)
        run.relays["b"].hold()
        # ids of its own: snowflake_next()'s horizon push would wait for b (as it must)
        a.q("SET synchronous_commit = local; "
            "INSERT INTO events SELECT g, gen_random_uuid(), 'ahead' FROM generate_series(1, 1000) g")
        lsn = a.one("SELECT pg_current_wal_flush_lsn()")
        chaos._wait(lambda: chaos.replayed(c, lsn), "c replaying what b never got", 30)
        assert not chaos.replayed(b, lsn)
        yield run, a, b, c
    finally:
        run.close()


def caught_up(run, primary, *standbys):
    chaos._wait(lambda: all(chaos.follows(s, primary) for s in standbys), "the standbys following", 60)
    lsn = primary.one("SELECT pg_current_wal_flush_lsn()")
    chaos._wait(lambda: all(chaos.replayed(s, lsn) for s in standbys), "the standbys replaying", 60)
    # what only a and c had is gone with the timeline it was on, but the checker still sees it
    for s in standbys:
        assert s.one("SELECT count(*) FROM events WHERE issuer = 'ahead'") == 0, s.name
    assert sorted(i for i, _, issuer, *_ in run.salvaged if issuer == "ahead") == list(range(1, 1001))
    assert run.rows_read_before_rewinds >= 1000


def test_a_failover_rewinds_the_asynchronous_standby_that_got_ahead_of_the_synchronous_one(c_ahead_of_b):
    run, a, b, c = c_ahead_of_b
    outcome = run.do_failover(chaos.Fault(0.0, "failover", "primary", 0.0))
    run.relays["b"].restore()
    assert outcome == "a -> b; a rewound; c rewound", outcome
    caught_up(run, b, a, c)


@pytest.mark.default_and_newest("pg_rewind runs on every version in the failover test above; this one "
                                "tests the schedule's own repair")
def test_the_end_of_a_schedule_rewinds_a_standby_that_cannot_follow(c_ahead_of_b):
    """What CI once met at the end of a schedule: heal() must repair it and say so."""
    run, a, b, c = c_ahead_of_b
    a.stop("immediate")
    subprocess.run([b.bin("pg_ctl"), "promote", "-D", b.data_dir, "-w"], check=True, capture_output=True)
    for relay in run.relays.values():
        relay.point_at(b.port)
    run.roles = {"primary": "b", "sync": "a", "async": "c"}
    assert run._reattach(a, b) == "a rewound"
    run.heal()
    assert len(run.heal_log) == 1 and run.heal_log[0].startswith("c does not follow"), run.heal_log
    assert "c rewound" in run.heal_log[0] and "forked off" in run.heal_log[0], run.heal_log
    caught_up(run, b, a, c)
