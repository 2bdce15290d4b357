"""The checker of a history of handed-out ids (benches/idgen_harness/chaos.py feeds it; no database in
here, tested in pg_test/faults/test_history_check.py).

A history is every id a run saw handed out — by SELECT on the client side, and every id found in
every table of every server at the end — with who issued it, on which timeline, and when (the
client's clock around the call). The checker finds:
- **duplicates**: the same snowflake id or UUID handed out twice, on any servers, across any
  failovers. One case is documented and excused, by name: after a failover to an *asynchronous*
  standby, an id the old primary handed out past the last horizon the standby replayed may be
  handed out again by the promoted standby (README: "With asynchronous replication the gap
  stays"). The checker excuses a pair only when it can show exactly that: the earlier id came
  from the old primary on the old timeline before that promotion, its time lies past the
  horizon the standby had replayed, and the later one from the promoted server after it;
- **wrong fields**: each snowflake id is read under the id space its issuer had when it made it
  (idgen.epoch and idgen.layout: the schedule changes them between restarts), and one whose
  worker bits are not its issuer's, a UUID that is not
  version 7, an id whose time is further than the allowed skew from when it was handed out *by
  its issuer's clock*: each server's clock offsets (the schedule sets them, up to tens of
  seconds back) are known, and an id is judged against the offsets its server's clock had
  around the call. A snowflake id may run ahead of its clock by a short wait only; a UUID keeps
  counting in the last millisecond issued until a clock set back catches up, so its time may
  stay at an earlier, larger offset for up to UUID_CATCH_UP_MS;
- **order**: on one server and timeline, an id handed out after another had come back (in real
  time, by the client's clock) that is not larger than it; and across a failover to a
  *synchronous* standby, an id the promoted server handed out that is not larger than every id
  the old primary had handed out before the promotion (README: after promotion a server resumes
  above every id it replayed, and a synchronous standby has replayed every horizon the old primary
  issued under).
"""
from collections import defaultdict
from dataclasses import dataclass, field

# (worker bits, sequence bits) of the layouts the schedule runs under; their time field is the rest,
# counted in milliseconds.
LAYOUT_BITS = {"twitter": (10, 12), "instagram": (13, 10)}


@dataclass(frozen=True)
class Issued:
    server: str  # the server that handed it out (for a stored row: the one that wrote it, from the row)
    timeline: int  # that server's timeline then
    kind: str  # "snowflake" or "uuid"
    value: int  # the id (a UUID as its 128-bit integer)
    started_ms: float  # the client's clock when the call was sent
    finished_ms: float  # ... and when its answer came
    worker_id: int | None = None  # the issuer's worker id, for a snowflake id
    stored: bool = False  # found in a table (else handed out by SELECT only)
    epoch_ms: int | None = None  # the issuer's idgen.epoch when it made it (None: check()'s)
    layout: str = "twitter"  # ... and its idgen.layout


@dataclass(frozen=True)
class Promotion:
    server: str  # the standby promoted
    timeline: int  # its new timeline
    at_ms: float  # the client's clock when the promotion was asked for
    old_primary: str
    old_timeline: int
    synchronous: bool  # whether the promoted standby was a synchronous one
    replayed_horizon_ms: int  # the highest horizon it had replayed (unix ms)


@dataclass
class Report:
    checked: int = 0
    violations: list = field(default_factory=list)
    excused: list = field(default_factory=list)  # (why, the pair), the documented case only

    def ok(self):
        return not self.violations


def snowflake_fields(value, epoch_ms, layout="twitter"):
    """(unix ms, worker id, sequence) of a snowflake id of the layout under the epoch."""
    worker_bits, sequence_bits = LAYOUT_BITS[layout]
    return ((value >> (worker_bits + sequence_bits)) + epoch_ms, (value >> sequence_bits) & ((1 << worker_bits) - 1),
            value & ((1 << sequence_bits) - 1))


def uuid_fields(value):
    """(unix ms, version, variant) of a UUID given as its 128-bit integer."""
    return value >> 80, (value >> 76) & 0xF, (value >> 62) & 0x3


# How long an earlier, larger clock offset may still show in the ids after a clock step back: a
# snowflake id waits (at most idgen.max_clock_wait, the horizon's lead after a crash) rather than
# run ahead; a UUID carries on in the last millisecond until the clock has caught up with it.
SNOWFLAKE_CATCH_UP_MS = 2_000
UUID_CATCH_UP_MS = 60_000
# idgen's test clock re-reads its offset file every 100 ms in each process (src/pg/clock.rs): a new
# offset is in every process well within a second.
OFFSET_SETTLES_MS = 1_000


def offsets_around(steps, started_ms, finished_ms, catch_up_ms):
    """(lowest, highest) clock offset a server may have shown in an id handed out between
    started_ms and finished_ms. steps: [(from wall ms, offset ms)], in time order, the first
    from the start; an offset counts from when it was set to OFFSET_SETTLES_MS after the next
    one was, and, for the highest, catch_up_ms longer."""
    if not steps:
        return 0.0, 0.0
    lows, highs = [], []
    for k, (since, offset) in enumerate(steps):
        until = steps[k + 1][0] + OFFSET_SETTLES_MS if k + 1 < len(steps) else float("inf")
        if since <= finished_ms and until >= started_ms:
            lows.append(offset)
        if since <= finished_ms and until + catch_up_ms >= started_ms:
            highs.append(offset)
    return min(lows or highs or [0.0]), max(highs or lows or [0.0])


def issued_ms(i, epoch_ms):
    """The id's time; epoch_ms: the epoch of an id that does not name its own."""
    if i.kind != "snowflake":
        return uuid_fields(i.value)[0]
    return snowflake_fields(i.value, epoch_ms if i.epoch_ms is None else i.epoch_ms, i.layout)[0]


def _describe(i):
    return (f"{i.kind} {i.value} from {i.server} (timeline {i.timeline}, {'stored' if i.stored else 'SELECT'}, "
            f"handed out at {i.started_ms:.0f}–{i.finished_ms:.0f} ms"
            + (f", epoch {i.epoch_ms}, layout {i.layout}" if i.kind == "snowflake" and i.epoch_ms is not None else "")
            + ")")


def _excuse(first, second, promotions, epoch_ms):
    """The documented case that covers this pair, or None: first handed out by the old primary
    before an asynchronous promotion, past the horizon the promoted standby had replayed, and
    second by the promoted server after it. A stored row's timeline says which side it is on (the
    old primary was stopped before the promotion and never writes on its old timeline again; the
    promoted server writes on its new one only after it), a call's times say so for a call."""
    for p in promotions:
        if (not p.synchronous and first.server == p.old_primary and first.timeline == p.old_timeline
                and first.finished_ms <= p.at_ms  # a stored row's times are 0: always before
                and second.server == p.server and second.timeline == p.timeline
                and (second.stored or second.started_ms >= p.at_ms)
                and issued_ms(first, epoch_ms) > p.replayed_horizon_ms):
            return (f"asynchronous failover to {p.server} (timeline {p.timeline}) at {p.at_ms:.0f} ms: the id was "
                    f"handed out by {p.old_primary} past the horizon the standby had replayed "
                    f"({p.replayed_horizon_ms} ms), the documented gap")
    return None


def check(history, promotions=(), epoch_ms=0, skew_ms=1000, offsets=None):
    """offsets: {server: [(from wall ms, clock offset ms)]}, the clock steps of each server (none:
    every clock right)."""
    offsets = offsets or {}
    report = Report(checked=len(history))
    seen = defaultdict(list)
    for i in history:
        seen[(i.kind, i.value)].append(i)
    for (kind, value), issued in seen.items():
        if len(issued) < 2:
            continue
        # a stored row names the server that wrote it and its timeline, so the same row found again on
        # a standby or a subscriber is one hand-out; every call by SELECT is one of its own
        distinct = list({(i.server, i.timeline, True) if i.stored else (i.server, False, i.started_ms, i.finished_ms): i
                         for i in issued}.values())
        if len(distinct) < 2:
            continue
        distinct.sort(key=lambda i: i.started_ms)
        why = None
        if len(distinct) == 2:
            why = (_excuse(distinct[0], distinct[1], promotions, epoch_ms)
                   or _excuse(distinct[1], distinct[0], promotions, epoch_ms))
        if why:
            report.excused.append((why, tuple(distinct)))
        else:
            report.violations.append(f"{kind} {value} handed out {len(distinct)} times: "
                                     + "; ".join(_describe(i) for i in distinct))
    for i in history:
        at = issued_ms(i, epoch_ms)
        if i.kind == "snowflake":
            _, worker, _ = snowflake_fields(i.value, epoch_ms if i.epoch_ms is None else i.epoch_ms, i.layout)
            if i.value < 0 or i.value >> 63:
                report.violations.append(f"{_describe(i)}: negative")
            if i.worker_id is not None and worker != i.worker_id:
                report.violations.append(f"{_describe(i)}: worker id {worker}, its issuer's is {i.worker_id}")
        else:
            _, version, variant = uuid_fields(i.value)
            if version != 7 or variant != 2:
                report.violations.append(f"{_describe(i)}: version {version}, variant {variant}, not an RFC 9562 v7")
        if i.stored:
            continue
        catch_up = SNOWFLAKE_CATCH_UP_MS if i.kind == "snowflake" else UUID_CATCH_UP_MS
        low, high = offsets_around(offsets.get(i.server, ()), i.started_ms, i.finished_ms, catch_up)
        if not (i.started_ms + low - skew_ms <= at <= i.finished_ms + high + skew_ms):
            report.violations.append(f"{_describe(i)}: its time is {at} ms, more than {skew_ms} ms from when it "
                                     f"was handed out by its server's clock (offset {low:+.0f}..{high:+.0f} ms)")
    report.violations += _order(history)
    report.violations += _across_promotions(history, promotions)
    return report


def _across_promotions(history, promotions):
    """After a synchronous promotion, every id the promoted server hands out is above every id the
    old primary handed out (and saw come back) before it."""
    calls = defaultdict(list)  # (server, timeline, kind) -> the ids handed out by SELECT
    for i in history:
        if not i.stored:
            calls[(i.server, i.timeline, i.kind)].append(i)
    problems = []
    for p in promotions:
        if not p.synchronous:
            continue
        for kind in ("snowflake", "uuid"):
            before = [i for i in calls[(p.old_primary, p.old_timeline, kind)] if i.finished_ms < p.at_ms]
            if not before:
                continue
            top = max(before, key=lambda i: i.value)
            for i in calls[(p.server, p.timeline, kind)]:
                if i.started_ms > p.at_ms and i.value <= top.value:
                    problems.append(f"after the failover to {p.server} (timeline {p.timeline}) at {p.at_ms:.0f} ms: "
                                    f"{_describe(i)} is not above {_describe(top)}, handed out by the old primary "
                                    "before it")
    return problems


def _order(history):
    """On each server and timeline, per kind: an id handed out after another came back is larger."""
    problems = []
    groups = defaultdict(list)
    for i in history:
        if not i.stored:  # a stored id's hand-out time is the row's, not a call's
            groups[(i.server, i.timeline, i.kind)].append(i)
    for key, items in groups.items():
        by_finish = sorted(items, key=lambda i: i.finished_ms)
        best, j = None, 0  # the largest id among those that came back before the current call started
        for i in sorted(items, key=lambda i: i.started_ms):
            while j < len(by_finish) and by_finish[j].finished_ms < i.started_ms:
                if best is None or by_finish[j].value > best.value:
                    best = by_finish[j]
                j += 1
            if best is not None and i.value <= best.value:
                problems.append(f"on {key[0]} timeline {key[1]}: {_describe(i)} is not above {_describe(best)}, "
                                "which came back before it was asked for")
    return problems
