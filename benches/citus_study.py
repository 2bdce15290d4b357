"""The key study per shard, on a Citus cluster on this machine: what each key strategy does to the
B-trees of a distributed table's shards, distributed by the key itself and by a tenant column.

Starts a coordinator and two workers (Citus, then idgen, preloaded on each; worker ids 1, 2, 3;
idgen_harness/citus.py), and for each strategy and distribution: a fresh distributed table of
--shards shards, its primary key the only index (the key, or (tenant, key)), autovacuum off;
pgbench inserting --rows rows in transactions of --batch rows, at each client count of --clients,
through the coordinator, and through both workers at once (Citus runs queries from any node; a
pgbench per worker, each with the client count and half the rows); then, on each worker, for
each shard's key index: leaf splits from the worker's own WAL records (pg_walinspect, filtered
on the shard index's relfilenode), leaf density and pages (pgstatindex) and size; and, over the
whole table, how far the key's order strays from the order the rows were made in (each row's
clock_timestamp(), made just after its key: how much later than a row the latest row with a
smaller key was made). Rows: mean and spread over the shards.

Strategies: bigserial, snowflake_next(), uuid_v7() and gen_random_uuid() (v4), each the DEFAULT
of the distributed table, made by the node that builds the row (docs/citus.md says which node
evaluates it in which statement): through the coordinator, the coordinator's; through the
workers, each worker's. A bigserial made on a worker is Citus's own answer for keys made there:
each node's copy of the sequence counts in a range of its own, its group id shifted 48 bits up.

On a 2-core machine three servers share the cores with pgbench: the figures are about the
shape (splits, density, size per shard; rates as ratios in one run), not Citus's scale.

Runs as the postgres user with PG_BIN naming the server build (benches/citus sets both up).
usage: citus_study.py [--rows N] [--clients 1,8] [--batch B] [--shards S] [--paths coordinator,workers]
                      [--strategies ...] [--out DIR]
"""
import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time

from idgen_harness import cluster
from idgen_harness.citus import CitusCluster, citus_missing

STRATEGIES = {
    # name: (key column type and default, what makes it)
    "bigserial": ("bigserial", "a `bigserial`: through the coordinator its sequence; through a worker, Citus's "
                               "copy of the sequence on that worker, counting from its group id shifted 48 bits up"),
    "snowflake": ("bigint DEFAULT snowflake_next()",
                  "idgen's `snowflake_next()`, made on the node that builds the row"),
    "uuid_v7": ("uuid DEFAULT uuid_v7()", "idgen's `uuid_v7()`, made on the node that builds the row"),
    "uuid_v4": ("uuid DEFAULT gen_random_uuid()", "`gen_random_uuid()`, made on the node that builds the row"),
}
DISTRIBUTIONS = ("key", "tenant")
PATHS = ("coordinator", "workers")
# A row whose key sorts after a row made this much later is out of time order: far more than the
# time between a key and its row's clock_timestamp(), even on a busy 2-core machine.
LATE_MS = 100
TENANTS = 1000


def script_text(batch, tenants=TENANTS):
    """One pgbench transaction: a multi-row INSERT ... VALUES of `batch` rows, each with a random
    tenant, as an application sends them; the node it is sent to makes the keys and routes each
    row to its shard (an INSERT ... SELECT of generated rows would go through Citus's intermediate
    results instead, several times slower per statement)."""
    sets = "".join(f"\\set t{i} random(0, {tenants - 1})\n" for i in range(batch))
    rows = ", ".join(f"(:t{i}, 'payload-0123456789')" for i in range(batch))
    return f"{sets}INSERT INTO citus_study (tenant, payload) VALUES {rows};\n"


def create_table(coord, strategy, distribution, shards):
    key_type, _ = STRATEGIES[strategy]
    pk = "PRIMARY KEY (id)" if distribution == "key" else "PRIMARY KEY (tenant, id)"
    coord.q("DROP TABLE IF EXISTS citus_study",
            f"CREATE TABLE citus_study (id {key_type}, made_at timestamptz NOT NULL DEFAULT clock_timestamp(),"
            f" tenant int NOT NULL, payload text, {pk})"
            " WITH (autovacuum_enabled = off)",
            f"SELECT create_distributed_table('citus_study', '{'id' if distribution == 'key' else 'tenant'}',"
            f" shard_count => {shards})")


def shard_indexes(worker):
    """(index name, relfilenode) of each shard's primary key on this worker."""
    return worker.q("SET citus.override_table_visibility = off",  # else Citus hides its shards
                    "SELECT c.relname, pg_relation_filenode(c.oid) FROM pg_class c "
                    "WHERE c.relkind = 'i' AND c.relname ~ '^citus_study_pkey_[0-9]+$' ORDER BY c.relname")


def run_pgbench(nodes, clients, rows, batch, script):
    """pgbench against each of nodes at once, each with `clients` clients and an equal part of
    `rows`; the rows inserted and the seconds until the last one finished."""
    transactions = max(1, rows // (len(nodes) * clients * batch))
    cmds = [[os.path.join(cluster.pg_bin(), "pgbench"), "-n", "-M", "prepared", "-c", str(clients),
             "-j", str(min(clients, os.cpu_count() or 1)), "-t", str(transactions), "-f", script,
             "-h", n.socket_dir, "-p", str(n.port), "-U", "postgres", "postgres"] for n in nodes]
    started = time.perf_counter()
    runs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for cmd in cmds]
    outputs = [r.communicate() for r in runs]
    seconds = time.perf_counter() - started
    for r, (out, err) in zip(runs, outputs, strict=True):
        if r.returncode != 0 or "number of failed transactions: 0" not in out:
            raise RuntimeError(f"pgbench failed ({r.returncode}): {out[-800:]}{err[-800:]}")
    return transactions * clients * batch * len(nodes), seconds


def keys_and_time_order(coord):
    """The table's rows and distinct keys, and how far the key's order strays from the order the
    rows were made in: for each row, how much later than it the latest row with a smaller key was
    made (0 when none was made later); the share of rows LATE_MS or more behind, and the largest
    lag in ms. Read on the coordinator from one local copy (a window over the whole table is not
    one Citus pushes down)."""
    return coord.q("CREATE TEMP TABLE order_check AS SELECT id, made_at FROM citus_study",
                   "SELECT count(*), count(DISTINCT id), 100.0 * count(*) FILTER (WHERE lag_ms >= %d) / count(*),"
                   " greatest(max(lag_ms), 0) FROM ("
                   " SELECT id, extract(epoch FROM max(made_at) OVER (ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING"
                   " AND 1 PRECEDING) - made_at) * 1000 AS lag_ms FROM order_check) s" % LATE_MS)[0]


def measure(cc, strategy, distribution, path, clients, rows, batch, shards, script):
    coord = cc.coordinator
    create_table(coord, strategy, distribution, shards)
    for w in cc.workers:
        w.q("CHECKPOINT")
    start = {w.port: w.one("SELECT pg_current_wal_insert_lsn()") for w in cc.workers}
    inserted, seconds = run_pgbench([coord] if path == "coordinator" else cc.workers, clients, rows, batch, script)
    stored, distinct, late_pct, max_lag_ms = keys_and_time_order(coord)
    assert stored == distinct == inserted, (stored, distinct, inserted)
    per_shard = []
    for w in cc.workers:
        end = w.one("SELECT pg_current_wal_flush_lsn()")
        for name, filenode in shard_indexes(w):
            rel = rf"rel \d+/\d+/{filenode}\M"
            splits = w.one(f"SELECT count(*) FROM pg_get_wal_records_info('{start[w.port]}', '{end}')"
                           " WHERE resource_manager = 'Btree' AND record_type IN ('SPLIT_L', 'SPLIT_R')"
                           f" AND description ~ '^level:? 0,' AND block_ref ~ '{rel}'")
            pages, density = w.q(f"SELECT leaf_pages, avg_leaf_density FROM pgstatindex('{name}')")[0]
            size = w.one(f"SELECT pg_relation_size('{name}')")
            rows_in = w.one(f"SELECT count(*) FROM {name.replace('citus_study_pkey', 'citus_study')}")
            per_shard.append({"splits": splits, "pages": pages, "density": float(density), "bytes": size,
                              "rows": rows_in})
    assert len(per_shard) == shards and sum(s["rows"] for s in per_shard) == inserted
    return {
        "strategy": strategy, "distribution": distribution, "through": path, "clients": clients, "rows": inserted,
        "rows_per_s": inserted / seconds, "shards": shards,
        "leaf_splits_per_shard": statistics.mean(s["splits"] for s in per_shard),
        "leaf_splits_per_1k_rows": 1000 * sum(s["splits"] for s in per_shard) / inserted,
        "avg_leaf_density": statistics.mean(s["density"] for s in per_shard),
        "min_leaf_density": min(s["density"] for s in per_shard),
        "index_kb_per_shard": statistics.mean(s["bytes"] for s in per_shard) / 1024,
        "rows_per_shard_min": min(s["rows"] for s in per_shard),
        "rows_per_shard_max": max(s["rows"] for s in per_shard),
        "late_rows_pct": float(late_pct), "max_lag_ms": float(max_lag_ms),
    }


def report(results, args, build):
    by = {(r["strategy"], r["distribution"], r["through"], r["clients"]): r for r in results}
    lines = [f"# The key study per shard, on Citus ({build})", "",
             f"`bash benches/citus --rows {args.rows} --clients {args.clients} --batch {args.batch} "
             f"--shards {args.shards} --paths {args.paths}`: a coordinator and two workers on one "
             f"{os.cpu_count()}-core machine, rows inserted with pgbench through the coordinator, or through "
             "both workers at once (a pgbench per worker, each with the clients given and half the rows); per "
             "shard, the key index's leaf splits (the worker's WAL), leaf density (pgstatindex) and size; over "
             f"the table, the share of rows with a smaller-keyed row made {LATE_MS} ms or more after them, and "
             "the largest such lag. Three servers and pgbench share the cores: the rates are ratios within "
             "this run, not Citus's scale.", "",
             "| strategy | distributed by | through | clients | rows/s | × bigserial | leaf splits per 1,000 rows | "
             f"leaf density (mean, min over shards) | index KB per shard | rows out of time order (≥ {LATE_MS} ms) | "
             "largest lag, ms |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        base = by.get(("bigserial", r["distribution"], r["through"], r["clients"]))
        ratio = r["rows_per_s"] / base["rows_per_s"] if base else float("nan")
        clients = f"{r['clients']}" if r["through"] == "coordinator" else f"{r['clients']} per worker"
        lines.append(f"| {r['strategy']} | {r['distribution']} | {r['through']} | {clients} | {r['rows_per_s']:,.0f} | "
                     f"{ratio:.2f} | {r['leaf_splits_per_1k_rows']:.1f} | "
                     f"{r['avg_leaf_density']:.1f} %, {r['min_leaf_density']:.1f} % | {r['index_kb_per_shard']:,.0f} | "
                     f"{r['late_rows_pct']:.1f} % | {r['max_lag_ms']:,.0f} |")
    lines += ["", "What makes each key:", ""]
    lines += [f"- {name}: {made}" for name, (_, made) in STRATEGIES.items()]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200_000, help="rows per run (default 200,000)")
    ap.add_argument("--clients", default="1,8", help="pgbench client counts, comma-separated (default 1,8)")
    ap.add_argument("--batch", type=int, default=100, help="rows per transaction (default 100)")
    ap.add_argument("--shards", type=int, default=8, help="shards per table (default 8)")
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--paths", default=",".join(PATHS),
                    help="where the rows are sent: coordinator, workers or both (default both)")
    ap.add_argument("--out", help="write citus.md and citus.csv here")
    args = ap.parse_args(argv)
    missing = citus_missing()
    if missing:
        print(f"error: {missing}", file=sys.stderr)
        return 2
    clients = [int(c) for c in args.clients.split(",")]
    strategies = args.strategies.split(",")
    paths = args.paths.split(",")
    if not set(strategies) <= set(STRATEGIES) or not set(paths) <= set(PATHS):
        print(f"error: --strategies takes {', '.join(STRATEGIES)}; --paths takes {', '.join(PATHS)}", file=sys.stderr)
        return 2
    base = tempfile.mkdtemp(prefix="idgen-citus-study-")
    factory = cluster.Factory(base)
    results = []
    try:
        cc = CitusCluster(factory, "study", conf=["shared_buffers = '256MB'", "synchronous_commit = off",
                                                  "max_wal_size = '2GB'"]).start()
        cc.coordinator.q("CREATE EXTENSION pg_walinspect", "CREATE EXTENSION pgstattuple")
        build = cluster.build_description()
        with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False, dir=base) as f:
            f.write(script_text(args.batch))
            script = f.name
        for path in paths:
            for distribution in DISTRIBUTIONS:
                for strategy in strategies:
                    for c in clients:
                        r = measure(cc, strategy, distribution, path, c, args.rows, args.batch, args.shards, script)
                        print(f"  {strategy}, by {distribution}, through the {path}, {c} clients: "
                              f"{r['rows_per_s']:,.0f} rows/s, {r['leaf_splits_per_1k_rows']:.1f} leaf splits per "
                              f"1,000 rows, density {r['avg_leaf_density']:.1f} %, "
                              f"{r['late_rows_pct']:.1f} % of rows out of time order", file=sys.stderr)
                        results.append(r)
    finally:
        factory.close()
        subprocess.run(["rm", "-rf", base])
    text = report(results, args, build)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "citus.md"), "w") as f:
            f.write(text)
        with open(os.path.join(args.out, "citus.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(results[0]))
            w.writeheader()
            w.writerows(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
