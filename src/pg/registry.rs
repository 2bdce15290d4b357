//! The worker-id lease, on the Postgres side: the background worker that claims and renews it
//! (`idgen lease worker`), and what it publishes in shared memory for snowflake_next().
//!
//! The per-id path reads one word, the permit: ids may come from milliseconds before it
//! (`u64::MAX`: no limit; 0: none may be issued now — see `INFO` for why). It is the lease's
//! fence (but for a fixed id under idgen.unverified_worker_id = issue), and for automatic ids
//! the worker id sits beside it. Everything else (the standing, the
//! registry's last error, the other holder) is read only on an error or by the status view.

use crate::pg::registry_client::{Claim, Registry};
use crate::pg::{clock, settings, shared};
use idgen_core::lease::{self, Mode, Refusal, Standing};
use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags,
};
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgAtomic, PgLwLock};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

pub const NO_LIMIT: u64 = u64::MAX;
const NOTHING: u64 = 0;

static PERMIT: PgAtomic<AtomicU64> = unsafe { PgAtomic::new(c"idgen_lease_permit") };
static LEASED_WORKER: PgAtomic<AtomicU32> = unsafe { PgAtomic::new(c"idgen_lease_worker_id") };
static INFO: PgLwLock<Info> = unsafe { PgLwLock::new(c"idgen_lease") };

const TEXT: usize = 1024;
const FLOOR_FROM: usize = 256;

/// What the status view and the error messages say. Written by the lease worker only.
#[derive(Clone, Copy)]
pub struct Info {
    standing: u8,
    worker_id: u16,
    /// The fence, or `NO_LIMIT` (a fixed id under idgen.unverified_worker_id = issue).
    fence_ms: u64,
    /// When the registry ends the lease (its clock), from its last answer.
    lease_ends_ms: u64,
    last_renewal_ms: u64,
    failing: bool,
    other_lease_ends_ms: u64,
    /// Over the role's quota: how many leases the role holds (live, or unfenced and not freed),
    /// and how many it may.
    quota_held: u32,
    quota_max: u32,
    /// A registry of another id space: its epoch (its layout is the text).
    registry_epoch_ms: u64,
    /// Where this run's ids began, as the registry asked (Unix ms; 0: no floor): after what the
    /// worker id's earlier holders reported, the last of them `floor_from`.
    floor_ms: u64,
    floor_from_len: usize,
    floor_from: [u8; FLOOR_FROM],
    /// The other holder (a conflict), the role's leases (over its quota), else the registry's
    /// or libpq's last error.
    text_len: usize,
    text: [u8; TEXT],
}

impl Default for Info {
    fn default() -> Self {
        Info {
            standing: PENDING,
            worker_id: 0,
            fence_ms: NOTHING,
            lease_ends_ms: 0,
            last_renewal_ms: 0,
            failing: false,
            other_lease_ends_ms: 0,
            quota_held: 0,
            quota_max: 0,
            registry_epoch_ms: 0,
            floor_ms: 0,
            floor_from_len: 0,
            floor_from: [0; FLOOR_FROM],
            text_len: 0,
            text: [0; TEXT],
        }
    }
}

// SAFETY: plain data, no pointers.
unsafe impl PGRXSharedMemory for Info {}

const PENDING: u8 = 0;
const HOLDING: u8 = 1;
const UNVERIFIED: u8 = 2;
const CONFLICT: u8 = 3;
const EXHAUSTED: u8 = 4;
const LOST: u8 = 5;
const NEVER_VERIFIED: u8 = 6;
const OVER_QUOTA: u8 = 7;
const WRONG_ID_SPACE: u8 = 8;

impl Info {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.text[..self.text_len.min(TEXT)]).into_owned()
    }

    fn set_text(&mut self, text: &str) {
        self.text_len = copy_cut(&mut self.text, text);
    }

    fn standing(&self) -> Standing {
        match self.standing {
            HOLDING => Standing::Holding {
                worker_id: self.worker_id,
                fence_ms: self.fence_ms,
            },
            UNVERIFIED => Standing::Unverified,
            CONFLICT => Standing::Refused(Refusal::Conflict {
                worker_id: self.worker_id,
                other: self.text(),
                other_lease_ends_ms: self.other_lease_ends_ms,
            }),
            EXHAUSTED => Standing::Refused(Refusal::Exhausted),
            LOST => Standing::Refused(Refusal::Lost {
                worker_id: self.worker_id,
            }),
            NEVER_VERIFIED => Standing::Refused(Refusal::NeverVerified),
            OVER_QUOTA => Standing::Refused(Refusal::OverQuota {
                held: self.quota_held,
                quota: self.quota_max,
                holding: self.text(),
                first_ends_ms: self.other_lease_ends_ms,
            }),
            WRONG_ID_SPACE => Standing::Refused(Refusal::WrongIdSpace {
                registry_layout: self.text(),
                registry_epoch_ms: self.registry_epoch_ms,
            }),
            _ => Standing::Pending,
        }
    }
}

/// `text` cut to `buf` at a character boundary; returns the length copied.
fn copy_cut(buf: &mut [u8], text: &str) -> usize {
    let mut end = text.len().min(buf.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    buf[..end].copy_from_slice(&text.as_bytes()[..end]);
    end
}

/// Where this run's ids began because of what the registry recorded for its worker id: the
/// floor (Unix ms) and the holder it was taken from ("" when the registry's owner freed it).
/// None when the registry set no floor.
pub fn registry_floor() -> Option<(u64, String)> {
    let info = INFO.share();
    (info.floor_ms > 0).then(|| {
        (
            info.floor_ms,
            String::from_utf8_lossy(&info.floor_from[..info.floor_from_len.min(FLOOR_FROM)])
                .into_owned(),
        )
    })
}

/// Is a registry configured (and idgen preloaded)? Fixed when the server starts.
/// (snowflake_next() asks per row: a flag the postmaster set, not the setting's text.)
pub fn configured() -> bool {
    CONFIGURED.load(Ordering::Relaxed)
}

/// Set in the postmaster while preloading when idgen.registry is set; inherited across fork.
static CONFIGURED: AtomicBool = AtomicBool::new(false);

/// This run of the server: a random number the postmaster draws when it starts, inherited
/// across fork, kept through a crash and restart of its children (the same run: none of the
/// old children is left), new at each start of the postmaster. The registry's lease is one
/// run's, so that two running copies of one server are two holders. Never 0.
static RUN: AtomicU64 = AtomicU64::new(0);

/// Whether this run's lease worker has held a lease, so that a clean shutdown releases it
/// (else nothing is sent at shutdown). In shared memory: the worker sets it, the postmaster
/// reads it as it exits.
static HELD: PgAtomic<AtomicBool> = unsafe { PgAtomic::new(c"idgen_lease_held") };

/// This run, as the registry keeps it (decimal).
pub fn run() -> String {
    RUN.load(Ordering::Relaxed).to_string()
}

fn draw_run() -> u64 {
    let mut bytes = [0u8; 8];
    loop {
        if !unsafe { pg_sys::pg_strong_random(bytes.as_mut_ptr().cast(), bytes.len()) } {
            error!("idgen: could not draw a random number for this run of the server (pg_strong_random)");
        }
        // 63 bits: the registry reads it as a bigint-sized decimal.
        let run = u64::from_le_bytes(bytes) >> 1;
        if run != 0 {
            return run;
        }
    }
}

/// From `_PG_init` while preloading: shared memory, and the worker when a registry is set.
pub fn init() {
    pg_shmem_init!(PERMIT = AtomicU64::new(first_permit()));
    pg_shmem_init!(LEASED_WORKER = AtomicU32::new(0));
    pg_shmem_init!(INFO);
    pg_shmem_init!(HELD = AtomicBool::new(false));
    if settings::registry().is_none() {
        return;
    }
    CONFIGURED.store(true, Ordering::Relaxed);
    RUN.store(draw_run(), Ordering::Relaxed);
    unsafe {
        PREV_SHMEM_STARTUP = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(on_shmem_startup);
    }
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

/// Closed until the lease worker's first answer when a registry is set; else no limit.
fn first_permit() -> u64 {
    if settings::registry().is_some() {
        NOTHING
    } else {
        NO_LIMIT
    }
}

/// The worker id and fence snowflake_next() issues under, or an error saying why none.
pub struct Permit {
    pub worker_id: u16,
    /// Ids only from milliseconds (Unix) before this.
    pub fence_ms: u64,
}

/// For snowflake_next(): the fast path is one atomic read (two for automatic ids). Err: no id
/// may be issued now, and where the lease stands (the caller raises the refusal: this layer
/// knows nothing of the SQL functions).
pub fn permit(mode: Mode) -> Result<Permit, View> {
    let mut waited = 0;
    loop {
        let fence_ms = PERMIT.get().load(Ordering::Acquire);
        if fence_ms != NOTHING {
            let worker_id = match mode {
                Mode::Fixed(id) => id,
                Mode::Auto => LEASED_WORKER.get().load(Ordering::Relaxed) as u16,
            };
            return Ok(Permit {
                worker_id,
                fence_ms,
            });
        }
        let info = *INFO.share();
        if info.standing != PENDING || waited >= FIRST_CLAIM_WAIT_MS {
            return Err(info_view(&info));
        }
        // The server has just started and the worker's first claim is on its way.
        unsafe { pg_sys::pg_usleep(10_000) };
        pg_sys::check_for_interrupts!();
        waited += 10;
    }
}

/// How long snowflake_next() waits for the worker's first answer: its connection and its call
/// have 5 s each, and a restart of the worker 1 s.
const FIRST_CLAIM_WAIT_MS: u64 = 15_000;

/// What the errors and the status view show.
pub struct View {
    pub standing: Standing,
    pub fence_ms: u64,
    pub lease_ends_ms: u64,
    pub last_renewal_ms: u64,
    pub failing: bool,
    pub text: String,
}

fn info_view(info: &Info) -> View {
    View {
        standing: info.standing(),
        fence_ms: info.fence_ms,
        lease_ends_ms: info.lease_ends_ms,
        last_renewal_ms: info.last_renewal_ms,
        failing: info.failing,
        text: info.text(),
    }
}

pub fn view() -> View {
    info_view(&INFO.share())
}

// ---------------------------------------------------------------------------------------------
// The worker.

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
    let run = run();
    let holder_name = holder_name();
    let lease_ms = settings::lease_ms();
    let skew_ms = settings::max_clock_skew_ms();
    let issue_unverified = settings::issue_unverified();
    let policy = lease::Policy {
        mode,
        issue_unconfirmed: issue_unverified,
    };
    let base = settings::time_base();
    let layout = base.layout.to_string();
    // A neutral application_name: any role on the registry can read pg_stat_activity.
    let mut registry = Registry::new(&conninfo, "idgen lease worker");
    let mut standing = INFO.share().standing();
    let stop = stopping;
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
            fence_ms: policy.fence_ms(sent_ms, lease_ms),
            layout: &layout,
            epoch_ms: base.epoch_unix_ms,
            max_worker: base.layout.max_worker(),
        };
        let wait_ms = match registry.claim(&claim, &stop) {
            Ok(answer) => {
                let lease_ends_ms = match &answer {
                    lease::Answer::Granted { grant, .. } => grant.lease_ends_ms,
                    _ => 0,
                };
                let previous = match &answer {
                    lease::Answer::Granted { previous, .. } => previous.clone().unwrap_or_default(),
                    _ => String::new(),
                };
                let conflict_end = match &answer {
                    lease::Answer::Conflict {
                        other_lease_ends_ms,
                        ..
                    } => *other_lease_ends_ms,
                    _ => 0,
                };
                let decision = lease::decide(policy, &standing, answer, sent_ms, lease_ms, skew_ms);
                let opening = !matches!(standing, Standing::Holding { .. });
                if let Standing::Holding { worker_id, .. } = decision.standing {
                    if opening && decision.resume_after_ms > 0 {
                        // No id of this run was issued under this worker id (the permit was
                        // closed): start the generator after what the id's last holders issued.
                        shared::snowflake_state().resume_after(&base, decision.resume_after_ms);
                        let mut info = INFO.exclusive();
                        info.floor_ms = decision.resume_after_ms;
                        info.floor_from_len = copy_cut(&mut info.floor_from, &previous);
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
                standing = decision.standing;
                publish(&standing, |info| {
                    info.failing = false;
                    if lease_ends_ms > 0 {
                        info.lease_ends_ms = lease_ends_ms;
                        info.last_renewal_ms = sent_ms;
                    }
                    info.other_lease_ends_ms = conflict_end;
                    if conflict_end == 0 {
                        info.set_text("");
                    }
                });
                match standing {
                    Standing::Holding { .. } => lease::renewal_interval_ms(lease_ms),
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
                        "could not renew the lease of worker id {} in the registry; ids stop at its end ({fence_ms} Unix ms) unless a renewal succeeds first",
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

fn stopping() -> bool {
    if BackgroundWorker::sigterm_received() {
        STOPPING.store(true, Ordering::Relaxed);
    }
    STOPPING.load(Ordering::Relaxed)
}

/// Waits on the latch; false once the worker must stop (SIGTERM, now or before, or the
/// postmaster gone).
fn wait(timeout: Duration) -> bool {
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
fn exit_for_restart() -> ! {
    unsafe { pg_sys::proc_exit(1) };
    unreachable!("proc_exit returned")
}

/// Publishes a standing: the details first, then the permit (and worker id) that backends read.
fn publish(standing: &Standing, details: impl FnOnce(&mut Info)) {
    let (code, worker_id, fence_ms) = match standing {
        Standing::Pending => (PENDING, 0, NOTHING),
        Standing::Holding {
            worker_id,
            fence_ms,
        } => (HOLDING, *worker_id, *fence_ms),
        Standing::Unverified => (UNVERIFIED, 0, NO_LIMIT),
        Standing::Refused(r) => match r {
            Refusal::Conflict { worker_id, .. } => (CONFLICT, *worker_id, NOTHING),
            Refusal::Exhausted => (EXHAUSTED, 0, NOTHING),
            Refusal::Lost { worker_id } => (LOST, *worker_id, NOTHING),
            Refusal::NeverVerified => (NEVER_VERIFIED, 0, NOTHING),
            Refusal::OverQuota { .. } => (OVER_QUOTA, 0, NOTHING),
            Refusal::WrongIdSpace { .. } => (WRONG_ID_SPACE, 0, NOTHING),
        },
    };
    // The permit changes under the lock, so that a backend that finds it closed and then
    // reads the standing sees the standing that goes with it.
    let mut info = INFO.exclusive();
    info.standing = code;
    info.worker_id = worker_id;
    info.fence_ms = fence_ms;
    details(&mut info);
    // In a conflict the text names the other holder (the status view shows no error then).
    if let Standing::Refused(Refusal::Conflict { other, .. }) = standing {
        info.set_text(other);
    }
    if let Standing::Refused(Refusal::WrongIdSpace {
        registry_layout,
        registry_epoch_ms,
    }) = standing
    {
        info.set_text(registry_layout);
        info.registry_epoch_ms = *registry_epoch_ms;
    }
    if let Standing::Refused(Refusal::OverQuota {
        held,
        quota,
        holding,
        first_ends_ms,
    }) = standing
    {
        info.quota_held = *held;
        info.quota_max = *quota;
        info.other_lease_ends_ms = *first_ends_ms;
        info.set_text(holding);
    }
    if code == HOLDING {
        LEASED_WORKER
            .get()
            .store(u32::from(worker_id), Ordering::Relaxed);
        HELD.get().store(true, Ordering::Relaxed);
    }
    PERMIT.get().store(fence_ms, Ordering::Release);
    drop(info);
}

// ---------------------------------------------------------------------------------------------
// The release at a clean shutdown.

static mut PREV_SHMEM_STARTUP: pg_sys::shmem_startup_hook_type = None;

/// In the postmaster (at start and after each crash and restart of its children, when shared
/// memory is made anew and exit callbacks must be registered again): the release at its exit.
#[pg_guard]
unsafe extern "C-unwind" fn on_shmem_startup() {
    if let Some(prev) = PREV_SHMEM_STARTUP {
        prev();
    }
    if !pg_sys::IsUnderPostmaster {
        pg_sys::on_shmem_exit(Some(release_at_shutdown), pg_sys::Datum::from(0));
    }
}

/// The postmaster exits cleanly (code 0), every other process of the server gone: nothing will
/// issue an id of this run again, so its lease is released, with the last millisecond it
/// issued in, and the next start (or any server) takes the worker id over at once instead of
/// waiting for the lease to end. Bounded by the client's deadlines (5 s to connect, 5 s for
/// the call); if it fails, the lease ends by itself and the next start waits for that.
#[pg_guard]
unsafe extern "C-unwind" fn release_at_shutdown(code: i32, _arg: pg_sys::Datum) {
    if code != 0 || !HELD.get().load(Ordering::Relaxed) {
        return;
    }
    let Some(conninfo) = settings::registry() else {
        return;
    };
    let holder = pg_sys::GetSystemIdentifier().to_string();
    let last_ms = shared::snowflake_state().high_water_unix_ms(&settings::time_base());
    let mut registry = Registry::new(&conninfo, "idgen lease release");
    match registry.release(&holder, &run(), last_ms) {
        Ok(Some(worker_id)) => log!("idgen: released worker id {worker_id} in the registry at shutdown"),
        Ok(None) => {}
        Err(e) => warning!(
            "idgen: could not release the worker id's lease at shutdown: {}; the next start waits for the lease to end",
            e.message
        ),
    }
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
        Refusal::Lost { worker_id } => {
            format!("the lease of worker id {worker_id} went to another server after it ended")
        }
        Refusal::NeverVerified => "the registry has not confirmed this server's worker id".into(),
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
