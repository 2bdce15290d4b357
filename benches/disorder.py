"""The study's disorder axis against a live server: keys that reach the index out of order.
A module of the study: run it with `benches/run --disorder 0,2,10,40` (benches/run --help).

Each row is held for a random time between making its key and inserting it: a BEFORE INSERT
trigger sleeps (exponentially distributed, mean = the window), so the key, made by the INSERT's
SELECT list or the column DEFAULT, is fixed before the wait and reaches the index after it. The
trigger also stamps each row, after the wait, with an arrival number from a sequence and the time,
so the disorder is measured, not assumed: for each row, how many larger keys were inserted before
it, and how long after the first of them it arrived. The measured arrival order is then replayed
into the model of nbtree's leaf splits (idgen_harness.nbtree_model), whose density and fragmentation are
checked against what pgstatindex reports.

Mitigations, at the widest window: the key index at a lower fillfactor, fewer writers at once (what
a pool of that size enforces: the same rows with fewer clients), REINDEX CONCURRENTLY after the
run, the key made after the wait (a second BEFORE INSERT trigger setting NEW.id, fired after
the one that waits), and the table partitioned by UTC days of keys (for the keys that hold a time:
every row of the run goes to today's partition, whose key index is measured).
"""
import sys
import time

import pgconn
import study
from idgen_harness import nbtree_model

COLUMNS = ", arrival bigint, arrived_at timestamptz, held_us integer"
# The first key of a moment {ts}, for the keys that hold their time: day partitions' bounds.
DAY_BOUNDS = {"snowflake": "snowflake_from_timestamp({ts})", "uuid_v7": "uuid_v7_boundary({ts})"}

# The wait, then the arrival stamp; with a key expression, the key is (re)made after the wait.
HOLD = """
CREATE OR REPLACE FUNCTION public.idgen_study_hold() RETURNS trigger LANGUAGE plpgsql AS $f$
DECLARE
    started timestamptz := clock_timestamp();
    mean_s float8 := TG_ARGV[0]::float8 / 1000;
BEGIN
    IF mean_s > 0 THEN
        -- exponential: 1 - random() is in (0, 1]
        PERFORM pg_catalog.pg_sleep(-pg_catalog.ln(1 - pg_catalog.random()) * mean_s);
    END IF;
    IF TG_NARGS > 1 THEN
        EXECUTE 'SELECT ' || TG_ARGV[1] INTO NEW.id;
    END IF;
    NEW.held_us := (extract(epoch FROM clock_timestamp() - started) * 1e6)::integer;
    NEW.arrival := nextval('idgen_study_arrival');
    NEW.arrived_at := clock_timestamp();
    RETURN NEW;
END $f$"""


def setup(window_ms, late_expr=None):
    args = [f"'{float(window_ms)}'"] + ([quote(late_expr)] if late_expr else [])
    return [
        "DROP SEQUENCE IF EXISTS idgen_study_arrival",
        "CREATE SEQUENCE idgen_study_arrival",
        HOLD,
        "CREATE TRIGGER idgen_study_hold BEFORE INSERT ON idgen_study FOR EACH ROW "
        f"EXECUTE FUNCTION public.idgen_study_hold({', '.join(args)})",
    ]


def quote(text):
    return "'" + text.replace("'", "''") + "'"


def measured_disorder(cur, fillfactor):
    """The arrival order, what it says about disorder, and the model's replay of it."""
    cur.execute("SELECT arrival, (extract(epoch FROM arrived_at) * 1e6)::bigint, held_us FROM idgen_study ORDER BY id")
    fetched = cur.fetchall()
    arrival = [a for a, _, _ in fetched]
    order = nbtree_model.arrival_order(arrival)  # key ranks in arrival order
    times = [t for _, t, _ in sorted(fetched)]  # arrival times in arrival order
    before = nbtree_model.inversions(order)
    late_us = nbtree_model.lateness(order, times)
    key_bytes = pgconn.one(cur, "SELECT round(avg(pg_column_size(id)))::int FROM idgen_study")[0]
    leaf = nbtree_model.Leaf(nbtree_model.item_bytes(key_bytes), fillfactor)
    model = nbtree_model.replay(order, leaf)
    n = len(order)
    late = model.late_keys
    return {
        "held_ms_mean": sum(h for _, _, h in fetched) / n / 1000,
        "late_rows_pct": 100 * sum(1 for b in before if b) / n,
        "larger_before_mean": sum(before) / n,
        "larger_before_p50": nbtree_model.percentile(before, 50),
        "larger_before_p99": nbtree_model.percentile(before, 99),
        "larger_before_max": max(before),
        "lateness_ms_p99": nbtree_model.percentile(late_us, 99) / 1000,
        "lateness_ms_max": max(late_us) / 1000,
        "key_item_bytes": leaf.item, "leaf_capacity": leaf.capacity,
        "room_after_rightmost_split": leaf.room_after_rightmost_split,
        "model_leaf_pages": model.leaf_pages, "model_density": model.density,
        "model_fragmentation": model.fragmentation, "model_rightmost_splits": model.rightmost_splits,
        "model_5050_splits": model.other_splits,
        "late_keys_p50": nbtree_model.percentile(late, 50), "late_keys_p90": nbtree_model.percentile(late, 90),
        "late_keys_max": max(late) if late else 0,
        "broken_splits_pct": 100 * model.broken / model.rightmost_splits if model.rightmost_splits else 0.0,
    }


def reindex(cur):
    """REINDEX CONCURRENTLY of the key index: its time, its WAL, and the index after it."""
    start = pgconn.one(cur, "SELECT pg_current_wal_insert_lsn()")[0]
    started = time.perf_counter()
    cur.execute("REINDEX INDEX CONCURRENTLY idgen_study_pkey")
    seconds = time.perf_counter() - started
    wal, size = pgconn.one(cur, "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)::bigint, "
                                "pg_relation_size('idgen_study_pkey')", (start,))
    density, fragmentation = pgconn.one(
        cur, "SELECT avg_leaf_density, leaf_fragmentation FROM pgstatindex('idgen_study_pkey')")
    return {"reindex_seconds": seconds, "reindex_wal_bytes": int(wal), "density_after_reindex": float(density),
            "fragmentation_after_reindex": float(fragmentation), "index_bytes_after_reindex": int(size)}


def plan(strategies, windows, clients, mitigations, pool, fillfactors):
    """(strategy, window, clients, fillfactor, late key?, mitigation name, REINDEX after?) for every
    run: each window at fillfactor 90 with every client count, then the mitigations at the widest
    window and the most clients."""
    runs = []
    widest, most = max(windows), max(clients)
    for w in windows:
        for c in clients:
            for s in strategies:
                runs.append((s, w, c, 90, False, "none", mitigations and w == widest and c == most))
    if mitigations:
        for ff in fillfactors:
            runs += [(s, widest, most, ff, False, f"fillfactor {ff}", False) for s in strategies]
        runs += [(s, widest, pool, 90, False, f"{pool} writers at once", False) for s in strategies]
        runs += [(s, widest, most, 90, True, "key made after the wait", False) for s in strategies if s.expr]
        runs += [(s, widest, most, 90, False, "day partitions", False) for s in strategies if s.name in DAY_BOUNDS]
    return runs


def run(strategies, windows, clients, rows, batch, checkpoints, mitigations=False, pool=40, fillfactors=(80, 70),
        on_row=None):
    conn = pgconn.connect()
    cur = conn.cursor()
    study.preflight(cur)
    strategies = study.on_this_server(cur, strategies, named=False)
    most = max(clients + ([pool] if mitigations else []))
    max_conn = int(pgconn.one(cur, "SELECT current_setting('max_connections')")[0])
    if max_conn < most + 3:
        raise pgconn.BenchError(f"max_connections is {max_conn}: {most} pgbench clients and the study's own "
                                f"connection need at least {most + 3}. Raise it and restart (make run sets 250).")
    runs = plan(strategies, windows, clients, mitigations, pool, fillfactors)
    print(f"disorder: {len(runs)} runs of {rows:,} rows: windows {windows} ms, clients {clients}"
          + (f", mitigations at {max(windows)} ms" if mitigations else ""), file=sys.stderr)
    results = []
    cur.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (study.SLOT,))
    if cur.fetchone()[0]:
        cur.execute("SELECT pg_drop_replication_slot(%s)", (study.SLOT,))
    try:
        for n, (s, w, c, ff, late, mitigation, then_reindex) in enumerate(runs, 1):
            b = max(1, min(batch, rows // c))
            per_tx = b * c
            n_rows = max(per_tx, rows // per_tx * per_tx)  # every row through pgbench, none waited serially
            label = f"[{n}/{len(runs)}] {s.name}, {w} ms, {c} clients" + (
                f", {mitigation}" if mitigation != "none" else "")
            row = study.run_one(conn, s, c, n_rows, b, checkpoints, label, columns=COLUMNS,
                                fillfactor=ff, setup=setup(w, s.expr if late else None),
                                day_bound=DAY_BOUNDS[s.name] if mitigation == "day partitions" else None)
            row.update({"window_ms": w, "fillfactor": ff, "mitigation": mitigation})
            row.update(measured_disorder(cur, ff))
            row.update(reindex(cur) if then_reindex else dict.fromkeys(
                ("reindex_seconds", "reindex_wal_bytes", "density_after_reindex", "fragmentation_after_reindex",
                 "index_bytes_after_reindex")))
            print(f"  {label}: {row['rows_per_s']:,.0f} rows/s, {row['late_rows_pct']:.1f} % of rows late, "
                  f"p99 {row['larger_before_p99']:,} larger keys before, density {row['avg_leaf_density']:.1f} % "
                  f"(model {row['model_density']:.1f} %), fragmentation {row['leaf_fragmentation']:.1f} % "
                  f"(model {row['model_fragmentation']:.1f} %)", file=sys.stderr)
            results.append(row)
            if on_row:
                on_row(results)
    finally:
        study.drop_study_objects(cur)
    version, settings = pgconn.server_build(cur), study.server_settings(cur)
    conn.close()
    return results, version, settings
