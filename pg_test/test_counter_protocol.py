"""The registry's counters of short codes (sql/registry/idgen_registry.sql, "Counters of short
codes": take_block(), _counters_reanchor(), _counters_jump(), and _term() and _begin_term(), which
call them), as a model run under many seeded schedules: no block index is ever granted twice,
through racing takes, re-anchors that roll back or are passed over, registry clocks apart by up
to the allowed skew, and any number of restarts, failovers and restores from older copies or
dumps; and a restart that lost nothing skips no more blocks than the time since the line's
anchor allows. No server.

Model, in whole milliseconds of real time (one step each), of one counter: its row (the anchor:
block index anchor_block at anchor_ms, transactional) and its sequence (the next index,
non-transactional: nextval and setval are atomic and no rollback undoes them). Its line is
L(t) = anchor_block + floor((t - anchor_ms) / BLOCK_MS); BURST = ceil(BURST_MS / BLOCK_MS),
K = BURST + 16. Each call to the registry is a process whose steps are the SQL's statements, one
atomic step each, and a seeded scheduler interleaves the steps of many processes (often in
lockstep, so that dozens of takes race): each reads the row as its statement's snapshot has it
(the latest committed version, or its own transaction's), so a row read early may be replaced by
the time a later statement runs. A transaction holds the row from its first update (or FOR UPDATE)
to its end; it may stay open for a while and roll back (a member's take, kept open).

- take_block() at its registry time now (read once, at its start): _term() (which may begin a
  new term, and re-anchors), the row, the next index n; refused if n >= L(now) + BURST; else
  idx = nextval, refused (and skipped for good) if idx >= L(now) + BURST + 16, else granted (the
  grant counts at once: a rollback after it does not take the block back); then a re-anchor.
- a re-anchor (every _term(): claims, renewals, releases; and each grant): when now - anchor_ms
  >= max(BURST_MS, REANCHOR_MS) and the row is not held by another open transaction (SKIP
  LOCKED): anchor := (min(n, L(now)), now).
- a new term (the first _term() after a start, which holds id_space until its transaction ends,
  so that every other call waits for it; or the owner's hold_off(), which waits for nothing):
  _counters_jump(now + SKEW): the loop reads the row, then n; to = L(now + SKEW) + K; if to > n:
  setval(to), then the row FOR UPDATE SKIP LOCKED and, if got, anchor := (L(now + SKEW),
  now + SKEW).

The registry's commits (each change of the row or the sequence) go to a log; the registry is
restarted (its state kept), fails over to a standby that applied a prefix of the log, or is
restored from an older copy (a prefix) or a dump (the row from one moment, the sequence read
non-transactionally later): always an earlier state of the history the registry has now,
possibly from before earlier terms (nested terms lost). Every start is a new term, on a host
whose clock is within SKEW of the others'. Its open transactions end there (rolled back); the
blocks they were granted stay granted.

Two pieces of the protocol as written are found unsafe here (REAL_FLAWS, each with a staged
history below): a take checks its index against the row as it read it before its nextval, so a
re-anchor that committed in between (made while other takes drew indexes under the old line)
leaves a granted index above every line the state that has that re-anchor records; and
hold_off()'s jump, which no take waits for, sets the sequence from the next index it read a
statement earlier (lowering it past indexes taken meanwhile) and the anchor from a row it read
before it locked it. The variant with both mended (take_rechecks_row, jump_atomic) holds under
every schedule tried, and each planted flaw is caught against it.
"""

import random

import pytest

BLOCK_MS = 2  # the pace: a block every 2 ms on average
BURST_MS = 5
BURST = -(-BURST_MS // BLOCK_MS)  # 3 blocks
RACE = 16  # the SQL's 16 blocks for takes that raced past the first check
K = BURST + RACE
REANCHOR_MS = max(BURST_MS, 16)  # the SQL's GREATEST(burst_ms, 1000): its 1000 ms scaled as the skew is
SKEW = 16  # the registry's max_clock_skew_ms (1000 ms by default): 8 blocks, 16 steps of a take
STEPS = 220
SCHEDULES = 2500

REAL_FLAWS = ("a take checks its index against the row it read before its nextval (a re-anchor may have "
              "committed in between), and hold_off()'s jump sets the sequence from a next index and the anchor "
              "from a row it read a statement earlier: reported, the SQL unchanged")


class Variant:
    """The protocol as the SQL has it, one piece of it planted off, or the real flaws mended."""

    def __init__(self, jumps=True, jump_ahead_by_skew=True, reanchor_below_line=True, jump_from_line=True,
                 second_check=True, take_rechecks_row=False, jump_atomic=False):
        self.jumps = jumps  # a new term jumps the sequence past what a lost history may have granted
        self.jump_ahead_by_skew = jump_ahead_by_skew  # to the line at now + the skew, not at now
        self.reanchor_below_line = reanchor_below_line  # a re-anchor's block is min(n, L(now)), never above the line
        self.jump_from_line = jump_from_line  # to = L + K, anchored on L; planted off: max(n, L) + K, anchored on n
        self.second_check = second_check  # an index past L(now) + BURST + 16 after the nextval is refused
        # Mends, off as written: a take checks its index against the row as read after its nextval too
        self.take_rechecks_row = take_rechecks_row
        # and a jump reads the row under its lock and the next index and sets the sequence in one
        # step that no nextval interleaves with (never lowering it)
        self.jump_atomic = jump_atomic


MENDED = {"take_rechecks_row": True, "jump_atomic": True}


def line(row, t):
    """The line of a row (anchor_block, anchor_ms) at t."""
    return row[0] + (t - row[1]) // BLOCK_MS


class Txn:
    __slots__ = ("name", "pending", "hold", "commits")

    def __init__(self, name, hold=0, commits=True):
        self.name = name
        self.pending = None  # its own version of the row, uncommitted
        self.hold = hold  # steps it stays open after its last statement
        self.commits = commits


class Registry:
    """One start of the registry: its counter's row and sequence, the row's lock and id_space's
    (held by the call that begins the start's term), its clock's offset from real time, and the
    log of its history (each change of the row or the sequence: (ms, row, next index))."""

    def __init__(self, row, seq, offset, log, world):
        self.row, self.seq, self.offset, self.log, self.world = row, seq, offset, log, world
        self.locked_by = None
        self.id_space = None
        self.begun = False  # this start's term begun (its term sequences set)
        self.procs = []  # its calls in flight, each with its pace (the chance it runs a statement a ms)

    def now(self):
        return self.world.ms + self.offset

    def note(self):
        self.log.append((self.world.ms, self.row, self.seq))

    def read_row(self, txn):
        return txn.pending if self.locked_by is txn and txn.pending is not None else self.row

    def nextval(self):
        idx = self.seq
        self.seq += 1
        self.note()
        return idx

    def setval(self, to):
        self.seq = to
        self.note()


class World:
    """Every block granted, whichever start of the registry granted it, and what the schedule met."""

    def __init__(self, v, rnd=None, counts=None):
        self.v, self.rnd, self.counts = v, rnd, counts
        self.ms = 0
        self.granted = {}
        self.top = -1  # the highest block granted
        self.dup = None
        self.jumps = []  # (blocks skipped, the row the jump read, its at)
        self.committed = []  # the entries of the log that commits of the row made
        self.lowered = []  # those that lowered its line

    def count(self, what):
        if self.counts is not None:
            self.counts[what] = self.counts.get(what, 0) + 1

    def grant(self, idx, who):
        if idx in self.granted and self.dup is None:
            self.dup = f"block {idx} granted at ms {self.granted[idx]} and again at ms {self.ms} ({who})"
        self.granted.setdefault(idx, self.ms)
        self.top = max(self.top, idx)

    def drawn(self, idx, who):
        """A nextval: the sequence must never come back to a block it granted (whether or not
        this take is granted it: a take a moment later would be)."""
        if idx in self.granted and self.dup is None:
            self.dup = f"block {idx}, granted at ms {self.granted[idx]}, drawn again at ms {self.ms} ({who})"

    def check(self, reg, after):
        """Once a term has begun (or a jump set the sequence), its next index lies above every
        block ever granted: else a nextval will come back to one."""
        if reg.seq <= self.top and self.dup is None:
            back = max(i for i in self.granted if i >= reg.seq)
            self.dup = (f"the sequence's next index {reg.seq} is at or below block {back}, granted at ms "
                        f"{self.granted[back]}, after {after} at ms {self.ms}")


def reanchor(w, reg, txn, now):
    """_counters_reanchor(now): one statement."""
    if reg.locked_by not in (None, txn):
        w.count("reanchor_passed_over")
        return
    k = reg.read_row(txn)
    if now - k[1] >= REANCHOR_MS:
        reg.locked_by = txn
        n = reg.seq
        txn.pending = (min(n, line(k, now)) if w.v.reanchor_below_line else n, now)
        w.count("reanchored_below_next" if txn.pending[0] < n else "reanchored")


def jump(w, reg, txn, now):
    """_counters_jump(now + skew), statement by statement."""
    v = w.v
    if not v.jumps:
        return
    at = now + SKEW if v.jump_ahead_by_skew else now
    k = reg.read_row(txn)  # the loop's row
    if not v.jump_atomic:
        yield "loop"
    n = reg.seq
    if not v.jump_atomic:
        yield "next"
    ln = line(k, at)
    to = ln + K if v.jump_from_line else max(n, ln) + K
    if to > n:
        w.jumps.append((to - n, k, at))
        reg.setval(to)
        w.check(reg, f"{txn.name}'s jump")
        if not v.jump_atomic:
            yield "setval"
        if reg.locked_by in (None, txn):
            reg.locked_by = txn
            txn.pending = (ln if v.jump_from_line else n, at)
        else:
            w.count("jump_anchor_passed_over")


def term(w, reg, txn, now):
    """_term(now): a start's first call begins its term, the others wait for it; then a re-anchor."""
    if not reg.begun:
        while reg.id_space not in (None, txn):
            yield "waits"
        if not reg.begun:
            reg.id_space = txn
            yield from jump(w, reg, txn, now)
            reg.begun = True
            w.check(reg, f"the term {txn.name} began")
    reanchor(w, reg, txn, now)
    yield "term"


def end(w, reg, txn):
    """The transaction's end, after it stayed open for a while: a commit or a rollback."""
    while txn.hold > 0:
        txn.hold -= 1
        yield "open"
    if reg.locked_by is txn:
        if txn.pending is not None:
            if txn.commits:
                if line(txn.pending, txn.pending[1]) < line(reg.row, txn.pending[1]):
                    w.lowered.append(len(reg.log))
                reg.row = txn.pending
                reg.note()
                w.committed.append(len(reg.log) - 1)
            else:
                w.count("rolled_back")
        reg.locked_by = None
    if reg.id_space is txn:
        reg.id_space = None


def take(w, reg, txn):
    """take_block()."""
    now = reg.now()
    yield from term(w, reg, txn, now)
    k = reg.read_row(txn)
    yield "row"
    allowed = line(k, now) + BURST
    n = reg.seq
    yield "n"
    if n < allowed:
        idx = reg.nextval()
        w.drawn(idx, f"{txn.name}, at ms {now} of its registry, on {k}")
        yield "nextval"
        if w.v.take_rechecks_row:
            k2 = reg.read_row(txn)
            allowed = min(allowed, line(k2, now) + BURST)
            yield "recheck"
        if k is not reg.read_row(txn):
            w.count("took_on_a_replaced_row")
        if idx < allowed + RACE or not w.v.second_check:
            w.grant(idx, f"{txn.name}, at ms {now} of its registry, on {k}")
            if idx >= allowed:
                w.count("granted_past_the_burst")
            if idx >= line(reg.row, now) + K:
                w.count("granted_above_the_committed_line")
            reanchor(w, reg, txn, now)
            yield "reanchor"
        else:
            w.count("refused_after_nextval")
    yield from end(w, reg, txn)


def claim(w, reg, txn):
    """A claim, renewal or release: _term() and its own writes, which the counter does not see."""
    yield from term(w, reg, txn, reg.now())
    yield from end(w, reg, txn)


def hold_off(w, reg, txn):
    """The owner's hold_off(): _begin_term() without id_space (nothing waits for it)."""
    yield from jump(w, reg, txn, reg.now())
    reg.begun = True
    yield "term"
    yield from end(w, reg, txn)


def run_schedule(seed, v, counts=None):
    """One schedule; None, or the first block granted twice. counts, a dict, counts what it met."""
    rnd = random.Random(seed)
    w = World(v, rnd, counts)

    def offset():  # a host's clock, within the skew of the others', often at its ends
        return rnd.choice([0, SKEW, rnd.randint(0, SKEW)])

    log = [(0, (0, 0), 0)]
    reg = Registry((0, 0), 0, offset(), log, w)
    reg.begun = True
    rate = rnd.choice([0.3, 1.0, 2.0])  # takes a ms: below the pace (half a block a ms), and above it
    idle = set()  # no call at all
    for _ in range(rnd.randint(0, 3)):
        a = rnd.randint(0, STEPS)
        idle.update(range(a, a + rnd.randint(10, 60)))
    bursts = {rnd.randint(0, STEPS - 10): rnd.randint(5, 40) for _ in range(rnd.randint(0, 4))}
    # Often, soon after a commit of the row that lowered its line, a start from a state that has it.
    trigger = (rnd.randint(0, STEPS // 2), rnd.choice(["failover", "restore", "dump"]), rnd.randint(0, 4))
    scene, held = range(0), None
    if rnd.random() < 0.5:
        # The registry idle (the line grows away from the next index), then a re-anchor kept open,
        # and takes that draw indexes under the old line, some of them until after it commits.
        t = rnd.randint(80, 150)
        idle.update(range(t - rnd.randint(40, 70), t))
        held = Txn("held", rnd.randint(3, 25), True)
        bursts[max(t + 1, t + held.hold - rnd.randint(0, 4))] = rnd.randint(20, 40)
        trigger = (t,) + trigger[1:]
        scene = range(t - 80, t + 40)
    elif rnd.random() < 0.4:
        trigger = None
    # ms: how the registry starts again then, and from the log's entries at or after which ms
    starts = {}
    t = rnd.randint(10, 60)
    for _ in range(rnd.randint(1, 4)):  # restarts, failovers, restores: often soon after one another
        if t >= STEPS:
            break
        how = rnd.choice(["restart", "restart", "failover", "restore", "dump"])
        if t in scene:
            pass
        elif rnd.random() < 0.4:  # just after a burst (on a counter with room: idle a while), which it loses
            b = t - rnd.randint(3, 10)
            bursts[b] = rnd.randint(10, 40)
            idle.update(range(b - rnd.randint(0, 12), b))
            starts[t] = (how, b - 2)
        else:
            starts[t] = (how, t - (30 if how == "failover" else 100))
        t += rnd.choice([rnd.randint(1, 8), rnd.randint(10, 60)])
    holds = {rnd.randint(10, STEPS - 10) for _ in range(rnd.randint(0, 2))}
    step_p = rnd.choice([1.0, 0.6, rnd.uniform(0.2, 1.0)])
    down_until = -1
    names = 0
    since = 0  # the first entry of the log the next start may start from (ms "since" from above)
    terms = []  # the entry of the log where each start's history began

    def txn(prefix):
        nonlocal names
        names += 1
        if rnd.random() < 0.1:  # kept open for a while
            return Txn(f"{prefix}{names}", rnd.randint(1, 30), rnd.random() > 0.15)
        return Txn(f"{prefix}{names}", 0, rnd.random() > 0.15)

    for ms in range(STEPS):
        w.ms = ms
        if trigger and w.lowered and log[w.lowered[-1]][0] >= trigger[0]:
            starts[ms + trigger[2]] = (trigger[1], None)
            since = w.lowered[-1]
            trigger = None
        if ms in starts:
            how, after = starts[ms]
            near = after is None  # from the trigger: just after the commit
            if after is not None:
                since = next((e for e, entry in enumerate(log) if entry[0] >= after), len(log) - 1)
            if how == "restart":
                i = j = len(log) - 1
                off = reg.offset
            else:
                i = j = rnd.randint(min(since, len(log) - 1), len(log) - 1)
                commits = [e for e in w.committed if e >= since]
                if near:
                    i = j = min(since + rnd.randint(0, 3), len(log) - 1)
                elif commits and rnd.random() < 0.5:  # often just after a commit of the row
                    i = j = min(rnd.choice(commits) + rnd.randint(0, 3), len(log) - 1)
                if how == "dump":  # the sequence read later than the table's snapshot
                    j = rnd.randint(i, min(len(log) - 1, i + rnd.randint(0, 60)))
                    if log[j][2] != log[i][2]:
                        w.count("dump_read_the_sequence_later")
                off = rnd.choice([SKEW - reg.offset, offset()])  # often the other end of the skew
                lost = [e for e in terms if e > i]
                if lost:
                    w.count("lost_a_term")
                if len(lost) >= 2:
                    w.count("lost_nested_terms")
                if any(idx >= log[j][2] for idx in w.granted):
                    w.count("lost_a_granted_block")
            row, seq = log[i][1], log[j][2]
            del log[i + 1:]
            w.committed = [e for e in w.committed if e <= i]
            w.lowered = [e for e in w.lowered if e <= i]
            terms = [e for e in terms if e <= i] + [len(log)]
            reg = Registry(row, seq, off, log, w)
            reg.note()
            down_until = ms + rnd.choice([0, 1, rnd.randint(0, 20)])
        if ms < down_until:
            continue
        calls = []
        if ms in holds:
            tx = txn("h")
            calls.append((hold_off(w, reg, tx), tx))
        if held and ms == scene.start + 80:
            calls.append((claim(w, reg, held), held))
        n_new = bursts.get(ms, 0)
        if ms not in idle:
            n_new += int(rate) + (rnd.random() < rate - int(rate))
            if rnd.random() < 0.1:
                tx = txn("c")
                calls.append((claim(w, reg, tx), tx))
        for _ in range(n_new):
            tx = txn("t")
            calls.append((take(w, reg, tx), tx))
        # each call's pace: the schedule's, or now and then one stalled between its statements
        procs = reg.procs + [(proc, 0.02 if rnd.random() < (0.3 if tx.name[0] == "h" else 0.05) else step_p)
                             for proc, tx in calls]
        rnd.shuffle(procs)
        reg.procs = []
        for p in procs:
            if p[1] == 1.0 or rnd.random() < p[1]:
                try:
                    next(p[0])
                except StopIteration:
                    continue
            reg.procs.append(p)
        if w.dup:
            return f"seed {seed}: {w.dup}"
    return None


def first_violation(v, schedules=SCHEDULES, passing=()):
    """The first schedule that grants a block twice under v, of those not in passing's complement:
    where passing is given, only the schedules the baseline passes count (the flaw, not the
    baseline, is caught)."""
    for seed in range(schedules):
        if passing and seed not in passing:
            continue
        found = run_schedule(seed, v)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def schedules():
    """Every schedule, as written and mended, run once for the tests below: the violations of each,
    and what the mended one's schedules met."""
    counts = {}
    written, mended = {}, {}
    for seed in range(SCHEDULES):
        written[seed] = run_schedule(seed, Variant())
        mended[seed] = run_schedule(seed, Variant(**MENDED), counts)
    return written, mended, counts
