//! The generator's protocol under every interleaving of a few threads (loom): the common path,
//! the start of a millisecond, an exhausted millisecond and the horizon push. Each model runs
//! the real `next_id` on loom's atomics; the environment is a clock per thread that a pause
//! moves on, and a writer slot that is a loom atomic.
//!
//! cargo test --lib --features loom loom_

use super::*;
use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

const EPOCH: u64 = TWITTER_EPOCH_MS;
const BASE: TimeBase = TimeBase::twitter(EPOCH);
const T0: u64 = 1_767_225_600_000;

struct ModelEnv {
    now: u64,
    slot: Arc<AtomicBool>,
    persisted: Arc<AtomicU64>,
}

impl Env for ModelEnv {
    fn now_unix_ms(&mut self) -> u64 {
        self.now
    }
    fn pause(&mut self, pause: Pause) {
        self.now += match pause {
            Pause::Spin => 1,
            Pause::Sleep { ms } => ms,
        };
        thread::yield_now();
    }
    fn persist_horizon(&mut self, unix_ms: u64) -> std::io::Result<()> {
        self.persisted.fetch_max(unix_ms, Ordering::SeqCst);
        Ok(())
    }
    fn try_begin_push(&mut self) -> bool {
        self.slot
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
    fn end_push(&mut self) {
        self.slot.store(false, Ordering::Release);
    }
    fn wait_for_push(&mut self, _moved: &dyn Fn() -> bool) {
        thread::yield_now();
    }
}

fn cfg() -> Config {
    Config {
        base: BASE,
        worker_id: 3,
        max_clock_wait_ms: 1_000,
    }
}

/// Runs `threads` callers, each taking `per_thread` ids at clock `now`, on a state prepared by
/// `prepare`; checks that all ids are distinct, that each caller's increase, and that no id is
/// beyond the horizon that was persisted (or seeded).
fn model(threads: usize, per_thread: usize, now: u64, prepare: fn(&SharedState)) {
    // Every interleaving with up to three preemptions (loom's usual bound: bugs of this kind
    // show within two or three); without a bound the waits' loops make the space explode.
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(move || {
        let state = Arc::new(SharedState::default());
        prepare(&state);
        let before = state.stats(&BASE).ids_issued;
        let seeded = state.horizon();
        let slot = Arc::new(AtomicBool::new(false));
        let persisted = Arc::new(AtomicU64::new(seeded));
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (state, slot, persisted) = (state.clone(), slot.clone(), persisted.clone());
                thread::spawn(move || {
                    let mut env = ModelEnv {
                        now,
                        slot,
                        persisted,
                    };
                    (0..per_thread)
                        .map(|_| next_id(&state, &cfg(), &mut env).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all = Vec::new();
        for h in handles {
            let ids = h.join().unwrap();
            assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
            all.extend(ids);
        }
        let horizon = persisted.load(Ordering::SeqCst);
        for &id in &all {
            assert!(
                BASE.layout.decompose(id).unwrap().time + EPOCH <= horizon,
                "{id} beyond {horizon}"
            );
        }
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "a duplicate id");
        assert_eq!(state.stats(&BASE).ids_issued, before + n as u64);
    });
}

/// A run that has begun: T0's millisecond started, the next value `next`, the horizon a lead
/// ahead.
fn running_at(s: &SharedState, next: u64) {
    s.seed(&BASE, T0 + HORIZON_LEAD_MS);
    s.word.0.store(next, Ordering::SeqCst);
    s.counters
        .0
        .segment_start
        .store(BASE.pack(T0 - EPOCH, 0), Ordering::SeqCst);
    s.read_mostly.0.started.store(true, Ordering::SeqCst);
}

/// Within one millisecond: fetch_add alone.
#[test]
fn loom_the_common_path() {
    model(3, 2, T0, |s| running_at(s, BASE.pack(T0 - EPOCH, 0)));
}

/// The clock has moved on from the word's millisecond: values are given up and one caller
/// starts the new millisecond with a compare-and-swap that others race.
#[test]
fn loom_the_start_of_a_millisecond() {
    model(3, 1, T0 + 5, |s| running_at(s, BASE.pack(T0 - EPOCH, 7)));
}

/// One id left in the millisecond: the others carry into the next and wait for the clock.
#[test]
fn loom_an_exhausted_millisecond() {
    model(2, 2, T0, |s| {
        running_at(s, BASE.pack(T0 - EPOCH, BASE.layout.max_sequence()))
    });
}

/// The clock has reached the horizon: one caller pushes it (the slot), the others wait for
/// it, and no id comes from beyond what was persisted.
#[test]
fn loom_the_horizon_push() {
    model(2, 1, T0 + 1, |s| {
        s.seed(&BASE, T0);
    });
}

/// One caller takes `ids` ids at clock `now` while the registry's thread moves the run past
/// `floor_unix_ms` (`resume_after`, as for a worker id taken over while backends issue ids
/// under it unverified); then one more id is taken at `now`. No id is issued twice, each
/// caller's increase, and the id taken after `resume_after` returned is above every earlier
/// one and comes from after the floor: the word never moves down.
fn model_resume_after(ids: usize, now: u64, floor_unix_ms: u64, prepare: fn(&SharedState)) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(move || {
        let state = Arc::new(SharedState::default());
        prepare(&state);
        let slot = Arc::new(AtomicBool::new(false));
        let persisted = Arc::new(AtomicU64::new(state.horizon()));
        let env = |now| ModelEnv {
            now,
            slot: slot.clone(),
            persisted: persisted.clone(),
        };
        let caller = {
            let (state, mut env) = (state.clone(), env(now));
            thread::spawn(move || {
                (0..ids)
                    .map(|_| next_id(&state, &cfg(), &mut env).unwrap())
                    .collect::<Vec<_>>()
            })
        };
        let registry = {
            let state = state.clone();
            thread::spawn(move || state.resume_after(&BASE, floor_unix_ms))
        };
        let mut all = caller.join().unwrap();
        assert!(all.windows(2).all(|w| w[0] < w[1]), "{all:?}");
        registry.join().unwrap();
        let after = next_id(&state, &cfg(), &mut env(now)).unwrap();
        assert!(
            all.iter().all(|&id| id < after),
            "{after} after resume_after is not above {all:?}"
        );
        assert!(
            BASE.layout.decompose(after).unwrap().time + EPOCH > floor_unix_ms,
            "{after} is not after the floor {floor_unix_ms}"
        );
        all.push(after);
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "a duplicate id");
    });
}

/// Two values left in the millisecond: the caller's `fetch_add`s carry the word past the start
/// of the next millisecond, the one `resume_after` moves the run to, while it looks.
#[test]
fn loom_resume_after_racing_the_common_path() {
    model_resume_after(3, T0, T0, |s| {
        running_at(s, BASE.pack(T0 - EPOCH, BASE.layout.max_sequence() - 1))
    });
}

/// The caller starts a millisecond later than the floor's with a compare-and-swap while
/// `resume_after` moves the run to just past the floor.
#[test]
fn loom_resume_after_racing_the_start_of_a_millisecond() {
    model_resume_after(1, T0 + 5, T0 + 2, |s| {
        running_at(s, BASE.pack(T0 - EPOCH, 7))
    });
}
