"""Where a test run's time went, and what it counted: pg_test/run's closing table.

Reads the folder pg_test/run writes (target/test-results): steps.tsv (each step and its
seconds) and one JUnit XML file per pytest run (pgNN.xml, pgNN-alone.xml, pgNN-as-root.xml,
benches.xml). Prints the steps, then per test file the seconds its tests took on each version
(summed over tests: with workers at once, more than the wall-clock time), then one closing line
that counts every pytest outcome:

    pytest: 1234 passed, 0 failed, 12 skipped

    python3 pg_test/times.py target/test-results
"""

import collections
import os
import re
import sys
import xml.etree.ElementTree as ET


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

    out = ["where the time went (seconds):"]
    out += [f"  {s:6d}  {name}" for name, s in steps]
    out.append(f"  {sum(s for _, s in steps):6d}  all ({mmss(sum(s for _, s in steps))})")
    out.append("test files, seconds summed over their tests: " + "  ".join(versions))
    for file in sorted(per_file, key=lambda f: -sum(per_file[f].values())):
        cells = [f"{per_file[file][v]:6.0f}" if v in per_file[file] else "     —" for v in versions]
        out.append("  " + " ".join(cells) + "  " + file)
    out.append(f"pytest: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    print("\n".join(out))
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
