"""NOT RUN by make test yet: the fixed-seed schedule failed once in CI (heal: c did not replay
within 120 s); run it with `pytest pg_test/chaos_scenarios.py` until that is fixed.

The fault schedule (benches/chaos.py) under `make test`: a short schedule with a fixed seed, one
with a random seed (printed, to replay it), and one with a bug planted that the checker must catch.
Each starts its own six servers on this machine's loopback and stops them all at the end."""
import json
import os
import random

import chaos
import cluster
import pytest

FIXED_SEED = 25  # due: a failover, cut links, clock steps, a registry outage in its first 40 s
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


def test_a_short_schedule_with_a_fixed_seed_hands_out_no_id_twice(tmp_path):
    scheduled = {f.kind for f in chaos.schedule(FIXED_SEED, SHORT_S)}
    assert {"failover", "link_cut", "clock_step", "registry_outage"} <= scheduled
    rc, s, report = run(tmp_path, "--seed", str(FIXED_SEED), "--seconds", str(SHORT_S))
    assert_clean(rc, s, report)
    assert s["promotions"] >= 1, report


def test_a_short_schedule_with_a_random_seed_hands_out_no_id_twice(tmp_path):
    seed = random.SystemRandom().randrange(1, 2**31)
    print(f"chaos seed {seed}: replay with bash benches/chaos --seconds {SHORT_S} --seed {seed}")
    rc, s, report = run(tmp_path, "--seed", str(seed), "--seconds", str(SHORT_S))
    assert_clean(rc, s, report)


@pytest.mark.skipif(cluster.server_major() != 15, reason="the checker is the same on every version: run on 15")
def test_the_checker_catches_a_worker_id_shared_by_two_writers(tmp_path):
    """w2 given the lineage's worker id and no registry: the same ids come from two writers."""
    rc, s, report = run(tmp_path, "--seed", str(FIXED_SEED), "--seconds", "20", "--plant", "shared-worker-id")
    assert rc == 1 and s["violations"] > 0, report
    assert "handed out 2 times" in report and " from w2 " in report, report
    assert os.path.exists(tmp_path / "out" / "faults.csv")
