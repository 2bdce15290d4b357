//! snowflake_next() and the functions that take snowflake ids apart and build range bounds.
//!
//! Volatility: snowflake_next() and idgen_stats() change with every call (VOLATILE). The
//! decoders that read idgen.epoch depend on a setting (STABLE); the forms that take the epoch as
//! an argument, and those that do not need it, are IMMUTABLE and can serve in index expressions,
//! generated columns and partition bounds. All are PARALLEL SAFE: parallel workers share the
//! generator's shared memory and the postmaster-fixed worker id.

use crate::errors::{self, error};
use crate::horizon_store::{self, HORIZON_FILE};
use crate::snowflake::{self as sf, Config, GenError, MAX_MILLIS};
use crate::sql::{timestamp_of_unix_ms, unix_ms_of};
use crate::{settings, shared};
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
    let config = Config {
        epoch_unix_ms: settings::epoch_ms(),
        worker_id: settings::worker_id(),
        max_clock_wait_ms: settings::max_clock_wait_ms(),
    };
    sf::next_id(state, &config, &mut horizon_store::Backend).unwrap_or_else(|e| raise_generator(e))
}

#[track_caller]
pub(crate) fn raise_generator(e: GenError) -> ! {
    let message = e.to_string();
    match e {
        GenError::ClockBehind { resume_unix_ms, .. } => error(errors::SYSTEM_ERROR, message)
            .detail(format!(
                "No id is issued from a millisecond before the last one used, so ids never repeat or decrease. Ids resume once the clock reaches {}.",
                timestamp_of_unix_ms(resume_unix_ms)
            ))
            .hint("Check the system clock (NTP). To wait longer instead of failing, raise idgen.max_clock_wait.")
            .raise(),
        GenError::ClockBeforeEpoch { .. } => error(errors::SYSTEM_ERROR, message)
            .hint("Check the system clock, or idgen.epoch in postgresql.conf.")
            .raise(),
        GenError::Overflow { .. } => error(errors::SYSTEM_ERROR, message)
            .hint("Snowflake ids span about 69.7 years from idgen.epoch; a later epoch would make new ids sort below old ones.")
            .raise(),
        GenError::ClockBehindHorizon { resume_unix_ms, .. } => error(errors::SYSTEM_ERROR, message)
            .detail(format!(
                "Ids up to the horizon may have been issued before (by this server before a crash or restart, or by the primary it replayed), so no id comes from a millisecond at or before it. Ids resume once the clock reaches {}.",
                timestamp_of_unix_ms(resume_unix_ms)
            ))
            .hint("Check the system clock (NTP) against the server that issued the ids before. To wait longer instead of failing, raise idgen.max_clock_wait.")
            .raise(),
        GenError::Horizon(e) if e.kind() == std::io::ErrorKind::Interrupted => error(errors::QUERY_CANCELED, format!("canceling statement: {message}"))
            .detail("With synchronous replication, no id beyond the horizon is issued before the synchronous standbys have it: after a failover they would issue it again.")
            .hint("Check the synchronous standbys (pg_stat_replication, synchronous_standby_names); ids resume when they confirm the horizon.")
            .raise(),
        GenError::Horizon(_) => error(errors::IO_ERROR, message)
            .detail(format!("Before ids from a new second are issued, {HORIZON_FILE} in the data directory must be updated and fsynced."))
            .hint("Check free space and permissions in the data directory.")
            .raise(),
    }
}

#[track_caller]
fn parts(id: i64) -> sf::Parts {
    sf::decompose(id).unwrap_or_else(|e| {
        error(
            errors::INVALID_PARAMETER,
            format!("invalid snowflake id: {e}"),
        )
        .hint("Snowflake ids are non-negative bigints.")
        .raise()
    })
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

/// When the id was issued, given the epoch it was issued under.
#[pg_extern(immutable, strict, parallel_safe, name = "snowflake_timestamp")]
fn snowflake_timestamp_at_epoch(id: i64, epoch_ms: i64) -> TimestampWithTimeZone {
    timestamp_of_unix_ms(parts(id).millis + checked_epoch(epoch_ms))
}

/// When the id was issued, under idgen.epoch.
#[pg_extern(stable, strict, parallel_safe)]
fn snowflake_timestamp(id: i64) -> TimestampWithTimeZone {
    timestamp_of_unix_ms(parts(id).millis + settings::epoch_ms())
}

#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_worker_id(id: i64) -> i32 {
    i32::from(parts(id).worker_id)
}

#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_sequence(id: i64) -> i32 {
    i32::from(parts(id).sequence)
}

#[track_caller]
fn lowest_id(ts: TimestampWithTimeZone, epoch_ms: u64) -> i64 {
    let unix_ms = unix_ms_of(ts, "snowflake_from_timestamp");
    let millis = unix_ms - epoch_ms as i64;
    if !(0..=MAX_MILLIS as i64).contains(&millis) {
        error(
            errors::DATETIME_OUT_OF_RANGE,
            "timestamp out of range for a snowflake id",
        )
        .detail(format!(
            "Snowflake ids cover {epoch_ms} to {} ms since 1970.",
            epoch_ms + MAX_MILLIS
        ))
        .hint("Pass a timestamp at or after the epoch and less than about 69.7 years after it.")
        .raise();
    }
    sf::lowest_id_at(millis as u64).expect("range checked")
}

/// The smallest id issued at that millisecond (worker 0, sequence 0), under the given epoch: a
/// bound for range scans, cursors and partitions.
#[pg_extern(immutable, strict, parallel_safe, name = "snowflake_from_timestamp")]
fn snowflake_from_timestamp_at_epoch(ts: TimestampWithTimeZone, epoch_ms: i64) -> i64 {
    lowest_id(ts, checked_epoch(epoch_ms))
}

/// The smallest id issued at that millisecond, under idgen.epoch.
#[pg_extern(stable, strict, parallel_safe)]
fn snowflake_from_timestamp(ts: TimestampWithTimeZone) -> i64 {
    lowest_id(ts, settings::epoch_ms())
}

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
    let may_read = unsafe {
        pg_sys::has_privs_of_role(
            pg_sys::GetUserId(),
            pg_sys::Oid::from(pg_sys::ROLE_PG_MONITOR),
        )
    };
    if !may_read {
        error(errors::INSUFFICIENT_PRIVILEGE, "permission denied for function idgen_stats")
            .detail("idgen_stats() shows how many ids this server has issued: activity data, for superusers and members of pg_monitor only.")
            .hint("A superuser can GRANT pg_monitor TO the role that needs it.")
            .raise();
    }
    // Also on a damaged horizon file or a conflicting epoch, which it helps diagnose: the
    // horizon is then NULL (none loaded).
    if !shared::preloaded() {
        errors::not_preloaded("idgen_stats()");
    }
    let stats = shared::snowflake_state().stats();
    let epoch = settings::epoch_ms();
    let worker = settings::worker_id_if_set().map(i32::from);
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
