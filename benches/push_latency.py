"""How long one horizon push takes: the call of snowflake_next() that writes the WAL record, flushes
it, waits for the synchronous standbys (when there are any) and rewrites idgen_horizon, measured
inside the server so that no round trip is counted.

Three set-ups, one after the other, on this machine's loopback (Unix sockets): a primary alone;
a primary with an asynchronous streaming standby; the same with the standby synchronous
(synchronous_standby_names = '*'). Each runs a PL/pgSQL loop of snowflake_next() for --seconds;
a call slower than --threshold-us after which idgen_stats().horizon has moved is a push (about
two a second; an ordinary call takes well under a microsecond, and slow calls that moved nothing
were preempted). fsync is on, as on a real server.

Runs as the postgres user with PG_BIN naming the server build; from the checkout, as root:
  PG=15 bash -c 'source pg_test/install.sh && ensure_server && postgres_tree && runuser -u postgres -- \
      env PG_BIN="$PG_BIN" "$VENV/bin/python" benches/push_latency.py --out benches/results/pg15/push-latency.md'
"""
import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time

from idgen_harness import cluster

HERE = os.path.dirname(os.path.abspath(__file__))

LOOP = """
DO $$
DECLARE
  t0 timestamptz;
  dt float8;
  deadline timestamptz := clock_timestamp() + interval '{seconds} s';
  seen timestamptz := (SELECT horizon FROM idgen_stats());
  h timestamptz;
BEGIN
  WHILE clock_timestamp() < deadline LOOP
    t0 := clock_timestamp();
    PERFORM snowflake_next();
    dt := extract(epoch FROM clock_timestamp() - t0) * 1e6;
    IF dt > {threshold} THEN
      -- a slow call is a push only if the horizon moved: the others were preempted (2 CPUs)
      h := (SELECT horizon FROM idgen_stats());
      IF h IS DISTINCT FROM seen THEN
        INSERT INTO pushes VALUES (dt);
        seen := h;
      END IF;
    END IF;
  END LOOP;
END $$"""


def measure(c, seconds, threshold):
    rows = c.q("CREATE TEMP TABLE pushes (us float8)", LOOP.format(seconds=seconds, threshold=threshold),
               "SELECT us FROM pushes ORDER BY us")
    return [r[0] for r in rows]


def summary(name, pushes, seconds):
    if not pushes:
        return f"| {name} | 0 | — | — | — |"
    p = sorted(pushes)
    p90 = p[min(len(p) - 1, int(len(p) * 0.9))]
    return (f"| {name} | {len(p)} ({len(p) / seconds:.1f}/s) | {statistics.median(p) / 1000:.2f} ms | "
            f"{p90 / 1000:.2f} ms | {p[-1] / 1000:.2f} ms |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--threshold-us", type=float, default=200)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    base = tempfile.mkdtemp(prefix="idgen-push-latency-")
    made = []
    lines = []
    try:
        primary = cluster.Cluster(os.path.join(base, "primary"), fsync=True,
                                  conf=["wal_level = replica", "max_wal_senders = 4"]).init()
        made.append(primary)
        primary.start()
        primary.q("CREATE EXTENSION idgen")
        lines.append(summary("primary alone", measure(primary, args.seconds, args.threshold_us), args.seconds))
        standby = primary.base_backup(os.path.join(base, "standby"))
        made.append(standby)
        standby.start()
        lines.append(summary("asynchronous standby", measure(primary, args.seconds, args.threshold_us),
                             args.seconds))
        primary.set_synchronous_standby_names("*", wait_for="walreceiver")
        lines.append(summary("synchronous standby (remote flush)",
                             measure(primary, args.seconds, args.threshold_us), args.seconds))
        version = primary.one("SHOW server_version")
    finally:
        for c in made:
            c.cleanup()
        shutil.rmtree(base, ignore_errors=True)
    report = "\n".join([
        f"Horizon push latency, PostgreSQL {version}, {os.cpu_count()} CPUs, {platform.machine()}, "
        f"Linux {platform.release()}, fsync on, Unix sockets; {args.seconds:g} s per set-up, "
        f"{time.strftime('%Y-%m-%d')}.",
        "",
        "| set-up | pushes | median | 90th percentile | slowest |",
        "|---|---|---|---|---|",
        *lines,
        "",
        "Command: `PG=15 bash -c 'source pg_test/install.sh && ensure_server && postgres_tree && "
        "runuser -u postgres -- env PG_BIN=\"$PG_BIN\" \"$VENV/bin/python\" benches/push_latency.py'`",
        "",
    ])
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report)


if __name__ == "__main__":
    main()
