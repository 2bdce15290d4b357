"""A fleet of servers merged by logical replication (benches/fleet.py at a small scale), and the
worker-id clash caught where their rows meet (sql/fleet/idgen_fleet_watch.sql)."""

import glob
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT

FLEET = os.path.join(ROOT, "benches", "fleet.py")


def fleet(*args, base=None, timeout=600):
    cmd = [sys.executable, FLEET, *args, *(["--base", str(base)] if base else [])]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=os.environ.copy())


def running_postmasters(base):
    """The PIDs of the postmasters alive under base, from each data directory's lock file.
    initdb's single-user backends write the same file, with the PID negated, and remove it a
    moment later: a file that is gone, half written or not a postmaster's is passed over."""
    alive = []
    for pid_file in glob.glob(os.path.join(str(base), "*", "data", "postmaster.pid")):
        try:
            with open(pid_file) as f:
                pid = int(f.readline())
        except (FileNotFoundError, ValueError):
            continue
        try:
            if pid > 0:
                os.kill(pid, 0)
                alive.append(pid)
        except ProcessLookupError:
            pass
    return alive


def test_four_publishers_merge_with_no_conflict_and_in_order(tmp_path):
    done = fleet("--publishers", "4", "--seconds", "3", "--rate-rows", "200000", "--out", str(tmp_path / "out"),
                 base=tmp_path / "servers")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    verdict = done.stdout.strip().splitlines()[-1]
    m = re.fullmatch(r"fleet: 4 publishers, ([\d,]+) rows, 0 conflicts, 0 clashes", verdict)
    assert m and int(m.group(1).replace(",", "")) > 1000, verdict
    # every publisher's rows arrived, one row of the table each
    rows = re.findall(r"^\| (\d) \| (\d) \| [-+][\d.]+ s \| ([\d,]+) \| ([\d,]+) \|$", done.stdout, re.M)
    assert [(p, w) for p, w, _, _ in rows] == [("1", "1"), ("2", "2"), ("3", "3"), ("4", "4")]
    assert all(made == arrived and made != "0" for _, _, made, arrived in rows), rows
    assert "per worker id, ids out of apply (commit) order: 0" in done.stdout
    codes = re.search(r"short codes \(`worker_code_next\('event_codes', 8\)`\): ([\d,]+) distinct of ([\d,]+) rows",
                      done.stdout)
    assert codes and codes.group(1) == codes.group(2) == m.group(1), done.stdout
    late = int(re.search(r"out of time order by at most (\d+) ms", done.stdout).group(1))
    assert late <= 4000 + 100, f"rows by id are {late} ms out of time order, more than the clocks' skew"
    assert (tmp_path / "out" / "fleet.md").read_text().strip().endswith(verdict)
    assert running_postmasters(tmp_path / "servers") == []


def test_five_publishers_with_auto_worker_ids_from_a_registry_merge_with_no_conflict(tmp_path):
    """benches/fleet --auto: every publisher leases its worker id (idgen.worker_id = auto)."""
    done = fleet("--publishers", "5", "--seconds", "3", "--rate-rows", "100000", "--auto", base=tmp_path / "servers")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    verdict = done.stdout.strip().splitlines()[-1]
    m = re.fullmatch(r"fleet: 5 publishers, ([\d,]+) rows, 0 conflicts, 0 clashes", verdict)
    assert m and int(m.group(1).replace(",", "")) > 1000, verdict
    rows = re.findall(r"^\| (\d) \| (\d+) \| [-+][\d.]+ s \| ([\d,]+) \| ([\d,]+) \|$", done.stdout, re.M)
    assert len(rows) == 5 and len({w for _, w, _, _ in rows}) == 5, rows
    assert all(made == arrived and made != "0" for _, _, made, arrived in rows), rows
    assert "(5 distinct)" in done.stdout
    codes = re.search(r"short codes \(`short_code_next\('events'\)`\): ([\d,]+) distinct of ([\d,]+) rows",
                      done.stdout)
    assert codes and codes.group(1) == codes.group(2) == m.group(1), done.stdout
    assert running_postmasters(tmp_path / "servers") == []


def test_two_publishers_with_one_worker_id_are_reported_before_the_first_duplicate(tmp_path):
    done = fleet("--publishers", "2", "--seconds", "3", "--rate-rows", "10000", "--clash", base=tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert re.search(r"worker-id clashes seen by idgen_fleet.watch: 1; worker id 1: "
                     r"subscription fleet[12] and subscription fleet[12]", done.stdout), out
    assert done.stdout.strip().splitlines()[-1].endswith("1 clashes - FAILED")
    log = open(os.path.join(tmp_path, "sub", "logs", "postgresql.log"), errors="replace").read()
    warning = log.find("idgen fleet: snowflake worker id 1 arrives from two origins")
    assert warning >= 0, log[-3000:]
    assert "HINT:  Give every server that issues snowflake ids its own idgen.worker_id" in log
    duplicate = log.find("duplicate key value violates unique constraint")
    assert duplicate == -1 or warning < duplicate, "the first duplicate came before the warning"


def stopped_within(proc, seconds):
    """The output of proc once it has exited; if it is still running after `seconds`, asks it
    where its threads are (fleet.py dumps them on SIGUSR1), kills it and fails with that."""
    try:
        return proc.communicate(timeout=seconds)[0]
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        time.sleep(2)
        proc.kill()
        raise AssertionError(f"still running {seconds} s after the signal:\n{proc.communicate()[0]}") from None


# While the servers start (the subscriber's postmaster is up, the run is still setting it up)
# and while pgbench loads the publishers: each signal stops the run and every server it started.
@pytest.mark.parametrize("phase, sig", [("starting", signal.SIGINT), ("loading", signal.SIGTERM)])
def test_an_interrupted_run_leaves_no_server_running(tmp_path, phase, sig):
    proc = subprocess.Popen([sys.executable, FLEET, "--publishers", "2", "--seconds", "120", "--base", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120

    def reached():
        if phase == "starting":
            return len(running_postmasters(tmp_path)) == 3   # both publishers and the subscriber
        return os.path.exists(tmp_path / "pgbench-2.log")

    try:
        while not reached():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.poll() else "slow"
            time.sleep(0.2)
        if phase == "loading":
            time.sleep(1)   # pgbench connected and inserting
        proc.send_signal(sig)
        output = stopped_within(proc, 120)
        left = running_postmasters(tmp_path)
        loads = subprocess.run(["pgrep", "-a", "-f", f"{tmp_path}/load.sql"], capture_output=True, text=True).stdout
    finally:
        # If the test failed before the run stopped, neither the run nor a server outlives it.
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for pid in running_postmasters(tmp_path):
            os.kill(pid, signal.SIGQUIT)   # immediate shutdown
    assert proc.returncode == 130, output
    assert f"interrupted ({sig.name}); every server it started is stopped" in output
    assert left == [], "servers still running"
    assert loads == "", f"pgbench still running: {loads}"


def test_a_failed_run_leaves_no_server_running(tmp_path):
    # A server build without pgbench: the servers start, the load fails, and every server the
    # run started is stopped on the way out.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    real = os.environ.get("PG_BIN") or "/usr/lib/postgresql/15/bin"
    for name in os.listdir(real):
        if name != "pgbench":
            os.symlink(os.path.join(real, name), bin_dir / name)
    env = {**os.environ, "PG_BIN": str(bin_dir)}
    done = subprocess.run([sys.executable, FLEET, "--publishers", "2", "--seconds", "1", "--base",
                           str(tmp_path / "servers")], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "fleet: failed:" in done.stderr and "every server it started is stopped" in done.stderr
    assert len(glob.glob(os.path.join(str(tmp_path / "servers"), "*", "data"))) == 3, "the servers never started"
    assert running_postmasters(tmp_path / "servers") == []
