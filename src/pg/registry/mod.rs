//! The worker-id lease, on the Postgres side: the background worker that claims and renews it
//! (`idgen lease worker`), and what it publishes in shared memory for snowflake_next().
//!
//! The per-id path reads one word, the permit: ids may come from milliseconds before it
//! (`u64::MAX`: no limit; 0: none may be issued now — see `INFO` for why). It is the lease's
//! fence (but for a fixed id under idgen.unverified_worker_id = issue), and for automatic ids
//! the worker id sits beside it. Everything else (the standing, the
//! registry's last error, the other holder) is read only on an error or by the status view.
//!
//! The wing's files: `state` (the shared memory backends read), `worker` (the lease worker's
//! loop), `release` (the release at a clean shutdown), `blocks` (the block worker, which takes
//! blocks of the registry's counters for short_code_next()); the libpq client is
//! `registry_client`.

mod blocks;
mod release;
mod state;
mod worker;

pub use state::{configured, permit, registry_floor, view, Permit, View, NO_LIMIT};

use crate::pg::{clock, settings};
use idgen_core::lease::Refusal;
use pgrx::bgworkers::{BackgroundWorkerBuilder, BgWorkerStartTime};
use pgrx::prelude::*;
use std::time::Duration;

/// From `_PG_init` while preloading: shared memory, and the worker when a registry is set.
pub fn init() {
    state::init();
    if settings::registry().is_none() {
        return;
    }
    state::mark_configured();
    release::install();
    // Blocks of the registry's counters, for short_code_next(): not on a standby, which issues
    // no code; after promotion it takes blocks of its own.
    BackgroundWorkerBuilder::new("idgen block worker")
        .set_type("idgen block worker")
        .set_library("idgen")
        .set_function("idgen_block_worker")
        .enable_shmem_access(None)
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(Duration::from_secs(1)))
        .load();
    match settings::worker_mode() {
        Some(_) => BackgroundWorkerBuilder::new("idgen lease worker")
            .set_type("idgen lease worker")
            .set_library("idgen")
            .set_function("idgen_lease_worker")
            .enable_shmem_access(None)
            // Not on a standby, which issues no ids: after promotion, it claims, as a run of
            // its own (it takes its primary's id back only if the primary released it).
            .set_start_time(BgWorkerStartTime::RecoveryFinished)
            .set_restart_time(Some(Duration::from_secs(1)))
            .load(),
        None => {
            log!("idgen: idgen.registry is set but idgen.worker_id is not: no lease is claimed")
        }
    }
}

pub fn refusal_text(refusal: &Refusal) -> String {
    match refusal {
        Refusal::Conflict {
            worker_id, other, ..
        } => format!("worker id {worker_id} is leased to another server, {other}"),
        Refusal::Exhausted => format!(
            "no worker id is free in the registry: all {} are leased",
            worker_ids()
        ),
        Refusal::WrongIdSpace {
            registry_layout,
            registry_epoch_ms,
        } => format!(
            "the registry serves the ids of snowflake layout {registry_layout} under epoch {registry_epoch_ms}, and this server's idgen.layout is {} and its idgen.epoch {}",
            settings::layout(),
            settings::epoch_ms()
        ),
        Refusal::Lost {
            worker_id,
            forgotten: false,
        } => {
            format!("the lease of worker id {worker_id} went to another server after it ended")
        }
        Refusal::Lost {
            worker_id,
            forgotten: true,
        } => format!(
            "the registry lost this server's lease of worker id {worker_id}: it began a new term since it granted it (a promotion, a restore or a start), and the id is another server's now"
        ),
        Refusal::HoldingOff { until_ms, cause } => format!(
            "the registry grants no new lease until {}: {}, and may have lost leases it granted before",
            clock::timestamptz_text(*until_ms),
            cause.what()
        ),
        Refusal::ClockAhead {
            ahead_ms,
            allowed_ms,
        } => format!(
            "this server's clock runs about {ahead_ms} ms ahead of the registry's, and the registry allows {allowed_ms} ms"
        ),
        Refusal::NeverVerified => "the registry has not confirmed this server's worker id".into(),
        Refusal::OverQuota {
            first_ends_ms,
            own_earlier_run: true,
            ..
        } => format!(
            "an earlier run of this server still holds its registry role's lease, until {}",
            clock::timestamptz_text(*first_ends_ms)
        ),
        Refusal::OverQuota { held, quota, .. } => format!(
            "this server's registry role holds {held} lease{} already, all its quota allows ({quota})",
            if *held == 1 { "" } else { "s" }
        ),
    }
}

/// How many worker ids this server's layout has, as people write it ("1,024", "65,536").
pub fn worker_ids() -> String {
    let digits = (settings::layout().max_worker() + 1).to_string();
    let mut out = String::new();
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}
