"""Writes through a registry outage: three idgen servers (two with idgen.worker_id = auto, one
with a fixed id) lease their worker ids from a registry, each stores ids in a table of its own
from one paced writer (a statement of --rows ids every --pause seconds), and the registry is
stopped for --outage seconds (10 minutes by default, longer than any lease) and started again.
Reported: the statements and ids each server stored before, during and after the outage, the
statements refused, the ids stored twice across the three tables, and how long each server took
to renew once the registry was back. The settings are idgen's defaults (idgen.lease 30 s,
idgen.lease_grace 15 min) unless --lease and --grace say otherwise.

Runs as the postgres user with PG_BIN naming the server build; from the checkout, as root:
  PG=15 bash -c 'source pg_test/install.sh && ensure_server && postgres_tree && runuser -u postgres -- \\
      env PG_BIN="$PG_BIN" "$VENV/bin/python" benches/registry_outage.py --out /tmp/registry_outage.md' \\
      && cp /tmp/registry_outage.md benches/results/pg15/registry_outage.md
(--out must be a place the postgres user can write.)
"""
import argparse
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import time

import psycopg2
from idgen_harness import cluster

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCHEMA = os.path.join(ROOT, "sql", "registry", "idgen_registry.sql")


class Writer:
    """One paced writer: a statement of `rows` ids into t every `pause` seconds; each statement's
    outcome kept with the time it ended."""

    def __init__(self, c, rows, pause):
        self.c, self.rows, self.pause = c, rows, pause
        self.done, self.refused = [], []  # (monotonic time, ...) per statement
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        conn = self.c.connect()
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                while not self.stopping.is_set():
                    try:
                        cur.execute(f"INSERT INTO t SELECT snowflake_next() FROM generate_series(1, {self.rows})")
                        self.done.append(time.monotonic())
                    except psycopg2.Error as e:
                        self.refused.append((time.monotonic(), e.pgcode, e.diag.message_primary))
                    time.sleep(self.pause)
        finally:
            conn.close()

    def finish(self):
        self.stopping.set()
        self.thread.join(timeout=60)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--outage", type=float, default=600, help="seconds the registry is down")
    p.add_argument("--rows", type=int, default=100)
    p.add_argument("--pause", type=float, default=0.05)
    p.add_argument("--lease", default="30s")
    p.add_argument("--grace", default="15min")
    p.add_argument("--out")
    a = p.parse_args()
    base = tempfile.mkdtemp(prefix="idgen-registry-outage-")
    made = []
    try:
        reg = cluster.Cluster(os.path.join(base, "registry"), preload=False).init().start()
        made.append(reg)
        reg.q("CREATE DATABASE registry")
        subprocess.run([os.path.join(cluster.pg_bin(), "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h",
                        reg.socket_dir, "-p", str(reg.port), "-d", "registry", "-f", SCHEMA], check=True)
        servers = []
        for name, worker in (("auto1", "auto"), ("auto2", "auto"), ("fixed", 7)):
            reg.q(f"CREATE ROLE srv_{name} LOGIN IN ROLE idgen_fleet", db="registry")
            c = cluster.Cluster(os.path.join(base, name), worker_id=worker, conf=[
                f"idgen.registry = 'host=127.0.0.1 port={reg.port} dbname=registry user=srv_{name}'",
                f"idgen.lease = '{a.lease}'", f"idgen.lease_grace = '{a.grace}'", f"cluster_name = '{name}'"]).init()
            made.append(c)
            c.start()
            c.q("CREATE EXTENSION idgen", "CREATE TABLE t (id bigint PRIMARY KEY)")
            servers.append((name, c))
        for _, c in servers:
            deadline = time.monotonic() + 30
            while True:
                try:
                    c.q("SELECT snowflake_next()")
                    break
                except psycopg2.Error:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
        writers = [Writer(c, a.rows, a.pause) for _, c in servers]
        time.sleep(10)
        reg.stop()
        stopped = time.monotonic()
        print(f"registry stopped for {a.outage:.0f} s", flush=True)
        time.sleep(a.outage)
        reg.start()
        started = time.monotonic()
        renewed = {}
        while len(renewed) < len(servers) and time.monotonic() - started < 120:
            for name, c in servers:
                if name not in renewed and c.one("SELECT registry_reachable FROM idgen_lease_status()") is True:
                    renewed[name] = time.monotonic() - started
            time.sleep(0.2)
        time.sleep(10)
        for w in writers:
            w.finish()
        ids = [i for _, c in servers for (i,) in c.q("SELECT id FROM t")]
        twice = len(ids) - len(set(ids))
        rows = []
        for (name, c), w in zip(servers, writers, strict=True):
            before = sum(1 for t in w.done if t < stopped)
            during = sum(1 for t in w.done if stopped <= t < started)
            after = sum(1 for t in w.done if t >= started)
            worker = c.one("SELECT worker_id FROM idgen_lease_status()")
            stored = c.one("SELECT count(*) FROM t")
            rows.append(f"| {name} | {worker} | {before:,} | {during:,} | {after:,} | {stored:,} | "
                        f"{len(w.refused):,} | {renewed.get(name, float('nan')):.1f} s |")
        version = servers[0][1].one("SELECT current_setting('server_version')")
        report = "\n".join([
            "# Writes through a registry outage", "",
            f"`benches/registry_outage.py --outage {a.outage:.0f} --rows {a.rows} --pause {a.pause}"
            f" --lease {a.lease} --grace {a.grace}` on PostgreSQL {version}, {platform.machine()},"
            f" {os.cpu_count()} CPUs: the registry stopped for {a.outage:.0f} s while three servers wrote,"
            f" each one paced statement of {a.rows} ids at a time.", "",
            "| server | worker id | statements before | during the outage | after | ids stored | refused"
            " | renewed after the restart |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
            *rows, "",
            f"Ids stored twice across the three tables: {twice:,} of {len(ids):,}.", ""])
        print(report)
        if a.out:
            with open(a.out, "w") as f:
                f.write(report)
        return 1 if twice or any(w.refused for w in writers) else 0
    finally:
        for c in made:
            c.cleanup()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
