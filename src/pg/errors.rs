//! Every error idgen raises goes through here, so each one carries a SQLSTATE, and a HINT where
//! the user can do something about it.

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};

pub use PgSqlErrorCode::{
    ERRCODE_DATA_CORRUPTED as DATA_CORRUPTED,
    ERRCODE_DATETIME_FIELD_OVERFLOW as DATETIME_OUT_OF_RANGE,
    ERRCODE_INSUFFICIENT_PRIVILEGE as INSUFFICIENT_PRIVILEGE,
    ERRCODE_INVALID_PARAMETER_VALUE as INVALID_PARAMETER,
    ERRCODE_INVALID_TEXT_REPRESENTATION as INVALID_TEXT, ERRCODE_IO_ERROR as IO_ERROR,
    ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE as NUMERIC_OUT_OF_RANGE,
    ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE as NOT_IN_PREREQUISITE_STATE,
    ERRCODE_QUERY_CANCELED as QUERY_CANCELED,
    ERRCODE_READ_ONLY_SQL_TRANSACTION as READ_ONLY_TRANSACTION,
    ERRCODE_SUCCESSFUL_COMPLETION as SUCCESSFUL_COMPLETION, ERRCODE_SYSTEM_ERROR as SYSTEM_ERROR,
};

/// An error about to be raised; add a detail or hint, then `raise()`.
#[must_use]
pub struct Error(ErrorReport);

/// `#[track_caller]`, as is every helper that calls it: an error's LOCATION (`\set VERBOSITY
/// verbose`, the server log) names the file and line of the function that raised it.
#[track_caller]
pub fn error(code: PgSqlErrorCode, message: impl Into<String>) -> Error {
    Error(ErrorReport::new(code, message.into(), "idgen"))
}

impl Error {
    pub fn detail(self, detail: impl Into<String>) -> Self {
        Error(self.0.set_detail(detail))
    }
    pub fn hint(self, hint: impl Into<String>) -> Self {
        Error(self.0.set_hint(hint))
    }
    pub fn raise(self) -> ! {
        self.0.report(PgLogLevel::ERROR);
        unreachable!("ERROR does not return")
    }
    pub fn warn(self) {
        self.0.report(PgLogLevel::WARNING);
    }
    /// To the server log only.
    pub fn log(self) {
        self.0.report(PgLogLevel::LOG);
    }
}

/// Functions that need shared memory call this when idgen was not preloaded.
#[track_caller]
pub fn not_preloaded(what: &str) -> ! {
    error(NOT_IN_PREREQUISITE_STATE, format!("{what} needs idgen in shared_preload_libraries"))
        .detail("idgen keeps its generator state in shared memory, which exists only when the library is loaded at server start.")
        .hint("Add idgen to shared_preload_libraries in postgresql.conf (or ALTER SYSTEM SET shared_preload_libraries = 'idgen') and restart the server.")
        .raise()
}

/// An id space in messages: the epoch and the layout that make its ids.
pub fn id_space(epoch_unix_ms: u64, layout: impl std::fmt::Display) -> String {
    format!("idgen.epoch {epoch_unix_ms} and idgen.layout {layout}")
}
