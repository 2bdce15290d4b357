"""The fragmentation study against a live server: one measured run per strategy and client count.
A module of the study: run it with `benches/run` (or `make run`, which starts a server first).

For each run: a fresh table holding only its key index (autovacuum off), CHECKPOINT, the WAL
position and counters, pgbench inserting exactly --rows rows in all, then the figures:
splits from this index's own WAL records (pg_walinspect, filtered on its relfilenode; leaf =
level 0), density and fragmentation from pgstatindex, sizes from pg_relation_size, WAL bytes from
the LSN difference, full-page images and their bytes from the run's own WAL records (pg_walinspect).
Buffer I/O per 1,000 rows (blocks read, written, evicted, and the pages added; pg_stat_io on 16 and
later, on 15 what it offers less the pages added, which it counts as reads, writes and allocations:
IO_SOURCE) and the index's size relative to shared_buffers, with --sizes, draw how each key's cost
grows once its index outgrows the buffer cache.
Each run is cut into --checkpoints + 1 equal pgbench segments with a CHECKPOINT between them,
the same for every strategy, so the full-page images that follow checkpoints are compared fairly
(the checkpoints themselves are not timed). A physical replication slot holds the run's WAL
until it has been read.
"""
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass

import pgconn

STRATEGY_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "strategies")
ORDER = ["bigserial", "uuid_v4", "uuid_v7", "uuidv7_core", "snowflake", "snowflake_instagram", "snowflake_js53",
         "base62_padded", "base62_text"]
PORTABLE_SQL = os.path.normpath(os.path.join(STRATEGY_DIR, "..", "..", "sql", "portable", "idgen_portable.sql"))
SLOT = "idgen_study"


@dataclass
class Strategy:
    name: str
    key_ddl: str
    sequence: str | None
    script: str
    requires: str | None = None  # a function the server must have, e.g. pg_catalog.uuidv7()
    expr: str | None = None  # the key's expression, for the disorder study's key made after the delay
    # a snowflake layout: the portable edition installed for it in schema idgen_study_<layout>
    # generates the keys (idgen.layout is one per server; the portable edition's is per schema)
    portable: str | None = None

    @property
    def insert_sql(self):
        with open(self.script) as f:
            return "\n".join(s for s in f.read().splitlines() if s.strip() and not s.startswith("--"))


def load_strategies(names=None):
    found = {}
    for fn in sorted(os.listdir(STRATEGY_DIR)):
        if not fn.endswith(".sql"):
            continue
        path = os.path.join(STRATEGY_DIR, fn)
        with open(path) as f:
            header = dict(re.findall(r"^-- (key|sequence|requires|expr|portable): (.+)$", f.read(), re.M))
        if "key" not in header:
            raise pgconn.BenchError(f"{path} has no '-- key: <column type>' line")
        found[fn[:-4]] = Strategy(fn[:-4], header["key"], header.get("sequence"), path, header.get("requires"),
                                  header.get("expr"), header.get("portable"))
    names = names or [n for n in ORDER if n in found] + sorted(set(found) - set(ORDER))
    unknown = [n for n in names if n not in found]
    if unknown:
        raise pgconn.BenchError(f"unknown strategies {unknown}; known: {', '.join(found)}")
    return [found[n] for n in names]


def preflight(cur):
    """Everything the study needs, checked up front with errors that say what to do."""
    if pgconn.one(cur, "SELECT current_setting('is_superuser')")[0] != "on":
        raise pgconn.BenchError(
            "the study needs a superuser: it runs CHECKPOINT, reads WAL with pg_walinspect and "
            "creates a replication slot. Connect as one (PGUSER).")
    pgconn.require_idgen(cur)
    for ext in ("pg_walinspect", "pgstattuple"):
        if not pgconn.one(cur, "SELECT count(*) FROM pg_available_extensions WHERE name = %s", (ext,))[0]:
            raise pgconn.BenchError(f"the contrib extension {ext} is not installed on the server "
                                    "(Debian: it comes with postgresql-15; elsewhere postgresql-contrib).")
        cur.execute(f"CREATE EXTENSION IF NOT EXISTS {ext}")
    if int(pgconn.one(cur, "SELECT current_setting('max_replication_slots')")[0]) < 1:
        raise pgconn.BenchError("max_replication_slots is 0: the study holds WAL with a replication slot.")


def _progress(label, line):
    """pgbench's progress line: rewritten in place on a terminal, one line each in a log."""
    text = f"  {label}: {line.strip()[:100]}"
    if sys.stderr.isatty():
        sys.stderr.write(f"\r{text:<110}")
    else:
        sys.stderr.write(text + "\n")
    sys.stderr.flush()


def run_pgbench(strategy, clients, transactions, batch, label):
    jobs = min(clients, os.cpu_count() or 1)
    # The server's own pgbench when PG_BIN names it (make run sets it), else the one on PATH.
    pgbench = os.path.join(os.environ["PG_BIN"], "pgbench") if os.environ.get("PG_BIN") else "pgbench"
    cmd = [pgbench, "-n", "-M", "prepared", "-c", str(clients), "-j", str(jobs), "-t", str(transactions),
           "-D", f"batch={batch}", "-P", "2", "-f", strategy.script]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = []
    for line in proc.stdout:
        output.append(line)
        if line.startswith("progress:"):
            _progress(label, line)
    proc.wait()
    text = "".join(output)
    failed = re.search(r"number of failed transactions: (\d+)", text)
    if proc.returncode != 0 or (failed and failed.group(1) != "0"):
        raise pgconn.BenchError(f"pgbench failed for {strategy.name} ({clients} clients):\n{text[-2000:]}")


def segments(total, parts):
    """`total` transactions split into `parts` runs as evenly as possible."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


IO_SOURCE = {
    16: "pg_stat_io, object relation, every process: blocks read, written and evicted; extended: the pages "
        "the run added to the table and its index (their growth)",
    15: "pg_statio_user_tables (blocks read for the table and its index), pg_stat_bgwriter (written: checkpoint "
        "+ background writer + backends; evicted: buffers_alloc, every buffer handed out, an upper bound on "
        "evictions once shared_buffers is full), each less the pages the run added to the table and its index "
        "(extended, from their growth), which 15 counts as a read, a backend write and an allocation each",
}


# The study's table, or its partitions (pg_partition_tree lists nothing for a plain table).
LEAVES = ("SELECT relid FROM pg_partition_tree('idgen_study') WHERE isleaf"
          " UNION ALL SELECT oid FROM pg_class WHERE oid = 'idgen_study'::regclass AND relkind = 'r'")


def relation_pages(cur):
    """The table's and its index's pages, every fork (of every partition)."""
    return pgconn.one(cur, "SELECT (sum(pg_table_size(relid) + pg_indexes_size(relid)) / 8192)::bigint"
                           f" FROM ({LEAVES}) l")[0]


def io_counters(cur):
    """(where from, (blocks read, written, evicted) so far), by the means this server offers."""
    cur.execute("SELECT pg_stat_force_next_flush()")
    cur.execute("SELECT pg_stat_clear_snapshot()")
    if int(pgconn.one(cur, "SELECT current_setting('server_version_num')")[0]) >= 160000:
        # 18 counts bytes (one read may cover several blocks); 16 and 17 operations of op_bytes.
        has_bytes = pgconn.one(cur, "SELECT count(*) FROM pg_attribute WHERE attrelid = 'pg_stat_io'::regclass"
                                    " AND attname = 'read_bytes'")[0]
        size = "read_bytes", "write_bytes"
        if not has_bytes:
            size = "reads * op_bytes", "writes * op_bytes"
        return IO_SOURCE[16], tuple(int(v) for v in pgconn.one(
            cur, f"SELECT coalesce(sum({size[0]}), 0) / 8192, coalesce(sum({size[1]}), 0) / 8192,"
                 " coalesce(sum(evictions), 0) FROM pg_stat_io WHERE object = 'relation'"))
    read = pgconn.one(cur, "SELECT coalesce(sum(coalesce(heap_blks_read, 0) + coalesce(idx_blks_read, 0)), 0)"
                           f" FROM pg_statio_user_tables WHERE relid IN ({LEAVES})")[0]
    written, allocated = pgconn.one(cur, "SELECT buffers_checkpoint + buffers_clean + buffers_backend, buffers_alloc"
                                         " FROM pg_stat_bgwriter")
    return IO_SOURCE[15], (int(read), int(written), int(allocated))


def run_one(conn, strategy, clients, rows, batch, checkpoints, label, *, columns="", fillfactor=None, setup=(),
            day_bound=None):
    """One measured run. The disorder study adds `columns` to the table, the key index's
    fillfactor, `setup` statements (its trigger) run after the table is made, and `day_bound`:
    an expression of a timestamptz {ts} giving the first key of that moment, to partition the
    table by UTC days of keys (yesterday, today, tomorrow); every row then goes to today's, whose
    key index is the one measured."""
    cur = conn.cursor()
    cur.execute("DROP TABLE IF EXISTS idgen_study")
    cur.execute("DROP SEQUENCE IF EXISTS idgen_study_seq")
    if strategy.sequence:
        cur.execute(f"CREATE SEQUENCE idgen_study_seq {strategy.sequence}")
    index_with = f" WITH (fillfactor = {int(fillfactor)})" if fillfactor else ""
    key_index = "idgen_study_pkey"
    if day_bound:
        cur.execute(f"CREATE TABLE idgen_study (id {strategy.key_ddl} PRIMARY KEY{index_with}, payload text NOT NULL"
                    f"{columns}) PARTITION BY RANGE (id)")
        bounds = [pgconn.one(cur, "SELECT (" + day_bound.format(ts="(current_date + %s)::timestamp AT TIME ZONE 'UTC'")
                             + ")::text", (d,))[0] for d in (-1, 0, 1, 2)]
        for n, name in enumerate(("yesterday", "today", "tomorrow")):
            cur.execute(f"CREATE TABLE idgen_study_{name} PARTITION OF idgen_study FOR VALUES FROM (%s) TO (%s)"
                        " WITH (autovacuum_enabled = off)", (bounds[n], bounds[n + 1]))
        key_index = "idgen_study_today_pkey"
    else:
        cur.execute(f"CREATE TABLE idgen_study (id {strategy.key_ddl} PRIMARY KEY{index_with}, payload text NOT NULL"
                    f"{columns}) WITH (autovacuum_enabled = off)")
    for sql in setup:
        cur.execute(sql)
    filenode, db_oid = pgconn.one(cur, "SELECT pg_relation_filenode(%s), "
                                       "(SELECT oid FROM pg_database WHERE datname = current_database())", (key_index,))
    # The slot holds this run's WAL until it has been read, and no longer.
    cur.execute("SELECT pg_create_physical_replication_slot(%s, true)", (SLOT,))
    try:
        return measure(cur, strategy, clients, rows, batch, checkpoints, label, filenode, db_oid, key_index)
    finally:
        cur.execute("SELECT pg_drop_replication_slot(%s)", (SLOT,))


def measure(cur, strategy, clients, rows, batch, checkpoints, label, filenode, db_oid, key_index="idgen_study_pkey"):
    cur.execute("CHECKPOINT")
    _, io_before = io_counters(cur)
    pages_before = relation_pages(cur)
    start_lsn = pgconn.one(cur, "SELECT pg_current_wal_insert_lsn()")[0]

    # The run is cut into equal segments with a CHECKPOINT between them, the same for every
    # strategy: after each, the first change to any page logs the whole page.
    per_tx = clients * batch
    seconds = 0.0
    parts = segments(rows // per_tx, checkpoints + 1)
    for i, transactions in enumerate(parts):
        if i:
            cur.execute("CHECKPOINT")
        started = time.perf_counter()
        if transactions:
            run_pgbench(strategy, clients, transactions, batch, f"{label}, part {i + 1}/{len(parts)}")
        seconds += time.perf_counter() - started
    remainder = rows - (rows // per_tx) * per_tx
    if remainder:
        started = time.perf_counter()
        cur.execute(strategy.insert_sql.replace(":batch", str(remainder)))
        seconds += time.perf_counter() - started
    if sys.stderr.isatty():
        sys.stderr.write("\r" + " " * 110 + "\r")

    end_lsn = pgconn.one(cur, "SELECT pg_current_wal_flush_lsn()")[0]
    # Buffer I/O: everything the run read, and wrote or will write (a last CHECKPOINT writes
    # the pages it left dirty), and evicted; the background writer and checkpointer report
    # their counts within a second.
    cur.execute("CHECKPOINT")
    time.sleep(1.0)
    io_source, io_after = io_counters(cur)
    io = [after - before for after, before in zip(io_after, io_before, strict=True)]
    extended = relation_pages(cur) - pages_before
    if io_source == IO_SOURCE[15]:
        io = [n - extended for n in io]
    shared_buffers = pgconn.one(cur, "SELECT pg_size_bytes(current_setting('shared_buffers'))")[0]
    count = pgconn.one(cur, "SELECT count(*) FROM idgen_study")[0]
    if count != rows:
        raise pgconn.BenchError(f"{strategy.name}: {count} rows inserted, expected {rows}")
    if key_index != "idgen_study_pkey" and pgconn.one(cur, "SELECT count(*) FROM idgen_study_today")[0] != rows:
        raise pgconn.BenchError(f"{strategy.name}: the run crossed midnight UTC, and its rows went to two day "
                                "partitions: run it again")

    # block_ref reads "blkref #0: rel spc/db/filenode fork main blk N" (15) or "..., blk N" (16+),
    # with "FPW" after each block the record carries a full image of; a split's description
    # starts "level 0," (15) or "level: 0," (16+); level 0 is a leaf.
    # Full-page images are counted here, in the WAL, not from pg_stat_wal: a pgbench client's
    # backend reports its WAL counts when it exits, which may be after pgbench has returned,
    # and at 1 client every image after the checkpoint comes from that one backend (CI saw
    # uuid_v4 report no more images than bigserial's 3).
    rel = rf"rel \d+/{db_oid}/{filenode}\M"
    leaf, upper, roots, fpi_bytes, fpi = pgconn.one(cur, """
        SELECT count(*) FILTER (WHERE resource_manager = 'Btree' AND record_type IN ('SPLIT_L', 'SPLIT_R')
                                AND description ~ '^level:? 0,' AND block_ref ~ %(rel)s),
               count(*) FILTER (WHERE resource_manager = 'Btree' AND record_type IN ('SPLIT_L', 'SPLIT_R')
                                AND description !~ '^level:? 0,' AND block_ref ~ %(rel)s),
               count(*) FILTER (WHERE resource_manager = 'Btree' AND record_type = 'NEWROOT'
                                AND block_ref ~ %(rel)s),
               coalesce(sum(fpi_length), 0),
               coalesce(sum((SELECT count(*) FROM regexp_matches(block_ref, 'FPW', 'g'))), 0)
        FROM pg_get_wal_records_info(%(start)s, %(end)s)""", {"rel": rel, "start": start_lsn, "end": end_lsn})
    tree_level, leaf_pages, density, fragmentation = pgconn.one(
        cur, "SELECT tree_level, leaf_pages, avg_leaf_density, leaf_fragmentation FROM pgstatindex(%s)", (key_index,))
    index_bytes, table_bytes, wal_bytes = pgconn.one(
        cur, f"SELECT pg_relation_size(%s), (SELECT sum(pg_relation_size(relid))::bigint FROM ({LEAVES}) l), "
             "pg_wal_lsn_diff(%s, %s)::bigint", (key_index, end_lsn, start_lsn))
    return {
        "strategy": strategy.name, "clients": clients, "rows": rows, "seconds": seconds,
        "rows_per_s": rows / seconds, "leaf_splits": leaf, "upper_splits": upper, "new_roots": roots,
        "leaf_pages": leaf_pages, "avg_leaf_density": float(density), "leaf_fragmentation": float(fragmentation),
        "index_bytes": index_bytes, "table_bytes": table_bytes, "wal_bytes": wal_bytes,
        "wal_fpi": int(fpi), "fpi_bytes": int(fpi_bytes), "tree_level": tree_level, "batch": batch,
        "checkpoints": checkpoints,
        "blks_read_per_1k_rows": io[0] * 1000 / rows, "blks_written_per_1k_rows": io[1] * 1000 / rows,
        "blks_evicted_per_1k_rows": io[2] * 1000 / rows, "blks_extended_per_1k_rows": extended * 1000 / rows,
        "index_to_shared_buffers": index_bytes / shared_buffers,
        "shared_buffers_bytes": int(shared_buffers), "io_source": io_source,
    }


def on_this_server(cur, strategies, named):
    """The strategies this server can run. One that needs a function the server lacks (core's
    uuidv7() before PostgreSQL 18) is left out, saying so; asked for by name, it is an error."""
    kept = []
    for s in strategies:
        if s.requires and pgconn.one(cur, "SELECT to_regprocedure(%s) IS NULL", (s.requires,))[0]:
            if named:
                raise pgconn.BenchError(f"strategy {s.name} needs {s.requires}, which this server does not have")
            print(f"study: leaving out {s.name}: this server has no {s.requires}", file=sys.stderr)
            continue
        kept.append(s)
    return kept


def install_portable(cur, strategies):
    """The portable edition, for each strategy that names a layout, in schema idgen_study_<layout>
    (worker id 1; installed again, it keeps its generator's state)."""
    psql = os.path.join(os.environ["PG_BIN"], "psql") if os.environ.get("PG_BIN") else "psql"
    for layout in sorted({s.portable for s in strategies if s.portable}):
        schema = f"idgen_study_{layout}"
        cur.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        done = subprocess.run([psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-v", f"schema={schema}",
                               "-v", f"layout={layout}", "-v", "worker_id=1", "-v", "grant_to=PUBLIC",
                               "-f", PORTABLE_SQL], capture_output=True, text=True)
        if done.returncode != 0:
            raise pgconn.BenchError(f"installing the portable edition for layout {layout} failed:\n{done.stderr}")


def run(strategies, clients_list, sizes, batch, checkpoints, named=False, on_row=None):
    """Every strategy at every size and client count; on_row(results so far) after each run (so
    that a long run interrupted keeps what it measured)."""
    conn = pgconn.connect()
    cur = conn.cursor()
    preflight(cur)
    strategies = on_this_server(cur, strategies, named)
    install_portable(cur, strategies)
    print(f"study: {len(strategies)} strategies x clients {clients_list} x sizes "
          f"{', '.join(f'{n:,}' for n in sizes)} rows", file=sys.stderr)
    cur.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (SLOT,))
    if cur.fetchone()[0]:  # left by an interrupted run
        cur.execute("SELECT pg_drop_replication_slot(%s)", (SLOT,))
    results = []
    total = len(strategies) * len(clients_list) * len(sizes)
    try:
        for rows in sizes:
            for clients in clients_list:
                for strategy in strategies:
                    n = len(results) + 1
                    label = (f"[{n}/{total}] {strategy.name}, {clients} client{'s' if clients > 1 else ''}"
                             + (f", {rows:,} rows" if len(sizes) > 1 else ""))
                    b = max(1, min(batch, rows // clients))
                    row = run_one(conn, strategy, clients, rows, b, checkpoints, label)
                    print(f"  {label}: {row['rows_per_s']:,.0f} rows/s, {row['leaf_splits']:,} leaf splits, "
                          f"density {row['avg_leaf_density']:.1f} %, index {row['index_bytes'] / 1048576:.1f} MB "
                          f"({row['index_to_shared_buffers']:.2f} × shared_buffers), "
                          f"WAL {row['wal_bytes'] / 1048576:.1f} MB, {row['wal_fpi']:,} full-page images, "
                          f"blocks per 1,000 rows: {row['blks_read_per_1k_rows']:.1f} read, "
                          f"{row['blks_written_per_1k_rows']:.1f} written, "
                          f"{row['blks_evicted_per_1k_rows']:.1f} evicted",
                          file=sys.stderr)
                    results.append(row)
                    if on_row:
                        on_row(results)
    finally:
        cur.execute("DROP TABLE IF EXISTS idgen_study")
        cur.execute("DROP SEQUENCE IF EXISTS idgen_study_seq")
    version, settings = pgconn.server_build(cur), server_settings(cur)
    conn.close()
    return results, version, settings


def server_settings(cur, names=("shared_buffers", "max_wal_size", "checkpoint_timeout", "full_page_writes",
                                "synchronous_commit")):
    return ", ".join(f"{n} {pgconn.one(cur, 'SELECT current_setting(%s)', (n,))[0]}" for n in names)
