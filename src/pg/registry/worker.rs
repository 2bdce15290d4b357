//! The lease worker (`idgen lease worker`): a background worker that claims the worker id's
//! lease when the server starts (on a standby: when it is promoted), renews it, and publishes
//! what each answer means (`state::publish`). It decides nothing itself: `lease::decide` does.

use super::refusal_text;
use super::state::{self, publish, INFO};
use crate::pg::registry_client::{Claim, Registry};
use crate::pg::{clock, settings, shared};
use idgen_core::lease::{self, Mode, Refusal, Standing};
use pgrx::bgworkers::{BackgroundWorker, SignalWakeFlags};
use pgrx::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The lease worker's entry point (its C symbol is named in the worker's registration).
#[pg_guard]
#[no_mangle]
pub extern "C-unwind" fn idgen_lease_worker(_arg: pg_sys::Datum) {
    // SIGHUP (pg_reload_conf()) only wakes it: every setting it reads is fixed at start-up.
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let (Some(conninfo), Some(mode)) = (settings::registry(), settings::worker_mode()) else {
        return;
    };
    let holder = unsafe { pg_sys::GetSystemIdentifier() }.to_string();
    let run = state::run();
    let holder_name = holder_name();
    let lease_ms = settings::lease_ms();
    let skew_ms = settings::max_clock_skew_ms();
    let issue_unverified = settings::issue_unverified();
    let policy = lease::Policy {
        mode,
        issue_unconfirmed: issue_unverified,
        grace_ms: settings::lease_grace_ms(),
    };
    let base = settings::time_base();
    let layout = base.layout.to_string();
    // A neutral application_name: any role on the registry can read pg_stat_activity.
    let mut registry = Registry::new(&conninfo, "idgen lease worker");
    let mut standing = INFO.share().standing();
    let stop = stopping;
    // The lease and grace the registry last granted, where less than asked for (said once).
    let mut granted_less = None;
    loop {
        if stop() {
            exit_for_restart();
        }
        if let Standing::Refused(Refusal::Lost { .. }) = standing {
            // Nothing to claim: a lost lease is not replaced under running backends (a restart
            // claims again), and claiming another id would only keep it from other servers.
            if !wait(Duration::from_secs(3600)) {
                exit_for_restart();
            }
            continue;
        }
        // Connected first: the fence counts from the claim's send, after however long the
        // connection took (a black-holed first host costs its connect_timeout).
        let connected = registry.connect(&stop);
        let horizon_ms = shared::snowflake_state()
            .stats(&settings::time_base())
            .horizon_unix_ms;
        let sent_ms = clock::now_unix_ms();
        let claim = Claim {
            holder: &holder,
            run: &run,
            holder_name: &holder_name,
            worker_id: match (mode, &standing) {
                (Mode::Fixed(id), _) => Some(id),
                (Mode::Auto, Standing::Holding { worker_id, .. }) => Some(*worker_id),
                (Mode::Auto, _) => None,
            },
            lease_ms,
            horizon_ms,
            fence_ms: policy.fence_ms(sent_ms, lease_ms, None),
            layout: &layout,
            epoch_ms: base.epoch_unix_ms,
            max_worker: base.layout.max_worker(),
            grace_ms: policy.grace_ms,
            term: lease::reassert_term(&standing, sent_ms, skew_ms),
        };
        let wait_ms = match connected.and_then(|()| registry.claim(&claim, &stop)) {
            Ok(reply) => {
                let answer = &reply.answer;
                let lease_ends_ms = match answer {
                    lease::Answer::Granted { grant, .. } => grant.lease_ends_ms,
                    _ => 0,
                };
                let previous = match answer {
                    lease::Answer::Granted { previous, .. } => previous.clone().unwrap_or_default(),
                    _ => String::new(),
                };
                let conflict_end = match answer {
                    lease::Answer::Conflict {
                        other_lease_ends_ms,
                        ..
                    } => *other_lease_ends_ms,
                    _ => 0,
                };
                let reasserted = matches!(
                    answer,
                    lease::Answer::Granted {
                        how: lease::How::Reasserted,
                        ..
                    }
                );
                let granted = reply.granted;
                let clock_ahead = match answer {
                    lease::Answer::ClockAhead {
                        ahead_ms,
                        allowed_ms,
                    } => Some(Refusal::ClockAhead {
                        ahead_ms: *ahead_ms,
                        allowed_ms: *allowed_ms,
                    }),
                    _ => None,
                };
                let decision = lease::decide(policy, &standing, reply, sent_ms, lease_ms, skew_ms);
                let less =
                    granted.filter(|g| g.lease_ms < lease_ms || g.grace_ms < policy.grace_ms);
                if less != granted_less && matches!(decision.standing, Standing::Holding { .. }) {
                    if let Some(g) = less {
                        log!(
                            "idgen: the registry grants a lease of {} ms and a grace of {} ms, less than idgen.lease ({lease_ms} ms) and idgen.lease_grace ({} ms) ask for (its owner's bounds in idgen_registry.clock, or a raise of them not yet in effect): ids stop at the lease and grace granted",
                            g.lease_ms, g.grace_ms, policy.grace_ms
                        );
                    }
                    granted_less = less;
                }
                if reasserted {
                    if let Standing::Holding { worker_id, .. } = decision.standing {
                        log!("idgen: re-asserted the lease of worker id {worker_id} in the registry's new term (it was promoted or restored since it granted it)");
                    }
                }
                let opening = !matches!(standing, Standing::Holding { .. });
                if let Standing::Holding { worker_id, .. } = decision.standing {
                    if !opening && decision.resume_after_ms > 0 {
                        // Its own id back after its lease ended across a new term: the generator's
                        // word rises above what any holder may have issued meanwhile (a
                        // compare-and-swap, safe under running backends), and ids open again only
                        // once this clock has passed it too (the permit stays closed till then).
                        shared::snowflake_state().resume_after(&base, decision.resume_after_ms);
                        log!(
                            "idgen: took worker id {worker_id} back in the registry's new term; ids resume after {} (Unix ms)",
                            decision.resume_after_ms
                        );
                        while clock::now_unix_ms() <= decision.resume_after_ms {
                            if !wait(Duration::from_millis(10)) {
                                exit_for_restart();
                            }
                        }
                    }
                }
                if let Standing::Holding { worker_id, .. } = decision.standing {
                    if opening && decision.resume_after_ms > 0 {
                        // No id of this run was issued under this worker id (the permit was
                        // closed): start the generator after what the id's last holders issued.
                        shared::snowflake_state().resume_after(&base, decision.resume_after_ms);
                        let mut info = INFO.exclusive();
                        info.floor_ms = decision.resume_after_ms;
                        info.floor_from_len = state::copy_cut(&mut info.floor_from, &previous);
                    }
                    if opening {
                        log!(
                            "idgen: holding worker id {worker_id} in the registry{}",
                            if decision.resume_after_ms > 0 {
                                format!(
                                    "; ids resume after {} (Unix ms), after its last holder's",
                                    decision.resume_after_ms
                                )
                            } else {
                                String::new()
                            }
                        );
                    }
                }
                if let Standing::Refused(refusal) = &decision.standing {
                    if decision.standing != standing {
                        warning!("idgen: {}", refusal_text(refusal));
                    }
                }
                // A holder whose clock runs ahead keeps its fence, renewing nothing: said at each
                // answer, as a failed renewal is, with the cause.
                let ahead = clock_ahead.as_ref().map(refusal_text);
                if let (Some(text), Standing::Holding { .. }) = (&ahead, &decision.standing) {
                    warning!("idgen: the registry renews nothing while {text}: fix the clocks (NTP); ids stop at the lease's end unless a renewal succeeds first");
                }
                standing = decision.standing;
                publish(&standing, |info| {
                    info.failing = ahead.is_some();
                    info.clock_ahead_ms = match &clock_ahead {
                        Some(Refusal::ClockAhead { ahead_ms, .. }) => *ahead_ms,
                        _ => 0,
                    };
                    if lease_ends_ms > 0 {
                        info.lease_ends_ms = lease_ends_ms;
                        info.last_renewal_ms = sent_ms;
                    }
                    info.other_lease_ends_ms = conflict_end;
                    if conflict_end == 0 {
                        info.set_text(ahead.as_deref().unwrap_or(""));
                    }
                });
                match standing {
                    Standing::Holding { .. } if clock_ahead.is_none() => {
                        lease::renewal_interval_ms(
                            granted.map_or(lease_ms, |g| g.lease_ms.min(lease_ms)),
                        )
                    }
                    _ => lease::retry_interval_ms(lease_ms),
                }
            }
            Err(failure) => {
                if stop() {
                    exit_for_restart();
                }
                standing = lease::decide_unanswered(mode, &standing, issue_unverified);
                let what = match (&standing, mode) {
                    (Standing::Holding { fence_ms, .. }, _) if policy.fenced() => format!(
                        "could not renew the lease of worker id {} in the registry; ids go on until {fence_ms} (Unix ms: the lease's end plus idgen.lease_grace) unless a renewal succeeds first",
                        claim.worker_id.unwrap_or_default()
                    ),
                    (Standing::Holding { .. }, Mode::Fixed(id)) => format!(
                        "could not renew the lease of worker id {id} in the registry; this server carries on (idgen.unverified_worker_id = issue)"
                    ),
                    (Standing::Unverified, Mode::Fixed(id)) => format!(
                        "could not verify worker id {id} in the registry; issuing ids on it anyway (idgen.unverified_worker_id = issue)"
                    ),
                    (Standing::Refused(r), _) if !matches!(r, Refusal::NeverVerified) => format!(
                        "could not ask the registry again ({}; no snowflake id is issued)",
                        refusal_text(r)
                    ),
                    _ => "could not claim a worker id in the registry; no snowflake id is issued until it answers".to_string(),
                };
                let kind = if failure.misconfigured {
                    "misconfigured"
                } else {
                    "unreachable"
                };
                warning!("idgen: {what}: the registry is {kind}: {}", failure.message);
                publish(&standing, |info| {
                    info.failing = true;
                    info.set_text(&failure.message);
                });
                lease::retry_interval_ms(lease_ms)
            }
        };
        if !wait(Duration::from_millis(wait_ms)) {
            exit_for_restart();
        }
    }
}

/// Whether SIGTERM has come. Once seen it stays seen: pgrx's `sigterm_received()` clears the
/// flag it reads, and the registry client polls it while it waits for the registry, so a
/// SIGTERM that landed there was once forgotten by the loop here, which then renewed for ever
/// and held up the server's shutdown.
static STOPPING: AtomicBool = AtomicBool::new(false);

pub(super) fn stopping() -> bool {
    if BackgroundWorker::sigterm_received() {
        STOPPING.store(true, Ordering::Relaxed);
    }
    STOPPING.load(Ordering::Relaxed)
}

/// Waits on the latch; false once the worker must stop (SIGTERM, now or before, or the
/// postmaster gone).
pub(super) fn wait(timeout: Duration) -> bool {
    if !BackgroundWorker::wait_latch(Some(timeout)) {
        STOPPING.store(true, Ordering::Relaxed);
    }
    !stopping()
}

/// Exits with code 1: PostgreSQL restarts a background worker that exits so (after its restart
/// time), but unregisters one that exits with 0. A SIGTERM outside a shutdown
/// (pg_terminate_backend, kill) must not leave the server without renewals.
// proc_exit() never returns; the bindings say so for some versions only.
#[allow(unreachable_code)]
pub(super) fn exit_for_restart() -> ! {
    unsafe { pg_sys::proc_exit(1) };
    unreachable!("proc_exit returned")
}

/// The server as people know it: cluster_name (or "postgres") @ host : port.
fn holder_name() -> String {
    let cluster = unsafe {
        let p = pg_sys::cluster_name;
        if p.is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    let mut host = [0u8; 256];
    let host = if unsafe { libc::gethostname(host.as_mut_ptr().cast(), host.len()) } == 0 {
        let end = host.iter().position(|b| *b == 0).unwrap_or(host.len());
        String::from_utf8_lossy(&host[..end]).into_owned()
    } else {
        "unknown-host".into()
    };
    let port = unsafe { pg_sys::PostPortNumber };
    let cluster = if cluster.is_empty() {
        "postgres".into()
    } else {
        cluster
    };
    // The registry takes 1 to 200 printable ASCII characters (what other servers echo).
    format!("{cluster}@{host}:{port}")
        .chars()
        .map(|c| {
            if c == ' ' || c.is_ascii_graphic() {
                c
            } else {
                '?'
            }
        })
        .take(200)
        .collect()
}
