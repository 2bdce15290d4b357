"""What a fleet's short codes cost: short_code_next() (blocks of a registry counter) and
worker_code_next() (a sequence of the server's beside its worker id) against the one-server recipe
base62_encode(nextval()) with CACHE 1000, in one backend, in one run; and what a block costs the
registry.

Two servers on this machine's loopback: a registry (plain PostgreSQL with
sql/registry/idgen_registry.sql) and an idgen server that takes blocks from it. Each maker runs
as `SELECT count(<expr>) FROM rows` (a table of --rows rows) in one backend, the median of
--repeat rounds that time every maker once each; speeds are ratios within the run. Counters of 7
digits, paced far above what one backend takes (the pace is a registry's safety margin, not a
speed limit here). A block is timed from a client on the registry (one round trip on a Unix
socket included), --blocks times.

Runs as the postgres user with PG_BIN naming the server build; from the checkout, as root:
  PG=15 bash -c 'source pg_test/install.sh && ensure_server && postgres_tree && runuser -u postgres -- \\
      env PG_BIN="$PG_BIN" PYTHONPATH=benches "$VENV/bin/python" benches/short_codes.py --out /tmp/short_codes.md' \\
      && cp /tmp/short_codes.md benches/results/pg15/short_codes.md
(--out must be a place the postgres user can write.)
"""
import argparse
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time

from idgen_harness import cluster

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCHEMA = os.path.join(ROOT, "sql", "registry", "idgen_registry.sql")

# name, the SQL expression, what it is
MAKERS = [
    ("base62_encode(nextval()) CACHE 1000", "base62_encode(nextval('codes_cache_1000'), 7)",
     "one server's counter, the README's recipe"),
    ("short_code_next(), blocks of 1,000", "short_code_next('blocks_1000')", "registry counter, Leaf-segment"),
    ("short_code_next(), blocks of 100,000", "short_code_next('blocks_100000')", "the same, larger blocks"),
    ("worker_code_next(), blocks of 1,000", "worker_code_next('worker_codes', 7)",
     "no registry: the worker id beside a sequence"),
]


def timed(c, sql):
    conn = c.connect()
    try:
        with conn.cursor() as cur:
            t0 = time.perf_counter()
            cur.execute(sql)
            cur.fetchall()
            return time.perf_counter() - t0
    finally:
        conn.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--blocks", type=int, default=500)
    p.add_argument("--out")
    a = p.parse_args()
    base = tempfile.mkdtemp(prefix="idgen-short-codes-bench-")
    made = []
    try:
        reg = cluster.Cluster(os.path.join(base, "registry"), preload=False).init().start()
        made.append(reg)
        reg.q("CREATE DATABASE registry")
        subprocess.run([os.path.join(cluster.pg_bin(), "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h",
                        reg.socket_dir, "-p", str(reg.port), "-d", "registry", "-f", SCHEMA], check=True)
        reg.q("CREATE ROLE srv LOGIN IN ROLE idgen_fleet", db="registry")
        for size in (1000, 100_000):
            reg.q(f"SELECT idgen_registry.create_counter('blocks_{size}', 7, {size}, 2000000000)", db="registry")
        reg.q("SELECT idgen_registry.create_counter('timed', 7, 1000, 2000000000)", db="registry")
        conninfo = f"host=127.0.0.1 port={reg.port} dbname=registry user=srv"
        server = cluster.Cluster(os.path.join(base, "server"), worker_id=1,
                                 conf=[f"idgen.registry = '{conninfo}'"]).init().start()
        made.append(server)
        server.q("CREATE EXTENSION idgen", "CREATE SEQUENCE codes_cache_1000 CACHE 1000",
                 "CREATE SEQUENCE worker_codes INCREMENT 1000",
                 f"CREATE TABLE rows AS SELECT g FROM generate_series(1, {a.rows}) g", "VACUUM ANALYZE rows")
        for counter in ("blocks_1000", "blocks_100000"):  # the first block of each, before the clock runs
            while True:
                try:
                    server.q(f"SELECT short_code_next('{counter}')")
                    break
                except Exception:  # noqa: BLE001 - the block worker's first answer
                    time.sleep(0.01)
        times = {name: [] for name, _, _ in MAKERS}
        for _ in range(a.repeat):
            for name, expr, _ in MAKERS:
                times[name].append(timed(server, f"SELECT count({expr}) FROM rows"))
        status = {r[0]: r[1:] for r in server.q(
            "SELECT counter, blocks_taken, mean_block_ms, issued FROM idgen_short_code_status()")}
        take = []
        conn = reg.connect(db="registry", user="srv")
        with conn.cursor() as cur:
            for _ in range(a.blocks):
                t0 = time.perf_counter()
                cur.execute("SELECT * FROM idgen_registry.take_block('timed')")
                row = cur.fetchone()
                take.append(time.perf_counter() - t0)
                assert row[0] == "granted", row
        conn.close()
        median = {name: statistics.median(t) for name, t in times.items()}
        baseline = median[MAKERS[0][0]]
        lines = [
            "# What a fleet's short codes cost",
            "",
            f"{cluster.build_description()}; {platform.node()}, {os.cpu_count()} CPUs; one run, "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; `benches/short_codes.py --rows {a.rows} "
            f"--repeat {a.repeat}`.",
            "",
            f"One backend, `SELECT count(<maker>) FROM rows` over {a.rows:,} rows, median of {a.repeat} rounds "
            "that time every maker once each; codes of 7 digits.",
            "",
            "| maker | what | s | codes/s | × the CACHE 1000 recipe's time |",
            "|---|---|---:|---:|---:|",
        ]
        for name, _, what in MAKERS:
            s = median[name]
            lines.append(f"| `{name}` | {what} | {s:.3f} | {a.rows / s:,.0f} | {s / baseline:.2f} |")
        b1000 = status["blocks_1000"]
        lines += [
            "",
            f"A block, `idgen_registry.take_block()` from a client on the registry's server (a Unix socket), "
            f"median / p99 of {a.blocks}: {1e3 * statistics.median(take):.2f} / "
            f"{1e3 * sorted(take)[int(0.99 * len(take))]:.2f} ms.",
            f"The server's block worker, over loopback TCP, for the counter of blocks of 1,000: {b1000[0]:,} "
            f"calls, {b1000[1]:.2f} ms each on average (idgen_short_code_status()), each for as many "
            "consecutive blocks (1 to 64) as the backends' pace needs: twice as many as last time after a "
            "grant that lasted under a second or a backend that found none in hand, half as many after one "
            "that lasted over ten seconds.",
        ]
        text = "\n".join(lines) + "\n"
        print(text)
        if a.out:
            with open(a.out, "w") as f:
                f.write(text)
    finally:
        for c in made:
            c.cleanup()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
