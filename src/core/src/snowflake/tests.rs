use super::*;
use crate::layout::LayoutError;
use proptest::prelude::*;
use std::collections::HashSet;

const EPOCH: u64 = TWITTER_EPOCH_MS;
const BASE: TimeBase = TimeBase::twitter(EPOCH);
const T0: u64 = 1_767_225_600_000; // 2026-01-01 00:00:00 UTC

/// A clock that stands still unless the test or a pause moves it.
struct FakeEnv {
    now: u64,
    persisted: Vec<u64>,
    spins: u64,
    sleeps: Vec<u64>,
    fail_persist: bool,
}

impl FakeEnv {
    fn at(now: u64) -> Self {
        FakeEnv {
            now,
            persisted: vec![],
            spins: 0,
            sleeps: vec![],
            fail_persist: false,
        }
    }
}

impl Env for FakeEnv {
    fn now_unix_ms(&mut self) -> u64 {
        self.now
    }
    fn pause(&mut self, pause: Pause) {
        match pause {
            // Exhaustion: the real clock would tick over within the millisecond.
            Pause::Spin => {
                self.spins += 1;
                self.now += 1;
            }
            Pause::Sleep { ms } => {
                self.sleeps.push(ms);
                self.now += ms;
            }
        }
    }
    fn persist_horizon(&mut self, unix_ms: u64) -> std::io::Result<()> {
        if self.fail_persist {
            return Err(std::io::Error::other("disk full"));
        }
        self.persisted.push(unix_ms);
        Ok(())
    }
    // One caller: the slot is always free.
    fn try_begin_push(&mut self) -> bool {
        true
    }
    fn end_push(&mut self) {}
    fn wait_for_push(&mut self, _moved: &dyn Fn() -> bool) {
        unreachable!("one caller never waits for another")
    }
}

/// The writer slot of the threaded tests: a flag, taken by compare-and-swap. (The Postgres
/// layer uses an LWLock, which is also released when its holder exits abnormally.)
#[derive(Default)]
struct Slot(std::sync::atomic::AtomicU32);

impl Slot {
    fn try_take(&self) -> bool {
        self.0
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
    fn release(&self) {
        self.0.store(0, Ordering::Release);
    }
}

/// The environment of the threaded tests: the real clock (or one a driver thread moves), the
/// persisted horizon as the highest value pushed, the writer slot above.
struct Threaded<'a> {
    driven: Option<&'a AtomicU64>,
    persisted: &'a AtomicU64,
    slot: &'a Slot,
}

impl<'a> Threaded<'a> {
    fn real(persisted: &'a AtomicU64, slot: &'a Slot) -> Self {
        Threaded {
            driven: None,
            persisted,
            slot,
        }
    }
}

impl Env for Threaded<'_> {
    fn now_unix_ms(&mut self) -> u64 {
        match self.driven {
            Some(clock) => clock.load(Ordering::SeqCst),
            None => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64,
        }
    }
    fn pause(&mut self, pause: Pause) {
        match (self.driven, pause) {
            // the driver moves the clock: let it run
            (Some(_), _) => std::thread::yield_now(),
            (None, Pause::Spin) => std::hint::spin_loop(),
            (None, Pause::Sleep { ms }) => std::thread::sleep(std::time::Duration::from_millis(ms)),
        }
    }
    fn persist_horizon(&mut self, unix_ms: u64) -> std::io::Result<()> {
        self.persisted.fetch_max(unix_ms, Ordering::SeqCst);
        Ok(())
    }
    fn try_begin_push(&mut self) -> bool {
        self.slot.try_take()
    }
    fn end_push(&mut self) {
        self.slot.release();
    }
    fn wait_for_push(&mut self, moved: &dyn Fn() -> bool) {
        while !moved() && self.slot.0.load(Ordering::Acquire) != 0 {
            std::thread::yield_now();
        }
    }
}

fn cfg(worker_id: u16, max_clock_wait_ms: u64) -> Config {
    Config {
        base: BASE,
        worker_id,
        max_clock_wait_ms,
    }
}

fn fresh() -> SharedState {
    let s = SharedState::default();
    s.seed(&BASE, 0);
    s
}

/// The id of Twitter's layout (`BASE`'s) with these fields, or why there is none.
fn twitter(time: u64, worker: u64, sequence: u64) -> Result<i64, LayoutError> {
    Layout::TWITTER.compose(Fields {
        time,
        worker,
        sequence,
    })
}

/// Twitter's fields, `(time, worker, sequence)`, each anywhere in its range.
fn twitter_fields() -> impl Strategy<Value = (u64, u64, u64)> {
    let l = Layout::TWITTER;
    (0..=l.max_time(), 0..=l.max_worker(), 0..=l.max_sequence())
}

proptest! {
    /// Twitter's worker field sits above its sequence: its ids order like their three fields in
    /// that order, across workers too (`crate::layout` tests the order within a worker, and
    /// across times, for every layout).
    #[test]
    fn ids_order_like_their_fields(a in twitter_fields(), b in twitter_fields()) {
        let id = |(time, worker, sequence)| twitter(time, worker, sequence).unwrap();
        prop_assert_eq!(id(a).cmp(&id(b)), a.cmp(&b));
    }

    /// Twitter's fields fill all 63 bits: every non-negative bigint decodes to fields that
    /// compose back to it.
    #[test]
    fn every_non_negative_id_decomposes_and_recomposes(id in 0..=i64::MAX) {
        let l = Layout::TWITTER;
        prop_assert_eq!(l.compose(l.decompose(id).unwrap()).unwrap(), id);
    }

    /// Whatever the clock does — stand still, jump ahead, step back a little or a lot — every id
    /// issued is greater than the one before, and none lies beyond the persisted horizon.
    #[test]
    fn never_a_duplicate_or_a_decrease_under_any_clock(
        steps in prop::collection::vec((-3_000i64..3_000, 1usize..5_000), 1..40),
        max_wait in 0u64..2_000,
    ) {
        run_under_a_moving_clock(&fresh(), &cfg(7, max_wait), &steps)?;
    }
}

/// The law the generator keeps whatever the clock does (each step: move the clock by `jump` ms,
/// then ask `count` ids): every id is larger than the one before, carries the worker id, and
/// none comes from a tick that begins after the persisted horizon; a clock further behind than
/// the wait allowed ends the step with `ClockBehind`, nothing else goes wrong. For the
/// default layout at depth here, for every layout in `tests/layouts.rs`.
fn run_under_a_moving_clock(
    state: &SharedState,
    config: &Config,
    steps: &[(i64, usize)],
) -> Result<(), TestCaseError> {
    let layout = config.base.layout;
    let mut env = FakeEnv::at(T0);
    let mut last = -1i64;
    for &(jump, count) in steps {
        env.now = env.now.checked_add_signed(jump).unwrap();
        for _ in 0..count {
            match next_id(state, config, &mut env) {
                Ok(id) => {
                    prop_assert!(id > last, "{id} after {last}");
                    let f = layout.decompose(id).unwrap();
                    prop_assert_eq!(f.worker, u64::from(config.worker_id));
                    prop_assert!(
                        config.base.unix_ms_of(f.time) <= *env.persisted.iter().max().unwrap()
                    );
                    last = id;
                }
                Err(GenError::ClockBehind { behind_ms, .. }) => {
                    prop_assert!(behind_ms > config.max_clock_wait_ms);
                    break;
                }
                Err(e) => prop_assert!(false, "unexpected {e}"),
            }
        }
    }
    Ok(())
}

#[test]
fn bad_fields_and_negative_ids_are_refused() {
    assert_eq!(
        twitter(MAX_MILLIS + 1, 0, 0),
        Err(LayoutError::TimeOutOfRange(MAX_MILLIS + 1, MAX_MILLIS))
    );
    assert_eq!(
        twitter(0, 1024, 0),
        Err(LayoutError::WorkerOutOfRange(1024, 1023))
    );
    assert_eq!(
        twitter(0, 0, 4096),
        Err(LayoutError::SequenceOutOfRange(4096, 4095))
    );
    assert_eq!(
        Layout::TWITTER.decompose(-1),
        Err(LayoutError::NegativeId(-1))
    );
}

#[test]
fn the_layout_is_the_documented_one() {
    // 1 ms after the epoch, worker 1, sequence 1: bits 22, 12 and 0.
    assert_eq!(twitter(1, 1, 1), Ok((1 << 22) | (1 << 12) | 1));
    assert_eq!(twitter(MAX_MILLIS, 1023, 4095), Ok(i64::MAX));
    // the horizon's bound (MAX_MILLIS) is the last millisecond of this layout's time field
    assert_eq!(MAX_MILLIS, Layout::TWITTER.max_time());
}

#[test]
fn epoch_checks_range_only_and_never_the_clock() {
    assert_eq!(check_epoch(EPOCH), Ok(EPOCH));
    assert_eq!(check_epoch(0), Ok(0));
    assert_eq!(check_epoch(MAX_EPOCH_UNIX_MS), Ok(MAX_EPOCH_UNIX_MS));
    assert!(check_epoch(MAX_EPOCH_UNIX_MS + 1)
        .unwrap_err()
        .contains("latest accepted"));
    // An epoch after today's clock is accepted at start-up (a machine may boot with its clock
    // behind); next_id reports such a clock instead (the_clock_before_the_epoch_or_past_41_bits_is_an_error).
    assert_eq!(check_epoch(T0 + 86_400_000), Ok(T0 + 86_400_000));
}

#[test]
fn same_millisecond_counts_the_sequence_up() {
    let state = fresh();
    let mut env = FakeEnv::at(T0);
    let ids: Vec<_> = (0..3)
        .map(|_| next_id(&state, &cfg(5, 0), &mut env).unwrap())
        .collect();
    let fields: Vec<_> = ids
        .iter()
        .map(|&id| Layout::TWITTER.decompose(id).unwrap())
        .collect();
    for (i, f) in fields.iter().enumerate() {
        assert_eq!(
            *f,
            Fields {
                time: T0 - EPOCH,
                worker: 5,
                sequence: i as u64
            }
        );
    }
    assert_eq!(env.spins, 0);
}

#[test]
fn an_exhausted_millisecond_waits_for_the_next() {
    let state = fresh();
    let mut env = FakeEnv::at(T0);
    for _ in 0..4096 {
        next_id(&state, &cfg(0, 0), &mut env).unwrap();
    }
    assert_eq!(env.now, T0, "4,096 ids fit in one millisecond");
    let id = next_id(&state, &cfg(0, 0), &mut env).unwrap();
    assert_eq!(
        Layout::TWITTER.decompose(id).unwrap(),
        Fields {
            time: T0 + 1 - EPOCH,
            worker: 0,
            sequence: 0
        }
    );
    assert_eq!(env.spins, 1);
    let stats = state.stats(&BASE);
    assert_eq!(stats.exhaustion_waits, 1);
    assert_eq!(stats.ids_issued, 4097);
}

#[test]
fn a_clock_step_back_within_the_limit_waits_it_out() {
    let state = fresh();
    let mut env = FakeEnv::at(T0);
    let before = next_id(&state, &cfg(0, 100), &mut env).unwrap();
    env.now = T0 - 40;
    let after = next_id(&state, &cfg(0, 100), &mut env).unwrap();
    assert!(after > before);
    assert_eq!(
        (env.sleeps.iter().sum::<u64>(), env.spins),
        (39, 1),
        "slept until the clock was a millisecond from T0, then spun into it"
    );
    assert_eq!(env.now, T0);
    assert_eq!(Layout::TWITTER.decompose(after).unwrap().time, T0 - EPOCH);
    let stats = state.stats(&BASE);
    assert_eq!((stats.clock_regressions, stats.max_regression_ms), (1, 40));
}

#[test]
fn a_clock_step_back_beyond_the_limit_is_an_error_and_issues_nothing() {
    let state = fresh();
    let mut env = FakeEnv::at(T0);
    next_id(&state, &cfg(0, 100), &mut env).unwrap();
    let word_before = state.word.0.load(Ordering::SeqCst);
    env.now = T0 - 101;
    match next_id(&state, &cfg(0, 100), &mut env) {
        Err(GenError::ClockBehind {
            behind_ms: 101,
            max_wait_ms: 100,
            resume_unix_ms,
        }) => {
            // The next id is the next of T0's: issued once the clock is back at T0.
            assert_eq!(resume_unix_ms, T0)
        }
        other => panic!("expected ClockBehind, got {other:?}"),
    }
    assert!(
        env.sleeps.is_empty(),
        "no point waiting for a clock that cannot catch up in time"
    );
    // The failed call gave up the one value it took; the next ones, while the clock is behind,
    // take none: an error storm does not push the word ahead of the clock.
    assert_eq!(state.word.0.load(Ordering::SeqCst), word_before + 1);
    for _ in 0..100 {
        assert!(next_id(&state, &cfg(0, 100), &mut env).is_err());
    }
    assert_eq!(state.word.0.load(Ordering::SeqCst), word_before + 1);
    assert_eq!(state.stats(&BASE).ids_issued, 1);
    env.now = T0;
    let next = next_id(&state, &cfg(0, 100), &mut env).unwrap();
    assert_eq!(Layout::TWITTER.decompose(next).unwrap().time, T0 - EPOCH);
    assert_eq!(state.stats(&BASE).ids_issued, 2);
}

#[test]
fn the_horizon_is_persisted_before_an_id_beyond_it() {
    let state = fresh();
    let mut env = FakeEnv::at(T0);
    next_id(&state, &cfg(0, 0), &mut env).unwrap();
    assert_eq!(env.persisted, vec![T0 + HORIZON_LEAD_MS]);
    // Within the first half of the lead nothing more is written ...
    env.now = T0 + HORIZON_LEAD_MS / 2;
    next_id(&state, &cfg(0, 0), &mut env).unwrap();
    assert_eq!(env.persisted.len(), 1);
    // ... past it, the horizon moves ahead again.
    env.now += 1;
    next_id(&state, &cfg(0, 0), &mut env).unwrap();
    assert_eq!(
        env.persisted,
        vec![
            T0 + HORIZON_LEAD_MS,
            T0 + HORIZON_LEAD_MS / 2 + 1 + HORIZON_LEAD_MS
        ]
    );
}

#[test]
fn a_failed_persist_issues_nothing_and_frees_the_writer() {
    let state = fresh();
    let mut env = FakeEnv::at(T0);
    env.fail_persist = true;
    assert!(matches!(
        next_id(&state, &cfg(0, 0), &mut env),
        Err(GenError::Horizon(_))
    ));
    assert_eq!(state.stats(&BASE).ids_issued, 0);
    env.fail_persist = false;
    next_id(&state, &cfg(0, 0), &mut env).expect("the writer slot was released");
}

#[test]
fn a_taken_over_worker_id_resumes_after_its_floor_and_still_pushes_the_horizon() {
    // The run starts from its own horizon; the registry says the id's last holder may have
    // issued up to 3 s later.
    let state = SharedState::default();
    state.seed(&BASE, T0);
    let floor = T0 + 3_000;
    assert!(state.resume_after(&BASE, floor));
    assert!(
        !state.resume_after(&BASE, floor - 10),
        "a lower floor moves nothing"
    );
    assert_eq!(
        state.stats(&BASE).horizon_unix_ms,
        T0,
        "the floor is not a durable horizon"
    );
    // The clock 2 s behind the floor: a wait within the lead plus max_clock_wait, then ids
    // from after the floor, with a horizon persisted that covers them.
    let mut env = FakeEnv::at(floor - 2_000);
    let id = next_id(&state, &cfg(3, 1_000), &mut env).unwrap();
    let millis = Layout::TWITTER.decompose(id).unwrap().time + EPOCH;
    assert_eq!(millis, floor + 1);
    assert!(
        *env.persisted.last().unwrap() >= millis,
        "{:?}",
        env.persisted
    );
    assert_eq!(state.stats(&BASE).ids_issued, 1);
}

#[test]
fn a_restart_resumes_above_the_persisted_mark_even_with_the_clock_set_back() {
    let first = fresh();
    let mut env = FakeEnv::at(T0);
    let mut last = 0;
    for _ in 0..10_000 {
        last = next_id(&first, &cfg(3, 1000), &mut env).unwrap();
    }
    let mark = *env.persisted.last().unwrap();

    // The server comes back with its clock 5 s behind: no id, a clear error.
    let second = SharedState::default();
    second.seed(&BASE, mark);
    let mut env = FakeEnv::at(T0 - 5_000);
    assert!(matches!(
        next_id(&second, &cfg(3, 1000), &mut env),
        Err(GenError::ClockBehindHorizon { .. })
    ));
    assert_eq!(second.stats(&BASE).ids_issued, 0);

    // Once the clock is within max_clock_wait of the mark, it waits and resumes above it.
    env.now = mark - 500;
    let resumed = next_id(&second, &cfg(3, 1000), &mut env).unwrap();
    assert!(resumed > last);
    assert_eq!(
        Layout::TWITTER.decompose(resumed).unwrap().time + EPOCH,
        mark + 1
    );
    assert_eq!(
        second.stats(&BASE).ids_issued,
        1,
        "the seed is not counted as an id"
    );
}

#[test]
fn a_clean_shutdown_records_the_last_millisecond_issued() {
    let state = fresh();
    let mut env = FakeEnv::at(T0);
    next_id(&state, &cfg(0, 0), &mut env).unwrap();
    assert_eq!(state.high_water_unix_ms(&BASE), T0);
    assert_eq!(state.stats(&BASE).last_millis, Some(T0 - EPOCH));
}

#[test]
fn the_clock_before_the_epoch_or_past_41_bits_is_an_error() {
    let state = fresh();
    let mut env = FakeEnv::at(EPOCH - 1);
    assert!(matches!(
        next_id(&state, &cfg(0, 0), &mut env),
        Err(GenError::ClockBeforeEpoch { .. })
    ));
    env.now = EPOCH + MAX_MILLIS + 1;
    assert!(matches!(
        next_id(&state, &cfg(0, 0), &mut env),
        Err(GenError::Overflow { .. })
    ));
}

/// What threads sharing one state handed out, a batch each: every batch increasing, no id twice,
/// and none past the horizon persisted. Returns how many ids there were.
fn distinct_increasing_and_persisted(batches: &[Vec<i64>], persisted: &AtomicU64) -> usize {
    let mut all = HashSet::new();
    for batch in batches {
        assert!(
            batch.windows(2).all(|w| w[0] < w[1]),
            "each thread's ids increase"
        );
        for &id in batch {
            assert!(all.insert(id), "duplicate {id}");
            assert!(
                Layout::TWITTER.decompose(id).unwrap().time + EPOCH
                    <= persisted.load(Ordering::SeqCst)
            );
        }
    }
    all.len()
}

/// Real threads on a real clock sharing one state, as backends share shared memory.
#[test]
fn concurrent_generators_never_collide() {
    let state = fresh();
    let persisted = AtomicU64::new(0);
    let slot = Slot::default();
    let per_thread = 100_000;
    let batches: Vec<Vec<i64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let mut env = Threaded::real(&persisted, &slot);
                    (0..per_thread)
                        .map(|_| next_id(&state, &cfg(9, 1000), &mut env).unwrap())
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let all = distinct_increasing_and_persisted(&batches, &persisted);
    assert_eq!(all, 4 * per_thread);
    assert_eq!(state.stats(&BASE).ids_issued, 4 * per_thread as u64);
    // The clock did not go back during the test: a racing peer must not look like it did.
    assert_eq!(state.stats(&BASE).clock_regressions, 0);
}

#[test]
fn a_replayed_horizon_restarts_the_run_past_it_and_never_lowers_it() {
    let s = fresh();
    let mut env = FakeEnv::at(T0);
    let before = next_id(&s, &cfg(1, 10_000), &mut env).unwrap();
    assert!(
        !s.replay_horizon(&BASE, T0),
        "a horizon at or below the current one is ignored"
    );
    // The primary (another worker id) recorded a horizon 3 s past this clock.
    assert!(s.replay_horizon(&BASE, T0 + 3_000));
    assert_eq!(s.stats(&BASE).horizon_unix_ms, T0 + 3_000);
    let after = next_id(&s, &cfg(2, 10_000), &mut env).unwrap();
    let fields = Layout::TWITTER.decompose(after).unwrap();
    assert_eq!(
        fields.time + EPOCH,
        T0 + 3_001,
        "strictly after the replayed horizon"
    );
    assert!(after > before);
    assert!(env.now >= T0 + 3_001, "it waited for its clock");
    assert!(
        env.sleeps.iter().sum::<u64>() >= 2_990,
        "by sleeping, not spinning"
    );
    assert!(!s.replay_horizon(&BASE, T0 + 2_000));
    assert!(s.stats(&BASE).horizon_unix_ms >= T0 + 3_000);
}

#[test]
fn cover_pushes_the_horizon_ahead_of_a_time_and_leaves_it_when_far_enough() {
    let s = fresh();
    let mut env = FakeEnv::at(T0);
    cover(&s, T0 + 5, &mut env).unwrap();
    assert_eq!(env.persisted, vec![T0 + 5 + HORIZON_LEAD_MS]);
    cover(&s, T0 + 10, &mut env).unwrap();
    assert_eq!(env.persisted.len(), 1, "still more than half a lead ahead");
    cover(&s, T0 + 5 + HORIZON_LEAD_MS / 2 + 1, &mut env).unwrap();
    assert_eq!(env.persisted.len(), 2);
    env.fail_persist = true;
    assert!(matches!(
        cover(&s, T0 + 10 * HORIZON_LEAD_MS, &mut env),
        Err(GenError::Horizon(_))
    ));
}

/// After a crash the run starts from the horizon on disk, up to a lead ahead of the clock that
/// wrote it: waiting that out is what a crash costs, not a clock step back. It was counted as a
/// regression and refused with max_clock_wait under the lead (58000 after every crash).
#[test]
fn a_crash_lead_is_waited_out_whatever_the_wait_and_is_not_a_regression() {
    let state = SharedState::default();
    state.seed(&BASE, T0 + HORIZON_LEAD_MS);
    let mut env = FakeEnv::at(T0);
    let id = next_id(&state, &cfg(0, 0), &mut env).unwrap();
    assert_eq!(
        Layout::TWITTER.decompose(id).unwrap().time + EPOCH,
        T0 + HORIZON_LEAD_MS + 1
    );
    assert_eq!(env.sleeps.iter().sum::<u64>(), HORIZON_LEAD_MS);
    assert_eq!(
        env.now,
        T0 + HORIZON_LEAD_MS + 1,
        "then into the next millisecond"
    );
    let stats = state.stats(&BASE);
    assert_eq!((stats.clock_regressions, stats.max_regression_ms), (0, 0));
}

/// Beyond the lead the clock really is behind what was recorded: that part counts, and is held
/// against max_clock_wait, with words that name the horizon, not an id issued in this run.
#[test]
fn a_clock_behind_the_recorded_horizon_beyond_the_lead_is_a_regression() {
    let state = SharedState::default();
    state.seed(&BASE, T0 + HORIZON_LEAD_MS + 500);
    let mut env = FakeEnv::at(T0);
    match next_id(&state, &cfg(0, 100), &mut env) {
        Err(
            e @ GenError::ClockBehindHorizon {
                behind_ms: 1_500,
                max_wait_ms: 100,
                ..
            },
        ) => {
            assert!(
                e.to_string()
                    .contains("behind the snowflake horizon recorded before"),
                "{e}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(state.stats(&BASE).max_regression_ms, 500);
    assert_eq!(state.stats(&BASE).ids_issued, 0);
    let id = next_id(&state, &cfg(0, 600), &mut env).unwrap();
    assert_eq!(
        Layout::TWITTER.decompose(id).unwrap().time + EPOCH,
        T0 + HORIZON_LEAD_MS + 501
    );
    // Once an id is issued, the run's own ids are the mark: no lead any more.
    env.now -= 50;
    assert!(matches!(
        next_id(&state, &cfg(0, 10), &mut env),
        Err(GenError::ClockBehind { behind_ms: 50, .. })
    ));
}

/// The writer slot is the environment's: a caller that finds it taken and the clock at the
/// horizon waits through `wait_for_push` (which sleeps in Postgres), never by spinning, and
/// issues once the horizon moved.
#[test]
fn a_caller_waits_for_the_horizon_writer_through_the_environment() {
    struct Busy {
        inner: FakeEnv,
        waits: u32,
        horizon_moves_after: u32,
        state: *const SharedState,
    }
    impl Env for Busy {
        fn now_unix_ms(&mut self) -> u64 {
            self.inner.now
        }
        fn pause(&mut self, p: Pause) {
            self.inner.pause(p)
        }
        fn persist_horizon(&mut self, _: u64) -> std::io::Result<()> {
            unreachable!("the slot is never free")
        }
        fn try_begin_push(&mut self) -> bool {
            false
        }
        fn end_push(&mut self) {
            unreachable!()
        }
        fn wait_for_push(&mut self, moved: &dyn Fn() -> bool) {
            assert!(!moved());
            self.waits += 1;
            if self.waits == self.horizon_moves_after {
                // the other writer publishes its horizon
                let state = unsafe { &*self.state };
                state
                    .read_mostly
                    .0
                    .horizon_unix_ms
                    .fetch_max(self.inner.now + HORIZON_LEAD_MS, Ordering::AcqRel);
                assert!(moved());
            }
        }
    }
    let state = fresh();
    state
        .read_mostly
        .0
        .horizon_unix_ms
        .store(T0, Ordering::SeqCst);
    let mut env = Busy {
        inner: FakeEnv::at(T0 + 1),
        waits: 0,
        horizon_moves_after: 3,
        state: &state,
    };
    let id = next_id(&state, &cfg(0, 0), &mut env).unwrap();
    assert_eq!(Layout::TWITTER.decompose(id).unwrap().time + EPOCH, T0 + 1);
    assert_eq!((env.waits, env.inner.spins), (3, 0));
}

/// Many threads on one state (more than this machine's cores), on the real clock: what each id
/// costs in read-modify-writes on shared memory, and how many of them failed and were retried.
/// The bound of the design: one RMW per id, which cannot fail; the extra ones, and every retry,
/// only where a millisecond changes (at most one per thread there).
#[test]
fn contention_costs_one_rmw_per_id_and_retries_only_where_a_millisecond_changes() {
    const THREADS: u64 = 8;
    const PER_THREAD: u64 = 50_000;
    let state = fresh();
    let persisted = AtomicU64::new(0);
    let slot = Slot::default();
    // (ids, rmws, retries, ids that cost more than one rmw) per thread, and the ids.
    let results: Vec<(u64, u64, u64, Vec<i64>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    let mut env = Threaded::real(&persisted, &slot);
                    probe::take();
                    let (mut rmws, mut retries, mut costly) = (0, 0, 0);
                    let mut ids = Vec::with_capacity(PER_THREAD as usize);
                    for _ in 0..PER_THREAD {
                        ids.push(next_id(&state, &cfg(5, 1000), &mut env).unwrap());
                        let (r, t) = probe::take();
                        rmws += r;
                        retries += t;
                        costly += u64::from(r > 1);
                    }
                    (rmws, retries, costly, ids)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ids: HashSet<i64> = results.iter().flat_map(|r| r.3.iter().copied()).collect();
    assert_eq!(ids.len() as u64, THREADS * PER_THREAD, "no duplicate");
    let millis: HashSet<u64> = ids
        .iter()
        .map(|&id| Layout::TWITTER.decompose(id).unwrap().time)
        .collect();
    let changes = millis.len() as u64;
    let (rmws, retries, costly) = results
        .iter()
        .fold((0, 0, 0), |a, r| (a.0 + r.0, a.1 + r.1, a.2 + r.2));
    let n = THREADS * PER_THREAD;
    eprintln!(
        "{THREADS} threads, {n} ids over {changes} ms: {:.4} RMW per id, {retries} retries, {costly} ids with more than one RMW",
        rmws as f64 / n as f64
    );
    assert!(
        rmws - n <= (THREADS + 1) * changes,
        "{} extra RMWs for {changes} millisecond changes",
        rmws - n
    );
    assert!(
        retries <= THREADS * changes,
        "{retries} retries for {changes} millisecond changes"
    );
    assert!(
        costly <= THREADS * changes,
        "{costly} ids cost more than one RMW"
    );
}

/// Threads on one state under a clock that a driver moves: milliseconds that fill (the clock
/// stands still for a while), and a step back of 5 ms. Every id unique, each thread's
/// increasing, none beyond the persisted horizon.
#[test]
fn threads_under_a_clock_that_stalls_and_steps_back_never_collide() {
    let state = fresh();
    let clock = AtomicU64::new(T0);
    let persisted = AtomicU64::new(0);
    let slot = Slot::default();
    let done = std::sync::atomic::AtomicBool::new(false);
    let batches: Vec<Vec<i64>> = std::thread::scope(|s| {
        s.spawn(|| {
            // 300 ms of fake time: each millisecond lasts long enough to fill now and then,
            // and at 150 ms the clock steps back 5 ms.
            for i in 0..300u64 {
                std::thread::sleep(std::time::Duration::from_micros(300));
                if i == 150 {
                    // A step back is one only behind ids already issued, and on a busy machine
                    // the threads can trail the driven clock by more than 5 ms: wait (at most
                    // 5 s) until they have issued an id in the clock's millisecond, step back,
                    // and hold the clock there until a thread has met it (at most 5 s more).
                    // Ticking on, it would be behind for 1.5 ms only, which a busy machine can
                    // let pass with no thread running (CI saw "the step back was seen" fail).
                    let wait_until = |what: &dyn Fn() -> bool| {
                        let deadline =
                            std::time::Instant::now() + std::time::Duration::from_secs(5);
                        while !what() && std::time::Instant::now() < deadline {
                            std::thread::sleep(std::time::Duration::from_micros(100));
                        }
                    };
                    let now = clock.load(Ordering::SeqCst);
                    wait_until(&|| {
                        state
                            .stats(&BASE)
                            .last_millis
                            .is_some_and(|m| m + EPOCH >= now)
                    });
                    clock.fetch_sub(5, Ordering::SeqCst);
                    wait_until(&|| state.stats(&BASE).clock_regressions > 0);
                } else {
                    clock.fetch_add(1, Ordering::SeqCst);
                }
            }
            done.store(true, Ordering::SeqCst);
        });
        let handles: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let mut env = Threaded {
                        driven: Some(&clock),
                        persisted: &persisted,
                        slot: &slot,
                    };
                    let mut ids = vec![];
                    while !done.load(Ordering::SeqCst) {
                        ids.push(next_id(&state, &cfg(4, 60_000), &mut env).unwrap());
                    }
                    ids
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let all = distinct_increasing_and_persisted(&batches, &persisted);
    let stats = state.stats(&BASE);
    assert_eq!(stats.ids_issued, all as u64);
    assert!(stats.exhaustion_waits > 0, "some milliseconds filled");
    assert!(stats.clock_regressions > 0, "the step back was seen");
}

#[test]
fn layout_errors_say_which_field_is_out_of_range() {
    let texts = [
        twitter(MAX_MILLIS + 1, 0, 0).unwrap_err().to_string(),
        twitter(0, 1024, 0).unwrap_err().to_string(),
        twitter(0, 0, 4096).unwrap_err().to_string(),
        Layout::TWITTER.decompose(-5).unwrap_err().to_string(),
    ];
    assert_eq!(
        texts,
        [
            "time 2199023255552 does not fit the layout's time field (at most 2199023255551)",
            "worker id 1024 is out of range 0..1023",
            "sequence 4096 is out of range 0..4095",
            "snowflake id -5 is negative: bit 63 is always 0",
        ]
    );
}

/// The bound of a range scan by time: at or below every id of its millisecond, above every id
/// of the millisecond before.
#[test]
fn the_lowest_id_of_a_millisecond_bounds_its_ids() {
    let l = Layout::TWITTER;
    assert_eq!(l.lowest_id_at(0), Ok(0));
    assert_eq!(l.lowest_id_at(1), Ok(1 << 22));
    assert_eq!(l.lowest_id_at(MAX_MILLIS), Ok(i64::MAX - 0x3f_ffff));
    assert_eq!(
        l.lowest_id_at(MAX_MILLIS + 1),
        Err(LayoutError::TimeOutOfRange(MAX_MILLIS + 1, MAX_MILLIS))
    );
    for millis in [1, T0 - EPOCH, MAX_MILLIS] {
        let low = l.lowest_id_at(millis).unwrap();
        let at = |millis, worker, sequence| twitter(millis, worker, sequence).unwrap();
        assert_eq!(low, at(millis, 0, 0));
        assert!(low <= at(millis, 0, 1) && low < at(millis, l.max_worker(), 0));
        assert!(at(millis - 1, l.max_worker(), l.max_sequence()) < low);
    }
}

/// The 41 bits' last millisecond still issues ids; only the one after it overflows.
#[test]
fn the_last_millisecond_of_41_bits_still_issues_ids() {
    let worker = Layout::TWITTER.max_worker();
    let state = fresh();
    let mut env = FakeEnv::at(EPOCH + MAX_MILLIS);
    let id = next_id(&state, &cfg(worker as u16, 0), &mut env).unwrap();
    assert_eq!(
        Layout::TWITTER.decompose(id).unwrap(),
        Fields {
            time: MAX_MILLIS,
            worker,
            sequence: 0
        }
    );
    env.now += 1;
    assert!(matches!(
        next_id(&state, &cfg(worker as u16, 0), &mut env),
        Err(GenError::Overflow { .. })
    ));
}

/// A step back is measured from the last id issued, also when that id was the last of a
/// full millisecond, so that the next value is the first of the millisecond after it.
#[test]
fn a_step_back_after_a_full_millisecond_is_measured_from_its_last_id() {
    let fill = |max_wait| {
        let state = fresh();
        let mut env = FakeEnv::at(T0);
        for _ in 0..4096 {
            next_id(&state, &cfg(0, max_wait), &mut env).unwrap();
        }
        assert_eq!(env.now, T0);
        env.now = T0 - 101;
        (state, env)
    };
    // 101 ms behind T0, the last millisecond issued: past a 100 ms limit ...
    let (state, mut env) = fill(100);
    match next_id(&state, &cfg(0, 100), &mut env) {
        Err(GenError::ClockBehind {
            behind_ms: 101,
            max_wait_ms: 100,
            resume_unix_ms,
        }) => assert_eq!(resume_unix_ms, T0 + 1),
        other => panic!("expected ClockBehind by 101 ms, got {other:?}"),
    }
    assert_eq!(state.stats(&BASE).max_regression_ms, 101);
    // ... and within a 101 ms one: waited out, then the first id of T0 + 1.
    let (state, mut env) = fill(101);
    let id = next_id(&state, &cfg(0, 101), &mut env).unwrap();
    assert_eq!(Layout::TWITTER.decompose(id).unwrap().time + EPOCH, T0 + 1);
    assert_eq!(state.stats(&BASE).max_regression_ms, 101);
}

/// An environment that counts the callers that try for the horizon writer slot, and can let
/// another writer publish a horizon just before this caller gets the slot.
struct Writers<'a> {
    inner: FakeEnv,
    state: &'a SharedState,
    tries: u32,
    other_writer_publishes: Option<u64>,
}

impl Env for Writers<'_> {
    fn now_unix_ms(&mut self) -> u64 {
        self.inner.now
    }
    fn pause(&mut self, p: Pause) {
        self.inner.pause(p)
    }
    fn persist_horizon(&mut self, unix_ms: u64) -> std::io::Result<()> {
        self.inner.persist_horizon(unix_ms)
    }
    fn try_begin_push(&mut self) -> bool {
        self.tries += 1;
        if let Some(h) = self.other_writer_publishes.take() {
            self.state
                .read_mostly
                .0
                .horizon_unix_ms
                .fetch_max(h, Ordering::AcqRel);
        }
        true
    }
    fn end_push(&mut self) {}
    fn wait_for_push(&mut self, _moved: &dyn Fn() -> bool) {
        unreachable!("the slot is always free")
    }
}

/// While the horizon is at least half a lead ahead of the clock, a caller does not even try
/// for the writer slot (in Postgres an LWLock, shared by every backend): the ids of that half
/// lead cost no lock traffic at all.
#[test]
fn no_caller_tries_for_the_writer_slot_while_the_horizon_is_half_a_lead_ahead() {
    let state = fresh();
    let mut env = Writers {
        inner: FakeEnv::at(T0),
        state: &state,
        tries: 0,
        other_writer_publishes: None,
    };
    next_id(&state, &cfg(0, 0), &mut env).unwrap();
    assert_eq!(
        (env.tries, env.inner.persisted.clone()),
        (1, vec![T0 + 1_000])
    );
    for now in [T0, T0 + 1, T0 + 250, T0 + HORIZON_LEAD_MS / 2] {
        env.inner.now = now;
        for _ in 0..100 {
            next_id(&state, &cfg(0, 0), &mut env).unwrap();
        }
    }
    assert_eq!(env.tries, 1, "horizon T0 + 1000, clock at most T0 + 500");
    env.inner.now = T0 + HORIZON_LEAD_MS / 2 + 1;
    next_id(&state, &cfg(0, 0), &mut env).unwrap();
    assert_eq!(env.tries, 2);
    assert_eq!(env.inner.persisted.len(), 2);
}

/// A caller that gets the writer slot looks at the horizon again: another writer may have
/// pushed it meanwhile. At least half a lead ahead of the clock is enough, the same rule as the
/// one that let callers through without the slot, and nothing is written; any less, and the
/// caller writes its own, a full lead ahead.
#[test]
fn a_writer_writes_nothing_when_another_pushed_the_horizon_far_enough_meanwhile() {
    for (published, persisted) in [
        (T0 + HORIZON_LEAD_MS / 2, vec![]),
        (T0 + HORIZON_LEAD_MS, vec![]),
        (T0 + HORIZON_LEAD_MS / 2 - 1, vec![T0 + HORIZON_LEAD_MS]),
    ] {
        let state = fresh();
        let mut env = Writers {
            inner: FakeEnv::at(T0),
            state: &state,
            tries: 0,
            other_writer_publishes: Some(published),
        };
        let id = next_id(&state, &cfg(0, 0), &mut env).unwrap();
        assert_eq!(Layout::TWITTER.decompose(id).unwrap().time + EPOCH, T0);
        assert_eq!(env.inner.persisted, persisted, "published {published}");
        assert_eq!(
            state.stats(&BASE).horizon_unix_ms,
            persisted.last().copied().unwrap_or(published)
        );
    }
}

// The generator under every layout.
mod layouts;

// Moving a table from another generator: the floor.
mod floor;
