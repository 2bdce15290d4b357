//! idgen: Snowflake ids, time-ordered UUID v7 and base62 codes, generated inside PostgreSQL.
//!
//! The pure core (`snowflake`, `horizon`, `uuid7`, `base62`, `key_file`) knows nothing of Postgres and is tested with plain
//! `cargo test`; `settings`, `shared`, `clock`, `horizon_store`, `errors` and `sql` are the thin
//! pgrx layer. `horizon_store` keeps the durable horizon (WAL, synchronous standbys, the file,
//! replay); the modules depend on one another in one direction only:
//! sql → horizon_store → shared → settings, and all of them on the pure core.

mod base62;
mod horizon;
mod key_file;
mod lease;
mod snowflake;
mod uuid7;

mod clock;
mod errors;
mod horizon_store;
mod registry;
mod registry_client;
mod settings;
mod shared;
mod sql;

pgrx::pg_module_magic!(name, version);

#[pgrx::pg_guard]
pub extern "C-unwind" fn _PG_init() {
    let preloading = unsafe { pgrx::pg_sys::process_shared_preload_libraries_in_progress };
    settings::register(preloading);
    if preloading {
        shared::init();
        horizon_store::init();
        registry::init();
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
