"""The registry's counters of short codes (sql/registry/idgen_registry.sql, "Counters of short
codes": take_block(), _counters_reanchor(), _counters_jump(), and _term() and _begin_term(), which
call them), as a model run under many seeded schedules: no block index is granted twice, through
racing takes, re-anchors rolled back or passed over, registry clocks apart by up to the allowed
skew, and restarts, failovers and restores from older copies or dumps, any number and nested; and
a restart that lost nothing skips no more blocks than the time since the line's anchor allows, a
run of them no more than one would. No server.

Model, in whole milliseconds of real time, of one counter: its row (the anchor: block index
anchor_block at anchor_ms; transactional) and its sequence (the next index; nextval and setval are
atomic and no rollback undoes them). Its line is L(t) = anchor_block + floor((t - anchor_ms) /
BLOCK_MS); BURST = ceil(BURST_MS / BLOCK_MS) and K = BURST + 16 (the defaults' 10 ms a block, 1 s
of burst, 1 s of skew and 1 s between re-anchors scaled down, the 16 kept). Each call to the
registry is a process whose steps are the SQL's statements, one atomic step each (a statement reads
the row as its own snapshot has it, at READ COMMITTED: the latest committed version, or its own
transaction's), and a seeded scheduler interleaves the calls, each running a statement (or a few)
in a millisecond or not: often in lockstep, so that dozens of takes race, and now and then one
stalled between its statements. A transaction holds the row from its first update (or FOR UPDATE)
to its end; a member's may stay open for a while, and roll back.

- take_block(counter, blocks) at its registry time now (read once, at its start): _term() (which
  may begin a new term, and re-anchors; it reads the term's word); the row; then for each block
  asked (1 to 64): the next index n, stop if n >= L(now) + BURST; idx = nextval, stop (idx
  skipped for good) if idx >= L(now) + BURST + 16 or another take's index came between two of its
  own; then, where the term's word is no longer the one it read, nothing granted; else a
  re-anchor, and the blocks drawn are granted as it returns (a rollback does not take them back).
- a re-anchor (in every _term(), so in every claim, renewal and release, and after each grant):
  when now - anchor_ms >= max(BURST_MS, REANCHOR_MS) and the row is not held by another open
  transaction (SKIP LOCKED), anchor := (min(n, L(now)), now).
- a new term, _begin_term(now): by the first _term() after a start, which holds id_space to its
  transaction's end while every other call waits for it, or by the owner's hold_off(), which
  nothing waits for. The term's word; then _counters_jump(now + SKEW): the row FOR UPDATE SKIP
  LOCKED (else as last committed); n; to = L(now + SKEW) + K; if to > n, setval(to) and, if it got
  the row, anchor := (L(now + SKEW), now + SKEW); then the start's incarnation and time, after
  which no call sees a term to begin.

Each change of the row or the sequence goes to a log. The registry restarts (its state kept), fails
over to a standby that applied a prefix of the log, or is restored from an older copy (a prefix) or
a dump (the row from one moment, the sequence read later): always from an earlier state of the
history it has now (not from a copy of a history a failover abandoned), possibly from before
earlier terms. Each start is a new term, on a host whose clock is within SKEW of the others' (a
promoted standby's often at the other end); the registry it replaces answers no more (as the
lease protocol has it), and its calls in flight end there, their transactions rolled back. The
property checked is the one that makes "no block twice" hold whatever the takes do next: the
sequence never comes back to a block granted before (no nextval draws one, and once a term has
begun or a jump has set it, its next index lies above every block ever granted).

The model found two flaws in the SQL as first written, each now mended there, and each kept here
as a staged history that grants a block twice with its mend taken out: a take checked its indexes
against the row as it read it before its nextvals, so that a re-anchor that committed in between
(the line lowered to the next index it read, while takes drew indexes under the old line) left
granted indexes above every line of a state that has the re-anchor (mended: the take reads the row
again after its nextvals and grants no index at or past that row's L(now) + BURST + 16); and a take
that began after hold_off() set the term's word, but before its jump set the sequence, drew from a
next index the jump could then go below (mended: a take draws nothing while a jump is under way, the
term's word set and the jump not done, which the sequence counters_term records). The SQL's answers
to the jump no take waits for (the word first, the row under the jump's lock, the take's check of
the word at its end) are each shown needed too, and each planted flaw is caught.
"""

import random

import pytest

BLOCK_MS = 2  # the pace: a block every 2 ms on average
BURST_MS = 5
BURST = -(-BURST_MS // BLOCK_MS)  # 3 blocks
RACE = 16  # the SQL's 16 blocks for takes that raced past the first check
K = BURST + RACE
SKEW = 16  # the registry's max_clock_skew_ms: 8 blocks, and several takes' time (4 steps or more each)
REANCHOR_MS = max(BURST_MS, 16)  # the SQL's GREATEST(burst_ms, 1000), its 1000 ms scaled as the skew is
STEPS = 220
SCHEDULES = 2000



class Variant:
    """The protocol as the SQL has it, with one piece of it planted off, or with its flaws mended."""

    def __init__(self, jumps=True, jump_ahead_by_skew=True, reanchor_below_line=True, jump_from_line=True,
                 second_check=True, term_first=True, jump_locks_first=True, take_checks_term=True,
                 take_rechecks_row=True, take_waits_for_jump=True):
        self.jumps = jumps  # a new term jumps the sequence past all a lost history may have granted
        self.jump_ahead_by_skew = jump_ahead_by_skew  # to the line at now + the skew, not at now
        self.reanchor_below_line = reanchor_below_line  # a re-anchor's block is min(n, L(now)), not n
        # to = L + K, anchored on L; planted off: to = max(n, L) + K, anchored on n
        self.jump_from_line = jump_from_line
        self.second_check = second_check  # an index past L(now) + BURST + 16 after the nextval is refused
        # The SQL's answers to a jump that no take waits for (the owner's hold_off()): the term's
        # word set before the jump; the row read under the jump's lock; a take that grants nothing
        # where the term's word is no longer the one it began under.
        self.term_first = term_first
        self.jump_locks_first = jump_locks_first
        self.take_checks_term = take_checks_term
        # The mends of the two flaws the model found: a take reads the row again after its nextvals
        # and grants no index at or past that row's L(now) + BURST + 16; a take draws nothing while
        # a jump is under way (the term's word set, its jump not yet done: counters_term).
        self.take_rechecks_row = take_rechecks_row
        self.take_waits_for_jump = take_waits_for_jump


MENDED = {}  # the SQL as it is: both mends in


def line(row, t):
    """The line of a row (anchor_block, anchor_ms) at t."""
    return row[0] + (t - row[1]) // BLOCK_MS


class Txn:
    __slots__ = ("name", "pending", "hold", "commits")

    def __init__(self, name, hold=0, commits=True):
        self.name = name
        self.pending = None  # its own version of the row, uncommitted
        self.hold = hold  # statements' worth of steps it stays open after its last one
        self.commits = commits


class Registry:
    """One start of the registry: its counter's row and sequence, the row's lock and id_space's (held
    by the call that begins the start's term), its clock's offset from real time, its calls in
    flight, and the log of its history: (ms, row, next index) after each change."""

    def __init__(self, row, seq, offset, log, world):
        self.row, self.seq, self.offset, self.log, self.world = row, seq, offset, log, world
        self.locked_by = None
        self.id_space = None
        self.begun = False  # this start's term begun (its term sequences set)
        self.word = None  # the term's word (the registry ms it began at)
        self.jumped = None  # the word of the term whose jump is done
        self.procs = []  # (a call, the chance it runs in a ms, how many statements then)

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
    """Every block granted, whichever start of the registry granted it; the first violation; the
    jumps; and what the schedule met."""

    def __init__(self, v, counts=None):
        self.v, self.counts = v, counts
        self.ms = 0
        self.granted = {}  # block: the ms it was granted at
        self.top = -1  # the highest block granted
        self.dup = None
        self.jumps = []  # (blocks skipped, its at)
        self.committed = []  # the entries of the log that commits of the row made
        self.lowered = []  # those that lowered its line

    def count(self, what):
        if self.counts is not None:
            self.counts[what] = self.counts.get(what, 0) + 1

    def grant(self, idx):
        if idx in self.granted and self.dup is None:
            self.dup = f"block {idx} granted at ms {self.granted[idx]} and again at ms {self.ms}"
        self.granted.setdefault(idx, self.ms)
        self.top = max(self.top, idx)

    def drawn(self, idx, who):
        """A nextval: it never comes back to a block granted before (granted to this take or not: a
        take a moment later would be)."""
        if idx in self.granted and self.dup is None:
            self.dup = f"block {idx}, granted at ms {self.granted[idx]}, drawn again at ms {self.ms} by {who}"

    def check(self, reg, after):
        """Once a term has begun, or a jump set the sequence, its next index lies above every block
        ever granted: else a nextval comes back to one."""
        if reg.seq <= self.top and self.dup is None:
            back = min(i for i in self.granted if i >= reg.seq)
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
        w.count("reanchored_below_the_next_index" if txn.pending[0] < n else "reanchored")


def jump(w, reg, txn, now):
    """_counters_jump(now + skew), statement by statement."""
    v = w.v
    if not v.jumps:
        return
    at = now + SKEW if v.jump_ahead_by_skew else now
    locked = None
    if v.jump_locks_first:  # the loop's name; the row FOR UPDATE SKIP LOCKED, else as committed
        yield "loop"
        locked = reg.locked_by in (None, txn)
        if locked:
            reg.locked_by = txn
        k = reg.read_row(txn)
        yield "row"
    else:  # the loop's row
        k = reg.read_row(txn)
        yield "loop"
    n = reg.seq
    yield "next"
    ln = line(k, at)
    to = ln + K if v.jump_from_line else max(n, ln) + K
    if to > n:
        w.jumps.append((to - n, at))
        reg.setval(to)
        w.check(reg, f"{txn.name}'s jump")
        yield "setval"
        if locked is None:  # the row FOR UPDATE SKIP LOCKED
            locked = reg.locked_by in (None, txn)
            if locked:
                reg.locked_by = txn
        if locked:
            txn.pending = (ln if v.jump_from_line else n, at)
        else:
            w.count("jump_passed_over_the_row")


def begin_term(w, reg, txn, now):
    """_begin_term(now): the term's word (the ms it began) and the counters' jump, in the order the
    SQL has them, then the start's incarnation and time, after which no call sees a new term to
    begin (a start's first check sees one until then, and waits for id_space)."""
    yield "known"  # the registry's whereabouts, its bounds, its latest claim
    if w.v.term_first:
        reg.word = now
        yield "term set"
    yield from jump(w, reg, txn, now)
    reg.word, reg.begun, reg.jumped = now, True, now
    w.check(reg, f"the term {txn.name} began")


def term(w, reg, txn, now):
    """_term(now): a start's first call begins its term, the others wait for it; then a re-anchor.
    Returns the term's word as read."""
    if not reg.begun:
        while reg.id_space not in (None, txn):
            yield "waits"
        if not reg.begun:
            reg.id_space = txn
            yield from begin_term(w, reg, txn, now)
    word = reg.word
    reanchor(w, reg, txn, now)
    yield "term"
    return word


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


def take(w, reg, txn, blocks=1):
    """take_block(counter, blocks): up to that many consecutive blocks, granted as it returns."""
    now = reg.now()
    word = yield from term(w, reg, txn, now)
    if w.v.take_waits_for_jump and reg.jumped != word:  # (mended) a jump under way: nothing drawn
        w.count("refused_for_a_jump_under_way")
        yield "jumped"
        yield from end(w, reg, txn)
        return
    k = reg.read_row(txn)
    yield "row"
    allowed = line(k, now) + BURST
    first = last = None
    for _ in range(blocks):
        n = reg.seq
        yield "n"
        if n >= allowed:
            break
        idx = reg.nextval()
        w.drawn(idx, f"{txn.name}, at ms {now} of its registry, on row {k}")
        yield "nextval"
        if reg.read_row(txn) is not k:
            w.count("drew_an_index_on_a_replaced_row")
        if idx >= allowed + RACE and w.v.second_check:
            w.count("refused_after_the_nextval")
            break
        if last is not None and idx != last + 1:
            w.count("stopped_by_another_takes_index")
            break
        first = idx if first is None else first
        last = idx
    if first is not None and w.v.take_rechecks_row and w.v.second_check:
        # (mended) the second check against the row read again after the nextvals too
        again = line(reg.read_row(txn), now) + BURST + RACE
        if last >= again:
            w.count("cut_on_the_row_read_again")
            last = again - 1 if again > first else None
        yield "recheck"
    if first is not None and last is not None and w.v.take_checks_term:
        if reg.word != word:  # a term begun since its own: nothing granted
            w.count("refused_for_a_new_term")
            first = None
        yield "term check"
    if first is not None and last is not None:
        if last >= allowed:
            w.count("granted_past_the_burst")
        reanchor(w, reg, txn, now)
        for idx in range(first, last + 1):
            w.grant(idx)
        yield "granted"
    yield from end(w, reg, txn)


def claim(w, reg, txn):
    """A claim, renewal or release: _term() and its own writes, which the counter does not see."""
    yield from term(w, reg, txn, reg.now())
    yield from end(w, reg, txn)


def hold_off(w, reg, txn):
    """The owner's hold_off(): _begin_term() without id_space (nothing waits for it)."""
    yield from begin_term(w, reg, txn, reg.now())
    yield "term"
    yield from end(w, reg, txn)


def run_calls(reg, calls, rnd, pace):
    """One millisecond: the calls in flight and the new ones each run their statements for it (one,
    or a few) or not, in a random order."""
    procs = reg.procs + [(proc,) + pace(tx, blocks) for proc, tx, blocks in calls]
    rnd.shuffle(procs)
    reg.procs = []
    for p in procs:
        if p[1] == 1.0 or rnd.random() < p[1]:
            try:
                for _ in range(p[2]):
                    next(p[0])
            except StopIteration:
                continue
        reg.procs.append(p)


class Calls:
    """The fleet's calls of one schedule: each a transaction, a tenth of them kept open for a while
    and some rolled back; each with its pace: the schedule's, or now and then stalled (the owner's
    hold_off() often)."""

    def __init__(self, rnd, step_p):
        self.rnd, self.step_p, self.names = rnd, step_p, 0

    def txn(self, prefix):
        self.names += 1
        hold = self.rnd.randint(1, 30) if self.rnd.random() < 0.1 else 0
        return Txn(f"{prefix}{self.names}", hold, self.rnd.random() > 0.15)

    def blocks(self):
        """How many blocks a take asks for (the SQL allows up to 64)."""
        return self.rnd.choice([1, 1, 1, 1, 2, 8, 64])

    def pace(self, tx, blocks):
        """The chance it runs in a ms, and how many statements then (a take of many blocks often
        runs its loop faster than the others' statements)."""
        if tx.name[0] == "b":  # a claim that comes to begin a term, at full speed
            return 1.0, 8
        if self.rnd.random() < (0.3 if tx.name[0] == "h" else 0.05):
            return 0.02, 1
        return self.step_p, 8 if blocks > 2 and self.rnd.random() < 0.5 else 1


def offset(rnd):
    """A host's clock, within the skew of the others', often at its ends."""
    return rnd.choice([0, SKEW, rnd.randint(0, SKEW)])


def run_schedule(seed, v, counts=None):
    """One schedule; None, or the first violation. counts, a dict, counts what it met."""
    rnd = random.Random(seed)
    w = World(v, counts)
    log = [(0, (0, 0), 0)]
    reg = Registry((0, 0), 0, offset(rnd), log, w)
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
        # and takes that draw indexes under the old line meanwhile, some of them until after it
        # commits.
        t = rnd.randint(80, 150)
        idle.update(range(t - rnd.randint(40, 70), t))
        held = Txn("held", rnd.randint(3, 25), True)
        bursts[max(t + 1, t + held.hold - rnd.randint(0, 4))] = rnd.randint(20, 40)
        trigger = (t,) + trigger[1:]
        scene = range(t - 80, t + 40)
    elif rnd.random() < 0.4:
        trigger = None
    starts = {}  # ms: how the registry starts again then, and from entries of the log after which ms
    t = rnd.randint(10, 60)
    for _ in range(rnd.randint(1, 4)):  # restarts, failovers, restores: often soon after one another
        if t >= STEPS:
            break
        how = rnd.choice(["restart", "restart", "failover", "restore", "dump"])
        if t in scene:
            pass
        elif rnd.random() < 0.4:  # just after a burst (on a counter with room: idle a while), which it loses
            b = t - rnd.randint(4, 12)
            bursts[b] = rnd.randint(10, 40)
            idle.update(range(b - rnd.randint(0, 12), b))
            starts[t] = (how, b - 2)
        else:
            starts[t] = (how, t - (30 if how == "failover" else 100))
        t += rnd.choice([rnd.randint(1, 8), rnd.randint(10, 60)])
    holds = {rnd.randint(10, STEPS - 10) for _ in range(rnd.randint(0, 2))}
    calls = Calls(rnd, rnd.choice([1.0, 0.6, rnd.uniform(0.2, 1.0)]))
    down_until = -1
    since = 0  # the first entry of the log the next start may start from
    terms = []  # the entry of the log where each start's history began

    for ms in range(STEPS):
        w.ms = ms
        if trigger and w.lowered and log[w.lowered[-1]][0] >= trigger[0]:
            starts[ms + trigger[2]] = (trigger[1], None)
            since = w.lowered[-1]
            trigger = None
        if ms in starts:
            how, after = starts[ms]
            if after is not None:
                since = next((e for e, entry in enumerate(log) if entry[0] >= after), len(log) - 1)
            if how == "restart":
                i = j = len(log) - 1
                off = reg.offset
            else:
                commits = [e for e in w.committed if e >= since]
                if after is None:  # from the trigger: just after the commit
                    i = min(since + rnd.randint(0, 3), len(log) - 1)
                elif commits and rnd.random() < 0.5:  # often just after a commit of the row
                    i = min(rnd.choice(commits) + rnd.randint(0, 3), len(log) - 1)
                else:
                    i = rnd.randint(min(since, len(log) - 1), len(log) - 1)
                j = i
                if how == "dump":  # the sequence read later than the table's snapshot
                    j = rnd.randint(i, min(len(log) - 1, i + rnd.randint(0, 60)))
                    if log[j][2] != log[i][2]:
                        w.count("dump_read_the_sequence_later")
                off = rnd.choice([SKEW - reg.offset, offset(rnd)])  # often the other end of the skew
                lost = [e for e in terms if e > i]
                if lost:
                    w.count("lost_a_term")
                if len(lost) >= 2:
                    w.count("lost_nested_terms")
                if w.top >= log[j][2]:
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
        new = []
        if ms in holds:
            tx = calls.txn("h")
            new.append((hold_off(w, reg, tx), tx, 0))
        if held and ms == scene.start + 80:
            new.append((claim(w, reg, held), held, 0))
        burst = bursts.get(ms, 0)  # many servers at once, each taking a block or two
        n_new = 0
        if ms not in idle:
            n_new += int(rate) + (rnd.random() < rate - int(rate))
            if rnd.random() < 0.1:
                tx = calls.txn("c")
                new.append((claim(w, reg, tx), tx, 0))
        for i in range(burst + n_new):
            tx, blocks = calls.txn("t"), rnd.choice([1, 1, 1, 2]) if i < burst else calls.blocks()
            new.append((take(w, reg, tx, blocks), tx, blocks))
        run_calls(reg, new, rnd, calls.pace)
        if w.dup:
            return f"seed {seed}: {w.dup}"
    return None


def run_restarts(seed, v, restarts):
    """Calls for a while, then restarts of the registry that lose nothing, one soon after another
    (a claim each ms until the term begins): the blocks their jumps skipped in all, and the most the
    time from the line's anchor before them to the last jump's at (the downtimes, the time since
    the anchor, the skew) allows, K included."""
    rnd = random.Random(seed)
    w = World(v)
    log = [(0, (0, 0), 0)]
    reg = Registry((0, 0), 0, offset(rnd), log, w)
    reg.begun = True
    rate = rnd.choice([0.1, 0.3, 1.0, 2.0])
    calls = Calls(rnd, rnd.choice([1.0, 0.6, rnd.uniform(0.2, 1.0)]))
    starts = [rnd.randint(20, 120)]
    for _ in range(restarts - 1):
        starts.append(starts[-1] + rnd.randint(2, 6))
    anchor = skipped = None
    down_until = -1
    for ms in range(starts[-1] + 30):
        w.ms = ms
        if ms in starts:
            if anchor is None:
                anchor, skipped = reg.row, len(w.jumps)
            reg = Registry(reg.row, reg.seq, reg.offset, log, w)
            reg.note()
            down_until = ms + rnd.choice([0, 1, rnd.randint(0, 5)])
        if ms < down_until:
            continue
        new = []
        if not reg.begun or rnd.random() < 0.1:
            tx = calls.txn("c" if reg.begun else "b")
            new.append((claim(w, reg, tx), tx, 0))
        for _ in range(int(rate) + (rnd.random() < rate - int(rate))):
            tx, blocks = calls.txn("t"), calls.blocks()
            new.append((take(w, reg, tx, blocks), tx, blocks))
        run_calls(reg, new, rnd, calls.pace)
    jumps = w.jumps[skipped:]
    if not jumps:
        return 0, K
    return sum(j[0] for j in jumps), (jumps[-1][1] - anchor[1]) // BLOCK_MS + K


def first_violation(v, schedules=SCHEDULES):
    for seed in range(schedules):
        found = run_schedule(seed, v)
        if found:
            return found
    return None


class Stage:
    """A history staged by hand, call by call and statement by statement, on a registry whose
    clock is real time, with the counter at (0, 0) and no index taken."""

    def __init__(self, v):
        self.w = World(v)
        self.log = [(0, (0, 0), 0)]
        self.reg = Registry((0, 0), 0, 0, self.log, self.w)
        self.reg.begun = True
        self.calls = {}

    def at(self, ms):
        self.w.ms = ms

    def call(self, kind, name, hold=0, **args):
        txn = Txn(name, hold)
        self.calls[name] = (kind(self.w, self.reg, txn, **args), txn)

    def until(self, name, label, times=1):
        for got in self.calls[name][0]:
            if got == label:
                times -= 1
                if not times:
                    return

    def finish(self, name):
        proc, txn = self.calls.pop(name)
        txn.hold = 0
        for _ in proc:
            pass

    def takes(self, count, name):
        for i in range(count):
            self.call(take, f"{name}{i}")
            self.finish(f"{name}{i}")

    def start(self, entry, offset=0):
        """The registry starts again from the log's entry (a standby's, a copy's)."""
        ms, row, seq = self.log[entry]
        del self.log[entry + 1:]
        self.reg = Registry(row, seq, offset, self.log, self.w)
        self.reg.note()
        self.calls = {}


def a_take_on_a_row_a_reanchor_replaced(v):
    """The counter idle for 100 ms, its line 50 blocks above its next index (0). A claim's _term()
    re-anchors it (the line down to 0 at 100); before the claim commits, a take of 64 blocks
    starts (its own re-anchor passes over the row the claim holds) and reads the row. The claim
    commits; the take then draws blocks 0 to 52 under the old line (50 and a burst of 3), past the
    19 the re-anchored line allows now. The registry fails over to a standby that had the commit
    and the sequence at 30, whose jump, to the re-anchored line at now + the skew plus K (28),
    leaves 30 next: blocks 30 to 52 come again."""
    s = Stage(v)
    s.at(100)
    s.call(claim, "claim")
    s.until("claim", "term")
    s.call(take, "take", blocks=64)
    s.until("take", "row")
    s.finish("claim")
    s.until("take", "nextval", 30)
    standby = len(s.log) - 1
    s.at(101)
    s.finish("take")
    s.at(102)
    s.start(standby)
    s.takes(1, "after")
    return s.w.dup


def a_hold_off_that_read_the_next_index_before_takes_drew_past_it(v):
    """Takes as many as the line allows. The owner's hold_off() at 100 sets the term's word, reads
    the row and the next index (52), then stalls for 60 ms (longer than the skew and 16 blocks'
    pace) while the takes go on: they began under the new word, so that the check at their end
    passes. When hold_off() sets the sequence, to its line at 100 + the skew plus K (77), they
    have been granted up to 81, and the sequence comes back to blocks they were granted. No
    history is lost."""
    s = Stage(v)
    for ms in range(160):
        s.at(ms)
        if ms == 100:
            s.call(hold_off, "hold_off")
            s.until("hold_off", "next")
        s.takes(3, f"take{ms}.")
    s.finish("hold_off")
    return s.w.dup


def a_take_that_began_before_hold_off_set_the_term(v):
    """Takes as many as the line allows until 145 (the line last re-anchored at 144, onto itself).
    The owner's hold_off() at 100 stalls before it sets the term's word; at 152 a take of 64 blocks
    begins (under the old word; the anchor too recent for its own re-anchor) and reads the row;
    hold_off() sets the word and reads the next index (75); the take draws 75 to 78, past what the
    jump then sets the sequence to (its line at 100 + the skew plus K: 77). Unless the take, seeing
    at its end a word other than the one it began under, grants nothing, 77 and 78 come again."""
    s = Stage(v)
    for ms in range(146):
        s.at(ms)
        if ms == 100:
            s.call(hold_off, "hold_off")
            s.until("hold_off", "known")
        s.takes(3, f"take{ms}.")
    s.at(152)
    s.call(take, "take", blocks=64)
    s.until("take", "row")
    s.until("hold_off", "next")
    s.finish("take")
    s.finish("hold_off")
    s.takes(1, "after")
    return s.w.dup


def a_hold_off_that_read_the_row_before_a_reanchor_committed(v):
    """The counter idle for 100 ms. The owner's hold_off() begins its jump's loop; a claim
    re-anchors the row (the line down to 0) and commits. A jump that read the row as the loop began
    sets the sequence to 77 and the anchor to its line from that row (58 at 116): the line back up,
    over the re-anchor's. Takes under it are granted 77 and on from ms 150; the registry fails over
    to a standby that had the sequence's 77 but not hold_off()'s commit, whose row is the
    re-anchor's: its jump, to 52, leaves 77 next. A jump that reads the row under its lock sees the
    re-anchor's."""
    s = Stage(v)
    s.at(100)
    s.call(hold_off, "hold_off")
    s.until("hold_off", "loop")
    s.call(claim, "reanchor")
    s.finish("reanchor")
    s.until("hold_off", "setval")
    standby = len(s.log) - 1
    s.finish("hold_off")
    for ms in range(101, 152):
        s.at(ms)
        s.takes(1, f"take{ms}.")
    s.start(standby)
    s.takes(1, "after")
    return s.w.dup


def restarts_in_a_row_that_jump_on_their_next_index(v):
    """Two restarts 2 ms apart, their terms begun by a claim at 10 and at 12. A jump that adds K to
    max(n, L) and anchors on n puts the second term's line 31 blocks above the first's; takes under
    it are granted 51 and on from ms 62; a failover at 80 to a standby that had the first term's
    state only jumps to 54."""
    s = Stage(v)
    for ms in (10, 12):
        s.start(len(s.log) - 1)
        s.at(ms)
        s.call(claim, f"claim{ms}")
        s.finish(f"claim{ms}")
        if ms == 10:
            standby = len(s.log) - 1
    for ms in range(13, 81):
        s.at(ms)
        s.takes(1, f"take{ms}.")
    s.start(standby)
    s.takes(1, "after")
    return s.w.dup


ANSWERED = [(a_hold_off_that_read_the_row_before_a_reanchor_committed, "jump_locks_first"),
            (a_take_that_began_before_hold_off_set_the_term, "take_checks_term")]


@pytest.fixture(scope="module")
def mended():
    """Every schedule under the protocol with its flaws mended, run once for the tests below: the
    first violation (None), and what the schedules met."""
    counts = {}
    found = None
    for seed in range(SCHEDULES):
        found = found or run_schedule(seed, Variant(**MENDED), counts)
    return found, counts


def test_the_protocol_grants_no_block_twice_through_races_restores_dumps_and_nested_terms(mended):
    assert mended[0] is None


@pytest.mark.parametrize("history, mend", [(a_take_on_a_row_a_reanchor_replaced, "take_rechecks_row"),
                                           (a_hold_off_that_read_the_next_index_before_takes_drew_past_it,
                                            "take_waits_for_jump")],
                         ids=["take_rechecks_row", "take_waits_for_jump"])
def test_each_flaw_the_model_found_grants_a_block_twice_without_its_mend(history, mend):
    """Each flaw's staged history (its docstring tells it; the schedules meet both): the protocol
    as the SQL now has it grants no block twice in it, and with that mend taken out does."""
    assert history(Variant()) is None
    found = history(Variant(**{mend: False}))
    assert found, f"with {mend} off, the history granted no block twice"
    print(f"\n{mend} off: {found}")


@pytest.mark.parametrize("history, answer", ANSWERED, ids=[answer for _, answer in ANSWERED])
def test_each_answer_of_the_sql_to_a_jump_no_take_waits_for_is_needed(history, answer):
    """The histories that the jump's row read under its lock, and a take's check of the term's word
    at its end, are for (hold_off() under a live fleet; the schedules seldom meet them): neither
    the protocol as written nor the mended one grants a block twice in them, the mended one with
    that answer taken out does."""
    assert history(Variant()) is None and history(Variant(**MENDED)) is None
    found = history(Variant(**dict(MENDED, **{answer: False})))
    assert found, f"with {answer} off, the history granted no block twice"
    print(f"\n{answer} off: {found}")


def test_the_schedules_meet_races_past_the_burst_and_the_second_check_and_takes_on_a_replaced_row(mended):
    """The schedules reach what the second check and the mends are for: takes that raced past the
    first check, granted past the burst or stopped after a nextval (past the 16, or another take's
    index between two of its own); takes that drew indexes after the row they had read was
    replaced, cut by the mended take's second read of it; and takes that a new term refused, at
    their end or (mended) while its jump was under way."""
    counts = mended[1]
    assert counts.get("granted_past_the_burst", 0) >= 15000, counts
    assert counts.get("refused_after_the_nextval", 0) >= 2000, counts
    assert counts.get("stopped_by_another_takes_index", 0) >= 2000, counts
    assert counts.get("drew_an_index_on_a_replaced_row", 0) >= 6000, counts
    assert counts.get("cut_on_the_row_read_again", 0) >= 400, counts
    assert counts.get("refused_for_a_new_term", 0) >= 1000, counts
    assert counts.get("refused_for_a_jump_under_way", 0) >= 10000, counts


def test_the_schedules_meet_reanchors_rolled_back_and_passed_over_and_lost_histories_of_every_kind(mended):
    """And re-anchors that lowered the line, rolled back, or passed over a row another transaction
    held (jumps too); starts that lost granted blocks, a term, or terms nested one in another; and
    dumps whose sequence was read later than their row."""
    counts = mended[1]
    assert counts.get("reanchored_below_the_next_index", 0) >= 6000, counts
    assert counts.get("rolled_back", 0) >= 1400 and counts.get("reanchor_passed_over", 0) >= 100000, counts
    assert counts.get("jump_passed_over_the_row", 0) >= 500, counts
    assert counts.get("lost_a_granted_block", 0) >= 500 and counts.get("lost_a_term", 0) >= 250, counts
    assert counts.get("lost_nested_terms", 0) >= 50, counts
    assert counts.get("dump_read_the_sequence_later", 0) >= 200, counts


@pytest.mark.parametrize("restarts", [1, 4])
def test_restarts_that_lost_nothing_skip_no_more_than_the_time_since_the_anchor_allows(restarts):
    """One restart skips at most (its downtime, the time since the line's anchor, the skew) / BLOCK_MS
    + K blocks; a run of restarts one soon after another no more than one would over the same time."""
    for seed in range(300):
        skipped, bound = run_restarts(seed, Variant(), restarts)
        assert skipped <= bound, (seed, skipped, bound)


@pytest.mark.parametrize("flaw", ["jumps", "jump_ahead_by_skew", "reanchor_below_line", "second_check", "term_first"])
def test_each_planted_flaw_of_the_protocol_is_caught(flaw):
    """Against the mended protocol (which every schedule passes): no jump at a new term; a jump to
    the line at now, without the skew (a promoted standby's clock behind); a re-anchor onto the next
    index above the line; no check after the nextvals (the mended second read of the row with it:
    more than 16 takes racing past the first check); the term's word set after the jump (as the SQL
    had it before: a take that began during hold_off()'s jump and ended before the word changed)."""
    found = first_violation(Variant(**dict(MENDED, **{flaw: False})))
    assert found, f"with {flaw} off, no schedule granted a block twice"
    print(f"\n{flaw} off: {found}")


def test_a_jump_that_adds_k_to_the_next_index_is_caught_by_the_waste_of_nested_terms_and_a_lost_one():
    """The planted jump to max(n, L) + K anchored on n keeps the bound of one restart (its L - n is
    no more than the time since the anchor) but skips K more at each further term, and, its line
    above the one it follows, grants blocks that a failover to the state between two terms grants
    again."""
    v = Variant(**dict(MENDED, jump_from_line=False))
    assert all(skipped <= bound for skipped, bound in (run_restarts(seed, v, 1) for seed in range(300)))
    over = 0
    for seed in range(300):
        skipped, bound = run_restarts(seed, v, 4)
        over += skipped > bound
    assert over >= 200, over
    assert restarts_in_a_row_that_jump_on_their_next_index(Variant(**MENDED)) is None
    found = restarts_in_a_row_that_jump_on_their_next_index(v)
    assert found
    print(f"\njump_from_line off: {found}")
