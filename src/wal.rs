//! The snowflake horizon in the WAL (PostgreSQL 15 and later): a custom resource manager with
//! one record, "a new horizon", so that a standby, crash recovery and a point-in-time restore
//! learn how far the primary may have issued ids, and a promoted standby never reissues one or
//! goes back. The record is written and flushed before any id beyond the old horizon is used
//! (the rule the horizon file follows), about twice a second under load and never per id.

use crate::horizon::Record;
use crate::{settings, shared};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::CString;

/// idgen's resource manager id. Ids 128-255 belong to extensions: 128 is PostgreSQL's
/// "experimental" id, and the others are claimed on the PostgreSQL wiki page
/// "CustomWALResourceManagers". 173 is none of the ids found in public extensions' code when it
/// was chosen (128, 129 OrioleDB, 137, ...); the wiki itself could not be reached from where
/// idgen is built. Another preloaded extension with the same id stops the server at start-up
/// with PostgreSQL's "failed to register custom resource manager" error, naming both.
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

/// Writes a horizon record and waits for it to be flushed. Raises (as a Rust panic, through
/// pgrx's guarded calls) if WAL cannot be written, e.g. during recovery.
pub fn log_horizon(unix_ms: u64) {
    let record = Record {
        horizon_unix_ms: unix_ms,
        epoch_unix_ms: settings::epoch_ms(),
        worker_id: settings::worker_id_if_set().map_or(-1, i32::from),
    };
    let bytes = record.encode();
    unsafe {
        pg_sys::XLogBeginInsert();
        pg_sys::XLogRegisterData(bytes.as_ptr() as _, bytes.len() as _);
        let lsn = pg_sys::XLogInsert(RMGR_ID, XLOG_IDGEN_HORIZON);
        pg_sys::XLogFlush(lsn);
    }
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
        (XLOG_IDGEN_HORIZON, Some(r)) => shared::replay_horizon(r.horizon_unix_ms),
        // Never guess a horizon: recovery stops here, with the reason in the log.
        _ => pgrx::error!(
            "idgen: WAL record with info {info:#04x} and {} bytes of data is not one this idgen version wrote; use the idgen version that wrote it",
            data.len()
        ),
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn desc(buf: pg_sys::StringInfo, record: *mut pg_sys::XLogReaderState) {
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
    use super::main_data;

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
