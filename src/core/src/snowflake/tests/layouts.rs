//! The generator under every layout: ids that rise, decode to the clock's tick and the worker
//! id, a tick that holds exactly 2^sequence bits ids, and restarts that resume in a later tick.
//! (The layouts' own arithmetic is tested in `crate::layout`.)

use super::*;
use crate::layout::{Layout, NAMED, UNITS_MS};

fn config(layout: Layout, worker_id: u16, max_clock_wait_ms: u64) -> Config {
    Config {
        base: TimeBase {
            epoch_unix_ms: EPOCH,
            layout,
        },
        worker_id,
        max_clock_wait_ms,
    }
}

fn tick_of(layout: Layout, unix_ms: u64) -> u64 {
    (unix_ms - EPOCH) / layout.unit_ms()
}

#[test]
fn every_named_layout_issues_rising_ids_that_decode_to_the_clocks_tick_and_the_worker() {
    for (name, layout) in NAMED {
        let cfg = config(layout, layout.max_worker() as u16, 1_000);
        let state = SharedState::default();
        state.seed(&cfg.base, 0);
        let mut env = FakeEnv::at(T0);
        let mut last = -1;
        for _ in 0..3 * (layout.max_sequence() + 1) {
            let id = next_id(&state, &cfg, &mut env).unwrap();
            assert!(id > last, "{name}: {id} after {last}");
            assert!(id <= layout.max_id(), "{name}");
            let f = layout.decompose(id).unwrap();
            assert_eq!(f.worker, layout.max_worker(), "{name}");
            assert_eq!(f.time, tick_of(layout, env.now), "{name}: the clock's tick");
            last = id;
        }
    }
}

#[test]
fn a_tick_holds_two_to_the_sequence_bits_ids_and_a_longer_tick_is_slept_into_not_spun() {
    for layout in [Layout::TWITTER, Layout::SONYFLAKE, Layout::JS53] {
        let cfg = config(layout, 1, 1_000);
        let state = SharedState::default();
        state.seed(&cfg.base, 0);
        // the clock 3 ms into a tick, and frozen: only a pause moves it
        let start = EPOCH + (tick_of(layout, T0) * layout.unit_ms()) + 3 % layout.unit_ms();
        let mut env = FakeEnv::at(start);
        let cap = layout.max_sequence() + 1;
        for seq in 0..cap {
            let f = layout
                .decompose(next_id(&state, &cfg, &mut env).unwrap())
                .unwrap();
            assert_eq!((f.time, f.sequence), (tick_of(layout, start), seq));
        }
        assert_eq!(
            (env.spins, env.sleeps.len()),
            (0, 0),
            "no wait within a tick"
        );
        let next = layout
            .decompose(next_id(&state, &cfg, &mut env).unwrap())
            .unwrap();
        assert_eq!((next.time, next.sequence), (tick_of(layout, start) + 1, 0));
        if layout.unit_ms() == 1 {
            assert_eq!((env.spins, env.sleeps.len()), (1, 0));
        } else {
            // slept to the next tick's first millisecond, at once
            let to_next = layout.unit_ms() - (start - EPOCH) % layout.unit_ms();
            assert_eq!((env.spins, env.sleeps.clone()), (0, vec![to_next]));
        }
        assert_eq!(state.stats(&cfg.base).exhaustion_waits, 1);
    }
}

#[test]
fn a_restart_resumes_in_the_tick_after_the_one_that_holds_the_mark() {
    let layout = Layout::SONYFLAKE;
    let cfg = config(layout, 9, 1_000);
    let first = SharedState::default();
    first.seed(&cfg.base, 0);
    let mut env = FakeEnv::at(T0 + 4);
    let mut last = 0;
    for _ in 0..1_000 {
        last = next_id(&first, &cfg, &mut env).unwrap();
    }
    // a clean shutdown records the last millisecond of the last tick issued
    let mark = first.high_water_unix_ms(&cfg.base);
    let last_tick = layout.decompose(last).unwrap().time;
    assert_eq!(mark, EPOCH + (last_tick + 1) * 10 - 1);
    // a crash leaves the horizon, which may fall inside a tick: the tick after it
    for horizon in [mark, mark - 5] {
        let second = SharedState::default();
        second.seed(&cfg.base, horizon);
        let mut env = FakeEnv::at(horizon - 3);
        let resumed = next_id(&second, &cfg, &mut env).unwrap();
        assert!(resumed > last);
        assert_eq!(
            layout.decompose(resumed).unwrap().time,
            tick_of(layout, horizon) + 1
        );
    }
}

#[test]
fn a_layout_used_up_is_an_error_that_names_it() {
    let layout = Layout::JS53;
    let end = EPOCH + layout.lifetime_ms();
    let mut env = FakeEnv::at(end - 1);
    let state = SharedState::default();
    let cfg = config(layout, 0, 0);
    state.seed(&cfg.base, 0);
    let id = next_id(&state, &cfg, &mut env).unwrap();
    assert_eq!(layout.decompose(id).unwrap().time, layout.max_time());
    env.now = end;
    let err = next_id(&state, &cfg, &mut env).unwrap_err();
    assert!(matches!(err, GenError::Overflow { .. }));
    assert!(
        err.to_string()
            .contains("the time field of layout js53 (38 bits of 10 ms)"),
        "{err}"
    );
}

/// A named layout, or an explicit split that lasts past T0 and a day from EPOCH.
fn any_layout() -> impl Strategy<Value = Layout> {
    let named = (0..NAMED.len()).prop_map(|i| NAMED[i].1);
    let explicit = (1u32..=16, 1u32..=14, 30u32..=46, 0usize..3).prop_filter_map(
        "a split that fits and lasts",
        |(w, s, t, u)| {
            Layout::new(t, w, s, UNITS_MS[u])
                .ok()
                .filter(|l| l.lifetime_ms() > T0 - EPOCH + 86_400_000)
        },
    );
    prop_oneof![named, explicit]
}

proptest! {
    /// The law of `never_a_duplicate_or_a_decrease_under_any_clock`, under any layout: whatever
    /// the clock does, every id is larger than the one before, carries the worker id, and none
    /// comes from a tick that begins after the persisted horizon.
    #[test]
    fn under_any_layout_never_a_duplicate_or_a_decrease_under_any_clock(
        layout in any_layout(),
        steps in prop::collection::vec((-3_000i64..3_000, 1usize..600), 1..25),
        max_wait in 0u64..2_000,
        worker in any::<u16>(),
    ) {
        let worker = (u64::from(worker) % (layout.max_worker() + 1)) as u16;
        let cfg = config(layout, worker, max_wait);
        let state = SharedState::default();
        state.seed(&cfg.base, 0);
        run_under_a_moving_clock(&state, &cfg, &steps)?;
    }
}

#[test]
fn an_ids_time_is_where_its_tick_begins() {
    let base = TimeBase {
        epoch_unix_ms: EPOCH,
        layout: Layout::SONYFLAKE,
    };
    let id = Layout::SONYFLAKE
        .compose(crate::layout::Fields {
            time: 7,
            worker: 3,
            sequence: 255,
        })
        .unwrap();
    assert_eq!(base.unix_ms_of_id(id), Some(EPOCH + 70));
    assert_eq!(
        TimeBase::twitter(EPOCH).unix_ms_of_id(5 << 22),
        Some(EPOCH + 5)
    );
    assert_eq!(base.unix_ms_of_id(-1), None);
    // a long-lived layout's largest time: past u64's ms, saturated rather than wrapped (the
    // decoders then report it out of the timestamp range)
    let long = TimeBase {
        epoch_unix_ms: EPOCH,
        layout: Layout::parse("61/1/1/1000ms").unwrap(),
    };
    assert_eq!(long.unix_ms_of_id(i64::MAX), Some(u64::MAX));
}

#[test]
fn a_layout_may_follow_another_only_where_its_ids_sort_above_every_id_made_before() {
    let at = |layout| TimeBase {
        epoch_unix_ms: EPOCH,
        layout,
    };
    let (twitter, instagram, sony, js) = (
        at(Layout::TWITTER),
        at(Layout::INSTAGRAM),
        at(Layout::SONYFLAKE),
        at(Layout::JS53),
    );
    // Instagram's ids carry the time one bit further up: twice Twitter's, always above them
    assert!(instagram.may_follow(&twitter, T0, 1_000));
    // and the other way round half of them: below every id Instagram's made
    assert!(!twitter.may_follow(&instagram, T0, 1_000));
    // Sonyflake's and js53's ids are smaller numbers than Twitter's at any time
    assert!(!sony.may_follow(&twitter, T0, 1_000));
    assert!(!js.may_follow(&twitter, T0, 1_000));
    assert!(twitter.may_follow(&js, T0, 1_000));
    // the same layout always may; so may any layout on a server that made nothing before its epoch
    assert!(js.may_follow(&js, T0, 0));
    let later = TimeBase {
        epoch_unix_ms: T0 + 86_400_000,
        layout: Layout::TWITTER,
    };
    assert!(sony.may_follow(&later, T0, 1_000));
    // the check is exact: the first id under the new layout against the top id under the old
    let top = twitter
        .layout
        .compose(crate::layout::Fields {
            time: (T0 + 1_000 - EPOCH),
            worker: 1023,
            sequence: 4095,
        })
        .unwrap();
    let first = instagram
        .layout
        .lowest_id_at(instagram.unpack(instagram.first_word_after(T0)).0)
        .unwrap();
    assert!(first > top);
}

#[test]
fn a_later_epoch_resumes_past_the_horizon_by_the_epochs_move_and_an_earlier_one_at_once() {
    let at = |epoch_unix_ms| TimeBase {
        epoch_unix_ms,
        layout: Layout::TWITTER,
    };
    let (old, later, earlier) = (at(EPOCH), at(EPOCH + 3_000), at(EPOCH - 3_000));
    // under an epoch 3 s later, an id of time t is the old epoch's id of t - 3 s: ids resume 3 s
    // (plus the margin) past the horizon, in the first tick whose lowest id is above the top
    assert_eq!(later.floor_above(&old, T0, 1_000), Some(T0 + 1_000 + 3_000));
    assert!(!later.may_follow(&old, T0, 1_000));
    // an earlier epoch makes larger ids at any time: at once
    assert_eq!(earlier.floor_above(&old, T0, 1_000), Some(T0));
    // bit-identical layouts are one id space: Twitter's and Discord's under one epoch
    let discord = TimeBase {
        epoch_unix_ms: EPOCH,
        layout: Layout::DISCORD,
    };
    assert!(discord.same_ids(&old) && old.same_ids(&discord));
    assert_eq!(discord.floor_above(&old, T0, 1_000), Some(T0));
    // js53 never sorts above Twitter's ids of today: its time field ends first
    let js = TimeBase {
        epoch_unix_ms: EPOCH,
        layout: Layout::JS53,
    };
    assert_eq!(js.floor_above(&old, T0, 1_000), None);
}

proptest! {
    /// `floor_above` is exact: the first tick a run resumes at after it has its lowest id above
    /// every id the recorded base could have made up to the horizon plus the margin, and, where
    /// the floor is past the horizon, the tick before does not.
    #[test]
    fn the_floor_above_another_id_space_is_the_first_tick_whose_ids_sort_above_it(
        old_layout in any_layout(),
        new_layout in any_layout(),
        old_shift in -400_000_000_000i64..400_000_000_000,
        new_shift in -400_000_000_000i64..400_000_000_000,
        back in 0u64..200_000_000_000,
        margin in 0u64..10_000,
    ) {
        let base = |layout, shift: i64| TimeBase {
            epoch_unix_ms: EPOCH.checked_add_signed(shift).unwrap(),
            layout,
        };
        let (old, new) = (base(old_layout, old_shift), base(new_layout, new_shift));
        let horizon = T0 - back;
        let old_top = |end: u64| end.checked_sub(old.epoch_unix_ms).map(|ms| {
            old.layout.compose(crate::layout::Fields {
                time: (ms / old.layout.unit_ms()).min(old.layout.max_time()),
                worker: old.layout.max_worker(),
                sequence: old.layout.max_sequence(),
            }).unwrap()
        });
        let lowest_after = |floor: u64| {
            new.layout.lowest_id_at(new.unpack(new.first_word_after(floor)).0)
        };
        match new.floor_above(&old, horizon, margin) {
            Some(floor) => {
                prop_assert!(floor >= horizon);
                if let Some(top) = old_top(horizon + margin) {
                    if !new.same_ids(&old) {
                        // (past the new layout's last tick no id is made at all)
                        if let Ok(first) = lowest_after(floor) {
                            prop_assert!(first > top);
                        }
                        if floor > horizon {
                            let tick = new.unpack(new.first_word_after(floor)).0;
                            prop_assert!(new.layout.lowest_id_at(tick - 1).unwrap() <= top);
                        }
                    }
                }
            }
            None => {
                let top = old_top(horizon + margin).unwrap();
                prop_assert!(new.layout.lowest_id_at(new.layout.max_time()).unwrap() <= top);
            }
        }
    }
}
