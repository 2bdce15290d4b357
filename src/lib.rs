//! idgen: Snowflake ids, time-ordered UUID v7 and base62 codes, generated inside PostgreSQL.
//!
//! The pure core (`snowflake`, `horizon`, `uuid7`, `base62`, `key_file`) knows nothing of Postgres and is tested with plain
//! `cargo test`; `settings`, `shared`, `clock`, `errors` and `sql` are the thin pgrx layer.

mod base62;
mod horizon;
mod key_file;
mod snowflake;
mod uuid7;

mod clock;
mod errors;
mod settings;
mod shared;
mod sql;
#[cfg(not(any(feature = "pg13", feature = "pg14")))]
mod wal;

pgrx::pg_module_magic!(name, version);

#[pgrx::pg_guard]
pub extern "C-unwind" fn _PG_init() {
    let preloading = unsafe { pgrx::pg_sys::process_shared_preload_libraries_in_progress };
    settings::register(preloading);
    if preloading {
        shared::init();
    }
}

#[cfg(feature = "pg_test")]
#[pgrx::pg_schema]
mod tests {
    include!("pg_tests.rs");
}

/// Required by `cargo pgrx test`: settings for its test cluster.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec!["shared_preload_libraries = 'idgen'", "idgen.worker_id = 42"]
    }
}
