//! The one place that reads wall-clock time. Everything else that a backend's generator needs
//! (waits, the durable horizon) is in `horizon_store.rs`.

use std::time::{SystemTime, UNIX_EPOCH};

pub fn now_unix_ms() -> u64 {
    // A clock before 1970 reads as 0: the generator then reports it as before the epoch.
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
