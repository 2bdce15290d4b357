//! The SQL-callable functions, one file per family. Thin: read settings and shared state, call
//! the pure core, turn its errors into Postgres errors.

pub mod base62;
pub mod snowflake;
pub mod uuid7;

use crate::errors::{self, error};
use pgrx::datum::TimestampWithTimeZone;
use pgrx::pg_sys;

unsafe extern "C-unwind" {
    /// PostgreSQL's palloc(), called without pgrx's FFI guard (a sigsetjmp per call, about
    /// 11 ns: a third of a per-row function's cost). Only for functions called once per row
    /// that have nothing with a destructor alive, and no RefCell borrowed, in any Rust frame
    /// between them and their `#[pg_guard]` entry point: if it raises (out of memory),
    /// PostgreSQL's longjmp skips those frames. See base62_encode and uuid_v7.
    #[link_name = "palloc"]
    pub fn palloc_unguarded(size: usize) -> *mut std::ffi::c_void;
}

/// Microseconds from 1970-01-01 to Postgres' own epoch, 2000-01-01.
pub const PG_EPOCH_OFFSET_US: i64 = 946_684_800_000_000;

/// The Unix millisecond a timestamp falls in (rounded down), or an error for ±infinity.
#[track_caller]
pub fn unix_ms_of(ts: TimestampWithTimeZone, what: &str) -> i64 {
    if !ts.is_finite() {
        error(
            errors::DATETIME_OUT_OF_RANGE,
            format!("{what}: timestamp out of range: infinity"),
        )
        .hint("Pass a finite timestamp.")
        .raise();
    }
    let us: pg_sys::TimestampTz = ts.into();
    (us + PG_EPOCH_OFFSET_US).div_euclid(1000)
}

pub fn timestamp_of_unix_ms(ms: u64) -> TimestampWithTimeZone {
    let us = (ms as i64) * 1000 - PG_EPOCH_OFFSET_US;
    TimestampWithTimeZone::try_from(us).unwrap_or_else(|_| {
        error(
            errors::DATETIME_OUT_OF_RANGE,
            format!("{ms} ms since 1970 is out of the timestamp range"),
        )
        .hint("PostgreSQL timestamps end in the year 294276.")
        .raise()
    })
}

// snowflake_convert_column() and uuid_v7_convert_column(), since 0.2.0: a few DDL statements
// each, so PL/pgSQL. The same text is in the upgrade script sql/idgen--0.1.0--0.2.0.sql.
pgrx::extension_sql_file!("convert.sql", name = "convert", finalize);
