//! idgen: Snowflake ids, time-ordered UUID v7 and base62 codes, generated inside PostgreSQL.
//!
//! Three floors, imports running down only:
//! - the SQL-callable functions (`sql`), thin;
//! - the Postgres layer: `settings`, `shared` (shared memory), `clock`, `errors`,
//!   `horizon_store` (the durable horizon: WAL, synchronous standbys, the file, replay),
//!   `registry` (the lease worker) and `registry_client` (libpq); within it,
//!   horizon_store and registry → shared → settings, and registry → registry_client;
//! - the pure core (`snowflake`, `horizon`, `uuid7`, `base62`, `key_file`, `lease`), which knows
//!   nothing of Postgres and is tested with plain `cargo test`, property tests and loom.
//!
//! The registry answers snowflake_next() with a permit or where the lease stands; the refusal
//! is raised in `sql`, so nothing below it imports it.

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
