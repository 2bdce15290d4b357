//! Shared memory: the snowflake generator's words, whether idgen was preloaded, and the hooks
//! that load the horizon at start-up and record the exact high-water mark at a clean shutdown.

use crate::clock::HORIZON_FILE;
use crate::errors::{self, error};
use crate::{horizon, settings, snowflake::SharedState};
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
    let mark = SNOWFLAKE.get().high_water_unix_ms(settings::epoch_ms());
    if let Err(e) = horizon::write(Path::new(HORIZON_FILE), mark) {
        error(errors::IO_ERROR, format!("idgen: could not record {HORIZON_FILE} at shutdown: {e}"))
            .hint("The horizon written while the server ran still protects against reissued ids; the next start may wait up to a second for the clock.")
            .warn();
    }
}
