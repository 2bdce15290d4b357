//! What backends read of the lease, in shared memory: the permit (one word: ids may come from
//! milliseconds before it), the leased worker id beside it, and the details that the errors and
//! the status view show (`Info`, under a lock). The lease worker (`worker.rs`) is the one writer,
//! through `publish()`; snowflake_next() reads `permit()` per id.

use crate::pg::settings;
use idgen_core::lease::{Mode, Refusal, Standing, TermCause};
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgAtomic, PgLwLock};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

pub const NO_LIMIT: u64 = u64::MAX;
const NOTHING: u64 = 0;

pub(super) static PERMIT: PgAtomic<AtomicU64> = unsafe { PgAtomic::new(c"idgen_lease_permit") };
pub(super) static LEASED_WORKER: PgAtomic<AtomicU32> =
    unsafe { PgAtomic::new(c"idgen_lease_worker_id") };
pub(super) static INFO: PgLwLock<Info> = unsafe { PgLwLock::new(c"idgen_lease") };

const TEXT: usize = 1024;
const FLOOR_FROM: usize = 256;

/// What the status view and the error messages say. Written by the lease worker only.
#[derive(Clone, Copy)]
pub struct Info {
    pub(super) standing: u8,
    pub(super) worker_id: u16,
    /// The fence, or `NO_LIMIT` (a fixed id under idgen.unverified_worker_id = issue).
    pub(super) fence_ms: u64,
    /// When the registry ends the lease (its clock), from its last answer.
    pub(super) lease_ends_ms: u64,
    pub(super) last_renewal_ms: u64,
    pub(super) failing: bool,
    pub(super) other_lease_ends_ms: u64,
    /// Over the role's quota: how many leases the role holds (live, or unfenced and not freed),
    /// and how many it may.
    pub(super) quota_held: u32,
    pub(super) quota_max: u32,
    /// A registry of another id space: its epoch (its layout is the text).
    pub(super) registry_epoch_ms: u64,
    /// The registry's term of the lease held (its timeline and when it began), or, holding off,
    /// the hold-off's end (the registry's clock).
    pub(super) term: u64,
    pub(super) hold_off_until_ms: u64,
    /// Why the registry's term began (`TermCause::code`), holding off.
    pub(super) term_cause: u8,
    /// Over the role's quota with this server's own earlier run.
    pub(super) own_earlier_run: bool,
    /// A clock ahead of the registry's: by about how much, and what the registry allows.
    pub(super) clock_ahead_ms: u64,
    pub(super) allowed_skew_ms: u64,
    /// A lost lease: the registry's term had changed since it granted it.
    pub(super) forgotten: bool,
    /// Where this run's ids began, as the registry asked (Unix ms; 0: no floor): after what the
    /// worker id's earlier holders reported, the last of them `floor_from`.
    pub(super) floor_ms: u64,
    pub(super) floor_from_len: usize,
    pub(super) floor_from: [u8; FLOOR_FROM],
    /// The other holder (a conflict), the role's leases (over its quota), else the registry's
    /// or libpq's last error.
    pub(super) text_len: usize,
    pub(super) text: [u8; TEXT],
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
            term: 0,
            hold_off_until_ms: 0,
            term_cause: 0,
            own_earlier_run: false,
            clock_ahead_ms: 0,
            allowed_skew_ms: 0,
            forgotten: false,
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
const HOLDING_OFF: u8 = 9;
const CLOCK_AHEAD: u8 = 10;

impl Info {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.text[..self.text_len.min(TEXT)]).into_owned()
    }

    pub(super) fn set_text(&mut self, text: &str) {
        self.text_len = copy_cut(&mut self.text, text);
    }

    pub(super) fn standing(&self) -> Standing {
        match self.standing {
            HOLDING => Standing::Holding {
                worker_id: self.worker_id,
                fence_ms: self.fence_ms,
                term: self.term,
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
                forgotten: self.forgotten,
            }),
            HOLDING_OFF => Standing::Refused(Refusal::HoldingOff {
                until_ms: self.hold_off_until_ms,
                cause: TermCause::from_code(self.term_cause),
            }),
            CLOCK_AHEAD => Standing::Refused(Refusal::ClockAhead {
                ahead_ms: self.clock_ahead_ms,
                allowed_ms: self.allowed_skew_ms,
            }),
            NEVER_VERIFIED => Standing::Refused(Refusal::NeverVerified),
            OVER_QUOTA => Standing::Refused(Refusal::OverQuota {
                held: self.quota_held,
                quota: self.quota_max,
                holding: self.text(),
                first_ends_ms: self.other_lease_ends_ms,
                own_earlier_run: self.own_earlier_run,
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
pub(super) fn copy_cut(buf: &mut [u8], text: &str) -> usize {
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
pub(super) static HELD: PgAtomic<AtomicBool> = unsafe { PgAtomic::new(c"idgen_lease_held") };

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
    /// The registry took nothing of the last claim: this server's clock runs about this far
    /// ahead of its own (0: not so).
    pub clock_ahead_ms: u64,
}

fn info_view(info: &Info) -> View {
    View {
        standing: info.standing(),
        fence_ms: info.fence_ms,
        lease_ends_ms: info.lease_ends_ms,
        last_renewal_ms: info.last_renewal_ms,
        failing: info.failing,
        text: info.text(),
        clock_ahead_ms: if info.failing { info.clock_ahead_ms } else { 0 },
    }
}

pub fn view() -> View {
    info_view(&INFO.share())
}

/// Publishes a standing: the details first, then the permit (and worker id) that backends read.
pub(super) fn publish(standing: &Standing, details: impl FnOnce(&mut Info)) {
    let (code, worker_id, fence_ms) = match standing {
        Standing::Pending => (PENDING, 0, NOTHING),
        Standing::Holding {
            worker_id,
            fence_ms,
            ..
        } => (HOLDING, *worker_id, *fence_ms),
        Standing::Unverified => (UNVERIFIED, 0, NO_LIMIT),
        Standing::Refused(r) => match r {
            Refusal::Conflict { worker_id, .. } => (CONFLICT, *worker_id, NOTHING),
            Refusal::Exhausted => (EXHAUSTED, 0, NOTHING),
            Refusal::Lost { worker_id, .. } => (LOST, *worker_id, NOTHING),
            Refusal::HoldingOff { .. } => (HOLDING_OFF, 0, NOTHING),
            Refusal::ClockAhead { .. } => (CLOCK_AHEAD, 0, NOTHING),
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
        own_earlier_run,
    }) = standing
    {
        info.own_earlier_run = *own_earlier_run;
        info.quota_held = *held;
        info.quota_max = *quota;
        info.other_lease_ends_ms = *first_ends_ms;
        info.set_text(holding);
    }
    match standing {
        Standing::Holding { term, .. } => info.term = *term,
        Standing::Refused(Refusal::Lost { forgotten, .. }) => info.forgotten = *forgotten,
        Standing::Refused(Refusal::HoldingOff { until_ms, cause }) => {
            info.hold_off_until_ms = *until_ms;
            info.term_cause = cause.code();
        }
        Standing::Refused(Refusal::ClockAhead {
            ahead_ms,
            allowed_ms,
        }) => {
            info.clock_ahead_ms = *ahead_ms;
            info.allowed_skew_ms = *allowed_ms;
        }
        _ => {}
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

/// From `_PG_init` while preloading: the shared memory backends read.
pub(super) fn init() {
    pg_shmem_init!(PERMIT = AtomicU64::new(first_permit()));
    pg_shmem_init!(LEASED_WORKER = AtomicU32::new(0));
    pg_shmem_init!(INFO);
    pg_shmem_init!(HELD = AtomicBool::new(false));
}

/// In the postmaster while preloading, when idgen.registry is set: snowflake_next() then asks
/// the permit, and this run draws its number.
pub(super) fn mark_configured() {
    CONFIGURED.store(true, Ordering::Relaxed);
    RUN.store(draw_run(), Ordering::Relaxed);
}
