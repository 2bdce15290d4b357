//! Every idgen.* setting, its limits and who may change it.

use crate::pg::errors::{self, error};
use crate::pg::registry_client;
use idgen_core::key_file;
use idgen_core::layout::Layout;
use idgen_core::lease::{self, Mode};
use idgen_core::snowflake::{self, TWITTER_EPOCH_MS};
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::pg_guard;
use pgrx::pg_sys;
use std::ffi::{c_char, c_void, CStr, CString};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, Ordering};
use std::sync::OnceLock;

/// -1 means unset. Postmaster context: a session can never pick its own worker id, which is how
/// two writers end up sharing one and minting the same ids; and it cannot change under running
/// backends, which keeps ids from one server strictly increasing.
/// Text, since it may also read `auto` (a worker id from the registry); parsed by its check
/// hook into `WORKER_MODE`.
static WORKER_ID: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c"-1"));
/// `idgen.worker_id` parsed: -1 unset, -2 auto, else the fixed id. Written by the assign hook
/// in the postmaster (and again in each backend's start-up), read everywhere.
static WORKER_MODE: AtomicI32 = AtomicI32::new(-1);
const MODE_AUTO: i32 = -2;
/// The registry's libpq connection string (see `registry/`). Postmaster context: the lease is
/// claimed at start-up; a password is refused by the check hook, since pg_read_all_settings
/// (and pg_monitor) members can read any setting.
static REGISTRY: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static LEASE: GucSetting<i32> = GucSetting::<i32>::new(30_000);
/// 15 minutes: a registry outage of that long stops no write; a crashed server's worker id waits
/// as long (plus its lease) before another server may take it, unless the registry's owner frees it.
static LEASE_GRACE: GucSetting<i32> = GucSetting::<i32>::new(900_000);
static MAX_CLOCK_SKEW: GucSetting<i32> = GucSetting::<i32>::new(1_000);
static UNVERIFIED: GucSetting<Unverified> = GucSetting::<Unverified>::new(Unverified::Refuse);

/// What a server with a fixed worker id does while the registry has never confirmed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, pgrx::PostgresGucEnum)]
pub enum Unverified {
    #[name = c"refuse"]
    Refuse,
    #[name = c"issue"]
    Issue,
}
static EPOCH: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"1288834974657"));
/// The snowflake layout (`idgen_core::layout`): a name or time/worker/sequence bits and a unit.
/// Postmaster context, as the epoch: it decides how every id of the server's run is packed.
static LAYOUT: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c"twitter"));
/// idgen.layout parsed once, by the postmaster at start-up (every backend inherits it): read per
/// id by snowflake_next(), so a plain load, not a parse or a check.
static LAYOUT_PARSED: OnceLock<Layout> = OnceLock::new();
const LAYOUT_GUC: &CStr = c"idgen.layout";
/// Long enough to ride out a small NTP step and the horizon lead after crash recovery
/// (`HORIZON_LEAD_MS`, 1 s); short enough that a real clock fault fails a statement instead of
/// stalling every writer.
static MAX_CLOCK_WAIT: GucSetting<i32> = GucSetting::<i32>::new(1000);

/// Where the passphrase of base62_encode_keyed() lives: a file (see `key_file.rs`) named by a path,
/// relative to the data directory. PGC_SIGHUP: postgresql.conf or ALTER SYSTEM, then a reload; the
/// file is read again at every reload. Only the path is a setting, and a path is no secret.
static BASE62_KEY_FILE: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
/// idgen 0.2.0's setting of the passphrase itself. PostgreSQL shows a SUPERUSER_ONLY setting to
/// members of pg_read_all_settings, and so of pg_monitor, the role monitoring agents are given:
/// the key reached them. It stays defined so that a value left in postgresql.conf is refused with
/// the way out, instead of becoming a placeholder that every role could SHOW (as an unknown
/// setting would when idgen is not preloaded).
static BASE62_KEY_RETIRED: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
/// The key read from the file, as the check hook of idgen.base62_key_file left it (PostgreSQL's
/// "extra" of the setting's current value: `len: usize` then the bytes, malloc'd; PostgreSQL
/// frees it once no value refers to it). Null when no file is set. Written only by the assign
/// hook, between statements; read by the keyed functions.
static KEY: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());

/// The one line that moves a 0.2.0 key into the file, as the server's OS user (docs/base62.md says
/// it in full, in "Keyed codes").
const MOVE_THE_KEY: &str = "Move it into a key file once, as the server's OS user: (umask 077; psql -XAtc \"SELECT setting FROM pg_file_settings WHERE name = 'idgen.base62_key' ORDER BY seqno DESC LIMIT 1\" >\"$PGDATA/idgen_base62.key\") && psql -Xc \"ALTER SYSTEM SET idgen.base62_key_file = 'idgen_base62.key'\" -c \"ALTER SYSTEM RESET idgen.base62_key\" -c \"SELECT pg_reload_conf()\"";

/// The epoch in Unix ms, parsed and checked once in the postmaster when preloaded. 0 is a valid
/// epoch (1970), so whether it is set has a flag of its own.
static EPOCH_MS: EpochCache = EpochCache::new();

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
    // SAFETY: the hooks are #[pg_guard]ed, and keep to what PostgreSQL allows a hook.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            c"idgen.base62_key_file",
            c"File holding the passphrase of the keyed base62 functions (base62_encode_keyed / base62_decode_keyed).",
            c"A path, relative to the data directory. The file must belong to the server's OS user with mode 0600 or 0400; it is read at start-up and at every reload. Hides volume; it is not encryption.",
            &BASE62_KEY_FILE,
            GucContext::Sighup,
            GucFlags::default(),
            Some(check_key_file),
            Some(assign_key_file),
            None,
        );
        GucRegistry::define_string_guc_with_hooks(
            c"idgen.base62_key",
            c"Retired in idgen 0.3.0: the passphrase lives in the file named by idgen.base62_key_file.",
            c"Any value is refused, so that it is never kept where pg_read_all_settings and pg_monitor members can read it.",
            &BASE62_KEY_RETIRED,
            GucContext::Sighup,
            GucFlags::SUPERUSER_ONLY | GucFlags::NO_SHOW_ALL | GucFlags::NO_RESET_ALL,
            Some(check_retired_key),
            None,
            None,
        );
    }
    if !preloading {
        return;
    }
    // SAFETY: the hooks are #[pg_guard]ed, and keep to what PostgreSQL allows a hook.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            c"idgen.worker_id",
            c"This server's snowflake worker id (0-1023 in the default layout), unique among all servers that write ids, or auto.",
            c"Unset (-1) by default: snowflake_next() refuses to run until it is set in postgresql.conf or with ALTER SYSTEM, followed by a restart. auto takes a free one from the registry (idgen.registry).",
            &WORKER_ID,
            GucContext::Postmaster,
            GucFlags::default(),
            Some(check_worker_id),
            Some(assign_worker_id),
            None,
        );
        GucRegistry::define_string_guc_with_hooks(
            c"idgen.registry",
            c"libpq connection string of the worker-id registry (sql/registry/idgen_registry.sql).",
            c"Empty: no registry. A password is refused: pg_monitor members can read this setting; use a passfile readable only by the server's OS user.",
            &REGISTRY,
            GucContext::Postmaster,
            GucFlags::SUPERUSER_ONLY,
            Some(check_registry),
            None,
            None,
        );
    }
    GucRegistry::define_int_guc(
        c"idgen.lease",
        c"How long a worker id's lease in the registry lasts; it is renewed every third of it.",
        c"With idgen.worker_id = auto, no id is issued at or after the end of a lease the registry did not renew.",
        &LEASE,
        1_000,
        3_600_000,
        GucContext::Postmaster,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"idgen.lease_grace",
        c"How long past its lease's end a server that cannot reach the registry issues on; the registry keeps its worker id from every other server that much longer.",
        c"0 stops issuing at the lease's end. A server that crashed keeps its worker id from others for its lease plus this grace, unless the registry's owner frees it; the registry caps it (idgen_registry.clock.max_grace_ms).",
        &LEASE_GRACE,
        0,
        86_400_000,
        GucContext::Postmaster,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"idgen.max_clock_skew",
        c"The most this server's clock and the registry's may differ: the allowance added to an ended lease before its worker id is reused.",
        c"An assumption, not a measurement: keep the clocks within it with NTP.",
        &MAX_CLOCK_SKEW,
        0,
        600_000,
        GucContext::Postmaster,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_enum_guc(
        c"idgen.unverified_worker_id",
        c"Whether a fixed worker id issues ids while the registry does not confirm it: before its first claim succeeds, and after its lease ends unrenewed.",
        c"refuse (the default): the lease is the right to issue, as with auto: snowflake_next() waits for the registry to confirm the id, and stops at the end of a lease it could not renew, so that the id may go to another server then. issue: it issues regardless, with a WARNING at each failed attempt, and its lease never goes to another server unless the registry's owner frees it.",
        &UNVERIFIED,
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
    GucRegistry::define_string_guc(
        LAYOUT_GUC,
        c"Snowflake layout: twitter, instagram, discord, sonyflake, js53, or time/worker/sequence bits and a unit (e.g. 40/12/11/10ms).",
        c"Fixed at server start. Default: twitter (41 bits of milliseconds, 10 of worker id, 12 of sequence). The horizon file records it: a server started with another layout issues ids only if they sort above every id made before.",
        &LAYOUT,
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
        Ok(ms) => EPOCH_MS.set(ms),
        // In the postmaster this stops the server from starting: ids on a wrong epoch would
        // sort wrongly against every id already stored.
        Err(why) => invalid_epoch(why),
    }
    // The layout, likewise, and the worker id against its worker field: both stop the start.
    let layout = parse_layout(&text_of_setting(&LAYOUT, "twitter"));
    let _ = LAYOUT_PARSED.set(layout);
    match worker_mode() {
        Some(Mode::Fixed(id)) if u64::from(id) > layout.max_worker() => error(
            errors::INVALID_PARAMETER,
            format!("idgen.worker_id = {id} does not fit layout {layout}'s worker field ({} bits: 0-{})", layout.worker_bits(), layout.max_worker()),
        )
        .hint("Give this server a worker id within the layout's range, or choose a layout with a wider worker field (idgen.layout); docs/layouts.md lists them.")
        .raise(),
        _ => {}
    }
}

fn text_of_setting(setting: &GucSetting<Option<CString>>, default: &str) -> String {
    setting
        .get()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| default.to_string())
}

#[track_caller]
fn parse_layout(text: &str) -> Layout {
    Layout::parse(text).unwrap_or_else(|why| {
        error(errors::INVALID_PARAMETER, format!("invalid value for idgen.layout: {why}"))
            .hint("Set idgen.layout in postgresql.conf to twitter (the default), instagram, discord, sonyflake, js53, or time/worker/sequence bits and a unit of 1, 10, 100 or 1000 ms, e.g. 40/12/11/10ms.")
            .raise()
    })
}

/// The layout the server's ids are made under. When idgen is not preloaded, the decoding
/// functions still honour an idgen.layout written in postgresql.conf (a placeholder then).
#[track_caller]
pub fn layout() -> Layout {
    if let Some(layout) = LAYOUT_PARSED.get() {
        return *layout;
    }
    let raw = unsafe { pg_sys::GetConfigOption(LAYOUT_GUC.as_ptr(), true, false) };
    if raw.is_null() {
        return Layout::TWITTER;
    }
    let layout = parse_layout(&unsafe { CStr::from_ptr(raw) }.to_string_lossy());
    *LAYOUT_PARSED.get_or_init(|| layout)
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
    EPOCH_MS.get_or(|| {
        let raw = unsafe { pgrx::pg_sys::GetConfigOption(EPOCH_GUC.as_ptr(), true, false) };
        if raw.is_null() {
            return TWITTER_EPOCH_MS;
        }
        let text = unsafe { CStr::from_ptr(raw) }.to_string_lossy();
        parse_epoch(&text).unwrap_or_else(|why| invalid_epoch(why))
    })
}

/// The epoch and the layout the generator and the decoders count by.
#[track_caller]
pub fn time_base() -> snowflake::TimeBase {
    snowflake::TimeBase {
        epoch_unix_ms: epoch_ms(),
        layout: layout(),
    }
}

/// A value set once (in the postmaster, inherited by every backend), with its own "set" flag.
struct EpochCache {
    ms: AtomicU64,
    set: AtomicBool,
}

impl EpochCache {
    const fn new() -> Self {
        EpochCache {
            ms: AtomicU64::new(0),
            set: AtomicBool::new(false),
        }
    }

    fn set(&self, ms: u64) {
        self.ms.store(ms, Ordering::Relaxed);
        self.set.store(true, Ordering::Release);
    }

    /// The value once set; until then whatever `lookup` says, every time.
    #[track_caller]
    fn get_or(&self, lookup: impl FnOnce() -> u64) -> u64 {
        if self.set.load(Ordering::Acquire) {
            self.ms.load(Ordering::Relaxed)
        } else {
            lookup()
        }
    }
}

/// `idgen.worker_id` as set; None when unset.
pub fn worker_mode() -> Option<Mode> {
    match WORKER_MODE.load(Ordering::Relaxed) {
        MODE_AUTO => Some(Mode::Auto),
        id => u16::try_from(id).ok().map(Mode::Fixed),
    }
}

/// A fixed `idgen.worker_id`.
pub fn worker_id_if_set() -> Option<u16> {
    match worker_mode() {
        Some(Mode::Fixed(id)) => Some(id),
        _ => None,
    }
}

/// How the worker id is set, or an error telling how to set it.
#[track_caller]
pub fn worker_mode_or_raise() -> Mode {
    match worker_mode() {
        Some(mode) => mode,
        None => error(errors::NOT_IN_PREREQUISITE_STATE, "idgen.worker_id is not set")
            .detail("Every server that writes snowflake ids needs its own worker id (0-1023); two servers with the same one can mint the same ids.")
            .hint("Set it in postgresql.conf or with ALTER SYSTEM SET idgen.worker_id = <0-1023>, then restart the server.")
            .raise(),
    }
}

/// Why the postmaster refused `idgen.registry` from the configuration at start-up, if it did.
static REGISTRY_REFUSED: std::sync::OnceLock<String> = std::sync::OnceLock::new();

pub fn registry_refused() -> Option<&'static str> {
    REGISTRY_REFUSED.get().map(String::as_str)
}

/// The registry's connection string, when one is set.
pub fn registry() -> Option<String> {
    REGISTRY
        .get()
        .map(|s| s.to_string_lossy().trim().to_string())
        .filter(|s| !s.is_empty())
}

pub fn lease_ms() -> u64 {
    LEASE.get().max(1_000) as u64
}

pub fn lease_grace_ms() -> u64 {
    LEASE_GRACE.get().max(0) as u64
}

pub fn max_clock_skew_ms() -> u64 {
    MAX_CLOCK_SKEW.get().max(0) as u64
}

pub fn issue_unverified() -> bool {
    UNVERIFIED.get() == Unverified::Issue
}

fn text_of(p: *const c_char) -> String {
    unsafe {
        p.as_ref()
            .map(|p| CStr::from_ptr(p).to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn check_worker_id(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    match lease::parse_worker_id(&text_of(unsafe { *newval })) {
        Ok(_) => true,
        Err(why) => unsafe {
            refuse(
                &format!("invalid value for parameter \"idgen.worker_id\": {why}"),
                None,
                "Set idgen.worker_id to this server's own worker id (0-1023 in the default layout, 0-65535 at most in any), or to auto with a registry (idgen.registry).",
            )
        },
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn assign_worker_id(newval: *const c_char, _extra: *mut c_void) {
    let mode = match lease::parse_worker_id(&text_of(newval)) {
        Ok(Some(Mode::Fixed(id))) => i32::from(id),
        Ok(Some(Mode::Auto)) => MODE_AUTO,
        _ => -1,
    };
    WORKER_MODE.store(mode, Ordering::Relaxed);
}

#[pg_guard]
unsafe extern "C-unwind" fn check_registry(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    let text = text_of(unsafe { *newval });
    if text.trim().is_empty() {
        return true;
    }
    match registry_client::check_conninfo(&text) {
        Ok(()) => true,
        Err(why) => unsafe {
            if pg_sys::process_shared_preload_libraries_in_progress {
                // postgresql.conf at start-up: PostgreSQL logs this and starts with the default
                // (no registry), which would drop the check the operator asked for. Every
                // process inherits the refusal, and snowflake_next() reports it.
                let _ = REGISTRY_REFUSED.set(why.clone());
            }
            refuse(
                &format!("invalid value for parameter \"idgen.registry\": {why}"),
                Some("PostgreSQL shows this setting to members of pg_read_all_settings and pg_monitor, so it must hold no secret; and it must be a libpq connection string."),
                "Put the password in a passfile that only the server's OS user can read, and name it in the connection string (passfile=/path/to/pgpass), or in ~/.pgpass of that user.",
            )
        },
    }
}

pub fn max_clock_wait_ms() -> u64 {
    MAX_CLOCK_WAIT.get().max(0) as u64
}

/// `idgen.max_clock_wait` as configured (postgresql.conf, ALTER SYSTEM, ALTER DATABASE or ROLE
/// ... SET): its reset value, which no `SET` in a session changes. For what binds every
/// session, such as how far ahead a floor may be raised.
pub fn max_clock_wait_configured_ms() -> u64 {
    let raw = unsafe { pgrx::pg_sys::GetConfigOptionResetString(c"idgen.max_clock_wait".as_ptr()) };
    if raw.is_null() {
        return max_clock_wait_ms();
    }
    unsafe { CStr::from_ptr(raw) }
        .to_str()
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or_else(max_clock_wait_ms)
}

/// Runs `f` with the base62 passphrase's bytes (None when no key file is set), borrowed from the
/// setting's "extra" for the length of the call and no longer: a configuration reload frees that
/// memory, and one can only happen between statements, never inside `f`.
pub fn with_base62_key<T>(f: impl FnOnce(Option<&[u8]>) -> T) -> T {
    let raw = KEY.load(Ordering::Acquire);
    // SAFETY: non-null, it is a block from `key_extra`, which PostgreSQL keeps until the setting
    // changes, which cannot happen during `f`.
    let bytes = (!raw.is_null()).then(|| unsafe {
        let len = raw.cast::<usize>().read_unaligned();
        std::slice::from_raw_parts(raw.add(size_of::<usize>()), len)
    });
    f(bytes)
}

/// A copy of `key` in the layout `with_base62_key` reads, allocated as PostgreSQL frees a
/// setting's "extra", or null when out of memory.
fn key_extra(key: &[u8]) -> *mut u8 {
    unsafe {
        let block = guc_alloc(size_of::<usize>() + key.len()).cast::<u8>();
        if !block.is_null() {
            block.cast::<usize>().write_unaligned(key.len());
            std::ptr::copy_nonoverlapping(key.as_ptr(), block.add(size_of::<usize>()), key.len());
        }
        block
    }
}

/// Memory for a setting's "extra": PostgreSQL 15 and earlier free it with free(); 16 and later
/// keep settings in their own memory context and free it with guc_free(), a pfree.
#[cfg(any(feature = "pg13", feature = "pg14", feature = "pg15"))]
unsafe fn guc_alloc(size: usize) -> *mut c_void {
    unsafe { libc::malloc(size) }
}

#[cfg(not(any(feature = "pg13", feature = "pg14", feature = "pg15")))]
unsafe fn guc_alloc(size: usize) -> *mut c_void {
    // LOG, not ERROR: a check hook must not raise; null is reported as out of memory.
    unsafe { pg_sys::guc_malloc(pg_sys::LOG as i32, size) }
}

/// What a check hook reports when it refuses a value (PostgreSQL's GUC_check_errmsg and its
/// kin): PostgreSQL then raises it instead of its own "invalid value" message, which would
/// print the value.
unsafe fn refuse(message: &str, detail: Option<&str>, hint: &str) -> bool {
    let copy = |text: &str| {
        let text = CString::new(text.replace('\0', "")).expect("no NUL left");
        unsafe { pg_sys::pstrdup(text.as_ptr()) }
    };
    unsafe {
        pg_sys::GUC_check_errcode(errors::INVALID_PARAMETER as i32);
        pg_sys::GUC_check_errmsg_string = copy(message);
        if let Some(detail) = detail {
            pg_sys::GUC_check_errdetail_string = copy(detail);
        }
        pg_sys::GUC_check_errhint_string = copy(hint);
    }
    false
}

/// Reads the key file whenever idgen.base62_key_file gets a value: at start-up and at every
/// reload (PostgreSQL checks every value of the configuration file again then, changed or
/// not), in each process. A file that cannot be used is refused with the reason, and the key
/// in use stays as it was: at a reload the old key, at start-up none.
#[pg_guard]
unsafe extern "C-unwind" fn check_key_file(
    newval: *mut *mut c_char,
    extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    let path = unsafe {
        (*newval)
            .as_ref()
            .map(|p| CStr::from_ptr(p).to_string_lossy())
    };
    let Some(path) = path.filter(|p| !p.is_empty()) else {
        return true; // no key
    };
    // A parallel worker is forked from the postmaster and holds the key as of the last reload,
    // as its leader does: it keeps that one rather than a file that may have changed since.
    let inherited = KEY.load(Ordering::Acquire);
    let key = if unsafe { pg_sys::InitializingParallelWorker } && !inherited.is_null() {
        with_base62_key(|key| key.map(<[u8]>::to_vec)).unwrap_or_default()
    } else {
        match key_file::read(Path::new(path.as_ref()), unsafe { libc::geteuid() }) {
            Ok(key) => key,
            Err(e) => {
                let hint = match e {
                    key_file::Error::Exposed(_) | key_file::Error::NotOwned { .. } => "Make the file belong to the server's OS user alone: chown postgres FILE; chmod 600 FILE (as root), then reload.",
                    key_file::Error::NotAFile(_) => "Name a regular file that holds the passphrase (not a FIFO, a device or a folder, nor a link to one), owned by the server's OS user with mode 0600, then reload.",
                    key_file::Error::Io(ref io) if io.kind() == std::io::ErrorKind::NotFound => "Write the passphrase into that file, as the server's OS user: (umask 077; echo '<a long random passphrase>' >\"$PGDATA/idgen_base62.key\"), then reload. A relative path is relative to the data directory.",
                    _ => "The file holds the passphrase, on one line, and belongs to the server's OS user with mode 0600; see docs/base62.md in idgen's source, \"Keyed codes\".",
                };
                return unsafe {
                    refuse(
                        &format!("idgen.base62_key_file \"{path}\" cannot be used: {e}"),
                        None,
                        hint,
                    )
                };
            }
        }
    };
    let block = key_extra(&key);
    if block.is_null() {
        return unsafe {
            refuse(
                "out of memory reading idgen.base62_key_file",
                None,
                "Try again.",
            )
        };
    }
    unsafe { *extra = block.cast() };
    true
}

#[pg_guard]
unsafe extern "C-unwind" fn assign_key_file(_newval: *const c_char, extra: *mut c_void) {
    KEY.store(extra.cast(), Ordering::Release);
}

/// Refuses every value of idgen.base62_key, without repeating it (PostgreSQL's own message
/// would), and says how to move it.
#[pg_guard]
unsafe extern "C-unwind" fn check_retired_key(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    let empty = unsafe { (*newval).is_null() || **newval == 0 };
    empty
        || unsafe {
            refuse(
                "idgen.base62_key is no longer read: since idgen 0.3.0 the passphrase lives in the file named by idgen.base62_key_file",
                Some("Members of pg_read_all_settings and pg_monitor could read the setting; nobody but the server's OS user can read the file. The same passphrase gives the same codes."),
                MOVE_THE_KEY,
            )
        }
}

#[cfg(test)]
mod tests {
    use super::EpochCache;

    #[test]
    fn an_epoch_of_zero_is_cached_like_any_other() {
        let cache = EpochCache::new();
        assert_eq!(cache.get_or(|| 7), 7, "not set: looked up");
        assert_eq!(cache.get_or(|| 8), 8, "not set: looked up every time");
        cache.set(0);
        assert_eq!(cache.get_or(|| panic!("looked up although set to 0")), 0);
        cache.set(1_288_834_974_657);
        assert_eq!(
            cache.get_or(|| panic!("looked up although set")),
            1_288_834_974_657
        );
    }
}
