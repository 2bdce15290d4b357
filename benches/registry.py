"""What the worker-id registry costs: the generator's rate with a registry configured (against the
same server build without one, in the same run), what one claim or renewal costs the registry,
and how long a server with idgen.worker_id = auto waits after its start for its first id.

Three servers on this machine's loopback: a registry (plain PostgreSQL with
sql/registry/idgen_registry.sql), an idgen server with `auto` and one with a fixed worker id and
no registry. The rate is `SELECT count(snowflake_next()) FROM <table of N rows>` in one backend,
the median of --repeat rounds that time both servers once each, as a share of the format's cap
(4,096 ids per ms). A claim is timed from a client on the registry (one round trip on a Unix
socket included), --claims times.

Runs as the postgres user with PG_BIN naming the server build; from the checkout, as root:
  PG=15 bash -c 'source pg_test/install.sh && ensure_server && postgres_tree && runuser -u postgres -- \
      env PG_BIN="$PG_BIN" "$VENV/bin/python" benches/registry.py --out /tmp/registry.md' \
      && cp /tmp/registry.md benches/results/pg15/registry.md
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

CAP_PER_S = 4_096_000
SCHEMA = os.path.join(ROOT, "sql", "registry", "idgen_registry.sql")


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
    p.add_argument("--rows", type=int, default=4_096_000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--claims", type=int, default=500, help="at most 1,000: each takes a new id")
    p.add_argument("--out")
    a = p.parse_args()
    base = tempfile.mkdtemp(prefix="idgen-registry-bench-")
    made = []
    try:
        reg = cluster.Cluster(os.path.join(base, "registry"), preload=False).init().start()
        made.append(reg)
        reg.q("CREATE DATABASE registry")
        subprocess.run([os.path.join(cluster.pg_bin(), "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h",
                        reg.socket_dir, "-p", str(reg.port), "-d", "registry", "-f", SCHEMA], check=True)
        reg.q("CREATE ROLE srv LOGIN IN ROLE idgen_fleet", db="registry")
        # The claims measured below come from made-up holders through this one role: allow it all ids.
        reg.q("INSERT INTO idgen_registry.quota VALUES ('srv', 1024)", db="registry")
        conninfo = f"host=127.0.0.1 port={reg.port} dbname=registry user=srv"
        auto = cluster.Cluster(os.path.join(base, "auto"), worker_id="auto",
                               conf=[f"idgen.registry = '{conninfo}'"]).init()
        made.append(auto)
        t0 = time.monotonic()
        auto.start()
        auto.q("CREATE EXTENSION idgen")
        while True:
            try:
                auto.q("SELECT snowflake_next()")
                break
            except Exception:  # noqa: BLE001 - waiting for the first lease
                time.sleep(0.01)
        first_id_s = time.monotonic() - t0
        plain = cluster.Cluster(os.path.join(base, "plain"), worker_id=1).init().start()
        made.append(plain)
        plain.q("CREATE EXTENSION idgen")
        # The time from pg_ctl start to accepting connections, for comparison.
        t0 = time.monotonic()
        plain.stop()
        plain.start()
        plain_start_s = time.monotonic() - t0
        for c in (auto, plain):
            c.q(f"CREATE TABLE rows AS SELECT g FROM generate_series(1, {a.rows}) g", "VACUUM ANALYZE rows")
        rates = {"auto": [], "plain": []}
        for _ in range(a.repeat):
            for name, c in (("auto", auto), ("plain", plain)):
                s = timed(c, "SELECT count(snowflake_next()) FROM rows")
                rates[name].append(a.rows / s)
        claim, renew = [], []
        # an automatic claim gives its fence, as a server does: the end of the lease it asks for
        fence = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint + 30000"
        space = "'twitter', 1288834974657"  # the id space of idgen's defaults, which the registry serves
        conn = reg.connect(db="registry", user="srv")
        with conn.cursor() as cur:
            for k in range(a.claims):
                t0 = time.perf_counter()
                cur.execute(f"SELECT * FROM idgen_registry.claim('{k + 10}', '1', 'bench', NULL, 30000, 0, {fence},"
                            f" {space})")
                cur.fetchall()
                claim.append(time.perf_counter() - t0)
            for _ in range(a.claims):
                t0 = time.perf_counter()
                cur.execute(f"SELECT * FROM idgen_registry.claim('10', '1', 'bench', NULL, 30000, 0, {fence}, {space})")
                cur.fetchall()
                renew.append(time.perf_counter() - t0)
        conn.close()
        claim_db = reg.q("SELECT count(*) FROM idgen_registry.holders", db="registry")
        auto_rate = statistics.median(rates["auto"])
        plain_rate = statistics.median(rates["plain"])
        lines = [
            "# The worker-id registry's cost",
            "",
            f"{cluster.build_description()}; {platform.node()}, {os.cpu_count()} CPUs; one run, "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
            "",
            "| what | figure |",
            "|---|---:|",
            f"| `snowflake_next()` with `idgen.worker_id = auto` and a registry | {auto_rate / 1e6:.3f} M ids/s, "
            f"**{100 * auto_rate / CAP_PER_S:.1f} % of the cap** |",
            f"| the same build, fixed worker id, no registry | {plain_rate / 1e6:.3f} M ids/s, "
            f"{100 * plain_rate / CAP_PER_S:.1f} % of the cap |",
            f"| ratio, registry / none (median of {a.repeat} rounds of {a.rows:,} ids) | "
            f"{auto_rate / plain_rate:.3f} |",
            f"| a claim of a new id (auto), round trip on one connection included, median / p99 of {a.claims} | "
            f"{1e3 * statistics.median(claim):.2f} / {1e3 * sorted(claim)[int(0.99 * len(claim))]:.2f} ms |",
            f"| a renewal (the holder's own id), the same, median / p99 of {a.claims} | "
            f"{1e3 * statistics.median(renew):.2f} / {1e3 * sorted(renew)[int(0.99 * len(renew))]:.2f} ms |",
            f"| `auto` server: from `pg_ctl start` to its first id | {first_id_s:.2f} s |",
            f"| for comparison: a restart of a server without a registry (stop + start) | {plain_start_s:.2f} s |",
            "",
            f"The registry held {claim_db[0][0]} leases after the claims. Renewals run every third of "
            "idgen.lease (10 s by default) in the lease worker, never on the per-id path, which reads "
            "one atomic word (two for `auto`).",
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
