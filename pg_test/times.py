"""Where a test run's time went, and what it counted: pg_test/run's closing table.

Reads the folder pg_test/run writes (target/test-results): steps.tsv (each step and its
seconds) and one JUnit XML file per pytest run (pgNN.xml, pgNN-alone.xml, pgNN-as-root.xml,
benches.xml). Prints the steps beside their budgets (BUDGET_S), then per test file the
seconds its tests took on each version (summed over tests: with workers at once, more than the
wall-clock time), then a line naming every step over its budget by more than a fifth, then one
closing line that counts every pytest outcome:

    pytest: 1234 passed, 0 failed, 12 skipped

    python3 pg_test/times.py target/test-results
"""

import collections
import os
import re
import sys
import xml.etree.ElementTree as ET

# Each step's budget in seconds on the 2-vCPU CI machine, so that `make test` on a fresh clone
# stays inside 45 minutes, Citus's first build included (docs/testing.md, "The budget",
# keeps this table and says how it was measured; test_times.py checks the two agree). A step
# over its budget by more than a fifth is named at the end of the run: a warning, never a
# failure (a timed assertion on a noisy machine would itself be a flake).
BUDGET_S = {
    "set-up": 300,
    "lint": 65,
    "core": 80,
    "loom": 25,
    "harness without a server": 8,
    "pg15 cargo pgrx test": 58,
    "pg15 release build": 80,
    "pg15 old releases": 70,
    "pg15 pg_tle": 10,
    "pg15 citus": 130,
    "pg15 as root": 52,
    "pg15 pytest": 560,
    "pg17 cargo pgrx test": 1,
    "pg17 release build": 40,
    "pg17 old releases": 1,
    "pg17 pg_tle": 1,
    "pg17 citus": 1,
    "pg17 as root": 1,
    "pg17 pytest": 210,
    "pg18 cargo pgrx test": 50,
    "pg18 release build": 42,
    "pg18 old releases": 30,
    "pg18 pg_tle": 10,
    "pg18 citus": 70,
    "pg18 as root": 38,
    "pg18 pytest": 425,
    "pg16 cargo pgrx test": 1,
    "pg16 release build": 40,
    "pg16 old releases": 1,
    "pg16 pg_tle": 1,
    "pg16 citus": 1,
    "pg16 as root": 1,
    "pg16 pytest": 210,
    # make check's own steps, on whichever version it runs
    "build": 80,
    "sql suite": 15,
}
OVER = 1.2  # "more than a fifth"


def budget_of(name, budget=BUDGET_S):
    """A step's budget: its own, else that of its name without the version ("pg18 build")."""
    return budget.get(name, budget.get(re.sub(r"^pg\d+ ", "", name)))


def over_budget(steps, budget=BUDGET_S):
    """The steps that took more than OVER times their budget, as (name, seconds, budget); a step
    with no budget counts as over (a new step must be given one)."""
    over = []
    for name, seconds in steps:
        b = budget_of(name, budget)
        if b is None or seconds > OVER * b:
            over.append((name, seconds, b))
    return over


def budget_line(steps, budget=BUDGET_S):
    over = over_budget(steps, budget)
    if not over:
        return f"budget: every step within a fifth of its budget (all {sum(s for _, s in steps)} s)"
    named = ", ".join(f"{n} {s} s (budget {b} s)" if b is not None else f"{n} {s} s (no budget)"
                      for n, s, b in over)
    return f"budget: WARNING, over by more than a fifth: {named}"


def read_steps(folder):
    steps = []
    path = os.path.join(folder, "steps.tsv")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                name, seconds = line.rstrip("\n").split("\t")
                steps.append((name, int(seconds)))
    return steps


def read_runs(folder):
    """{run name: [(test file, outcome, seconds)]} from every JUnit XML file in folder."""
    runs = {}
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".xml"):
            continue
        cases = []
        for case in ET.parse(os.path.join(folder, name)).getroot().iter("testcase"):
            outcome = "passed"
            for child in case:
                if child.tag in ("failure", "error"):
                    outcome = "failed"
                elif child.tag == "skipped":
                    outcome = "skipped"
            # classname: pg_test.test_clock (a module-level test) or pg_test.test_x.Class
            module = re.sub(r"\.[A-Z]\w*$", "", case.get("classname", ""))
            cases.append((module.replace(".", "/") + ".py", outcome, float(case.get("time") or 0)))
        runs[name[:-4]] = cases
    return runs


def version_of(run):
    m = re.match(r"pg(\d+)", run)
    return f"pg{m.group(1)}" if m else "once"


def mmss(seconds):
    return f"{int(seconds) // 60}:{int(seconds) % 60:02d}"


def main(argv):
    folder = argv[1]
    steps = read_steps(folder)
    runs = read_runs(folder)
    counts = collections.Counter(outcome for cases in runs.values() for _, outcome, _ in cases)

    versions = sorted({version_of(r) for r in runs}, key=lambda v: (v != "once", v))
    per_file = collections.defaultdict(lambda: collections.defaultdict(float))
    for run, cases in runs.items():
        for file, _, seconds in cases:
            per_file[file][version_of(run)] += seconds

    out = ["where the time went (seconds, then the step's budget):"]
    out += [f"  {s:6d}  {budget_of(name) or '—':>6}  {name}" for name, s in steps]
    spent = sum(s for _, s in steps)
    budgeted = sum(budget_of(name) or 0 for name, _ in steps)
    out.append(f"  {spent:6d}  {budgeted:6d}  all ({mmss(spent)} of {mmss(budgeted)})")
    out.append("test files, seconds summed over their tests: " + "  ".join(versions))
    for file in sorted(per_file, key=lambda f: -sum(per_file[f].values())):
        cells = [f"{per_file[file][v]:6.0f}" if v in per_file[file] else "     —" for v in versions]
        out.append("  " + " ".join(cells) + "  " + file)
    # the budget's warning, then the count: CI reads the run's last line for the count
    out.append(budget_line(steps))
    out.append(f"pytest: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    print("\n".join(out))
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
