//! Snowflake ids: the 64-bit layout and the generator state machine.
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

use std::sync::atomic::{AtomicU64, Ordering};

pub const TIMESTAMP_BITS: u32 = 41;
pub const WORKER_BITS: u32 = 10;
pub const SEQUENCE_BITS: u32 = 12;

pub const MAX_MILLIS: u64 = (1 << TIMESTAMP_BITS) - 1;
pub const MAX_WORKER_ID: u16 = (1 << WORKER_BITS) - 1;
pub const MAX_SEQUENCE: u16 = (1 << SEQUENCE_BITS) - 1;

const WORKER_SHIFT: u32 = SEQUENCE_BITS;
const MILLIS_SHIFT: u32 = SEQUENCE_BITS + WORKER_BITS;

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

/// The three fields of an id. `millis` counts from the id epoch, not from 1970.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts {
    pub millis: u64,
    pub worker_id: u16,
    pub sequence: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutError {
    MillisOutOfRange(u64),
    WorkerOutOfRange(u16),
    SequenceOutOfRange(u16),
    NegativeId(i64),
}

impl std::fmt::Display for LayoutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::MillisOutOfRange(m) => {
                write!(
                    f,
                    "{m} ms since the epoch does not fit in 41 bits (at most {MAX_MILLIS})"
                )
            }
            Self::WorkerOutOfRange(w) => {
                write!(f, "worker id {w} is out of range 0..{MAX_WORKER_ID}")
            }
            Self::SequenceOutOfRange(s) => {
                write!(f, "sequence {s} is out of range 0..{MAX_SEQUENCE}")
            }
            Self::NegativeId(id) => write!(f, "snowflake id {id} is negative: bit 63 is always 0"),
        }
    }
}

pub fn compose(p: Parts) -> Result<i64, LayoutError> {
    if p.millis > MAX_MILLIS {
        return Err(LayoutError::MillisOutOfRange(p.millis));
    }
    if p.worker_id > MAX_WORKER_ID {
        return Err(LayoutError::WorkerOutOfRange(p.worker_id));
    }
    if p.sequence > MAX_SEQUENCE {
        return Err(LayoutError::SequenceOutOfRange(p.sequence));
    }
    Ok(((p.millis << MILLIS_SHIFT)
        | (u64::from(p.worker_id) << WORKER_SHIFT)
        | u64::from(p.sequence)) as i64)
}

pub fn decompose(id: i64) -> Result<Parts, LayoutError> {
    if id < 0 {
        return Err(LayoutError::NegativeId(id));
    }
    let id = id as u64;
    Ok(Parts {
        millis: id >> MILLIS_SHIFT,
        worker_id: ((id >> WORKER_SHIFT) & u64::from(MAX_WORKER_ID)) as u16,
        sequence: (id & u64::from(MAX_SEQUENCE)) as u16,
    })
}

/// The smallest id whose timestamp is `millis`: worker 0, sequence 0.
pub fn lowest_id_at(millis: u64) -> Result<i64, LayoutError> {
    compose(Parts {
        millis,
        worker_id: 0,
        sequence: 0,
    })
}

/// The latest epoch accepted, in Unix ms (2038-01-19): every id under it still decodes to a
/// PostgreSQL timestamp, and it is the bound the decoders' explicit-epoch forms accept too.
pub(crate) const MAX_EPOCH_UNIX_MS: u64 = i32::MAX as u64 * 1000;

/// Checks an epoch's range, not the clock: a clock before the epoch, or so far after it that
/// the milliseconds overflow 41 bits, is reported by `next_id` when an id is asked for.
pub(crate) fn check_epoch(epoch_unix_ms: u64) -> Result<u64, String> {
    if epoch_unix_ms > MAX_EPOCH_UNIX_MS {
        return Err(format!(
            "the epoch {epoch_unix_ms} is after {MAX_EPOCH_UNIX_MS} (2038-01-19), the latest accepted"
        ));
    }
    Ok(epoch_unix_ms)
}

// ---- the generator ------------------------------------------------------------------------

/// `millis << 12 | sequence` of the last id issued: the one word every backend advances by CAS.
fn pack(millis: u64, sequence: u16) -> u64 {
    (millis << SEQUENCE_BITS) | u64::from(sequence)
}

fn unpack(word: u64) -> (u64, u16) {
    (
        word >> SEQUENCE_BITS,
        (word & u64::from(MAX_SEQUENCE)) as u16,
    )
}

/// What to do next, given the last word issued and the clock (both in ms since the id epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Issue {
        millis: u64,
        sequence: u16,
    },
    /// All 4,096 sequence numbers of this millisecond are taken: wait for the next one.
    Exhausted,
    /// The clock reads earlier than the last millisecond issued.
    ClockBehind {
        behind_ms: u64,
    },
}

pub fn decide(last_word: u64, now_millis: u64) -> Decision {
    let (last_millis, last_sequence) = unpack(last_word);
    if now_millis > last_millis {
        Decision::Issue {
            millis: now_millis,
            sequence: 0,
        }
    } else if now_millis == last_millis {
        if last_sequence < MAX_SEQUENCE {
            Decision::Issue {
                millis: now_millis,
                sequence: last_sequence + 1,
            }
        } else {
            Decision::Exhausted
        }
    } else {
        Decision::ClockBehind {
            behind_ms: last_millis - now_millis,
        }
    }
}

/// The generator's state, shared by every backend of a server. All fields are plain atomics so
/// that the struct can live in Postgres shared memory as it is.
#[derive(Default, Debug)]
pub struct SharedState {
    /// `millis << 12 | sequence` of the last id issued (or the seed, see `seed_word`).
    word: AtomicU64,
    /// The word this run started from: a restart seeds it just past the persisted horizon, with
    /// the sequence full, so the first id must come from a later millisecond. Not an issued id.
    seed_word: AtomicU64,
    /// Unix ms up to which ids may be issued: durably recorded before any id beyond it. Who may
    /// raise it is the environment's business (`Env::try_begin_push`): a lock that is released
    /// on every exit of its holder, which plain atomics cannot promise.
    horizon_unix_ms: AtomicU64,
    /// Ids issued in milliseconds that are over; the current one is added on read.
    completed: AtomicU64,
    exhaustion_waits: AtomicU64,
    clock_regressions: AtomicU64,
    max_regression_ms: AtomicU64,
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
    /// Starts a run: ids will come from milliseconds after `horizon_unix_ms` (the persisted
    /// high-water mark), which is also the horizon until it is extended.
    pub fn seed(&self, epoch_unix_ms: u64, horizon_unix_ms: u64) {
        let seed = match horizon_unix_ms.checked_sub(epoch_unix_ms) {
            Some(millis) => pack(millis.min(MAX_MILLIS), MAX_SEQUENCE),
            None => 0,
        };
        self.word.store(seed, Ordering::SeqCst);
        self.seed_word.store(seed, Ordering::SeqCst);
        self.horizon_unix_ms
            .store(horizon_unix_ms, Ordering::SeqCst);
    }

    pub fn stats(&self) -> Stats {
        let word = self.word.load(Ordering::Acquire);
        let fresh = word == self.seed_word.load(Ordering::Acquire);
        let (millis, sequence) = unpack(word);
        let current = if fresh { 0 } else { u64::from(sequence) + 1 };
        Stats {
            ids_issued: self.completed.load(Ordering::Relaxed) + current,
            exhaustion_waits: self.exhaustion_waits.load(Ordering::Relaxed),
            clock_regressions: self.clock_regressions.load(Ordering::Relaxed),
            max_regression_ms: self.max_regression_ms.load(Ordering::Relaxed),
            last_millis: (!fresh).then_some(millis),
            horizon_unix_ms: self.horizon_unix_ms.load(Ordering::Acquire),
        }
    }

    /// Raises the horizon to `horizon_unix_ms` when it is higher, and starts the run again just
    /// past it, as a restart would: WAL replay (a standby, crash recovery, a point-in-time
    /// restore) of a horizon the primary recorded. Only while no id is issued from this state
    /// (recovery). Returns whether it rose.
    pub fn replay_horizon(&self, epoch_unix_ms: u64, horizon_unix_ms: u64) -> bool {
        if horizon_unix_ms <= self.horizon_unix_ms.load(Ordering::Acquire) {
            return false;
        }
        self.seed(epoch_unix_ms, horizon_unix_ms);
        true
    }

    /// The last millisecond issued (Unix ms), or the seed: what a clean shutdown records.
    pub fn high_water_unix_ms(&self, epoch_unix_ms: u64) -> u64 {
        unpack(self.word.load(Ordering::Acquire)).0 + epoch_unix_ms
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
    /// 41 bits of milliseconds are used up: the epoch is about 69.7 years old.
    Overflow {
        now_unix_ms: u64,
        epoch_unix_ms: u64,
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
            Self::Overflow { now_unix_ms, epoch_unix_ms } => write!(
                f,
                "41 bits of milliseconds since idgen.epoch ({epoch_unix_ms}) are used up \
                 at the system clock's {now_unix_ms} ms since 1970"
            ),
            Self::Horizon(e) => write!(f, "could not record the snowflake horizon: {e}"),
        }
    }
}

/// Fixed per server run: the epoch and worker id cannot change while the server is up.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub epoch_unix_ms: u64,
    pub worker_id: u16,
    pub max_clock_wait_ms: u64,
}

/// Issues the next id: strictly greater than every id this state issued before, in every
/// process sharing `state`, and never from a millisecond at or below the persisted horizon of
/// an earlier run.
pub fn next_id(state: &SharedState, cfg: &Config, env: &mut impl Env) -> Result<i64, GenError> {
    debug_assert!(cfg.worker_id <= MAX_WORKER_ID);
    let mut waited_exhausted = false;
    let mut counted_regression = false;
    loop {
        // Load the word before reading the clock. The other order races: another backend can
        // issue from the next millisecond between our clock read and our load, and we would
        // take our own stale reading for a clock step back (and sleep for nothing).
        let last = state.word.load(Ordering::Acquire);
        let now_unix = env.now_unix_ms();
        let now = now_unix
            .checked_sub(cfg.epoch_unix_ms)
            .ok_or(GenError::ClockBeforeEpoch {
                now_unix_ms: now_unix,
                epoch_unix_ms: cfg.epoch_unix_ms,
            })?;
        if now > MAX_MILLIS {
            return Err(GenError::Overflow {
                now_unix_ms: now_unix,
                epoch_unix_ms: cfg.epoch_unix_ms,
            });
        }
        match decide(last, now) {
            Decision::Issue { millis, sequence } => {
                if !horizon_allows(state, now_unix, env)? {
                    continue;
                }
                let next = pack(millis, sequence);
                if state
                    .word
                    .compare_exchange_weak(last, next, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    continue;
                }
                if sequence == 0 && last != state.seed_word.load(Ordering::Relaxed) {
                    // `last` closed a millisecond: count its ids once, here, not once per id.
                    state
                        .completed
                        .fetch_add(u64::from(unpack(last).1) + 1, Ordering::Relaxed);
                }
                let parts = Parts {
                    millis,
                    worker_id: cfg.worker_id,
                    sequence,
                };
                return Ok(compose(parts).expect("fields checked above"));
            }
            Decision::Exhausted => {
                if !waited_exhausted {
                    waited_exhausted = true;
                    state.exhaustion_waits.fetch_add(1, Ordering::Relaxed);
                }
                env.pause(Pause::Spin);
            }
            Decision::ClockBehind { behind_ms } => {
                // Before the first id of a run, the word is the seed: the horizon recorded
                // before it, up to a lead ahead of the clock that wrote it. Waiting out that
                // lead is what a crash costs, not a clock that went back: only what lies beyond
                // the lead is a regression, and only that is held against max_clock_wait.
                let fresh = last == state.seed_word.load(Ordering::Relaxed);
                let lead = if fresh { HORIZON_LEAD_MS } else { 0 };
                let regression = behind_ms.saturating_sub(lead);
                if regression > 0 && !counted_regression {
                    counted_regression = true;
                    state.clock_regressions.fetch_add(1, Ordering::Relaxed);
                    state
                        .max_regression_ms
                        .fetch_max(regression, Ordering::Relaxed);
                }
                if regression > cfg.max_clock_wait_ms {
                    let resume_unix_ms = unpack(last).0 + cfg.epoch_unix_ms + 1;
                    let max_wait_ms = cfg.max_clock_wait_ms;
                    return Err(if fresh {
                        GenError::ClockBehindHorizon {
                            behind_ms,
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
                env.pause(Pause::Sleep {
                    ms: behind_ms.min(10),
                });
            }
        }
    }
}

/// Makes sure the durable horizon covers `unix_ms`, pushing it ahead as `next_id` does: for
/// uuid_v7(), whose UUIDs share the horizon so that they too keep their order across restarts,
/// crashes and failovers.
pub fn cover(state: &SharedState, unix_ms: u64, env: &mut impl Env) -> Result<(), GenError> {
    while !horizon_allows(state, unix_ms, env)? {}
    Ok(())
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
    let horizon = state.horizon_unix_ms.load(Ordering::Acquire);
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
    env.wait_for_push(&|| state.horizon_unix_ms.load(Ordering::Acquire) != horizon);
    Ok(false)
}

/// With the writer slot held: extends the horizon unless another writer just did.
fn push(state: &SharedState, now_unix: u64, env: &mut impl Env) -> Result<(), GenError> {
    let horizon = state.horizon_unix_ms.load(Ordering::Acquire);
    if now_unix + HORIZON_LEAD_MS / 2 > horizon {
        let new_horizon = now_unix + HORIZON_LEAD_MS;
        env.persist_horizon(new_horizon)
            .map_err(GenError::Horizon)?;
        state
            .horizon_unix_ms
            .fetch_max(new_horizon, Ordering::AcqRel);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
