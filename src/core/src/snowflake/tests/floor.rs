//! `raise_floor`: a table whose ids came from another generator of the same layout moves to this
//! one, and no id at or below its largest stored id is issued — now, after a restart with the
//! clock set back, and while other callers issue ids as the floor rises.

use super::*;
use crate::layout::{Layout, NAMED};

fn config(layout: Layout, worker_id: u16) -> Config {
    Config {
        base: TimeBase {
            epoch_unix_ms: EPOCH,
            layout,
        },
        worker_id,
        max_clock_wait_ms: 1_000,
    }
}

/// A run seeded a minute back, on a clock at T0, that has issued one id (returned).
fn running(layout: Layout, worker_id: u16) -> (Config, SharedState, FakeEnv, i64) {
    let cfg = config(layout, worker_id);
    let state = SharedState::default();
    state.seed(&cfg.base, T0 - 60_000);
    let mut env = FakeEnv::at(T0);
    let last = next_id(&state, &cfg, &mut env).unwrap();
    (cfg, state, env, last)
}

/// The largest id another generator could have made in the tick that holds `unix_ms`.
fn top_of_tick(layout: Layout, unix_ms: u64) -> i64 {
    layout
        .compose(Fields {
            time: (unix_ms - EPOCH) / layout.unit_ms(),
            worker: layout.max_worker(),
            sequence: layout.max_sequence(),
        })
        .unwrap()
}

#[test]
fn every_id_after_the_floor_is_above_it_and_the_floor_is_persisted_first() {
    for (name, layout) in NAMED {
        let cfg = config(layout, 0);
        let state = SharedState::default();
        state.seed(&cfg.base, T0 - 60_000);
        let mut env = FakeEnv::at(T0);
        let before = next_id(&state, &cfg, &mut env).unwrap();
        // Stored ids, made by another generator 1.5 s in this clock's future (its clock runs
        // ahead; past the horizon the first id pushed), with a worker id above this server's:
        // this server's next id would be lower.
        let stored = top_of_tick(layout, T0 + 1_500);
        assert!(before < stored, "{name}");
        let lowest = raise_floor(&state, &cfg, stored, &mut env).unwrap();
        assert!(
            lowest > stored,
            "{name}: {lowest} returned, stored {stored}"
        );
        let floor = cfg.base.unix_ms_of_id(stored).unwrap() + layout.unit_ms() - 1;
        assert_eq!(
            env.persisted.last(),
            Some(&floor),
            "{name}: the end of the id's tick"
        );
        assert_eq!(state.stats(&cfg.base).horizon_unix_ms, floor, "{name}");
        let mut last = stored;
        for _ in 0..2 * (layout.max_sequence() + 1) {
            let id = next_id(&state, &cfg, &mut env).unwrap();
            assert!(id > last, "{name}: {id} after {last}");
            assert!(id >= lowest, "{name}");
            last = id;
        }
    }
}

#[test]
fn a_restart_from_the_persisted_floor_with_the_clock_set_back_stays_above_it() {
    let cfg = config(Layout::INSTAGRAM, 5);
    let state = SharedState::default();
    state.seed(&cfg.base, T0 - 60_000);
    let mut env = FakeEnv::at(T0);
    let stored = top_of_tick(Layout::INSTAGRAM, T0 - 10);
    raise_floor(&state, &cfg, stored, &mut env).unwrap();
    let persisted = *env.persisted.last().unwrap();

    // A crash; the server comes back with its clock 5 s behind the stored ids.
    let after = SharedState::default();
    after.seed(&cfg.base, persisted);
    let mut env = FakeEnv::at(T0 - 5_000);
    assert!(matches!(
        next_id(&after, &cfg, &mut env),
        Err(GenError::ClockBehindHorizon { .. })
    ));
    env.now = T0 - 500;
    let id = next_id(&after, &cfg, &mut env).unwrap();
    assert!(id > stored, "{id} <= {stored}");
}

#[test]
fn a_floor_below_the_run_moves_nothing_and_writes_nothing() {
    let (cfg, state, mut env, last) = running(Layout::TWITTER, 3);
    let persisted = env.persisted.clone();
    let lowest = raise_floor(
        &state,
        &cfg,
        top_of_tick(Layout::TWITTER, T0 - 5_000),
        &mut env,
    )
    .unwrap();
    assert_eq!(env.persisted, persisted, "the horizon already covers it");
    assert_eq!(lowest, last + 1, "the run's next value, unmoved");
    assert_eq!(next_id(&state, &cfg, &mut env).unwrap(), last + 1);
    assert_eq!(
        raise_floor(&state, &cfg, -7, &mut env).unwrap(),
        last + 2,
        "a negative id is below every id"
    );
}

#[test]
fn a_floor_beyond_what_the_generator_would_wait_is_refused_and_changes_nothing() {
    let (cfg, state, mut env, last) = running(Layout::TWITTER, 3);
    let persisted = env.persisted.clone();
    let allowed = HORIZON_LEAD_MS + cfg.max_clock_wait_ms;
    // Within the wait: taken. One tick further: refused.
    let at_limit = top_of_tick(Layout::TWITTER, T0 + allowed);
    let beyond = top_of_tick(Layout::TWITTER, T0 + allowed + 1);
    let err = raise_floor(&state, &cfg, beyond, &mut env).unwrap_err();
    assert!(
        matches!(err, FloorError::Ahead { allowed_ms, .. } if allowed_ms == allowed),
        "{err}"
    );
    assert_eq!(env.persisted, persisted);
    assert_eq!(next_id(&state, &cfg, &mut env).unwrap(), last + 1);
    assert!(
        matches!(
            raise_floor(&state, &cfg, Layout::TWITTER.max_id(), &mut env),
            Err(FloorError::Ahead { .. })
        ),
        "the layout's last tick"
    );
    assert!(raise_floor(&state, &cfg, at_limit, &mut env).unwrap() > at_limit);
}

#[test]
fn a_failed_persist_raises_nothing_and_frees_the_writer() {
    let (cfg, state, mut env, last) = running(Layout::TWITTER, 3);
    env.fail_persist = true;
    let stored = top_of_tick(Layout::TWITTER, T0 + 1_500);
    assert!(matches!(
        raise_floor(&state, &cfg, stored, &mut env),
        Err(FloorError::Horizon(_))
    ));
    env.fail_persist = false;
    assert_eq!(
        next_id(&state, &cfg, &mut env).unwrap(),
        last + 1,
        "the run did not move"
    );
    assert!(raise_floor(&state, &cfg, stored, &mut env).unwrap() > stored);
}

/// Four threads issue ids on the real clock while the floor rises past an id 300 ms ahead of
/// it: every id a thread asks for after the floor rose is above it.
#[test]
fn callers_issuing_while_the_floor_rises_never_issue_at_or_below_it_afterwards() {
    let cfg = config(Layout::TWITTER, 2);
    let state = SharedState::default();
    state.seed(&cfg.base, 0);
    let persisted = AtomicU64::new(0);
    let slot = Slot::default();
    let raised = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    let now = Threaded::real(&persisted, &slot).now_unix_ms();
    let stored = top_of_tick(Layout::TWITTER, now + 300);
    let after: Vec<Vec<i64>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let mut env = Threaded::real(&persisted, &slot);
                    let mut after = vec![];
                    while !stop.load(Ordering::SeqCst) {
                        let seen = raised.load(Ordering::SeqCst);
                        let id = next_id(&state, &cfg, &mut env).unwrap();
                        if seen {
                            after.push(id);
                        }
                    }
                    after
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut env = Threaded::real(&persisted, &slot);
        raise_floor(&state, &cfg, stored, &mut env).unwrap();
        raised.store(true, Ordering::SeqCst);
        std::thread::sleep(std::time::Duration::from_millis(400));
        stop.store(true, Ordering::SeqCst);
        workers.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let count: usize = after.iter().map(Vec::len).sum();
    assert!(count > 0, "the threads issued ids after the floor rose");
    for batch in &after {
        for &id in batch {
            assert!(
                id > stored,
                "{id} issued after the floor rose past {stored}"
            );
        }
    }
    assert!(persisted.load(Ordering::SeqCst) >= cfg.base.unix_ms_of_id(stored).unwrap());
}
