"""The study's outputs: results.csv, report.md and study.png. No database in here, so it is
tested on its own (benches/test_report.py)."""
import csv
import os

# The first columns are fixed by the study's contract; more may follow.
COLUMNS = [
    "strategy", "clients", "rows", "seconds", "rows_per_s",
    "leaf_splits", "upper_splits", "new_roots", "leaf_pages", "avg_leaf_density", "leaf_fragmentation",
    "index_bytes", "table_bytes", "wal_bytes", "wal_fpi", "fpi_bytes",
    "tree_level", "batch", "checkpoints",
    # since 0.2.0: buffer I/O, for the curve against index size / shared_buffers (--sizes)
    "blks_read_per_1k_rows", "blks_written_per_1k_rows", "blks_evicted_per_1k_rows", "index_to_shared_buffers",
    "shared_buffers_bytes", "io_source",
]
IO_COLUMNS = COLUMNS[COLUMNS.index("blks_read_per_1k_rows"):]
INTS = {"clients", "rows", "leaf_splits", "upper_splits", "new_roots", "leaf_pages", "index_bytes",
        "table_bytes", "wal_bytes", "wal_fpi", "fpi_bytes", "tree_level", "batch", "checkpoints",
        "shared_buffers_bytes"}
FLOATS = {"seconds", "rows_per_s", "avg_leaf_density", "leaf_fragmentation", "blks_read_per_1k_rows",
          "blks_written_per_1k_rows", "blks_evicted_per_1k_rows", "index_to_shared_buffers"}
BASELINE = "bigserial"


def write_csv(rows, path):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="raise")
        w.writeheader()
        for r in rows:
            missing = [k for k in COLUMNS if k not in r]
            if missing:
                raise ValueError(f"row for {r.get('strategy')} lacks {missing}")
            w.writerow({k: ("" if v is None else f"{v:.6g}" if k in FLOATS else v) for k, v in r.items()})


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
            for k in ("blks_read_per_1k_rows", "blks_written_per_1k_rows", "blks_evicted_per_1k_rows"):
                if r[k] < 0:
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
                "| strategy | rows/s | leaf splits | avg leaf density | leaf fragmentation | index MB | WAL MB "
                "| full-page images | checkpoints | index × | WAL × | speed × |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            ]
            for r in [r for r in rows if r["clients"] == c and r["rows"] == n]:
                x = rat.get((r["strategy"], c, n), {})
                out.append(
                    f"| {r['strategy']} | {r['rows_per_s']:,.0f} | {r['leaf_splits']:,} "
                    f"| {r['avg_leaf_density']:.1f} % | {r['leaf_fragmentation']:.1f} % | {_mb(r['index_bytes']):.1f} "
                    f"| {_mb(r['wal_bytes']):.1f} | {r['wal_fpi']:,} | {r['checkpoints']} "
                    f"| {x.get('index_bytes', float('nan')):.2f} | {x.get('wal_bytes', float('nan')):.2f} "
                    f"| {x.get('rows_per_s', float('nan')):.2f} |"
                )
            out.append("")
    out += [
        "× columns are ratios to bigserial at the same client count (speed × above 1 is faster).",
        "",
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
        "| strategy | clients | rows | index / shared_buffers | read | written | evicted | rows/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(rows, key=lambda r: (r["clients"], r["strategy"], r["rows"])):
        out.append(f"| {r['strategy']} | {r['clients']} | {r['rows']:,} | {r['index_to_shared_buffers']:.2f} "
                   f"| {r['blks_read_per_1k_rows']:.1f} | {r['blks_written_per_1k_rows']:.1f} "
                   f"| {r['blks_evicted_per_1k_rows']:.1f} | {r['rows_per_s']:,.0f} |")
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
