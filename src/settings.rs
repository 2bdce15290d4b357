//! Every idgen.* setting, its limits and who may change it.

use crate::errors::{self, error};
use crate::snowflake::{self, MAX_WORKER_ID, TWITTER_EPOCH_MS};
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicU64, Ordering};

/// -1 means unset. Postmaster context: a session can never pick its own worker id, which is how
/// two writers end up sharing one and minting the same ids; and it cannot change under running
/// backends, which keeps ids from one server strictly increasing.
static WORKER_ID: GucSetting<i32> = GucSetting::<i32>::new(-1);
static EPOCH: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"1288834974657"));
/// Long enough to ride out a small NTP step and the horizon lead after crash recovery
/// (`HORIZON_LEAD_MS`, 1 s); short enough that a real clock fault fails a statement instead of
/// stalling every writer.
static MAX_CLOCK_WAIT: GucSetting<i32> = GucSetting::<i32>::new(1000);

/// The passphrase of base62_encode_keyed(). Only in the server configuration (PGC_SIGHUP:
/// postgresql.conf or ALTER SYSTEM, read by the postgres OS user and superusers alone), never in
/// the catalogs: ALTER DATABASE/ROLE ... SET and a function's SET clause would store it in
/// pg_db_role_setting, pg_roles.rolconfig or pg_proc.proconfig, which every role can read.
/// SUPERUSER_ONLY keeps it from SHOW, current_setting() and pg_settings for other roles (as for
/// every such setting, members of pg_read_all_settings may read it).
static BASE62_KEY: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);

/// The epoch in Unix ms, parsed and checked once in the postmaster; 0 until then.
static EPOCH_MS: AtomicU64 = AtomicU64::new(0);

const EPOCH_GUC: &CStr = c"idgen.epoch";

/// Defines the settings. The postmaster-context ones exist only when idgen is preloaded:
/// defining them later is FATAL for the session ("cannot create PGC_POSTMASTER variables after
/// startup"), and without shared memory there is nothing for them to configure.
pub fn register(preloading: bool) {
    GucRegistry::define_int_guc(
        c"idgen.max_clock_wait",
        c"How long snowflake_next() waits for a clock that is behind the last id issued.",
        c"If the clock is behind by more than this, snowflake_next() raises an error instead of waiting.",
        &MAX_CLOCK_WAIT,
        0,
        3_600_000,
        GucContext::Userset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_string_guc(
        c"idgen.base62_key",
        c"Passphrase of the keyed base62 permutation (base62_encode_keyed / base62_decode_keyed).",
        c"Set only in postgresql.conf or with ALTER SYSTEM, then reload; visible to superusers and pg_read_all_settings only. Hides volume; it is not encryption.",
        &BASE62_KEY,
        GucContext::Sighup,
        GucFlags::SUPERUSER_ONLY | GucFlags::NO_SHOW_ALL | GucFlags::NO_RESET_ALL,
    );
    if !preloading {
        return;
    }
    GucRegistry::define_int_guc(
        c"idgen.worker_id",
        c"This server's snowflake worker id (0-1023), unique among all servers that write ids.",
        c"Unset (-1) by default: snowflake_next() refuses to run until it is set in postgresql.conf or with ALTER SYSTEM, followed by a restart.",
        &WORKER_ID,
        -1,
        i32::from(MAX_WORKER_ID),
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        EPOCH_GUC,
        c"Snowflake epoch, in milliseconds since 1970-01-01 UTC.",
        c"Fixed at server start. Default: Twitter's epoch, 1288834974657 (2010-11-04 01:42:54.657 UTC).",
        &EPOCH,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    // Once every idgen.* setting is defined (it would drop their placeholders otherwise), as
    // pg_stat_statements does: a misspelt line in postgresql.conf (idgen.worker_idd) is
    // reported at start-up instead of silently doing nothing, and no session can invent
    // idgen.* placeholders.
    // (PostgreSQL 15 and later; 13 and 14 have no such call.)
    #[cfg(not(any(feature = "pg13", feature = "pg14")))]
    unsafe {
        pgrx::pg_sys::MarkGUCPrefixReserved(c"idgen".as_ptr())
    };
    let text = EPOCH
        .get()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Syntax and range only. The clock is snowflake_next()'s business: a machine that boots
    // with its clock before the epoch must still be able to start PostgreSQL.
    match parse_epoch(&text).and_then(snowflake::check_epoch) {
        Ok(ms) => EPOCH_MS.store(ms, Ordering::Relaxed),
        // In the postmaster this stops the server from starting: ids on a wrong epoch would
        // sort wrongly against every id already stored.
        Err(why) => invalid_epoch(why),
    }
}

#[track_caller]
fn invalid_epoch(why: String) -> ! {
    error(errors::INVALID_PARAMETER, format!("invalid value for idgen.epoch: {why}"))
        .hint("Set idgen.epoch in postgresql.conf to a Unix time in milliseconds between 0 and 2147483647000, at most 2^41 ms (about 69.7 years) before now, e.g. 1288834974657.")
        .raise()
}

fn parse_epoch(text: &str) -> Result<u64, String> {
    text.trim()
        .parse::<u64>()
        .map_err(|_| format!("{text:?} is not a whole number of milliseconds"))
}

/// The epoch in Unix ms. When idgen is not preloaded, the decoding functions still honour an
/// idgen.epoch written in postgresql.conf (Postgres keeps it as a placeholder).
#[track_caller]
pub fn epoch_ms() -> u64 {
    match EPOCH_MS.load(Ordering::Relaxed) {
        0 => {
            let raw = unsafe { pgrx::pg_sys::GetConfigOption(EPOCH_GUC.as_ptr(), true, false) };
            if raw.is_null() {
                return TWITTER_EPOCH_MS;
            }
            let text = unsafe { CStr::from_ptr(raw) }.to_string_lossy();
            parse_epoch(&text).unwrap_or_else(|why| invalid_epoch(why))
        }
        ms => ms,
    }
}

pub fn worker_id_if_set() -> Option<u16> {
    u16::try_from(WORKER_ID.get()).ok()
}

/// The worker id, or an error telling how to set it.
#[track_caller]
pub fn worker_id() -> u16 {
    match worker_id_if_set() {
        Some(id) => id,
        None => error(errors::NOT_IN_PREREQUISITE_STATE, "idgen.worker_id is not set")
            .detail("Every server that writes snowflake ids needs its own worker id (0-1023); two servers with the same one can mint the same ids.")
            .hint("Set it in postgresql.conf or with ALTER SYSTEM SET idgen.worker_id = <0-1023>, then restart the server.")
            .raise(),
    }
}

pub fn max_clock_wait_ms() -> u64 {
    MAX_CLOCK_WAIT.get().max(0) as u64
}

/// Runs `f` with the base62 passphrase's bytes (None when unset or empty), borrowed from the
/// setting's own memory for the length of the call and no longer: a configuration reload
/// frees that memory, and one can only happen between statements, never inside `f`.
pub fn with_base62_key<T>(f: impl FnOnce(Option<&[u8]>) -> T) -> T {
    let raw = unsafe { *BASE62_KEY.as_ptr() };
    // SAFETY: non-null, it points at the NUL-terminated value Postgres keeps until the setting
    // changes, which cannot happen during `f`.
    let bytes = (!raw.is_null()).then(|| unsafe { CStr::from_ptr(raw) }.to_bytes());
    f(bytes.filter(|b| !b.is_empty()))
}
