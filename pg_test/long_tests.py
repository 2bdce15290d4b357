"""The long tests first: the order pytest-xdist's workers take make test's tests in.

pg_test/run runs the concurrent part with `--dist worksteal`: each of the N workers is handed one
contiguous Nth of the collection, and a worker that runs out takes half of what another has left
from its end. In collection order the two-minute tests started wherever their files fell, often
last, and the run waited on one worker while the other three were done (15: 556 s for 511 s of
tests per worker, replayed from a run's own durations).

`first()` deals the long tests out, longest first, each to the worker with the least so far
(longest-processing-time), and puts each worker's share at the head of its Nth; the short tests
keep their order behind them (a file's tests stay together, so its module fixtures are made once
per worker, as before). Stealing takes from the ends, so the short tests even the finish.

LONG_TESTS_FILE holds the seconds each long test took in a run of make test, the more of 15's and
18's; written from that run's results by

    python3 pg_test/long_tests.py target/test-results > pg_test/long_tests.tsv

A stale figure only changes an order, never what runs (pg_test/test_times.py checks that each
line names a test that exists).
"""

import os
import re
import sys
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
LONG_TESTS_FILE = os.path.join(HERE, "long_tests.tsv")
LONG_S = 10  # a test that takes this long or more is dealt out first


def load(path=LONG_TESTS_FILE):
    """{node id: seconds} from LONG_TESTS_FILE ('seconds<TAB>node id' lines, '#' comments)."""
    seconds = {}
    with open(path) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                s, nodeid = line.rstrip("\n").split("\t")
                seconds[nodeid] = float(s)
    return seconds


def worksteal_shares(n_items, workers):
    """How many items xdist's worksteal hands each worker at the start (each idle worker gets what
    is left divided by the workers still to serve)."""
    shares, left = [], n_items
    for i in range(workers):
        share = left // (workers - i)
        shares.append(share)
        left -= share
    return shares


def first(items, workers, seconds, long_s=LONG_S):
    """items reordered for `workers` worksteal workers: the long ones (seconds[nodeid] >= long_s)
    at the heads of the workers' first shares, dealt longest first to the least loaded; the rest
    in their own order. The same items give the same order on every worker (xdist requires it)."""
    def took(item):
        return seconds.get(getattr(item, "nodeid", item), 0)

    long = sorted((i for i in items if took(i) >= long_s), key=lambda i: -took(i))
    rest = [i for i in items if took(i) < long_s]
    dealt = [[] for _ in range(workers)]
    load_s = [0.0] * workers
    for item in long:
        w = min(range(workers), key=lambda k: (load_s[k], k))
        dealt[w].append(item)
        load_s[w] += took(item)
    ordered, taken = [], 0
    for share, heads in zip(worksteal_shares(len(items), workers), dealt, strict=True):
        fill = max(0, share - len(heads))
        ordered += heads + rest[taken:taken + fill]
        taken += fill
    return ordered + rest[taken:]


def from_results(folder, long_s=LONG_S):
    """{node id: seconds} of the tests that took long_s or more in a make test run's concurrent
    parts (pgNN.xml; the alone and as-root parts run one at a time), the most over the versions."""
    seconds = {}
    for name in sorted(os.listdir(folder)):
        if not re.fullmatch(r"pg\d+\.xml", name):
            continue
        for case in ET.parse(os.path.join(folder, name)).getroot().iter("testcase"):
            t = float(case.get("time") or 0)
            if t >= long_s:
                nodeid = case.get("classname", "").replace(".", "/") + ".py::" + case.get("name")
                seconds[nodeid] = max(t, seconds.get(nodeid, 0))
    return seconds


def main(argv):
    seconds = from_results(argv[1])
    print(f"# The tests that took {LONG_S} s or more in make test's concurrent parts, the more of the versions")
    print("# (pg_test/long_tests.py: the order the workers take them in). Written by")
    print("#   python3 pg_test/long_tests.py target/test-results > pg_test/long_tests.tsv")
    for nodeid, s in sorted(seconds.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"{s:.0f}\t{nodeid}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
