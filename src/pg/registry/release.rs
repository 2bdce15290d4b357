//! The release at a clean shutdown: the postmaster, as it exits, gives the lease back with the
//! last millisecond it issued in, so that a restart (or any server) takes the id at once.

use super::state::{self, HELD};
use crate::pg::registry_client::Registry;
use crate::pg::{settings, shared};
use pgrx::prelude::*;
use std::sync::atomic::Ordering;

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
    match registry.release(&holder, &state::run(), last_ms) {
        Ok(Some(worker_id)) => log!("idgen: released worker id {worker_id} in the registry at shutdown"),
        Ok(None) => {}
        Err(e) => warning!(
            "idgen: could not release the worker id's lease at shutdown: {}; the next start waits for the lease to end",
            e.message
        ),
    }
}

/// In the postmaster while preloading: the hook that registers the release at its exit.
pub(super) fn install() {
    unsafe {
        PREV_SHMEM_STARTUP = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(on_shmem_startup);
    }
}
