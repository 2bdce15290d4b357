"""What idgen's horizon records cost a point-in-time restore: archive recovery of a WAL archive
full of them, timed beside a control archive of the same size without any.

Two primaries, each with archive_mode = on (archive_command copies into its own folder), fsync on
and wal_level = replica, take a base backup and then run the same pgbench INSERT load into a
table whose only difference is its key: `snowflake_next()` in one, a sequence in the control.
Both run under libfaketime with their clock sped up --rate times ("+0 x300" in the timestamp
file; PostgreSQL forks its backends without exec, so every process shares the postmaster's clock),
so the snowflake primary pushes its durable horizon --rate times as often as on a real clock:
about 2 x --rate custom WAL records (resource manager idgen, id 173) a second, where a real
server writes 2. The control's load is sized afterwards to write the same WAL bytes.

Each archive is then restored: a copy of its base backup with recovery.signal and
restore_command reading the archive, no recovery target (recovery runs to the end of the
archive and the server leaves recovery), with fsync on, on a clock a minute past the primary's
last record: a restore replays WAL from its past. Timed from the start
until pg_is_in_recovery() is false; the redo loop's own time is read from the server log
("redo done at ... elapsed: S s"). The horizon records and every record replayed are counted
with pg_waldump --stats over the archived segments. Restores alternate idgen / control
--repeat times; the report gives the medians and (idgen - control) / idgen records.

The snowflake load runs in chunks until --records horizon records are written (counted with
pg_walinspect) or --seconds have passed. How many a second it gets depends less on --rate than on
how long one push takes on the primary (a WAL flush and two fsyncs): once a push takes longer than
half the lead (0.5 s / --rate), ids wait for pushes and the INSERT rate drops.

--build DIR measures another idgen build than the installed one (the release tarball unpacked,
or a `cargo pgrx package` tree): every server then runs from a private copy of the server
installation, with that build in its lib and share folders; nothing installed is touched.

Runs as the postgres user with PG_BIN naming the server build; from the checkout, as root:
  PG=15 bash -c 'source pg_test/install.sh && ensure_server && postgres_tree && runuser -u postgres -- \
      env PG_BIN="$PG_BIN" "$VENV/bin/python" benches/replay.py --label "this build" --out /tmp/replay.md'
usage: replay.py [--records N] [--seconds S] [--rate X] [--clients C] [--batch B] [--repeat R]
                 [--label TEXT] [--out FILE] [--build DIR] [--base DIR]
"""
import argparse
import hashlib
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

from idgen_harness import cluster

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CHUNK_S = 5  # seconds of load between counts of the horizon records
IDGEN_RMGR = "custom173"  # how pg_waldump, a client program that cannot load idgen, names it
# The two tables differ only in their key's default.
TABLES = {
    "idgen": "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_next(), n int NOT NULL, pad text NOT NULL)",
    "control": "CREATE SEQUENCE t_seq; "
               "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT nextval('t_seq'), n int NOT NULL, pad text NOT NULL)",
}
LOAD = "INSERT INTO t (n, pad) SELECT g, repeat('x', 40) FROM generate_series(1, {batch}) g;\n"
# Both primaries: no checkpoint or autovacuum inside the load (its WAL is the load's alone, with the
# same full-page images after the base backup's checkpoint), and no timeout that a clock running
# --rate times too fast would fire early (wal_sender_timeout would cut pg_basebackup's stream).
PRIMARY_CONF = ["wal_level = replica", "archive_mode = on", "autovacuum = off", "checkpoint_timeout = '1d'",
                "max_wal_size = '8GB'", "wal_sender_timeout = 0", "authentication_timeout = '10min'"]


class Interrupted(BaseException):
    pass


def on_signal(signum, _frame):
    raise Interrupted(signal.Signals(signum).name)


def say(text):
    print(f"replay: {text}", file=sys.stderr, flush=True)


def library(bin_dir):
    """(path, sha256 prefix, mtime) of the idgen library the servers of bin_dir load."""
    pkglibdir = subprocess.run([os.path.join(bin_dir, "pg_config"), "--pkglibdir"], check=True, capture_output=True,
                               text=True).stdout.strip()
    path = os.path.join(pkglibdir, "idgen.so")
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    return path, digest, time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(os.stat(path).st_mtime))


def disk_of(path):
    """The block device under path and whether the kernel calls it rotational (a guess for VMs)."""
    try:
        dev = os.stat(path).st_dev
        name = os.path.basename(os.path.realpath(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}"))
        parent = name if os.path.exists(f"/sys/block/{name}") else re.sub(r"p?\d+$", "", name)
        with open(f"/sys/block/{parent}/queue/rotational") as f:
            rota = f.read().strip() == "1"
        virtual = parent.startswith(("vd", "xvd"))
        return f"/dev/{parent} ({'virtio, ' if virtual else ''}{'rotational' if rota else 'non-rotational'} " \
               f"as the kernel reports it)"
    except OSError:
        return "unknown"


def fsync_ms(directory, n=200):
    """ms for what horizon::write does once: write a small file, fsync, rename, fsync the folder."""
    tmp, dst = os.path.join(directory, "probe.tmp"), os.path.join(directory, "probe")
    start = time.perf_counter()
    for _ in range(n):
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, b"idgen-horizon-v1 1767225600000\n")
        os.fsync(fd)
        os.close(fd)
        os.rename(tmp, dst)
        dfd = os.open(directory, os.O_RDONLY)
        os.fsync(dfd)
        os.close(dfd)
    os.unlink(dst)
    return (time.perf_counter() - start) / n * 1000


def private_server(dest, build):
    """A copy of the server's bin, lib and share folders under dest, laid out as the originals are
    relative to each other (PostgreSQL finds its lib and share relative to its executable), with
    idgen's files taken from build instead of the installed ones: the library and the extension
    files found anywhere under build (a `cargo pgrx package` tree, or the release tarball
    unpacked). As pg_test/test_upgrade.py's private_server(), for the server builds used here.
    Returns the copy's bin folder."""
    found = {}
    for d, _, files in os.walk(build):
        for f in files:
            if f in ("idgen.so", "idgen.control") or (f.startswith("idgen--") and f.endswith(".sql")):
                found.setdefault(f, os.path.join(d, f))
    if "idgen.so" not in found or "idgen.control" not in found:
        raise cluster.SqlError(f"--build {build}: no idgen.so and idgen.control under it")
    dirs = [cluster.pg_config(f) for f in ("--bindir", "--pkglibdir", "--sharedir")]
    lib = os.path.normpath(os.path.join(dirs[0], "..", "lib"))  # a wheel's own libpq lives there
    if os.path.exists(os.path.join(lib, "libpq.so.5")) and lib not in dirs:
        dirs.append(lib)
    anchor = os.path.commonpath(dirs)
    copies = [os.path.join(dest, os.path.relpath(d, anchor)) for d in dirs]
    for d, copy in zip(dirs, copies, strict=True):
        shutil.copytree(d, copy, symlinks=True, dirs_exist_ok=True)
    extdir = os.path.join(copies[2], "extension")
    for old in os.listdir(extdir):
        if old.startswith("idgen"):
            os.remove(os.path.join(extdir, old))
    for name, path in found.items():
        shutil.copy2(path, copies[1] if name == "idgen.so" else extdir)
    return copies[0]


def pgbench_txns(output):
    m = re.search(r"number of transactions actually processed: (\d+)", output)
    if not m:
        raise cluster.SqlError(f"no transaction count in pgbench's output: {output}")
    return int(m.group(1))


def wal_bytes(c, start):
    return int(c.one(f"SELECT pg_current_wal_insert_lsn() - '{start}'::pg_lsn"))


def waldump_stats(bin_dir, archive, start, end):
    """{resource manager: (records, bytes)} and the total, from pg_waldump --stats over the archive."""
    done = subprocess.run([os.path.join(bin_dir, "pg_waldump"), "-p", archive, "-s", start, "-e", end,
                           "--stats=rmgr"], capture_output=True, text=True)
    if done.returncode != 0:
        raise cluster.SqlError(f"pg_waldump failed ({done.returncode}): {done.stderr}")
    out = {}
    for line in done.stdout.splitlines():
        m = re.match(r"^(\S+)\s+(\d+)\s+\(\s*[\d.]+\)\s+(\d+)\s+\(\s*[\d.]+\)\s+(\d+)\s+\(\s*[\d.]+\)\s+(\d+)",
                     line.strip())
        if m:
            out[m.group(1)] = (int(m.group(2)), int(m.group(5)))
    m = re.search(r"^Total\s+(\d+)\s+(\d+)\s+\[[\d.]+%\]\s+(\d+)\s+\[[\d.]+%\]\s+(\d+)", done.stdout, re.M)
    if m:
        out["Total"] = (int(m.group(1)), int(m.group(4)))
    if "Total" not in out:
        raise cluster.SqlError(f"no totals in pg_waldump's output: {done.stdout[-2000:]}")
    return out


class Archive:
    """One primary's run: its archive, a base backup taken before the load, what the load wrote."""

    def __init__(self, kind):
        self.kind = kind
        self.txns = self.rows = self.bytes = 0
        self.records = self.idgen_records = 0
        self.start_lsn = self.end_lsn = None
        self.clock_speed = None
        self.horizon = None


def make_archive(kind, base, args, servers, target_bytes=None, target_txns=None):
    """Runs one primary: base backup, then the load (--seconds of it; for the control, sized to
    target_bytes of WAL), the archive completed and the primary stopped."""
    a = Archive(kind)
    a.dir = os.path.join(base, f"{kind}-archive")
    os.makedirs(a.dir)
    p = cluster.Cluster(os.path.join(args.primary_dir, f"{kind}-primary"), fsync=True, bin_dir=args.bin_dir,
                        conf=[*PRIMARY_CONF, f"archive_command = 'test ! -f {a.dir}/%f && cp %p {a.dir}/%f'"])
    servers.append(p)
    p.init().with_fake_clock(live=False)
    p.clock.set(f"+0 x{args.rate}", settle=False)
    p.start()
    p.q("CREATE EXTENSION idgen", TABLES[kind])
    # The snowflake run counts its horizon records with it as it goes; both primaries have it.
    walinspect = p.one("SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_walinspect'") > 0
    if walinspect:
        p.q("CREATE EXTENSION pg_walinspect")
    a.backup = p.base_backup(os.path.join(base, f"{kind}-base"), standby=False)
    servers.append(a.backup)  # never started: cleanup() only removes its socket folder
    a.start_lsn = backup_start(a.backup.data_dir)
    script = os.path.join(base, "load.sql")
    with open(script, "w") as f:
        f.write(LOAD.format(batch=args.batch))
    start = p.one("SELECT pg_current_wal_insert_lsn()")
    fake0, real0 = float(p.one("SELECT extract(epoch FROM clock_timestamp())")), time.monotonic()
    bench = ["-n", "-c", str(args.clients), "-j", str(args.clients), "-f", script,
             *(["-R", str(args.tps)] if args.tps else [])]
    if target_bytes is None:
        # Chunks of load until --records horizon records are written, or --seconds have passed.
        # How many a second depends less on --rate than on how long one push takes (a WAL
        # flush and two fsyncs): once that exceeds half the lead (0.5 s / --rate), ids wait for pushes.
        say(f"{kind}: load on a clock {args.rate} times as fast, until {args.records} horizon records "
            f"or {args.seconds} s")
        t_end = time.monotonic() + args.seconds
        while True:
            left = t_end - time.monotonic()
            chunk = max(1, min(CHUNK_S, round(left))) if walinspect else args.seconds
            a.txns += pgbench_txns(p.pgbench(*bench, "-T", str(chunk)))
            if not walinspect or time.monotonic() >= t_end - 0.5:
                break
            # The first column names the resource manager ("resource_manager/record_type").
            n = sum(row[1] for row in p.q(f"SELECT * FROM pg_get_wal_stats('{start}', pg_current_wal_flush_lsn())")
                    if row[0] == "idgen")
            say(f"{kind}: {n} horizon records so far")
            if n >= args.records:
                break
    else:
        # The same rows first, then top-ups sized from the WAL per transaction so far, until the
        # control's WAL reaches the snowflake run's.
        say(f"{kind}: load sized to {target_bytes / 1048576:.1f} MiB of WAL")
        per_client = max(1, target_txns // args.clients)
        while True:
            a.txns += pgbench_txns(p.pgbench(*bench, "-t", str(per_client)))
            got = wal_bytes(p, start)
            if got >= target_bytes or a.txns > 4 * target_txns:
                break
            per_client = max(1, int((target_bytes - got) / (got / a.txns) / args.clients) + 1)
    a.load_s = time.monotonic() - real0
    a.fake_end = float(p.one("SELECT extract(epoch FROM clock_timestamp())"))
    a.clock_speed = (a.fake_end - fake0) / a.load_s
    a.load_end_lsn = p.one("SELECT pg_current_wal_insert_lsn()")
    a.bytes = wal_bytes(p, start)
    a.rows = p.one("SELECT count(*) FROM t")
    if kind == "idgen":
        a.horizon = p.one("SELECT (extract(epoch FROM horizon) * 1000)::bigint FROM idgen_stats()")
    # Complete the last segment and wait until the archiver has it.
    last = p.one("SELECT pg_walfile_name(pg_switch_wal())")
    a.end_lsn = p.one("SELECT pg_current_wal_insert_lsn()")
    deadline = time.monotonic() + 120
    while (p.one("SELECT last_archived_wal FROM pg_stat_archiver") or "") < last:
        if time.monotonic() > deadline:
            raise cluster.SqlError(f"{kind}: segment {last} was not archived within 120 s")
        time.sleep(0.1)
    p.stop()
    stats = waldump_stats(p.bin_dir, a.dir, a.start_lsn, a.load_end_lsn)
    a.records = stats["Total"][0]
    a.idgen_records = stats.get(IDGEN_RMGR, (0, 0))[0]
    a.stats = stats
    a.segments = len([f for f in os.listdir(a.dir) if re.fullmatch(r"[0-9A-F]{24}", f)])
    say(f"{kind}: {a.txns} transactions, {a.rows} rows, {a.bytes / 1048576:.1f} MiB of WAL, {a.records} records "
        f"({a.idgen_records} idgen), {a.segments} segments archived; clock ran x{a.clock_speed:.0f}")
    return a


def backup_start(data_dir):
    with open(os.path.join(data_dir, "backup_label")) as f:
        m = re.search(r"START WAL LOCATION: (\S+)", f.read())
    return m.group(1)


class Restore:
    pass


def restore(a, base, i, servers):
    """One archive recovery of a copy of a's base backup, to the end of the archive."""
    copy = os.path.join(base, f"{a.kind}-restore{i}")
    shutil.copytree(a.backup.base_dir, copy, symlinks=True)
    c = cluster.Cluster(copy, fsync=True, bin_dir=a.backup.bin_dir)
    servers.append(c)
    # A restore replays WAL from its past: its clock is a minute past the primary's last record
    # (the primary's sped-up clock ran ahead of the real one). On the real clock the records'
    # horizons would lie in its future, which is the case of a standby that keeps up with its
    # primary, not of a restore.
    c.with_fake_clock(live=False)
    c.clock.set(f"+{max(0, int(a.fake_end - time.time()) + 60)}s", settle=False)
    # The copy keeps the backup's configuration; these lines come last and win. archive_mode off:
    # the restored server must not archive its new timeline into the archive being restored.
    c.append_conf(f"port = {c.port}", f"unix_socket_directories = '{c.socket_dir}'", "archive_mode = off",
                  f"restore_command = 'cp {a.dir}/%f %p 2>/dev/null'", "log_min_messages = log")
    open(os.path.join(c.data_dir, "recovery.signal"), "w").close()
    if os.path.exists(c.node.pg_log_file):
        os.unlink(c.node.pg_log_file)
    r = Restore()
    start = time.perf_counter()
    c.start()
    deadline = time.monotonic() + 900
    while True:
        try:
            if not c.one("SELECT pg_is_in_recovery()"):
                break
        except Exception:  # noqa: BLE001 - a connection refused while the server starts up
            pass
        if time.monotonic() > deadline or not c.running():
            raise cluster.SqlError(f"{a.kind}: the restore did not finish; its log ends: {c.log()[-3000:]}")
        time.sleep(0.02)
    r.wall = time.perf_counter() - start
    log = c.log()
    m = re.search(r"redo done at (\S+) system usage: CPU: user: ([\d.]+) s, system: ([\d.]+) s, elapsed: ([\d.]+) s",
                  log)
    if not m:
        raise cluster.SqlError(f"{a.kind}: no 'redo done' line in the restored server's log: {log[-3000:]}")
    r.redo_done_lsn, r.user, r.system, r.redo = m.group(1), float(m.group(2)), float(m.group(3)), float(m.group(4))
    if not c.one(f"SELECT '{r.redo_done_lsn}'::pg_lsn >= '{a.load_end_lsn}'::pg_lsn"):
        raise cluster.SqlError(f"{a.kind}: redo stopped at {r.redo_done_lsn}, before the load's end {a.load_end_lsn}")
    r.horizon_ok = None
    if a.horizon is not None:
        with open(os.path.join(c.data_dir, "idgen_horizon")) as f:
            words = f.read().split()
        r.horizon_ok = len(words) >= 2 and int(words[1]) >= a.horizon
    c.cleanup()
    servers.remove(c)
    shutil.copy(c.node.pg_log_file, os.path.join(base, f"{a.kind}-restore{i + 1}.log"))
    shutil.rmtree(copy, ignore_errors=True)
    say(f"{a.kind} restore {i + 1}: {r.wall:.2f} s to leave recovery, redo {r.redo:.2f} s "
        f"(startup CPU user {r.user:.2f} s, system {r.system:.2f} s)")
    return r


def median(values):
    return statistics.median(values)


def report(args, ig, ct, runs, lib, probes, elapsed, command):
    wall = {k: median([r.wall for r in runs[k]]) for k in runs}
    redo = {k: median([r.redo for r in runs[k]]) for k in runs}
    n = ig.idgen_records
    per_k_wall = (wall["idgen"] - wall["control"]) / n * 1000 if n else float("nan")
    per_k_redo = (redo["idgen"] - redo["control"]) / n * 1000 if n else float("nan")
    week = 7 * 24 * 3600 * 2  # a real server's horizon records in 7 days of steady load
    lines = [
        f"| {args.label} | {ig.records:,} ({ig.idgen_records:,} idgen) / {ig.bytes / 1048576:.1f} MiB "
        f"| {ct.records:,} ({ct.idgen_records:,} idgen) / {ct.bytes / 1048576:.1f} MiB "
        f"| {wall['idgen']:.2f} ({redo['idgen']:.2f}) | {wall['control']:.2f} ({redo['control']:.2f}) "
        f"| {wall['idgen'] / wall['control']:.2f} | {per_k_wall:.3f} ({per_k_redo:.3f}) "
        f"| {per_k_redo * week / 1000 / 60:.1f} |",
    ]
    header = [
        "| build | idgen archive: records replayed / WAL | control archive: records / WAL "
        "| idgen restore s (redo s) | control restore s (redo s) | ratio | s per 1,000 idgen records, net "
        "of control (redo) | 7 days' records (1.21 M) at that cost, min |",
        "|---|---|---|---|---|---|---|---|",
    ]
    detail = [
        "",
        f"Run: `{command}`",
        "",
        f"- server: {cluster.build_description()}",
        f"- library: `{args.build or lib[0]}` sha256 {lib[1]}…, file dated {lib[2]} UTC",
        f"- machine: {os.cpu_count()} CPUs (`nproc` {len(os.sched_getaffinity(0))}), Linux {platform.release()}, "
        f"restores on {disk_of(args.base_dir)}; one write + fsync + rename + directory fsync there (what "
        f"horizon::write does), at the start, before and after the restores: "
        f"{', '.join(f'{p:.2f}' for p in probes)} ms; net cost per idgen record in redo = "
        f"{per_k_redo / median(probes[1:]):.2f} x the median of the last two",
        f"- primaries in {os.path.dirname(args.primary_dir)}; load: pgbench -c {args.clients}"
        f"{f' -R {args.tps}' if args.tps else ''}, {args.batch} rows per INSERT; idgen: {ig.load_s:.0f} s on a clock "
        f"x{args.rate} (measured x{ig.clock_speed:.0f}), {ig.idgen_records / ig.load_s:.0f} horizon records a second, "
        f"{ig.txns:,} transactions, {ig.rows:,} rows; "
        f"control: {ct.load_s:.0f} s, {ct.txns:,} transactions, {ct.rows:,} rows "
        f"(measured clock x{ct.clock_speed:.0f}); "
        f"{ig.segments} / {ct.segments} segments archived",
        f"- restores: {args.repeat} of each, alternating; medians. idgen wall s: "
        f"{', '.join(f'{r.wall:.2f}' for r in runs['idgen'])}; control: "
        f"{', '.join(f'{r.wall:.2f}' for r in runs['control'])}; startup process CPU (user + system, median): "
        f"idgen {median([r.user + r.system for r in runs['idgen']]):.2f} s, control "
        f"{median([r.user + r.system for r in runs['control']]):.2f} s",
        "- restored horizon file at or past the primary's last horizon: "
        + ("yes" if all(r.horizon_ok for r in runs["idgen"]) else "NO"),
        f"- the whole run took {elapsed:.0f} s",
    ]
    return "\n".join(header + lines + detail) + "\n"


def run(args, base, servers):
    t0 = time.monotonic()
    args.bin_dir = cluster.pg_bin()
    if args.build:
        say(f"a private copy of the server with idgen from {args.build}")
        args.bin_dir = private_server(os.path.join(base, "server"), args.build)
    lib = library(args.bin_dir)
    say(f"library {lib[0]} sha256 {lib[1]}…; servers under {base}")
    probe = fsync_ms(base)
    say(f"one write + fsync + rename + directory fsync in {base}: {probe:.2f} ms")
    ig = make_archive("idgen", base, args, servers)
    ct = make_archive("control", base, args, servers, target_bytes=ig.bytes, target_txns=ig.txns)
    if ig.idgen_records == 0:
        raise cluster.SqlError("the snowflake load wrote no idgen records: is idgen preloaded?")
    runs = {"idgen": [], "control": []}
    probes = [probe, fsync_ms(base)]
    for i in range(args.repeat):
        for a in (ig, ct):
            runs[a.kind].append(restore(a, base, i, servers))
    probes.append(fsync_ms(base))
    say(f"one write + fsync + rename + directory fsync on the restores' disk: "
        f"{', '.join(f'{p:.2f}' for p in probes)} ms (start, before and after the restores)")
    if library(args.bin_dir)[1] != lib[1]:
        raise cluster.SqlError(f"{lib[0]} changed during the run (another install?): measure again")
    command = "benches/replay.py " + " ".join(shlex.quote(x) for x in sys.argv[1:])
    text = report(args, ig, ct, runs, lib, probes, time.monotonic() - t0, command)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=10_000,
                    help="horizon records to write on the snowflake primary (default 10000)")
    ap.add_argument("--seconds", type=int, default=60,
                    help="at most this many seconds of load on the snowflake primary (default 60)")
    ap.add_argument("--rate", type=int, default=300,
                    help="clock speed-up on the primaries (default 300: up to 600 horizon records a second, "
                         "where a real clock gives 2)")
    ap.add_argument("--clients", type=int, default=2, help="pgbench clients (default 2)")
    ap.add_argument("--tps", type=int, default=1000,
                    help="INSERT transactions a second on each primary, all clients together (pgbench -R; "
                         "default 1000; 0: as fast as it goes)")
    ap.add_argument("--primary-dir",
                    help="where the two primaries' data directories live (default /dev/shm, a tmpfs: their "
                         "horizon pushes then wait for no disk, and the load phase is short; the archives, base "
                         "backups and restores are under --base, on disk)")
    ap.add_argument("--batch", type=int, default=10, help="rows per INSERT (default 10)")
    ap.add_argument("--repeat", type=int, default=2, help="restores of each archive, alternating (default 2)")
    ap.add_argument("--label", default="this build", help="the build's name in the table's first column")
    ap.add_argument("--out", help="also write the Markdown report here")
    ap.add_argument("--build", help="a folder holding the idgen build to measure (idgen.so, idgen.control and the SQL "
                    "scripts anywhere under it: a `cargo pgrx package` tree, or the release tarball unpacked): the "
                    "servers run from a private copy of the server with it (default: the installed idgen)")
    ap.add_argument("--base", help="where the servers live (default: a new folder under /tmp, removed after)")
    args = ap.parse_args(argv)
    if min(args.records, args.seconds, args.rate, args.clients, args.batch, args.repeat) < 1 or args.tps < 0:
        ap.error("--records, --seconds, --rate, --clients, --batch and --repeat must be positive, --tps not negative")
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    base = args.base or tempfile.mkdtemp(prefix="idgen-replay-")
    args.base_dir = base
    shm = "/dev/shm"
    if args.primary_dir is None:
        args.primary_dir = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else base
    args.primary_dir = tempfile.mkdtemp(prefix="idgen-replay-primaries-", dir=args.primary_dir)
    servers = []
    try:
        return run(args, base, servers)
    except (Interrupted, Exception) as e:
        if not isinstance(e, Interrupted):
            traceback.print_exc()
        say(f"failed: {e!r}; every server it started is stopped")
        return 130 if isinstance(e, Interrupted) else 2
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for c in servers:
            try:
                c.cleanup()
            except Exception as e:  # noqa: BLE001
                say(f"could not stop the server in {c.base_dir}: {e}")
        shutil.rmtree(args.primary_dir, ignore_errors=True)
        if not args.base:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
