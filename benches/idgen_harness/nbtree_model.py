"""Keys that reach the index out of order: how far out of order they arrived, and what
PostgreSQL's B-tree does with them. No database in here (tested in benches/test_nbtree_model.py).
A module of the study's disorder axis (benches/run --disorder), not run on its own.

The model replays an arrival order (each row's key rank, in the order the rows were inserted)
into leaf pages that split as nbtree splits them (nbtsplitloc.c, _bt_findsplitloc):
- a leaf that is the rightmost of its level splits at the leaf fillfactor: the left page keeps
  about fillfactor % of the page, the new right page the rest;
- any other leaf splits so that both halves have about the same free space (50:50). The
  "split after the new item" heuristic that can do better is not used for a single-column
  index (_bt_afternewitemoff), which a key column is;
- the left half keeps its block, the right half gets the next new block.
Items are all the same size (the key's index tuple plus its line pointer); every page but the
rightmost of its level also holds a high key. Density and fragmentation are then computed the way
pgstatindex computes them, so the model's figures and the server's can be compared.
"""
import bisect
import math
from dataclasses import dataclass, field

PAGE = 8192
PAGE_HEADER = 24  # SizeOfPageHeaderData
BT_SPECIAL = 16  # BTPageOpaqueData
USABLE = PAGE - PAGE_HEADER - BT_SPECIAL  # what pgstatindex counts as a leaf's room: 8152
INDEX_TUPLE_HEADER = 8  # IndexTupleData: the heap TID and t_info
LINE_POINTER = 4  # ItemIdData
HEAP_TID = 8  # MAXALIGN(sizeof(ItemPointerData))


def maxalign(n):
    return (n + 7) & ~7


def item_bytes(key_bytes):
    """Room one key takes on a leaf: its index tuple (header + key, MAXALIGNed) and line pointer.
    8 (int8) -> 20, 16 (uuid) -> 28, 12 (an 11-character text key) -> 28."""
    return maxalign(INDEX_TUPLE_HEADER + key_bytes) + LINE_POINTER


@dataclass(frozen=True)
class Leaf:
    """What a leaf page holds for one key size and fillfactor."""
    item: int
    fillfactor: int

    @property
    def capacity(self):
        """Keys on a full rightmost leaf (no high key): 407 int8 keys, 291 UUIDs."""
        return USABLE // self.item

    @property
    def capacity_inner(self):
        """Keys on a full leaf that has a high key (every leaf but the rightmost): 406, 290."""
        return USABLE // self.item - 1

    def split_left(self, n, rightmost):
        """How many of n keys (the full page's and the new one) stay on the left page: the split
        point where fillfactor * left free space best balances (1 - fillfactor) * right free
        space, fillfactor being the leaf fillfactor on a rightmost page and 0.5 elsewhere. The
        left page gains a high key; the right page has one unless it is the new rightmost."""
        f = self.fillfactor / 100 if rightmost else 0.5
        right_hk = 0 if rightmost else 1
        best, best_delta = 1, None
        for left in range(1, n):
            # the new high key is estimated with a heap TID it will not keep (_bt_recsplitloc)
            left_free = USABLE - (left + 1) * self.item - HEAP_TID
            right_free = USABLE - (n - left + right_hk) * self.item
            if left_free < 0 or right_free < 0:
                continue
            delta = abs(f * left_free - (1 - f) * right_free)
            if best_delta is None or delta < best_delta:
                best, best_delta = left, delta
        return best

    @property
    def right_after_rightmost_split(self):
        """Keys on the new rightmost page after a rightmost split: 42 int8 keys, 31 UUIDs at 90."""
        return self.capacity + 1 - self.split_left(self.capacity + 1, rightmost=True)

    @property
    def room_after_rightmost_split(self):
        """Late keys the left page of a rightmost split can still take before it splits again:
        40 int8 keys and 29 UUIDs at fillfactor 90, 81 and 58 at 80, 122 and 87 at 70."""
        return self.capacity_inner - self.split_left(self.capacity + 1, rightmost=True)


@dataclass
class _Split:
    """A rightmost split's left key range: the late keys that landed in it afterwards."""
    late: int = 0
    broken: bool = False  # it split again (50:50): more late keys came than it had room for


@dataclass
class _Page:
    keys: list
    block: int
    split: _Split | None = None  # the rightmost split whose left range this page is (part of)


@dataclass
class Replay:
    leaf_pages: int
    density: float  # % as pgstatindex's avg_leaf_density
    fragmentation: float  # % as pgstatindex's leaf_fragmentation
    rightmost_splits: int
    other_splits: int  # 50:50
    late_keys: list = field(default_factory=list)  # per rightmost split: keys that landed left of it after
    broken: int = 0  # rightmost splits whose left range later split 50:50: more late keys than room


def replay(order, leaf):
    """Insert the keys of `order` (distinct ranks, in arrival order) into a B-tree's leaf level.
    Returns what pgstatindex would report of it, and the split counts."""
    pages = [_Page([], 1)]
    bounds = [float("-inf")]  # bounds[i]: the lowest key pages[i] may hold
    next_block = 2
    rightmost_splits = other = 0
    splits = []
    for k in order:
        i = bisect.bisect_right(bounds, k) - 1
        p = pages[i]
        bisect.insort(p.keys, k)
        if p.split:
            p.split.late += 1
        last = i == len(pages) - 1
        if len(p.keys) <= (leaf.capacity if last else leaf.capacity_inner):
            continue
        n_left = leaf.split_left(len(p.keys), rightmost=last)
        right = _Page(p.keys[n_left:], next_block)
        next_block += 1
        p.keys = p.keys[:n_left]
        if last:
            rightmost_splits += 1
            p.split = _Split()
            splits.append(p.split)
        else:
            other += 1
            right.split = p.split  # both halves are still that split's left range
            if p.split:
                p.split.broken = True
        pages.insert(i + 1, right)
        bounds.insert(i + 1, right.keys[0])
    used = sum((len(p.keys) + (0 if j == len(pages) - 1 else 1)) * leaf.item for j, p in enumerate(pages))
    fragments = sum(1 for a, b in zip(pages, pages[1:], strict=False) if b.block < a.block)
    return Replay(leaf_pages=len(pages), density=100 * used / (len(pages) * USABLE),
                  fragmentation=100 * fragments / len(pages), rightmost_splits=rightmost_splits,
                  other_splits=other, late_keys=[s.late for s in splits], broken=sum(s.broken for s in splits))


def arrival_order(arrivals_by_key):
    """Given each row's arrival number listed in key order, the key ranks in arrival order."""
    return sorted(range(len(arrivals_by_key)), key=arrivals_by_key.__getitem__)


def inversions(order):
    """For each row in arrival order: how many larger keys were inserted before it (0 for a key
    that arrived in order). `order` is the key ranks in arrival order; a Fenwick tree, n log n."""
    n = len(order)
    tree = [0] * (n + 1)
    out = []
    for seen, k in enumerate(order):
        # keys <= k seen so far
        i, smaller = k + 1, 0
        while i > 0:
            smaller += tree[i]
            i -= i & -i
        out.append(seen - smaller)
        i = k + 1
        while i <= n:
            tree[i] += 1
            i += i & -i
    return out


def lateness(order, times):
    """For each row in arrival order (times[j]: when the j-th row arrived): how long after the
    first larger key it arrived, in the times' unit (0 for a row that arrived in order)."""
    n = len(order)
    first_at = [None] * n  # first_at[k]: when key k arrived
    for j, k in enumerate(order):
        first_at[k] = times[j]
    # earliest arrival among keys larger than k, from the largest key down
    out_by_key = [0.0] * n
    earliest = float("inf")
    for k in range(n - 1, -1, -1):
        out_by_key[k] = max(0.0, first_at[k] - earliest)
        earliest = min(earliest, first_at[k])
    return [out_by_key[k] for k in order]


def percentile(values, q):
    """The q-th percentile (0-100) by nearest rank; 0 for no values."""
    if not values:
        return 0
    s = sorted(values)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


def expected_late_keys(writers, right_keys):
    """How many late keys a rightmost split should expect when each of `writers` writers holds its
    key an exponentially distributed time (of any mean) before inserting it, and the split left
    `right_keys` keys on the new rightmost page.

    A writer's key in flight at the split has an age that is exponential with the mean wait m
    (memoryless). The boundary is the smallest of the right_keys largest keys inserted, made at
    about x before the split, where the keys made since and already inserted number right_keys:
    writers * (x/m - 1 + exp(-x/m)) = right_keys. The late keys are the keys in flight older than
    that: writers * exp(-x/m). The mean wait cancels: only the number of writers and the page
    geometry decide, once the wait dominates the time between making a key and inserting it."""
    target = right_keys / writers
    lo, hi = 0.0, 50.0
    for _ in range(100):  # u - 1 + exp(-u) rises from 0 with u
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mid - 1 + math.exp(-mid) < target else (lo, mid)
    return writers * math.exp(-lo)


def writers_at_which_splits_break(leaf):
    """The fewest writers for which expected_late_keys() exceeds the room after a rightmost split:
    where, with waits that dominate, the typical split starts to break (about 111 writers for
    int8 keys and 81 for UUIDs at fillfactor 90)."""
    n = 1
    while expected_late_keys(n, leaf.right_after_rightmost_split) <= leaf.room_after_rightmost_split:
        n += 1
    return n
