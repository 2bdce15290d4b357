"""The speed figures docs/speed.md and the README quote are the ones the committed runs in
benches/results hold: a figure changed by hand on either side, or a new run whose figures the
pages do not follow, fails here. No server."""

import os
import re

from conftest import ROOT

RESULTS = os.path.join(ROOT, "benches", "results")


def read(*parts):
    with open(os.path.join(ROOT, *parts)) as f:
        return f.read()


def table_rows(text):
    """The cells of each Markdown table row in text, header and separator rows included."""
    return [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("| ")]


def generator_rows(text):
    """{generator: {column: cell}} from a results speed.md's main table."""
    header, *lines = table_rows(text)
    rows = {}
    for cells in lines:
        if len(cells) == len(header) and cells[0].startswith("`"):
            rows[cells[0]] = dict(zip(header, cells, strict=True))
    return rows


def measured(major):
    """What benches/results/pgNN/speed.md measured, as the pages round it."""
    text = read("benches", "results", f"pg{major}", "speed.md")
    rows = generator_rows(text)
    uuid = rows["`uuid_v7()`"]
    out = {
        "cap": re.search(r"snowflake_next\(\), 1 backend: ([\d.]+)% of the cap by wall time", text).group(1),
        "net": uuid["net × gen_random_uuid()"],
        "whole": uuid["× gen_random_uuid() time"],
        "base62": re.search(r"base62_encode\(g\) against to_hex\(g\), whole query: ([\d.]+)×", text).group(1),
    }
    if "`core uuidv7()`" in rows:
        seconds = float(uuid["1 backend: s"]) / float(rows["`core uuidv7()`"]["1 backend: s"])
        out["core_net"], out["core_whole"] = uuid["net × core uuidv7()"], f"{seconds:.2f}"
    return out


def test_speed_pages_table_is_what_each_versions_run_measured():
    table = [cells for cells in table_rows(read("docs", "speed.md")) if re.match(r"1[5-8]\.\d+, ", cells[0])]
    assert len(table) == 4, table
    for cells in table:
        m = measured(cells[0].split(".")[0])
        assert cells[1] == f"{m['cap']} %", (cells[0], cells[1], m)
        assert cells[2] == f"**{m['net']}** ({m['whole']})", (cells[0], cells[2], m)
        core = f"**{m['core_net']}** ({m['core_whole']})" if "core_net" in m else "—"
        assert cells[3] == core, (cells[0], cells[3], m)
        assert cells[4] == m["base62"], (cells[0], cells[4], m)


def test_the_readmes_speed_sentence_is_what_15s_run_measured():
    m = measured(15)
    readme = " ".join(read("README.md").split())
    said = re.search(r"In one backend `snowflake_next\(\)` made ([\d.]+) % of its cap of 4,096,000 ids a second, "
                     r"and `uuid_v7\(\)` took ([\d.]+) of `gen_random_uuid\(\)`'s time net of the scan both ran in "
                     r"\(([\d.]+) of the whole query", readme)
    assert said, "the README's speed sentence is gone or reworded: update this test with it"
    assert said.groups() == (m["cap"], m["net"], m["whole"]), (said.groups(), m)


CITUS_KEYS = {"`bigserial`": "bigserial", "`snowflake_next()`": "snowflake", "`uuid_v7()`": "uuid_v7",
              "`gen_random_uuid()`": "uuid_v4"}
CITUS_DISTRIBUTIONS = {"the key": "key", "a tenant": "tenant"}
CITUS_PATHS = {"the coordinator": ("coordinator", "1"), "both workers": ("workers", "1 per worker")}


def test_citus_pages_study_table_is_what_15s_run_measured():
    """docs/citus.md's study table: each row's splits, density, size and time order as
    benches/results/pg15/citus.md holds them for one client, and every run of that file there."""
    results = {tuple(cells[:4]): cells for cells in table_rows(read("benches", "results", "pg15", "citus.md"))
               if len(cells) == 11 and cells[0] in CITUS_KEYS.values()}
    page = [cells for cells in table_rows(read("docs", "citus.md")) if len(cells) == 8 and cells[0] in CITUS_KEYS]
    assert len(page) == 16, page
    seen = set()
    for key, distribution, path, splits, density, size, late, lag in page:
        through, clients = CITUS_PATHS[path]
        run = (CITUS_KEYS[key], CITUS_DISTRIBUTIONS[distribution], through, clients)
        assert run in results, (run, sorted(results))
        r = results[run]
        assert [splits, density, size, late, lag] == [r[6], r[7].split(",")[0], f"{r[8]} KB", r[9], r[10]], (run, r)
        seen.add(run)
    assert seen == {k for k in results if k[3] in ("1", "1 per worker")}


def test_the_short_code_figures_of_base62_md_are_what_15s_run_measured():
    """docs/base62.md's table of short-code makers and its block figures are the ones
    benches/results/pg15/short_codes.md holds."""
    text = read("benches", "results", "pg15", "short_codes.md")
    page = read("docs", "base62.md")
    rows = {cells[0]: cells for cells in table_rows(text) if cells[0].startswith("`")}
    shown = {cells[0]: cells[1] for cells in table_rows(page) if cells[0].startswith("`short_code_next()`")
             or cells[0].startswith("`worker_code_next()`")}
    names = {
        "`short_code_next()`, blocks of 1,000": "`short_code_next(), blocks of 1,000`",
        "`short_code_next()`, blocks of 100,000": "`short_code_next(), blocks of 100,000`",
        "`worker_code_next()`, blocks of 1,000 (a WAL flush a block)": "`worker_code_next(), blocks of 1,000`",
    }
    assert set(shown) == set(names)
    for on_page, in_results in names.items():
        assert shown[on_page] == rows[in_results][-1], on_page
    calls, ms = re.search(r"blocks of 1,000: ([\d,]+) calls, ([\d.]+) ms each", text).groups()
    assert f"took {ms} ms on average" in page and f"({calls} calls for" in page
    median = re.search(r"median / p99 of \d+: ([\d.]+) /", text).group(1)
    assert f"`take_block()` {median} ms (median)" in page
