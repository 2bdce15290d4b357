"""The worker-id registry: servers lease their worker ids from a PostgreSQL database
(sql/registry/idgen_registry.sql), fail fast on a clash, take free ids with
idgen.worker_id = auto, and resume a reused id after everything its last holder issued.

Every server runs on loopback; leases are short (idgen.lease = 3s) so that ends come quickly,
with no grace (idgen.lease_grace = 0) unless a test gives one; every wait has a deadline, and
every load stops by itself.
"""

import os
import signal
import subprocess
import threading
import time

import psycopg2
import pytest
from idgen_harness import cluster
from idgen_harness.waiting import run_threads, wait_until

pytestmark = pytest.mark.version_specific("bgworker")
# The tests marked with it run on 15 and 18 only (docs/testing.md).
SQL_RULES = "the registry's rules are plain SQL on its own server; the lease worker's paths run on every version"
# The grace is the lease worker's fence arithmetic (the pure core's); its path through a failing
# registry runs on every version in the stopped-registry test.
GRACE_RULES = ("the grace is the pure core's fence arithmetic; the lease worker's path through a failing "
               "registry runs on every version (test_a_stopped_registry_stops_every_server_given_no_grace_...)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA = os.path.join(ROOT, "sql", "registry", "idgen_registry.sql")
LEASE = "3s"
GRACE = "0"  # the lease's end is the fence, as the tests of reuse and cut-offs measure it
SKEW = "500ms"
NOT_IN_PREREQUISITE_STATE = "55000"
NOW_MS = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint"  # the registry's clock, Unix ms
TWITTER_EPOCH_MS = 1288834974657  # idgen.epoch's default
SPACE = f"'twitter', {TWITTER_EPOCH_MS}"  # claim()'s last two arguments: the id space of idgen's defaults


def install_registry(reg, db="registry", layout=None, epoch=None, expect_error=None):
    """The registry's schema in database db of cluster reg, as its owner (postgres), for layout
    and epoch (psql's variables; None: the defaults, Twitter's). With expect_error, psql must
    fail saying it."""
    reg.q(f"CREATE DATABASE {db}")
    psql = os.path.join(cluster.pg_bin(), "psql")
    variables = (["-v", f"layout={layout}"] if layout else []) + (["-v", f"epoch={epoch}"] if epoch else [])
    done = subprocess.run([psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", *variables, "-h", reg.socket_dir,
                           "-p", str(reg.port), "-U", "postgres", "-d", db, "-f", SCHEMA],
                          capture_output=True, text=True)
    if expect_error:
        assert done.returncode != 0 and expect_error in done.stderr, done.stderr
    else:
        assert done.returncode == 0, done.stderr


def fill_all_but_the_last(reg, left=1):
    """Ids below 1024 - left leased for ever to a made-up holder: only the last `left` are free."""
    reg.q("UPDATE idgen_registry.lease SET holder = '1', holder_name = 'filler', holder_role = 'postgres',"
          f" lease_ends_ms = 9e15, claimed_at = now(), renewed_at = now() WHERE worker_id < {1024 - left}",
          db="registry")


def fleet_role(reg, name, db="registry"):
    reg.q(f"CREATE ROLE {name} LOGIN IN ROLE idgen_fleet", db=db)


@pytest.fixture
def registry(cluster_factory):
    reg = cluster_factory("registry", preload=False)
    install_registry(reg)
    return reg


def conninfo(reg, user, db="registry", extra=""):
    return f"host=127.0.0.1 port={reg.port} dbname={db} user={user} {extra}".strip()


def member(cluster_factory, name, reg, worker_id="auto", user=None, conf=(), start=True, **kwargs):
    """An idgen server leasing its worker id from reg, as registry role user (made here)."""
    user = user or f"srv_{name}"
    if not reg.q(f"SELECT 1 FROM pg_roles WHERE rolname = '{user}'"):
        fleet_role(reg, user)
    c = cluster_factory(name, worker_id=worker_id, start=False, conf=[
        f"idgen.registry = '{conninfo(reg, user)}'", f"idgen.lease = '{LEASE}'", f"idgen.lease_grace = '{GRACE}'",
        f"idgen.max_clock_skew = '{SKEW}'", f"cluster_name = '{name}'", *conf], **kwargs)
    if start:
        c.start()
        c.q("CREATE EXTENSION idgen")
    return c


def status(c):
    conn = c.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT * FROM idgen_lease_status()")
            names = [d[0] for d in cur.description]
            return dict(zip(names, cur.fetchone(), strict=True))
    finally:
        conn.close()


def ids(c, n=1000):
    return [r[0] for r in c.q(f"SELECT snowflake_next() FROM generate_series(1, {n})")]


def first_ids(c, n=1000, timeout=30):
    """Ids as soon as the server issues them (it may be waiting for its lease)."""
    got = []

    def attempt():
        try:
            got.extend(ids(c, n))
            return True
        except psycopg2.Error as e:
            # 55000: no lease yet; 58000: waiting for the clock to pass what this server or the
            # id's earlier holders issued ("... behind ...", "... the registry recorded ...")
            if e.pgcode not in (NOT_IN_PREREQUISITE_STATE, "58000"):
                raise
            return False

    wait_until("ids", attempt, timeout=timeout, step=0.2)
    return got


def lease_worker_pid(c):
    """The pid of the server's lease worker (it connects to no database: not in pg_stat_activity)."""
    postmaster = open(os.path.join(c.data_dir, "postmaster.pid")).readline().strip()
    found = subprocess.run(["pgrep", "-P", postmaster, "-f", "idgen lease worker"], capture_output=True, text=True)
    pids = found.stdout.split()
    assert len(pids) == 1, found
    return int(pids[0])


def worker_of(i):
    return (i >> 12) & 1023


# ---- automatic ids ----------------------------------------------------------------------------

def test_five_auto_servers_get_distinct_worker_ids_and_their_ids_never_clash(cluster_factory, registry):
    servers = [member(cluster_factory, f"auto{i}", registry) for i in range(5)]
    workers = [status(s)["worker_id"] for s in servers]
    assert all(w is not None for w in workers), [status(s) for s in servers]
    assert [s.one("SELECT worker_id FROM idgen_stats()") for s in servers] == workers
    worker_pid = lease_worker_pid(servers[0])
    servers[0].reload()  # a reload wakes the lease worker; it keeps running, and its lease
    assert len(set(workers)) == 5, workers
    assert [status(s)["worker_id_source"] for s in servers] == ["registry"] * 5
    # Load all five at once, then merge everything they issued.
    out = [[] for _ in servers]

    def load(k):
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            out[k].extend(ids(servers[k], 5000))

    errors = run_threads(load, range(5))
    assert not errors, errors
    merged = [i for part in out for i in part]
    assert len(merged) > 5 * 5000
    assert len(set(merged)) == len(merged), "two servers issued the same id"
    for k, part in enumerate(out):
        assert {worker_of(i) for i in part} == {workers[k]}
    assert status(servers[0])["worker_id"] == workers[0]
    assert lease_worker_pid(servers[0]) == worker_pid
    holders = registry.q("SELECT worker_id, holder_name, live FROM idgen_registry.holders ORDER BY worker_id",
                         db="registry")
    assert sorted(h[0] for h in holders) == sorted(workers)
    assert all(h[2] for h in holders)
    assert sorted(h[1].split("@")[0] for h in holders) == [f"auto{i}" for i in range(5)]


def test_an_auto_server_without_a_registry_refuses_with_the_way_out(cluster_factory):
    c = cluster_factory("alone", worker_id="auto")
    c.q("CREATE EXTENSION idgen")
    e = c.error("SELECT snowflake_next()")
    assert e.pgcode == NOT_IN_PREREQUISITE_STATE
    assert "needs a registry" in e.diag.message_primary
    assert "idgen_registry.sql" in e.diag.message_hint


# ---- fixed ids, checked -----------------------------------------------------------------------

def test_a_second_server_with_a_taken_fixed_id_refuses_and_names_the_first(cluster_factory, registry):
    first = member(cluster_factory, "first", registry, worker_id=7)
    before = ids(first, 100)
    assert {worker_of(i) for i in before} == {7}
    second = member(cluster_factory, "second", registry, worker_id=7)
    e = second.error("SELECT snowflake_next()")
    assert e.pgcode == NOT_IN_PREREQUISITE_STATE, e
    assert "worker id 7 is leased to another server, first@" in e.diag.message_primary
    assert "lease ends at" in e.diag.message_detail
    assert "idgen_registry.holders" in e.diag.message_hint
    assert "worker id 7 is leased to another server, first@" in second.log()
    assert status(second)["registry"] == "conflict"
    # The first keeps working, and keeps its lease.
    after = ids(first, 100)
    assert min(after) > max(before)
    assert status(first)["registry"] == "holding"


@pytest.mark.default_and_newest(SQL_RULES)
def test_every_id_is_taken_then_the_freed_one_is_reused(cluster_factory, registry):
    """Exhaustion names the registry view; an id freed by a holder's end is taken over."""
    fill_all_but_the_last(registry)
    a = member(cluster_factory, "a", registry)
    assert first_ids(a, 10)
    assert status(a)["worker_id"] == 1023
    b = member(cluster_factory, "b", registry)
    e = b.error("SELECT snowflake_next()")
    assert e.pgcode == NOT_IN_PREREQUISITE_STATE
    assert "all 1,024 are leased" in e.diag.message_primary
    assert "idgen_registry.holders" in e.diag.message_hint


def test_a_fixed_id_cut_off_from_the_registry_stops_at_its_lease_end_and_its_id_is_reused_above_it(
        cluster_factory, registry):
    """A lease nobody renews is freed once it ends, whatever kind of id it was: a fixed-id server
    (the default, idgen.unverified_worker_id = refuse) is fenced as an automatic one is. Cut off
    from the registry under load (its role loses idgen_fleet, so every renewal fails), it stops
    issuing at its fence; an automatic server waiting for the only id left takes that one once the
    lease has ended, and resumes above every id the fixed server stored, while that server keeps
    trying. When the fixed server reaches the registry again, the id is another's: it refuses,
    until a restart claims again."""
    fill_all_but_the_last(registry)
    fixed = member(cluster_factory, "fixed", registry, worker_id=1023)
    fixed.q("CREATE TABLE t (id bigint PRIMARY KEY)")
    assert first_ids(fixed, 10)
    auto = member(cluster_factory, "auto", registry)
    assert "all 1,024 are leased" in _refusal(auto).diag.message_primary
    stop = threading.Event()
    refused = []

    def load():
        while not stop.is_set():
            try:
                fixed.q("INSERT INTO t SELECT snowflake_next() FROM generate_series(1, 500)")
            except psycopg2.Error as e:
                refused.append(e)
                time.sleep(0.05)

    loader = threading.Thread(target=load)
    loader.start()
    try:
        time.sleep(1)
        registry.q("REVOKE idgen_fleet FROM srv_fixed", db="registry")
        got = first_ids(auto, 2000, timeout=30)
        time.sleep(1)  # the fixed server keeps trying after the automatic one issued
    finally:
        stop.set()
        loader.join(timeout=30)
    assert {worker_of(i) for i in got} == {1023}
    stored = [r[0] for r in fixed.q("SELECT id FROM t")]
    assert len(stored) > 1000, len(stored)
    twice = set(stored) & set(got)
    assert not twice, f"the two servers issued {len(twice)} ids each"
    assert min(got) > max(stored), f"{((max(stored) >> 22) - (min(got) >> 22))} ms of the fixed server's reissued"
    assert refused, "the fixed server never stopped"
    last = refused[-1]
    assert last.pgcode == NOT_IN_PREREQUISITE_STATE and "the lease of worker id 1023 ended at" in str(last), last
    registry.q("GRANT idgen_fleet TO srv_fixed", db="registry")
    wait_until("the fixed server to find its id taken", lambda: "lost" in status(fixed)["registry"], timeout=20)
    e = _refusal(fixed)  # after the status: a refusal taken before it may still be the lease's end
    assert "gave the worker id to another server" in e.diag.message_detail, e.diag.message_detail


@pytest.mark.default_and_newest(SQL_RULES)
def test_an_unfenced_fixed_ids_lease_goes_to_no_other_server_but_its_own_next_run(cluster_factory, registry):
    """A fixed-id server under idgen.unverified_worker_id = issue carries on without the registry
    and, restarted while the registry is down, issues before it is asked: its lease, ended or
    released, says nothing of whether it still issues. No automatic claim takes the id, and
    another server configured with it is refused, told why and how the owner frees it; the
    server itself takes it back."""
    fill_all_but_the_last(registry)
    fixed = member(cluster_factory, "fixed", registry, worker_id=1023, conf=["idgen.unverified_worker_id = issue"])
    assert first_ids(fixed, 10)
    fixed.stop()  # released at shutdown, still unfenced
    ended = "SELECT NOT live AND NOT fenced AND released FROM idgen_registry.holders WHERE worker_id = 1023"
    assert registry.q(ended, db="registry") == [(True,)]
    auto = member(cluster_factory, "auto", registry)
    e = wait_until("the exhausted refusal", lambda: _refusal(auto), timeout=20)
    assert "all 1,024 are leased" in e.diag.message_primary, e.diag.message_primary
    other = member(cluster_factory, "other", registry, worker_id=1023)
    e = wait_until("the other's refusal", lambda: _refusal(other), timeout=20)
    assert "unfenced" in e.diag.message_primary and "idgen_registry.free(1023)" in e.diag.message_primary, e
    assert "still kept the id for that server" in e.diag.message_detail, e.diag.message_detail
    assert "does not show that it stopped" in e.diag.message_hint, e.diag.message_hint
    fixed.start()
    assert {worker_of(i) for i in first_ids(fixed, 10)} == {1023}
    assert status(fixed)["registry"] == "holding"


def test_a_third_holder_resumes_above_a_fast_clocked_first_one(registry):
    """Worker id 7 held in turn by A, B and C through claim() itself, with 1-s leases. A's clock is
    a minute ahead, so its fence lies past B's: C, taking the id from B, must still be told A's
    fence, the highest any earlier holder reported (with the last holder's alone, C resumed
    below ids A may have issued). Why that is enough, for any clocks: the property test
    a_third_holder_resumes_above_a_fast_clocked_first_one in src/core/src/lease.rs."""
    def claim(role, holder, fence_ahead_ms):
        return registry.q(f"SELECT outcome, predecessor_fence_ms, predecessor_ends_ms FROM idgen_registry.claim("
                          f"'{holder}', '1', '{role}', 7, 1000, 0, {NOW_MS} + {fence_ahead_ms}, {SPACE})",
                          db="registry", user=role)[0]

    def take_over(role, holder, fence_ahead_ms):
        row = wait_until(f"{role} to take worker id 7 over",
                         lambda: (r := claim(role, holder, fence_ahead_ms))[0] != "conflict" and r, timeout=10)
        assert row[0] == "taken_over", row
        return row

    for role in ("holder_a", "holder_b", "holder_c"):
        fleet_role(registry, role)
    # The owner lets members report a clock this far ahead (the default bound is 1 s).
    registry.q("UPDATE idgen_registry.clock SET max_clock_skew_ms = 61000", db="registry")
    outcome, _, _ = claim("holder_a", "101", 61_000)
    assert outcome == "claimed"
    a_fence = registry.one("SELECT fence_ms FROM idgen_registry.lease WHERE worker_id = 7", db="registry")
    _, fence_seen_by_b, a_end = take_over("holder_b", "102", 1_000)
    assert fence_seen_by_b == a_fence
    b_fence, b_end = registry.q("SELECT fence_ms, lease_ends_ms FROM idgen_registry.lease WHERE worker_id = 7",
                                db="registry")[0]
    assert b_fence < a_fence, "B's own fence must lie below A's for this test to mean anything"
    _, fence_seen_by_c, ends_seen_by_c = take_over("holder_c", "103", 1_000)
    assert fence_seen_by_c == a_fence, f"C is told fence {fence_seen_by_c}, A's was {a_fence}"
    assert ends_seen_by_c == b_end > a_end


@pytest.mark.default_and_newest(SQL_RULES)
def test_a_fixed_id_whose_server_is_gone_for_good_is_freed_by_the_owner_and_reused_above_it(cluster_factory,
                                                                                            registry):
    """A fixed-id server under idgen.unverified_worker_id = issue that is gone for good keeps its
    id from automatic claims, which cannot tell it from one cut off from the registry and still
    issuing; the exhausted server's HINT names the way out, only the registry's owner may take it
    (idgen_registry.free()), and the automatic server that then takes the id resumes above every
    id the gone server stored."""
    fill_all_but_the_last(registry)
    gone = member(cluster_factory, "gone", registry, worker_id=1023,
                  conf=["idgen.lease = '1s'", "idgen.unverified_worker_id = issue"])
    gone.q("CREATE TABLE t (id bigint PRIMARY KEY)")
    gone.q("INSERT INTO t SELECT snowflake_next() FROM generate_series(1, 5000)")
    wait_reaped(kill_server(gone))
    ended = "SELECT NOT live AND NOT fenced FROM idgen_registry.holders WHERE worker_id = 1023"
    wait_until("the lease to end", lambda: registry.q(ended, db="registry") == [(True,)])
    auto = member(cluster_factory, "auto", registry)
    e = wait_until("the exhausted refusal", lambda: _refusal(auto), timeout=20)
    assert "all 1,024 are leased" in e.diag.message_primary, e.diag.message_primary
    assert "SELECT idgen_registry.free(worker_id)" in e.diag.message_hint, e.diag.message_hint
    assert "never given to another server until the registry's owner frees it" in e.diag.message_detail, e
    assert registry.error("SELECT idgen_registry.free(1023)", db="registry", user="srv_auto").pgcode == "42501"
    freed = registry.one("SELECT idgen_registry.free(1023)", db="registry")
    assert freed.startswith("gone@"), freed
    got = first_ids(auto, 1000, timeout=30)
    assert {worker_of(i) for i in got} == {1023}
    gone.start()  # to read what it stored: its id is the automatic server's now
    assert min(got) > gone.one("SELECT max(id) FROM t")
    assert gone.error("SELECT snowflake_next()").pgcode == NOT_IN_PREREQUISITE_STATE
    e = registry.error("SELECT idgen_registry.free(1023)", "DELETE FROM idgen_registry.lease WHERE worker_id = 5",
                       "SELECT idgen_registry.free(5)", db="registry")
    assert e.pgcode == "P0002" and "held by no server" in e.diag.message_primary, e


@pytest.mark.default_and_newest(SQL_RULES)
def test_a_member_holding_a_claim_open_or_reaching_for_a_live_lease_blocks_no_one(cluster_factory, registry):
    """A member role claims an id and keeps its transaction open for three leases, after trying to
    claim a live lease of another server in it: claims lock rows, not the table, and a claim of
    someone else's live lease locks nothing, so the other servers renew and issue throughout,
    and a server that starts meanwhile gets an id. (With the table lock of before, the renewals
    waited, failed with 55P03 after 2 s, and the automatic servers stopped at their leases' end.)"""
    a, b = member(cluster_factory, "a", registry), member(cluster_factory, "b", registry)
    assert first_ids(a, 10) and first_ids(b, 10)
    a_id = status(a)["worker_id"]
    fleet_role(registry, "rogue")
    conn = registry.connect(db="registry", user="rogue")
    conn.autocommit = False
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT outcome FROM idgen_registry.claim('99', '1', 'rogue', NULL, 3000, 0,"
                        f" {NOW_MS} + 3000, {SPACE})")
            assert cur.fetchone() == ("claimed",)
            cur.execute(f"SELECT outcome FROM idgen_registry.claim('99', '1', 'rogue', {a_id}, 3000, 0, NULL, {SPACE})")
            assert cur.fetchone() == ("conflict",)
            loads = [Load(a), Load(b)]
            late = member(cluster_factory, "late", registry)
            assert first_ids(late, 10, timeout=20)
            time.sleep(3 * 3)  # three leases, the rogue's transaction open all along
            for load in loads:
                load.finish()
    finally:
        conn.rollback()
        conn.close()
    for load in loads:
        assert not load.refusals, load.refusals[:3]
        assert len(load.ids) > 10_000
    no_duplicates(*loads)
    assert status(a)["worker_id"] == a_id
    assert all(status(c)["registry"] == "holding" for c in (a, b, late))


@pytest.mark.default_and_newest(SQL_RULES)
def test_a_member_that_claims_every_id_gets_its_quota_and_no_more(cluster_factory, registry):
    """One statement claiming ids 2 to 1023 under made-up holders (with no quota it left no id
    for anyone, for good) gets the one live lease a role may hold; an honest server still
    gets an id, and the owner's quota is what allows a role more."""
    fleet_role(registry, "greedy")
    claims = ("SELECT c.outcome, count(*) FROM pg_catalog.generate_series(2, 1023) AS g,"
              f" LATERAL idgen_registry.claim((1000 + g)::text, '1', 'greedy', g, 60000, 0, NULL, {SPACE}) AS c"
              " GROUP BY c.outcome ORDER BY c.outcome")
    assert registry.q(claims, db="registry", user="greedy") == [("claimed", 1), ("over_quota", 1021)]
    honest = member(cluster_factory, "honest", registry)
    assert first_ids(honest, 10)
    allow(registry, "greedy", 3)
    # the first one's lease renewed (held), two more
    assert registry.q(claims, db="registry", user="greedy") == [("claimed", 2), ("held", 1), ("over_quota", 1019)]


@pytest.mark.default_and_newest(SQL_RULES)
def test_a_member_that_releases_unfenced_leases_one_after_another_still_gets_its_quota_and_no_more(
        cluster_factory, registry):
    """An unfenced lease (a fixed id whose server issues without the registry) goes to no other
    server until the owner frees it, ended or released. A member that claims fixed ids unfenced
    and releases each at once, to claim the next, would keep every id for good: such leases count
    towards the role's quota until the owner frees them, so it gets one, and an honest server
    still gets an id. An automatic claim must give its fence."""
    fill_all_but_the_last(registry, left=24)  # the member reaches for ids 1000-1023
    fleet_role(registry, "hoarder")
    conn = registry.connect(db="registry", user="hoarder")
    outcomes = {}
    try:
        with conn.cursor() as cur:
            for g in range(1000, 1024):
                cur.execute(f"SELECT outcome FROM idgen_registry.claim(%s, '1', 'hoarder', %s, 1000, 0, NULL, {SPACE})",
                            (str(2000 + g), g))
                outcome = cur.fetchone()[0]
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
                cur.execute("SELECT idgen_registry.release(%s, '1', 0)", (str(2000 + g),))
    finally:
        conn.close()
    assert outcomes == {"claimed": 1, "over_quota": 23}, outcomes
    kept = registry.one("SELECT count(*) FROM idgen_registry.lease WHERE holder_role = 'hoarder'", db="registry")
    assert kept == 1
    honest = member(cluster_factory, "honest", registry)
    assert {worker_of(i) for i in first_ids(honest, 10, timeout=20)} <= set(range(1001, 1024))
    e = registry.error(f"SELECT idgen_registry.claim('4000', '1', 'hoarder', NULL, 1000, 0, NULL, {SPACE})",
                       db="registry", user="hoarder")
    assert e.pgcode == "22023" and "must give its fence" in e.diag.message_primary, e


@pytest.mark.default_and_newest(SQL_RULES)
def test_an_unfenced_lease_freed_long_after_it_ended_is_taken_above_the_moment_it_was_freed(registry):
    """A fixed id under idgen.unverified_worker_id = issue may issue long past its lease's end, cut
    off from the registry: the owner frees it once that server has stopped, and whoever takes the
    id must resume after that moment (plus its own idgen.max_clock_skew), not after the lease's
    old end, which says nothing of the ids it issued since."""
    for role in ("cut_off", "next_one"):
        fleet_role(registry, role)
    first = registry.q("SELECT outcome, lease_ends_ms FROM idgen_registry.claim('201', '1', 'cut_off', 7, 1000, 0,"
                       f" NULL, {SPACE})", db="registry", user="cut_off")[0]
    assert first[0] == "claimed"
    time.sleep(2.5)  # its lease ends; the server, unfenced, issues on
    freed_at = registry.one(f"SELECT {NOW_MS}", db="registry")
    registry.q("SELECT idgen_registry.free(7)", db="registry")
    outcome, ends_seen = registry.q(f"SELECT outcome, predecessor_ends_ms FROM idgen_registry.claim('202', '1',"
                                    f" 'next_one', 7, 1000, 0, {NOW_MS} + 1000, {SPACE})",
                                    db="registry", user="next_one")[0]
    assert outcome == "taken_over"
    assert ends_seen >= freed_at - 1 > first[1] + 1000, (ends_seen, freed_at, first[1])


def test_no_member_can_lock_a_server_out_of_its_worker_id_by_naming_its_system_identifier(cluster_factory,
                                                                                          registry):
    """The registry authenticates a member's role, not the system identifier it names. While a
    fixed-id server restarts cleanly, another member claims and releases its id, first as itself,
    then naming the server's system identifier, and marks every id with that identifier too. The
    server still takes its id back, above what was reported; another role naming the identifier
    still gets an automatic id; a member sees no other role's system identifier; and the owner's
    free() clears the holder it names."""
    victim = member(cluster_factory, "victim", registry, worker_id=5)
    first_ids(victim, 10)
    sysid = str(victim.one("SELECT system_identifier FROM pg_control_system()"))
    victim.stop()  # a clean stop releases worker id 5
    for role in ("idgen_evil", "other_role"):
        fleet_role(registry, role)

    def claim_and_release(holder, worker_id):
        outcome = registry.one(f"SELECT outcome FROM idgen_registry.claim('{holder}', '1', 'evil', {worker_id}, 1000,"
                               f" 0, {NOW_MS} + 1000, {SPACE})", db="registry", user="idgen_evil")
        registry.q(f"SELECT idgen_registry.release('{holder}', '1', 0)", db="registry", user="idgen_evil")
        return outcome

    assert claim_and_release("424242", 5) == "taken_over"
    assert claim_and_release(sysid, 5) == "taken_over"
    # Each id claimed, then released (the release takes the claim's row, so it runs after it).
    marked = registry.q(f"SELECT c.outcome, count(*) FROM generate_series(0, 1023) AS g,"
                        f" LATERAL idgen_registry.claim('{sysid}', '1', 'evil', g, 1000, 0, {NOW_MS} + 1000,"
                        f" {SPACE}) AS c, LATERAL idgen_registry.release('{sysid}', '1', c.worker_id * 0) AS r"
                        f" GROUP BY 1 ORDER BY 1", db="registry", user="idgen_evil")
    assert marked == [("claimed", 1023), ("resumed", 1)], marked  # 5: its own claim just before
    victim.start()
    got = first_ids(victim, 1000, timeout=20)
    assert {worker_of(i) for i in got} == {5}
    assert status(victim)["registry"] == "holding"
    outcome = registry.one(f"SELECT outcome FROM idgen_registry.claim('{sysid}', '1', 'x', NULL, 1000, 0,"
                           f" {NOW_MS} + 1000, {SPACE})", db="registry", user="other_role")
    assert outcome == "taken_over", outcome
    seen = registry.q("SELECT holder_role, holder IS NOT NULL FROM idgen_registry.holders WHERE worker_id = 5",
                      db="registry", user="idgen_evil")
    assert seen == [("srv_victim", False)], seen
    assert registry.q("SELECT holder FROM idgen_registry.holders WHERE worker_id = 5", db="registry") == [(sysid,)]
    # An unfenced lease keeps its id from everyone but its own server until the owner frees it:
    # then nothing of its holder is left.
    assert registry.one(f"SELECT outcome FROM idgen_registry.claim('{sysid}', '2', 'evil', 9, 1000, 0, NULL, {SPACE})",
                        db="registry", user="idgen_evil") == "resumed"
    assert registry.one("SELECT idgen_registry.free(9)", db="registry").startswith("evil (system identifier")
    assert registry.q("SELECT holder, holder_role, holder_name, holder_run FROM idgen_registry.lease"
                      " WHERE worker_id = 9", db="registry") == [(None, None, None, None)]


@pytest.mark.default_and_newest(SQL_RULES)
def test_no_member_can_make_the_next_holder_of_an_id_wait_by_reporting_a_horizon_far_ahead(cluster_factory,
                                                                                           registry):
    """A member may report a horizon, fence or last millisecond only as far ahead of the registry's
    clock as a real server's could be: the clock skew the registry allows (1 s unless its owner
    sets more) plus idgen's 1-s horizon lead, not 10 minutes. Where the owner allows more, a
    server held back by what the registry recorded says so, naming the registry and the holder."""
    fleet_role(registry, "idgen_evil")

    def evil(horizon, fence, worker_id=1023):
        return (f"SELECT outcome FROM idgen_registry.claim('42', '1', 'evil@nowhere', {worker_id}, 1000,"
                f" {NOW_MS} + {horizon}, {NOW_MS} + {fence}, {SPACE})")

    # answered, not raised: what the server's clock is read to be ahead by, and what is allowed
    for sql, ahead in ((evil(599_000, 1_000), 598_000), (evil(0, 599_000), 598_000), (evil(2_500, 1_000), 1_500),
                       (evil(0, 2_500), 1_500)):
        got = registry.q(sql.replace("SELECT outcome", "SELECT outcome, clock_ahead_ms, allowed_skew_ms, worker_id"),
                         db="registry", user="idgen_evil")
        assert len(got) == 1 and got[0][0] == "clock_ahead" and got[0][2] == 1000, (sql, got)
        assert ahead - 50 <= got[0][1] <= ahead, (sql, got)  # the registry's clock moved on a little
    assert not registry.q("SELECT 1 FROM idgen_registry.holders", db="registry"), "nothing was leased"
    assert registry.one(evil(1_900, 1_900), db="registry", user="idgen_evil") == "claimed"
    e = registry.error(f"SELECT idgen_registry.release('42', '1', {NOW_MS} + 599000)", db="registry", user="idgen_evil")
    assert e.pgcode == "22023" and "further ahead" in e.diag.message_primary, e
    registry.q(f"SELECT idgen_registry.release('42', '1', {NOW_MS} + 1900)", db="registry", user="idgen_evil")

    registry.q("UPDATE idgen_registry.clock SET max_clock_skew_ms = 600000", db="registry")
    fill_all_but_the_last(registry)
    assert registry.one(evil(599_000, 1_000), db="registry", user="idgen_evil") == "resumed"
    registry.q("SELECT idgen_registry.release('42', '1', 0)", db="registry", user="idgen_evil")
    auto = member(cluster_factory, "auto", registry)

    def held_back():
        try:
            auto.q("SELECT snowflake_next()")
            raise AssertionError("snowflake_next() issued an id")
        except psycopg2.Error as e:
            return e if e.pgcode == "58000" else None

    e = wait_until("the refusal", held_back, timeout=20)
    assert "the registry recorded worker id 1023's earlier holders as having issued ids up to then" \
        in e.diag.message_primary, e.diag.message_primary
    assert "took worker id 1023 over from evil@nowhere (idgen.registry)" in e.diag.message_detail, e
    assert "idgen_registry.clock" in e.diag.message_hint, e.diag.message_hint


@pytest.mark.default_and_newest(SQL_RULES)
def test_a_members_holder_name_is_printable_ascii_or_refused(registry):
    """A holder's name reaches other servers' errors and logs: a control character is refused."""
    for name in ("x\nLOG:  forged", "tab\there", "\u202eevil", ""):
        literal = "'" + name.replace("'", "''") + "'"
        e = registry.error(f"SELECT * FROM idgen_registry.claim('1', '1', {literal}, NULL, 1000, 0,"
                           f" {NOW_MS} + 1000, {SPACE})", db="registry")
        assert e.pgcode == "22023" and "printable ASCII" in e.diag.message_primary, (name, e)


def test_a_terminated_lease_worker_is_restarted_and_keeps_the_lease(cluster_factory, registry):
    c = member(cluster_factory, "c", registry)
    assert first_ids(c, 10)
    held = status(c)["worker_id"]
    before = lease_worker_pid(c)
    os.kill(before, signal.SIGTERM)
    after = wait_until("a new lease worker", lambda: (p := _pid_or_none(c)) not in (None, before) and p)
    assert after != before
    wait_until("a renewal by the new worker", lambda: status(c)["registry"] == "holding"
               and status(c)["last_renewal"] is not None, timeout=10)
    time.sleep(4)  # longer than the 3 s lease: only renewals keep it
    assert status(c)["worker_id"] == held and ids(c, 10)


def test_a_server_stops_at_once_while_its_lease_worker_waits_for_the_registry(cluster_factory, registry):
    """A fast shutdown whose SIGTERM reaches the lease worker while it waits for the registry's
    answer (here every claim waits 2 s for a lock the registry's owner holds): the worker once
    read that SIGTERM there, forgot it, and renewed for ever, so pg_ctl stop gave up after 60 s."""
    c = member(cluster_factory, "waiting", registry)
    assert first_ids(c, 10)
    blocker = registry.connect(db="registry")
    try:
        with blocker.cursor() as cur:
            cur.execute("BEGIN; LOCK TABLE idgen_registry.lease IN ACCESS EXCLUSIVE MODE")
        # the worker's next renewals wait on the lock (each for its 2 s lock_timeout)
        wait_until("a renewal waiting on the lock", lambda: registry.one(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = 'registry'") > 0,
            timeout=15)
        for _ in range(3):  # land the SIGTERM inside a wait, whatever the phase of its retries
            c.stop()  # raises when pg_ctl gives up on the shutdown (60 s)
            c.start()
            wait_until("a renewal waiting on the lock again", lambda: registry.one(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = 'registry'") > 0,
                timeout=15)
    finally:
        blocker.close()


def _pid_or_none(c):
    try:
        return lease_worker_pid(c)
    except AssertionError:
        return None


def test_an_unverified_fixed_id_is_confirmed_once_the_registry_answers(cluster_factory, registry):
    """Issued on before the registry answers (idgen.unverified_worker_id = issue), a fixed id is
    confirmed by the registry's first grant. The registry's start begins a new term, whose
    hold-off (its bounds, set to this test's lease, and the time it was down) the id waits out
    unconfirmed."""
    registry.q("UPDATE idgen_registry.clock SET max_lease_ms = 3000, max_grace_ms = 0", db="registry")
    c = member(cluster_factory, "early", registry, worker_id=21, conf=["idgen.unverified_worker_id = issue"],
               start=False)
    registry.stop()
    c.start()
    c.q("CREATE EXTENSION idgen")
    assert {worker_of(i) for i in first_ids(c, 10)} == {21}
    assert status(c)["registry"] == "unverified"
    registry.start()
    wait_until("the id confirmed", lambda: status(c)["registry"] == "holding", timeout=20)
    assert ids(c, 10)
    assert registry.q("SELECT worker_id FROM idgen_registry.holders", db="registry") == [(21,)]


# ---- a holder dies; its id is reused ----------------------------------------------------------

def kill_server(c):
    """kill -9 the postmaster and every process of the server."""
    pid = int(open(os.path.join(c.data_dir, "postmaster.pid")).readline())
    children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    os.kill(pid, signal.SIGKILL)
    for child in children:
        try:
            os.kill(int(child), signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait_until("the server's processes to go", lambda: not subprocess.run(
        ["pgrep", "-P", str(pid)], capture_output=True).stdout, timeout=10)
    return pid


def wait_reaped(pid):
    """Until the killed postmaster is reaped: a zombie still holds postmaster.pid for a start."""
    wait_until("the killed postmaster to be reaped", lambda: not os.path.exists(f"/proc/{pid}"), timeout=60)


@pytest.mark.parametrize("clock", ["same", "2s-behind"])
@pytest.mark.default_and_newest(SQL_RULES)
def test_a_killed_holders_id_is_reused_only_above_everything_it_stored(cluster_factory, registry, clock):
    # Only one id is free, so the new server must take over the dead one's.
    fill_all_but_the_last(registry)
    # A 1 s lease (renewed every 333 ms): the id is free again at most 1 s after the kill, so a
    # clock 2 s behind would reach back into the dead server's ids without the reuse floor.
    short = ["idgen.lease = '1s'"]
    dead = member(cluster_factory, "dead", registry, conf=short)
    dead.q("CREATE TABLE t (id bigint PRIMARY KEY)")
    assert first_ids(dead, 10)
    stop = time.monotonic() + 3
    while time.monotonic() < stop:
        dead.q("INSERT INTO t SELECT snowflake_next() FROM generate_series(1, 2000)")
    loader = threading.Thread(target=lambda: _insert_until_killed(dead))
    loader.start()
    time.sleep(0.5)
    postmaster = kill_server(dead)
    killed_at = time.monotonic()
    loader.join(timeout=30)

    new = member(cluster_factory, "new", registry, start=False, fake_clock=(clock != "same"), conf=short)
    if clock != "same":
        new.clock.set("-2s", settle=False)
    new.start()
    new.q("CREATE EXTENSION idgen")
    got = first_ids(new, 2000, timeout=60)
    took = time.monotonic() - killed_at
    assert status(new)["worker_id"] == 1023
    wait_reaped(postmaster)
    dead.start()  # to read what it stored: it issues nothing (its id is gone)
    stored_max = dead.one("SELECT max(id) FROM t")
    stored = dead.one("SELECT count(*) FROM t")
    assert min(got) > stored_max, f"{((stored_max >> 22) - (min(got) >> 22))} ms of the dead server's reissued"
    print(f"\n{clock}: dead server stored {stored} ids; the new one issued after {took:.1f} s, "
          f"every id above the dead one's")
    e = dead.error("SELECT snowflake_next()")
    assert e.pgcode == NOT_IN_PREREQUISITE_STATE


def _insert_until_killed(c):
    try:
        while True:
            c.q("INSERT INTO t SELECT snowflake_next() FROM generate_series(1, 2000)")
    except psycopg2.Error:
        return


# ---- the registry stops -----------------------------------------------------------------------

@pytest.mark.alone
def test_a_stopped_registry_stops_every_server_given_no_grace_at_its_lease_end_but_a_fixed_one_told_to_issue(
        cluster_factory, registry):
    """The lease is the right to issue, for automatic and fixed ids alike: with the registry down
    and no grace (idgen.lease_grace = 0), each stops at the end of the lease it could not renew
    (3 s, renewed every second), and resumes above its old ids once the registry answers again.
    Only a fixed id under idgen.unverified_worker_id = issue carries on. (The registry's start
    begins a new term, whose hold-off, its bounds set to this test's lease plus the time it was
    down, the servers whose leases ended wait out.)"""
    registry.q("UPDATE idgen_registry.clock SET max_lease_ms = 3000, max_grace_ms = 0", db="registry")
    auto = member(cluster_factory, "auto", registry)
    fixed = member(cluster_factory, "fixed", registry, worker_id=900)
    lenient = member(cluster_factory, "lenient", registry, worker_id=901, conf=["idgen.unverified_worker_id = issue"])
    before = {c.port: first_ids(c, 100) for c in (auto, fixed, lenient)}
    registry.stop()
    stopped = time.monotonic()

    def refused(c):
        def attempt():
            try:
                ids(c, 100)
                return None
            except psycopg2.Error as e:
                return e
        return attempt

    for name, c in (("auto", auto), ("fixed", fixed)):
        e = wait_until(f"{name} to stop", refused(c), timeout=15)
        waited = time.monotonic() - stopped
        assert e.pgcode == NOT_IN_PREREQUISITE_STATE, e
        assert "the lease of worker id" in e.diag.message_primary and "ended at" in e.diag.message_primary
        assert "could not renew it" in e.diag.message_detail
        assert waited <= 3.5, (name, waited)
    assert ids(lenient, 100), "the fixed-id server told to issue carries on"
    wait_until("a WARNING per failed renewal",
               lambda: "could not renew the lease of worker id 901 in the registry; this server carries on"
               in lenient.log())
    assert "could not renew the lease of worker id 900 in the registry; ids go on until" in fixed.log()
    st = status(auto)
    assert st["registry_reachable"] is False and st["last_error"]
    registry.start()
    for c in (auto, fixed):
        after = first_ids(c, 100, timeout=20)
        assert min(after) > max(before[c.port])
        assert status(c)["registry_reachable"] is True


@pytest.mark.default_and_newest(GRACE_RULES)
def test_writes_go_on_through_a_registry_outage_longer_than_the_lease_and_no_id_is_made_twice(cluster_factory,
                                                                                            registry):
    """With a grace (idgen.lease_grace), a server that holds a lease issues on while the registry
    cannot be reached, past its lease's end: two automatic servers and a fixed-id one, loaded, keep
    issuing through a registry outage of four leases (3 s leases, a 20 s grace), not one statement
    refused, no id made twice, and each renews when the registry is back. (docs/registry.md gives
    a 10-minute outage, benches/registry_outage.py.)"""
    grace = ["idgen.lease_grace = '20s'"]
    servers = [member(cluster_factory, "a", registry, conf=grace), member(cluster_factory, "b", registry, conf=grace),
               member(cluster_factory, "f", registry, worker_id=600, conf=grace)]
    for c in servers:
        assert first_ids(c, 10)
    loads = [Load(c, batch=500, pause=0.02) for c in servers]
    try:
        time.sleep(1)
        registry.stop()
        at_stop = [len(load.ids) for load in loads]
        time.sleep(12)
        during = [len(load.ids) - n for load, n in zip(loads, at_stop, strict=True)]
        registry.start()
        for c in servers:
            wait_until(f"{c.port} renewing again", lambda c=c: status(c)["registry_reachable"] is True, timeout=20)
    finally:
        for load in loads:
            load.finish()
    assert all(not load.refusals for load in loads), [load.refusals[:1] for load in loads]
    assert all(n > 0 for n in during), f"ids issued during the outage, per server: {during}"
    no_duplicates(*loads)
    for load in loads:
        assert load.ids == sorted(load.ids) and len({worker_of(i) for i in load.ids}) == 1
    assert "ids go on until" in servers[2].log()
    print(f"\nthrough a 12 s registry outage (3 s leases, 20 s grace): {during} ids issued, none refused")


@pytest.mark.default_and_newest(GRACE_RULES)
def test_a_server_cut_off_from_the_registry_issues_through_its_grace_and_its_id_goes_to_no_other_server(
        cluster_factory, registry):
    """A server cut off from a registry that others still reach (its role loses idgen_fleet, so
    every renewal fails) issues on through its grace, and the registry keeps its id from an
    automatic server waiting for the only id left, for the lease plus the grace: the waiting one
    is refused throughout, and the cut-off one renews the same lease once it reaches the
    registry again. No statement of the cut-off server is refused."""
    fill_all_but_the_last(registry)
    fixed = member(cluster_factory, "fixed", registry, worker_id=1023, conf=["idgen.lease_grace = '12s'"])
    assert first_ids(fixed, 10)
    auto = member(cluster_factory, "auto", registry)
    assert "all 1,024 are leased" in _refusal(auto).diag.message_primary
    load = Load(fixed, batch=500, pause=0.02)
    try:
        time.sleep(0.5)
        registry.q("REVOKE idgen_fleet FROM srv_fixed", db="registry")
        deadline = time.monotonic() + 7  # past the 3 s lease, within the lease and grace (15 s)
        while time.monotonic() < deadline:
            e = _refusal(auto)
            assert e is not None and "all 1,024 are leased" in e.diag.message_primary, e
            time.sleep(0.5)
        registry.q("GRANT idgen_fleet TO srv_fixed", db="registry")
        wait_until("the cut-off server renewing", lambda: status(fixed)["registry_reachable"] is True, timeout=20)
        assert status(fixed)["registry"] == "holding"
    finally:
        load.finish()
    assert not load.refusals, load.refusals[:1]
    assert "all 1,024 are leased" in _refusal(auto).diag.message_primary


def registry_pair(cluster_factory, tmp_path, roles):
    """A registry and an asynchronous streaming standby of it that has the schema and the
    registry roles, then stopped: it misses every claim from here on, as a standby lagging
    behind does. Leases of up to 15 s and graces of up to 5 s: a hold-off of 20 s."""
    reg = cluster_factory("registry", preload=False)
    install_registry(reg)
    reg.q("UPDATE idgen_registry.clock SET max_lease_ms = 15000, max_grace_ms = 5000", db="registry")
    for role in roles:
        fleet_role(reg, role)
    standby = reg.base_backup(str(tmp_path / "registry-standby"), preload=False)
    standby.start()
    cluster.wait_for_replay(reg, standby)
    standby.stop()
    return reg, standby


def both_hosts(reg, standby, user):
    return (f"idgen.registry = 'host=127.0.0.1,127.0.0.1 port={reg.port},{standby.port} dbname=registry"
            f" user={user} target_session_attrs=read-write'")


@pytest.mark.default_and_newest(SQL_RULES)
def test_a_registry_failover_to_a_standby_that_missed_the_last_claims_stops_no_writer_and_makes_no_id_twice(
        cluster_factory, tmp_path):
    """The registry's standby stopped before two servers claimed (an automatic one and one with
    fixed id 5), so it has neither lease; the registry is killed under their load and the standby
    promoted. A new automatic server and a second server configured with id 5 start at once. The
    promoted registry knows its term is new (its timeline): it grants no new lease for the longest
    lease and grace it allows (20 s), while the two holders re-assert theirs at their next
    renewal; then the new automatic server gets an id of its own, and the second id-5 server is
    refused, naming the first. No statement of the two holders is refused, and no id is made
    twice (without the new term, the new server took the automatic holder's id and both issued)."""
    roles = ["srv_a", "srv_f", "srv_b", "srv_g"]
    reg, standby = registry_pair(cluster_factory, tmp_path, roles)

    def conf(user):
        return ["idgen.lease = '15s'", "idgen.lease_grace = '5s'", both_hosts(reg, standby, user)]

    a = member(cluster_factory, "a", reg, user="srv_a", conf=conf("srv_a"))
    f = member(cluster_factory, "f", reg, worker_id=5, user="srv_f", conf=conf("srv_f"))
    for c in (a, f):
        assert first_ids(c, 10)
    held_by_a = status(a)["worker_id"]
    holders = [Load(a, batch=1000, pause=0.002), Load(f, batch=1000, pause=0.002)]
    newcomers = []
    try:
        # Just after a renewal of a's, so that the newcomers claim before a's next one (every 5 s).
        renewed = status(a)["last_renewal"]
        wait_until("a renewal of a's", lambda: status(a)["last_renewal"] != renewed, timeout=10, step=0.05)
        kill_server(reg)
        standby.start()
        standby.promote()
        promoted = time.monotonic()
        b = member(cluster_factory, "b", standby, user="srv_b", start=False, conf=conf("srv_b"))
        g = member(cluster_factory, "g", standby, worker_id=5, user="srv_g", start=False, conf=conf("srv_g"))
        for c in (b, g):
            c.start()
            c.q("CREATE EXTENSION idgen")
        newcomers = [Load(b, batch=1000, pause=0.002), Load(g, batch=1000, pause=0.002)]
        wait_until("the new automatic server issuing", lambda: len(newcomers[0].ids) >= 5000, timeout=60)
        took = time.monotonic() - promoted
        time.sleep(2)
    finally:
        for load in holders + newcomers:
            load.finish()
    no_duplicates(*holders, *newcomers)
    assert not holders[0].refusals and not holders[1].refusals, (holders[0].refusals[:1], holders[1].refusals[:1])
    assert {worker_of(i) for i in holders[0].ids} == {held_by_a}
    assert {worker_of(i) for i in newcomers[0].ids} != {held_by_a}
    assert not newcomers[1].ids
    off = newcomers[0].refusals[0]
    assert off.pgcode == NOT_IN_PREREQUISITE_STATE and "grants no new lease until" in off.diag.message_primary, off
    last = newcomers[1].refusals[-1]
    assert "worker id 5 is leased to another server, f@" in last.diag.message_primary, last
    for c in (a, f):
        assert "re-asserted the lease of worker id" in c.log()
    print(f"\nthe new automatic server issued {took:.1f} s after the promotion; the holders "
          f"{len(holders[0].ids)} and {len(holders[1].ids)} ids, none refused")


# ---- promotion --------------------------------------------------------------------------------

def allow(registry, role, n):
    """The registry's owner lets role hold n live leases at once (idgen_registry.quota)."""
    registry.q(f"INSERT INTO idgen_registry.quota VALUES ('{role}', {n})"
               " ON CONFLICT (role) DO UPDATE SET max_ids = excluded.max_ids", db="registry")


def replicated_auto_pair(cluster_factory, registry, tmp_path, quota=1):
    """An auto primary with a 30 s lease, its registry role allowed `quota` live leases, 20,000
    of its ids stored in t, and a standby that has replayed them; returns (primary, standby,
    the primary's worker id)."""
    primary = member(cluster_factory, "primary", registry, conf=["idgen.lease = '30s'"])
    allow(registry, "srv_primary", quota)
    primary.q("CREATE TABLE t (id bigint PRIMARY KEY)")
    assert first_ids(primary, 10)
    standby = primary.base_backup(str(tmp_path / "standby"))
    standby.start()
    for _ in range(20):
        primary.q("INSERT INTO t SELECT snowflake_next() FROM generate_series(1, 1000)")
    cluster.wait_for_replay(primary, standby)
    return primary, standby, status(primary)["worker_id"]


def test_a_promoted_standby_takes_a_worker_id_of_its_own_at_once(cluster_factory, registry, tmp_path):
    """An automatic id is one run's: after its primary's machine died (no clean shutdown to
    release the lease), the promoted standby does not wait for that lease (30 s here) to end,
    it takes another id at once where the pair's registry role may hold two; its ids are above
    the primary's all the same (the horizon it replayed)."""
    primary, standby, leased = replicated_auto_pair(cluster_factory, registry, tmp_path, quota=2)
    kill_server(primary)
    t0 = time.monotonic()
    standby.promote()
    got = first_ids(standby, 1000, timeout=25)
    took = time.monotonic() - t0
    assert took < 25, took  # well before the 30 s lease could have ended
    own = status(standby)["worker_id"]
    assert own != leased and {worker_of(i) for i in got} == {own}
    assert min(got) > standby.one("SELECT max(id) FROM t")
    print(f"\npromoted standby issued its first id {took:.2f} s after promotion began")


def test_a_standby_promoted_after_its_primary_stopped_takes_the_released_id_at_once(cluster_factory, registry,
                                                                                   tmp_path):
    """A primary that stops, even with an immediate shutdown, releases its lease as its
    postmaster exits, with the last millisecond it issued in: its promoted standby takes the
    same id back at once, not after the 30 s lease, above every id the primary issued."""
    primary, standby, leased = replicated_auto_pair(cluster_factory, registry, tmp_path)
    primary.stop("immediate")
    assert f"released worker id {leased} in the registry at shutdown" in primary.log()
    t0 = time.monotonic()
    standby.promote()
    got = first_ids(standby, 1000, timeout=25)
    assert time.monotonic() - t0 < 25
    assert {worker_of(i) for i in got} == {leased}
    assert min(got) > standby.one("SELECT max(id) FROM t")


class Load:
    """Takes ids from c on a thread, in batches, until finish(): every id, and every refusal."""

    def __init__(self, c, batch=2000, pause=0.0):
        self.c, self.batch, self.pause = c, batch, pause
        self.ids, self.refusals = [], []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stopping.is_set():
            try:
                rows = self.c.q(f"SELECT snowflake_next() FROM generate_series(1, {self.batch})")
                self.ids.extend(r[0] for r in rows)
                time.sleep(self.pause)
            except psycopg2.Error as e:
                self.refusals.append(e)
                time.sleep(0.1)

    def finish(self):
        self.stopping.set()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "the load did not stop"
        return self.ids


def no_duplicates(*loads):
    ids = [i for load in loads for i in load.ids]
    assert len(set(ids)) == len(ids), f"{len(ids) - len(set(ids))} duplicate ids"
    return ids


@pytest.mark.parametrize("quota", [1, 2])
@pytest.mark.default_and_newest(SQL_RULES)
def test_a_clone_of_an_auto_server_started_beside_it_never_shares_its_worker_id(cluster_factory, registry, tmp_path,
                                                                                 quota):
    """A base backup of a running auto server, started as a second primary with nothing but its
    port and name changed (it has the same system identifier, registry role and settings): a
    run of its own, never given the original's lease. Its role may hold one lease by default,
    so it refuses, naming the original; allowed two, it takes another id. No id is issued twice
    while both are under load. (Before runs, both held one lease: 182,761 of 1.9 million ids were
    issued twice here.)"""
    original = member(cluster_factory, "original", registry)
    allow(registry, "srv_original", quota)
    assert first_ids(original, 10)
    theirs = status(original)["worker_id"]
    load = Load(original)
    clone = original.base_backup(str(tmp_path / "clone"), standby=False, conf=["cluster_name = 'clone'"])
    clone.start()
    if quota == 1:
        # the registry tells a run of the same server (a copy, or the run before a crash) apart
        e = wait_until("the clone's refusal", lambda: _refusal(clone), timeout=20)
        assert "an earlier run of this server still holds its registry role's lease, until" \
            in e.diag.message_primary, e
        assert "original@" in e.diag.message_detail and f"(worker id {theirs})" in e.diag.message_detail, e
        assert "If a copy of this server runs beside it" in e.diag.message_hint, e.diag.message_hint
        assert status(clone)["registry"] == "earlier run"
    else:
        assert first_ids(clone, 10)
    clone_load = Load(clone)
    time.sleep(3)
    load.finish()
    clone_load.finish()
    assert len(load.ids) > 10_000 and not load.refusals
    assert len(clone_load.ids) > 10_000 if quota == 2 else not clone_load.ids
    no_duplicates(load, clone_load)
    assert status(original)["worker_id"] == theirs and {worker_of(i) for i in load.ids} == {theirs}
    if quota == 2:
        assert status(clone)["worker_id"] != theirs
    rows = registry.q("SELECT count(DISTINCT holder), count(*) FROM idgen_registry.holders", db="registry")
    assert rows == [(1, quota)], "one system identifier; two runs, one lease each where the quota allows"


def test_a_clone_of_a_fixed_id_server_started_beside_it_is_refused_and_names_it(cluster_factory, registry, tmp_path):
    """The same with worker id 12 fixed in the configuration the clone copied: the clone refuses
    every id and names the original, which carries on under load."""
    original = member(cluster_factory, "original", registry, worker_id=12)
    assert first_ids(original, 10)
    load = Load(original)
    clone = original.base_backup(str(tmp_path / "clone"), standby=False, conf=["cluster_name = 'clone'"])
    clone.start()
    e = wait_until("the clone's refusal", lambda: _refusal(clone), timeout=20)
    assert "worker id 12 is leased to another server, original@" in e.diag.message_primary, e.diag.message_primary
    assert "another run of this server" in e.diag.message_primary
    time.sleep(2)
    assert clone.error("SELECT snowflake_next()").pgcode == NOT_IN_PREREQUISITE_STATE
    load.finish()
    assert len(load.ids) > 10_000 and not load.refusals
    no_duplicates(load)
    assert status(original)["registry"] == "holding"


@pytest.mark.parametrize("worker_id,quota", [("auto", 2), ("auto", 1), (20, 1)])
def test_a_standby_promoted_beside_its_live_primary_never_shares_its_worker_id(cluster_factory, registry, tmp_path,
                                                                               worker_id, quota):
    """Split brain: the standby is promoted while its primary runs on and issues under load. With
    auto the promoted server takes another id at once where the pair's role may hold two, and
    refuses over its quota where it may hold one; with a fixed id it refuses, naming the primary,
    for as long as the primary holds the lease. No id is issued twice either way."""
    primary = member(cluster_factory, "primary", registry, worker_id=worker_id)
    allow(registry, "srv_primary", quota)
    assert first_ids(primary, 10)
    standby = primary.base_backup(str(tmp_path / "standby"))
    standby.start()
    cluster.wait_for_replay(primary, standby)
    load = Load(primary)
    standby.promote()
    if quota == 2:
        assert first_ids(standby, 10, timeout=25)
        promoted = Load(standby)
        time.sleep(3)
        promoted.finish()
        assert status(standby)["worker_id"] != status(primary)["worker_id"]
        assert len(promoted.ids) > 10_000
    else:
        e = wait_until("the promoted standby's refusal", lambda: _refusal(standby), timeout=25)
        names = e.diag.message_primary if worker_id == 20 else e.diag.message_detail
        assert "primary@" in names, (e.diag.message_primary, e.diag.message_detail)
        time.sleep(2 * 3)  # two lease lengths: the primary renews, the standby stays refused
        assert standby.error("SELECT snowflake_next()").pgcode == NOT_IN_PREREQUISITE_STATE
        promoted = Load(standby)
        time.sleep(1)
        promoted.finish()
        assert not promoted.ids
    load.finish()
    assert len(load.ids) > 10_000 and not load.refusals
    no_duplicates(load, promoted)


def test_a_clean_restart_takes_its_fixed_id_back_at_once_and_a_crash_restart_waits_for_the_lease(cluster_factory,
                                                                                                  registry):
    """A clean shutdown releases the lease (the postmaster, once every other process is gone), so
    a restart holds its fixed id again at once, well inside the 20 s lease. A start after a
    crash cannot tell itself from a copy started beside the old run: it refuses, naming that
    run, until the old lease has ended, and then resumes above every id the old run stored."""
    c = member(cluster_factory, "fixed", registry, worker_id=40, conf=["idgen.lease = '20s'"])
    c.q("CREATE TABLE t (id bigint PRIMARY KEY)")
    c.q("INSERT INTO t SELECT snowflake_next() FROM generate_series(1, 5000)")
    c.stop()
    assert "released worker id 40 in the registry at shutdown" in c.log()
    t0 = time.monotonic()
    c.start()
    got = first_ids(c, 1000, timeout=15)
    assert time.monotonic() - t0 < 15 and {worker_of(i) for i in got} == {40}
    assert min(got) > c.one("SELECT max(id) FROM t")
    c.q("INSERT INTO t SELECT snowflake_next() FROM generate_series(1, 5000)")
    wait_reaped(kill_server(c))
    ends = registry.one("SELECT lease_ends_ms FROM idgen_registry.lease WHERE worker_id = 40", db="registry")
    c.start()
    e = wait_until("the refusal after the crash", lambda: _refusal(c), timeout=20)
    assert "another run of this server" in e.diag.message_primary, e.diag.message_primary
    got = first_ids(c, 1000, timeout=40)
    registry_now = registry.one(f"SELECT {NOW_MS}", db="registry")
    assert registry_now > ends, "ids came before the old run's lease ended"
    assert min(got) > c.one("SELECT max(id) FROM t")


def test_a_promoted_standby_with_a_fixed_id_of_its_own_claims_its_own(cluster_factory, registry, tmp_path):
    primary = member(cluster_factory, "primary", registry, worker_id=30)
    assert first_ids(primary, 10)
    standby = primary.base_backup(str(tmp_path / "standby"), worker_id=31)
    standby.start()
    cluster.wait_for_replay(primary, standby)
    primary.stop("immediate")
    standby.promote()
    got = first_ids(standby, 100, timeout=25)
    assert {worker_of(i) for i in got} == {31}
    assert status(standby)["registry"] == "holding"
    rows = registry.q("SELECT worker_id, holder FROM idgen_registry.holders ORDER BY worker_id", db="registry")
    assert [w for w, _ in rows] == [30, 31] and rows[0][1] == rows[1][1], "one holder, two ids"


# ---- bad settings, a broken registry ----------------------------------------------------------

def test_a_password_in_the_registry_setting_is_refused(cluster_factory, registry):
    c = cluster_factory("pw", worker_id="auto", start=False,
                        conf=[f"idgen.registry = '{conninfo(registry, 'x', extra='password=s3cret')}'"])
    c.start()  # PostgreSQL logs the refused value and starts without it ...
    c.q("CREATE EXTENSION idgen")
    assert "idgen.registry must not carry a password" in c.log()
    assert "s3cret" not in c.one("SHOW idgen.registry")
    e = c.error("SELECT snowflake_next()")  # ... and idgen issues nothing without its registry
    assert e.pgcode == NOT_IN_PREREQUISITE_STATE
    assert "idgen.registry was refused at start-up: idgen.registry must not carry a password" in e.diag.message_primary
    assert "passfile" in e.diag.message_hint
    ok = cluster_factory("ok", worker_id=3)
    e = ok.error(f"ALTER SYSTEM SET idgen.registry = '{conninfo(registry, 'x', extra='password=s3cret')}'")
    assert e.pgcode == "22023" and "must not carry a password" in e.diag.message_primary
    assert "passfile" in e.diag.message_hint
    with open(os.path.join(ok.data_dir, "postgresql.auto.conf")) as f:
        assert "s3cret" not in f.read()
    bad = cluster_factory("unparsable", worker_id=4, conf=["idgen.registry = 'host'"])
    bad.q("CREATE EXTENSION idgen")
    assert 'invalid value for parameter "idgen.registry"' in bad.log()
    e = bad.error("SELECT snowflake_next()")
    assert e.pgcode == NOT_IN_PREREQUISITE_STATE and "was refused at start-up" in e.diag.message_primary


def test_a_passfile_keeps_the_password_from_pg_monitor(cluster_factory, registry, tmp_path):
    hba = os.path.join(registry.data_dir, "pg_hba.conf")
    with open(hba) as f:
        lines = f.read()
    with open(hba, "w") as f:
        f.write("local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n" + lines)
    registry.reload()
    registry.q("CREATE ROLE srv_secret LOGIN PASSWORD 'pw-Zq81x' IN ROLE idgen_fleet")
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"127.0.0.1:{registry.port}:registry:srv_secret:pw-Zq81x\n")
    os.chmod(passfile, 0o600)
    c = cluster_factory("secret", worker_id="auto", start=False, conf=[
        f"idgen.registry = '{conninfo(registry, 'srv_secret', extra=f'passfile={passfile}')}'",
        f"idgen.lease = '{LEASE}'"])
    c.start()
    c.q("CREATE EXTENSION idgen", "CREATE ROLE watcher LOGIN IN ROLE pg_monitor")
    assert first_ids(c, 10), "the passfile let the server claim a lease"
    shown = c.one("SHOW idgen.registry", user="watcher")
    assert "srv_secret" in shown and "pw-Zq81x" not in shown
    every = c.q("SELECT name, setting FROM pg_settings", user="watcher")
    assert not [n for n, v in every if v and "pw-Zq81x" in v]
    assert status(c)["registry"] == "holding"


def test_a_registry_without_the_schema_or_without_rights_is_named(cluster_factory, registry):
    registry.q("CREATE DATABASE empty")
    registry.q("CREATE ROLE outsider LOGIN")
    no_schema = cluster_factory("noschema", worker_id="auto", conf=[
        f"idgen.registry = '{conninfo(registry, 'outsider', db='empty')}'", f"idgen.lease = '{LEASE}'"])
    no_rights = cluster_factory("norights", worker_id=5, conf=[
        f"idgen.registry = '{conninfo(registry, 'outsider')}'", f"idgen.lease = '{LEASE}'"])
    for c, says in ((no_schema, "no idgen_registry schema"), (no_rights, "must be a member of idgen_fleet")):
        c.q("CREATE EXTENSION idgen")
        e = wait_until("the refusal", lambda c=c: _refusal(c), timeout=20)
        assert e.pgcode == NOT_IN_PREREQUISITE_STATE, e
        assert says in e.diag.message_detail, e.diag.message_detail
        assert says in c.log()
        assert status(c)["registry"] == "never verified"
    # Nothing was leased, and an outsider can neither claim, read nor lock the registry.
    assert registry.one("SELECT count(*) FROM idgen_registry.holders", db="registry") == 0
    for sql in (f"SELECT * FROM idgen_registry.claim('1', '1', 'x', NULL, 3000, 0, NULL, {SPACE})",
                "SELECT * FROM idgen_registry.holders", "SELECT * FROM idgen_registry.lease",
                "BEGIN; LOCK TABLE idgen_registry.lease"):
        e = registry.error(sql, db="registry", user="outsider")
        assert e.pgcode == "42501", (sql, e)


def _refusal(c):
    try:
        c.q("SELECT snowflake_next()")
        raise AssertionError("snowflake_next() issued an id")
    except psycopg2.Error as e:
        if e.pgcode == NOT_IN_PREREQUISITE_STATE and "has not heard" not in e.diag.message_primary:
            return e
        return None


def test_an_unreachable_registry_refuses_a_new_fixed_id_unless_told_to_issue(cluster_factory):
    nowhere = "host=127.0.0.1 port=1 dbname=registry user=nobody connect_timeout=1"
    strict = cluster_factory("strict", worker_id=11, conf=[f"idgen.registry = '{nowhere}'"])
    strict.q("CREATE EXTENSION idgen")
    e = wait_until("the refusal", lambda: _refusal(strict), timeout=20)
    assert "registry did not answer the claim" in e.diag.message_detail
    assert "idgen.unverified_worker_id = issue" in e.diag.message_hint
    lenient = cluster_factory("lenient", worker_id=12, conf=[f"idgen.registry = '{nowhere}'",
                                                             "idgen.unverified_worker_id = issue"])
    lenient.q("CREATE EXTENSION idgen")
    got = first_ids(lenient, 10)
    assert {worker_of(i) for i in got} == {12}
    assert "could not verify worker id 12 in the registry; issuing ids on it anyway" in lenient.log()
    assert status(lenient)["registry"] == "unverified"


# ---- layouts ------------------------------------------------------------------------------------

@pytest.mark.default_and_newest(SQL_RULES)
def test_a_registry_serves_one_layout_its_every_worker_id_and_refuses_a_server_of_another(cluster_factory):
    """Installed for Instagram's layout: 8,192 worker ids, an automatic id and a fixed one past
    1023 leased, their ids carry them; a Twitter server is refused, saying both layouts."""
    reg = cluster_factory("registry", preload=False)
    install_registry(reg, layout="instagram")
    assert reg.q("SELECT count(*), max(worker_id) FROM idgen_registry.lease", db="registry") == [(8192, 8191)]
    assert reg.one("SELECT layout FROM idgen_registry.id_space", db="registry") == "instagram"
    layout = ["idgen.layout = 'instagram'"]
    auto = member(cluster_factory, "auto", reg, conf=layout)
    fixed = member(cluster_factory, "fixed", reg, worker_id=5000, conf=layout)
    a, f = first_ids(auto, 100), first_ids(fixed, 100)
    leased = status(auto)["worker_id"]
    assert auto.one(f"SELECT count(DISTINCT snowflake_worker_id(id, 'instagram')) = 1"
                    f" AND min(snowflake_worker_id(id, 'instagram')) = {leased}"
                    f" FROM unnest(ARRAY{a}::bigint[]) AS id")
    assert fixed.one(f"SELECT bool_and(snowflake_worker_id(id, 'instagram') = 5000)"
                     f" FROM unnest(ARRAY{f}::bigint[]) AS id")
    assert reg.one("SELECT count(*) FROM idgen_registry.holders WHERE live", db="registry") == 2

    twitter = member(cluster_factory, "twitter", reg)
    e = wait_until("the refusal", lambda: _refusal(twitter), timeout=20)
    assert e.diag.message_primary == ("snowflake_next() refuses to run: the registry serves the ids of snowflake "
                                      "layout instagram under epoch 1288834974657, and this server's idgen.layout "
                                      "is twitter and its idgen.epoch 1288834974657"), e.diag.message_primary
    assert "psql -v layout=" in e.diag.message_hint, e.diag.message_hint
    assert status(twitter)["registry"] == "wrong id space"
    assert reg.one("SELECT count(*) FROM idgen_registry.holders", db="registry") == 2, "it leased nothing"


@pytest.mark.default_and_newest(SQL_RULES)
def test_a_registry_serves_one_epoch_and_refuses_a_server_of_another(cluster_factory, registry):
    """Two servers of one layout but epochs 5 s apart would share worker ids' ids: a server of
    another epoch is refused, leasing nothing; a registry installed for that epoch serves it."""
    later = "1288834979657"  # Twitter's epoch + 5 s
    other = member(cluster_factory, "other", registry, worker_id=5, conf=[f"idgen.epoch = '{later}'"])
    e = wait_until("the refusal", lambda: _refusal(other), timeout=20)
    assert e.diag.message_primary == ("snowflake_next() refuses to run: the registry serves the ids of snowflake "
                                      "layout twitter under epoch 1288834974657, and this server's idgen.layout "
                                      f"is twitter and its idgen.epoch {later}"), e.diag.message_primary
    assert "-v epoch=" in e.diag.message_hint, e.diag.message_hint
    assert status(other)["registry"] == "wrong id space"
    assert registry.one("SELECT count(*) FROM idgen_registry.holders", db="registry") == 0, "it leased nothing"
    reg2 = cluster_factory("registry2", preload=False)
    install_registry(reg2, epoch=later)
    assert reg2.q("SELECT layout, epoch_ms FROM idgen_registry.id_space", db="registry") == [("twitter", int(later))]
    served = member(cluster_factory, "served", reg2, worker_id=5, conf=[f"idgen.epoch = '{later}'"])
    assert {worker_of(i) for i in first_ids(served, 100)} == {5}
    for i, bad in enumerate(("-1", "1.5", "2147483647001", "twitter")):
        install_registry(reg2, db=f"bad{i}", epoch=bad, expect_error=f"epoch {bad} is not one this registry can serve")


@pytest.mark.parametrize("given, stored", [
    ("41/13/10/1ms", "instagram"),  # a split with a name goes by it, as a server sends it
    (" 40/012/11/10 ", "40/12/11/10ms"),
    ("\tJS53\n", "js53"),
    ("42/10/12", "discord"),
])
@pytest.mark.default_and_newest(SQL_RULES)
def test_a_registry_stores_its_layout_as_a_server_sends_it(cluster_factory, given, stored):
    reg = cluster_factory("registry", preload=False)
    install_registry(reg, layout=given)
    assert reg.one("SELECT layout FROM idgen_registry.id_space", db="registry") == stored


@pytest.mark.parametrize("layout, says", [
    ("banana", "layout banana is not one this registry can serve"),
    ("40/17/6/1ms", "layout 40/17/6/1ms is not one this registry can serve"),
    ("60/16/40/1ms", "layout 60/16/40/1ms is not one this registry can serve"),  # no bigint holds it
    ("20/16/8/1ms", "layout 20/16/8/1ms is not one this registry can serve"),  # 17 minutes of ids
    ("\u00a0twitter", "layout \u00a0twitter is not one this registry can serve"),  # idgen refuses it too
])
@pytest.mark.default_and_newest(SQL_RULES)
def test_a_registry_is_not_installed_for_a_layout_it_cannot_serve(cluster_factory, layout, says):
    reg = cluster_factory("registry", preload=False)
    install_registry(reg, layout=layout, expect_error=says)
    assert not reg.q("SELECT 1 FROM pg_namespace WHERE nspname = 'idgen_registry'", db="registry"), \
        "nothing was installed"
