"""The model of nbtree's leaf splits and the disorder measures (benches/idgen_harness/nbtree_model.py), without a
database: the page geometry against the figures worked out from nbtsplitloc.c, the split rules on
arrival orders whose outcome is known, and the bound the README's explanation rests on."""
import random

import pytest
from idgen_harness import nbtree_model as m

INT8, UUID = m.item_bytes(8), m.item_bytes(16)


@pytest.mark.parametrize("item,ff,capacity,left,room", [
    (INT8, 90, 407, 366, 40), (INT8, 80, 407, 325, 81), (INT8, 70, 407, 284, 122),
    (UUID, 90, 291, 261, 29), (UUID, 80, 291, 232, 58), (UUID, 70, 291, 203, 87),
])
def test_leaf_geometry_is_nbtrees(item, ff, capacity, left, room):
    leaf = m.Leaf(item, ff)
    assert (leaf.capacity, leaf.split_left(capacity + 1, rightmost=True), leaf.room_after_rightmost_split) == (
        capacity, left, room)
    # elsewhere 50:50, whatever the fillfactor: 203 of 407 int8 keys, 145 of 291 UUIDs stay left
    assert leaf.split_left(leaf.capacity_inner + 1, rightmost=False) == (203 if item == INT8 else 145)


def test_item_sizes():
    assert (m.item_bytes(8), m.item_bytes(16), m.item_bytes(12)) == (20, 28, 28)


def test_keys_in_order_fill_leaves_to_the_fillfactor_in_block_order():
    r = m.replay(range(100_000), m.Leaf(INT8, 90))
    assert r.other_splits == 0 and r.fragmentation == 0 and r.broken == 0
    assert r.rightmost_splits == r.leaf_pages - 1 == 100_000 // 366 - (1 if 100_000 % 366 < 42 else 0)
    assert 89.5 < r.density < 90.1  # the last, partly filled, leaf pulls it under 90.04 %


def test_random_keys_split_50_50_and_leave_half_the_leaves_out_of_order():
    order = list(range(200_000))
    random.Random(7).shuffle(order)
    r = m.replay(order, m.Leaf(UUID, 90))
    assert r.other_splits > 50 * r.rightmost_splits
    # about ln 2 = 69 % in the steady state; a young tree swings around it as its leaves fill in waves
    assert 62 < r.density < 78 and 45 < r.fragmentation < 55


def writers(n_keys, clients, mean_hold, seed):
    """The arrival order of keys made in order by `clients` writers, each making a key, holding it
    an exponentially distributed time, inserting it and making the next: at most `clients` keys
    are in flight at any time."""
    rng = random.Random(seed)
    t, arrivals, next_key = 0.0, [], 0
    free = [0.0] * clients  # when each writer is ready for its next key
    while next_key < n_keys:
        w = min(range(clients), key=free.__getitem__)
        t = max(t, free[w])
        done = t + rng.expovariate(1 / mean_hold) + 1e-6
        arrivals.append((done, next_key))
        free[w] = done
        next_key += 1
    return [k for _, k in sorted(arrivals)]


@pytest.mark.parametrize("item,ff", [(INT8, 90), (UUID, 90), (INT8, 70), (UUID, 80)])
def test_fewer_writers_than_the_room_never_break_a_split_whatever_the_wait(item, ff):
    """Every late key was in flight at the split, and only writers other than the one that split
    can hold one: with room + 1 writers no rightmost split ever gets more late keys than it has
    room for, however long the wait; with twice that many and a long wait, most do."""
    leaf = m.Leaf(item, ff)
    room = leaf.room_after_rightmost_split
    for seed in range(3):
        r = m.replay(writers(40_000, room + 1, mean_hold=50.0, seed=seed), leaf)
        assert r.broken == 0 and max(r.late_keys) <= room, (seed, max(r.late_keys), room)
        assert max(r.late_keys) > 0  # the wait did make late keys
    r = m.replay(writers(40_000, 4 * room, mean_hold=50.0, seed=0), leaf)
    assert r.broken > r.rightmost_splits // 2
    assert r.fragmentation > 30 and r.density < 70


def brute_inversions(order):
    return [sum(1 for earlier in order[:j] if earlier > k) for j, k in enumerate(order)]


def test_inversions_count_the_larger_keys_inserted_before_each_row():
    rng = random.Random(3)
    for n in (1, 2, 10, 300):
        order = list(range(n))
        rng.shuffle(order)
        assert m.inversions(order) == brute_inversions(order)
    assert m.inversions([0, 1, 2]) == [0, 0, 0] and m.inversions([2, 1, 0]) == [0, 1, 2]


def test_lateness_is_the_time_since_the_first_larger_key_arrived():
    # key 0 arrives last, at t=10; key 2 came first at t=1
    assert m.lateness([2, 1, 0], [1.0, 4.0, 10.0]) == [0.0, 3.0, 9.0]
    assert m.lateness([0, 1, 2], [1.0, 2.0, 3.0]) == [0.0, 0.0, 0.0]
    rng = random.Random(5)
    order = list(range(200))
    rng.shuffle(order)
    times = sorted(rng.random() for _ in order)
    got = m.lateness(order, times)
    for j, k in enumerate(order):
        larger = [times[i] for i in range(j) if order[i] > k]
        assert got[j] == (times[j] - min(larger) if larger else 0.0)


def test_arrival_order_and_percentile():
    # rows listed in key order with their arrival numbers: key 0 arrived third, key 1 first, key 2 second
    assert m.arrival_order([30, 10, 20]) == [1, 2, 0]
    assert m.percentile([], 99) == 0
    assert m.percentile(list(range(1, 101)), 50) == 50 and m.percentile(list(range(1, 101)), 99) == 99
    assert m.percentile([5], 1) == 5


@pytest.mark.parametrize("item", [INT8, UUID])
def test_the_expected_late_keys_match_the_replay_below_the_break_and_the_break_is_where_they_exceed_the_room(item):
    leaf = m.Leaf(item, 90)
    right = leaf.right_after_rightmost_split
    assert right == (42 if item == INT8 else 31)
    for clients in (40, 64):
        r = m.replay(writers(60_000, clients, mean_hold=5.0, seed=clients), leaf)
        assert r.broken < 0.05 * r.rightmost_splits  # the odd split whose late keys run above the mean
        simulated = sum(r.late_keys[5:]) / len(r.late_keys[5:])
        assert abs(simulated - m.expected_late_keys(clients, right)) < 0.1 * simulated + 1, (clients, simulated)
    # the mean wait cancels out: the same writers with a 20 times longer wait expect as many
    r = m.replay(writers(60_000, 64, mean_hold=100.0, seed=9), leaf)
    assert abs(sum(r.late_keys[5:]) / len(r.late_keys[5:]) - m.expected_late_keys(64, right)) < 3
    n = m.writers_at_which_splits_break(leaf)
    assert n == (111 if item == INT8 else 81)
    assert m.replay(writers(60_000, int(n * 1.5), mean_hold=5.0, seed=1), leaf).broken > 0
