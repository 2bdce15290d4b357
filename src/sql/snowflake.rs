//! snowflake_next() and the functions that take snowflake ids apart and build range bounds.
//!
//! Volatility: snowflake_next() and idgen_stats() change with every call (VOLATILE). The
//! decoders that read idgen.epoch depend on a setting (STABLE); the forms that take the epoch as
//! an argument, and those that do not need it, are IMMUTABLE and can serve in index expressions,
//! generated columns and partition bounds. All are PARALLEL SAFE: parallel workers share the
//! generator's shared memory and the postmaster-fixed worker id.

use crate::pg::citus_peers;
use crate::pg::errors::{self, error};
use crate::pg::horizon_store;
use crate::pg::refusals::{
    raise_auto_without_registry, raise_generator, raise_lease_ended, raise_peer_clash,
    raise_refused,
};
use crate::pg::registry::{self, Permit};
use crate::pg::timestamps::{out_of_timestamp_range, timestamp_of_unix_ms, unix_ms_of};
use crate::pg::{settings, shared};
use idgen_core::layout::{Fields, Layout};
use idgen_core::lease::{Mode, Refusal, Standing};
use idgen_core::snowflake::{self as sf, Config, FloorError, GenError, TimeBase};
use pgrx::datum::TimestampWithTimeZone;
use pgrx::prelude::*;

/// The next snowflake id of this server: strictly greater than every id it issued before.
#[pg_extern(volatile, parallel_safe)]
fn snowflake_next() -> i64 {
    let state = shared::snowflake("snowflake_next()");
    if shared::in_recovery() {
        // As nextval() on a standby. A standby's clock may be behind the primary's, and its
        // replayed horizon is the primary's: ids from here could repeat the primary's.
        error(errors::READ_ONLY_TRANSACTION, "cannot issue snowflake ids during recovery")
            .detail("This server is a standby, or still replaying WAL. Snowflake ids come from the primary, which records in the WAL how far it has issued them.")
            .hint("Call snowflake_next() on the primary, e.g. in the DEFAULT of a column of rows inserted there. After promotion this server issues ids itself.")
            .raise();
    }
    let mode = settings::worker_mode_or_raise();
    if let Some(why) = settings::registry_refused() {
        error(errors::NOT_IN_PREREQUISITE_STATE, format!("snowflake_next() refuses to run: idgen.registry was refused at start-up: {why}"))
            .detail("A server configured with a worker-id registry issues no id without it: the registry is what keeps two servers off one worker id.")
            .hint("Correct idgen.registry in postgresql.conf (no password: use a passfile readable only by the server's OS user) and restart the server.")
            .raise();
    }
    let permit = if registry::configured() {
        registry::permit(mode).unwrap_or_else(|view| raise_refused(mode, &view))
    } else if mode == Mode::Auto {
        raise_auto_without_registry()
    } else {
        let worker_id = settings::worker_id_if_set().unwrap_or_default();
        // Inside Citus, checked against the other nodes before the first id.
        citus_peers::clear(worker_id).unwrap_or_else(|refused| raise_peer_clash(refused));
        Permit {
            worker_id,
            fence_ms: registry::NO_LIMIT,
        }
    };
    let config = Config {
        base: settings::time_base(),
        worker_id: permit.worker_id,
        max_clock_wait_ms: settings::max_clock_wait_ms(),
    };
    let id = sf::next_id(state, &config, &mut horizon_store::Backend)
        .unwrap_or_else(|e| raise_generator(e));
    if permit.fence_ms != registry::NO_LIMIT {
        // The lease is the right to issue: nothing from its end on (the value is given up).
        let millis = config.base.unix_ms_of_id(id).expect("a generated id");
        if millis >= permit.fence_ms {
            raise_lease_ended(&permit, &registry::view());
        }
    }
    id
}

/// Raises the generator's floor past `after_id`, durably: from here on this server issues no id
/// at or below it, across restarts, crashes and a standby's promotion. For a table whose ids came
/// from another generator of this server's layout (Instagram's `next_id()`) when its DEFAULT
/// moves to snowflake_next(): `SELECT snowflake_raise_floor(max(id)) FROM t`. Superusers only (a
/// floor raised into the future stops every caller's ids until the clock gets there), on the
/// primary. Not transactional: the floor stays raised if the transaction rolls back. Returns the
/// lowest id the server can issue next.
#[pg_extern(volatile, strict, parallel_unsafe)]
fn snowflake_raise_floor(after_id: i64) -> i64 {
    let what = "snowflake_raise_floor()";
    if !unsafe { pg_sys::superuser() } {
        error(errors::INSUFFICIENT_PRIVILEGE, "permission denied for function snowflake_raise_floor")
            .detail("Raising the floor holds back every id this server issues until its clock passes it: only a superuser may.")
            .hint("Run it as a superuser, in the same step as the switch of the column's DEFAULT (docs/layouts.md).")
            .raise();
    }
    let state = shared::snowflake(what);
    if shared::in_recovery() {
        error(errors::READ_ONLY_TRANSACTION, "cannot raise the snowflake floor during recovery")
            .detail("This server is a standby, or still replaying WAL: the floor is recorded in the WAL of the primary, and replayed from there.")
            .hint("Call snowflake_raise_floor() on the primary.")
            .raise();
    }
    let config = Config {
        base: settings::time_base(),
        worker_id: current_worker_id().unwrap_or_default() as u16,
        // the configured wait, not this session's: the floor holds back every session's ids
        max_clock_wait_ms: settings::max_clock_wait_configured_ms(),
    };
    sf::raise_floor(state, &config, after_id, &mut horizon_store::Backend).unwrap_or_else(|e| {
        let message = e.to_string();
        match e {
            FloorError::Ahead { floor_unix_ms, .. } => error(errors::INVALID_PARAMETER, format!("{what} refuses id {after_id}: {message}"))
                .detail(format!("Read in this server's layout ({}) and epoch ({}), the id was made at {}. No id would be issued until the clock got there.", config.base.layout, config.base.epoch_unix_ms, timestamp_of_unix_ms(floor_unix_ms)))
                .hint("Check that the ids were made under this server's idgen.layout and idgen.epoch (snowflake_timestamp(id, epoch_ms, layout) shows the time an id holds), and the system clocks of the servers that made them.")
                .raise(),
            FloorError::Horizon(e) => raise_generator(GenError::Horizon(e)),
        }
    })
}

/// This server's worker id: the setting's, or with auto the one leased from the registry (None
/// before it holds one).
fn current_worker_id() -> Option<i32> {
    match settings::worker_mode() {
        Some(Mode::Auto) if registry::configured() => match registry::view().standing {
            Standing::Holding { worker_id, .. } => Some(i32::from(worker_id)),
            _ => None,
        },
        _ => settings::worker_id_if_set().map(i32::from),
    }
}

#[track_caller]
fn fields(id: i64, layout: &Layout) -> Fields {
    layout.decompose(id).unwrap_or_else(|e| {
        error(
            errors::INVALID_PARAMETER,
            format!("invalid snowflake id: {e}"),
        )
        .hint("Snowflake ids are non-negative bigints.")
        .raise()
    })
}

#[track_caller]
fn named_layout(text: &str) -> Layout {
    Layout::parse(text).unwrap_or_else(|e| {
        error(errors::INVALID_PARAMETER, format!("invalid snowflake layout: {e}"))
            .hint("Name one (twitter, instagram, discord, sonyflake, js53) or give time/worker/sequence bits and a unit, e.g. '40/12/11/10ms'.")
            .raise()
    })
}

/// The one-argument decoders are IMMUTABLE and read Twitter's layout, as they always have (an
/// index on them stays true); on a server of another layout they would answer for the wrong
/// one, so they refuse and name the form that takes the layout.
#[track_caller]
fn twitter_only(what: &str) -> Layout {
    let own = settings::layout();
    if own != Layout::TWITTER {
        error(
            errors::NOT_IN_PREREQUISITE_STATE,
            format!("{what}(id) decodes Twitter's layout, and this server's idgen.layout is {own}"),
        )
        .hint(format!("Pass the layout: {what}(id, '{own}')."))
        .raise();
    }
    Layout::TWITTER
}

#[track_caller]
fn checked_epoch(epoch_ms: i64) -> u64 {
    // Any epoch from 1970 until the last one whose ids still fit the timestamp range.
    if !(0..=sf::MAX_EPOCH_UNIX_MS as i64).contains(&epoch_ms) {
        error(
            errors::INVALID_PARAMETER,
            format!("epoch {epoch_ms} is out of range"),
        )
        .hint(
            "Pass the epoch as Unix milliseconds between 0 and 2147483647000, e.g. 1288834974657.",
        )
        .raise();
    }
    epoch_ms as u64
}

#[track_caller]
fn timestamp_in(id: i64, base: &TimeBase) -> TimestampWithTimeZone {
    // exact, not saturated: a long-lived layout's last ticks are past any u64 of ms
    let tick = fields(id, &base.layout).time;
    let ms = u128::from(tick) * u128::from(base.layout.unit_ms()) + u128::from(base.epoch_unix_ms);
    match u64::try_from(ms) {
        Ok(ms) => timestamp_of_unix_ms(ms),
        Err(_) => out_of_timestamp_range(ms),
    }
}

/// When the id was issued, given the epoch it was issued under (Twitter's layout).
#[pg_extern(immutable, strict, parallel_safe, name = "snowflake_timestamp")]
fn snowflake_timestamp_at_epoch(id: i64, epoch_ms: i64) -> TimestampWithTimeZone {
    timestamp_in(id, &TimeBase::twitter(checked_epoch(epoch_ms)))
}

/// When the id was issued, given the epoch and the layout it was issued under: a foreign id (a
/// Discord id, an Instagram id) taken apart in SQL or in an index expression.
#[pg_extern(immutable, strict, parallel_safe, name = "snowflake_timestamp")]
fn snowflake_timestamp_in_layout(id: i64, epoch_ms: i64, layout: &str) -> TimestampWithTimeZone {
    timestamp_in(
        id,
        &TimeBase {
            epoch_unix_ms: checked_epoch(epoch_ms),
            layout: named_layout(layout),
        },
    )
}

/// When the id was issued, under idgen.epoch and idgen.layout.
#[pg_extern(stable, strict, parallel_safe)]
fn snowflake_timestamp(id: i64) -> TimestampWithTimeZone {
    timestamp_in(id, &settings::time_base())
}

#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_worker_id(id: i64) -> i32 {
    fields(id, &twitter_only("snowflake_worker_id")).worker as i32
}

#[pg_extern(immutable, strict, parallel_safe, name = "snowflake_worker_id")]
fn snowflake_worker_id_in_layout(id: i64, layout: &str) -> i32 {
    fields(id, &named_layout(layout)).worker as i32
}

#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_sequence(id: i64) -> i32 {
    fields(id, &twitter_only("snowflake_sequence")).sequence as i32
}

#[pg_extern(immutable, strict, parallel_safe, name = "snowflake_sequence")]
fn snowflake_sequence_in_layout(id: i64, layout: &str) -> i32 {
    fields(id, &named_layout(layout)).sequence as i32
}

#[track_caller]
fn lowest_id(ts: TimestampWithTimeZone, base: &TimeBase) -> i64 {
    let unix_ms = unix_ms_of(ts, "snowflake_from_timestamp");
    let (epoch_ms, layout) = (base.epoch_unix_ms, base.layout);
    let ms = unix_ms - epoch_ms as i64;
    // lifetime_ms saturates at u64::MAX for the longest-lived layouts: at most i64::MAX here.
    let lifetime_ms = i64::try_from(layout.lifetime_ms()).unwrap_or(i64::MAX);
    if !(0..lifetime_ms).contains(&ms) {
        error(
            errors::DATETIME_OUT_OF_RANGE,
            "timestamp out of range for a snowflake id",
        )
        .detail(format!(
            "Snowflake ids of layout {layout} cover {epoch_ms} to {} ms since 1970.",
            epoch_ms.saturating_add(layout.lifetime_ms() - 1)
        ))
        .hint(format!(
            "Pass a timestamp at or after the epoch and less than about {:.1} years after it.",
            layout.lifetime_ms() as f64 / 31_556_952_000.0
        ))
        .raise();
    }
    layout
        .lowest_id_at(ms as u64 / layout.unit_ms())
        .expect("range checked")
}

/// The smallest id issued at that millisecond (worker 0, sequence 0), under the given epoch: a
/// bound for range scans, cursors and partitions (Twitter's layout).
#[pg_extern(immutable, strict, parallel_safe, name = "snowflake_from_timestamp")]
fn snowflake_from_timestamp_at_epoch(ts: TimestampWithTimeZone, epoch_ms: i64) -> i64 {
    lowest_id(ts, &TimeBase::twitter(checked_epoch(epoch_ms)))
}

/// The smallest id of the tick that holds that moment, under the given epoch and layout.
#[pg_extern(immutable, strict, parallel_safe, name = "snowflake_from_timestamp")]
fn snowflake_from_timestamp_in_layout(
    ts: TimestampWithTimeZone,
    epoch_ms: i64,
    layout: &str,
) -> i64 {
    lowest_id(
        ts,
        &TimeBase {
            epoch_unix_ms: checked_epoch(epoch_ms),
            layout: named_layout(layout),
        },
    )
}

/// The smallest id issued at that millisecond, under idgen.epoch and idgen.layout.
#[pg_extern(stable, strict, parallel_safe)]
fn snowflake_from_timestamp(ts: TimestampWithTimeZone) -> i64 {
    lowest_id(ts, &settings::time_base())
}

// Only a superuser may raise the floor (the function checks too).
extension_sql!(
    "REVOKE ALL ON FUNCTION snowflake_raise_floor(bigint) FROM PUBLIC;",
    name = "snowflake_raise_floor_acl",
    requires = [snowflake_raise_floor],
);

/// The generator's counters since the server started. How many ids a server issues is activity
/// data: like pg_stat_statements' figures, they are for superusers and members of pg_monitor.
#[pg_extern(volatile, parallel_safe)]
#[allow(clippy::type_complexity)]
fn idgen_stats() -> TableIterator<
    'static,
    (
        name!(worker_id, Option<i32>),
        name!(ids_issued, i64),
        name!(exhaustion_waits, i64),
        name!(clock_regressions, i64),
        name!(max_regression_ms, i64),
        name!(last_issued, Option<TimestampWithTimeZone>),
        name!(horizon, Option<TimestampWithTimeZone>),
    ),
> {
    check_monitor("idgen_stats", "how many ids this server has issued");
    // Also on a damaged horizon file or a conflicting epoch, which it helps diagnose: the
    // horizon is then NULL (none loaded).
    if !shared::preloaded() {
        errors::not_preloaded("idgen_stats()");
    }
    let stats = shared::snowflake_state().stats(&settings::time_base());
    let epoch = settings::epoch_ms();
    // With auto, the id the registry leased to this server (None until it has one).
    let worker = current_worker_id();
    TableIterator::once((
        worker,
        stats.ids_issued as i64,
        stats.exhaustion_waits as i64,
        stats.clock_regressions as i64,
        stats.max_regression_ms as i64,
        stats.last_millis.map(|m| timestamp_of_unix_ms(m + epoch)),
        (stats.horizon_unix_ms > 0).then(|| timestamp_of_unix_ms(stats.horizon_unix_ms)),
    ))
}

/// Where this server's worker id came from and where its lease stands, for superusers and
/// members of pg_monitor (as idgen_stats()).
#[pg_extern(volatile, parallel_safe)]
#[allow(clippy::type_complexity)]
fn idgen_lease_status() -> TableIterator<
    'static,
    (
        name!(worker_id, Option<i32>),
        name!(worker_id_source, String),
        name!(registry, String),
        name!(lease_ends, Option<TimestampWithTimeZone>),
        name!(issues_until, Option<TimestampWithTimeZone>),
        name!(last_renewal, Option<TimestampWithTimeZone>),
        name!(registry_reachable, Option<bool>),
        name!(last_error, Option<String>),
    ),
> {
    check_monitor(
        "idgen_lease_status",
        "where this server's worker-id lease stands",
    );
    if !shared::preloaded() {
        errors::not_preloaded("idgen_lease_status()");
    }
    let mode = settings::worker_mode();
    if !registry::configured() {
        let (id, source) = match mode {
            Some(Mode::Fixed(id)) => (Some(i32::from(id)), "setting"),
            Some(Mode::Auto) => (None, "auto, without a registry"),
            None => (None, "unset"),
        };
        return TableIterator::once((
            id,
            source.into(),
            "off".into(),
            None,
            None,
            None,
            None,
            None,
        ));
    }
    let v = registry::view();
    let (state, id) = match &v.standing {
        Standing::Pending => ("pending", None),
        Standing::Holding { worker_id, .. } => ("holding", Some(*worker_id)),
        Standing::Unverified => ("unverified", None),
        Standing::Refused(Refusal::Conflict { worker_id, .. }) => ("conflict", Some(*worker_id)),
        Standing::Refused(Refusal::Exhausted) => ("exhausted", None),
        Standing::Refused(Refusal::Lost { worker_id, .. }) => ("lost", Some(*worker_id)),
        Standing::Refused(Refusal::HoldingOff { .. }) => ("holding off", None),
        Standing::Refused(Refusal::NeverVerified) => ("never verified", None),
        Standing::Refused(Refusal::OverQuota {
            own_earlier_run: true,
            ..
        }) => ("earlier run", None),
        Standing::Refused(Refusal::OverQuota { .. }) => ("over quota", None),
        Standing::Refused(Refusal::WrongIdSpace { .. }) => ("wrong id space", None),
        Standing::Refused(Refusal::ClockAhead { .. }) => ("clock ahead", None),
    };
    let (id, source) = match mode {
        Some(Mode::Fixed(fixed)) => (Some(fixed), "setting"),
        Some(Mode::Auto) => (id, "registry"),
        None => (None, "unset"),
    };
    let ts = |ms: u64| (ms > 0 && ms != registry::NO_LIMIT).then(|| timestamp_of_unix_ms(ms));
    let reachable = !matches!(v.standing, Standing::Pending) || v.failing;
    TableIterator::once((
        id.map(i32::from),
        source.into(),
        state.into(),
        ts(v.lease_ends_ms),
        ts(v.fence_ms),
        ts(v.last_renewal_ms),
        reachable.then_some(!v.failing),
        // The registry's or libpq's last error (in a conflict or over the quota the text names
        // the other holders instead); else, refused, what the refusal says, as the errors do.
        match &v.standing {
            _ if v.failing
                && !v.text.is_empty()
                && !matches!(
                    v.standing,
                    Standing::Refused(Refusal::Conflict { .. } | Refusal::OverQuota { .. })
                ) =>
            {
                Some(v.text.clone())
            }
            Standing::Refused(r) => Some(registry::refusal_text(r)),
            _ => None,
        },
    ))
}

/// What ids this server issues, as another node of its Citus cluster asks before its own first
/// id: the worker id (with auto, the leased one; NULL while it has none), the epoch and the
/// layout, and where this server's own check of the other nodes stands (`unchecked`,
/// `checking`, `clear`, `clash`, or `off` where it makes none: no Citus, or a registry). Any
/// role may call it: the settings it shows are readable by all.
#[pg_extern(volatile, parallel_safe)]
#[allow(clippy::type_complexity)]
fn idgen_identity() -> TableIterator<
    'static,
    (
        name!(worker_id, Option<i32>),
        name!(epoch_ms, i64),
        name!(layout, String),
        name!(peer_check, String),
    ),
> {
    if !shared::preloaded() {
        errors::not_preloaded("idgen_identity()");
    }
    TableIterator::once((
        current_worker_id(),
        settings::epoch_ms() as i64,
        settings::layout().to_string(),
        citus_peers::standing(registry::configured())
            .as_str()
            .to_string(),
    ))
}

/// Activity data, as pg_stat_statements' figures: superusers and members of pg_monitor only.
#[track_caller]
fn check_monitor(function: &str, what: &str) {
    let may_read = unsafe {
        pg_sys::has_privs_of_role(
            pg_sys::GetUserId(),
            pg_sys::Oid::from(pg_sys::ROLE_PG_MONITOR),
        )
    };
    if !may_read {
        error(errors::INSUFFICIENT_PRIVILEGE, format!("permission denied for function {function}"))
            .detail(format!("{function}() shows {what}: activity data, for superusers and members of pg_monitor only."))
            .hint("A superuser can GRANT pg_monitor TO the role that needs it.")
            .raise();
    }
}
