//! The one place that reads wall-clock time. Everything else that a backend's generator needs
//! (waits, the durable horizon) is in `horizon_store.rs`.
//!
//! Test builds (the `test_clock` feature, which only the test harness's build turns on) can shift
//! this clock, and only this clock, by an offset read from a file (`IDGEN_TEST_CLOCK_FILE`).
//! The fault schedule steps a writer's clock that way rather than with libfaketime preloaded into
//! the whole server: an interposed clock in the postmaster sits in the path a crash restart takes
//! (the postmaster re-creates shared memory and forks the startup process), and idgen's ids depend
//! on no clock but this one.

use std::time::{SystemTime, UNIX_EPOCH};

/// Microseconds from 1970-01-01 to Postgres' own epoch, 2000-01-01.
pub const PG_EPOCH_OFFSET_US: i64 = 946_684_800_000_000;
/// The same in milliseconds (it is a whole number of them).
pub const PG_EPOCH_OFFSET_MS: i64 = PG_EPOCH_OFFSET_US / 1000;

/// PostgreSQL's microseconds of a Unix millisecond, or None past what an i64 holds.
pub fn pg_us_of_unix_ms(ms: u64) -> Option<i64> {
    i64::try_from(ms)
        .ok()?
        .checked_sub(PG_EPOCH_OFFSET_MS)?
        .checked_mul(1000)
}

/// A Unix millisecond as PostgreSQL prints a timestamptz, for messages ("<ms> (Unix ms)" past
/// its range).
pub fn timestamptz_text(ms: u64) -> String {
    match pg_us_of_unix_ms(ms) {
        // SAFETY: returns a pointer to a static buffer, copied out at once.
        Some(us) => unsafe {
            std::ffi::CStr::from_ptr(pgrx::pg_sys::timestamptz_to_str(us))
                .to_string_lossy()
                .into_owned()
        },
        None => format!("{ms} (Unix ms)"),
    }
}

pub fn now_unix_ms() -> u64 {
    // A clock before 1970 reads as 0: the generator then reports it as before the epoch.
    let real = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    #[cfg(feature = "test_clock")]
    let real = test_clock::shifted(real);
    real
}

#[cfg(feature = "test_clock")]
mod test_clock {
    //! The offset file holds seconds with a sign, as libfaketime's offset files do ("-2.500" or
    //! "+1.5s"); a missing or unreadable file is an offset of 0. Each process re-reads it once
    //! `REREAD` has passed on the monotonic clock, so a new offset reaches every process within
    //! that time (the harness waits `IdgenClock.SETTLE_S`, more than it).
    use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    pub const ENV: &str = "IDGEN_TEST_CLOCK_FILE";
    const REREAD: Duration = Duration::from_millis(100);

    static FILE: OnceLock<Option<std::path::PathBuf>> = OnceLock::new();
    static START: OnceLock<Instant> = OnceLock::new();
    /// When this process last read the file: nanoseconds after START, plus one (0: never).
    static READ_AT: AtomicU64 = AtomicU64::new(0);
    static OFFSET_MS: AtomicI64 = AtomicI64::new(0);

    pub fn shifted(real_ms: u64) -> u64 {
        let Some(path) = FILE.get_or_init(|| std::env::var_os(ENV).map(Into::into)) else {
            return real_ms;
        };
        let since = START.get_or_init(Instant::now).elapsed().as_nanos() as u64 + 1;
        let read_at = READ_AT.load(Ordering::Relaxed);
        if read_at == 0 || since.saturating_sub(read_at) >= REREAD.as_nanos() as u64 {
            let offset = std::fs::read_to_string(path)
                .ok()
                .and_then(|t| parse(&t))
                .unwrap_or(0);
            OFFSET_MS.store(offset, Ordering::Relaxed);
            READ_AT.store(since, Ordering::Relaxed);
        }
        real_ms.saturating_add_signed(OFFSET_MS.load(Ordering::Relaxed))
    }

    /// "-2.500", "+1.5s", "3" → milliseconds.
    pub fn parse(text: &str) -> Option<i64> {
        let t = text.trim();
        let t = t.strip_suffix('s').unwrap_or(t);
        let seconds: f64 = t.parse().ok()?;
        seconds
            .is_finite()
            .then(|| (seconds * 1000.0).round() as i64)
    }

    #[cfg(test)]
    mod tests {
        use super::parse;

        #[test]
        fn offsets_read_as_libfaketime_writes_them() {
            assert_eq!(parse("-2.500\n"), Some(-2500));
            assert_eq!(parse("+1.5s"), Some(1500));
            assert_eq!(parse("+0"), Some(0));
            assert_eq!(parse("-18.0004"), Some(-18000));
            assert_eq!(parse("soon"), None);
            assert_eq!(parse("nan"), None);
        }
    }
}
