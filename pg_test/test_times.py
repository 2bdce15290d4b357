"""The closing table of `make test` (pg_test/times.py): its budget warning, and the budget table
in docs/testing.md kept equal to the one the run reads. Starts no server."""
import os
import re

import times

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_step_over_its_budget_by_more_than_a_fifth_is_named_and_one_within_is_not():
    budget = {"lint": 100, "pg15 pytest": 500}
    steps = [("lint", 120), ("pg15 pytest", 601)]
    line = times.budget_line(steps, budget)
    assert line.startswith("budget: WARNING") and "pg15 pytest 601 s (budget 500 s)" in line, line
    assert "lint" not in line, line  # 120 is exactly a fifth over: within
    assert times.budget_line([("lint", 120)], budget).startswith("budget: every step within"), line


def test_a_step_without_a_budget_is_named():
    line = times.budget_line([("pg19 pytest", 5)], {"lint": 100})
    assert "pg19 pytest 5 s (no budget)" in line, line


def test_every_step_the_run_times_has_a_budget():
    with open(os.path.join(ROOT, "pg_test", "run")) as f:
        run = f.read()
    named = {a or b for a, b in re.findall(r'^\s*step (?:"([^"]+)"|([\w-]+)) ', run, re.M)}
    assert {"set-up", "lint", "pg$PG pytest", "pg$PG build"} <= named, named  # the pattern reads the file
    steps = {f"pg{v} {n[6:]}" for v in (15, 16, 17, 18) for n in named if n.startswith("pg$PG ")}
    steps |= {n for n in named if not n.startswith("pg$PG ")}
    assert [n for n in sorted(steps) if times.budget_of(n) is None] == []


def test_the_budget_table_in_docs_testing_md_is_the_one_the_run_reads():
    with open(os.path.join(ROOT, "docs", "testing.md")) as f:
        text = f.read()
    table = text.split("## The budget", 1)[1].split("\nThat is ", 1)[0]  # its first table
    documented = {}
    for name, cells in re.findall(r"^\| ([^|]+?) \|((?: *[\d—]+ *\|)+)\s*$", table, re.M):
        if name.strip() == "step":
            continue  # the header
        for version, cell in zip(("15", "17", "18", "16"), cells.strip("|").split("|"), strict=False):
            cell = cell.strip()
            if cell == "—":
                continue
            key = name.strip() if name.strip() in times.BUDGET_S else f"pg{version} {name.strip()}"
            documented[key] = int(cell)
            if name.strip() in times.BUDGET_S:
                break
    assert documented == {k: v for k, v in times.BUDGET_S.items() if k not in ("build", "sql suite")}
