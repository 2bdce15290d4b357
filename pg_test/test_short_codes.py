"""Short codes across a fleet: two servers that would both write `000001` from sequences of their
own write distinct codes, with a registry (blocks of a counter, short_code_next()) and without one
(codes that carry the worker id, worker_code_next()); no code twice after a crash of a server, a
failover or a restore of the registry, and writes that go on through a registry outage while the
blocks in hand last, then an error that names the cause.

Real servers on loopback, every load bounded, every wait with a deadline.
"""

import os
import subprocess
import threading
import time

import psycopg2
import pytest
import test_registry
from idgen_harness import cluster
from idgen_harness.waiting import wait_until
from test_registry import (
    NOT_IN_PREREQUISITE_STATE,
    kill_server,
    member,
    registry_pair,
    wait_reaped,
)

pytestmark = pytest.mark.version_specific("bgworker")
SQL_RULES = "the counter's rules are plain SQL on the registry's server; the block worker's paths run on every version"
registry = test_registry.registry  # the fixture: a registry installed with its defaults
DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def decode(code):
    n = 0
    for ch in code:
        n = n * 62 + DIGITS.index(ch)
    return n


def counter(reg, name="links", width=6, block=1000, rate=100000):
    reg.q(f"SELECT idgen_registry.create_counter('{name}', {width}, {block}, {rate})", db="registry")


def codes(c, n, name="links"):
    return [r[0] for r in c.q(f"SELECT short_code_next('{name}') FROM generate_series(1, {n})")]


def first_codes(c, n, name="links", timeout=30):
    """Codes as soon as the server has its first block (its block worker has just started)."""
    got = []

    def attempt():
        try:
            got.extend(codes(c, n, name))
            return True
        except psycopg2.Error as e:
            if e.pgcode != NOT_IN_PREREQUISITE_STATE:
                raise
            return False

    wait_until("codes", attempt, timeout=timeout, step=0.2)
    return got


class Writer:
    """Writes codes of counter name into table links of c on a thread, in batches, until finish():
    every code written, and every refusal."""

    def __init__(self, c, name="links", batch=200, pause=0.01):
        self.c, self.name, self.batch, self.pause = c, name, batch, pause
        self.codes, self.refusals = [], []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stopping.is_set():
            try:
                rows = self.c.q(f"INSERT INTO links (code) SELECT short_code_next('{self.name}') "
                                f"FROM generate_series(1, {self.batch}) RETURNING code")
                self.codes.extend(r[0] for r in rows)
            except psycopg2.Error as e:
                self.refusals.append(e)
            time.sleep(self.pause)

    def finish(self):
        self.stopping.set()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "the writer did not stop"
        return self.codes


def links_table(c):
    c.q('CREATE TABLE links (code text COLLATE "C" PRIMARY KEY, url text)')


def all_distinct(*lists):
    every = [x for xs in lists for x in xs]
    assert len(set(every)) == len(every), f"{len(every) - len(set(every))} codes twice"
    return every


def test_two_servers_with_a_registry_write_distinct_codes_where_their_sequences_both_write_000001(
        cluster_factory, registry):
    """Two servers of one fleet: the README's one-server recipe, base62_encode(nextval()), writes
    000001 on both; short_code_next('links') writes codes of the counter's 6 digits, each server's
    in increasing order (COLLATE "C"), none on both, from blocks of 1,000 the registry granted
    once each."""
    counter(registry, width=6)
    servers = [member(cluster_factory, name, registry) for name in ("a", "b")]
    for c in servers:
        c.q("CREATE SEQUENCE short_codes CACHE 1000")
    assert [c.one("SELECT base62_encode(nextval('short_codes'), 6)") for c in servers] == ["000001", "000001"]
    made = []
    for _ in range(3):
        for c in servers:
            made.append(first_codes(c, 1500))
    every = all_distinct(*made)
    assert all(len(code) == 6 for code in every)
    for batch in made:
        assert batch == sorted(batch)
    # each block of 1,000 the registry granted went to one server: no block's numbers on both
    owners = {}
    for i, batch in enumerate(made):
        for code in batch:
            owners.setdefault(decode(code) // 1000, set()).add(i % 2)
    assert all(len(o) == 1 for o in owners.values()) and len(owners) == 2 * 5
    # taken by backends 32 at a time (each of the 3 statements is a backend, which leaves the
    # rest of its last 32 unused), from at most 6 blocks of 1,000 (the last as the spare), granted
    # one or several at a time
    (name, width, issued, blocks), = servers[0].q(
        "SELECT counter, width, issued, blocks_taken FROM idgen_short_code_status()")
    assert (name, width) == ("links", 6) and 4500 <= issued < 4500 + 3 * 32 and 1 <= blocks <= 6


def test_two_servers_without_a_registry_write_distinct_codes_that_carry_their_worker_ids(cluster_factory):
    """No registry: worker ids 1 and 2 fixed, each server's own sequence (INCREMENT 100: a block of
    100 per backend). Both sequences start at the same values, yet the codes differ, each decodes
    to its server's worker id, and a backend that ends leaves a gap, never a code twice."""
    servers = [cluster_factory(f"w{i}", worker_id=i) for i in (1, 2)]
    made = []
    for c in servers:
        c.q("CREATE EXTENSION idgen")
        c.q("CREATE SEQUENCE link_codes INCREMENT 100")
        for _ in range(3):  # three backends, a block each
            made.append([r[0] for r in c.q("SELECT worker_code_next('link_codes', 6) FROM generate_series(1, 150)")])
    all_distinct(*made)
    for batch, worker in zip(made, [1, 1, 1, 2, 2, 2], strict=True):
        assert {decode(code) % 1024 for code in batch} == {worker}
        assert all(len(code) == 6 for code in batch)
    # both sequences start at 1: a block is the numbers up to the value nextval gave, so the
    # first is 0 and 1, and the first codes are 0 * 1,024 + the worker id
    assert [decode(made[0][0]), decode(made[3][0])] == [1, 2]
    # an increment lowered between two blocks: the blocks still tile, no code twice
    c = servers[0]
    before = [r[0] for r in c.q("SELECT worker_code_next('link_codes', 6) FROM generate_series(1, 30)")]
    c.q("ALTER SEQUENCE link_codes INCREMENT 10")
    after = [r[0] for r in c.q("SELECT worker_code_next('link_codes', 6) FROM generate_series(1, 30)")]
    all_distinct(*made, before, after)


def test_a_crashed_server_never_reissues_a_worker_code_it_handed_out_in_a_transaction_that_never_committed(
        cluster_factory):
    """worker_code_next() in a transaction still open when the server is killed (the WAL writer
    asleep for 10 s, so nothing else flushes): the block's nextval was flushed before its first
    code was handed out, so the server starts again above it and hands out none of those codes."""
    c = cluster_factory("w", worker_id=7, conf=["wal_writer_delay = '10s'"])
    c.q("CREATE EXTENSION idgen")
    c.q("CREATE SEQUENCE link_codes INCREMENT 100")
    # 33 blocks (the first holds 0 and 1, the 32 others 100 each): the 33 nextvals the first one
    # logged (32 ahead), so that the next one writes a WAL record
    c.q("SELECT worker_code_next('link_codes') FROM generate_series(1, 3202)")
    conn = c.connect()
    conn.autocommit = False
    with conn.cursor() as cur:
        cur.execute("SELECT worker_code_next('link_codes') FROM generate_series(1, 50)")
        seen = [r[0] for r in cur.fetchall()]
        killed = kill_server(c)
    conn.close()
    wait_reaped(killed)
    c.start()
    again = [r[0] for r in c.q("SELECT worker_code_next('link_codes') FROM generate_series(1, 5000)")]
    all_distinct(seen, again)


def test_a_crashed_server_never_reissues_the_rest_of_its_block(cluster_factory, registry):
    """A server killed with most of its block unused starts again above it: the rest is skipped
    (the registry grants each block once), never issued."""
    counter(registry, width=7, block=10000)
    a = member(cluster_factory, "a", registry)
    before = first_codes(a, 300)
    killed = kill_server(a)
    wait_reaped(killed)
    a.start()
    after = first_codes(a, 300)
    all_distinct(before, after)
    assert min(decode(x) for x in after) >= max(decode(x) for x in before) // 10000 * 10000 + 10000


@pytest.mark.parametrize("loss", ["failover", "dump"])
@pytest.mark.default_and_newest(SQL_RULES)
def test_a_registry_that_lost_the_blocks_it_granted_never_grants_them_again(cluster_factory, tmp_path, loss):
    """The registry's standby stopped (or a pg_dump taken) before server a took its blocks; a
    writes codes, the registry is lost and its standby promoted (or the dump restored into a new
    cluster), and a new server takes blocks from what is left. The registry begins a new term
    and moves its counter past every block the lost history may have granted: no code twice,
    with no hold-off and no operator step, and a takes blocks from it too."""
    reg, standby = registry_pair(cluster_factory, tmp_path, ["srv_a", "srv_b"])
    counter(reg, width=7, block=1000)
    if loss == "dump":
        older = str(tmp_path / "dump")
        subprocess.run([os.path.join(cluster.pg_bin(), "pg_dump"), "-Fc", "-h", reg.socket_dir, "-p", str(reg.port),
                        "-U", "postgres", "-d", "registry", "-f", older], check=True, capture_output=True)
        target = cluster_factory("restored", preload=False)
        target.q("CREATE DATABASE registry")
        target.q("CREATE ROLE idgen_fleet NOLOGIN")
        for role in ("srv_a", "srv_b"):
            target.q(f"CREATE ROLE {role} LOGIN IN ROLE idgen_fleet")
    else:
        # the counter reaches the standby, the blocks do not
        standby.start()
        cluster.wait_for_replay(reg, standby)
        standby.stop()
        target = standby
    conf = [f"idgen.registry = 'host=127.0.0.1,127.0.0.1 port={reg.port},{target.port} dbname=registry "
            "user={user} target_session_attrs=read-write'"]
    a = member(cluster_factory, "a", reg, user="srv_a", conf=[conf[0].format(user="srv_a")])
    links_table(a)
    first_codes(a, 10)
    writer = Writer(a)
    try:
        wait_until("a's codes", lambda: len(writer.codes) >= 5000, timeout=60)
        kill_server(reg)
        if loss == "dump":
            done = subprocess.run([os.path.join(cluster.pg_bin(), "pg_restore"), "-h", target.socket_dir,
                                   "-p", str(target.port), "-U", "postgres", "-d", "registry", older],
                                  capture_output=True, text=True)
            assert done.returncode == 0, done.stderr
        else:
            target.start()
            target.promote()
        b = member(cluster_factory, "b", target, user="srv_b", conf=[conf[0].format(user="srv_b")])
        links_table(b)
        b_writer = Writer(b)
        wait_until("b's codes", lambda: len(b_writer.codes) >= 5000, timeout=60)
        seen = len(writer.codes)
        wait_until("a's codes from the new term", lambda: len(writer.codes) >= seen + 5000, timeout=60)
    finally:
        writer.finish()
        if "b_writer" in locals():
            b_writer.finish()
    all_distinct(writer.codes, b_writer.codes)
    skipped = target.one("SELECT skipped FROM idgen_registry.counters WHERE name = 'links'", db="registry")
    assert skipped > 0
    print(f"\n{loss}: a wrote {len(writer.codes)} codes, b {len(b_writer.codes)}, none twice; "
          f"the counter skipped {skipped} numbers")


def test_writes_go_on_through_a_registry_outage_while_the_blocks_last_then_the_error_names_the_cause(
        cluster_factory, registry):
    """Blocks of 2,000: with the registry stopped, a server issues what it holds (the block in
    hand and the spare taken ahead), then refuses with 55000 naming the registry's failure, and
    resumes once the registry is back."""
    counter(registry, width=7, block=2000)
    a = member(cluster_factory, "a", registry)
    first_codes(a, 1100)  # past half the block: the worker takes the spare
    wait_until("the spare", lambda: a.one("SELECT in_hand FROM idgen_short_code_status()") > 2000, timeout=30)
    in_hand = a.one("SELECT in_hand FROM idgen_short_code_status()")
    registry.stop()
    try:
        assert len(codes(a, in_hand)) == in_hand
        with pytest.raises(psycopg2.Error) as refused:
            for _ in range(100):  # the worker's failed try comes within its call deadline
                codes(a, 1)
                time.sleep(0.1)
        e = refused.value
        assert e.pgcode == NOT_IN_PREREQUISITE_STATE, e
        assert "short_code_next('links') has no number in hand: the registry is unreachable" in e.diag.message_primary
        assert "blocks in hand last" in e.diag.message_detail
        assert "idgen_short_code_status()" in e.diag.message_hint
    finally:
        registry.start()
    assert first_codes(a, 10)


def test_short_code_errors_name_the_way_out(cluster_factory, registry):
    """No registry, a bad counter name, a counter the registry lacks, an automatic worker id for
    worker_code_next(), a sequence that cycles or counts down, a width a code cannot have: each a
    clear error with its SQLSTATE and a HINT that leads the right way; and the labels."""
    plain = cluster_factory("plain", worker_id=3)
    plain.q("CREATE EXTENSION idgen")
    a = member(cluster_factory, "a", registry)

    def fails(c, sql, code, text):
        with pytest.raises(psycopg2.Error) as e:
            c.q(sql)
        assert e.value.pgcode == code, e.value
        assert text in e.value.diag.message_primary, e.value.diag.message_primary
        return e.value

    e = fails(plain, "SELECT short_code_next('links')", "55000", "idgen.registry is not set")
    assert "worker_code_next()" in e.diag.message_hint
    fails(a, "SELECT short_code_next('Links')", "22023", "is not one a counter can have")
    e = fails(a, "SELECT short_code_next('nope')", "55000", "the registry has no counter nope")
    e = fails(a, "SELECT worker_code_next('s')", "42P01", "")
    a.q("CREATE SEQUENCE s")
    e = fails(a, "SELECT worker_code_next('s')", "55000", "needs a fixed idgen.worker_id")
    plain.q("CREATE SEQUENCE cycles CYCLE")
    plain.q("CREATE SEQUENCE down INCREMENT -1")
    fails(plain, "SELECT worker_code_next('cycles')", "22023", "counts down or cycles")
    fails(plain, "SELECT worker_code_next('down')", "22023", "counts down or cycles")
    plain.q("CREATE SEQUENCE s")
    fails(plain, "SELECT worker_code_next('s', 12)", "22023", "width 12")
    plain.q("CREATE UNLOGGED SEQUENCE u")
    fails(plain, "SELECT worker_code_next('u')", "22023", "temporary or unlogged")
    fails(plain, "CREATE TEMP SEQUENCE t; SELECT worker_code_next('t')", "22023", "temporary or unlogged")
    plain.q("SELECT setval('s', 55468980)")
    fails(plain, "SELECT worker_code_next('s', 6)", "22003", "past the 55468980 codes of 6 digits")
    labels = dict(plain.q("SELECT proname, provolatile::text || proparallel::text FROM pg_proc "
                          "WHERE proname IN ('short_code_next', 'worker_code_next', 'idgen_short_code_status')"))
    assert labels == {"short_code_next": "vu", "worker_code_next": "vu", "idgen_short_code_status": "vs"}
