"""A fault schedule that tries to make idgen lie: real servers on this machine's
loopback under load, faults drawn from a seed and overlapping, and every id handed out checked at
the end by benches/idgen_harness/history_check.py.

The topology:
- a, b, c: one HA lineage (worker id 1, fixed, a member of the registry). a starts as the primary,
  b as its synchronous standby, c as an asynchronous one. Each standby reaches the primary through
  a loopback relay of its own (Relay), which the schedule can hold or cut. A failover stops the
  primary at once (the fence), promotes the synchronous standby, rewinds the old primary with
  pg_rewind (a fresh base backup if that fails) and attaches it as the new synchronous standby, and
  points c at the new primary (rewinding it too where it cannot follow).
- w2: a second writer with idgen.worker_id = auto, leased from the registry; its rows reach sub
  by logical replication.
- w3: a third writer with a fixed worker id (3) and no registry, the default set-up: its horizon
  is all that keeps a restart from reissuing its ids (a registry member also resumes above what
  the registry recorded of its horizon, so a server that forgot its own is still kept safe there).
- registry, registry_b: plain PostgreSQL with sql/registry/idgen_registry.sql, and its asynchronous
  standby, streaming through a relay; every member names both hosts with
  target_session_attrs=read-write, w2 through relays of its own that registry_failover cuts.
  w2 issues with a grace (GRACE_MS) longer than any registry outage here; the lineage with none.
- w4: a newcomer with idgen.worker_id = auto, made anew (a new server) and started by each
  registry_failover, right after the promotion.

The load, on both writers at once until the schedule ends: pgbench clients inserting rows whose
keys are DEFAULT snowflake_next() and uuid_v7() (no unique constraint anywhere: a duplicate is
stored and found, never refused), restarted against the current primary whenever they fail; and
client threads that hand out ids by SELECT, noting each with the server, its timeline (its
promotions, counted here) and the client's clock around the call. Those never reach a table. One
SELECT client per writer reaches it over TCP through a relay of its own, which client_cut holds
or drops mid-call. Each row names its writer and that writer's timeline (chaos.timeline, set
before a promoted server takes its first write), so a row found on many servers is one hand-out.

The faults (KINDS), each logged with when it was due, began and ended: kill -9 of a client backend,
kill -9 of a postmaster (and its children, as a machine crash leaves nothing), an immediate stop
and restart, a clock step (the offset of idgen's clock moved by -2..+2 s from where it stands: the
harness's test build reads it from a file, src/pg/clock.rs, so no interposed clock runs in the
postmaster; the registry's, whose clock is its SQL now(), is libfaketime's, set within -2..+2 s,
inside idgen.max_clock_skew, the registry's documented assumption),
a clock set back 10 to 30 s and then the server crashed (clock_back_crash) or, on the synchronous
standby, failed over to (clock_back_failover): steps larger than a restart or a promotion takes,
sized to land among the ids the writer issued since its last start or the load's (BACK_SHARE), so
that a server that forgot its horizon would hand out its old ids again (every schedule holds one on
w3: ALWAYS); a failover to the synchronous standby, or to the asynchronous one (failover_async: the
documented gap, which the checker excuses by name, id by id), a cut link (held: nothing passes; or
dropped: connections closed and refused), a SELECT client's link cut mid-call, a registry outage,
and a slow horizon push (a restart with the IDGEN_TEST_PUSH_DELAY_MS hook, then one without).
A registry failover (registry_failover, in every schedule, drawn last): the standby's link held,
w2 restarted so that it claims an id only the primary records, w2 cut off from the registry, the
primary killed, the standby promoted, the newcomer w4 claiming from it at once; the promoted
registry must hold w4 off rather than hand it w2's id. A registry restore (registry_restore, in
every schedule too): the same, but the standby is started in the registry's place on its own
timeline, with no promotion, as an older copy of its data directory would be (a file-level backup,
a snapshot); only the registry's start tells it from a restart.
Then the faults that change an id's space between restarts (CONFIG_KINDS), each in every schedule:
w3 restarted (clean stop or crash) under another idgen.epoch (the first always a later one, 2-4 s:
more than idgen.max_clock_wait, so it is refused until its ids sort above the old ones, and taken
by a restart after that), another layout (Twitter's to Instagram's, taken; back, refused for good
and put back) or another worker id; a standby restarted under another epoch for a while (a
failover to it then refuses ids until the setting is put back); w2 restarted under another epoch,
which the registry refuses, for a while. Every row records the epoch, layout and worker id its
writer had, and the checker reads each id under its own.
Faults on one server wait for each other (a server is restarted by one fault at a time); everything
else overlaps: a clock step or a cut link lands in the middle of a failover.

The schedule is a pure function of (seed, seconds): the same seed gives the same faults at the
same times against the same roles. What the load does between them is not replayed: this is a
test of real servers, not a simulation.

At the end every link is restored, the registry started, every server brought up and the replicas
caught up; every row of every server is read, and the checker gets the client-side history, the
rows and the promotions. Exit status 1 with the checker's report when it finds a violation.

Runs as the postgres user with PG_BIN naming the server build (pg_test/faults/run sets both up).
usage: chaos.py [--seconds S] [--seed N] [--out DIR] [--plant shared-worker-id]
"""
import argparse
import contextlib
import csv
import json
import os
import random
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass

from idgen_harness import history_check

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

EPOCH_MS = 1288834974657  # idgen.epoch's default
REGISTRY_SQL = os.path.join(ROOT, "sql", "registry", "idgen_registry.sql")
LINEAGE = ("a", "b", "c")
LINEAGE_ROLES = ("primary", "sync", "async")  # what a failover moves from one of a, b, c to another
MAX_OFFSET_S = 2.0  # clock steps land anywhere in -MAX_OFFSET_S .. +MAX_OFFSET_S
# clock_back_crash and clock_back_failover set a clock this far back from where it was, at random:
# far more than a restart or a promotion takes. The checker judges each id by its own server's
# offsets (the run records every step), so the allowance below stays small.
BACK_S = (10.0, 30.0)
# ... but never further back than this share of the time since the server last started, nor less
# than MIN_BACK_S (a restart takes 1-3 s here). A clock set back beyond the server's whole run lands
# below everything it issued since, where even a server that forgot its horizon is kept safe by the
# mark its last clean shutdown left: the step is meant to land among the ids it issued.
BACK_SHARE, MIN_BACK_S = 0.8, 4.0
# What the checker allows between an id's time and its call: the largest clock offset, the horizon's
# lead (HORIZON_LEAD_MS: after a crash ids start past a horizon pushed up to 1 s ahead of that
# server's clock) and a second for everything else.
SKEW_MS = int(MAX_OFFSET_S * 1000) + 1000 + 1000
PUSH_DELAY_MS = 20

# kind -> the roles it may hit; a role is resolved to a server when the fault begins
KINDS = {
    "kill_backend": ("primary", "w2", "w3"),
    "kill_postmaster": ("primary", "sync", "async", "w2", "w3"),
    "immediate_restart": ("primary", "sync", "async", "w2", "w3", "sub"),
    "clock_step": ("primary", "sync", "async", "w2", "w3", "registry"),
    "clock_back_crash": ("primary", "w2", "w3"),
    "clock_back_failover": ("sync",),
    "failover": ("primary",),
    "failover_async": ("async",),
    "link_cut": ("sync", "async"),
    "client_cut": ("primary", "w2", "w3"),
    "registry_outage": ("registry",),
    "slow_push": ("primary", "w2", "w3"),
}
# Every schedule has at least one of each of these, at a time drawn from the seed if the draw left it
# out: a clock set back on w3 and crashed is what shows a server that forgot its horizon (w3 has no
# registry to resume above), and without it 7 of 10 seeds missed the horizon switched off.
ALWAYS = (("clock_back_crash", "w3"),)
# Faults that change an id's space (idgen.epoch, idgen.layout, the worker id) between restarts, drawn
# after the others (so that the faults a seed drew before stay as they were): one of each in every
# schedule, in its middle half, and one more every CONFIG_EVERY_S of a longer one.
CONFIG_KINDS = {
    "id_space_change": ("w3",),  # mode: epoch_later (the first), epoch_earlier, layout, worker
    "standby_unlike": ("sync", "async"),  # a standby under another epoch, amount s
    "registry_other_epoch": ("w2",),  # w2 under another epoch, refused by the registry, amount s
}
# The registry failed over to an asynchronous standby that missed w2's last claim, w2 cut off from
# it meanwhile (amount s after the newcomer w4 starts), and w4 claiming from the promoted one; and
# the registry restored from an older copy of its data directory, the same way: the standby's,
# started as the registry itself on its own timeline (no promotion), as a file-level backup or a
# snapshot would be. One of each in every schedule's middle half and one more every
# CONFIG_EVERY_S, drawn after everything else (the restore after the failover).
REGISTRY_KINDS = {"registry_failover": ("registry",), "registry_restore": ("registry",)}
ALL_KINDS = {**KINDS, **CONFIG_KINDS, **REGISTRY_KINDS}
REGISTRY_SERVERS = ("registry", "registry_b")
LEASE_MS = 3_000
# The auto servers' idgen.lease_grace: longer than any registry outage or failover the schedule
# makes, so w2 issues through each. The lineage keeps none (a failover of it is taken at the
# lease's end, as the schedule's timings assume). The registry's hold-off after a failover or a
# start is its max_lease_ms + max_grace_ms (LEASE_MS + GRACE_MS), plus the time since its state is
# known, plus its max_clock_skew_ms (SKEW_MS).
GRACE_MS = 15_000
CONFIG_EVERY_S = 150
LATER_EPOCH_S = (2.0, 4.0)  # beyond idgen.max_clock_wait (1 s): refused, then taken after the moment
# What standby_unlike and registry_other_epoch add to the epoch: an earlier one, which a server's own
# start-up check takes at once, so that what refuses it is the door under test (the replay of a
# primary of another epoch; the registry).
OTHER_EPOCH_MS = -5_000
SPACE_MODES = ("epoch_later", "epoch_earlier", "layout", "worker")
STOPS = {"fast": "a clean stop", "immediate": "a crash (an immediate stop)"}
# issuer: the server that wrote the row; tl: its timeline as the run counts them (chaos.timeline,
# set by the run before the server takes its first write on a new one), so that a row found on
# several servers is one hand-out and the same id written on two timelines is two; ep, lay, wk: the
# id space it wrote under (idgen.epoch, idgen.layout, idgen.worker_id, "auto" for w2).
TABLE = """CREATE TABLE events (id bigint NOT NULL DEFAULT snowflake_next(), u uuid NOT NULL DEFAULT uuid_v7(),
                                issuer text NOT NULL DEFAULT current_setting('cluster_name'),
                                tl int NOT NULL DEFAULT current_setting('chaos.timeline', true)::int,
                                ep bigint NOT NULL DEFAULT current_setting('idgen.epoch')::bigint,
                                lay text NOT NULL DEFAULT current_setting('idgen.layout'),
                                wk text NOT NULL DEFAULT current_setting('idgen.worker_id'))"""
SUB_TABLE = """CREATE TABLE events (id bigint NOT NULL, u uuid NOT NULL, issuer text NOT NULL, tl int NOT NULL,
                                    ep bigint NOT NULL, lay text NOT NULL, wk text NOT NULL)"""
INSERT = "INSERT INTO events DEFAULT VALUES;\n"
ROW = "id, u::text, issuer, tl, ep, lay, wk"  # what the checker reads of a row


def space_lines(epoch_ms, layout):
    return [f"idgen.epoch = '{epoch_ms}'", f"idgen.layout = '{layout}'"]


@dataclass(frozen=True)
class Fault:
    at_s: float  # when it is due, from the start of the load
    kind: str
    target: str  # a role: primary, sync, async, w2, sub, registry
    amount: float  # s held (link_cut, client_cut, registry_outage, slow_push), the step (clock_step),
    #                s back (clock_back_*)
    mode: str = ""  # link_cut, client_cut: hold or drop; id_space_change: one of SPACE_MODES


def schedule(seed, seconds, mean_gap_s=3.0, config=True):
    """The faults of a run: a pure function of (seed, seconds). Gaps are exponential (so faults
    bunch up and overlap), the last one due 5 s before the end. A fault of ALWAYS that the draw
    left out (or drew only in the run's first quarter, too early to land among ids issued since
    the load began) is added at a time drawn in the middle half of the run. Then, with config, the
    faults of CONFIG_KINDS, drawn last so that the others are what the seed drew without them."""
    rng = random.Random(seed)
    kinds = sorted(KINDS)
    faults, t = [], rng.uniform(1.0, 3.0)
    while t < seconds - 5:
        kind = rng.choice(kinds)
        target = rng.choice(KINDS[kind])
        mode = ""
        if kind == "clock_step":
            amount = rng.uniform(-MAX_OFFSET_S, MAX_OFFSET_S)
        elif kind in ("clock_back_crash", "clock_back_failover"):
            amount = rng.uniform(*BACK_S)
        elif kind in ("link_cut", "client_cut"):
            amount, mode = rng.uniform(0.5, 4.0), rng.choice(("hold", "drop"))
        elif kind == "registry_outage":
            amount = rng.uniform(2.0, 8.0)
        elif kind == "slow_push":
            amount = rng.uniform(2.0, 6.0)
        else:
            amount = 0.0
        faults.append(Fault(round(t, 3), kind, target, round(amount, 3), mode))
        t += rng.expovariate(1.0 / mean_gap_s)
    for kind, target in ALWAYS:
        if seconds > 10 and not any(f.kind == kind and f.target == target and f.at_s >= 0.25 * seconds
                                    for f in faults):
            at = rng.uniform(0.25 * seconds, min(0.75 * seconds, seconds - 5))
            faults.append(Fault(round(at, 3), kind, target, round(rng.uniform(*BACK_S), 3)))
    if config and seconds > 10:
        for kind in sorted(CONFIG_KINDS):
            for k in range(max(1, int(seconds // CONFIG_EVERY_S))):
                at = (rng.uniform(0.25 * seconds, min(0.75 * seconds, seconds - 5)) if k == 0
                      else rng.uniform(5.0, seconds - 5))
                target, mode, amount = rng.choice(CONFIG_KINDS[kind]), "", round(rng.uniform(4.0, 10.0), 3)
                if kind == "id_space_change":
                    mode = "epoch_later" if k == 0 else rng.choice(SPACE_MODES)
                    amount = round(rng.uniform(*LATER_EPOCH_S) if mode == "epoch_later"
                                   else rng.uniform(1.0, 30.0) if mode == "epoch_earlier" else 0.0, 3)
                faults.append(Fault(round(at, 3), kind, target, amount, mode))
        for kind in sorted(REGISTRY_KINDS):
            for k in range(max(1, int(seconds // CONFIG_EVERY_S))):
                at = (rng.uniform(0.25 * seconds, min(0.75 * seconds, seconds - 5)) if k == 0
                      else rng.uniform(5.0, seconds - 5))
                faults.append(Fault(round(at, 3), kind, rng.choice(REGISTRY_KINDS[kind]),
                                    round(rng.uniform(1.0, 3.0), 3)))
    return sorted(faults, key=lambda f: f.at_s)


# ---- the link a standby reaches its primary by ------------------------------------------------


class Relay:
    """A TCP relay on 127.0.0.1 from a standby to its primary that can hold what passes (nothing
    is read either way: the sockets' buffers fill, the connection stays), drop it (every
    connection closed, new ones refused) and be pointed at another primary."""

    def __init__(self, target_port):
        self.target_port = target_port
        self.mode = "pass"
        self._pairs = []
        self._lock = threading.Lock()
        self._closed = False
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            if self.mode == "drop":
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=2)
            except OSError:
                client.close()
                continue
            pair = [client, upstream]
            with self._lock:
                self._pairs.append(pair)
            threading.Thread(target=self._pump, args=(pair,), daemon=True).start()

    def _pump(self, pair):
        a, b = pair
        try:
            while not self._closed and pair[0] is not None:
                if self.mode == "hold":
                    time.sleep(0.05)
                    continue
                ready, _, _ = select.select([a, b], [], [], 0.1)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    (b if s is a else a).sendall(data)
        except OSError:
            pass
        finally:
            self._close_pair(pair)

    def _close_pair(self, pair):
        with self._lock:
            if pair in self._pairs:
                self._pairs.remove(pair)
        for s in pair[:2]:
            if s is not None:
                try:
                    s.close()
                except OSError:
                    pass
        pair[0] = None

    def _drop_all(self):
        with self._lock:
            pairs = list(self._pairs)
        for p in pairs:
            try:
                for s in p:
                    if s is not None:  # a pair being closed already
                        s.shutdown(socket.SHUT_RDWR)
            except (OSError, TypeError):
                pass

    def hold(self):
        self.mode = "hold"

    def drop(self):
        self.mode = "drop"
        self._drop_all()

    def restore(self):
        self.mode = "pass"

    def point_at(self, port):
        self.target_port = port
        self._drop_all()

    def close(self):
        self._closed = True
        self._drop_all()
        self._listener.close()


# ---- the servers ----------------------------------------------------------------------------------


class Server:
    """One server of the run, by name: its data directory stays base/name/data across rebuilds;
    its own settings live in base/name/own.conf, outside the data directory, included by a
    relative path at the end of postgresql.conf, so that neither pg_basebackup nor pg_rewind
    (which copy the source's configuration files) carry one server's port or role to another."""

    def __init__(self, cluster_mod, base, name, own, env=None, clock="idgen"):
        """clock: "idgen" (an offset only idgen reads: cluster.IdgenClock), "server" (libfaketime
        under the whole server, for the registry, whose clock is its SQL now()) or None."""
        self.cluster = cluster_mod
        self.name = name
        self.base_dir = os.path.join(base, name)
        self.data_dir = os.path.join(self.base_dir, "data")
        self.log_file = os.path.join(self.base_dir, "server.log")
        self.socket_dir = tempfile.mkdtemp(prefix="idgen-c-")
        os.chmod(self.socket_dir, 0o755)
        os.makedirs(self.base_dir, exist_ok=True)
        self.port = self.cluster.free_port()
        self.own = list(own)
        self.env_vars = dict(env or {})
        clock_class = {"idgen": cluster_mod.IdgenClock, "server": cluster_mod.FakeClock, None: None}[clock]
        self.clock = clock_class(os.path.join(self.base_dir, "clock-offset"), self.running) if clock_class else None
        self.lock = threading.Lock()  # one restart of this server at a time
        self.started_at = time.monotonic()  # its last start (a clock step back is sized by it)

    def bin(self, prog):
        return os.path.join(self.cluster.pg_bin(), prog)

    def write_own(self, standby_of=None):
        """own.conf; standby_of: the relay port this server streams from (and standby.signal)."""
        lines = [f"port = {self.port}", f"unix_socket_directories = '{self.socket_dir}'",
                 f"cluster_name = '{self.name}'", *self.own]
        if standby_of is not None:
            lines.append(f"primary_conninfo = 'host=127.0.0.1 port={standby_of} user=postgres "
                         f"application_name={self.name}'")
            open(os.path.join(self.data_dir, "standby.signal"), "w").close()
        with open(os.path.join(self.base_dir, "own.conf"), "w") as f:
            f.write("\n".join(lines) + "\n")

    def initdb(self):
        done = subprocess.run([self.bin("initdb"), "-D", self.data_dir, "-E", "UTF8", "--locale=C.UTF-8",
                               "--auth=trust", "-N"], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"initdb {self.name}: {done.stderr}")
        self._include_own()

    def _include_own(self):
        with open(os.path.join(self.data_dir, "postgresql.conf"), "a") as f:
            f.write("\ninclude_if_exists = '../own.conf'\n")

    def base_backup_from(self, source, standby_of):
        shutil.rmtree(self.data_dir, ignore_errors=True)
        done = subprocess.run([self.bin("pg_basebackup"), "-D", self.data_dir, "-X", "stream", "-c", "fast",
                               "-h", source.socket_dir, "-p", str(source.port), "-U", "postgres"],
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"pg_basebackup {source.name} -> {self.name}: {done.stderr}")
        os.chmod(self.data_dir, 0o700)
        self.write_own(standby_of)

    def rewind_from(self, source, standby_of):
        """pg_rewind against the running source (crash recovery first if this one was not shut
        down cleanly: pg_rewind runs it); standby.signal and own.conf again afterwards."""
        done = subprocess.run([self.bin("pg_rewind"), "-D", self.data_dir, "--source-server",
                               f"host={source.socket_dir} port={source.port} user=postgres dbname=postgres"],
                              capture_output=True, text=True, env={**os.environ, **self.library_env()}, timeout=300)
        if done.returncode != 0:
            return False, [" / ".join(done.stderr.strip().splitlines()[-3:]) or "?"]
        self.write_own(standby_of)
        return True, done.stdout.strip().splitlines()[-1:]

    def library_env(self):
        return self.cluster.library_env(self.cluster.pg_bin())

    def postmaster_pid(self):
        try:
            with open(os.path.join(self.data_dir, "postmaster.pid")) as f:
                return int(f.readline().strip())
        except (OSError, ValueError):
            return None

    def running(self):
        pid = self.postmaster_pid()
        if pid is None:
            return False
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False

    def start(self, timeout=60):
        env = {**os.environ, **(self.clock.env() if self.clock else {}), **self.library_env(), **self.env_vars}
        deadline = time.monotonic() + timeout
        while True:
            done = subprocess.run([self.bin("pg_ctl"), "start", "-D", self.data_dir, "-l", self.log_file, "-w",
                                   "-t", "60"], capture_output=True, text=True, env=env)
            if done.returncode == 0:
                self.started_at = time.monotonic()
                return
            # a killed postmaster's children may still hold its shared memory for a moment
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not start: {done.stderr}{done.stdout}{self.evidence()}")
            time.sleep(0.5)

    def stop(self, mode="fast"):
        """pg_ctl stop; a server still up after 60 s is an error that says what it was doing (a
        start after it would only fail with "another server might be running")."""
        if self.running():
            done = subprocess.run([self.bin("pg_ctl"), "stop", "-D", self.data_dir, "-m", mode, "-w", "-t", "60"],
                                  capture_output=True, text=True)
            if done.returncode != 0 and self.running():
                raise RuntimeError(f"{self.name} did not stop ({mode}) within 60 s: {done.stderr}{done.stdout}"
                                   f"{self.evidence()}")

    def evidence(self):
        """Its processes (state, wait channel, command) and its log's last lines, for an error."""
        pid = self.postmaster_pid()
        procs = ""
        if pid:
            children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
            procs = subprocess.run(["ps", "-o", "pid,stat,wchan:24,etime,args", "-p", ",".join([str(pid), *children])],
                                   capture_output=True, text=True).stdout
        lines = log_lines(self.log_file, ("",), 12)
        return f"\n  processes:\n{procs}  log:\n" + "\n".join(f"    {line}" for line in lines)

    def kill_everything(self):
        """SIGKILL to the postmaster and every process it started, as a machine crash leaves."""
        pid = self.postmaster_pid()
        if pid is None:
            return
        children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
        for p in [pid, *map(int, children)]:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        for p in [pid, *map(int, children)]:
            _wait_gone(p)

    def connect(self, timeout=3, db="postgres"):
        import psycopg2
        conn = psycopg2.connect(host=self.socket_dir, port=self.port, user="postgres", dbname=db,
                                connect_timeout=timeout)
        conn.autocommit = True
        return conn

    def q(self, sql, timeout_s=30, db="postgres"):
        conn = self.connect(db=db)
        try:
            with conn.cursor() as cur:
                cur.execute(f"SET statement_timeout = '{int(timeout_s * 1000)}'")
                cur.execute(sql)
                return cur.fetchall() if cur.description else None
        finally:
            conn.close()

    def one(self, sql, timeout_s=30):
        return self.q(sql, timeout_s)[0][0]

    def wait_for_connections(self, timeout=60):
        """Until the server answers; past the timeout, an error with what its processes were doing
        (CI once saw a postmaster under libfaketime log "reinitializing" after a killed backend and
        then nothing for 55 s: the wait channels say where the next one stands)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.one("SELECT 1")
            except Exception as e:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name} accepted no connection within {timeout} s ({e})"
                                       f"{self.evidence()}") from e
                time.sleep(0.2)

    def cleanup(self):
        try:
            self.kill_everything()
        finally:
            shutil.rmtree(self.socket_dir, ignore_errors=True)


def _wait_gone(pid, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            return
        time.sleep(0.05)


# ---- the run ---------------------------------------------------------------------------------------


class Run:
    def __init__(self, args, base, cluster_mod):
        self.args = args
        self.base = base
        self.cluster = cluster_mod
        self.t0 = None
        self.stop_at = None
        self.servers = {}
        self.relays = {}
        self.client_relays = {}  # role -> the relay one SELECT client reaches that role's server by (client_cut)
        self.roles = {}  # primary / sync / async -> a, b or c
        self.registry_roles = {"primary": "registry", "standby": "registry_b"}
        self.registry_links = {}  # registry server -> the relay w2 reaches it by (registry_failover cuts it)
        self.registry_relays = {}  # registry server -> the link it streams by while it is the standby
        self.joined = threading.Event()  # w4, the newcomer, has started (at the first registry_failover)
        self.timeline = {name: 1 for name in (*LINEAGE, "w2", "w3", "w4")}  # promotions counted here
        self.promotions = []
        self.heal_log = []  # what heal() had to repair after the schedule
        self.salvaged = set()  # rows read from a standby before it was rewound or rebuilt
        self.rows_read_before_rewinds = 0
        self.history = []  # history_check.Issued, SELECT calls
        self.history_lock = threading.Lock()
        self.topology = threading.RLock()  # held by a failover while it moves the roles
        self.fault_log = []
        self.offsets = {}  # server -> [(wall ms, clock offset ms)]: every step of its clock, for the checker
        self.offset_now = {}  # server -> its clock's offset now, s
        self.errors = {}  # (server, SQLSTATE or class) -> count, on the load
        self.pgbench_restarts = 0
        self.rows_read = 0  # rows read (at the end, and before a rewind), every copy counted
        self.auto_ids = {"w2": set(), "w4": set()}  # every worker id each auto server held
        # each writer's id space as configured now: idgen.epoch, idgen.layout, idgen.worker_id
        self.space = {name: {"epoch": EPOCH_MS, "layout": "twitter", "worker": w}
                      for name, w in (("a", 1), ("b", 1), ("c", 1), ("w2", "auto"), ("w3", 3), ("w4", "auto"))}
        self.stopping = threading.Event()

    # -- clock -------------------------------------------------------------------------------
    def now_s(self):
        return time.monotonic() - self.t0

    @staticmethod
    def wall_ms():
        return time.time() * 1000.0

    # -- set-up ------------------------------------------------------------------------------
    def build(self):
        # its clock steps too (within the skew): its SQL now() is the registry's clock
        reg_own = ["listen_addresses = '127.0.0.1'", "wal_keep_size = '64MB'", "log_min_messages = warning"]
        reg = Server(self.cluster, self.base, "registry", reg_own, clock="server")
        self.servers["registry"] = reg
        reg.initdb()
        reg.write_own()
        reg.start()
        reg.q("CREATE DATABASE registry")
        done = subprocess.run([reg.bin("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", reg.socket_dir, "-p",
                               str(reg.port), "-d", "registry", "-f", REGISTRY_SQL], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"installing the registry: {done.stderr}")
        for role in ("lineage", "w2", "w4"):
            reg.q(f"CREATE ROLE {role} LOGIN IN ROLE idgen_fleet", db="registry")
        # the fleet's clock skew (idgen.max_clock_skew below), which the registry's clock steps use
        # too: what a member reports ahead of the registry's clock is bounded by it
        # and the longest lease and grace its members ask for: a promoted registry holds off new
        # leases that long
        reg.q(f"UPDATE idgen_registry.clock SET max_clock_skew_ms = {SKEW_MS}, max_lease_ms = {LEASE_MS}, "
              f"max_grace_ms = {GRACE_MS}", db="registry")
        # its asynchronous standby, which a held link keeps from the last claims (registry_failover)
        reg_b = Server(self.cluster, self.base, "registry_b", reg_own, clock="server")
        self.servers["registry_b"] = reg_b
        for name in REGISTRY_SERVERS:
            self.registry_relays[name] = Relay(reg.port)
        reg_b.base_backup_from(reg, self.registry_relays["registry_b"].port)
        reg_b.start()
        _wait(lambda: reg.q("SELECT 1 FROM pg_stat_replication WHERE application_name = 'registry_b'"),
              "registry_b streaming", 60)
        for name in REGISTRY_SERVERS:
            self.registry_links[name] = Relay(self.servers[name].port)
        # both hosts, as a fleet names a registry with a standby: libpq takes the one that writes
        both = (f"host={reg.socket_dir},{reg_b.socket_dir} port={reg.port},{reg_b.port} "
                "target_session_attrs=read-write")
        # w2's through relays of its own, which registry_failover cuts: it then issues on its grace
        w2_links = (f"host=127.0.0.1,127.0.0.1 port={self.registry_links['registry'].port},"
                    f"{self.registry_links['registry_b'].port} target_session_attrs=read-write")

        def member(user, worker, hosts=both, grace_ms=0):
            return ["shared_preload_libraries = 'idgen'", f"idgen.worker_id = {worker}",
                    f"idgen.registry = '{hosts} dbname=registry user={user}'",
                    f"idgen.lease = '{LEASE_MS}ms'", f"idgen.lease_grace = '{grace_ms}ms'",
                    f"idgen.max_clock_skew = '{SKEW_MS}ms'", *space_lines(EPOCH_MS, "twitter")]

        common = ["listen_addresses = '127.0.0.1'", "max_connections = 40", "wal_log_hints = on", "chaos.timeline = 1",
                  "wal_level = logical", "max_wal_senders = 10", "max_replication_slots = 10",
                  "hot_standby = on", "fsync = off",
                  "log_min_messages = warning", "wal_keep_size = '256MB'",
                  # A fast shutdown waits for each connected standby to confirm the last WAL, for
                  # up to wal_sender_timeout: at the default 60 s a standby that stopped answering
                  # outlasts pg_ctl stop's own 60 s (CI once saw a's restart fail so). 15 s rides
                  # out every held link (at most 4 s) and stays well inside pg_ctl's wait.
                  "wal_sender_timeout = '15s'"]
        a = Server(self.cluster, self.base, "a", [*common, *member("lineage", 1)])
        self.servers["a"] = a
        a.initdb()
        a.write_own()
        a.start()
        a.q("CREATE EXTENSION idgen")
        a.q(TABLE)
        self.roles = {"primary": "a", "sync": "b", "async": "c"}
        for name in ("b", "c"):
            s = Server(self.cluster, self.base, name, [*common, *member("lineage", 1)])
            self.servers[name] = s
            self.relays[name] = Relay(a.port)
            s.base_backup_from(a, self.relays[name].port)
            s.start()
        self.relays["a"] = Relay(a.port)  # a's own, for when it is a standby
        # Synchronous from here on (before, a commit would have waited for a standby not yet
        # made): the primary names its synchronous standby, and a failover names the new one
        # (the old primary after a failover to the synchronous standby; after one to the
        # asynchronous standby, the old synchronous one).
        self._own_set(a, "synchronous_standby_names", "'FIRST 1 (b)'")
        a.write_own()
        subprocess.run([a.bin("pg_ctl"), "reload", "-D", a.data_dir], capture_output=True, check=True)
        if self.args.plant == "shared-worker-id":
            w2_conf = [*common, "shared_preload_libraries = 'idgen'", "idgen.worker_id = 1",
                       *space_lines(EPOCH_MS, "twitter")]
        else:
            w2_conf = [*common, *member("w2", "auto", w2_links, GRACE_MS)]
        w2 = Server(self.cluster, self.base, "w2", w2_conf)
        self.servers["w2"] = w2
        w2.initdb()
        w2.write_own()
        w2.start()
        w2.q("CREATE EXTENSION idgen")
        w2.q(TABLE)
        w2.q("CREATE PUBLICATION chaos FOR TABLE events")
        # the newcomer: made and started by the first registry_failover, anew by each one after it
        self.servers["w4"] = Server(self.cluster, self.base, "w4", [*common, *member("w4", "auto", both, GRACE_MS)])
        w3 = Server(self.cluster, self.base, "w3",
                    [*common, "shared_preload_libraries = 'idgen'", "idgen.worker_id = 3",
                     *space_lines(EPOCH_MS, "twitter")])
        self.servers["w3"] = w3
        w3.initdb()
        w3.write_own()
        w3.start()
        w3.q("CREATE EXTENSION idgen")
        w3.q(TABLE)
        sub = Server(self.cluster, self.base, "sub", ["listen_addresses = '127.0.0.1'", "max_connections = 40",
                                                        "fsync = off", "log_min_messages = warning"], clock=None)
        self.servers["sub"] = sub
        sub.initdb()
        sub.write_own()
        sub.start()
        sub.q(SUB_TABLE)
        sub.q(f"CREATE SUBSCRIPTION chaos CONNECTION 'host={w2.socket_dir} port={w2.port} user=postgres "
              "dbname=postgres' PUBLICATION chaos WITH (copy_data = false)")
        _wait(lambda: a.q("SELECT 1 FROM pg_stat_replication WHERE application_name = 'b' AND sync_state = 'sync'"),
              "b as the synchronous standby", 60)

    @staticmethod
    def _own_set(s, key, value):
        s.own = [line for line in s.own if not line.startswith(f"{key} =")] + [f"{key} = {value}"]

    # -- load ---------------------------------------------------------------------------------
    def writer(self, role):
        return self.roles["primary"] if role == "primary" else role

    def _count_error(self, server, e):
        key = (server, getattr(e, "pgcode", None) or type(e).__name__)
        with self.history_lock:
            self.errors[key] = self.errors.get(key, 0) + 1

    def select_client(self, role, relay=None):
        """Hands out ids by SELECT against the role's current server, noting each; through the
        relay (TCP), if given, which client_cut holds or drops mid-call."""
        import psycopg2
        while not self.stopping.is_set():
            if role in LINEAGE_ROLES:
                with self.topology:
                    name = self.writer(role)
                    timeline = self.timeline[name]
            else:
                name, timeline = role, self.timeline[role]
            server = self.servers[name]
            if name == "w4" and not self.joined.is_set():
                time.sleep(0.2)
                continue
            try:
                if relay is None:
                    conn = server.connect(timeout=2)
                else:
                    conn = psycopg2.connect(host="127.0.0.1", port=relay.port, user="postgres", dbname="postgres",
                                            connect_timeout=2)
                    conn.autocommit = True
            except Exception as e:
                self._count_error(name, e)
                time.sleep(0.2)
                continue
            try:
                with conn.cursor() as cur:
                    cur.execute("SET statement_timeout = '10s'")
                    while not self.stopping.is_set():
                        started = self.wall_ms()
                        cur.execute("SELECT snowflake_next(), uuid_v7()::text, worker_id, "
                                    "current_setting('idgen.epoch')::bigint, current_setting('idgen.layout') "
                                    "FROM idgen_lease_status()")
                        sid, u, worker, epoch, layout = cur.fetchone()
                        finished = self.wall_ms()
                        with self.history_lock:
                            self.history.append(history_check.Issued(name, timeline, "snowflake", sid, started,
                                                                     finished, worker_id=worker, epoch_ms=epoch,
                                                                     layout=layout))
                            self.history.append(history_check.Issued(name, timeline, "uuid", uuid.UUID(u).int,
                                                                     started, finished))
                        if name in self.auto_ids and worker is not None:
                            self.auto_ids[name].add(worker)
                        time.sleep(self.args.pause_ms / 1000)
            except Exception as e:
                self._count_error(name, e)
                time.sleep(0.1)
            finally:
                try:
                    conn.close()
                except Exception:
                    pass

    def pgbench_keeper(self, role, script):
        """pgbench inserting rows on the role's current server until the end, restarted whenever
        it stops early (its server crashed, failed over or refused)."""
        while not self.stopping.is_set():
            name = self.writer(role)
            server = self.servers[name]
            if name == "w4" and not self.joined.is_set():
                time.sleep(0.2)
                continue
            left = int(self.stop_at - time.monotonic())
            if left < 1:
                return
            cmd = [server.bin("pgbench"), "-n", "-h", server.socket_dir, "-p", str(server.port), "-U", "postgres",
                   "-c", "2", "-j", "1", "-T", str(left), *(["-R", str(self.args.rate)] if self.args.rate else []),
                   "-f", script, "postgres"]
            with open(os.path.join(self.base, f"pgbench-{role}.log"), "a") as out:
                proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
                while proc.poll() is None:
                    if self.stopping.is_set():
                        proc.kill()
                    time.sleep(0.2)
            if not self.stopping.is_set():
                self.pgbench_restarts += 1
                time.sleep(0.3)

    def lease_watch(self):
        """Notes every worker id w2 and w4 hold (their rows carry no worker id of their own)."""
        while not self.stopping.is_set():
            for name in self.auto_ids:
                if name == "w4" and not self.joined.is_set():
                    continue
                try:
                    w = self.servers[name].one("SELECT worker_id FROM idgen_lease_status()", timeout_s=5)
                    if w is not None:
                        self.auto_ids[name].add(w)
                except Exception:
                    pass
            time.sleep(0.5)

    # -- faults -------------------------------------------------------------------------------
    def resolve(self, role):
        """The server a role names now. Only the lineage's roles move, and only they wait for a
        failover to end: a fault due on w2, w3, the registry or the subscriber begins when it is
        due (seed 1002 once saw a 21-second failover hold a clock step on w3 back by 19 s, and
        w3's SELECT clients idle as long)."""
        if role == "registry":
            return self.registry_roles["primary"]
        if role not in LINEAGE_ROLES:
            return role
        with self.topology:
            return self.roles.get(role, role)

    def run_fault(self, f):
        began = self.now_s()
        try:
            outcome = getattr(self, "do_" + f.kind)(f)
        except Exception as e:  # a fault that could not be carried out is logged, not hidden
            outcome = f"failed: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        entry = {"due_s": f.at_s, "began_s": round(began, 3), "ended_s": round(self.now_s(), 3), "kind": f.kind,
                 "role": f.target, "amount": f.amount, "mode": f.mode, "outcome": outcome}
        with self.history_lock:
            self.fault_log.append(entry)

    @contextlib.contextmanager
    def _locked(self, role):
        """The server the role names now, its lock held (re-resolved if a failover moved it).

        Never waits for the topology while it holds a server's lock: a failover holds the
        topology while it takes the servers' locks, so that order deadlocks (CI met it on 16: a
        failover and the two faults queued behind it hung). Once the lock is held the roles
        cannot move under it (a failover moves them only with every lineage server's lock), so
        the check reads them without the topology."""
        while True:
            name = self.resolve(role)
            s = self.servers[name]
            s.lock.acquire()
            if (self.registry_roles["primary"] if role == "registry" else self.roles.get(role, role)) == name:
                break
            s.lock.release()
        try:
            yield s
        finally:
            s.lock.release()

    def do_kill_backend(self, f):
        with self._locked(f.target) as s:
            killed = []  # the load may still be reconnecting after another fault: wait for it a while
            rng = random.Random(f.at_s)

            def kill_one():
                pids = [r[0] for r in s.q("SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' "
                                          "AND pid <> pg_backend_pid()", timeout_s=5)]
                if pids:
                    pid = rng.choice(sorted(pids))
                    os.kill(pid, signal.SIGKILL)  # ProcessLookupError (it ended meanwhile): try again
                    killed.append(pid)
                return killed
            if not _wait_quietly(kill_one, 10):
                return f"{s.name}: no client backend to kill"
            pid = killed[0]
            s.wait_for_connections()
            return f"{s.name}: killed backend {pid}; crash recovery done"

    def do_kill_postmaster(self, f):
        with self._locked(f.target) as s:
            s.kill_everything()
            s.start()
            return f"{s.name}: postmaster and children killed, restarted"

    def do_immediate_restart(self, f):
        with self._locked(f.target) as s:
            s.stop("immediate")
            s.start()
            return f"{s.name}: stopped immediately, restarted"

    def _set_clock(self, name, settle, *, to=None, by=None):
        """Steps a server's clock to an offset (`to`, absolute) or by one (`by`, from where it
        stands), noting when, for the checker; returns the new offset. One step of a clock at a
        time, under its lock: two faults stepping one clock at once (a clock_step in a
        clock_back_failover) once raced on the offset file (the 30-minute run saw four fail),
        and could leave the file at one offset while the checker noted the other."""
        clock = self.servers[name].clock
        with clock.lock:
            offset_s = to if to is not None else self.offset_now.get(name, 0.0) + by
            with self.history_lock:
                self.offsets.setdefault(name, [(0.0, 0.0)]).append((self.wall_ms(), offset_s * 1000.0))
                self.offset_now[name] = offset_s
            clock.set(f"{offset_s:+.3f}", settle=False)
        if settle:
            clock.settle()
        return offset_s

    def do_clock_step(self, f):
        """A writer's or a standby's clock moves by the amount from where it stands, so that a step
        back a clock_back fault made is not undone by chance (seed 1005 once set w3's clock
        back 10 s and, while w3 restarted, a step put it at +1.6 s: the step back came to
        nothing). The registry's is set to the amount: it stays within the skew it assumes."""
        name = self.resolve(f.target)
        if name in REGISTRY_SERVERS:
            offset = self._set_clock(name, False, to=f.amount)
        else:
            offset = self._set_clock(name, False, by=f.amount)
        return f"{name}: clock now {offset:+.3f} s"

    def _back_s(self, f, writer):
        """How far back: the drawn amount, sized to land among what the writer issued since its
        last start or since the load began, whichever is later (its first start comes well before
        the load: a step sized by it alone could land below every id it issued, as seed 1008's did)."""
        issuing_since = max(writer.started_at, self.t0)
        return max(MIN_BACK_S, min(f.amount, BACK_SHARE * (time.monotonic() - issuing_since)))

    def do_clock_back_crash(self, f):
        with self._locked(f.target) as s:
            back = self._back_s(f, s)
            offset = self._set_clock(s.name, True, by=-back)
            s.kill_everything()
            s.start()
            return f"{s.name}: clock set back {back:.3f} s (now {offset:+.3f} s), postmaster killed, restarted"

    def do_clock_back_failover(self, f):
        name, primary = self.resolve("sync"), self.servers[self.resolve("primary")]
        back = self._back_s(f, primary)
        offset = self._set_clock(name, True, by=-back)
        return f"{name}'s clock set back {back:.3f} s (now {offset:+.3f} s); " + self.do_failover(f)

    def do_link_cut(self, f):
        name = self.resolve(f.target)
        relay = self.relays[name]
        relay.hold() if f.mode == "hold" else relay.drop()
        time.sleep(f.amount)
        relay.restore()
        return f"{name}: link {f.mode} for {f.amount} s"

    def do_client_cut(self, f):
        """The link between one SELECT client and its server held (the call hangs, then goes on) or
        dropped (the call fails, its id, if one was made, is never seen) mid-call."""
        relay = self.client_relays[f.target]
        relay.hold() if f.mode == "hold" else relay.drop()
        time.sleep(f.amount)
        relay.restore()
        return f"{f.target}'s client link {f.mode} for {f.amount} s"

    def do_registry_outage(self, f):
        with self._locked("registry") as reg:
            reg.stop("immediate")
            time.sleep(f.amount)
            reg.start()
        return f"registry ({reg.name}) down for {f.amount} s"

    def _salvage(self, s):
        """Keeps every row of a server about to lose its data directory, for the checker."""
        rows = s.q(f"SELECT {ROW} FROM events", timeout_s=120)
        self.rows_read += len(rows)
        self.rows_read_before_rewinds += len(rows)
        self.salvaged.update(rows)

    def do_registry_restore(self, f):
        """The registry restored from an older copy of its data directory: as registry_failover, but
        the standby that missed w2's last claim is started as a primary on the registry's own
        timeline (crash recovery, no promotion: the same system identifier and timeline as the
        registry it replaces), which only its start tells from a restart."""
        return self._registry_replaced(f, promote=False)

    def do_registry_failover(self, f):
        return self._registry_replaced(f, promote=True)

    def _registry_replaced(self, f, promote):
        """The registry fails over to an asynchronous standby that missed w2's last claim: w2 stopped
        cleanly (its lease given back and freed by the owner, which the standby replays), the
        standby's link held, w2 started (it claims a never-leased id, which only the primary
        records), w2 cut off from the registry, the primary killed, the standby promoted. Then a
        newcomer (w4, a new server: its data directory made anew each time) starts and claims from
        the promoted registry, which must hold it off until every lease it may have lost has ended
        (w2's included) rather than hand it w2's id; w2 is reconnected amount s after w4 starts,
        having issued on its grace throughout, and re-asserts its lease. The old primary is rebuilt
        as the new one's standby."""
        w2, w4 = self.servers["w2"], self.servers["w4"]
        while True:
            # not while registry_other_epoch has w2 under another epoch (it holds w2's lock only
            # while it restarts w2): w2 must issue from its registry before the failover
            _wait(lambda: self.space["w2"]["epoch"] == EPOCH_MS, "w2 back under its registry's epoch", 60)
            old, new = (self.servers[self.registry_roles[r]] for r in ("primary", "standby"))
            locks = sorted((w2, w4, old, new), key=lambda s: s.name)
            for s in locks:
                s.lock.acquire()
            # and the registry's roles as they were read: another registry fault may have swapped
            # them while this one waited for the locks
            if self.space["w2"]["epoch"] == EPOCH_MS and self.registry_roles["primary"] == old.name:
                break
            for s in reversed(locks):
                s.lock.release()
        try:
            if self.joined.is_set():
                self._salvage(w4)
                w4.stop("immediate")
            self.joined.clear()  # no rows to read from it until it runs again
            shutil.rmtree(w4.data_dir, ignore_errors=True)
            w4.initdb()
            w4.write_own()
            # w2 stops cleanly, giving its lease back, and the owner frees the id (as for a server
            # gone for good), so that w2's next claim is of an id never leased, the first one a
            # newcomer would take too. The standby replays that, then receives nothing more: w2's
            # claim at its start is one the standby never sees, and a registry promoted from it
            # would hand that id to the newcomer at once if it did not know its term is new.
            # w2 holding a lease: one an earlier fault made it lose (a lost automatic lease is
            # not replaced under running backends) is claimed anew by a restart
            issued, _, said = self._issues_within(w2, 30, restart_on_refusal=True)
            if not issued:
                raise RuntimeError(f"w2 issued nothing within 30 s before the registry's failover ({said})")
            before = w2.one("SELECT worker_id FROM idgen_lease_status()")
            w2.stop("fast")
            old.q(f"SELECT idgen_registry.free({int(before)})", db="registry")
            lsn = old.one("SELECT pg_current_wal_flush_lsn()")
            _wait(lambda: replayed(new, lsn), f"{new.name} replaying w2's release", 60)
            self.registry_relays[new.name].hold()
            w2.start()
            issued, _, said = self._issues_within(w2, 30, restart_on_refusal=False)
            if not issued:
                raise RuntimeError(f"w2 issued nothing within 30 s of its restart ({said})")
            lost = w2.one("SELECT worker_id FROM idgen_lease_status()")
            self.auto_ids["w2"].add(lost)
            for link in self.registry_links.values():
                link.drop()
            try:
                old.stop("immediate")
                at = time.monotonic()
                if promote:
                    subprocess.run([new.bin("pg_ctl"), "promote", "-D", new.data_dir, "-w", "-t", "60"],
                                   capture_output=True, text=True, check=True)
                else:
                    # an older copy of the registry's data directory started in its place: the
                    # standby's, which missed w2's claim, with no standby.signal (crash recovery)
                    new.stop("immediate")
                    os.remove(os.path.join(new.data_dir, "standby.signal"))
                    new.write_own()
                    new.start()
                _wait(lambda: not new.one("SELECT pg_is_in_recovery()"), f"{new.name} out of recovery", 60)
                self.registry_roles = {"primary": new.name, "standby": old.name}
                w4.start()
                w4.q("CREATE EXTENSION idgen")
                w4.q(TABLE)
                self.joined.set()
                time.sleep(f.amount)
            finally:
                for link in self.registry_links.values():
                    link.restore()
        except BaseException:
            for s in (old, new):
                s.lock.release()
            raise
        finally:
            for s in reversed(locks):
                if s not in (old, new):
                    s.lock.release()
        try:
            # the newcomer's first id: after the hold-off (LEASE_MS + GRACE_MS from the promotion or
            # start, plus the time since the standby's last claim, a few seconds, plus SKEW_MS)
            issued, _, said = self._issues_within(w4, (LEASE_MS + GRACE_MS + SKEW_MS) / 1000 + 45,
                                                  restart_on_refusal=False)
            took = time.monotonic() - at
            got = w4.one("SELECT worker_id FROM idgen_lease_status()") if issued else None
            if got is not None:
                self.auto_ids["w4"].add(got)
            # the old primary, rebuilt as the new one's standby
            self.registry_relays[old.name].point_at(new.port)
            old.base_backup_from(new, self.registry_relays[old.name].port)
            old.start()
            self.registry_relays[new.name].point_at(old.port)  # for when new is the standby again
            self.registry_relays[new.name].restore()
        finally:
            old.lock.release()
            new.lock.release()
        if not issued:
            raise RuntimeError(f"w4 issued nothing within the hold-off and 45 s more ({said})")
        how = "promoted" if promote else "started from an older copy (its standby's data directory)"
        return (f"registry: {old.name} -> {new.name}, {how}, which missed w2's claim of worker id {lost}; w2 cut "
                f"off for {f.amount} s after w4 started; w4 issued with worker id {got} {took:.1f} s after it "
                f"took over; {old.name} rebuilt as the standby")

    def do_slow_push(self, f):
        with self._locked(f.target) as s:
            try:
                s.env_vars["IDGEN_TEST_PUSH_DELAY_MS"] = str(PUSH_DELAY_MS)
                s.stop("fast")
                s.start()
                time.sleep(f.amount)
                del s.env_vars["IDGEN_TEST_PUSH_DELAY_MS"]
                s.stop("fast")
                s.start()
                return f"{s.name}: pushes {PUSH_DELAY_MS} ms slower for {f.amount} s"
            finally:
                s.env_vars.pop("IDGEN_TEST_PUSH_DELAY_MS", None)

    # -- an id's space changed between restarts ------------------------------------------------
    def _set_space(self, s, space, standby_of=None):
        """Writes the server's idgen.epoch, idgen.layout and worker id into its own.conf (it takes
        them at its next start)."""
        self._own_set(s, "idgen.epoch", f"'{space['epoch']}'")
        self._own_set(s, "idgen.layout", f"'{space['layout']}'")
        self._own_set(s, "idgen.worker_id", space["worker"])
        s.write_own(standby_of)
        self.space[s.name] = dict(space)

    @staticmethod
    def _probe(s):
        """("issues", "") if the server hands out a snowflake id now, else (SQLSTATE, message)."""
        import psycopg2
        try:
            s.q("SELECT snowflake_next()", timeout_s=20)
            return "issues", ""
        except psycopg2.Error as e:
            return e.pgcode or type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else ""

    def _issues_within(self, s, seconds, restart_on_refusal):
        """Probes until the server issues; a 55000 refusal (the id-space check at start-up) is
        answered by a restart when restart_on_refusal (its moment may have come), anything else
        (a clock set back by another fault: 58000) by waiting. Returns (issued, restarts, what it
        saw last)."""
        deadline = time.monotonic() + seconds
        restarts = 0
        while True:
            state, said = self._probe(s)
            if state == "issues":
                return True, restarts, said
            if time.monotonic() > deadline:
                return False, restarts, f"{state}: {said[:200]}"
            time.sleep(1.0)
            if state == "55000" and restart_on_refusal:
                s.stop("fast")
                s.start()
                restarts += 1

    def do_id_space_change(self, f):
        """w3 stopped (cleanly or by a crash, drawn) and started under another id space: a later
        epoch (refused until its ids sort above the old ones, then taken by a restart), an earlier
        one (taken), Twitter's layout to Instagram's (taken) or back (refused for good: put back,
        as the HINT says), another worker id (taken)."""
        stop = random.Random(f.at_s).choice(("fast", "immediate"))
        with self._locked(f.target) as s:
            old = dict(self.space[s.name])
            new = dict(old)
            if f.mode == "epoch_later":
                new["epoch"] = old["epoch"] + int(f.amount * 1000)
            elif f.mode == "epoch_earlier":
                new["epoch"] = old["epoch"] - int(f.amount * 1000)
            elif f.mode == "layout":
                new["layout"] = "instagram" if old["layout"] == "twitter" else "twitter"
            else:
                new["worker"] = 5 if old["worker"] == 3 else 3
            change = ", ".join(f"{k} {old[k]} -> {new[k]}" for k in old if old[k] != new[k])
            self._set_space(s, new)
            s.stop(stop)
            s.start()
            never = f.mode == "layout" and new["layout"] == "twitter"  # Instagram's ids to Twitter's: never above
            issued, restarts, said = self._issues_within(s, 5 if never else 60, restart_on_refusal=not never)
            if issued:
                if never:
                    raise RuntimeError(f"{s.name}: {change} was taken, though its ids never sort above the old")
                return f"{s.name}: {change} after {STOPS[stop]}: taken" + (f" after {restarts} restarts"
                                                                            if restarts else "")
            if not never:
                raise RuntimeError(f"{s.name}: {change} after {STOPS[stop]}: no id within 60 s ({said})")
            self._set_space(s, old)
            s.stop("fast")
            s.start()
            back, _, said_back = self._issues_within(s, 60, restart_on_refusal=False)
            if not back:
                raise RuntimeError(f"{s.name}: {change} refused ({said}), and put back, still no id ({said_back})")
            return f"{s.name}: {change} after {STOPS[stop]}: refused ({said[:120]}); put back, issuing again"

    def do_standby_unlike(self, f):
        """A standby restarted under another epoch than its primary's for amount s, then put back: a
        failover to it meanwhile must refuse ids (it replayed a primary of another epoch) until the
        setting is put back and it restarts."""
        name = self.resolve(f.target)
        s = self.servers[name]
        with s.lock:
            if name == self.roles["primary"]:
                return f"{name} is the primary now: nothing changed"
            self._set_space(s, {**self.space[name], "epoch": EPOCH_MS + OTHER_EPOCH_MS}, self.relays[name].port)
            s.stop("fast")
            s.start()
        time.sleep(f.amount)
        with s.lock:  # a failover may have promoted it meanwhile (it takes every lineage lock)
            promoted = name == self.roles["primary"]
            refused = self._probe(s) if promoted else None
            self._set_space(s, {**self.space[name], "epoch": EPOCH_MS}, None if promoted else self.relays[name].port)
            s.stop("fast")
            s.start()
            if promoted and refused[0] == "issues":
                raise RuntimeError(f"{name}, promoted under an epoch {OTHER_EPOCH_MS} ms off its primary's, issued ids")
        return (f"{name}: epoch {OTHER_EPOCH_MS:+d} ms for {f.amount} s, then put back"
                + (f"; promoted meanwhile and refused ({refused[0]})" if promoted else ""))

    def do_registry_other_epoch(self, f):
        """w2 restarted under another epoch: its registry serves the old one and refuses it (its own
        start-up check would take an earlier epoch), for amount s; then put back."""
        with self._locked(f.target) as s:
            self._set_space(s, {**self.space[s.name], "epoch": EPOCH_MS + OTHER_EPOCH_MS})
            s.stop("fast")
            s.start()
            # the registry's answer, which a registry outage may hold back for a while
            deadline = time.monotonic() + 30
            while True:
                state, said = self._probe(s)
                if state == "issues" or "registry serves" in said or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
        time.sleep(f.amount)
        with self._locked(f.target) as s:
            self._set_space(s, {**self.space[s.name], "epoch": EPOCH_MS})
            s.stop("fast")
            s.start()
        if state == "issues" or "registry serves" not in said:
            raise RuntimeError(f"w2 under an epoch {OTHER_EPOCH_MS} ms off its registry's: {state} {said[:160]}")
        return f"w2: epoch {OTHER_EPOCH_MS:+d} ms for {f.amount} s, refused by the registry; put back"

    def do_failover(self, f):
        return self._failover(synchronous=True)

    def do_failover_async(self, f):
        return self._failover(synchronous=False)

    def _failover(self, synchronous):
        """Promotes the synchronous standby, or the asynchronous one: ids the old primary handed
        out past the last horizon that standby replayed may then come again, the documented gap,
        which the checker excuses by name (and nothing else)."""
        with self.topology:  # no client connects and no role resolves while the roles move
            old, sync, other = (self.servers[self.roles[r]] for r in ("primary", "sync", "async"))
            new, other = (sync, other) if synchronous else (other, sync)
            locks = sorted((old, new, other), key=lambda s: s.name)
            for s in locks:
                s.lock.acquire()
            try:
                if not new.running():
                    new.start()
                old.stop("immediate")  # the fence: the old primary hands out nothing more
                at = self.wall_ms()
                subprocess.run([new.bin("pg_ctl"), "promote", "-D", new.data_dir, "-w", "-t", "60"],
                               capture_output=True, text=True, check=True)
                _wait(lambda: not new.one("SELECT pg_is_in_recovery()"), f"{new.name} out of recovery", 60)
                # no id has been handed out here yet: its horizon is the highest it replayed
                replayed_ms = new.one("SELECT (extract(epoch FROM horizon) * 1000)::bigint FROM idgen_stats()")
                self.timeline[new.name] += 1
                # its rows name the new timeline, and it names its synchronous standby, before any
                # client reaches it (the roles move below)
                new_sync = old if synchronous else other
                self._own_set(new, "chaos.timeline", self.timeline[new.name])
                self._own_set(new, "synchronous_standby_names", f"'FIRST 1 ({new_sync.name})'")
                new.write_own()
                subprocess.run([new.bin("pg_ctl"), "reload", "-D", new.data_dir], capture_output=True, check=True)
                tl = str(self.timeline[new.name])
                _wait(lambda: new.one("SELECT current_setting('chaos.timeline')") == tl,
                      f"{new.name} reloaded", 30)
                self.promotions.append(history_check.Promotion(new.name, self.timeline[new.name], at, old.name,
                                                               self.timeline[old.name], synchronous, replayed_ms))
                self.roles = {"primary": new.name, "sync": new_sync.name,
                              "async": other.name if synchronous else old.name}
                # (no client relay before the load begins: a test may fail over a built lineage)
                for relay in [*self.relays.values(), *filter(None, [self.client_relays.get("primary")])]:
                    relay.point_at(new.port)
                how = [f"{old.name} -> {new.name}" + ("" if synchronous else f" (asynchronous; it had replayed "
                                                                              f"the horizon to {replayed_ms} ms)")]
                how.append(self._reattach(old, new))
                # a standby not promoted may have received WAL the promoted one had not (after a
                # failover to the synchronous standby, the asynchronous one can be ahead; after one to
                # the asynchronous standby, the synchronous one always is): then it cannot follow the
                # new timeline and needs pg_rewind too
                if not _wait_quietly(lambda: follows(other, new), 10):
                    how.append(self._reattach(other, new))
                return "; ".join(how)
            finally:
                for s in reversed(locks):
                    s.lock.release()

    def _reattach(self, s, primary):
        if s.running():
            # the rows a rewind or a rebuild is about to discard were handed out all the same: keep
            # them for the checker (a standby that cannot follow holds rows no other server has)
            with contextlib.suppress(Exception):
                rows = s.q(f"SELECT {ROW} FROM events", timeout_s=120)
                self.rows_read += len(rows)
                self.rows_read_before_rewinds += len(rows)
                self.salvaged.update(rows)
        # a standby is stopped cleanly: pg_rewind runs crash recovery on a target that was not, in
        # single-user mode, which refuses standby mode; one that crashed loses its standby.signal
        # for that (write_own puts it back)
        s.stop("fast")
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(s.data_dir, "standby.signal"))
        # pg_rewind reads the source's timeline from its control file, which a promotion updates
        # only at its first checkpoint
        primary.q("CHECKPOINT", timeout_s=120)
        ok, said = s.rewind_from(primary, self.relays[s.name].port)
        if ok:
            s.start()
            return f"{s.name} rewound"
        s.base_backup_from(primary, self.relays[s.name].port)
        s.start()
        return f"{s.name} rebuilt (pg_rewind: {said[0][:240]})"

    # -- the end --------------------------------------------------------------------------------
    def heal(self):
        """Every server up, every standby following the primary's timeline and replayed to its end,
        the subscriber caught up. A standby that does not follow or does not catch up is re-attached
        (what the run's last failover may have left), and said in the report's healing notes."""
        for relay in (*self.relays.values(), *self.client_relays.values(), *self.registry_links.values(),
                      *self.registry_relays.values()):
            relay.restore()
        for name in (*REGISTRY_SERVERS, "a", "b", "c", "w2", "w3", "sub", *(["w4"] if self.joined.is_set() else [])):
            s = self.servers[name]
            if not s.running():
                s.start()
            s.wait_for_connections()
        primary = self.servers[self.roles["primary"]]
        standbys = [self.servers[self.roles[r]] for r in ("sync", "async")]
        for s in standbys:
            if not _wait_quietly(lambda s=s: follows(s, primary), 30):
                self._heal_one(s, primary, "does not follow the primary's timeline")
        lsn = primary.one("SELECT pg_current_wal_flush_lsn()")
        for s in standbys:
            if not _wait_quietly(lambda s=s: replayed(s, lsn), 60):
                self._heal_one(s, primary, f"streams but has not replayed to {lsn} in 60 s")
                _wait(lambda s=s: replayed(s, lsn), f"{s.name} replay after re-attaching", 120)
        w2, sub = self.servers["w2"], self.servers["sub"]
        made = w2.one("SELECT count(*) FROM events")
        _wait_quietly(lambda: sub.one("SELECT count(*) FROM events") >= made, 120)

    def _heal_one(self, s, primary, why):
        try:
            receiver = s.q("SELECT status, received_tli, flushed_lsn, pg_last_wal_replay_lsn() "
                           "FROM pg_stat_wal_receiver RIGHT JOIN (SELECT) AS one ON true")[0]
        except Exception as e:
            receiver = type(e).__name__
        said = [f"receiver {receiver}", *log_lines(s.log_file, ("PANIC", "FATAL", "timeline", "could not"), 2)]
        how = self._reattach(s, primary)
        _wait(lambda: follows(s, primary), f"{s.name} following {primary.name} after re-attaching", 60)
        self.heal_log.append(f"{s.name} {why} ({' / '.join(said)}): {how}")

    def stored(self):
        """Every row of every server (a copy on a standby or the subscriber names its writer)."""
        found = set(self.salvaged)  # a row's copies (standbys, the subscriber) are one hand-out: read once
        for name in ("a", "b", "c", "w2", "w3", "sub", *(["w4"] if self.joined.is_set() else [])):
            rows = self.servers[name].q(f"SELECT {ROW} FROM events", timeout_s=600)
            self.rows_read += len(rows)
            found.update(rows)
        auto = {name: sorted(ids) for name, ids in self.auto_ids.items()}
        out = []
        for sid, u, issuer, tl, epoch, layout, wk in found:
            # an automatic id is not in the row: its writer's, if it only ever held one
            held = auto.get(issuer, [])
            worker = int(wk) if wk.isdigit() else (held[0] if len(held) == 1 else None)
            out.append(history_check.Issued(issuer, tl, "snowflake", sid, 0, 0, worker_id=worker, stored=True,
                                            epoch_ms=epoch, layout=layout))
            out.append(history_check.Issued(issuer, tl, "uuid", uuid.UUID(u).int, 0, 0, stored=True))
        return out

    def go(self):
        faults = schedule(self.args.seed, self.args.seconds, self.args.mean_gap)
        print(f"chaos: seed {self.args.seed}, {self.args.seconds} s, {len(faults)} faults; building ...",
              file=sys.stderr)
        self.build()
        script = os.path.join(self.base, "insert.sql")
        with open(script, "w") as f:
            f.write(INSERT)
        self.t0 = time.monotonic()
        self.stop_at = self.t0 + self.args.seconds
        load = [threading.Thread(target=self.select_client, args=(r,), daemon=True)
                for r in ("primary", "primary", "w2", "w2", "w3", "w4")]
        with self.topology:
            for r in ("primary", "w2", "w3"):
                self.client_relays[r] = Relay(self.servers[self.writer(r)].port)
                load.append(threading.Thread(target=self.select_client, args=(r, self.client_relays[r]), daemon=True))
        load += [threading.Thread(target=self.pgbench_keeper, args=(r, script), daemon=True)
                 for r in ("primary", "w2", "w3", "w4")]
        load.append(threading.Thread(target=self.lease_watch, daemon=True))
        for t in load:
            t.start()
        running = []
        for f in faults:
            while self.now_s() < f.at_s:
                time.sleep(0.02)
            t = threading.Thread(target=self.run_fault, args=(f,), daemon=True)
            t.start()
            running.append(t)
        while time.monotonic() < self.stop_at:
            time.sleep(0.1)
        self.stopping.set()
        deadline = time.monotonic() + 180  # for them all: a fault still running then is reported as unfinished
        for t in running:
            t.join(max(0.0, deadline - time.monotonic()))
        for t in load:
            t.join(30)
        stuck = sum(t.is_alive() for t in running)
        print("chaos: load over; healing and reading every server ...", file=sys.stderr)
        self.heal()
        history = list(self.history) + self.stored()
        report = history_check.check(history, self.promotions, epoch_ms=EPOCH_MS, skew_ms=SKEW_MS,
                                     offsets=self.offsets)
        return faults, report, stuck, history

    def close(self):
        self.stopping.set()
        for relay in (*self.relays.values(), *self.client_relays.values(), *self.registry_links.values(),
                      *self.registry_relays.values()):
            relay.close()
        for s in self.servers.values():
            try:
                s.cleanup()
            except Exception as e:
                print(f"chaos: could not stop {s.name}: {e}", file=sys.stderr)


def _wait(predicate, what, timeout):
    if not _wait_quietly(predicate, timeout):
        raise RuntimeError(f"{what}: not within {timeout} s")


def _wait_quietly(predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except Exception:
            pass
        time.sleep(0.2)
    return False


def follows(standby, primary):
    """The standby's WAL receiver streams the primary's current timeline: the standby's own word
    that it is on that timeline, rather than a walsender row on the primary, which says only that
    something connected. (A standby with WAL past the fork shows state 'startup' there and its
    receiver 'waiting' on the old timeline; measured on 15.)"""
    tli = int(primary.one("SELECT pg_walfile_name(pg_current_wal_lsn())")[:8], 16)
    rows = standby.q("SELECT status, received_tli FROM pg_stat_wal_receiver")
    return bool(rows) and rows[0][0] == "streaming" and rows[0][1] == tli


def replayed(standby, lsn):
    return standby.one(f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn")


def log_lines(path, words, n):
    """The last n lines of a server log that hold any of the words (for the report)."""
    try:
        with open(path, errors="replace") as f:
            hits = [line.strip() for line in f if any(w in line for w in words)]
    except OSError:
        return []
    return [h[:160] for h in hits[-n:]]


# ---- the report ----------------------------------------------------------------------------


def summary(args, faults, run, report, history, stuck):
    by_kind = {}
    for e in run.fault_log:
        k = by_kind.setdefault(e["kind"], {"done": 0, "failed": 0})
        k["failed" if e["outcome"].startswith("failed") else "done"] += 1
    checked = {"select": sum(not i.stored for i in history), "stored": sum(i.stored for i in history)}
    command = f"--seconds {args.seconds} --seed {args.seed} --mean-gap {args.mean_gap} --rate {args.rate} " \
              f"--pause-ms {args.pause_ms}" + (f" --plant {args.plant}" if args.plant else "")
    return {"command": command, "seed": args.seed, "seconds": args.seconds, "plant": args.plant,
            "faults_scheduled": len(faults),
            "faults_by_kind": by_kind, "faults_unfinished": stuck, "promotions": len(run.promotions),
            "ids_checked": report.checked, "ids_by_source": checked, "rows_read_with_copies": run.rows_read,
            "rows_read_before_rewinds": run.rows_read_before_rewinds,
            "violations": len(report.violations),
            "violations_by_kind": {
                "handed out twice or more": sum("times:" in v for v in report.violations),
                "below an id handed out before it": sum("is not above" in v for v in report.violations),
                "time off its server's clock": sum("its time is" in v for v in report.violations),
                "wrong worker id or version": sum("worker id" in v.split(":")[-1] or "not an RFC 9562" in v
                                                  for v in report.violations)},
            "excused": len(report.excused), "pgbench_restarts": run.pgbench_restarts,
            "load_errors": {f"{s} {code}": n for (s, code), n in sorted(run.errors.items())},
            "healed": list(run.heal_log)}


def markdown(s, report, fault_log):
    lines = [f"# Chaos run: seed {s['seed']}, {s['seconds']} s" + (f", planted: {s['plant']}" if s["plant"] else ""),
             "", f"Replay: `bash pg_test/faults/run {s['command']}`", "",
             "| fault | carried out | failed |", "|---|---:|---:|"]
    for kind in sorted(ALL_KINDS):
        k = s["faults_by_kind"].get(kind, {"done": 0, "failed": 0})
        lines.append(f"| {kind} | {k['done']} | {k['failed']} |")
    lines += ["", f"Ids checked: {s['ids_checked']} ({s['ids_by_source']['select']} handed out by SELECT, "
                  f"{s['ids_by_source']['stored']} from the rows of every server's tables, "
                  f"{s['rows_read_with_copies']} rows read with their copies, "
                  f"{s['rows_read_before_rewinds']} of them from standbys about to be rewound); promotions: "
                  f"{s['promotions']}; violations: **{s['violations']}**; excused (the documented asynchronous "
                  f"gap): {s['excused']}.", ""]
    if report.violations:
        lines += ["## Violations", "", *[f"- {v}" for v in report.violations[:50]], ""]
    if s["healed"]:
        lines += ["## Repaired after the schedule (heal)", "", *[f"- {h}" for h in s["healed"]], ""]
    if s["load_errors"]:
        lines += ["## Errors the load saw (server, SQLSTATE: count)", "",
                  *[f"- {k}: {n}" for k, n in s["load_errors"].items()], ""]
    lines += ["## Fault log", "", "| due s | began s | ended s | kind | role | outcome |",
              "|---:|---:|---:|---|---|---|"]
    for e in sorted(fault_log, key=lambda e: e["due_s"]):
        lines.append(f"| {e['due_s']} | {e['began_s']} | {e['ended_s']} | {e['kind']} | {e['role']} | "
                     f"{e['outcome']} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=int, default=120)
    ap.add_argument("--seed", type=int, default=None, help="default: a random one, printed")
    ap.add_argument("--out", default=None, help="a folder for chaos.md, chaos.json and faults.csv")
    ap.add_argument("--plant", choices=["shared-worker-id"], default=None,
                    help="a bug the checker must catch: w2 with a's worker id and no registry")
    ap.add_argument("--mean-gap", type=float, default=3.0, help="the mean time between faults, s")
    ap.add_argument("--rate", type=int, default=0,
                    help="rows a second each writer's pgbench inserts at most (pgbench -R); 0: as fast as it can")
    ap.add_argument("--pause-ms", type=float, default=2.0, help="each SELECT client's pause between calls")
    ap.add_argument("--keep-data", action="store_true",
                    help="a run that fails or breaks off keeps its servers' data folders, not only their logs")
    ap.add_argument("--schedule-only", action="store_true", help="print the schedule and stop")
    args = ap.parse_args(argv)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 2**31)
    if args.schedule_only:
        for f in schedule(args.seed, args.seconds, args.mean_gap):
            print(json.dumps(asdict(f)))
        return 0
    from idgen_harness import cluster
    base = tempfile.mkdtemp(prefix="idgen-chaos-")
    run = Run(args, base, cluster)
    try:
        faults, report, stuck, history = run.go()
    except BaseException:
        print(f"chaos: the run broke off (seed {args.seed}); its servers' logs are kept in {base}; "
              "their last lines:", file=sys.stderr)
        for s in run.servers.values():
            for line in log_lines(s.log_file, ("",), 15):
                print(f"  {s.name}: {line}", file=sys.stderr)
        run.close()
        drop_data(run, args)
        raise
    run.close()
    s = summary(args, faults, run, report, history, stuck)
    md = markdown(s, report, run.fault_log)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "chaos.md"), "w") as f:
            f.write(md)
        with open(os.path.join(args.out, "chaos.json"), "w") as f:
            json.dump(s, f, indent=1)
        with open(os.path.join(args.out, "faults.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(run.fault_log[0]) if run.fault_log else ["kind"])
            w.writeheader()
            w.writerows(sorted(run.fault_log, key=lambda e: e["due_s"]))
    print(json.dumps(s))
    if not report.ok():
        print(md, file=sys.stderr)
        print(f"chaos: {len(report.violations)} violations; the servers' logs are kept in {base}; "
              f"replay with: bash pg_test/faults/run {s['command']}", file=sys.stderr)
        drop_data(run, args)
        return 1
    if any(e["outcome"].startswith("failed") for e in run.fault_log):
        print(f"chaos: a fault failed; the servers' logs are kept in {base}", file=sys.stderr)
        drop_data(run, args)
        return 0
    shutil.rmtree(base, ignore_errors=True)
    return 0


def drop_data(run, args):
    """A run that is kept keeps its logs (a few MB), not its data folders: with wal_keep_size each
    server holds 100-300 MB, and the runs that are meant to fail (a planted bug, a mutant) would
    otherwise leave half a gigabyte to a gigabyte each in /tmp; --keep-data keeps them."""
    if args.keep_data:
        return
    for s in run.servers.values():
        shutil.rmtree(s.data_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
