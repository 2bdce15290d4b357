"""The registry made highly available: its database on a Patroni pair with synchronous_mode (one
etcd, two plain PostgreSQL members, as in test_patroni.py), three idgen servers leasing from it
through a libpq string naming both members with target_session_attrs=read-write, and the
registry's leader crashed under their load.

The servers' lease (5 s) is shorter than a Patroni failover here (a 10 s TTL: the leader key
expires, then the replica promotes, 10-15 s in all), so they cross the failover on their grace
(idgen.lease_grace = 30 s), and the registry's own rules decide the rest: with synchronous_mode
the promoted member has every claim it acknowledged, and it still knows its term is new (its
timeline) and asks each holder to re-assert its lease. Checked: no statement refused, no id
made twice, each server renewing on the new leader within one lease of its promotion, with the
same worker id, re-asserted.

PostgreSQL 15 only, for the reasons test_patroni.py gives (Debian's Patroni beside Debian's
server); skips without patroni or etcd."""

import datetime
import os
import subprocess
import time

import pytest
from idgen_harness import cluster
from idgen_harness.waiting import wait_until
from test_patroni import ETCD, PATRONI, Stack, wait_streaming
from test_registry import SCHEMA, Load, member, no_duplicates, status, worker_of

LEASE_S, GRACE_S = 5, 30
USERS = ("srv_a", "srv_b", "srv_f")


def install_registry_on(leader):
    """The registry's schema in database registry on the Patroni leader, the fleet's roles, and
    leases of up to LEASE_S with graces of up to GRACE_S (a promoted registry holds new leases off
    for their sum)."""
    leader.q("CREATE DATABASE registry")
    psql = os.path.join(cluster.pg_bin(), "psql")
    done = subprocess.run([psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(leader.port),
                           "-U", "postgres", "-d", "registry", "-f", SCHEMA], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    leader.q(f"UPDATE idgen_registry.clock SET max_lease_ms = {LEASE_S * 1000}, max_grace_ms = {GRACE_S * 1000}",
             db="registry")
    for user in USERS:
        leader.q(f"CREATE ROLE {user} LOGIN IN ROLE idgen_fleet", db="registry")


def both_members(m1, m2, user):
    return (f"idgen.registry = 'host=127.0.0.1,127.0.0.1 port={m1.port},{m2.port} dbname=registry"
            f" user={user} target_session_attrs=read-write connect_timeout=2'")


@pytest.fixture
def stack(tmp_path):
    """etcd and the registry's two Patroni members (synchronous_mode), stopped at the end."""
    s = Stack(str(tmp_path), synchronous_mode=True)
    yield s
    s.close()


def renewed_since(c, moment):
    st = status(c)
    return st["registry_reachable"] is True and st["last_renewal"] is not None and st["last_renewal"] > moment


def test_the_registry_on_patroni_with_synchronous_mode_loses_its_leader_under_three_writers_and_stops_none(
        stack, cluster_factory, pg_major):
    if pg_major != 15:
        pytest.skip(f"the Patroni tests run on PostgreSQL 15 only (Debian's server; this is {pg_major}): "
                    "see test_patroni.py")
    for tool in (PATRONI, ETCD):
        if not os.access(tool, os.X_OK):
            pytest.skip(f"{tool} is missing: apt-get install patroni etcd-server python3-etcd (pg_test/install.sh)")
    stack.start_etcd()
    m1, m2 = stack.member("r1", None), stack.member("r2", None)
    m1.start_patroni()
    wait_until("r1 to bootstrap and lead", lambda: m1.is_leader() and m1.api("/primary")[0] == 200, 90)
    install_registry_on(m1)
    m2.start_patroni()
    wait_until("r2 to stream from r1",
               lambda: m1.q("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'") == [(1,)], 90)
    m1.wake()
    wait_streaming(m1, m2, True)

    def conf(user):
        return [f"idgen.lease = '{LEASE_S}s'", f"idgen.lease_grace = '{GRACE_S}s'", both_members(m1, m2, user)]

    servers = [member(cluster_factory, "a", m1, user="srv_a", conf=conf("srv_a")),
               member(cluster_factory, "b", m1, user="srv_b", conf=conf("srv_b")),
               member(cluster_factory, "f", m1, worker_id=7, user="srv_f", conf=conf("srv_f"))]
    wait_until("three servers issuing", lambda: all(status(c)["registry"] == "holding" for c in servers), 30)
    held = {c.port: status(c)["worker_id"] for c in servers}
    assert len(set(held.values())) == 3 and held[servers[2].port] == 7, held
    # Acknowledged by the synchronous standby: the claims are on r2 before r1 dies.
    on_r2 = m2.q("SELECT worker_id FROM idgen_registry.lease WHERE holder IS NOT NULL ORDER BY 1", db="registry")
    assert [w for (w,) in on_r2] == sorted(held.values()), on_r2
    loads = [Load(c, batch=500, pause=0.01) for c in servers]
    try:
        time.sleep(2)
        m1.crash()
        crashed = time.monotonic()
        wait_until("r2 to take the leader key", m2.is_leader, 60)
        wait_until("r2 to be promoted", lambda: m2.q("SELECT NOT pg_is_in_recovery()") == [(True,)], 30)
        promoted = time.monotonic()
        promoted_at = datetime.datetime.now(datetime.timezone.utc)
        back = {}
        for c in servers:
            wait_until(f"{c.port} renewing on r2", lambda c=c: renewed_since(c, promoted_at), 3 * LEASE_S, step=0.1)
            back[c.port] = time.monotonic() - promoted
        time.sleep(2)
    finally:
        for load in loads:
            load.finish()
    assert all(not load.refusals for load in loads), [load.refusals[:1] for load in loads]
    stored = no_duplicates(*loads)
    for c, load in zip(servers, loads, strict=True):
        assert {worker_of(i) for i in load.ids} == {held[c.port]}
        assert status(c)["worker_id"] == held[c.port]
        assert "re-asserted the lease of worker id" in c.log(), c.log()[-3000:]
        assert back[c.port] <= LEASE_S, back
    print(f"\nthe registry's leader crashed; r2 promoted {promoted - crashed:.1f} s later; the servers "
          f"renewed on it {', '.join(f'{s:.1f}' for s in back.values())} s after its promotion; "
          f"{len(stored)} ids, none refused, none twice")
