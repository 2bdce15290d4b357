//! The Postgres layer: what idgen keeps in the server, between the SQL-callable functions above
//! (`src/sql/`) and the pure core below (the `idgen_core` crate, `src/core/`).
//!
//! Imports run down only, within the layer too: `horizon_store` and `registry` → `shared` →
//! `settings` → `registry_client` (which checks `idgen.registry`), and `registry` →
//! `registry_client` → `libpq`, and `citus_peers` → `libpq`; `clock`, `errors` and `libpq` are
//! leaves (docs/development.md draws them all). Nothing here imports `crate::sql`: where the
//! registry refuses an id it says where the lease stands (`registry::View`), and `refusals`
//! words the error the SQL function raises.

pub mod citus_peers;
pub mod clock;
pub mod errors;
pub mod horizon_store;
pub mod libpq;
pub mod palloc;
pub mod refusals;
pub mod registry;
pub mod registry_client;
pub mod settings;
pub mod shared;
pub mod short_codes;
pub mod timestamps;
pub mod worker_codes;
