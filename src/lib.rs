//! idgen: Snowflake ids, time-ordered UUID v7 and base62 codes, generated inside PostgreSQL.
//!
//! Three floors, each in a folder of its own, imports running down only:
//! - `src/sql/`: the SQL-callable functions (`#[pg_extern]`), thin: they read settings and
//!   shared state, call the core, and turn its errors into PostgreSQL errors;
//! - `src/pg/`: the Postgres layer: settings, shared memory, the clock, errors, the durable
//!   horizon (WAL, synchronous standbys, the file, replay), the lease worker and its libpq
//!   client (`pg/mod.rs` draws its inner order);
//! - `src/core/`: the pure core, the crate `idgen_core` (snowflake, horizon, uuid7, base62,
//!   key_file, lease). It has no pgrx in its Cargo.toml, so the build refuses a core file that
//!   names pgrx; it is tested with `cargo test -p idgen-core`, property tests and loom.
//!
//! pg_test/test_layers.py fails on an import that runs up a floor and on any circle.

mod pg;
mod sql;

pgrx::pg_module_magic!(name, version);

#[pgrx::pg_guard]
pub extern "C-unwind" fn _PG_init() {
    let preloading = unsafe { pgrx::pg_sys::process_shared_preload_libraries_in_progress };
    pg::settings::register(preloading);
    if preloading {
        pg::shared::init();
        pg::horizon_store::init();
        pg::short_codes::init();
        pg::registry::init();
        pg::citus_peers::init();
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
