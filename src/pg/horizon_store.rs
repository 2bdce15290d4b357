//! The durable horizon, in one place: the invariant that no snowflake id or preloaded UUID is
//! ever issued from a millisecond beyond a horizon that is durable — in the WAL (flushed, and
//! confirmed by the synchronous standbys when there are any) and in the file `idgen_horizon` —
//! and that everything resumes past it after a restart, a crash, a failover or a restore.
//!
//! - **persist** (`Backend::persist_horizon`): a WAL record, `XLogFlush`, the synchronous-standby
//!   wait, then the file. About twice a second under load, never per id.
//! - **replay** (`redo`): a standby, crash recovery or a restore learns the primary's horizon;
//!   the record's epoch and worker id are compared with this server's.
//! - **load** at start-up (the shared-memory hook) and the exact mark at a clean shutdown.
//!
//! The generator's state machine and the file's format are in the pure core (`snowflake.rs`,
//! `horizon.rs`); `clock.rs` only reads the clock; `shared.rs` lays out the shared memory.

use crate::pg::errors::{self, error};
use crate::pg::{clock, settings, shared};
use idgen_core::horizon::{self, Mark};
use idgen_core::{snowflake, uuid7};
use pgrx::pg_sys;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

pub use wal::flush_all as flush_wal;

/// Relative to the data directory, which is every Postgres process's working directory.
pub const HORIZON_FILE: &str = horizon::FILE;

fn file() -> &'static Path {
    Path::new(HORIZON_FILE)
}

/// A test hook, read once in the postmaster from its environment (never a setting: no SQL user
/// can slow the generator): each push sleeps this long while it holds the writer's lock, and a
/// termination request that arrives meanwhile ends the process at once with FATAL, as a
/// background worker's default SIGTERM handler does — the exit that never returns to release
/// anything by hand.
static TEST_PUSH_DELAY_MS: AtomicU64 = AtomicU64::new(0);
const TEST_PUSH_DELAY_ENV: &str = "IDGEN_TEST_PUSH_DELAY_MS";

/// From `_PG_init`, while preloading (after `shared::init`).
pub fn init() {
    if let Some(ms) = std::env::var(TEST_PUSH_DELAY_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
    {
        TEST_PUSH_DELAY_MS.store(ms, Ordering::Relaxed);
    }
    unsafe {
        PREV_SHMEM_STARTUP = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(on_shmem_startup);
    }
    // PostgreSQL 13 and 14 have no custom WAL resource managers: the file alone keeps the
    // horizon there, so it does not survive a failover.
    #[cfg(not(any(feature = "pg13", feature = "pg14")))]
    wal::register();
}

// ---- persist -------------------------------------------------------------------------------

/// The generator's environment in a backend.
pub struct Backend;

impl snowflake::Env for Backend {
    fn now_unix_ms(&mut self) -> u64 {
        clock::now_unix_ms()
    }

    fn pause(&mut self, pause: snowflake::Pause) {
        // Cancel and statement_timeout work during every wait. Never called while the
        // horizon writer's lock is held.
        pg_sys::check_for_interrupts!();
        match pause {
            snowflake::Pause::Spin => std::hint::spin_loop(),
            snowflake::Pause::Sleep { ms } => unsafe { pg_sys::pg_usleep((ms * 1000) as _) },
        }
        pg_sys::check_for_interrupts!();
    }

    /// The WAL record first (flushed, then confirmed by the synchronous standbys), then the
    /// file: all before any id beyond the old horizon is used. The record is what standbys and
    /// restores see; the file is what a start-up reads before any WAL is replayed, and what a
    /// clean shutdown lowers to the exact mark.
    fn persist_horizon(&mut self, unix_ms: u64) -> std::io::Result<()> {
        test_delay();
        #[cfg(not(any(feature = "pg13", feature = "pg14")))]
        wal::log_horizon(unix_ms)?;
        write_file(unix_ms)
    }

    fn try_begin_push(&mut self) -> bool {
        shared::push_lock::try_acquire()
    }

    fn end_push(&mut self) {
        shared::push_lock::release();
    }

    fn wait_for_push(&mut self, moved: &dyn Fn() -> bool) {
        pg_sys::check_for_interrupts!();
        shared::push_lock::wait(moved);
    }
}

fn write_file(unix_ms: u64) -> std::io::Result<()> {
    let space = written_space();
    let mark = Mark {
        unix_ms,
        layout: space.layout,
        epoch_ms: Some(space.epoch_unix_ms),
        primary_epoch_ms: shared::epoch_conflict(),
        primary_layout: shared::layout_conflict(),
    };
    horizon::write(file(), mark)?;
    ON_DISK_UNIX_MS.store(unix_ms, Ordering::Relaxed);
    Ok(())
}

/// The id space the file names for the ids up to its horizon:
/// - the one it recorded at start-up, when a change from it was refused (nothing was issued
///   under the new settings) or accepted but no snowflake id has been made under them yet (a
///   layout is recorded only once an id was made under it: putting the old settings back then
///   meets no refusal);
/// - the primary's, where a standby replayed a primary of another epoch or layout (shared
///   memory: the startup process learns it, the postmaster's shutdown writes it);
/// - else this server's.
fn written_space() -> snowflake::TimeBase {
    let own = settings::time_base();
    if let Some(kept) = kept_space() {
        let issued_under_own = shared::snowflake_state().stats(&own).last_millis.is_some();
        if REFUSED.load(Ordering::Relaxed) || !issued_under_own {
            return kept;
        }
    }
    snowflake::TimeBase {
        epoch_unix_ms: shared::epoch_conflict().unwrap_or(own.epoch_unix_ms),
        layout: shared::layout_conflict().unwrap_or(own.layout),
    }
}

/// The id space the file recorded at start-up, where it differs from this server's; set in the
/// postmaster and inherited by every process it starts.
static KEPT_EPOCH: AtomicU64 = AtomicU64::new(OWN);
static KEPT_LAYOUT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
/// Whether the change from it was refused.
static REFUSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
const OWN: u64 = u64::MAX;

fn kept_space() -> Option<snowflake::TimeBase> {
    let layout = idgen_core::layout::Layout::from_code(KEPT_LAYOUT.load(Ordering::Relaxed))?;
    Some(snowflake::TimeBase {
        epoch_unix_ms: KEPT_EPOCH.load(Ordering::Relaxed),
        layout,
    })
}

fn keep_space(kept: Option<snowflake::TimeBase>, refused: bool) {
    KEPT_EPOCH.store(kept.map_or(OWN, |b| b.epoch_unix_ms), Ordering::Relaxed);
    KEPT_LAYOUT.store(kept.map_or(0, |b| b.layout.to_code()), Ordering::Relaxed);
    REFUSED.store(refused, Ordering::Relaxed);
}

/// Where this run's ids resume after a change of epoch or layout at start-up, when its ids sort
/// above the kept space's only from a later moment (`OWN`: none). Set in the postmaster.
static CHANGED_FLOOR: AtomicU64 = AtomicU64::new(OWN);

/// The id space this run changed from at start-up, and from when its ids sort above that one's.
pub fn id_space_change() -> Option<(snowflake::TimeBase, u64)> {
    let floor = CHANGED_FLOOR.load(Ordering::Relaxed);
    kept_space()
        .filter(|_| floor != OWN)
        .map(|kept| (kept, floor))
}

/// How far past its horizon the recorded id space may have made ids: the fleet's other servers
/// run ahead by their clocks' skew, this one by the horizon's lead.
fn id_space_margin_ms() -> u64 {
    settings::max_clock_skew_ms().max(snowflake::HORIZON_LEAD_MS)
}

fn test_delay() {
    let ms = TEST_PUSH_DELAY_MS.load(Ordering::Relaxed);
    for _ in 0..ms.div_ceil(10) {
        unsafe {
            if pg_sys::ProcDiePending != 0 {
                pgrx::ereport!(
                    pgrx::PgLogLevel::FATAL,
                    pgrx::PgSqlErrorCode::ERRCODE_ADMIN_SHUTDOWN,
                    "terminating connection due to administrator command (idgen test hook: in the middle of a horizon push)"
                );
            }
            pg_sys::pg_usleep(10_000);
        }
    }
}

// ---- load and shutdown ---------------------------------------------------------------------

/// What the file holds, as this process last wrote or read it (the startup process compares
/// replayed horizons with it; inherited from the postmaster, which read the file).
static ON_DISK_UNIX_MS: AtomicU64 = AtomicU64::new(0);

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
    shared::push_lock::attach();
    let state = shared::snowflake_state();
    match horizon::read(file()) {
        Ok(mark) => {
            let unix_ms = mark.map_or(0, |m| m.unix_ms);
            state.seed(&settings::time_base(), unix_ms);
            ON_DISK_UNIX_MS.store(unix_ms, Ordering::Relaxed);
            // UUIDs too resume past the mark: after a restart with the clock set back, they still
            // sort above every UUID made before.
            if let Some(m) = mark {
                uuid7::raise_past(shared::uuid7_shared_word(), m.unix_ms);
            }
            let conflict = mark
                .and_then(|m| m.primary_epoch_ms)
                .filter(|&e| e != settings::epoch_ms());
            if let Some(primary) = conflict {
                warn_epoch_conflict(primary);
            }
            shared::set_epoch_conflict(conflict);
            let own = settings::layout();
            let conflict = mark.and_then(|m| m.primary_layout).filter(|&l| l != own);
            if let Some(primary) = conflict {
                warn_layout_conflict(primary);
            }
            shared::set_layout_conflict(conflict);
            check_id_space_change(mark, state);
            shared::set_horizon_damaged(false);
        }
        Err(e) => {
            shared::set_horizon_damaged(true);
            error(errors::DATA_CORRUPTED, format!("idgen: could not read {HORIZON_FILE}: {e}"))
                .hint("snowflake_next() and uuid_v7() are disabled until the file is repaired and the server restarted; see docs/guarantees.md in idgen's source, \"Restarts, crashes and the clock\".")
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
/// shared memory is not trusted and the horizon on disk stands; a damaged file is left for the
/// operator.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn on_shmem_shutdown(code: i32, _arg: pg_sys::Datum) {
    if code != 0 || shared::horizon_damaged() {
        return;
    }
    let state = shared::snowflake_state();
    let snowflake = state.high_water_unix_ms(&settings::time_base());
    let mark = snowflake.max(uuid7::last_ms(shared::uuid7_shared_word()));
    if let Err(e) = write_file(mark) {
        error(errors::IO_ERROR, format!("idgen: could not record {HORIZON_FILE} at shutdown: {e}"))
            .hint("The horizon written while the server ran still protects against reissued ids; the next start may wait up to a second for the clock.")
            .warn();
    }
}

/// An id space (epoch and layout) other than the one the file records is taken only where its
/// ids sort above every id the recorded one could have made up to the horizon (plus
/// idgen.max_clock_skew, or the horizon's lead, for the fleet's other servers):
/// - at once, when its first id after the horizon does (Twitter's layout to Instagram's, an
///   earlier epoch);
/// - from a later moment within `idgen.max_clock_wait` of the clock (as the server's
///   configuration sets it: this runs in the postmaster), when the new ids sort above only from
///   then (a later epoch): the run resumes there and the first ids wait for the clock;
/// - otherwise not: snowflake_next() refuses, saying from when it could (or that it never can),
///   and the file keeps naming the recorded space, so that putting the settings back works.
///
/// The file records the new space from its next write, which comes before the first id under it.
/// A file written before 0.3.0 records no epoch: it is taken as this server's.
fn check_id_space_change(mark: Option<Mark>, state: &snowflake::SharedState) {
    keep_space(None, false);
    CHANGED_FLOOR.store(OWN, Ordering::Relaxed);
    shared::set_id_space_refused(None);
    let Some(mark) = mark else { return };
    let own = settings::time_base();
    let recorded = snowflake::TimeBase {
        epoch_unix_ms: mark.epoch_ms.unwrap_or(own.epoch_unix_ms),
        layout: mark.layout,
    };
    if own.same_ids(&recorded) {
        return;
    }
    let margin = id_space_margin_ms();
    let floor = own.floor_above(&recorded, mark.unix_ms, margin);
    let latest = clock::now_unix_ms().saturating_add(settings::max_clock_wait_ms());
    let (then, now) = (
        errors::id_space(recorded.epoch_unix_ms, recorded.layout),
        errors::id_space(own.epoch_unix_ms, own.layout),
    );
    // until a snowflake id is made under the new settings, the file keeps naming the old
    keep_space(Some(recorded), false);
    match floor {
        Some(floor) if floor <= mark.unix_ms => {
            error(errors::SUCCESSFUL_COMPLETION, format!("idgen: snowflake ids now made under {now}, before under {then}"))
                .detail(format!("Every id under the new settings sorts above every id the old ones could have made up to the horizon ({} Unix ms).", mark.unix_ms))
                .log();
        }
        Some(floor) if floor <= latest => {
            state.resume_after(&own, floor);
            CHANGED_FLOOR.store(floor, Ordering::Relaxed);
            error(errors::SUCCESSFUL_COMPLETION, format!("idgen: snowflake ids now made under {now}, before under {then}; they resume after {}", clock::timestamptz_text(floor)))
                .detail(format!("Ids under the new settings sort above every id the old ones could have made up to the horizon ({} Unix ms) only from then: the first ones wait for the clock.", mark.unix_ms))
                .log();
        }
        _ => {
            keep_space(Some(recorded), true);
            shared::set_id_space_refused(Some((recorded, floor)));
            let when = floor.map_or(
                "at no time before the layout's time field ends".to_string(),
                |f| format!("only from {}", clock::timestamptz_text(f)),
            );
            error(errors::NOT_IN_PREREQUISITE_STATE, format!("idgen: this server makes ids under {now}, and {HORIZON_FILE} records ids made under {then}"))
                .detail(format!("Ids under the new settings would sort above those {when}: snowflake_next() refuses until idgen.epoch and idgen.layout are put back, and the file keeps naming them."))
                .hint(format!("Set idgen.epoch = '{}' and idgen.layout = '{}' in postgresql.conf and restart; docs/layouts.md says which changes are possible.", recorded.epoch_unix_ms, recorded.layout))
                .warn();
        }
    }
}

// ---- replay --------------------------------------------------------------------------------

/// Set once a mismatch was logged by this process, so the log gets it once, not per record.
static WARNED_EPOCH: AtomicU64 = AtomicU64::new(u64::MAX);
static NOTED_WORKER: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-2);

static WARNED_LAYOUT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn warn_layout_conflict(primary: idgen_core::layout::Layout) {
    if WARNED_LAYOUT.swap(primary.to_code(), Ordering::Relaxed) == primary.to_code() {
        return;
    }
    let own = settings::layout();
    error(errors::NOT_IN_PREREQUISITE_STATE, format!("idgen: the primary's idgen.layout ({primary}) differs from this server's ({own})"))
        .detail("Its snowflake ids decode to other times and worker ids here, and after a promotion this server's ids could sort below the primary's: snowflake_next() refuses until the settings match.")
        .hint(format!("Set idgen.layout = '{primary}' in this server's postgresql.conf and restart it."))
        .warn();
}

fn warn_epoch_conflict(primary: u64) {
    if WARNED_EPOCH.swap(primary, Ordering::Relaxed) == primary {
        return;
    }
    let own = settings::epoch_ms();
    error(errors::NOT_IN_PREREQUISITE_STATE, format!("idgen: the primary's idgen.epoch ({primary}) differs from this server's ({own})"))
        .detail("Its snowflake ids decode to other times here, and after a promotion this server's ids would sort below the primary's: snowflake_next() refuses until the settings match.")
        .hint(format!("Set idgen.epoch = '{primary}' in this server's postgresql.conf and restart it."))
        .warn();
}

/// WAL replay of a horizon the primary recorded: the generator resumes past it, uuid_v7()'s
/// word too, and the file records it (see `horizon::replay_mark` for how rarely).
fn replay(record: horizon::Record) {
    if !shared::preloaded() {
        return;
    }
    // Crash recovery replays this server's own WAL, written under the settings of its last run.
    // The start-up check compared those with the present ones as the horizon file recorded them;
    // a record here may be half a second past the file (the file is written after the WAL), so
    // an own record of another id space moves the run past it the same way. Only WAL from
    // elsewhere (a standby's primary, the archive a restore reads) is a primary's, whose
    // settings must match.
    let from_a_primary = unsafe { pg_sys::ArchiveRecoveryRequested };
    let state = shared::snowflake_state();
    let own_base = settings::time_base();
    let record_space = snowflake::TimeBase {
        epoch_unix_ms: record.epoch_unix_ms,
        layout: record.layout,
    };
    let mut conflict_changed = false;
    if from_a_primary {
        let conflict =
            (record.epoch_unix_ms != own_base.epoch_unix_ms).then_some(record.epoch_unix_ms);
        if let Some(primary) = conflict {
            warn_epoch_conflict(primary);
        }
        let layout_conflict = (!record.layout.same_ids(&own_base.layout)).then_some(record.layout);
        if let Some(primary) = layout_conflict {
            warn_layout_conflict(primary);
        }
        conflict_changed =
            conflict != shared::epoch_conflict() || layout_conflict != shared::layout_conflict();
        shared::set_epoch_conflict(conflict);
        shared::set_layout_conflict(layout_conflict);
    } else if !own_base.same_ids(&record_space) && !REFUSED.load(Ordering::Relaxed) {
        // (where the start-up check refused the change, no id is made: the run stays where the
        // file put it, so that a shutdown records no horizon past what was issued)
        let margin = id_space_margin_ms();
        match own_base.floor_above(&record_space, record.horizon_unix_ms, margin) {
            Some(floor) => {
                state.resume_after(&own_base, floor);
            }
            None => shared::set_id_space_refused(Some((record_space, None))),
        }
    }
    if let Some(own) = settings::worker_id_if_set().map(i32::from) {
        if record.worker_id >= 0
            && record.worker_id != own
            && NOTED_WORKER.swap(record.worker_id, Ordering::Relaxed) != record.worker_id
        {
            // Not an error: a standby with a worker id of its own keeps its ids apart from the
            // primary's. Noted once, so that a shared id set by mistake is visible in the log.
            error(errors::NOT_IN_PREREQUISITE_STATE, format!("idgen: the primary writes snowflake ids with worker id {}, this server has idgen.worker_id = {own}", record.worker_id))
                .detail("After a promotion this server's ids carry its own worker id; they stay unique and above the primary's.")
                .log();
        }
    }
    let rose = state.replay_horizon(&own_base, record.horizon_unix_ms);
    if rose {
        uuid7::raise_past(shared::uuid7_shared_word(), record.horizon_unix_ms);
    }
    // A damaged file stays as it is, for the operator: the generator refuses until it is
    // repaired (see shared::check_horizon).
    if shared::horizon_damaged() {
        return;
    }
    let on_disk = ON_DISK_UNIX_MS.load(Ordering::Relaxed);
    let write = horizon::replay_mark(record.horizon_unix_ms, on_disk, clock::now_unix_ms())
        .or(conflict_changed.then_some(on_disk.max(record.horizon_unix_ms)));
    if let Some(unix_ms) = write {
        if let Err(e) = write_file(unix_ms) {
            // Recovery stops rather than go on without a durable copy: after a restart, replay
            // begins at the last restartpoint and would not see this record again.
            error(errors::IO_ERROR, format!("idgen: could not record {HORIZON_FILE} while replaying WAL: {e}"))
                .detail(format!("The replayed horizon is {} (Unix ms); the file must hold at least that before replay goes on.", record.horizon_unix_ms))
                .hint("Free space (or fix permissions) in the data directory, then start the server again: replay resumes where it stopped.")
                .raise();
        }
    }
}

/// The horizon in the WAL (PostgreSQL 15 and later): a custom resource manager with one record,
/// "a new horizon".
#[cfg(not(any(feature = "pg13", feature = "pg14")))]
mod wal {
    use crate::pg::settings;
    use idgen_core::horizon::Record;
    use pgrx::pg_sys;
    use pgrx::prelude::*;
    use std::ffi::CString;

    /// idgen's resource manager id. Ids 128-255 belong to extensions: 128 is PostgreSQL's
    /// "experimental" id, and the others are claimed on the PostgreSQL wiki page
    /// "CustomWALResourceManagers". 173 is none of the ids found in public extensions' code when
    /// it was chosen (128, 129 OrioleDB, 137, ...); the wiki itself could not be reached from
    /// where idgen is built. Another preloaded extension with the same id stops the server at
    /// start-up with PostgreSQL's "failed to register custom resource manager" error, naming both.
    pub const RMGR_ID: u8 = 173;
    const RMGR_NAME: &std::ffi::CStr = c"idgen";

    /// The one record type (the high four bits of xl_info belong to the resource manager).
    const XLOG_IDGEN_HORIZON: u8 = 0x00;
    const XLR_RMGR_INFO_MASK: u8 = 0xF0;

    /// From `_PG_init`, while preloading: PostgreSQL copies the table entry.
    pub fn register() {
        let rmgr = pg_sys::RmgrData {
            rm_name: RMGR_NAME.as_ptr(),
            rm_redo: Some(redo),
            rm_desc: Some(desc),
            rm_identify: Some(identify),
            rm_startup: None,
            rm_cleanup: None,
            rm_mask: None,
            rm_decode: None,
        };
        unsafe { pg_sys::RegisterCustomRmgr(RMGR_ID, &raw const rmgr as _) };
    }

    /// Writes a horizon record, waits for it to be flushed, and, when synchronous replication
    /// is configured, for the synchronous standbys to have flushed it too — whatever this
    /// session's `synchronous_commit` says: the horizon covers every session's ids. Raises (as
    /// a Rust panic, through pgrx's guarded calls) if WAL cannot be written, e.g. during
    /// recovery; returns `Interrupted` when the standby wait was cancelled, which PostgreSQL
    /// reports with only a WARNING: that push is not durable, and no id may use it.
    pub fn log_horizon(unix_ms: u64) -> std::io::Result<()> {
        let record = Record {
            horizon_unix_ms: unix_ms,
            epoch_unix_ms: settings::epoch_ms(),
            worker_id: settings::worker_id_if_set().map_or(-1, i32::from),
            layout: settings::layout(),
        };
        let bytes = record.encode();
        let lsn = unsafe {
            pg_sys::XLogBeginInsert();
            pg_sys::XLogRegisterData(bytes.as_ptr() as _, bytes.len() as _);
            let lsn = pg_sys::XLogInsert(RMGR_ID, XLOG_IDGEN_HORIZON);
            pg_sys::XLogFlush(lsn);
            lsn
        };
        wait_for_synchronous_standbys(lsn)
    }

    /// Waits for everything written to the WAL so far to be flushed, and confirmed by the
    /// synchronous standbys, as `log_horizon` does for its own record: worker_code_next()'s
    /// block of a sequence is durable, as a horizon is, before a code of it is handed out.
    pub fn flush_all() -> std::io::Result<()> {
        let written = unsafe {
            let end = end_of_inserted(
                pg_sys::GetXLogInsertRecPtr(),
                pg_sys::wal_segment_size as u64,
            );
            pg_sys::XLogFlush(end);
            end
        };
        wait_for_synchronous_standbys(written)
    }

    /// The end of the WAL inserted so far, from the insert position. At the start of a page
    /// that position lies past the page's header, which is not written until the next record
    /// is: flushing up to it fails ("xlog flush request … is not satisfied"). The end of what
    /// was inserted is then the page's start (as PostgreSQL's XLogBytePosToEndRecPtr() says).
    pub(super) fn end_of_inserted(insert: u64, segment_size: u64) -> u64 {
        let align = |n: usize| n.div_ceil(8) as u64 * 8;
        let short = align(size_of::<pg_sys::XLogPageHeaderData>());
        let long = align(size_of::<pg_sys::XLogLongPageHeaderData>());
        let page = u64::from(pg_sys::XLOG_BLCKSZ);
        let header = if segment_size > 0 && insert % segment_size < page {
            long // a segment's first page
        } else {
            short
        };
        if insert % page == header {
            insert - header
        } else {
            insert
        }
    }

    fn synchronous_standbys_named() -> bool {
        unsafe {
            let names = pg_sys::SyncRepStandbyNames;
            pg_sys::max_wal_senders > 0 && !names.is_null() && *names != 0
        }
    }

    /// As a commit waits (`SyncRepWaitForLSN`), with `synchronous_commit = on` for the wait.
    fn wait_for_synchronous_standbys(lsn: pg_sys::XLogRecPtr) -> std::io::Result<()> {
        if !synchronous_standbys_named() {
            return Ok(());
        }
        unsafe {
            let nest = pg_sys::NewGUCNestLevel();
            pg_sys::set_config_option(
                c"synchronous_commit".as_ptr(),
                c"on".as_ptr(),
                pg_sys::GucContext::PGC_USERSET,
                pg_sys::GucSource::PGC_S_SESSION,
                pg_sys::GucAction::GUC_ACTION_SAVE,
                true,
                0,
                false,
            );
            pg_sys::SyncRepWaitForLSN(lsn, false);
            pg_sys::AtEOXact_GUC(true, nest);
            // The wait ends when the standbys confirmed `lsn`, or when it was cancelled or the
            // process told to exit (PostgreSQL then leaves InterruptPending set and says so in
            // a WARNING). The position the synchronous standbys confirmed tells which.
            let confirmed = std::ptr::read_volatile(
                &raw const (*pg_sys::WalSndCtl).lsn[pg_sys::SYNC_REP_WAIT_FLUSH as usize],
            );
            if confirmed < lsn && pg_sys::InterruptPending != 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::Interrupted,
                    "the wait for the synchronous standbys to confirm it was cancelled",
                ));
            }
        }
        Ok(())
    }

    /// The record's info bits and main data.
    unsafe fn parts<'a>(record: *mut pg_sys::XLogReaderState) -> (u8, &'a [u8]) {
        unsafe {
            let decoded = (*record).record;
            let info = (*decoded).header.xl_info & XLR_RMGR_INFO_MASK;
            (
                info,
                main_data((*decoded).main_data, (*decoded).main_data_len),
            )
        }
    }

    /// A record's main data as a slice. A record without main data has a NULL pointer, which no
    /// slice may hold, even an empty one.
    ///
    /// # Safety
    /// `ptr` is NULL or points at `len` readable bytes that outlive `'a`.
    unsafe fn main_data<'a>(ptr: *const std::ffi::c_char, len: u32) -> &'a [u8] {
        if ptr.is_null() || len == 0 {
            &[]
        } else {
            unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len as usize) }
        }
    }

    #[pg_guard]
    unsafe extern "C-unwind" fn redo(record: *mut pg_sys::XLogReaderState) {
        let (info, data) = unsafe { parts(record) };
        match (info, Record::decode(data)) {
            (XLOG_IDGEN_HORIZON, Some(r)) => super::replay(r),
            // Never guess a horizon: recovery stops here, with the reason in the log.
            _ => pgrx::error!(
                "idgen: WAL record with info {info:#04x} and {} bytes of data is not one this idgen version wrote; use the idgen version that wrote it",
                data.len()
            ),
        }
    }

    #[pg_guard]
    unsafe extern "C-unwind" fn desc(
        buf: pg_sys::StringInfo,
        record: *mut pg_sys::XLogReaderState,
    ) {
        let (info, data) = unsafe { parts(record) };
        let text = match (info, Record::decode(data)) {
            (XLOG_IDGEN_HORIZON, Some(r)) => r.to_string(),
            _ => format!("unknown: info {info:#04x}, {} bytes", data.len()),
        };
        let text = CString::new(text).expect("no NUL in a description");
        unsafe { pg_sys::appendStringInfoString(buf, text.as_ptr()) };
    }

    #[pg_guard]
    unsafe extern "C-unwind" fn identify(info: u8) -> *const std::ffi::c_char {
        match info & XLR_RMGR_INFO_MASK {
            XLOG_IDGEN_HORIZON => c"HORIZON".as_ptr(),
            _ => std::ptr::null(),
        }
    }

    #[cfg(test)]
    mod tests {
        use super::{end_of_inserted, main_data};

        #[test]
        fn the_end_of_the_inserted_wal_is_a_pages_start_where_the_insert_position_is_past_its_header(
        ) {
            let segment = 16 << 20;
            // within a page: the position itself
            assert_eq!(end_of_inserted(0x0233_1F40, segment), 0x0233_1F40);
            // just past a page's short header (24 bytes) and a segment's long one (40)
            assert_eq!(end_of_inserted(0x0233_2018, segment), 0x0233_2000);
            assert_eq!(end_of_inserted(0x0300_0028, segment), 0x0300_0000);
            // a segment's first page has the long header only
            assert_eq!(end_of_inserted(0x0300_0018, segment), 0x0300_0018);
        }

        #[test]
        fn a_record_without_main_data_reads_as_empty() {
            let empty = unsafe { main_data(std::ptr::null(), 0) };
            assert!(empty.is_empty());
            let bytes = *b"horizon";
            let read = unsafe { main_data(bytes.as_ptr().cast(), bytes.len() as u32) };
            assert_eq!(read, b"horizon");
            assert!(unsafe { main_data(bytes.as_ptr().cast(), 0) }.is_empty());
        }
    }
}
