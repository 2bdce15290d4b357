//! Shared memory: the snowflake generator's words, whether idgen was preloaded, and the hooks
//! that load the horizon at start-up and record the exact high-water mark at a clean shutdown.

use crate::clock::HORIZON_FILE;
use crate::errors::{self, error};
use crate::{horizon, settings, snowflake::SharedState, uuid7};
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgAtomic};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

// SAFETY: SharedState is plain atomics, no pointers: valid at any address in any process.
unsafe impl PGRXSharedMemory for SharedState {}

static SNOWFLAKE: PgAtomic<SharedState> = unsafe { PgAtomic::new(c"idgen_snowflake_state") };
/// Set when the horizon file could not be read: snowflake_next() then refuses to guess.
static HORIZON_DAMAGED: PgAtomic<AtomicBool> = unsafe { PgAtomic::new(c"idgen_horizon_damaged") };

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
    pg_shmem_init!(UUID7);
    unsafe {
        PREV_SHMEM_STARTUP = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(on_shmem_startup);
    }
    // PostgreSQL 13 and 14 have no custom WAL resource managers: the file alone keeps the
    // horizon there, so it does not survive a failover.
    #[cfg(not(any(feature = "pg13", feature = "pg14")))]
    crate::wal::register();
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

/// WAL replay of a horizon the primary recorded (see `wal.rs`): the generator resumes past it,
/// uuid_v7()'s word too, and the file records it, as if this server had pushed it itself.
pub fn replay_horizon(unix_ms: u64) {
    if !preloaded() {
        return;
    }
    if SNOWFLAKE
        .get()
        .replay_horizon(settings::epoch_ms(), unix_ms)
    {
        uuid7::raise_past(UUID7.get(), unix_ms);
        if let Err(e) = horizon::write(Path::new(HORIZON_FILE), unix_ms) {
            // Recovery stops rather than go on without a durable copy: after a restart, replay
            // begins at the last restartpoint and would not see this record again.
            error(errors::IO_ERROR, format!("idgen: could not record {HORIZON_FILE} while replaying WAL: {e}"))
                .hint("Check free space and permissions in the data directory, then start the server again.")
                .raise();
        }
    }
}

/// The highest Unix millisecond in use by snowflake ids or UUIDs (preloaded only).
fn high_water_unix_ms() -> u64 {
    let snowflake = SNOWFLAKE.get().high_water_unix_ms(settings::epoch_ms());
    snowflake.max(uuid7::last_ms(UUID7.get()))
}

/// The generator state, or the not-preloaded error naming `what`.
#[track_caller]
pub fn snowflake(what: &str) -> &'static SharedState {
    if !preloaded() {
        errors::not_preloaded(what);
    }
    if HORIZON_DAMAGED.get().load(Ordering::Relaxed) {
        error(errors::DATA_CORRUPTED, format!("{what} refuses to run: the file {HORIZON_FILE} in the data directory could not be read"))
            .detail("It records the highest millisecond used by snowflake ids; without it, ids after a clock step back could repeat old ones. The server log says what was wrong with it.")
            .hint(format!("Stop the server and write the line 'idgen-horizon-v1 <unix ms>' into {HORIZON_FILE}, with a time at or after the newest snowflake id this server issued; then start it."))
            .raise();
    }
    SNOWFLAKE.get()
}

/// The generator state whose horizon uuid_v7() must keep ahead of its UUIDs: when preloaded,
/// out of recovery (a standby writes no WAL; its UUIDs are its own) and with a readable horizon.
pub fn uuid7_horizon() -> Option<&'static SharedState> {
    (preloaded() && !HORIZON_DAMAGED.get().load(Ordering::Relaxed) && !in_recovery())
        .then(|| SNOWFLAKE.get())
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

static mut PREV_SHMEM_STARTUP: pg_sys::shmem_startup_hook_type = None;

/// Runs in the postmaster after pgrx has laid out our shared memory: at start-up, and again when
/// the postmaster re-creates shared memory after a backend crash.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn on_shmem_startup() {
    unsafe {
        if let Some(prev) = PREV_SHMEM_STARTUP {
            prev();
        }
    }
    let state = SNOWFLAKE.get();
    let damaged = HORIZON_DAMAGED.get();
    match horizon::read(Path::new(HORIZON_FILE)) {
        Ok(mark) => {
            state.seed(settings::epoch_ms(), mark.unwrap_or(0));
            // UUIDs too resume past the mark: after a restart with the clock set back, they still
            // sort above every UUID made before.
            if let Some(mark) = mark {
                uuid7::raise_past(UUID7.get(), mark);
            }
            damaged.store(false, Ordering::Relaxed);
        }
        Err(e) => {
            damaged.store(true, Ordering::Relaxed);
            error(errors::DATA_CORRUPTED, format!("idgen: could not read {HORIZON_FILE}: {e}"))
                .hint("snowflake_next() is disabled until the file is repaired; see the README, section \"Restarts, crashes and the clock\".")
                .warn();
        }
    }
    // As pg_stat_statements does: register the shutdown hook from the postmaster only.
    if unsafe { !pg_sys::IsUnderPostmaster } {
        unsafe { pg_sys::on_shmem_exit(Some(on_shmem_shutdown), pg_sys::Datum::from(0)) };
    }
}

/// A clean shutdown records the exact last millisecond issued, lower than the running horizon,
/// so the next start need not wait for the clock to pass the lead. After a crash (code != 0)
/// shared memory is not trusted and the horizon on disk stands.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn on_shmem_shutdown(code: i32, _arg: pg_sys::Datum) {
    if code != 0 || HORIZON_DAMAGED.get().load(Ordering::Relaxed) {
        return;
    }
    let mark = high_water_unix_ms();
    if let Err(e) = horizon::write(Path::new(HORIZON_FILE), mark) {
        error(errors::IO_ERROR, format!("idgen: could not record {HORIZON_FILE} at shutdown: {e}"))
            .hint("The horizon written while the server ran still protects against reissued ids; the next start may wait up to a second for the clock.")
            .warn();
    }
}
