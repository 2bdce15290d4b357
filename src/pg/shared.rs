//! Shared memory: the snowflake generator's words, whether idgen was preloaded, what is known
//! about the horizon file, and the horizon writer's lock. What these mean and who writes them is
//! `horizon_store.rs`'s business; this module only lays them out and hands them over.

use crate::pg::errors::{self, error};
use crate::pg::{clock, settings};
use idgen_core::horizon::FILE as HORIZON_FILE;
use idgen_core::layout::Layout;
use idgen_core::snowflake::{SharedState, TimeBase};
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgAtomic};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The core's generator state as it lies in shared memory. The core knows nothing of pgrx, so
/// the promise pgrx asks for is made here, on a wrapper of our own.
#[derive(Default)]
#[repr(transparent)]
struct Generator(SharedState);

// SAFETY: SharedState is plain atomics, no pointers: valid at any address in any process.
unsafe impl PGRXSharedMemory for Generator {}

static SNOWFLAKE: PgAtomic<Generator> = unsafe { PgAtomic::new(c"idgen_snowflake_state") };
/// Set when the horizon file could not be read: nothing that depends on the horizon runs.
static HORIZON_DAMAGED: PgAtomic<AtomicBool> = unsafe { PgAtomic::new(c"idgen_horizon_damaged") };
/// The epoch of a primary whose WAL this server replayed with another `idgen.epoch` of its own
/// (`NO_CONFLICT` when none): snowflake_next() refuses until the setting matches.
static EPOCH_CONFLICT: PgAtomic<AtomicU64> = unsafe { PgAtomic::new(c"idgen_epoch_conflict") };
const NO_CONFLICT: u64 = u64::MAX;
/// The layout of a primary whose WAL this server replayed with another `idgen.layout` of its
/// own, as its code (`NO_CONFLICT` when none): snowflake_next() refuses until the setting matches.
static LAYOUT_CONFLICT: PgAtomic<AtomicU64> = unsafe { PgAtomic::new(c"idgen_layout_conflict") };
/// The id space (layout and epoch) the horizon file recorded at start-up when it differs from
/// this server's and ids under the new one would not sort above every id made under it soon
/// enough (`NO_CONFLICT` when none), and from when they would (`NO_CONFLICT`: never).
static LAYOUT_REFUSED: PgAtomic<AtomicU64> = unsafe { PgAtomic::new(c"idgen_layout_refused") };
static EPOCH_REFUSED: PgAtomic<AtomicU64> = unsafe { PgAtomic::new(c"idgen_epoch_refused") };
static REFUSED_UNTIL: PgAtomic<AtomicU64> = unsafe { PgAtomic::new(c"idgen_refused_until") };

/// uuid_v7()'s ordering word: server-wide when preloaded, else this backend's own (below).
static UUID7: PgAtomic<AtomicU64> = unsafe { PgAtomic::new(c"idgen_uuid7_state") };
static UUID7_LOCAL: AtomicU64 = AtomicU64::new(0);

/// Set in the postmaster while preloading; every backend inherits it across fork.
static PRELOADED: AtomicBool = AtomicBool::new(false);

pub fn preloaded() -> bool {
    PRELOADED.load(Ordering::Relaxed)
}

/// Called from `_PG_init` only while preloading.
pub fn init() {
    PRELOADED.store(true, Ordering::Relaxed);
    pg_shmem_init!(SNOWFLAKE);
    pg_shmem_init!(HORIZON_DAMAGED);
    pg_shmem_init!(EPOCH_CONFLICT = AtomicU64::new(NO_CONFLICT));
    pg_shmem_init!(LAYOUT_CONFLICT = AtomicU64::new(NO_CONFLICT));
    pg_shmem_init!(LAYOUT_REFUSED = AtomicU64::new(NO_CONFLICT));
    pg_shmem_init!(EPOCH_REFUSED = AtomicU64::new(NO_CONFLICT));
    pg_shmem_init!(REFUSED_UNTIL = AtomicU64::new(NO_CONFLICT));
    pg_shmem_init!(UUID7);
    push_lock::request();
}

/// Once this process has seen recovery over, it stays over (as PostgreSQL caches it): the
/// per-row paths then skip the guarded FFI call.
static OUT_OF_RECOVERY: AtomicBool = AtomicBool::new(false);

/// Is this server in recovery (a standby, or a start-up replaying WAL)? Then it may not write
/// WAL, so it issues no snowflake id.
pub fn in_recovery() -> bool {
    if OUT_OF_RECOVERY.load(Ordering::Relaxed) {
        return false;
    }
    let recovering = unsafe { pg_sys::RecoveryInProgress() };
    if !recovering {
        OUT_OF_RECOVERY.store(true, Ordering::Relaxed);
    }
    recovering
}

/// The generator state as it is, with no check: for the horizon's own bookkeeping (start-up,
/// replay, shutdown) and for idgen_stats(), which reports on a damaged horizon too.
pub fn snowflake_state() -> &'static SharedState {
    &SNOWFLAKE.get().0
}

pub fn uuid7_shared_word() -> &'static AtomicU64 {
    UUID7.get()
}

pub fn horizon_damaged() -> bool {
    HORIZON_DAMAGED.get().load(Ordering::Relaxed)
}

pub fn set_horizon_damaged(damaged: bool) {
    HORIZON_DAMAGED.get().store(damaged, Ordering::Relaxed);
}

/// The primary epoch this server's own `idgen.epoch` conflicts with, if any.
pub fn epoch_conflict() -> Option<u64> {
    let epoch = EPOCH_CONFLICT.get().load(Ordering::Relaxed);
    (epoch != NO_CONFLICT).then_some(epoch)
}

pub fn set_epoch_conflict(primary_epoch_ms: Option<u64>) {
    EPOCH_CONFLICT
        .get()
        .store(primary_epoch_ms.unwrap_or(NO_CONFLICT), Ordering::Relaxed);
}

fn load_layout(slot: &PgAtomic<AtomicU64>) -> Option<Layout> {
    let code = slot.get().load(Ordering::Relaxed);
    (code != NO_CONFLICT)
        .then(|| Layout::from_code(code as u32))
        .flatten()
}

fn store_layout(slot: &PgAtomic<AtomicU64>, layout: Option<Layout>) {
    slot.get().store(
        layout.map_or(NO_CONFLICT, |l| u64::from(l.to_code())),
        Ordering::Relaxed,
    );
}

pub fn layout_conflict() -> Option<Layout> {
    load_layout(&LAYOUT_CONFLICT)
}

pub fn set_layout_conflict(primary: Option<Layout>) {
    store_layout(&LAYOUT_CONFLICT, primary);
}

/// A change of id space refused at start-up: what the horizon file records, and the Unix ms
/// after which ids of this server's would sort above them (None: never).
pub fn set_id_space_refused(refused: Option<(TimeBase, Option<u64>)>) {
    store_layout(&LAYOUT_REFUSED, refused.map(|(b, _)| b.layout));
    EPOCH_REFUSED.get().store(
        refused.map_or(NO_CONFLICT, |(b, _)| b.epoch_unix_ms),
        Ordering::Relaxed,
    );
    REFUSED_UNTIL.get().store(
        refused.and_then(|(_, until)| until).unwrap_or(NO_CONFLICT),
        Ordering::Relaxed,
    );
}

fn id_space_refused() -> Option<(TimeBase, Option<u64>)> {
    let layout = load_layout(&LAYOUT_REFUSED)?;
    let epoch_unix_ms = EPOCH_REFUSED.get().load(Ordering::Relaxed);
    let until = REFUSED_UNTIL.get().load(Ordering::Relaxed);
    Some((
        TimeBase {
            epoch_unix_ms,
            layout,
        },
        (until != NO_CONFLICT).then_some(until),
    ))
}

/// The generator state, or an error naming `what` when there is none to trust: not preloaded, a
/// damaged horizon file, an epoch or a layout that differs from the primary's whose WAL was
/// replayed, or a layout whose ids would sort below those the horizon file says were made.
#[track_caller]
pub fn snowflake(what: &str) -> &'static SharedState {
    check_horizon(what);
    if let Some(primary) = layout_conflict() {
        let own = settings::layout();
        error(errors::NOT_IN_PREREQUISITE_STATE, format!("{what} refuses to run: this server's idgen.layout ({own}) differs from the layout of the primary whose WAL it replayed ({primary})"))
            .detail("Ids under another layout decode to other times and worker ids, and may sort below the ids the primary issued.")
            .hint(format!("Set idgen.layout = '{primary}' in postgresql.conf (as on the primary) and restart the server."))
            .raise();
    }
    if let Some((recorded, until)) = id_space_refused() {
        let own = settings::time_base();
        let (then, now) = (
            errors::id_space(recorded.epoch_unix_ms, recorded.layout),
            errors::id_space(own.epoch_unix_ms, own.layout),
        );
        let when = match until {
            Some(ms) => format!("only from {}", clock::timestamptz_text(ms)),
            None => "at no time before this layout's time field ends".to_string(),
        };
        let later = until.map_or(String::new(), |ms| {
            format!(", or restart it after {}", clock::timestamptz_text(ms))
        });
        error(errors::NOT_IN_PREREQUISITE_STATE, format!("{what} refuses to run: this server makes ids under {now}, and the file {HORIZON_FILE} records ids made under {recorded_space}", recorded_space = then))
            .detail(format!("Ids under {now} sort above every id made under {then} (and cannot equal one) {when}: idgen.epoch and idgen.layout may change only where every new id sorts above every stored one."))
            .hint(format!("Set idgen.epoch = '{}' and idgen.layout = '{}' in postgresql.conf and restart the server{later}; docs/layouts.md says which changes are possible.", recorded.epoch_unix_ms, recorded.layout))
            .raise();
    }
    if let Some(primary) = epoch_conflict() {
        let own = settings::epoch_ms();
        error(errors::NOT_IN_PREREQUISITE_STATE, format!("{what} refuses to run: this server's idgen.epoch ({own}) differs from the epoch of the primary whose WAL it replayed ({primary})"))
            .detail("Ids on another epoch decode to other times and sort below (with the same worker id, may equal) the ids the primary issued.")
            .hint(format!("Set idgen.epoch = '{primary}' in postgresql.conf (as on the primary) and restart the server."))
            .raise();
    }
    &SNOWFLAKE.get().0
}

/// The one rule for a damaged horizon file: nothing that depends on the horizon runs until an
/// operator repairs the file and restarts the server — snowflake_next(), and uuid_v7() when
/// preloaded. Replay does not overwrite it either (see `horizon_store::replay`).
#[track_caller]
pub fn check_horizon(what: &str) {
    if !preloaded() {
        errors::not_preloaded(what);
    }
    if horizon_damaged() {
        error(errors::DATA_CORRUPTED, format!("{what} refuses to run: the file {HORIZON_FILE} in the data directory could not be read"))
            .detail("It records the highest millisecond used by snowflake ids and UUIDs; without it, ids after a clock step back could repeat old ones or sort below them. The server log says what was wrong with it.")
            .hint(format!("Stop the server and write the line 'idgen-horizon-v1 <unix ms>' into {HORIZON_FILE}, with a time at or after the newest snowflake id or UUID this server issued; then start it."))
            .raise();
    }
}

/// The generator state whose horizon uuid_v7() must keep ahead of its UUIDs: when preloaded and
/// out of recovery (a standby writes no WAL; its UUIDs are its own). Raises on a damaged
/// horizon file, as snowflake_next() does.
#[track_caller]
pub fn uuid7_horizon() -> Option<&'static SharedState> {
    if !preloaded() {
        return None;
    }
    check_horizon("uuid_v7()");
    (!in_recovery()).then(|| &SNOWFLAKE.get().0)
}

/// The word that orders uuid_v7(): across the server when preloaded, within this backend
/// otherwise (no error: ordering within a backend still holds).
pub fn uuid7_word() -> &'static AtomicU64 {
    if preloaded() {
        UUID7.get()
    } else {
        &UUID7_LOCAL
    }
}

/// The horizon writer's lock: an LWLock, which PostgreSQL releases on every exit of its holder
/// (an ERROR, a FATAL, a background worker's SIGTERM), and a condition variable on which the
/// backends that wait for a new horizon sleep instead of spinning.
pub mod push_lock {
    use pgrx::pg_sys;
    use std::ptr;

    const TRANCHE: &std::ffi::CStr = c"idgen_horizon";
    const CV_NAME: &std::ffi::CStr = c"idgen_horizon_cv";
    /// How long a waiter sleeps at most before it looks again: a holder that exits without
    /// waking anyone (a FATAL) costs the others this much, once.
    const WAIT_MS: i64 = 10;

    // Set in the postmaster's start-up hook; backends inherit them across fork.
    static mut LOCK: *mut pg_sys::LWLock = ptr::null_mut();
    static mut CV: *mut pg_sys::ConditionVariable = ptr::null_mut();

    #[cfg(not(any(feature = "pg13", feature = "pg14")))]
    static mut PREV_REQUEST: pg_sys::shmem_request_hook_type = None;

    /// From `_PG_init`: the space and the lock are requested in the request hook (15+), or
    /// right away (13, 14).
    pub fn request() {
        #[cfg(not(any(feature = "pg13", feature = "pg14")))]
        unsafe {
            PREV_REQUEST = pg_sys::shmem_request_hook;
            pg_sys::shmem_request_hook = Some(on_request);
        }
        #[cfg(any(feature = "pg13", feature = "pg14"))]
        reserve();
    }

    #[cfg(not(any(feature = "pg13", feature = "pg14")))]
    #[pgrx::pg_guard]
    unsafe extern "C-unwind" fn on_request() {
        unsafe {
            if let Some(prev) = PREV_REQUEST {
                prev();
            }
        }
        reserve();
    }

    fn reserve() {
        unsafe {
            // ShmemInitStruct rounds every allocation up to a cache line.
            pg_sys::RequestAddinShmemSpace(
                std::mem::size_of::<pg_sys::ConditionVariable>().next_multiple_of(128),
            );
            pg_sys::RequestNamedLWLockTranche(TRANCHE.as_ptr(), 1);
        }
    }

    /// From the shared-memory start-up hook, in the postmaster.
    pub fn attach() {
        unsafe {
            let mut found = false;
            let cv = pg_sys::ShmemInitStruct(
                CV_NAME.as_ptr(),
                std::mem::size_of::<pg_sys::ConditionVariable>(),
                &mut found,
            )
            .cast::<pg_sys::ConditionVariable>();
            if !found {
                pg_sys::ConditionVariableInit(cv);
            }
            CV = cv;
            LOCK = &raw mut (*pg_sys::GetNamedLWLockTranche(TRANCHE.as_ptr())).lock;
        }
    }

    pub fn try_acquire() -> bool {
        unsafe { pg_sys::LWLockConditionalAcquire(LOCK, pg_sys::LWLockMode::LW_EXCLUSIVE) }
    }

    /// Releases the lock and wakes every waiter.
    pub fn release() {
        unsafe {
            pg_sys::LWLockRelease(LOCK);
            pg_sys::ConditionVariableBroadcast(CV);
        }
    }

    /// Sleeps until woken or `WAIT_MS` passed, unless `moved()` already holds; interruptible
    /// (cancel, statement_timeout, termination).
    pub fn wait(moved: &dyn Fn() -> bool) {
        unsafe {
            pg_sys::ConditionVariablePrepareToSleep(CV);
            if !moved() {
                pg_sys::ConditionVariableTimedSleep(CV, WAIT_MS, pg_sys::PG_WAIT_EXTENSION);
            }
            #[allow(clippy::let_unit_value)]
            let _ = pg_sys::ConditionVariableCancelSleep();
        }
    }
}
