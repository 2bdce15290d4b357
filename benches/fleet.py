"""A fleet of idgen servers merged by logical replication, on this machine.

Starts --publishers servers (each with idgen preloaded and its own worker id, their clocks
skewed across ±2 s with libfaketime) and one subscriber, all on Unix sockets; each publisher has
a table `events` keyed by snowflake_next() (and a uuid_v7() column, unique), published; the
subscriber subscribes to every one of them into one table with the same keys, watched by
sql/fleet/idgen_fleet_watch.sql. Loads every publisher at once with pgbench for --seconds, waits
until the subscriber has caught up (or stopped making progress), and reports rows made and
arrived, primary-key conflicts in the subscriber's log, worker-id clashes seen by the watch,
order per worker id, and the fleet's generation rate against N x the format's cap. Stops
everything it started, also on Ctrl-C or failure. --clash gives the second publisher the first
one's worker id: the run must then report the clash and exit non-zero. --auto starts a worker-id
registry too (sql/registry/idgen_registry.sql, on a server of its own) and gives every publisher
idgen.worker_id = auto: each leases a free worker id, and the report names the ids they got.
Every row carries a short code as well (short_code_next() from the registry's counter with --auto,
worker_code_next() otherwise), unique at the subscriber: the report counts them and the numbers
left unused.

Runs as the postgres user with PG_BIN naming the server build (benches/fleet sets both up).
usage: fleet.py [--publishers N] [--seconds S] [--clients C] [--clash | --auto] [--out DIR]
"""
import argparse
import faulthandler
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from idgen_harness import cluster

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CAP_PER_S = 4_096_000
WATCH_SQL = os.path.join(ROOT, "sql", "fleet", "idgen_fleet_watch.sql")
REGISTRY_SQL = os.path.join(ROOT, "sql", "registry", "idgen_registry.sql")
# A short code per row too, unique at the subscriber: from the registry's counter `events` with
# --auto (short_code_next()), else from each publisher's own sequence beside its worker id
# (worker_code_next()).
REGISTRY_CODE = "short_code_next('events')"
WORKER_CODE = "worker_code_next('event_codes', 8)"
PUB_TABLE = """CREATE TABLE events (id bigint PRIMARY KEY DEFAULT snowflake_next(),
                                    u uuid NOT NULL UNIQUE DEFAULT uuid_v7(),
                                    code text COLLATE "C" NOT NULL UNIQUE DEFAULT {code},
                                    publisher int NOT NULL,
                                    made timestamptz NOT NULL DEFAULT clock_timestamp())"""
SUB_TABLE = """CREATE TABLE events (id bigint PRIMARY KEY, u uuid NOT NULL UNIQUE,
                                    code text COLLATE "C" NOT NULL UNIQUE,
                                    publisher int NOT NULL, made timestamptz NOT NULL)"""
DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def decode(code):
    n = 0
    for ch in code:
        n = n * 62 + DIGITS.index(ch)
    return n


def unused(numbers):
    """The numbers missing between the lowest and the highest of a set of distinct numbers."""
    return max(numbers) - min(numbers) + 1 - len(numbers) if numbers else 0
LOAD = "INSERT INTO events (publisher) VALUES (:publisher);\n"


class Interrupted(BaseException):
    """SIGINT or SIGTERM. A BaseException, as KeyboardInterrupt is, so that no `except Exception`
    on its way (testgres has several) can swallow it and let the run go on."""


class Signals:
    """Turns SIGINT and SIGTERM into Interrupted in the main thread. Once the run is stopping
    (`stopping`), a further signal is only recorded: a second Ctrl-C must not cut short the
    stopping of the servers. `check()` raises if a signal came, for the waits that poll."""

    def __init__(self):
        self.caught = []
        self.stopping = False
        signal.signal(signal.SIGINT, self._handle)
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, _frame):
        self.caught.append(signal.Signals(signum).name)
        if not self.stopping:
            raise Interrupted(self.caught[0])

    def check(self):
        if self.caught and not self.stopping:
            raise Interrupted(self.caught[0])


def skews(n, span):
    """Clock offsets spread evenly over -span .. +span seconds."""
    if n == 1:
        return [0.0]
    return [-span + 2 * span * i / (n - 1) for i in range(n)]


def wait_for_catch_up(sub, expected, stall_s=15, limit_s=300):
    """Waits until the subscriber holds `expected` rows, or its count stops moving for stall_s
    (an apply worker stuck on a conflict); returns the count."""
    last, since = -1, time.monotonic()
    deadline = time.monotonic() + limit_s
    while True:
        n = sub.one("SELECT count(*) FROM events")
        if n >= expected:
            return n
        if n != last:
            last, since = n, time.monotonic()
        elif time.monotonic() - since > stall_s or time.monotonic() > deadline:
            return n
        time.sleep(0.5)


def run(args, base, signals):
    made_servers, loads = [], []
    try:
        return _run(args, base, signals, made_servers, loads)
    finally:
        # Stop what the run started, every piece on its own: one that fails to stop is reported
        # and the rest are still stopped.
        signals.stopping = True
        for proc, out in loads:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            out.close()
        for c in made_servers:
            try:
                c.cleanup()
            except Exception as e:
                print(f"fleet: could not stop the server in {c.base_dir}: {e}", file=sys.stderr)


def wait_for(threads, signals):
    """Joins the threads while answering signals: the main thread never waits without a bound."""
    for t in threads:
        while t.is_alive():
            signals.check()
            t.join(0.2)
    signals.check()


def start_registry(base, servers, n, skew_ms):
    """A registry server with the schema and one fleet role per publisher, allowing the fleet's
    clock skew (what a member may report ahead of its clock); its conninfo per role."""
    reg = cluster.Cluster(os.path.join(base, "registry"), preload=False)
    servers.append(reg)
    reg.init().start()
    reg.q("CREATE DATABASE registry")
    done = subprocess.run([os.path.join(cluster.pg_bin(), "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h",
                           reg.socket_dir, "-p", str(reg.port), "-d", "registry", "-f", REGISTRY_SQL],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise cluster.SqlError(f"installing the registry failed: {done.stderr}")
    for i in range(n):
        reg.q(f"CREATE ROLE fleet{i + 1} LOGIN IN ROLE idgen_fleet", db="registry")
    reg.q(f"UPDATE idgen_registry.clock SET max_clock_skew_ms = {skew_ms}", db="registry")
    reg.q("SELECT idgen_registry.create_counter('events', 8)", db="registry")
    return reg


def leased_worker_id(c, signals, limit_s=30):
    """The worker id a publisher with auto was granted (it claims it as it starts)."""
    deadline = time.monotonic() + limit_s
    while True:
        row = c.q("SELECT worker_id, registry FROM idgen_lease_status()")[0]
        if row[1] == "holding":
            return row[0]
        if time.monotonic() > deadline:
            raise cluster.SqlError(f"no lease within {limit_s} s: {row}")
        signals.check()
        time.sleep(0.1)


def _run(args, base, signals, servers, loads):
    n = args.publishers
    pubs = []
    # The clocks are skewed on purpose here: the servers' and the registry's allowance must cover them.
    skew_ms = int(args.skew * 1000) + 500
    reg = start_registry(base, servers, n, skew_ms) if args.auto else None
    for i, skew in enumerate(skews(n, args.skew)):
        worker_id = "auto" if args.auto else 1 if (args.clash and i == 1) else i + 1
        lease = []
        if reg:
            lease = [f"idgen.registry = 'host={reg.socket_dir} port={reg.port} dbname=registry user=fleet{i + 1}'",
                     f"idgen.max_clock_skew = '{skew_ms}ms'"]
        c = cluster.Cluster(os.path.join(base, f"pub{i + 1}"), worker_id=worker_id,
                            conf=["wal_level = logical", "max_wal_senders = 10", "max_replication_slots = 10",
                                  *lease])
        servers.append(c)
        c.init()
        if args.skew:
            # A fixed offset: libfaketime may cache it (a live clock re-reads its file on every
            # clock call, which would slow snowflake_next() many times over). Even so its clock
            # calls cost more than the vDSO's: --skew 0 runs without it.
            c.with_fake_clock(live=False)
            c.clock.set(f"{skew:+.3f}")
        c.start()
        c.q("CREATE EXTENSION idgen", "CREATE SEQUENCE event_codes INCREMENT 100",
            PUB_TABLE.format(code=REGISTRY_CODE if reg else WORKER_CODE), "CREATE PUBLICATION fleet FOR TABLE events")
        if reg:
            worker_id = leased_worker_id(c, signals)
        pubs.append((c, worker_id, skew))
    sub = cluster.Cluster(os.path.join(base, "sub"), preload=False,
                          conf=["track_commit_timestamp = on", f"max_logical_replication_workers = {n + 4}",
                                f"max_worker_processes = {n + 12}", "max_connections = 60"])
    servers.append(sub)
    sub.init().start()
    with open(WATCH_SQL) as f:
        sub.q(SUB_TABLE, f.read())
    if args.watch:
        sub.q("SELECT idgen_fleet.watch('events', 'id')")
    # Created disabled, with their slots: the publishers' WAL waits for them, and enabling them
    # after the load times the subscriber's apply on its own.
    for i, (p, _, _) in enumerate(pubs):
        sub.q(f"CREATE SUBSCRIPTION fleet{i + 1} CONNECTION 'host={p.socket_dir} port={p.port} user=postgres "
              f"dbname=postgres' PUBLICATION fleet WITH (enabled = false, copy_data = false)")

    print(f"fleet: loading {n} publishers for {args.seconds} s ...", file=sys.stderr)
    script = os.path.join(base, "load.sql")
    with open(script, "w") as f:
        f.write(LOAD)
    # pgbench runs as child processes the main thread polls (their output to files): a signal
    # is answered within 0.2 s, and the stopping kills any load still running.
    for i, (p, _, _) in enumerate(pubs):
        cmd = p.pgbench_command("-n", "-c", str(args.clients), "-j", "1", "-T", str(args.seconds),
                                "-D", f"publisher={i + 1}", "-f", script)
        out = open(os.path.join(base, f"pgbench-{i + 1}.log"), "w+")
        try:
            loads.append((subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT), out))
        except BaseException:
            out.close()
            raise
    while any(proc.poll() is None for proc, _ in loads):
        signals.check()
        time.sleep(0.2)
    for proc, out in loads:
        if proc.returncode != 0:
            out.seek(0)
            raise cluster.SqlError(f"pgbench failed ({proc.returncode}): {out.read()}")
    made = [p.one("SELECT count(*) FROM events") for p, _, _ in pubs]
    start = time.perf_counter()
    for i in range(n):
        sub.q(f"ALTER SUBSCRIPTION fleet{i + 1} ENABLE")
    arrived = wait_for_catch_up(sub, sum(made))
    apply_s = time.perf_counter() - start
    per_pub_arrived = dict(sub.q("SELECT publisher, count(*) FROM events GROUP BY publisher"))

    log = sub.log()
    conflicts = log.count("duplicate key value violates unique constraint")
    # The codes that arrived: none twice (the subscriber's UNIQUE would have refused it, a
    # conflict), and the numbers left unused: the registry's blocks' rests and backends' unused
    # numbers, or each publisher's sequence blocks' rests (per worker id).
    numbers = [decode(r[0]) for r in sub.q("SELECT code FROM events")]
    distinct_codes = len(set(numbers))
    if reg:
        gaps = unused(set(numbers))
    else:
        per_worker = {}
        for number in numbers:
            per_worker.setdefault(number % 1024, set()).add(number // 1024)
        gaps = sum(unused(v) for v in per_worker.values())
    clashes = sub.q("SELECT worker_id, first_origin, origin FROM idgen_fleet.clashes ORDER BY worker_id, origin")
    # Order per worker id, in the order the subscriber applied the rows (xmin: each apply worker
    # applies its publisher's commits in commit order). One client per publisher issues and
    # commits in the same order; with more, a later id can commit first, so inversions are
    # counted, not forbidden.
    inversions = sub.one("""SELECT count(*) FROM (
        SELECT id, lag(id) OVER (PARTITION BY (id >> 12) & 1023 ORDER BY xmin::text::bigint) AS prev FROM events) s
        WHERE id <= prev""")
    # The fleet's rows by id against their makers' clocks: out of time order by at most the skew.
    late_ms = sub.one("""SELECT coalesce(max(extract(epoch FROM prev - made) * 1000), 0)::bigint FROM (
        SELECT made, max(made) OVER (ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev
        FROM events) s WHERE prev > made""")

    # Generation: every publisher at once, as fast as it can, for a fixed number of ids.
    per = args.rate_rows
    gen_errors = []

    windows = {}

    # generate_series() materializes its rows before the first id is made: the rate comes from
    # the ids' own time window (their first and last millisecond), as benches/speed measures it.
    def generate(i, p):
        try:
            windows[i] = p.q(f"""SELECT count(*), (extract(epoch FROM snowflake_timestamp(max(id))
                                                            - snowflake_timestamp(min(id))) * 1000)::bigint + 1
                                 FROM (SELECT snowflake_next() AS id FROM generate_series(1, {per})) s""")[0]
        except Exception as e:
            gen_errors.append(e)

    threads = [threading.Thread(target=generate, args=(i, p), daemon=True) for i, (p, _, _) in enumerate(pubs)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    wait_for(threads, signals)
    wall = time.perf_counter() - start
    if gen_errors:
        raise gen_errors[0]
    per_rate = [count / ms * 1000 for count, ms in (windows[i] for i in range(n))]
    rate = sum(per_rate)

    clocks = (f"clocks skewed by {', '.join(f'{s:+.1f} s' for _, _, s in pubs)} (libfaketime)" if args.skew
              else "clocks not shifted")
    lines = [f"Fleet: {n} publishers and 1 subscriber on {cluster.build_description()}, {os.cpu_count()} CPUs; "
             f"{clocks}; {args.clients} pgbench client(s) per publisher for {args.seconds} s.", "",
             "| publisher | worker id | clock | rows made | rows arrived |", "|---:|---:|---:|---:|---:|"]
    for i, ((_, wid, skew), m) in enumerate(zip(pubs, made, strict=True)):
        lines.append(f"| {i + 1} | {wid} | {skew:+.1f} s | {m:,} | {per_pub_arrived.get(i + 1, 0):,} |")
    lines += ["",
              f"- rows made {sum(made):,}, arrived {arrived:,}; primary-key conflicts in the subscriber's log: "
              f"{conflicts}",
              f"- the subscriber's apply, all subscriptions enabled at once after the load: {arrived:,} rows in "
              f"{apply_s:.1f} s, {arrived / apply_s:,.0f} rows/s, with the clash watch "
              + ("on" if args.watch else "off"),
              f"- short codes (`{REGISTRY_CODE if reg else WORKER_CODE}`): {distinct_codes:,} distinct of "
              f"{len(numbers):,} rows; {gaps:,} numbers unused within their span "
              + ("(the rests of blocks the registry granted and of backends' shares of them)" if reg
                 else "(per worker id: the rests of the blocks backends took of their sequences)"),
              f"- worker-id clashes seen by idgen_fleet.watch: {len(clashes)}"
              + "".join(f"; worker id {w}: {a} and {b}" for w, a, b in clashes),
              f"- per worker id, ids out of apply (commit) order: {inversions}",
              f"- rows sorted by id, out of time order by at most {late_ms} ms (clocks span "
              f"{2 * args.skew * 1000:.0f} ms)" if n > 1 else "- one publisher: no skew",
              f"- generation, all publishers at once ({per:,} ids each, {wall:.1f} s): {rate:,.0f} ids/s in all, "
              f"{rate / (n * CAP_PER_S):.1%} of {n} x the cap; each publisher "
              f"{min(per_rate) / CAP_PER_S:.1%}-{max(per_rate) / CAP_PER_S:.1%} of the cap by its ids' own time "
              f"window (a publisher reaches the cap only with a CPU of its own: {os.cpu_count()} here)"]
    if reg:
        distinct = len({w for _, w, _ in pubs})
        lines.append(f"- worker ids leased from the registry (idgen.worker_id = auto): "
                     f"{', '.join(str(w) for _, w, _ in pubs)} ({distinct} distinct)")
    ok = (arrived == sum(made) and conflicts == 0 and not clashes and len({w for _, w, _ in pubs}) == n
          and distinct_codes == len(numbers) == arrived)
    verdict = (f"fleet: {n} publishers, {arrived:,} rows, {conflicts} conflicts, {len(clashes)} clashes"
               + ("" if ok else " - FAILED"))
    text = "\n".join(lines + ["", verdict])
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "fleet.md"), "w") as f:
            f.write(text + "\n")
    print(text)
    return 0 if ok else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--publishers", type=int, default=4)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--clients", type=int, default=1, help="pgbench clients per publisher (default 1)")
    ap.add_argument("--rate-rows", type=int, default=1_000_000, help="ids per publisher for the generation rate")
    ap.add_argument("--skew", type=float, default=2.0,
                    help="spread the publishers' clocks over -SKEW..+SKEW seconds (default 2; 0: no libfaketime)")
    ap.add_argument("--clash", action="store_true", help="give publisher 2 the worker id of publisher 1")
    ap.add_argument("--auto", action="store_true",
                    help="lease every publisher's worker id from a registry (idgen.worker_id = auto)")
    ap.add_argument("--no-watch", dest="watch", action="store_false",
                    help="leave the clash watch off at the subscriber (to measure what it costs)")
    ap.add_argument("--out", help="also write fleet.md here")
    ap.add_argument("--base", help="where the servers live (default: a new folder under /tmp, removed after)")
    args = ap.parse_args(argv)
    if not 1 <= args.publishers <= 16 or args.seconds < 1 or args.clients < 1 or args.rate_rows < 1 or args.skew < 0:
        ap.error("--publishers 1..16, --seconds, --clients and --rate-rows positive, --skew not negative")
    if args.clash and args.publishers < 2:
        ap.error("--clash needs at least 2 publishers")
    if args.clash and args.auto:
        ap.error("--clash and --auto exclude each other: the registry hands out distinct worker ids")

    # `kill -USR1` on a run that seems stuck prints where every thread is (test_fleet does).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    signals = Signals()
    base = args.base or tempfile.mkdtemp(prefix="idgen-fleet-")
    try:
        return run(args, base, signals)
    except (Interrupted, Exception) as e:
        # A signal can still land inside a library that re-raises it wrapped in its own error:
        # the record, not the exception's type, says it was an interruption.
        if signals.caught:
            print(f"fleet: interrupted ({signals.caught[0]}); every server it started is stopped", file=sys.stderr)
            return 130
        print(f"fleet: failed: {e}; every server it started is stopped", file=sys.stderr)
        return 2
    finally:
        if not args.base:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
