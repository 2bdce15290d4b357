//! What snowflake_next() and uuid_v7() raise when they issue nothing: the registry's refusals, a
//! Citus node's clash with another, and the generator's errors, worded here beside the
//! registry's and the horizon's own texts, so that the SQL functions only call them.

use crate::pg::citus_peers;
use crate::pg::errors::{self, error};
use crate::pg::horizon_store::{self, HORIZON_FILE};
use crate::pg::registry::{self, Permit};
use crate::pg::timestamps::timestamp_of_unix_ms;
use crate::pg::{clock, settings};
use idgen_core::lease::{self, Mode, Refusal, Standing};
use idgen_core::peers::Clash;
use idgen_core::snowflake::GenError;

#[track_caller]
pub fn raise_auto_without_registry() -> ! {
    error(errors::NOT_IN_PREREQUISITE_STATE, "idgen.worker_id = auto needs a registry, and idgen.registry is not set")
        .detail("With auto, the worker id is leased from the registry, a PostgreSQL database that every server of the fleet reaches.")
        .hint("Install sql/registry/idgen_registry.sql in the registry database, set idgen.registry to its libpq connection string (no password: use a passfile) and restart; or give this server a fixed idgen.worker_id.")
        .raise()
}

#[track_caller]
pub fn raise_lease_ended(permit: &Permit, view: &registry::View) -> ! {
    let why = if view.failing {
        format!("The registry could not renew it: {}", view.text)
    } else {
        "The registry has not renewed it.".to_string()
    };
    error(errors::NOT_IN_PREREQUISITE_STATE, format!(
        "snowflake_next() refuses to run: the lease of worker id {} ended at {}, its grace included",
        permit.worker_id, timestamp_of_unix_ms(permit.fence_ms)))
        .detail(format!("The lease is the right to issue (with idgen.worker_id = auto, and with a fixed id unless idgen.unverified_worker_id = issue): a server that cannot reach the registry issues on for idgen.lease_grace past the lease's end, and then the registry may give the worker id to another server, so no id comes from a millisecond at or after that. {why}"))
        .hint(if view.clock_ahead_ms > 0 {
            "Fix the clocks: run NTP (chrony, systemd-timesyncd) on this server and on the registry's, and compare them; the registry renews the lease once this server's clock is within the skew it allows (idgen_registry.clock.max_clock_skew_ms). Ids resume then."
        } else {
            "Ids resume as soon as the registry renews the lease. Check the registry server and idgen.registry; idgen_lease_status() shows the lease."
        })
        .raise()
}

/// snowflake_next() issues nothing: the registry refused, or never answered.
#[track_caller]
pub fn raise_refused(mode: Mode, view: &registry::View) -> ! {
    let Standing::Refused(refusal) = &view.standing else {
        error(errors::NOT_IN_PREREQUISITE_STATE, "snowflake_next() refuses to run: the lease worker has not heard from the registry yet")
            .detail(format!("The registry (idgen.registry) has not answered the first claim of this server's worker id. {}", view.text))
            .hint("Check the registry server and the server log; idgen_lease_status() shows where the lease stands.")
            .raise()
    };
    let message = format!(
        "snowflake_next() refuses to run: {}",
        registry::refusal_text(refusal)
    );
    let e = error(errors::NOT_IN_PREREQUISITE_STATE, message);
    match refusal {
        // Past its end by more than the clocks may differ: the registry keeps the id for that
        // server for a reason the message gives (an unfenced lease).
        Refusal::Conflict { other_lease_ends_ms, .. }
            if lease::kept_past_its_end(*other_lease_ends_ms, settings::max_clock_skew_ms(), clock::now_unix_ms()) => e
            .detail(format!("Its lease ended at {}, and at its last answer the registry still kept the id for that server, for the reason given above. Two servers with one worker id can issue the same ids.", timestamp_of_unix_ms(*other_lease_ends_ms)))
            .hint("The view idgen_registry.holders in the registry shows the lease. An unfenced lease (a server under idgen.unverified_worker_id = issue, whose lease's end does not show that it stopped) is the registry owner's to free once that server is gone for good: SELECT idgen_registry.free(worker_id), and this server then takes it. Otherwise give this server a worker id of its own (or idgen.worker_id = auto) and restart it.")
            .raise(),
        Refusal::Conflict { other_lease_ends_ms, .. } => e
            .detail(format!("Its lease ends at {}. Two servers with one worker id can issue the same ids; the registry (idgen.registry) holds a live lease of it for the other server.", timestamp_of_unix_ms(*other_lease_ends_ms)))
            .hint("Where the other is another run of this server that has stopped (a start after a crash), nothing is needed: this server keeps asking and issues ids once that lease ends. Otherwise give this server a worker id of its own (or idgen.worker_id = auto) and restart it; the view idgen_registry.holders in the registry shows the ids in use.")
            .raise(),
        Refusal::Exhausted => e
            .detail(format!("With idgen.worker_id = auto, each server leases one of the {} worker ids of layout {}. A lease that nobody renews is free once it ends, but one held by a fixed-id server under idgen.unverified_worker_id = issue: that server carries on without the registry, so its id is never given to another server until the registry's owner frees it.", registry::worker_ids(), settings::layout()))
            .hint("See the view idgen_registry.holders in the registry for who holds them; for a server that is gone for good, the registry's owner runs SELECT idgen_registry.free(worker_id). This server keeps asking, and issues ids as soon as one is free.")
            .raise(),
        Refusal::OverQuota { holding, first_ends_ms, own_earlier_run: true, .. } => e
            .detail(format!("Its registry role's leases are all this server's own, from an earlier run: {holding}. A run that crashed, or was stopped with pg_ctl -m immediate, could not give its lease back, and a restart is a new run; until that lease ends, its grace included, the role's quota (idgen_registry.quota) has no room for another. This server takes its id back then, above everything the earlier run issued."))
            .hint(format!("Nothing is needed: this server keeps asking, and issues ids from {} on. If a copy of this server runs beside it (the same system identifier), that copy holds the lease, and this one should not issue. The registry's owner may free the id at once if the earlier run is known to be gone: SELECT idgen_registry.free(worker_id).", timestamp_of_unix_ms(*first_ends_ms)))
            .raise(),
        Refusal::OverQuota { holding, first_ends_ms, .. } => {
            let ends = if *first_ends_ms == 0 {
                "none of them ends by itself".to_string()
            } else {
                format!("the first fenced one ends at {}", timestamp_of_unix_ms(*first_ends_ms))
            };
            e.detail(format!("Its leases: {holding}; {ends}. The registry's owner allows each registry role a number of leases at once (one unless idgen_registry.quota says more), so that no member can take the ids the others need: its live leases, and its unfenced ones (fixed ids under idgen.unverified_worker_id = issue), ended or not, until the owner frees them."))
            .hint("Give this server a registry role of its own, or, where one role is meant to hold more (an HA pair, whose promoted standby takes an id while its crashed primary's lease runs out), have the registry's owner raise it in idgen_registry.quota. This server keeps asking, and issues ids once the role holds fewer.")
            .raise()
        }
        Refusal::Lost { forgotten: false, .. } => e
            .detail("This server could not renew its lease before it ended, and the registry then gave the worker id to another server: ids from here could repeat that server's.")
            .hint("Restart this server: it claims a worker id again (with auto, a free one).")
            .raise(),
        Refusal::Lost { forgotten: true, .. } => e
            .detail("The registry answered in a term other than the one it granted this server's lease in: it was promoted, restored or started from a copy that had not recorded the lease, this server could not re-assert it before the registry's hold-off ended, and the registry then gave the worker id to another server. Ids from here could repeat that server's.")
            .hint("Restart this server: it claims a worker id again (with auto, a free one). To keep a registry failover from losing leases, replicate the registry synchronously (docs/registry.md).")
            .raise(),
        Refusal::HoldingOff { until_ms, cause } => e
            .detail(format!("The registry began a new term ({}) and may have lost the last leases it granted: until {}, when every lease it may have granted in the history it lost has ended, it grants none but to servers re-asserting their own, so that no id it lost goes to a second server.", cause.what(), timestamp_of_unix_ms(*until_ms)))
            .hint("Nothing is needed: this server keeps asking, and issues ids once the registry grants its lease. Where the registry's owner knows it lost nothing (a clean restart, a failover to a synchronous standby), the owner may end the hold-off: SELECT idgen_registry.end_hold_off() (docs/registry.md says when that is safe).")
            .raise(),
        Refusal::ClockAhead { ahead_ms, allowed_ms } => e
            .detail(format!("This server reports its fence and horizon by its own clock, and the registry takes nothing further ahead of its clock than the clock skew it allows (idgen_registry.clock.max_clock_skew_ms, {allowed_ms} ms), so that no server can make the next holder of an id wait; this server's clock runs about {ahead_ms} ms ahead of the registry's, and no lease was granted."))
            .hint("Fix the clocks: run NTP (chrony, systemd-timesyncd) on this server and on the registry's, and compare them (date on both). Only if the fleet's clocks really are that far apart should the registry's owner raise max_clock_skew_ms in idgen_registry.clock, with idgen.max_clock_skew to match.")
            .raise(),
        Refusal::WrongIdSpace { .. } => e
            .detail("A registry leases the worker ids of one id space, one layout under one epoch; ids of two layouts or two epochs can be equal whatever their worker ids, so it serves no server of another.")
            .hint("Point idgen.registry at a registry installed for this server's layout and epoch (psql -v layout=... -v epoch=... -f sql/registry/idgen_registry.sql, docs/registry.md), or set idgen.layout and idgen.epoch to the registry's, and restart.")
            .raise(),
        Refusal::NeverVerified => {
            let hint = match mode {
                Mode::Auto => "Check idgen.registry, the registry server and the server log; ids start once the registry grants a lease.".to_string(),
                Mode::Fixed(_) => "Check idgen.registry, the registry server and the server log. To issue ids on a fixed worker id that the registry cannot confirm, set idgen.unverified_worker_id = issue.".to_string(),
            };
            e.detail(format!("The registry did not answer the claim of this server's worker id: {}", view.text))
                .hint(hint)
                .raise()
        }
    }
}

#[track_caller]
pub fn raise_generator(e: GenError) -> ! {
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
            .hint("A layout's ids span its lifetime from idgen.epoch (Twitter's: about 69.7 years; docs/layouts.md lists each); a later epoch would make new ids sort below old ones.")
            .raise(),
        GenError::ClockBehindHorizon { resume_unix_ms, .. } if horizon_store::id_space_change().is_some_and(|(_, floor)| resume_unix_ms <= floor.saturating_add(1)) => {
            let (from, floor) = horizon_store::id_space_change().expect("checked");
            error(errors::SYSTEM_ERROR, format!("snowflake_next() issues no id before {}, where ids under this server's idgen.epoch and idgen.layout begin to sort above those made before under {}", clock::timestamptz_text(floor), errors::id_space(from.epoch_unix_ms, from.layout)))
                .detail(format!("The settings changed since ids were last made here; ids resume once the clock reaches {}.", timestamp_of_unix_ms(resume_unix_ms)))
                .hint("Wait and call again, or raise idgen.max_clock_wait to wait longer; or put idgen.epoch and idgen.layout back and restart.")
                .raise()
        }
        GenError::ClockBehindHorizon { resume_unix_ms, behind_ms, .. } if registry::registry_floor().is_some_and(|(floor, _)| resume_unix_ms <= floor.saturating_add(settings::layout().unit_ms())) => {
            let (floor, from) = registry::registry_floor().expect("checked");
            let worker = registry::view().standing;
            let worker = match worker {
                Standing::Holding { worker_id, .. } => format!("worker id {worker_id}"),
                _ => "this server's worker id".into(),
            };
            let from = if from.is_empty() { "a holder the registry's owner freed".to_string() } else { from };
            error(errors::SYSTEM_ERROR, format!("snowflake_next() issues no id before {}: the registry recorded {worker}'s earlier holders as having issued ids up to then, {behind_ms} ms ahead of this server's clock", clock::timestamptz_text(floor)))
                .detail(format!("This server took {worker} over from {from} (idgen.registry); ids resume once the clock reaches {}, more than the 1-s horizon lead plus idgen.max_clock_wait from now.", timestamp_of_unix_ms(resume_unix_ms)))
                .hint("Check this server's clock and the earlier holder's (NTP) against the registry's: idgen_registry.holders in the registry shows each id's last horizon. The registry's owner bounds how far ahead a member may report in idgen_registry.clock (docs/registry.md). To wait longer instead of failing, raise idgen.max_clock_wait.")
                .raise()
        }
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

/// Inside Citus with no registry, snowflake_next() issues nothing: its check of the other nodes
/// found a clash (`Some`), or another session's check has not ended in time (`None`).
#[track_caller]
pub fn raise_peer_clash(refused: Option<citus_peers::Refused>) -> ! {
    let Some(refused) = refused else {
        error(errors::NOT_IN_PREREQUISITE_STATE, "snowflake_next() refuses to run: another session's check of this server's worker id against the other Citus nodes has not ended")
            .detail("With no registry, a Citus node issues its first id only once its worker id was checked against every other node in pg_dist_node. Each node gets 2 s to connect and 2 s to answer.")
            .hint("Try again; the server log says which node the check waited on.")
            .raise()
    };
    let next = timestamp_of_unix_ms(refused.looked_at_ms + citus_peers::RECHECK_MS);
    match refused.clash {
        Clash::SameWorkerId { worker_id, other } => error(errors::NOT_IN_PREREQUISITE_STATE, format!(
            "snowflake_next() refuses to run: worker id {worker_id} is also the worker id of node {other}, and two nodes of one Citus cluster would issue the same ids"))
            .detail(format!("With no registry (idgen.registry), a Citus node checks its worker id against every other node in pg_dist_node before its first id. That node issues under worker id {worker_id}, or may; this server issues nothing until it no longer does, and looks again from {next}."))
            .hint("Give each node its own idgen.worker_id (its Citus group id is a good choice: SELECT groupid FROM pg_dist_local_group) and restart the node that has the wrong one; or lease the worker ids from a registry (idgen.registry).")
            .raise(),
        Clash::OtherIdSpace { other, epoch_ms, layout } => error(errors::NOT_IN_PREREQUISITE_STATE, format!(
            "snowflake_next() refuses to run: node {other} issues ids under {}, and this server under {}",
            errors::id_space(epoch_ms, layout), errors::id_space(settings::epoch_ms(), settings::layout())))
            .detail(format!("The nodes of a Citus cluster store their ids in the same distributed tables, where ids of two id spaces can be equal whatever the worker ids. This server looks again from {next}."))
            .hint("Give every node of the Citus cluster the same idgen.epoch and idgen.layout, and restart the node that differs.")
            .raise(),
    }
}
