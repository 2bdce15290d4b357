//! Unix milliseconds and PostgreSQL timestamps, both ways, for the SQL functions and the errors
//! that name a moment.

use crate::pg::errors::{self, error};
use pgrx::datum::TimestampWithTimeZone;
use pgrx::pg_sys;

use crate::pg::clock::{pg_us_of_unix_ms, PG_EPOCH_OFFSET_MS};

/// The Unix millisecond a timestamp falls in (rounded down), or an error for ±infinity. Exact for
/// every finite timestamp: the microseconds are turned into milliseconds before the offset is
/// added, since the offset added to the last timestamps of PostgreSQL's range (the year 294276)
/// would pass i64::MAX microseconds.
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
    unix_ms_of_pg_us(us)
}

/// Cannot overflow: |us / 1000| is at most i64::MAX / 1000.
fn unix_ms_of_pg_us(us: i64) -> i64 {
    us.div_euclid(1000) + PG_EPOCH_OFFSET_MS
}

#[track_caller]
pub fn timestamp_of_unix_ms(ms: u64) -> TimestampWithTimeZone {
    pg_us_of_unix_ms(ms)
        .and_then(|us| TimestampWithTimeZone::try_from(us).ok())
        .unwrap_or_else(|| out_of_timestamp_range(u128::from(ms)))
}

/// A time, in ms since 1970, past PostgreSQL's timestamps (given exactly, however large).
#[track_caller]
pub fn out_of_timestamp_range(ms: u128) -> ! {
    error(
        errors::DATETIME_OUT_OF_RANGE,
        format!("{ms} ms since 1970 is out of the timestamp range"),
    )
    .hint("PostgreSQL timestamps end in the year 294276.")
    .raise()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ends_of_the_timestamp_range_convert_without_overflow() {
        // PostgreSQL's last finite timestamp, 294276-12-31 23:59:59.999999 UTC (END_TIMESTAMP - 1)
        let last: i64 = 9_223_371_331_200_000_000 - 1;
        assert_eq!(unix_ms_of_pg_us(last), 9_224_318_015_999_999);
        // its first, 4714-11-24 00:00:00 BC
        let first: i64 = -211_813_488_000_000_000;
        assert_eq!(unix_ms_of_pg_us(first), -210_866_803_200_000);
        assert_eq!(unix_ms_of_pg_us(-1), PG_EPOCH_OFFSET_MS - 1, "rounds down");
        assert_eq!(unix_ms_of_pg_us(0), PG_EPOCH_OFFSET_MS);
        assert_eq!(
            unix_ms_of_pg_us(i64::MAX),
            i64::MAX / 1000 + PG_EPOCH_OFFSET_MS
        );
        assert_eq!(
            unix_ms_of_pg_us(i64::MIN),
            i64::MIN.div_euclid(1000) + PG_EPOCH_OFFSET_MS
        );
    }

    #[test]
    fn milliseconds_past_an_i64_of_microseconds_are_none_not_wrapped() {
        assert_eq!(
            pg_us_of_unix_ms(0),
            Some(-crate::pg::clock::PG_EPOCH_OFFSET_US)
        );
        assert_eq!(
            pg_us_of_unix_ms(1_704_164_645_678),
            Some(757_479_845_678_000)
        );
        assert_eq!(pg_us_of_unix_ms(u64::MAX), None);
        assert_eq!(pg_us_of_unix_ms(i64::MAX as u64), None);
        let largest = (i64::MAX / 1000 + PG_EPOCH_OFFSET_MS) as u64;
        assert!(pg_us_of_unix_ms(largest).is_some());
        assert_eq!(pg_us_of_unix_ms(largest + 1), None);
    }
}
