"""The study's outputs: results.csv, report.md and study.png, written by benches/run (a module
of it, not run on its own) and read back by pg_test/test_study.py. No database in here, so it
is tested on its own (benches/test_report.py)."""
import csv
import os

from idgen_harness import nbtree_model

# The first columns are fixed by the study's contract; more may follow.
COLUMNS = [
    "strategy", "clients", "rows", "seconds", "rows_per_s",
    "leaf_splits", "upper_splits", "new_roots", "leaf_pages", "avg_leaf_density", "leaf_fragmentation",
    "index_bytes", "table_bytes", "wal_bytes", "wal_fpi", "fpi_bytes",
    "tree_level", "batch", "checkpoints",
    # since 0.2.0: buffer I/O, for the curve against index size / shared_buffers (--sizes)
    "blks_read_per_1k_rows", "blks_written_per_1k_rows", "blks_evicted_per_1k_rows", "index_to_shared_buffers",
    "shared_buffers_bytes", "io_source",
    # since 0.3.0: the pages added, counted apart (15 counted them as reads, writes and evictions)
    "blks_extended_per_1k_rows",
]
IO_COLUMNS = COLUMNS[COLUMNS.index("blks_read_per_1k_rows"):]
INTS = {"clients", "rows", "leaf_splits", "upper_splits", "new_roots", "leaf_pages", "index_bytes",
        "table_bytes", "wal_bytes", "wal_fpi", "fpi_bytes", "tree_level", "batch", "checkpoints",
        "shared_buffers_bytes"}
FLOATS = {"seconds", "rows_per_s", "avg_leaf_density", "leaf_fragmentation", "blks_read_per_1k_rows",
          "blks_written_per_1k_rows", "blks_evicted_per_1k_rows", "index_to_shared_buffers",
          "blks_extended_per_1k_rows"}
BASELINE = "bigserial"
# benches/strategies/: the package sits in benches/ (docs/development.md says why).
STRATEGY_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "strategies")


def made_by():
    """{strategy: what generates its keys}, from each strategy file's `-- made by:` line: the
    report names the generator beside the strategy, so that a run's rows/s reads as that
    generator's (the plain-SQL edition's PL/pgSQL under a layout is not the layout's cost)."""
    out = {}
    for fn in sorted(os.listdir(STRATEGY_DIR)) if os.path.isdir(STRATEGY_DIR) else []:
        if fn.endswith(".sql"):
            with open(os.path.join(STRATEGY_DIR, fn)) as f:
                out[fn[:-4]] = next((line[len("-- made by: "):].strip() for line in f
                                     if line.startswith("-- made by: ")), "")
    return out


def plain_sql_edition(strategies, made=None):
    """The strategies among these whose keys the plain-SQL (PL/pgSQL) edition made."""
    made = made_by() if made is None else made
    return [s for s in strategies if made.get(s, "").startswith("the plain-SQL")]


def write_rows(rows, path, columns, floats, what, extras):
    """rows to a CSV of `columns`: a row lacking one is refused (ValueError naming `what`), one
    with others is refused too (extras="raise") or written without them ("ignore"); floats are
    written to 6 significant digits, None as an empty cell."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction=extras)
        w.writeheader()
        for r in rows:
            missing = [k for k in columns if k not in r]
            if missing:
                raise ValueError(f"{what} for {r.get('strategy')} lacks {missing}")
            w.writerow({k: ("" if v is None else f"{v:.6g}" if k in floats else v) for k, v in r.items()})


def write_csv(rows, path):
    write_rows(rows, path, COLUMNS, FLOATS, "row", "raise")


def read_csv(path):
    """The rows, typed; a CSV from before the I/O columns reads with them as None."""
    def typed(k, v):
        if v is None or (v == "" and k in IO_COLUMNS):
            return None
        return int(v) if k in INTS else float(v) if k in FLOATS else v

    with open(path, newline="") as f:
        out = []
        for r in csv.DictReader(f):
            row = {k: typed(k, v) for k, v in r.items()}
            for k in IO_COLUMNS:
                row.setdefault(k, None)
            out.append(row)
        return out


def has_io(rows):
    return any(r.get("blks_read_per_1k_rows") is not None for r in rows)


def sizes(rows):
    return sorted({r["rows"] for r in rows})


def at_size(rows, n):
    return [r for r in rows if r["rows"] == n]


def ratios(rows):
    """Each row's figures relative to bigserial at the same client count (and size)."""
    base = {(r["clients"], r["rows"]): r for r in rows if r["strategy"] == BASELINE}
    out = {}
    for r in rows:
        b = base.get((r["clients"], r["rows"]))
        if not b:
            continue

        def rel(k, r=r, b=b):
            return r[k] / b[k] if b[k] else float("inf") if r[k] else 1.0

        out[(r["strategy"], r["clients"], r["rows"])] = {
            "index_bytes": rel("index_bytes"), "wal_bytes": rel("wal_bytes"), "rows_per_s": rel("rows_per_s"),
        }
    return out


def sanity(rows, strategies, clients, sizes_=None):
    """Physical checks any real run must pass; returns the list of problems (empty when sane)."""
    problems = []
    every = sizes_ or sizes(rows)
    for n in every:
        problems += _sanity_at(at_size(rows, n), strategies, clients, n, len(every) > 1)
    return problems


def _sanity_at(rows, strategies, clients, n, several):
    problems = []
    where = f" at {n:,} rows" if several else ""
    got = {(r["strategy"], r["clients"]) for r in rows}
    for s in strategies:
        for c in clients:
            if (s, c) not in got:
                problems.append(f"no row for {s} with {c} clients{where}")
    by = {(r["strategy"], r["clients"]): r for r in rows}
    for r in rows:
        name = f"{r['strategy']}/{r['clients']}" + (f"/{n}" if several else "")
        if r["leaf_splits"] <= 0:
            problems.append(f"{name}: no leaf split counted")
        if not 0 < r["avg_leaf_density"] <= 100:
            problems.append(f"{name}: leaf density {r['avg_leaf_density']} is not a percentage")
        if r["wal_bytes"] <= 0 or r["index_bytes"] <= 0 or r["table_bytes"] <= 0:
            problems.append(f"{name}: a size is not positive")
        # A fresh, insert-only index starts with one leaf and every leaf split adds one: the WAL
        # count and pgstatindex must agree exactly.
        if r["leaf_pages"] != r["leaf_splits"] + 1:
            problems.append(f"{name}: {r['leaf_pages']} leaf pages after {r['leaf_splits']} leaf splits")
        if r.get("blks_read_per_1k_rows") is not None:
            for k in ("blks_read_per_1k_rows", "blks_written_per_1k_rows", "blks_evicted_per_1k_rows",
                      "blks_extended_per_1k_rows"):
                if r.get(k) is not None and r[k] < 0:
                    problems.append(f"{name}: {k} is negative ({r[k]})")
            expected = r["index_bytes"] / r["shared_buffers_bytes"]
            if abs(r["index_to_shared_buffers"] - expected) > 1e-4 * max(expected, 1):
                problems.append(f"{name}: index_to_shared_buffers {r['index_to_shared_buffers']} is not "
                                f"index_bytes / shared_buffers ({expected})")
    for c in clients:
        v4, serial = by.get(("uuid_v4", c)), by.get((BASELINE, c))
        if v4 and serial:
            if not v4["avg_leaf_density"] < serial["avg_leaf_density"]:
                problems.append(f"{c} clients: uuid_v4 leaves are not less dense than bigserial's")
            if not v4["index_bytes"] > serial["index_bytes"]:
                problems.append(f"{c} clients: uuid_v4's index is not larger than bigserial's")
            if v4["checkpoints"] > 0 and not v4["wal_fpi"] > serial["wal_fpi"]:
                problems.append(f"{c} clients: uuid_v4 logged no more full-page images than bigserial")
            # once the random index outgrows the buffers, its inserts read cold leaves (and evict
            # others to make room); the appending index keeps touching the same few pages
            if v4.get("blks_read_per_1k_rows") is not None and v4["index_to_shared_buffers"] > 1.5:
                for k in ("blks_read_per_1k_rows", "blks_evicted_per_1k_rows"):
                    if not v4[k] > serial[k]:
                        problems.append(f"{c} clients{where}: uuid_v4's {k} ({v4[k]:.1f}) is not above "
                                        f"bigserial's ({serial[k]:.1f}) with its index "
                                        f"{v4['index_to_shared_buffers']:.1f} × shared_buffers")
    return problems


ORDERED = ["bigserial", "uuid_v7", "snowflake", "base62_padded"]


def several_backends(rows):
    """What the run shows about several backends inserting time-ordered keys at once, from the
    figures themselves (the article only considers one writer)."""
    clients = sorted({r["clients"] for r in rows})
    if len(clients) < 2:
        return "- **Several backends at once:** this run used one client count; run with e.g. `--clients 1,8`."
    lo, hi = clients[0], clients[-1]
    by = {(r["strategy"], r["clients"]): r for r in rows}
    pairs = [(by[(s, lo)], by[(s, hi)]) for s in ORDERED if (s, lo) in by and (s, hi) in by]
    if not pairs:
        return ""
    d_lo = [a["avg_leaf_density"] for a, _ in pairs]
    d_hi = [b["avg_leaf_density"] for _, b in pairs]
    f_hi = [b["leaf_fragmentation"] for _, b in pairs]
    speed = ", ".join(f"{a['strategy']} {b['rows_per_s'] / a['rows_per_s']:.2f}×" for a, b in pairs)
    return (
        f"- **Several backends at once** (the case the article leaves out). With {hi} clients the "
        f"time-ordered keys ({', '.join(a['strategy'] for a, _ in pairs)}) left leaves "
        f"{min(d_hi):.1f}–{max(d_hi):.1f} % full with {min(f_hi):.1f}–{max(f_hi):.1f} % fragmentation, "
        f"against {min(d_lo):.1f}–{max(d_lo):.1f} % with {lo}. Keys from several backends do arrive "
        f"slightly out of order, but they land within the last leaf or two, so the rightmost-split "
        f"path still fills pages; a measurable loss would show here as density below ~90 % and "
        f"fragmentation above 0. Throughput from {lo} to {hi} clients: {speed} — on this machine "
        f"the clients share {os.cpu_count()} cores, and commits are grouped."
    )


def _mb(b):
    return b / 1048576


def markdown(rows, meta):
    """The readable report: tables, ratios to bigserial, and what the figures mean."""
    rat = ratios(rows)
    made = made_by()
    clients = sorted({r["clients"] for r in rows})
    all_sizes = sizes(rows)
    several = len(all_sizes) > 1
    first = (f"{meta['rows']:,} rows per run" if not several
             else f"{', '.join(f'{n:,}' for n in all_sizes)} rows per run")
    out = [
        "# What each key strategy does to a B-tree",
        "",
        f"{first}, inserted by pgbench in transactions of {meta['batch']} rows; "
        f"a fresh table per run holding only its key index (autovacuum off), CHECKPOINT before each run.",
        f"Server: {meta['server']} ({meta.get('settings', 'settings not recorded')}). "
        f"Machine: {meta['machine']}. Command: `{meta['command']}`.",
        "",
    ]
    for n in all_sizes:
        for c in clients:
            out += [
                f"## {c} client{'s' if c > 1 else ''}" + (f", {n:,} rows" if several else ""),
                "",
                "| strategy | made by | rows/s | leaf splits | avg leaf density | leaf fragmentation | index MB "
                "| WAL MB | full-page images | checkpoints | index × | WAL × | speed × |",
                "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            ]
            for r in [r for r in rows if r["clients"] == c and r["rows"] == n]:
                x = rat.get((r["strategy"], c, n), {})
                out.append(
                    f"| {r['strategy']} | {made.get(r['strategy']) or '—'} | {r['rows_per_s']:,.0f} "
                    f"| {r['leaf_splits']:,} "
                    f"| {r['avg_leaf_density']:.1f} % | {r['leaf_fragmentation']:.1f} % | {_mb(r['index_bytes']):.1f} "
                    f"| {_mb(r['wal_bytes']):.1f} | {r['wal_fpi']:,} | {r['checkpoints']} "
                    f"| {x.get('index_bytes', float('nan')):.2f} | {x.get('wal_bytes', float('nan')):.2f} "
                    f"| {x.get('rows_per_s', float('nan')):.2f} |"
                )
            out.append("")
    out += ["× columns are ratios to bigserial at the same client count (speed × above 1 is faster).", ""]
    edition = plain_sql_edition(dict.fromkeys(r["strategy"] for r in rows), made)
    if edition:
        out += [
            f"{' and '.join(edition)}: keys from the plain-SQL (PL/pgSQL) edition, installed by the study for "
            "each layout in a schema of its own (`idgen.layout` is one per server). Their B-tree columns are "
            "the layout's (a server's ids only grow, whatever the split of their bits: compare them with "
            "snowflake's). Their rows/s and speed × are the plain-SQL edition's PL/pgSQL (a lock and a sequence "
            "per id), not a cost of the layout: the extension's `snowflake_next()` runs at each layout's cap "
            "(`bash benches/layouts`).",
            "",
        ]
    out += [
        "![splits, density, index size and WAL per strategy](study.png)",
        "",
    ]
    out += io_section(rows)
    out += [
        "## Why",
        "",
        "- **Where inserts land.** A key that only grows (bigserial, snowflake, UUID v7, padded base62 "
        "under COLLATE \"C\") always goes into the rightmost leaf. When that leaf is full, PostgreSQL "
        "splits it leaving the left page at the leaf fillfactor (90 %), so the tree ends about 90 % "
        "full with its pages in key order (fragmentation near 0). A random key (UUID v4) lands on any "
        "leaf; a full leaf splits 50:50, and the steady state is about ln 2 ≈ 69 % full (Yao, 1978), "
        "with about half the pages out of order: a larger index, more pages to cache and to read.",
        "- **WAL.** With full_page_writes on, the first change to a page after a checkpoint logs the "
        "whole 8 kB page. Appending keys touch few pages between checkpoints; random keys touch "
        "nearly every leaf, so their WAL is dominated by full-page images — visible in the "
        "full-page-images and WAL columns. A fresh table's pages are all new, and new pages are "
        "logged whole by the records that create them, so full-page images appear only after a "
        "checkpoint that falls inside the run (the checkpoints column).",
        "- **Unpadded base62 under a linguistic collation** is not ordered: \"z\" sorts after \"10\", "
        "and \"a\" sorts beside \"A\". Consecutive codes of one length still land close together, "
        "so it scatters less than random keys, but inserts go into the middle of the tree: pages "
        "split 50:50 and out of order (the density and fragmentation columns), and every comparison "
        "goes through the ICU collation (the speed column).",
        several_backends(at_size(rows, all_sizes[-1])),
        "",
    ]
    return "\n".join(out)


def io_section(rows):
    """Buffer I/O per 1,000 rows against index size / shared_buffers: a table, the chart and
    where each curve bends. Empty for results from before the I/O columns."""
    if not has_io(rows):
        return []
    out = [
        "## Buffer I/O as the index grows",
        "",
        f"Blocks per 1,000 rows inserted, from {rows[0]['io_source']}; shared_buffers "
        f"{_mb(rows[0]['shared_buffers_bytes']):.0f} MB. Counted from the CHECKPOINT before each run to one "
        "after it, so pages the run left dirty count as written.",
        "",
        "| strategy | clients | rows | index / shared_buffers | read | written | evicted | extended | rows/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(rows, key=lambda r: (r["clients"], r["strategy"], r["rows"])):
        ext = r.get("blks_extended_per_1k_rows")
        out.append(f"| {r['strategy']} | {r['clients']} | {r['rows']:,} | {r['index_to_shared_buffers']:.2f} "
                   f"| {r['blks_read_per_1k_rows']:.1f} | {r['blks_written_per_1k_rows']:.1f} "
                   f"| {r['blks_evicted_per_1k_rows']:.1f} | {'—' if ext is None else f'{ext:.1f}'} "
                   f"| {r['rows_per_s']:,.0f} |")
    out += ["", "![buffer I/O per 1,000 rows against index size / shared_buffers](study_io.png)", "",
            io_curve(rows), ""]
    return out


def io_curve(rows):
    """Where each strategy's reads per 1,000 rows bend upwards as its index grows, stated from
    the figures: a bend is a step to the next size that at least doubles them and adds at
    least 5 blocks per 1,000 rows."""
    if len(sizes(rows)) < 2:
        return ("One size in this run: run with e.g. `--sizes 1000000,4000000,16000000` for the curve "
                "as the index outgrows shared_buffers.")
    out = []
    for c in sorted({r["clients"] for r in rows}):
        for s in dict.fromkeys(r["strategy"] for r in rows):
            pts = sorted((r for r in rows if r["strategy"] == s and r["clients"] == c),
                         key=lambda r: r["index_to_shared_buffers"])
            if len(pts) < 2:
                continue
            reads = [p["blks_read_per_1k_rows"] for p in pts]
            speed = pts[-1]["rows_per_s"] / pts[0]["rows_per_s"]
            who = f"- **{s}**, {c} client{'s' if c > 1 else ''}: "
            bend = next((i for i in range(1, len(pts))
                         if reads[i] >= 2 * reads[i - 1] and reads[i] >= reads[i - 1] + 5), None)
            if bend is None:
                out.append(who + f"flat — {min(reads):.1f} to {max(reads):.1f} blocks read per 1,000 rows from "
                           f"{pts[0]['index_to_shared_buffers']:.2f} to {pts[-1]['index_to_shared_buffers']:.2f} × "
                           f"shared_buffers; rows/s × {speed:.2f} from the smallest to the largest size.")
            else:
                a, b = pts[bend - 1], pts[bend]
                out.append(who + f"bends between {a['index_to_shared_buffers']:.2f} and "
                           f"{b['index_to_shared_buffers']:.2f} × shared_buffers: blocks read per 1,000 rows "
                           f"{reads[bend - 1]:.1f} → {reads[bend]:.1f} (evicted {a['blks_evicted_per_1k_rows']:.1f} → "
                           f"{b['blks_evicted_per_1k_rows']:.1f}), {reads[-1]:.1f} at the largest size; "
                           f"rows/s × {speed:.2f} from the smallest to the largest size.")
    return "\n".join(out)


def io_chart(rows, path):
    """Blocks read, written and evicted per 1,000 rows, and rows/s, against index size /
    shared_buffers: one line per strategy (dashed for the larger client count)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    strategies = list(dict.fromkeys(r["strategy"] for r in rows))
    clients = sorted({r["clients"] for r in rows})
    panels = [("blks_read_per_1k_rows", "blocks read per 1,000 rows"),
              ("blks_written_per_1k_rows", "blocks written per 1,000 rows"),
              ("blks_evicted_per_1k_rows", "blocks evicted per 1,000 rows"),
              ("rows_per_s", "rows per second")]
    fig, axes = plt.subplots(2, 2, figsize=(13, 8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (key, title) in zip(axes.flat, panels, strict=True):
        for i, s in enumerate(strategies):
            for j, c in enumerate(clients):
                pts = sorted((r for r in rows if r["strategy"] == s and r["clients"] == c),
                             key=lambda r: r["index_to_shared_buffers"])
                if pts:
                    ax.plot([p["index_to_shared_buffers"] for p in pts], [p[key] for p in pts], marker="o",
                            color=colors[i % len(colors)], linestyle="-" if j == 0 else "--",
                            label=f"{s}, {c} client{'s' if c > 1 else ''}")
        ax.axvline(1.0, color="grey", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("index size / shared_buffers")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle("Buffer I/O as the index outgrows shared_buffers")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def chart(rows, path):
    """Splits, density, index size and WAL per strategy, one bar per client count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    strategies = list(dict.fromkeys(r["strategy"] for r in rows))
    clients = sorted({r["clients"] for r in rows})
    by = {(r["strategy"], r["clients"]): r for r in rows}
    panels = [
        ("leaf_splits", "leaf page splits", lambda v: v),
        ("avg_leaf_density", "average leaf density (%)", lambda v: v),
        ("index_bytes", "index size (MB)", _mb),
        ("wal_bytes", "WAL written (MB)", _mb),
    ]
    fig, axes = plt.subplots(2, 2, figsize=(13, 8))
    width = 0.8 / max(len(clients), 1)
    for ax, (key, title, f) in zip(axes.flat, panels, strict=False):
        for i, c in enumerate(clients):
            xs = [j + (i - (len(clients) - 1) / 2) * width for j in range(len(strategies))]
            ys = [f(by[(s, c)][key]) if (s, c) in by else 0 for s in strategies]
            ax.bar(xs, ys, width, label=f"{c} client{'s' if c > 1 else ''}")
        ax.set_title(title)
        ax.set_xticks(range(len(strategies)))
        ax.set_xticklabels(strategies, rotation=20, ha="right")
        ax.grid(axis="y", alpha=0.3)
    axes.flat[0].legend()
    fig.suptitle(f"What each key does to a B-tree ({rows[0]['rows']:,} rows per run)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_all(rows, meta, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    write_csv(rows, os.path.join(out_dir, "results.csv"))
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write(markdown(rows, meta))
    chart(at_size(rows, sizes(rows)[-1]), os.path.join(out_dir, "study.png"))
    if has_io(rows):
        io_chart(rows, os.path.join(out_dir, "study_io.png"))


# ---- the disorder axis (benches/run --disorder): DIR/disorder.csv, disorder.md, disorder.png ----

DISORDER_COLUMNS = [
    "strategy", "mitigation", "window_ms", "clients", "fillfactor", "rows", "batch", "checkpoints", "seconds",
    "rows_per_s",
    # measured disorder, from each row's arrival number and time stamped after the wait
    "held_ms_mean", "late_rows_pct", "larger_before_mean", "larger_before_p50", "larger_before_p99",
    "larger_before_max", "lateness_ms_p99", "lateness_ms_max",
    # the index, as the server reports it
    "leaf_splits", "leaf_pages", "avg_leaf_density", "leaf_fragmentation", "index_bytes", "table_bytes",
    "wal_bytes", "wal_fpi",
    # the model replaying the measured arrival order (nbtree_model.py)
    "key_item_bytes", "leaf_capacity", "room_after_rightmost_split", "model_leaf_pages", "model_density",
    "model_fragmentation", "model_rightmost_splits", "model_5050_splits", "late_keys_p50", "late_keys_p90",
    "late_keys_max", "broken_splits_pct",
    # REINDEX CONCURRENTLY after the unmitigated run at the widest window
    "reindex_seconds", "reindex_wal_bytes", "density_after_reindex", "fragmentation_after_reindex",
    "index_bytes_after_reindex",
]
DISORDER_TEXT = {"strategy", "mitigation"}
DISORDER_FLOATS = {"window_ms", "seconds", "rows_per_s", "held_ms_mean", "late_rows_pct", "larger_before_mean",
                   "lateness_ms_p99", "lateness_ms_max", "avg_leaf_density", "leaf_fragmentation", "model_density",
                   "model_fragmentation", "broken_splits_pct", "reindex_seconds", "density_after_reindex",
                   "fragmentation_after_reindex"}


def write_disorder_csv(rows, path):
    write_rows(rows, path, DISORDER_COLUMNS, DISORDER_FLOATS, "disorder row", "ignore")


def read_disorder_csv(path):
    def typed(k, v):
        if k in DISORDER_TEXT:
            return v
        if v == "":
            return None
        return float(v) if k in DISORDER_FLOATS else int(v)

    with open(path, newline="") as f:
        return [{k: typed(k, v) for k, v in r.items()} for r in csv.DictReader(f)]


def disorder_sanity(rows):
    """Checks any real disorder run must pass; the list of problems (empty when sane)."""
    problems = []
    for r in rows:
        name = f"{r['strategy']}/{r['window_ms']:g} ms/{r['clients']}/{r['mitigation']}"
        if r["leaf_pages"] != r["leaf_splits"] + 1:
            problems.append(f"{name}: {r['leaf_pages']} leaf pages after {r['leaf_splits']} leaf splits")
        if r["held_ms_mean"] + 0.5 < r["window_ms"] * 0.8 and r["mitigation"] != "key made after the wait":
            problems.append(f"{name}: rows were held {r['held_ms_mean']:.2f} ms on average, not about "
                            f"{r['window_ms']:g} ms")
        if not 0 <= r["late_rows_pct"] <= 100 or r["larger_before_max"] > r["rows"]:
            problems.append(f"{name}: the measured disorder is impossible")
    return problems


def leaf_of(r):
    return nbtree_model.Leaf(r["key_item_bytes"], r["fillfactor"])


def expected_late(r):
    """Late keys per rightmost split expected for the run's writers if waits dominated."""
    return nbtree_model.expected_late_keys(r["clients"], leaf_of(r).right_after_rightmost_split)


def off(r):
    """A mark on a run whose model misses pgstatindex by more than 2 points."""
    return " ‡" if abs(r["model_density"] - r["avg_leaf_density"]) > 2 else ""


def _model_error(rows):
    return max((abs(r["model_density"] - r["avg_leaf_density"]) for r in rows), default=0.0)


def _curve_rows(rows):
    return [r for r in rows if r["mitigation"] == "none"]


def disorder_markdown(rows, meta, many_cores=None):
    curve = _curve_rows(rows)
    strategies = list(dict.fromkeys(r["strategy"] for r in rows))
    clients = sorted({r["clients"] for r in curve})
    widest = max(r["window_ms"] for r in curve)
    out = [
        "# Keys that arrive out of order: what concurrent writers do to a time-ordered B-tree",
        "",
        f"{meta['rows']:,} rows per run (rounded down to whole pgbench transactions), inserted by pgbench in "
        f"transactions of up to {meta['batch']} rows; a fresh table per run, autovacuum off. Each row is held "
        "between making its key and inserting it by a BEFORE INSERT trigger that sleeps an exponentially "
        "distributed time whose mean is the window (pg_sleep: at least about a millisecond when it sleeps "
        "at all); the trigger then stamps the row with an arrival number and time, from which the disorder "
        "below is measured. The model column replays each run's measured arrival order into nbtree's split "
        "rules (benches/idgen_harness/nbtree_model.py) and predicts what pgstatindex reports.",
        f"Server: {meta['server']} ({meta.get('settings', 'settings not recorded')}). Machine: {meta['machine']}. "
        f"Command: `{meta['command']}`.",
        "",
    ]
    for c in clients:
        out += [
            f"## The curve: {c} clients, fillfactor 90",
            "",
            "| strategy | window ms | held ms | rows late | larger keys before a row: mean / p99 / max "
            "| late by (p99, ms) | late keys per rightmost split: p50 / p90 (expected; room) | such splits broken "
            "| leaf density (model) | fragmentation (model) | index MB | rows/s |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for s in strategies:
            for r in sorted((r for r in curve if r["strategy"] == s and r["clients"] == c),
                            key=lambda r: r["window_ms"]):
                out.append(
                    f"| {s} | {r['window_ms']:g} | {r['held_ms_mean']:.1f} | {r['late_rows_pct']:.1f} % "
                    f"| {r['larger_before_mean']:.1f} / {r['larger_before_p99']:,} / {r['larger_before_max']:,} "
                    f"| {r['lateness_ms_p99']:.1f} | {r['late_keys_p50']} / {r['late_keys_p90']} "
                    f"({f'{expected_late(r):.0f}' if r['window_ms'] >= 1 else '—'}; "
                    f"{r['room_after_rightmost_split']}) | {r['broken_splits_pct']:.0f} % "
                    f"| {r['avg_leaf_density']:.1f} % ({r['model_density']:.1f} %){off(r)} "
                    f"| {r['leaf_fragmentation']:.1f} % ({r['model_fragmentation']:.1f} %) "
                    f"| {_mb(r['index_bytes']):.1f} | {r['rows_per_s']:,.0f} |")
        out.append("")
    close = [r for r in rows if not off(r)]
    missed = [r for r in rows if off(r)]
    out += [
        f"The model's leaf density is within {_model_error(close):.1f} points of pgstatindex's in {len(close)} of "
        f"{len(rows)} runs"
        + (f"; ‡ marks the {len(missed)} where it misses by more than 2 points (at most "
           f"{_model_error(missed):.1f}). There the order the model replays is not the order the keys reached the "
           "index: the arrival stamp is taken in the trigger, and the heap insert comes between it and the index "
           "insert, time in which a backend can be descheduled and passed by others. That happens when the "
           "backends queue for the CPU rather than wait in the trigger (many clients, a short wait, on 2 cores), "
           "and it is disorder the stamp cannot see, the kind a many-core machine makes without any wait"
           if missed else "")
        + ". *Expected*: what the formula in the explanation below gives for this many writers if the waits "
        "dominated. *Late keys per rightmost split*: keys that sort left of a rightmost split's "
        "boundary and arrive after it, so they land on its left page; *room*: how many of them that page "
        "can take before it splits again; *broken*: the share of rightmost splits whose left page got more "
        "than that and split 50:50.",
        "",
        "![leaf density and fragmentation against the measured disorder](disorder.png)",
        "",
    ]
    out += disorder_writers(curve)
    out += disorder_mitigations(rows, widest)
    if many_cores:
        out += [
            "## For comparison: 16 cores, no added wait (another machine, idgen 0.1.0)",
            "",
            "Single-row INSERTs by that many pgbench clients for 10–15 s on a 16-core x86-64 machine with "
            "PostgreSQL 18.6, then pgstatindex on the key; no trigger, so the disorder there is what the "
            "scheduler makes between a key's DEFAULT and its index insert. Not measured with this script.",
            "",
            "| key | clients | leaf density | leaf fragmentation |",
            "|---|---:|---:|---:|",
        ]
        out += [f"| {m['key']} | {m['clients']} | {m['density']} | {m['fragmentation']} |" for m in many_cores]
        out.append("")
    out += disorder_why(rows)
    return "\n".join(out)


def disorder_writers(curve):
    """For each window run with several client counts: density against writers at once, beside the
    late keys the formula expects and where it says splits break."""
    out = []
    for w in sorted({r["window_ms"] for r in curve}):
        at = [r for r in curve if r["window_ms"] == w]
        if w < 1 or len({r["clients"] for r in at}) < 3:
            continue
        out += [
            f"## Writers at once, at {w:g} ms",
            "",
            "| strategy | writers | late keys per rightmost split: p50 (expected) | room | broken "
            "| leaf density | fragmentation | predicted to break from |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in sorted(at, key=lambda r: (r["strategy"], r["clients"])):
            out.append(f"| {r['strategy']} | {r['clients']} | {r['late_keys_p50']} ({expected_late(r):.0f}) "
                       f"| {r['room_after_rightmost_split']} | {r['broken_splits_pct']:.0f} % "
                       f"| {r['avg_leaf_density']:.1f} % | {r['leaf_fragmentation']:.1f} % "
                       f"| {nbtree_model.writers_at_which_splits_break(leaf_of(r))} writers |")
        out.append("")
    return out


def disorder_mitigations(rows, widest):
    base = {r["strategy"]: r for r in rows
            if r["mitigation"] == "none" and r["window_ms"] == widest and r.get("reindex_seconds") is not None}
    if not base:
        return []
    out = [
        f"## What a user can do: mitigations at the widest window ({widest:g} ms)",
        "",
        "Each against the unmitigated run of the same strategy (fillfactor 90, the most clients); "
        "× columns are ratios to it. REINDEX CONCURRENTLY is measured on the unmitigated run's index after "
        "the run: its WAL and time are what each rebuild costs.",
        "",
        "| strategy | mitigation | clients | leaf density | fragmentation | index MB | WAL MB | rows/s "
        "| index × | WAL × | rows/s × |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s, b in base.items():
        out.append(f"| {s} | none | {b['clients']} | {b['avg_leaf_density']:.1f} % | {b['leaf_fragmentation']:.1f} % "
                   f"| {_mb(b['index_bytes']):.1f} | {_mb(b['wal_bytes']):.1f} | {b['rows_per_s']:,.0f} "
                   "| 1.00 | 1.00 | 1.00 |")
        out.append(f"| {s} | REINDEX CONCURRENTLY after | {b['clients']} | {b['density_after_reindex']:.1f} % "
                   f"| {b['fragmentation_after_reindex']:.1f} % | {_mb(b['index_bytes_after_reindex']):.1f} "
                   f"| +{_mb(b['reindex_wal_bytes']):.1f} in {b['reindex_seconds']:.1f} s | — "
                   f"| {b['index_bytes_after_reindex'] / b['index_bytes']:.2f} "
                   f"| {(b['wal_bytes'] + b['reindex_wal_bytes']) / b['wal_bytes']:.2f} | — |")
        for r in rows:
            if r["strategy"] != s or r["mitigation"] == "none":
                continue
            out.append(f"| {s} | {r['mitigation']} | {r['clients']} | {r['avg_leaf_density']:.1f} % "
                       f"| {r['leaf_fragmentation']:.1f} % | {_mb(r['index_bytes']):.1f} | {_mb(r['wal_bytes']):.1f} "
                       f"| {r['rows_per_s']:,.0f} | {r['index_bytes'] / b['index_bytes']:.2f} "
                       f"| {r['wal_bytes'] / b['wal_bytes']:.2f} | {r['rows_per_s'] / b['rows_per_s']:.2f} |")
    out.append("")
    return out


def disorder_why(rows):
    """The explanation, with this run's own numbers for each key size."""
    i8, u = nbtree_model.Leaf(nbtree_model.item_bytes(8), 90), nbtree_model.Leaf(nbtree_model.item_bytes(16), 90)
    sizes_ = {}
    for r in rows:
        if r["fillfactor"] == 90:
            sizes_.setdefault(r["key_item_bytes"], r)
    parts = ", ".join(f"{r['leaf_capacity']} keys of {r['key_item_bytes']} bytes (index tuple and line pointer) "
                      f"with room for {r['room_after_rightmost_split']} late ones" for r in sizes_.values())
    return [
        "## Why: what nbtree does with a late key",
        "",
        "- **An ordered key splits the rightmost leaf at the fillfactor.** Every new key is the largest, so it "
        "goes to the rightmost leaf (nbtinsert.c caches that leaf and skips the descent: the fastpath). When "
        "the leaf is full, `_bt_findsplitloc` (nbtsplitloc.c) sees it is the rightmost page and splits it so "
        "that the left page keeps the leaf fillfactor (90 %) and the new rightmost page the few largest keys. "
        "The left page is never inserted into again, so the tree ends ~90 % full, its pages in block order.",
        f"- **A late key lands left of that split.** A key made before the split's boundary key but inserted "
        f"after the split belongs on the left page, which has only the fillfactor's 10 % free: here {parts}. "
        "If more late keys arrive than fit, the left page splits again — and it is no longer the rightmost "
        "page, so the split balances free space 50:50 (the \"split after the new item\" heuristic that "
        "would do better is not used for a single-column index: `_bt_afternewitemoff`). Both halves are "
        "left behind the advancing right edge, so neither is ever filled again: they stay ~50 % full plus "
        "the few late keys that followed. The new right half takes a new block at the end of the file "
        "while its right sibling sits at a lower block, so pgstatindex counts it as fragmented.",
        "- **Where it starts.** Every late key was made before the split and inserted after it, so it was in "
        "flight at the split: there are never more late keys for one split than writers at once (minus the "
        "one that split). So fewer writers than the room can never break a split, whatever the wait. With more, "
        "what counts is how many of their keys in flight are older than the split's boundary key, the smallest "
        f"of the {i8.right_after_rightmost_split} ({u.right_after_rightmost_split} for UUIDs) largest keys "
        "inserted. When each writer holds its key an exponentially distributed time, a key in flight has an "
        "exponential age, and with W writers and R keys on the new rightmost page the late keys per split come "
        "to W·e^(−u), where u − 1 + e^(−u) = R/W (`nbtree_model.expected_late_keys`). The mean wait cancels "
        "out: once the wait is most of the time between making a key and inserting it, only the number of "
        "writers and the page decide. The typical split breaks once W·e^(−u) passes the room: at "
        f"{nbtree_model.writers_at_which_splits_break(i8)} writers for 8-byte keys and "
        f"{nbtree_model.writers_at_which_splits_break(u)} for UUIDs at fillfactor 90 "
        f"({nbtree_model.writers_at_which_splits_break(nbtree_model.Leaf(i8.item, 70))} and "
        f"{nbtree_model.writers_at_which_splits_break(nbtree_model.Leaf(u.item, 70))} at fillfactor 70). "
        "As a fraction of a leaf: the late keys in flight must stay under the fillfactor's free tenth of it. "
        "A 16-byte key (UUID) fits fewer keys per leaf, so its room is smaller — "
        f"{nbtree_model.Leaf(nbtree_model.item_bytes(16), 90).room_after_rightmost_split} against "
        f"{nbtree_model.Leaf(nbtree_model.item_bytes(8), 90).room_after_rightmost_split} at fillfactor 90 — "
        "and it breaks at fewer writers than an 8-byte key. A lower "
        "fillfactor gives the left page more room (fillfactor 70: "
        f"{nbtree_model.Leaf(nbtree_model.item_bytes(8), 70).room_after_rightmost_split} and "
        f"{nbtree_model.Leaf(nbtree_model.item_bytes(16), 70).room_after_rightmost_split}) for a less dense "
        "tree from the start.",
        "",
    ]


def disorder_chart(rows, path):
    """Leaf density and fragmentation against the measured disorder (mean larger keys before a row),
    one line per strategy and client count; the model's figures dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = _curve_rows(rows)
    if len({r["window_ms"] for r in curve}) == 1 and len({r["clients"] for r in curve}) > 1:
        return writers_chart(curve, path)
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    lines = list(dict.fromkeys((r["strategy"], r["clients"]) for r in curve))
    for ax, (key, model, title) in zip(axes, [("avg_leaf_density", "model_density", "average leaf density (%)"),
                                              ("leaf_fragmentation", "model_fragmentation",
                                               "leaf fragmentation (%)")], strict=True):
        for i, (s, c) in enumerate(lines):
            pts = sorted((r for r in curve if r["strategy"] == s and r["clients"] == c),
                         key=lambda r: r["larger_before_mean"])
            xs = [max(p["larger_before_mean"], 0.01) for p in pts]
            ax.plot(xs, [p[key] for p in pts], marker="o", color=colors[i % len(colors)], label=f"{s}, {c} clients")
            ax.plot(xs, [p[model] for p in pts], linestyle=":", color=colors[i % len(colors)])
        ax.set_xscale("log")
        ax.set_xlabel("measured disorder: larger keys inserted before a row, mean")
        ax.set_title(title + "; dotted: the model")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("Keys that arrive out of order")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def writers_chart(curve, path):
    """One window, several client counts: density and fragmentation against writers at once, the
    formula's break for each strategy's key size a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    strategies = list(dict.fromkeys(r["strategy"] for r in curve))
    for ax, (key, title) in zip(axes, [("avg_leaf_density", "average leaf density (%)"),
                                       ("leaf_fragmentation", "leaf fragmentation (%)")], strict=True):
        for i, s in enumerate(strategies):
            pts = sorted((r for r in curve if r["strategy"] == s), key=lambda r: r["clients"])
            ax.plot([p["clients"] for p in pts], [p[key] for p in pts], marker="o", color=colors[i % len(colors)],
                    label=s)
            ax.axvline(nbtree_model.writers_at_which_splits_break(leaf_of(pts[0])), color=colors[i % len(colors)],
                       linestyle="--", linewidth=0.8)
        ax.set_xlabel(f"writers at once (each row held {curve[0]['window_ms']:g} ms on average)")
        ax.set_title(title + "; dashed: predicted break")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("Keys that arrive out of order: how many writers it takes")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def read_many_cores(path):
    """The 16-core points kept beside the results (key, clients, density, fragmentation)."""
    if not os.path.exists(path):
        return None
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def write_disorder(rows, meta, out_dir, many_cores=None):
    os.makedirs(out_dir, exist_ok=True)
    write_disorder_csv(rows, os.path.join(out_dir, "disorder.csv"))
    with open(os.path.join(out_dir, "disorder.md"), "w") as f:
        f.write(disorder_markdown(rows, meta, many_cores))
    disorder_chart(rows, os.path.join(out_dir, "disorder.png"))
