//! The one place that reads wall-clock time, and the generator's environment inside a backend:
//! interruptible waits and the horizon file under PGDATA.

use crate::{horizon, snowflake};
use pgrx::pg_sys;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// Relative to the data directory, which is every Postgres process's working directory.
pub const HORIZON_FILE: &str = "idgen_horizon";

pub fn now_unix_ms() -> u64 {
    // A clock before 1970 reads as 0: the generator then reports it as before the epoch.
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The generator's environment in a backend.
pub struct Backend;

impl snowflake::Env for Backend {
    fn now_unix_ms(&mut self) -> u64 {
        now_unix_ms()
    }

    fn pause(&mut self, pause: snowflake::Pause) {
        // Cancel and statement_timeout work during every wait. Never called while the
        // horizon writer slot is held.
        pg_sys::check_for_interrupts!();
        match pause {
            snowflake::Pause::Spin => std::hint::spin_loop(),
            snowflake::Pause::Sleep { ms } => unsafe { pg_sys::pg_usleep((ms * 1000) as _) },
        }
        pg_sys::check_for_interrupts!();
    }

    /// The WAL record first (flushed), then the file: both before any id beyond the old
    /// horizon is used. The record is what standbys and restores see; the file is what a
    /// start-up reads before any WAL is replayed, and what a clean shutdown lowers to the exact
    /// mark.
    fn persist_horizon(&mut self, unix_ms: u64) -> std::io::Result<()> {
        #[cfg(not(any(feature = "pg13", feature = "pg14")))]
        crate::wal::log_horizon(unix_ms);
        horizon::write(Path::new(HORIZON_FILE), unix_ms)
    }
}
