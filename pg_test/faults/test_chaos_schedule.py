"""The fault schedule's pure parts (benches/idgen_harness/chaos.py): the schedule is a function of its seed, it
holds every kind of fault in a long run, and the relay a standby's link runs through passes, holds
and drops what it carries. No database in here."""
import socket
import threading
import time

from idgen_harness import chaos
from idgen_harness.waiting import run_threads


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another():
    assert chaos.schedule(42, 120) == chaos.schedule(42, 120)
    assert chaos.schedule(42, 120) != chaos.schedule(43, 120)


def test_a_schedule_is_ordered_bounded_and_draws_only_known_faults():
    faults = chaos.schedule(7, 300)
    times = [f.at_s for f in faults]
    assert times == sorted(times) and times[0] > 0 and times[-1] < 300 - 5
    for f in faults:
        assert f.target in chaos.ALL_KINDS[f.kind], f
        if f.kind == "clock_step":
            assert -chaos.MAX_OFFSET_S <= f.amount <= chaos.MAX_OFFSET_S
        if f.kind in ("link_cut", "client_cut"):
            assert f.mode in ("hold", "drop") and f.amount > 0
        if f.kind in ("clock_back_crash", "clock_back_failover"):
            assert chaos.BACK_S[0] <= f.amount <= chaos.BACK_S[1]


def test_every_schedule_sets_w3s_clock_back_and_crashes_it():
    """w3 has no registry: a clock set back on it and a crash is what shows a server that forgot
    its horizon, and make test's 40-second schedule must hold one whatever the seed, late enough
    that the step lands among the ids it issued since the load began."""
    for seed in range(200):
        hits = [f for f in chaos.schedule(seed, 40) if (f.kind, f.target) == ("clock_back_crash", "w3")]
        assert hits, seed
        assert any(f.at_s >= 10 for f in hits), (seed, hits)


def test_every_schedule_changes_an_id_space_at_each_door_and_first_w3s_epoch_to_a_later_one():
    """make test's 40-second schedule holds, whatever the seed, one change of each kind in its middle
    half: w3's id space (first an epoch 2-4 s later, which the start-up check must refuse until its
    ids sort above the old ones), a standby's epoch, w2's epoch against its registry. Drawn after
    the other faults, so that those stay what each seed drew before."""
    for seed in range(200):
        faults = chaos.schedule(seed, 40)
        config = [f for f in faults if f.kind in chaos.CONFIG_KINDS]
        assert sorted(f.kind for f in config) == sorted(chaos.CONFIG_KINDS), (seed, config)
        assert all(10 <= f.at_s <= 35 for f in config), (seed, config)
        (w3,) = [f for f in config if f.kind == "id_space_change"]
        assert w3.mode == "epoch_later" and chaos.LATER_EPOCH_S[0] <= w3.amount <= chaos.LATER_EPOCH_S[1]
        assert [f for f in faults if f.kind in chaos.KINDS] == chaos.schedule(seed, 40, config=False)


def test_every_schedule_fails_the_registry_over_in_its_middle_half_after_drawing_everything_else():
    """make test's 40-second schedule holds, whatever the seed, one failover of the registry to a
    standby that missed w2's last claim, late enough for w2 to hold a lease and early enough for
    the newcomer to wait out the hold-off within the fault's own time."""
    for seed in range(200):
        faults = chaos.schedule(seed, 40)
        (failover,) = [f for f in faults if f.kind == "registry_failover"]
        assert 10 <= failover.at_s <= 35 and 1.0 <= failover.amount <= 3.0, (seed, failover)


def test_clocks_are_set_back_further_than_a_restart_or_a_promotion_takes():
    """A server that forgot its horizon resumes below its old ids only if its clock went back
    further than its restart took (a few seconds here): the large steps are 10 s or more."""
    assert chaos.BACK_S[0] >= 10 and {"clock_back_crash", "clock_back_failover"} <= set(chaos.KINDS)


def test_a_half_hour_schedule_holds_every_kind_at_least_ten_times():
    faults = chaos.schedule(2026, 1800)
    counts = {k: sum(f.kind == k for f in faults) for k in chaos.ALL_KINDS}
    assert min(counts.values()) >= 10, counts


def test_faults_overlap():
    """With exponential gaps, some faults are due while an earlier one (a registry outage, a
    held link) still lasts: the overlaps the schedule is for."""
    faults = chaos.schedule(1, 600)
    overlaps = sum(1 for f, g in zip(faults, faults[1:], strict=False) if f.amount > 0 and g.at_s < f.at_s + f.amount
                   and not f.kind.startswith("clock_"))
    assert overlaps >= 10, overlaps


def _echo_server(tag=b""):
    """Answers each read with tag + what it read."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(4)

    def serve():
        while True:
            try:
                c, _ = s.accept()
            except OSError:
                return
            threading.Thread(target=lambda c=c: [c.sendall(tag + d) for d in iter(lambda: c.recv(1024), b"")],
                             daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return s


def _ask(conn, data, timeout):
    conn.settimeout(timeout)
    conn.sendall(data)
    try:
        return conn.recv(1024)
    except TimeoutError:
        return None


def test_the_relay_passes_holds_and_drops():
    upstream = _echo_server()
    relay = chaos.Relay(upstream.getsockname()[1])
    try:
        conn = socket.create_connection(("127.0.0.1", relay.port))
        assert _ask(conn, b"one", 2) == b"one"
        relay.hold()
        assert _ask(conn, b"two", 0.5) is None  # held: nothing comes back ...
        relay.restore()
        conn.settimeout(2)
        assert conn.recv(1024) == b"two"  # ... until it is restored, and nothing was lost
        relay.drop()
        conn.settimeout(2)
        assert conn.recv(1024) == b""  # dropped: the connection is closed
        late = socket.create_connection(("127.0.0.1", relay.port))
        late.settimeout(2)
        assert late.recv(1024) == b""  # and a new one is refused while it lasts
        relay.restore()
        time.sleep(0.1)
        again = socket.create_connection(("127.0.0.1", relay.port))
        assert _ask(again, b"three", 2) == b"three"
    finally:
        relay.close()
        upstream.close()


def test_a_relay_pointed_elsewhere_closes_what_it_carried_and_reaches_the_new_one():
    first, second = _echo_server(b"1:"), _echo_server(b"2:")
    relay = chaos.Relay(first.getsockname()[1])
    try:
        conn = socket.create_connection(("127.0.0.1", relay.port))
        assert _ask(conn, b"x", 2) == b"1:x"
        relay.point_at(second.getsockname()[1])
        conn.settimeout(2)
        assert conn.recv(1024) == b""  # a walreceiver sees its connection end, and reconnects ...
        again = socket.create_connection(("127.0.0.1", relay.port))
        assert _ask(again, b"y", 2) == b"2:y"  # ... to the new primary
    finally:
        relay.close()
        first.close()
        second.close()


class _LockThatWaits:
    """A server's lock that, once the fault has taken it, lets a failover take the topology
    before the fault goes on: the interleaving that deadlocked on 16."""

    def __init__(self, taken, failover_in):
        self._lock = threading.Lock()
        self._taken, self._failover_in = taken, failover_in
        self._first = True

    def acquire(self, timeout=-1):
        got = self._lock.acquire(timeout=timeout)
        if got and self._first:
            self._first = False
            self._taken.set()
            self._failover_in.wait(5)
        return got

    def release(self):
        self._lock.release()


def test_a_fault_holding_a_servers_lock_does_not_wait_for_a_failover_that_waits_for_it():
    run = chaos.Run(None, None, None)
    run.roles = {"primary": "a", "sync": "b", "async": "c"}
    taken, failover_in, failover_done = threading.Event(), threading.Event(), threading.Event()
    lock = _LockThatWaits(taken, failover_in)
    run.servers = {"a": type("S", (), {"lock": lock, "name": "a"})()}

    def failover():  # as do_failover: the topology first, then the servers' locks
        taken.wait(5)
        with run.topology:
            failover_in.set()
            if lock.acquire(timeout=5):
                lock.release()
                failover_done.set()

    f = threading.Thread(target=failover, daemon=True)
    f.start()
    with run._locked("primary") as s:
        assert s.name == "a"
    f.join(10)
    assert failover_done.is_set(), "the failover could not take the lock the fault held"


def test_faults_that_step_one_clock_at_once_never_trip_over_each_other(tmp_path):
    """The 30-minute run saw four clock_back_failovers fail: a clock_step on the same server
    wrote the same temporary file and renamed it away first. Now each write is its own and one
    at a time; the file always ends at the last offset written."""
    from idgen_harness import cluster
    clock = cluster.FakeClock(str(tmp_path / "offset"), running=lambda: False)
    last = {}

    def step(k):
        for i in range(300):
            with clock.lock:
                clock.set(f"+{k}.{i:03d}", settle=False)
                last["value"] = f"+{k}.{i:03d}"

    errors = run_threads(step, range(6))
    assert not errors, errors[:3]
    assert (tmp_path / "offset").read_text() == last["value"] + "\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["offset"], "no temporary file left"
