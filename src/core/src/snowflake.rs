//! Snowflake ids: the generator state machine, for any layout (`crate::layout`), and Twitter's
//! layout, idgen's default, by name.
//!
//! Pure Rust: no Postgres in here. The generator works on [`SharedState`], a handful of std
//! atomics that the Postgres layer places in shared memory and that tests place on the heap, and
//! on an [`Env`] that supplies the clock, the waits and the durable horizon — so tests can step the
//! clock backwards, freeze it or exhaust a millisecond without sleeping.
//!
//! ```text
//!  63 | 62 ............... 22 | 21 ...... 12 | 11 ...... 0
//!   0 |  milliseconds since   |  worker id   |  sequence
//!     |  the epoch (41 bits)  |  (10 bits)   |  (12 bits)
//! ```
//!
//! That is the default layout; `idgen.layout` chooses another split and time unit. The generator
//! counts in the layout's units ("ticks": a millisecond for Twitter's, 10 ms for Sonyflake's);
//! the horizon stays in Unix milliseconds whatever the layout.

use crate::layout::{Fields, Layout};

// In the tests with the `loom` feature the generator runs on loom's atomics, which explore every
// interleaving of a model's threads (src/snowflake/loom_tests.rs); the normal build is untouched.
#[cfg(all(test, feature = "loom"))]
use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
#[cfg(not(all(test, feature = "loom")))]
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The last millisecond of Twitter's 41-bit time field, `Layout::TWITTER.max_time()` (a test
/// holds them equal): the bound of the horizon (`crate::horizon::MAX_UNIX_MS`).
pub const MAX_MILLIS: u64 = (1 << 41) - 1;

/// Twitter's epoch, 2010-11-04 01:42:54.657 UTC, in Unix milliseconds.
pub const TWITTER_EPOCH_MS: u64 = 1_288_834_974_657;

/// How far ahead of the clock the durable horizon is pushed each time it is extended. After a
/// crash the generator resumes just past the horizon, so this is also the longest a caller
/// waits for the clock after crash recovery: the crash's lead, which `next_id` waits out
/// whatever `max_clock_wait` says, and does not count as a clock regression.
pub const HORIZON_LEAD_MS: u64 = 1_000;

/// `idgen.max_clock_wait`'s default. The lead a crash leaves is waited out by every caller, so a
/// server on the defaults never tells a clock regression from a crash by the wait alone.
pub const DEFAULT_MAX_CLOCK_WAIT_MS: u64 = 1_000;
const _: () = assert!(HORIZON_LEAD_MS <= DEFAULT_MAX_CLOCK_WAIT_MS);

/// What turns a clock into ticks and back: the epoch and the layout, fixed for a server's run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeBase {
    pub epoch_unix_ms: u64,
    pub layout: Layout,
}

impl TimeBase {
    pub const fn twitter(epoch_unix_ms: u64) -> TimeBase {
        TimeBase {
            epoch_unix_ms,
            layout: Layout::TWITTER,
        }
    }

    /// `tick << sequence bits | sequence`: the ids of a server, in the order they are issued,
    /// are consecutive values of this packing, a full tick carrying into the next.
    fn pack(&self, tick: u64, sequence: u64) -> u64 {
        (tick << self.layout.sequence_bits()) | sequence
    }

    fn unpack(&self, word: u64) -> (u64, u64) {
        (
            word >> self.layout.sequence_bits(),
            word & self.layout.max_sequence(),
        )
    }

    /// The Unix ms a tick begins at.
    pub fn unix_ms_of(&self, tick: u64) -> u64 {
        // Saturates for the time fields of long-lived layouts, past any timestamp's range.
        tick.saturating_mul(self.layout.unit_ms())
            .saturating_add(self.epoch_unix_ms)
    }

    /// The Unix ms an id's tick begins at (None for a negative id).
    pub fn unix_ms_of_id(&self, id: i64) -> Option<u64> {
        self.layout
            .decompose(id)
            .ok()
            .map(|f| self.unix_ms_of(f.time))
    }

    /// Whether both make the same ids at the same moments: one epoch, and layouts whose ids
    /// read alike (`Layout::same_ids`).
    pub fn same_ids(&self, other: &TimeBase) -> bool {
        self.epoch_unix_ms == other.epoch_unix_ms && self.layout.same_ids(&other.layout)
    }

    /// Where ids under `self` may resume after ids up to `horizon_unix_ms` were made under
    /// `recorded`: the Unix ms after which (`resume_after`) the first id of `self`, worker 0 and
    /// sequence 0, sorts above every id `recorded` could have made up to the horizon plus
    /// `margin_ms` (any worker, any sequence; the margin covers the fleet's other servers, whose
    /// horizons run ahead of this one by their clocks' skew). Never below the horizon; the
    /// horizon itself for the same ids. None when no tick of `self` does (its time field ends
    /// first): new ids would sort below, or equal, ids already stored for good.
    pub fn floor_above(
        &self,
        recorded: &TimeBase,
        horizon_unix_ms: u64,
        margin_ms: u64,
    ) -> Option<u64> {
        if self.same_ids(recorded) {
            return Some(horizon_unix_ms);
        }
        let old_end = horizon_unix_ms.saturating_add(margin_ms);
        let Some(old_ms) = old_end.checked_sub(recorded.epoch_unix_ms) else {
            return Some(horizon_unix_ms); // nothing could be made before the recorded epoch
        };
        let old = &recorded.layout;
        let old_top = old
            .compose(Fields {
                time: (old_ms / old.unit_ms()).min(old.max_time()),
                worker: old.max_worker(),
                sequence: old.max_sequence(),
            })
            .expect("fields within the layout");
        let new = &self.layout;
        let above = |tick: u64| new.lowest_id_at(tick).is_ok_and(|id| id > old_top);
        if !above(new.max_time()) {
            return None;
        }
        // the lowest id of a tick rises with the tick: the first tick above, by bisection
        let (mut lo, mut hi) = (0u64, new.max_time());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if above(mid) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        // the last ms of the tick before: a run resumes at the tick after the floor's
        let floor = self.unix_ms_of(lo).saturating_sub(1);
        Some(floor.max(horizon_unix_ms))
    }

    /// Whether ids under `self` may follow, from the tick after the horizon, ids made under
    /// `recorded` up to it (`floor_above` at or below the horizon).
    pub fn may_follow(&self, recorded: &TimeBase, horizon_unix_ms: u64, margin_ms: u64) -> bool {
        self.floor_above(recorded, horizon_unix_ms, margin_ms)
            .is_some_and(|floor| floor <= horizon_unix_ms)
    }

    /// The first word of a run whose ids come from ticks wholly after `unix_ms`: the tick after
    /// the one `unix_ms` falls in (ids of that tick may have been issued up to `unix_ms`).
    fn first_word_after(&self, unix_ms: u64) -> u64 {
        match unix_ms.checked_sub(self.epoch_unix_ms) {
            Some(ms) => {
                let tick = (ms / self.layout.unit_ms()).min(self.layout.max_time());
                self.pack(tick, self.layout.max_sequence()) + 1
            }
            None => 0,
        }
    }
}

/// The latest epoch accepted, in Unix ms (2038-01-19): every id under it still decodes to a
/// PostgreSQL timestamp, and it is the bound the decoders' explicit-epoch forms accept too.
pub const MAX_EPOCH_UNIX_MS: u64 = i32::MAX as u64 * 1000;

/// Checks an epoch's range, not the clock: a clock before the epoch, or so far after it that
/// the milliseconds overflow 41 bits, is reported by `next_id` when an id is asked for.
pub fn check_epoch(epoch_unix_ms: u64) -> Result<u64, String> {
    if epoch_unix_ms > MAX_EPOCH_UNIX_MS {
        return Err(format!(
            "the epoch {epoch_unix_ms} is after {MAX_EPOCH_UNIX_MS} (2038-01-19), the latest accepted"
        ));
    }
    Ok(epoch_unix_ms)
}

// ---- the generator ------------------------------------------------------------------------

/// What contention costs, counted where it happens: every read-modify-write on the shared state
/// and every one that failed and had to be tried again. Counted per thread in tests only (the
/// structural tests assert the design's bound on 2 cores, where rates hide contention); nothing
/// at all in the extension.
pub(crate) mod probe {
    #[cfg(test)]
    thread_local! {
        static COUNTS: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
    }
    /// A read-modify-write on shared memory (successful or not).
    #[inline(always)]
    pub fn rmw() {
        #[cfg(test)]
        COUNTS.with(|c| c.set((c.get().0 + 1, c.get().1)));
    }
    /// A read-modify-write that failed and must be tried again.
    #[inline(always)]
    pub fn retry() {
        #[cfg(test)]
        COUNTS.with(|c| c.set((c.get().0, c.get().1 + 1)));
    }
    /// (read-modify-writes, retries) of this thread since the last call.
    #[cfg(test)]
    pub fn take() -> (u64, u64) {
        COUNTS.with(|c| c.replace((0, 0)))
    }
}

/// A field on a cache line of its own: 128 bytes, PostgreSQL's `PG_CACHE_LINE_SIZE`, and two
/// 64-byte lines, which x86's adjacent-line prefetch moves as a pair.
#[repr(align(128))]
#[derive(Default, Debug)]
struct Line<T>(T);

/// What every call reads and almost none writes.
#[derive(Default, Debug)]
struct ReadMostly {
    /// Unix ms up to which ids may be issued: durably recorded before any id beyond it. Who may
    /// raise it is the environment's business (`Env::try_begin_push`): a lock that is released
    /// on every exit of its holder, which plain atomics cannot promise.
    horizon_unix_ms: AtomicU64,
    /// The first word of this run: just past the persisted horizon (a restart seeds it there,
    /// so the first id comes from a later millisecond).
    seed_next: AtomicU64,
    /// A word a caller could not issue because the clock was too far behind it: while the
    /// clock reads before its millisecond, callers wait or fail without touching `word`, so an
    /// error storm does not push the word ahead of the clock. 0: none.
    behind_word: AtomicU64,
    /// Whether an id of this run has been issued: until then, a wait for the clock is the
    /// lead of the horizon the run started from, not a clock that went back. Written once a run.
    started: AtomicBool,
}

/// Bookkeeping for `idgen_stats()`, which no call reads: written where a millisecond starts
/// (by the one caller that starts it), where a value is given up, and at waits — never per id.
#[derive(Default, Debug)]
struct Counters {
    /// Where the current run of consecutive values began: the seed, or the first id of the
    /// millisecond a caller last started.
    segment_start: AtomicU64,
    /// Values taken from `word` in runs that are over.
    completed: AtomicU64,
    /// Values taken from `word` and not issued: a millisecond that was over when its value
    /// came, or an error.
    discarded: AtomicU64,
    exhaustion_waits: AtomicU64,
    clock_regressions: AtomicU64,
    max_regression_ms: AtomicU64,
}

/// The generator's state, shared by every backend of a server. All fields are plain atomics so
/// that the struct can live in Postgres shared memory as it is; each group on its own cache
/// line, so that the one word every call writes shares its line with nothing every call reads.
#[derive(Default, Debug)]
pub struct SharedState {
    /// The next id's `millis << 12 | sequence`. Every id is one `fetch_add` on it, which cannot
    /// fail; only a caller that finds its millisecond over writes it otherwise (one
    /// compare-and-swap to start the clock's millisecond).
    word: Line<AtomicU64>,
    read_mostly: Line<ReadMostly>,
    counters: Line<Counters>,
}

/// A snapshot of the generator's counters, for `idgen_stats()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub ids_issued: u64,
    pub exhaustion_waits: u64,
    pub clock_regressions: u64,
    pub max_regression_ms: u64,
    /// Last millisecond issued (since the id epoch), None before the first id of this run.
    pub last_millis: Option<u64>,
    pub horizon_unix_ms: u64,
}

impl SharedState {
    /// Starts a run: ids will come from ticks after `horizon_unix_ms` (the persisted
    /// high-water mark), which is also the horizon until it is extended.
    pub fn seed(&self, base: &TimeBase, horizon_unix_ms: u64) {
        self.restart_at(base.first_word_after(horizon_unix_ms));
        self.read_mostly
            .0
            .horizon_unix_ms
            .store(horizon_unix_ms, Ordering::SeqCst);
    }

    /// Starts the run again after `floor_unix_ms` if its next id would come from a millisecond
    /// at or before it, leaving the horizon as it is (the floor is not durable: a push still
    /// records one before any id beyond it). For a worker id taken over from another server,
    /// before this run has issued ids under it. Returns whether the run moved.
    ///
    /// Safe while callers are inside `next_id` on this state (a worker id taken over while
    /// backends issue ids under it unverified): the word only ever rises (`restart_at`).
    pub fn resume_after(&self, base: &TimeBase, floor_unix_ms: u64) -> bool {
        self.restart_at(base.first_word_after(floor_unix_ms))
    }

    /// Moves the word up to `next` unless it is there or beyond already; returns whether it
    /// moved. A compare-and-swap from the value read, retried on what it finds, never a store:
    /// a caller's `fetch_add` or `start_millisecond` landing between a load and a store would
    /// be overwritten and the word moved down, and the ids above it handed out again
    /// (src/snowflake/loom_tests.rs: `loom_resume_after_racing_*`).
    /// The run's bookkeeping follows the word: a caller racing it may still read the old
    /// `started` and `seed_next`, which only decide how a wait for the clock is counted and
    /// which error ends it, never which id is issued.
    fn restart_at(&self, next: u64) -> bool {
        let mut seen = self.word.0.load(Ordering::Acquire);
        loop {
            if seen >= next {
                return false;
            }
            match self
                .word
                .0
                .compare_exchange(seen, next, Ordering::SeqCst, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(now_seen) => seen = now_seen,
            }
        }
        let c = &self.counters.0;
        let start = c.segment_start.swap(next, Ordering::AcqRel);
        c.completed
            .fetch_add(seen.saturating_sub(start), Ordering::Relaxed);
        let rm = &self.read_mostly.0;
        rm.behind_word.store(0, Ordering::SeqCst);
        rm.started.store(false, Ordering::SeqCst);
        rm.seed_next.store(next, Ordering::SeqCst);
        true
    }

    pub fn stats(&self, base: &TimeBase) -> Stats {
        let c = &self.counters.0;
        let word = self.word.0.load(Ordering::Acquire);
        let taken = c.completed.load(Ordering::Relaxed)
            + word.saturating_sub(c.segment_start.load(Ordering::Acquire));
        let fresh = word == self.read_mostly.0.seed_next.load(Ordering::Acquire);
        Stats {
            ids_issued: taken.saturating_sub(c.discarded.load(Ordering::Relaxed)),
            exhaustion_waits: c.exhaustion_waits.load(Ordering::Relaxed),
            clock_regressions: c.clock_regressions.load(Ordering::Relaxed),
            max_regression_ms: c.max_regression_ms.load(Ordering::Relaxed),
            last_millis: (!fresh).then(|| {
                base.unix_ms_of(base.unpack(word.saturating_sub(1)).0) - base.epoch_unix_ms
            }),
            horizon_unix_ms: self.horizon(),
        }
    }

    fn horizon(&self) -> u64 {
        self.read_mostly.0.horizon_unix_ms.load(Ordering::Acquire)
    }

    /// Raises the horizon to `horizon_unix_ms` when it is higher, and starts the run again just
    /// past it, as a restart would: WAL replay (a standby, crash recovery, a point-in-time
    /// restore) of a horizon the primary recorded. Only while no id is issued from this state
    /// (recovery). Returns whether it rose.
    pub fn replay_horizon(&self, base: &TimeBase, horizon_unix_ms: u64) -> bool {
        if horizon_unix_ms <= self.horizon() {
            return false;
        }
        self.seed(base, horizon_unix_ms);
        true
    }

    /// The last millisecond of the last tick issued (Unix ms), or of the seed: what a clean
    /// shutdown records (a restart resumes at the tick after it).
    pub fn high_water_unix_ms(&self, base: &TimeBase) -> u64 {
        let tick = base
            .unpack(self.word.0.load(Ordering::Acquire).saturating_sub(1))
            .0;
        base.unix_ms_of(tick) + base.layout.unit_ms() - 1
    }

    /// A value taken from `word` that will not be issued.
    fn discard(&self) {
        probe::rmw();
        self.counters.0.discarded.fetch_add(1, Ordering::Relaxed);
    }

    /// The clock reads `now` and the millisecond of the value just taken is over: start `now`'s
    /// millisecond, owning its first id, unless another caller has started it (or a later one)
    /// meanwhile — then None, and the caller takes the next value as usual. One
    /// compare-and-swap per millisecond succeeds; the others fail only here.
    fn start_millisecond(&self, base: &TimeBase, now: u64) -> Option<u64> {
        let first = base.pack(now, 0);
        let mut seen = self.word.0.load(Ordering::Acquire);
        loop {
            if seen >= first {
                return None;
            }
            probe::rmw();
            match self
                .word
                .0
                .compare_exchange(seen, first + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    let c = &self.counters.0;
                    probe::rmw();
                    let start = c.segment_start.swap(first, Ordering::AcqRel);
                    probe::rmw();
                    c.completed
                        .fetch_add(seen.saturating_sub(start), Ordering::Relaxed);
                    return Some(first);
                }
                Err(now_seen) => {
                    probe::retry();
                    seen = now_seen;
                }
            }
        }
    }
}

/// How the generator waits; the Postgres layer makes both interruptible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pause {
    /// Sub-millisecond: the sequence is exhausted and the next millisecond is due.
    Spin,
    /// The clock is behind; sleep about this long, then look again.
    Sleep { ms: u64 },
}

/// Everything outside the state machine: the clock, the waits, durable storage, and the lock
/// that lets one caller at a time write a new horizon.
pub trait Env {
    fn now_unix_ms(&mut self) -> u64;
    fn pause(&mut self, pause: Pause);
    /// Records durably that ids up to `unix_ms` may be issued; must not return before that is
    /// on disk (and, where the environment has them, on its synchronous standbys).
    fn persist_horizon(&mut self, unix_ms: u64) -> std::io::Result<()>;
    /// Takes the horizon writer slot if it is free, without waiting. The slot must be released
    /// by `end_push`, and also when its holder exits in a way that never returns here.
    fn try_begin_push(&mut self) -> bool;
    fn end_push(&mut self);
    /// Another caller holds the slot and the clock has reached the horizon: wait, without
    /// spinning, until `moved()` (the horizon changed) or a short while has passed.
    fn wait_for_push(&mut self, moved: &dyn Fn() -> bool);
}

#[derive(Debug)]
pub enum GenError {
    /// The clock is behind the last millisecond issued by more than we are allowed to wait.
    ClockBehind {
        behind_ms: u64,
        max_wait_ms: u64,
        resume_unix_ms: u64,
    },
    /// No id issued yet in this run, and the clock is behind the horizon recorded before it (a
    /// restart, crash recovery, a promotion) by more than the lead and the wait allowed.
    ClockBehindHorizon {
        behind_ms: u64,
        max_wait_ms: u64,
        resume_unix_ms: u64,
    },
    /// The clock reads before the configured epoch.
    ClockBeforeEpoch {
        now_unix_ms: u64,
        epoch_unix_ms: u64,
    },
    /// The layout's time field is used up (Twitter's: the epoch is about 69.7 years old).
    Overflow {
        now_unix_ms: u64,
        epoch_unix_ms: u64,
        layout: Layout,
    },
    /// The horizon could not be written: no id beyond it is issued.
    Horizon(std::io::Error),
}

impl std::fmt::Display for GenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ClockBehind { behind_ms, max_wait_ms, .. } => write!(
                f,
                "the system clock is {behind_ms} ms behind the last snowflake id issued, \
                 longer than idgen.max_clock_wait ({max_wait_ms} ms)"
            ),
            Self::ClockBehindHorizon { behind_ms, max_wait_ms, .. } => write!(
                f,
                "the system clock is {behind_ms} ms behind the snowflake horizon recorded before \
                 this server started (or was promoted), more than the {HORIZON_LEAD_MS} ms lead \
                 plus idgen.max_clock_wait ({max_wait_ms} ms)"
            ),
            Self::ClockBeforeEpoch { now_unix_ms, epoch_unix_ms } => write!(
                f,
                "the system clock ({now_unix_ms} ms since 1970) is before idgen.epoch ({epoch_unix_ms})"
            ),
            Self::Overflow { now_unix_ms, epoch_unix_ms, layout } => write!(
                f,
                "the time field of layout {layout} ({} bits of {} ms) since idgen.epoch \
                 ({epoch_unix_ms}) is used up at the system clock's {now_unix_ms} ms since 1970",
                layout.usable_time_bits(),
                layout.unit_ms()
            ),
            Self::Horizon(e) => write!(f, "could not record the snowflake horizon: {e}"),
        }
    }
}

/// Fixed per server run: the epoch, the layout and the worker id cannot change while the server
/// is up.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub base: TimeBase,
    pub worker_id: u16,
    pub max_clock_wait_ms: u64,
}

/// Issues the next id: strictly greater than every id this state issued before, in every
/// process sharing `state`, and never from a millisecond at or below the persisted horizon of
/// an earlier run.
///
/// The common path is one `fetch_add` on the word: the value it returns is this caller's, so
/// it cannot fail or be retried, however many callers there are. What is rare happens after
/// it, to the value already taken:
/// - its millisecond is over (the clock moved on, or the server was idle): the value is given
///   up and the caller starts the clock's millisecond (`start_millisecond`);
/// - its millisecond has not begun (4,096 ids of the last one are taken, so the value carried
///   into the next; or the clock went back; or the run starts past a crash's horizon): the
///   caller waits for the clock, reading only the clock, not the word;
/// - the horizon does not cover it yet: the caller pushes the horizon, or waits for the one
///   who does.
pub fn next_id(state: &SharedState, cfg: &Config, env: &mut impl Env) -> Result<i64, GenError> {
    let b = &cfg.base;
    debug_assert!(u64::from(cfg.worker_id) <= b.layout.max_worker());
    let mut flags = WaitFlags::default();
    loop {
        let now = clock_ticks(cfg, env)?;
        // A clock already found too far behind: wait or fail without taking a value, measured
        // against the next value the word holds (a read, while the clock is behind only).
        let behind = state.read_mostly.0.behind_word.load(Ordering::Relaxed);
        if behind != 0 && b.unpack(behind).0 > now.1 + 1 {
            let next = state.word.0.load(Ordering::Acquire).max(behind);
            let pause = classify(state, cfg, next, now, &mut flags)?;
            env.pause(pause);
            continue;
        }
        probe::rmw();
        let mut value = state.word.0.fetch_add(1, Ordering::AcqRel);
        if b.unpack(value).0 < now.1 {
            state.discard();
            match state.start_millisecond(b, now.1) {
                Some(first) => value = first,
                None => continue,
            }
        }
        return issue(state, cfg, env, value, &mut flags).inspect_err(|_| state.discard());
    }
}

/// The clock as (Unix ms, ticks since the epoch), or why no id can come from it.
fn clock_ticks(cfg: &Config, env: &mut impl Env) -> Result<(u64, u64), GenError> {
    let b = &cfg.base;
    let now_unix = env.now_unix_ms();
    let now = now_unix
        .checked_sub(b.epoch_unix_ms)
        .ok_or(GenError::ClockBeforeEpoch {
            now_unix_ms: now_unix,
            epoch_unix_ms: b.epoch_unix_ms,
        })?
        / b.layout.unit_ms();
    if now > b.layout.max_time() {
        return Err(GenError::Overflow {
            now_unix_ms: now_unix,
            epoch_unix_ms: b.epoch_unix_ms,
            layout: b.layout,
        });
    }
    Ok((now_unix, now))
}

/// What one call has counted already: each kind of wait counts once per call.
#[derive(Default)]
struct WaitFlags {
    exhausted: bool,
    regression: bool,
}

/// Hands out `value` once the clock has reached its tick and the horizon covers it.
fn issue(
    state: &SharedState,
    cfg: &Config,
    env: &mut impl Env,
    value: u64,
    flags: &mut WaitFlags,
) -> Result<i64, GenError> {
    let (tick, sequence) = cfg.base.unpack(value);
    loop {
        let now = clock_ticks(cfg, env)?;
        if tick > now.1 {
            let pause = classify(state, cfg, value, now, flags)?;
            env.pause(pause);
            continue;
        }
        if horizon_allows(state, now.0, env)? {
            let started = &state.read_mostly.0.started;
            if !started.load(Ordering::Relaxed) {
                started.store(true, Ordering::Relaxed);
            }
            let fields = Fields {
                time: tick,
                worker: u64::from(cfg.worker_id),
                sequence,
            };
            return Ok(cfg
                .base
                .layout
                .compose(fields)
                .expect("fields checked above"));
        }
    }
}

/// `value`'s millisecond is later than the clock's (`now`): how to wait, or why not to.
///
/// The next millisecond: the last one's 4,096 ids are taken and the value carried into the
/// next, so spin into it. Further ahead, the clock is behind ids already issued — measured from
/// the millisecond before `value`, as far as the clock went back — or, before the first id of a
/// run, behind the seed: the horizon recorded before the run, up to a lead ahead of the clock
/// that wrote it. Waiting out that lead is what a crash costs, not a clock that went back: only
/// what lies beyond the lead is a regression, and only that is held against max_clock_wait.
///
/// In a layout whose tick is longer than a millisecond the clock is read in ms, and a wait for
/// the next tick sleeps to its first millisecond instead of spinning through the tick; a
/// distance in ticks is that many ticks' ms (the clock may be up to a tick less behind), and the
/// seed's tick may lie up to a tick beyond the lead it came from.
fn classify(
    state: &SharedState,
    cfg: &Config,
    value: u64,
    (now_unix, now): (u64, u64),
    flags: &mut WaitFlags,
) -> Result<Pause, GenError> {
    let c = &state.counters.0;
    let rm = &state.read_mostly.0;
    let b = &cfg.base;
    let unit = b.layout.unit_ms();
    let tick = b.unpack(value).0;
    if tick <= now + 1 {
        if !flags.exhausted {
            flags.exhausted = true;
            probe::rmw();
            c.exhaustion_waits.fetch_add(1, Ordering::Relaxed);
        }
        if unit == 1 {
            return Ok(Pause::Spin);
        }
        return Ok(Pause::Sleep {
            ms: b.unix_ms_of(tick).saturating_sub(now_unix).max(1),
        });
    }
    let last = b.unpack(value - 1).0;
    let behind_ms = (last - now) * unit;
    let fresh = !rm.started.load(Ordering::Relaxed);
    let seed_next = rm.seed_next.load(Ordering::Relaxed);
    let seed = b.unpack(seed_next.saturating_sub(1)).0;
    let regression = if fresh {
        (seed.saturating_sub(now) * unit).saturating_sub(HORIZON_LEAD_MS + unit - 1)
    } else {
        behind_ms
    };
    if regression > 0 && !flags.regression {
        flags.regression = true;
        probe::rmw();
        c.clock_regressions.fetch_add(1, Ordering::Relaxed);
        probe::rmw();
        c.max_regression_ms.fetch_max(regression, Ordering::Relaxed);
    }
    if regression > cfg.max_clock_wait_ms {
        probe::rmw();
        rm.behind_word.fetch_max(value, Ordering::Relaxed);
        let resume_unix_ms = b.unix_ms_of(tick);
        let max_wait_ms = cfg.max_clock_wait_ms;
        return Err(if fresh {
            GenError::ClockBehindHorizon {
                behind_ms: seed.saturating_sub(now) * unit,
                max_wait_ms,
                resume_unix_ms,
            }
        } else {
            GenError::ClockBehind {
                behind_ms,
                max_wait_ms,
                resume_unix_ms,
            }
        });
    }
    // Sleep until the millisecond before `value`'s tick, then spin (or sleep) into it.
    Ok(Pause::Sleep {
        ms: (b.unix_ms_of(tick) - 1)
            .saturating_sub(now_unix)
            .clamp(1, 10),
    })
}

/// Makes sure the durable horizon covers `unix_ms`, pushing it ahead as `next_id` does: for
/// uuid_v7(), whose UUIDs share the horizon so that they too keep their order across restarts,
/// crashes and failovers.
pub fn cover(state: &SharedState, unix_ms: u64, env: &mut impl Env) -> Result<(), GenError> {
    while !horizon_allows(state, unix_ms, env)? {}
    Ok(())
}

/// Why `raise_floor` raised nothing.
#[derive(Debug)]
pub enum FloorError {
    /// The id's tick ends further ahead of the clock than the generator would wait (the
    /// horizon's lead plus max_clock_wait): not an id of this layout and epoch made on this
    /// clock, or a clock far behind the one that made it.
    Ahead {
        floor_unix_ms: u64,
        now_unix_ms: u64,
        allowed_ms: u64,
    },
    /// The horizon could not be written: the floor is not raised.
    Horizon(std::io::Error),
}

impl std::fmt::Display for FloorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Ahead {
                floor_unix_ms,
                now_unix_ms,
                allowed_ms,
            } => write!(
                f,
                "the id's time ({floor_unix_ms} ms since 1970) is {} ms ahead of the system clock, \
                 more than the {allowed_ms} ms the generator would wait",
                floor_unix_ms - now_unix_ms
            ),
            Self::Horizon(e) => write!(f, "could not record the snowflake horizon: {e}"),
        }
    }
}

/// Raises the generator's floor past `id`, durably: no id at or below it is issued from here
/// on, by this run or by any later one (a restart, crash recovery with the clock set back, a
/// standby promoted after replaying the record). For a table whose ids came from another
/// generator of the same layout (Instagram's `next_id()`), switched to this one.
///
/// `id` is read in this server's layout: every id of a later tick is greater, whatever its
/// worker and sequence, so the floor is the end of `id`'s tick. The horizon is raised to it and
/// persisted first, under the writer slot (as a push), then the run moves to the next tick
/// (`resume_after`, safe while others issue). A negative id raises nothing. Returns the lowest
/// id the run can issue next with `cfg.worker_id` (the next ones may be higher, never lower).
pub fn raise_floor(
    state: &SharedState,
    cfg: &Config,
    id: i64,
    env: &mut impl Env,
) -> Result<i64, FloorError> {
    let b = &cfg.base;
    if let Ok(f) = b.layout.decompose(id) {
        let floor_unix_ms = b.unix_ms_of(f.time) + b.layout.unit_ms() - 1;
        let now_unix_ms = env.now_unix_ms();
        let allowed_ms = HORIZON_LEAD_MS + cfg.max_clock_wait_ms;
        if f.time >= b.layout.max_time() || floor_unix_ms > now_unix_ms + allowed_ms {
            return Err(FloorError::Ahead {
                floor_unix_ms,
                now_unix_ms,
                allowed_ms,
            });
        }
        while state.horizon() < floor_unix_ms {
            if env.try_begin_push() {
                let persisted = if state.horizon() < floor_unix_ms {
                    env.persist_horizon(floor_unix_ms).map(|()| {
                        probe::rmw();
                        let rm = &state.read_mostly.0;
                        rm.horizon_unix_ms
                            .fetch_max(floor_unix_ms, Ordering::AcqRel);
                    })
                } else {
                    Ok(())
                };
                env.end_push();
                persisted.map_err(FloorError::Horizon)?;
            } else {
                let horizon = state.horizon();
                env.wait_for_push(&|| state.horizon() != horizon);
            }
        }
        state.resume_after(b, floor_unix_ms);
    }
    let (tick, sequence) = b.unpack(state.word.0.load(Ordering::Acquire));
    Ok(b.layout
        .compose(Fields {
            time: tick,
            worker: u64::from(cfg.worker_id),
            sequence,
        })
        .expect("a tick within the layout"))
}

/// May an id from `now_unix` be issued? Pushes the durable horizon ahead when the clock gets
/// within half a lead of it, so that under steady load one backend writes it about once every
/// `HORIZON_LEAD_MS / 2` while the others carry on below the old horizon. Returns false when
/// the caller must look again (another backend is writing and the clock has reached the
/// horizon: it waited for that writer without spinning).
fn horizon_allows(
    state: &SharedState,
    now_unix: u64,
    env: &mut impl Env,
) -> Result<bool, GenError> {
    let horizon = state.horizon();
    if now_unix + HORIZON_LEAD_MS / 2 <= horizon {
        return Ok(true);
    }
    if env.try_begin_push() {
        let pushed = push(state, now_unix, env);
        env.end_push();
        pushed?;
        return Ok(true);
    }
    if now_unix <= horizon {
        return Ok(true);
    }
    env.wait_for_push(&|| state.horizon() != horizon);
    Ok(false)
}

/// With the writer slot held: extends the horizon unless another writer just did.
fn push(state: &SharedState, now_unix: u64, env: &mut impl Env) -> Result<(), GenError> {
    let horizon = state.horizon();
    if now_unix + HORIZON_LEAD_MS / 2 > horizon {
        let new_horizon = now_unix + HORIZON_LEAD_MS;
        env.persist_horizon(new_horizon)
            .map_err(GenError::Horizon)?;
        probe::rmw();
        state
            .read_mostly
            .0
            .horizon_unix_ms
            .fetch_max(new_horizon, Ordering::AcqRel);
    }
    Ok(())
}

#[cfg(all(test, feature = "loom"))]
mod loom_tests;
#[cfg(all(test, not(feature = "loom")))]
mod tests;
