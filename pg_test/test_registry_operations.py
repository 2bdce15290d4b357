"""The registry under the operations people do to it: restored from a dump, started from an older
copy of its data directory, its bounds raised before a failover that loses the raise or lowered
below what its holders hold, a black-holed first host in the servers' connection string, a
restart whose hold-off its owner ends, a server restarted after a crash, a clock ahead of the
registry's. In each, no id is made twice and no operator step is needed for it, and what a server
is told names the cause and the way out.

Real servers on loopback, leases of 3 s (6 s where a reconnect must fit in one), the registry's
bounds set to the fleet's so that hold-offs last seconds, every load bounded, every wait with a
deadline.
"""

import os
import shutil
import subprocess
import time

import pytest
import test_registry
from idgen_harness import cluster
from idgen_harness.chaos import Relay
from idgen_harness.waiting import wait_until
from test_registry import (
    NOT_IN_PREREQUISITE_STATE,
    Load,
    _refusal,
    first_ids,
    fleet_role,
    install_registry,
    kill_server,
    member,
    no_duplicates,
    status,
    wait_reaped,
    worker_of,
)

pytestmark = pytest.mark.version_specific("bgworker")
SQL_RULES = "the registry's rules are plain SQL on its own server; the lease worker's paths run on every version"
registry = test_registry.registry  # the fixture: a registry installed with its defaults


def bounds(reg, lease_ms, grace_ms):
    """The registry's longest lease and grace (idgen_registry.clock), lowered from its defaults
    (a lowering takes effect at once)."""
    reg.q(f"UPDATE idgen_registry.clock SET max_lease_ms = {lease_ms}, max_grace_ms = {grace_ms}", db="registry")


def through(relay, user, extra=""):
    """idgen.registry naming the registry by a relay, as a fleet names it by an address that an
    operator moves to a restored server."""
    return f"idgen.registry = 'host=127.0.0.1 port={relay.port} dbname=registry user={user} {extra}'"


def refusals_saying(load, text):
    return [e for e in load.refusals if text in (e.diag.message_primary or "")]


@pytest.mark.parametrize("route", ["dump", "older copy"])
@pytest.mark.default_and_newest(SQL_RULES)
def test_a_registry_restored_from_a_dump_or_an_older_copy_gives_no_held_worker_id_to_another_server(
        cluster_factory, tmp_path, route):
    """The registry's state is taken before server a claims (a pg_dump, or a cold copy of its data
    directory: a file-level backup, a VM snapshot), a claims and issues under load, the registry
    is lost and brought back from that older state (restored into a new cluster, or started from
    the copy on the same system identifier and timeline), and a new automatic server and a server
    configured with a's worker id start at once, while a, which cannot reach the registry for 8 s
    more, issues on its grace. The restored registry finds by itself that it may have lost claims
    (its data's identity, or its start) and holds new leases off while a re-asserts its own: no id
    twice, a not refused once, the newcomers told why. (Unseen, the new server was given a's id at
    once and both issued.)"""
    reg = cluster_factory("registry", preload=False)
    install_registry(reg)
    bounds(reg, 3000, 15000)
    for role in ("srv_a", "srv_n", "srv_g"):
        fleet_role(reg, role)
    older = str(tmp_path / "older")
    if route == "dump":
        subprocess.run([os.path.join(cluster.pg_bin(), "pg_dump"), "-Fc", "-h", reg.socket_dir, "-p", str(reg.port),
                        "-U", "postgres", "-d", "registry", "-f", older], check=True, capture_output=True)
    else:
        reg.stop()
        shutil.copytree(reg.data_dir, older, symlinks=True)
        reg.start()
        # a clean restart, the documented case for ending its hold-off: a claims at once
        reg.q("SELECT idgen_registry.end_hold_off()", db="registry")
    relay = Relay(reg.port)
    grace = ["idgen.lease_grace = '15s'"]
    a = member(cluster_factory, "a", reg, user="srv_a", conf=[*grace, through(relay, "srv_a")])
    assert first_ids(a, 10)
    held = status(a)["worker_id"]
    # everything that takes time made before a is cut off: the cluster the dump is restored into,
    # and the newcomers (initdb)
    if route == "dump":
        restored = cluster_factory("restored", preload=False)
        restored.q("CREATE DATABASE registry")
        restored.q("CREATE ROLE idgen_fleet NOLOGIN")
        for role in ("srv_a", "srv_n", "srv_g"):
            restored.q(f"CREATE ROLE {role} LOGIN IN ROLE idgen_fleet")
    else:
        restored = reg
    n = member(cluster_factory, "n", restored, user="srv_n", conf=grace, start=False)
    g = member(cluster_factory, "g", restored, worker_id=held, user="srv_g", conf=grace, start=False)
    holder = Load(a, batch=500, pause=0.01)
    newcomers = []
    try:
        time.sleep(1)
        relay.drop()  # a reaches no registry from here until 8 s later, after the newcomers start
        dropped = time.monotonic()
        killed = kill_server(reg)
        if route == "dump":
            done = subprocess.run([os.path.join(cluster.pg_bin(), "pg_restore"), "-h", restored.socket_dir,
                                   "-p", str(restored.port), "-U", "postgres", "-d", "registry", older],
                                  capture_output=True, text=True)
            assert done.returncode == 0, done.stderr
        else:
            wait_reaped(killed)
            shutil.rmtree(reg.data_dir)
            shutil.copytree(older, reg.data_dir, symlinks=True)
            reg.start()
        back = time.monotonic()
        for c in (n, g):
            c.start()
            c.q("CREATE EXTENSION idgen")
        newcomers = [Load(n, batch=500, pause=0.01), Load(g, batch=500, pause=0.01)]
        time.sleep(max(0.0, dropped + 8 - time.monotonic()))
        relay.point_at(restored.port)
        relay.restore()
        wait_until("the new automatic server issuing", lambda: len(newcomers[0].ids) >= 2000, timeout=90)
        took = time.monotonic() - back
        time.sleep(2)
    finally:
        for load in [holder, *newcomers]:
            load.finish()
        relay.close()
    no_duplicates(holder, *newcomers)
    assert not holder.refusals, holder.refusals[:1]
    assert {worker_of(i) for i in holder.ids} == {held}
    assert held not in {worker_of(i) for i in newcomers[0].ids}
    assert not newcomers[1].ids, "the server configured with the held id issued"
    cause = "restored from a dump" if route == "dump" else "it was started"
    off = newcomers[0].refusals[0]
    assert off.pgcode == NOT_IN_PREREQUISITE_STATE and "grants no new lease until" in off.diag.message_primary, off
    assert cause in off.diag.message_primary, off.diag.message_primary
    assert "idgen_registry.end_hold_off()" in off.diag.message_hint, off.diag.message_hint
    clash = f"worker id {held} is leased to another server, a@"
    assert refusals_saying(newcomers[1], clash), newcomers[1].refusals[-1:]
    assert "re-asserted the lease of worker id" in a.log()
    print(f"\n{route}: the new automatic server issued {took:.1f} s after the registry was back; "
          f"a issued {len(holder.ids)} ids, none refused, none twice")


@pytest.mark.default_and_newest(SQL_RULES)
def test_a_raise_of_the_bounds_that_a_failover_loses_is_still_covered_by_the_promoted_registrys_hold_off(
        cluster_factory, tmp_path):
    """The registry's asynchronous standby stops replaying; the owner then raises the longest grace
    from 5 s to 20 s on the primary (it takes effect 15 s later), and server a, configured for a
    20 s grace, is granted 5 s until then and 20 s after. The primary dies, the standby (which
    never saw the raise, or a's claim) is promoted, and a is cut off from it, issuing on its grace.
    The promoted registry's hold-off covers the time its history may have been lost for, so a new
    server is given a's id (never leased, as the standby knows it) only after a's grace has run
    out: no id twice. When a reaches the registry again it is told the registry lost its lease.
    (Held off for its own bounds only, it gave the id away 9 s after the promotion while a issued
    for 20 s.)"""
    reg = cluster_factory("registry", preload=False)
    install_registry(reg)
    bounds(reg, 3000, 5000)
    for role in ("srv_a", "srv_n"):
        fleet_role(reg, role)
    standby = reg.base_backup(str(tmp_path / "registry-standby"), preload=False)
    standby.start()
    cluster.wait_for_replay(reg, standby)
    standby.stop()
    # a is cut off from the standby once it is promoted (before a could reach it): it issues on
    # its grace
    hba = os.path.join(standby.data_dir, "pg_hba.conf")
    with open(hba) as f:
        rules = f.read()
    with open(hba, "w") as f:
        f.write("host registry srv_a 127.0.0.1/32 reject\n" + rules)
    hosts = (f"idgen.registry = 'host=127.0.0.1,127.0.0.1 port={reg.port},{standby.port} dbname=registry"
             " user={user} target_session_attrs=read-write connect_timeout=2'")
    a = member(cluster_factory, "a", reg, user="srv_a",
               conf=["idgen.lease_grace = '20s'", hosts.format(user="srv_a")])
    assert first_ids(a, 10)
    held = status(a)["worker_id"]
    wait_until("a granted 5 s of the 20 s asked for",
               lambda: "grants a lease of 3000 ms and a grace of 5000 ms, less than" in a.log(), timeout=10)
    raise_in = reg.one("UPDATE idgen_registry.clock SET max_grace_ms = 20000"
                       " RETURNING (raise_takes_effect_ms - changed_ms) / 1000.0", db="registry")
    assert raise_in == 15, raise_in

    def granted_s():
        st = status(a)
        return (st["issues_until"] - st["last_renewal"]).total_seconds()

    assert granted_s() <= 8.1
    wait_until("the raise in effect for a", lambda: granted_s() > 22, timeout=25)
    holder = Load(a, batch=500, pause=0.01)
    newcomer = None
    try:
        time.sleep(0.5)
        kill_server(reg)
        standby.start()
        standby.promote()
        promoted = time.monotonic()
        n = member(cluster_factory, "n", standby, user="srv_n", conf=["idgen.lease_grace = '5s'"])
        newcomer = Load(n, batch=500, pause=0.01)
        wait_until("the newcomer issuing", lambda: len(newcomer.ids) >= 2000, timeout=90)
        took = time.monotonic() - promoted
        wait_until("a stopped at its fence", lambda: len(holder.refusals) > 0, timeout=30)
        # a reaches the promoted registry again: its lease went to the newcomer in the new term,
        # and it is told that the registry lost it, not that it ended unrenewed
        with open(hba, "w") as f:
            f.write(rules)
        standby.q("SELECT pg_reload_conf()")
        lost = wait_until("a told its lease was lost", lambda: (
            lambda e: e if e and "the registry lost this server's lease of worker id" in e.diag.message_primary
            else None)(_refusal(a)), timeout=20)
        assert "it began a new term since it granted it" in lost.diag.message_primary, lost
        assert "answered in a term other than the one it granted this server's lease in" in lost.diag.message_detail
        assert status(a)["registry"] == "lost"
    finally:
        holder.finish()
        if newcomer:
            newcomer.finish()
    no_duplicates(holder, newcomer)
    assert {worker_of(i) for i in newcomer.ids} == {held}, "the newcomer was given a's id, as the test means"
    assert all("the lease of worker id" in e.diag.message_primary or "the registry lost this server's lease"
               in e.diag.message_primary for e in holder.refusals), holder.refusals[:1]
    print(f"\nthe newcomer issued under a's worker id {took:.1f} s after the promotion; a issued "
          f"{len(holder.ids)} ids, {len(newcomer.ids)} by the newcomer, none twice")


@pytest.mark.default_and_newest(SQL_RULES)
def test_bounds_lowered_below_what_a_holder_holds_stop_no_server_and_a_raise_waits_as_long_as_it_raises(
        cluster_factory, registry):
    """The owner lowers the longest grace below a running server's idgen.lease_grace: its renewals
    are granted the lower grace (not refused, 22023, as before), it fences at what was granted and
    says so once, and it issues throughout. Raised again, the lease and grace it is granted (their
    sum is what the registry bounds) grow only once the raise is in effect, as long after it as it
    raises."""
    bounds(registry, 3000, 60000)  # the lease the fleet uses: the bounds' sum is what grants grow by
    a = member(cluster_factory, "a", registry, conf=["idgen.lease_grace = '20s'"])
    assert first_ids(a, 10)
    load = Load(a, batch=500, pause=0.02)

    def granted_s():
        st = status(a)
        return (st["issues_until"] - st["last_renewal"]).total_seconds()

    try:
        assert granted_s() > 22
        bounds(registry, 3000, 2000)
        wait_until("a fenced at the lowered grace", lambda: granted_s() < 5.1, timeout=5)
        assert "grants a lease of 3000 ms and a grace of 2000 ms, less than" in a.log()
        raise_in = registry.one("UPDATE idgen_registry.clock SET max_grace_ms = 12000"
                                " RETURNING (raise_takes_effect_ms - changed_ms) / 1000.0", db="registry")
        assert raise_in == 10, raise_in
        time.sleep(3)
        assert granted_s() < 5.1, "a raise was granted before it took effect"
        wait_until("the raise in effect", lambda: granted_s() > 14, timeout=12)
    finally:
        load.finish()
    assert not load.refusals, load.refusals[:1]
    assert len(load.ids) > 10_000


@pytest.mark.default_and_newest(SQL_RULES)
def test_a_black_holed_first_host_costs_each_connection_its_connect_timeout_and_the_live_host_is_reached(
        cluster_factory, registry):
    """idgen.registry names two hosts, the first a black hole (it accepts and never answers: a
    powered-off leader behind a live address), with connect_timeout=2. Each host has its own
    deadline, as libpq gives it: the first claim reaches the live host, and every renewal after
    the registry ends the lease worker's connection does too, within the 9 s lease (grace 0), so
    the server issues throughout. (With one deadline for the whole string, the first host took it
    all and the server never got a lease.)"""
    hole = Relay(registry.port)
    hole.hold()
    fleet_role(registry, "srv_a")
    started = time.monotonic()
    a = member(cluster_factory, "a", registry, user="srv_a", conf=[
        "idgen.lease = '9s'",
        f"idgen.registry = 'host=127.0.0.1,127.0.0.1 port={hole.port},{registry.port} dbname=registry user=srv_a"
        " connect_timeout=2'"])
    try:
        assert first_ids(a, 10, timeout=15)
        first_s = time.monotonic() - started
        load = Load(a, batch=500, pause=0.02)
        try:
            for _ in range(3):
                pids = registry.q("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                                  " WHERE application_name = 'idgen lease worker'")
                assert pids, "the lease worker's connection"
                renewed = status(a)["last_renewal"]
                wait_until("a renewal through the live host",
                           lambda r=renewed: status(a)["last_renewal"] != r and status(a)["registry_reachable"],
                           timeout=10)
        finally:
            load.finish()
    finally:
        hole.close()
    assert not load.refusals, load.refusals[:1]
    assert "on any of its 2 hosts" not in a.log()
    print(f"\nfirst id {first_s:.1f} s after the start (the black hole's 2 s included); three reconnections, "
          f"{len(load.ids)} ids, none refused")


@pytest.mark.default_and_newest(SQL_RULES)
def test_the_owner_alone_ends_a_hold_off_after_a_clean_restart_and_new_servers_get_ids_at_once(
        cluster_factory, registry):
    """A restart of the registry begins a new term (it cannot be told from a start from an older
    copy), held off for its bounds (16 minutes by default). A new server is refused, told why
    and how it ends; a member cannot end it; the owner, who knows the restart was clean, ends it
    with idgen_registry.end_hold_off(), and the server issues at once."""
    registry.stop()
    registry.start()
    fleet_role(registry, "srv_member")
    n = member(cluster_factory, "n", registry)
    e = wait_until("the hold-off's refusal", lambda: _refusal(n), timeout=20)
    assert e.pgcode == NOT_IN_PREREQUISITE_STATE, e
    assert "grants no new lease until" in e.diag.message_primary and "it was started" in e.diag.message_primary, e
    assert status(n)["registry"] == "holding off" and "grants no new lease" in status(n)["last_error"]
    denied = registry.error("SELECT idgen_registry.end_hold_off()", db="registry", user="srv_member")
    assert denied.pgcode == "42501", denied
    assert registry.one("SELECT holding_off FROM idgen_registry.status", db="registry", user="srv_member") is True
    ended = registry.one("SELECT idgen_registry.end_hold_off()", db="registry")
    assert ended is not None
    t0 = time.monotonic()
    assert first_ids(n, 10, timeout=10)
    assert time.monotonic() - t0 < 3
    assert registry.one("SELECT holding_off FROM idgen_registry.status", db="registry") is False


@pytest.mark.default_and_newest(SQL_RULES)
def test_a_crash_restart_held_back_by_its_own_earlier_run_is_told_so_and_when_it_ends(cluster_factory, registry):
    """An automatic server killed under load and started again is a new run; its registry role's
    one lease is still its earlier run's until that lease ends. It is told so, and when, rather
    than to find another role or raise the quota, and takes its id back then."""
    # a grace, so that the earlier run's lease outlasts the reap and the crash recovery: the
    # refusal is seen while it runs
    a = member(cluster_factory, "a", registry, conf=["idgen.lease_grace = '20s'"])
    assert first_ids(a, 10)
    held = status(a)["worker_id"]
    postmaster = kill_server(a)
    wait_reaped(postmaster)
    a.start()
    e = wait_until("the refusal", lambda: _refusal(a), timeout=20)
    assert e.pgcode == NOT_IN_PREREQUISITE_STATE, e
    assert "an earlier run of this server still holds its registry role's lease, until" in e.diag.message_primary, e
    assert f"(worker id {held})" in e.diag.message_detail, e.diag.message_detail
    assert e.diag.message_hint.startswith("Nothing is needed: this server keeps asking, and issues ids from"), e
    st = status(a)
    assert st["registry"] == "earlier run" and st["last_error"] == e.diag.message_primary.split(": ", 1)[1], st
    assert {worker_of(i) for i in first_ids(a, 10, timeout=40)} == {held}


@pytest.mark.default_and_newest(SQL_RULES)
def test_a_server_whose_clock_runs_ahead_of_the_registrys_is_told_it_is_the_clock_and_by_how_much(
        cluster_factory, registry):
    """A server whose clock runs 5 s ahead of the registry's, which allows 0.5 s: its fence lies
    further ahead than a real server's could, so nothing is granted. It says so, 55000, naming its
    clock and about how far ahead it runs, with NTP in the HINT (before, it was told to check the
    registry server and idgen.registry, and its log called the registry misconfigured)."""
    registry.q("UPDATE idgen_registry.clock SET max_clock_skew_ms = 500", db="registry")
    a = member(cluster_factory, "a", registry, start=False)
    a.clock = cluster.IdgenClock(os.path.join(a.base_dir, "idgen-clock-offset"), a.running)
    a.clock.set("+5s", settle=False)
    a.start()
    a.q("CREATE EXTENSION idgen")
    # its first claim refused, or (where it was granted before the offset took hold) its renewals:
    # then it stops at its fence, the clock named in the DETAIL
    wait_until("the clock named", lambda: "this server's clock runs about" in (status(a)["last_error"] or ""),
               timeout=20)
    e = wait_until("the refusal", lambda: _refusal(a), timeout=20)
    assert e.pgcode == NOT_IN_PREREQUISITE_STATE, e
    message = e.diag.message_primary + " " + (e.diag.message_detail or "")
    assert "this server's clock runs about" in message and "ms ahead of the registry's" in message, message
    ahead = int(message.split("runs about ")[1].split(" ms")[0])
    assert 4000 <= ahead <= 6000, message
    assert "NTP" in e.diag.message_hint and "max_clock_skew_ms" in e.diag.message_hint, e.diag.message_hint
    assert status(a)["registry"] in ("clock ahead", "holding"), status(a)
    assert "misconfigured" not in a.log()
    a.clock.set("+0")
    assert first_ids(a, 10, timeout=20)

