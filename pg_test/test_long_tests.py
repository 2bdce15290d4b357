"""The order make test's workers take the tests in (pg_test/long_tests.py) and which tests make
test leaves to make soak (conftest.soak_selection). Starts no server."""
import heapq
import os
import re
import types

import conftest
import long_tests
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def worksteal_replay(order, seconds, workers, min_pending=2):
    """When the last worker ends, replaying xdist's worksteal over `order` with each test's
    seconds: a worker's first share as long_tests.worksteal_shares says, and a worker left with
    fewer than min_pending takes half of the longest queue's end."""
    queues, left = [], list(order)
    for share in long_tests.worksteal_shares(len(order), workers):
        queues.append(left[:share])
        left = left[share:]
    running = [(seconds[q[0]], w) for w, q in enumerate(queues) if q]
    heapq.heapify(running)
    end = 0.0
    while running:
        now, w = heapq.heappop(running)
        end = max(end, now)
        queues[w].pop(0)
        if len(queues[w]) < min_pending:
            victim = max(range(workers), key=lambda k: len(queues[k]))
            n = min(len(queues[victim]) // 2, max(0, len(queues[victim]) - min_pending))
            if n:
                queues[w] += queues[victim][-n:]
                del queues[victim][-n:]
        if queues[w]:
            heapq.heappush(running, (now + seconds[queues[w][0]], w))
    return end


def a_collection():
    """Eleven files of ten 2-second tests; the two-minute ones in the last files, where the
    collection's order put make test's Citus outage, Patroni and the fault schedules."""
    seconds = {f"pg_test/test_f{f:02d}.py::test_{t}": 2.0 for f in range(11) for t in range(10)}
    for f, t, s in ((8, 3, 130), (9, 0, 115), (9, 5, 110), (10, 2, 105), (10, 7, 60)):
        seconds[f"pg_test/test_f{f:02d}.py::test_{t}"] = float(s)
    return list(seconds), seconds


def test_the_long_tests_head_the_workers_first_shares_and_every_test_stays_once():
    order, seconds = a_collection()
    ordered = long_tests.first(order, 4, seconds)
    assert sorted(ordered) == sorted(order)
    shares = long_tests.worksteal_shares(len(order), 4)
    heads, at = [], 0
    for share in shares:
        heads.append([t for t in ordered[at:at + share] if seconds[t] >= long_tests.LONG_S])
        assert ordered[at:at + len(heads[-1])] == heads[-1]  # a share's long tests come first
        at += share
    # longest first, each to the least loaded worker: 130 | 115 | 110 | 105 + 60
    assert [[seconds[t] for t in h] for h in heads] == [[130], [115], [110], [105, 60]]
    short = [t for t in ordered if seconds[t] < long_tests.LONG_S]
    assert short == [t for t in order if seconds[t] < long_tests.LONG_S]  # the rest keep their order
    assert long_tests.first(list(order), 4, seconds) == ordered  # the same on every worker


def test_the_long_tests_first_end_the_run_sooner_than_the_collections_order():
    order, seconds = a_collection()
    as_collected = worksteal_replay(order, seconds, 4)
    long_first = worksteal_replay(long_tests.first(order, 4, seconds), seconds, 4)
    ideal = max(sum(seconds.values()) / 4, max(seconds.values()))
    assert as_collected > ideal + 60, (as_collected, ideal)  # the trap: the long tests share a worker
    assert long_first <= ideal + 10, (long_first, ideal)


def test_every_line_of_the_long_tests_file_names_a_test_that_exists():
    missing = []
    for nodeid in long_tests.load():
        path, name = nodeid.split("::", 1)
        function = re.sub(r"\[.*\]$", "", name)
        source = os.path.join(ROOT, path)
        if not os.path.exists(source) or not re.search(rf"^def {function}\(", open(source).read(), re.M):
            missing.append(nodeid)
    assert missing == [], "stale lines: write pg_test/long_tests.tsv again (pg_test/long_tests.py)"


def item(name, *marks):
    mark = {m.name: m for m in marks}
    return types.SimpleNamespace(nodeid=name, get_closest_marker=mark.get)


@pytest.mark.parametrize("major", [15, 16, 18])
def test_make_test_leaves_the_soak_tests_to_make_soak_save_where_they_name_the_version(major):
    plain = item("plain")
    soak = item("soak", pytest.mark.soak("long").mark)
    on15 = item("on15", pytest.mark.soak("long", make_test_on=(15,)).mark)
    kept, dropped = conftest.soak_selection([plain, soak, on15], major, soak=False)
    assert [i.nodeid for i in kept] == (["plain", "on15"] if major == 15 else ["plain"])
    assert {i.nodeid for i in kept + dropped} == {"plain", "soak", "on15"}
    kept, _ = conftest.soak_selection([plain, soak, on15], major, soak=True)
    assert [i.nodeid for i in kept] == ["soak", "on15"]
