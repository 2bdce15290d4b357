//! uuid_v7() and its companions, and PostgreSQL 18's names for builds on 13-17.

use crate::pg::errors::{self, error};
use crate::pg::palloc::palloc_unguarded;
use crate::pg::refusals::raise_generator;
use crate::pg::timestamps::{timestamp_of_unix_ms, unix_ms_of};
use crate::pg::{clock, horizon_store, shared};
use idgen_core::{snowflake, uuid7};
use pgrx::datum::TimestampWithTimeZone;
use pgrx::prelude::*;
use pgrx::Uuid;
use std::cell::RefCell;

thread_local! {
    /// This backend's CSPRNG; reseeded if ever used under another pid (after a fork).
    static RNG: RefCell<uuid7::ForkSafeRng> = const { RefCell::new(uuid7::ForkSafeRng::new()) };
}

fn with_rng<T>(f: impl FnOnce(&mut uuid7::Rng) -> T) -> T {
    let pid = unsafe { pg_sys::MyProcPid } as u32;
    RNG.with_borrow_mut(|rng| f(rng.get(pid)))
}

fn next_v7_bytes() -> [u8; 16] {
    let word = shared::uuid7_word();
    let now = clock::now_unix_ms();
    let bytes = with_rng(|rng| uuid7::next(word, now, rng));
    if let Some(state) = shared::uuid7_horizon() {
        // UUIDs share the snowflake horizon, so that those made after a restart, a crash or a
        // failover sort above those made before: one read of the horizon per UUID, and about
        // twice a second, a WAL record and the file — before the UUID is handed out.
        let ms = uuid7::timestamp_ms(&bytes).expect("a v7 UUID");
        snowflake::cover(state, ms, &mut horizon_store::Backend)
            .unwrap_or_else(|e| raise_generator(e));
    }
    bytes
}

fn next_v7() -> Uuid {
    Uuid::from_bytes(next_v7_bytes())
}

// uuid_v7(): a time-ordered RFC 9562 version 7 UUID, strictly increasing within the backend, and
// across every backend of the server when idgen is preloaded. Written against the V1 calling
// convention by hand, with the definition and C symbol (uuid_v7_wrapper) that pgrx generated
// for 0.1.0, so installed databases keep working: it runs once per row, and pgrx's path
// pallocs the result through a guarded FFI call (a sigsetjmp per row).
extension_sql!(
    r#"
CREATE FUNCTION "uuid_v7"() RETURNS uuid
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'uuid_v7_wrapper';
"#,
    name = "uuid_v7",
);

#[unsafe(no_mangle)]
#[doc(hidden)]
pub extern "C" fn pg_finfo_uuid_v7_wrapper() -> &'static pg_sys::Pg_finfo_record {
    const V1_API: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1_API
}

#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn uuid_v7_wrapper(
    _fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    let bytes = next_v7_bytes();
    unsafe {
        // Nothing with a destructor is alive here and the RNG's RefCell is released: see
        // palloc_unguarded.
        let result = palloc_unguarded(bytes.len()).cast::<[u8; 16]>();
        result.write(bytes);
        pg_sys::Datum::from(result)
    }
}

#[track_caller]
fn unix_ms_for_v7(ts: TimestampWithTimeZone, what: &str) -> u64 {
    let ms = unix_ms_of(ts, what);
    if !(0..=uuid7::MAX_UNIX_MS as i64).contains(&ms) {
        error(
            errors::DATETIME_OUT_OF_RANGE,
            format!("{what}: timestamp out of range for a UUID v7"),
        )
        .hint("UUID v7 holds Unix milliseconds from 1970 to the year 10889.")
        .raise();
    }
    ms as u64
}

/// A version 7 UUID carrying the given time, with random bits: for backfills such as
/// `UPDATE t SET id = uuid_v7(created_at)`. Not ordered within the millisecond.
#[pg_extern(volatile, strict, parallel_safe, name = "uuid_v7")]
fn uuid_v7_at(ts: TimestampWithTimeZone) -> Uuid {
    let ms = unix_ms_for_v7(ts, "uuid_v7");
    Uuid::from_bytes(with_rng(|rng| uuid7::at(ms, rng)))
}

/// When a version 7 UUID was made.
#[pg_extern(immutable, strict, parallel_safe)]
fn uuid_v7_timestamp(id: Uuid) -> TimestampWithTimeZone {
    let bytes: [u8; 16] = *id.as_bytes();
    match uuid7::timestamp_ms(&bytes) {
        Some(ms) => timestamp_of_unix_ms(ms),
        None => error(errors::INVALID_PARAMETER, format!("{id} is not a version 7 UUID"))
            .detail(format!(
                "Its version is {}{}.",
                uuid7::version(&bytes),
                if uuid7::is_rfc_variant(&bytes) { "" } else { ", and its variant is not RFC 9562's" }
            ))
            .hint("uuid_v7_timestamp() reads only version 7 UUIDs; uuid_extract_timestamp() returns NULL for other versions.")
            .raise(),
    }
}

/// The smallest version 7 UUID of that millisecond: `WHERE id >= uuid_v7_boundary(ts)`.
#[pg_extern(immutable, strict, parallel_safe)]
fn uuid_v7_boundary(ts: TimestampWithTimeZone) -> Uuid {
    Uuid::from_bytes(uuid7::boundary(unix_ms_for_v7(ts, "uuid_v7_boundary")))
}

// PostgreSQL 18's names, for SQL that should keep working after an upgrade to 18. On the pg18
// build core defines them, so idgen emits no SQL for them there, but keeps their C symbols: a
// database pg_upgrade'd from an older major still has idgen's functions by these names (column
// DEFAULTs point at them), and its dump restores them by symbol. Unqualified calls on 18 find
// core's first (pg_catalog is searched first).

/// PostgreSQL 18's `uuidv7()`, made by idgen's generator (ordered across backends).
#[cfg_attr(not(feature = "pg18"), pg_extern(volatile, parallel_safe))]
#[cfg_attr(feature = "pg18", pg_extern(sql = false))]
fn uuidv7() -> Uuid {
    next_v7()
}

/// PostgreSQL 18's `uuid_extract_timestamp()`: the time in a version 1 or 7 UUID, NULL for any
/// other version.
#[cfg_attr(not(feature = "pg18"), pg_extern(immutable, strict, parallel_safe))]
#[cfg_attr(feature = "pg18", pg_extern(sql = false))]
fn uuid_extract_timestamp(id: Uuid) -> Option<TimestampWithTimeZone> {
    let bytes: [u8; 16] = *id.as_bytes();
    if let Some(ms) = uuid7::timestamp_ms(&bytes) {
        return Some(timestamp_of_unix_ms(ms));
    }
    uuid7::v1_timestamp_us(&bytes).map(|us| {
        TimestampWithTimeZone::try_from(us - crate::pg::clock::PG_EPOCH_OFFSET_US).unwrap_or_else(
            |_| {
                error(
                    errors::DATETIME_OUT_OF_RANGE,
                    format!("{id}: its version 1 timestamp is out of range"),
                )
                .hint("Version 1 UUIDs count 100 ns from 1582-10-15.")
                .raise()
            },
        )
    })
}
