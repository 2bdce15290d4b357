"""The portable snowflake_next()'s concurrency protocol (sql/portable/idgen_portable.sql), as a
model run under many random interleavings: no value of the state is used twice, and a call that
returned before another began used the smaller one. No server.

A race between a lock-free nextval() and a jump's setval() lasts microseconds, too short for a
stress test on real servers to meet it reliably (the SQL's stress test,
test_portable.py::test_many_writers_clock_steps_and_a_burst_past_the_cap_never_repeat_an_id,
passed with the seqlock's second read taken out). Here each sequence operation, each read of
the clock and the lock are one atomic step, as the sequences' page locks and the table lock make
them, and a seeded scheduler interleaves the steps of three callers and a clock that moves on:
the protocol as written must hold under every schedule tried, and each planted variant below
must be caught.

Model of one call (the SQL's names): the fast path reads the seqlock g, draws c = nextval(state),
reads the clock, reads g again, and uses c if both reads are equal and even and c's tick is the
clock's or the next; a c one tick behind is kept as `stale`. Otherwise the locked path: the lock
(NOWAIT when it holds a stale value, which it then uses if another call holds the lock), g made
even if it was left odd, a peek at the state, and when the state is behind the clock the jump:
g odd, nextval, setval(state, the clock's tick) if still behind, g even.
"""

import random

import pytest

BITS = 2  # the sequence's bits in the model: 4 ids per tick, so that ticks fill up quickly


class World:
    def __init__(self, state, clock):
        self.state = state  # the state sequence's last value
        self.seqlock = 0
        self.clock = clock  # the clock's tick
        self.lock = None


class Variant:
    """The protocol as the SQL has it, or with one piece changed."""

    def __init__(self, odd_before_nextval=True, second_read=True):
        self.odd_before_nextval = odd_before_nextval
        self.second_read = second_read


def call(w, me, v, out):
    """One snowflake_next() as a generator: it yields before each atomic step; its value goes to
    out[0]."""
    yield
    g = w.seqlock
    c = stale = None
    if g % 2 == 0:
        yield
        w.state += 1
        c = w.state
        yield
        now_t = w.clock
        t = c >> BITS
        g2 = g
        if v.second_read:
            yield
            g2 = w.seqlock
        if g2 != g or t > now_t + 1:
            c = None
        elif t < now_t:
            if t >= now_t - 1:
                stale = c
            c = None
    if c is None:
        if stale is not None:
            yield
            if w.lock is not None:
                out[0] = stale  # another call is jumping: the value drawn before
                return
            w.lock = me
        else:
            while True:
                yield
                if w.lock is None:
                    w.lock = me
                    break
        yield
        g = w.seqlock
        yield
        now_t = w.clock
        if g % 2:
            yield
            g += 1
            w.seqlock = g
        if v.odd_before_nextval:
            yield
            peek = w.state
            if (peek >> BITS) < now_t:
                yield
                w.seqlock = g + 1
                yield
                w.state += 1
                c = w.state
                if (c >> BITS) < now_t:
                    c = now_t << BITS
                    yield
                    w.state = c
                yield
                w.seqlock = g + 2
            else:
                yield
                w.state += 1
                c = w.state
        else:  # the seqlock odd only after the jumper's own nextval
            yield
            w.state += 1
            c = w.state
            if (c >> BITS) < now_t:
                yield
                w.seqlock = g + 1
                c = now_t << BITS
                yield
                w.state = c
                yield
                w.seqlock = g + 2
        yield
        w.lock = None
    out[0] = c


def run_schedule(seed, v, callers=5, calls=3, ticks=2):
    """One random interleaving; returns the violations it saw (empty when the protocol held)."""
    rnd = random.Random(seed)
    w = World(state=(5 << BITS) - 2 + rnd.randrange(3), clock=4 + rnd.randrange(2))
    done = []  # (value, start step, end step)
    step = 0
    procs = {}

    def start(p):
        out = [None]
        procs[p] = [call(w, p, v, out), out, step, calls]
        next(procs[p][0])

    for p in range(callers):
        start(p)
        procs[p][3] -= 1
    clock_moves = ticks
    while procs:
        choices = list(procs) + (["clock"] if clock_moves else [])
        p = rnd.choice(choices)
        step += 1
        if p == "clock":
            w.clock += 1
            clock_moves -= 1
            continue
        gen, out, began, left = procs[p]
        try:
            next(gen)
        except StopIteration:
            done.append((out[0], began, step))
            del procs[p]
            if left:
                start(p)
                procs[p][3] = left - 1
    values = [d[0] for d in done]
    problems = []
    if len(set(values)) != len(values):
        problems.append(f"a value used twice: {sorted(values)}")
    for a in done:
        for b in done:
            if a[2] < b[1] and not a[0] < b[0]:
                problems.append(f"{a[0]} returned before {b[0]} began, yet is not smaller")
    return problems


SCHEDULES = 4000


def first_violation(v, schedules=SCHEDULES, kind=""):
    """(seed, problems) of the first schedule with a problem that starts with kind, or None."""
    for seed in range(schedules):
        problems = [p for p in run_schedule(seed, v) if p.startswith(kind)]
        if problems:
            return seed, problems
    return None


def test_the_protocol_as_written_uses_no_value_twice_and_keeps_real_time_order_under_every_schedule_tried():
    assert first_violation(Variant()) is None


@pytest.mark.parametrize("variant", [
    pytest.param(Variant(odd_before_nextval=False), id="seqlock-odd-after-the-jumpers-nextval"),
    pytest.param(Variant(second_read=False), id="seqlock-second-read-removed"),
])
def test_each_planted_flaw_of_the_protocol_is_caught(variant):
    found = first_violation(variant, kind="a value used twice")
    assert found is not None, "the model found no value used twice with the planted flaw"
