//! idgen's pure core: everything about ids, horizons and leases that needs no PostgreSQL.
//!
//! The crate has no pgrx in its dependencies, so the compiler keeps the floor: the Postgres
//! layer (`src/pg/`) and the SQL-callable functions (`src/sql/`) import from here, never the
//! other way. Time, atomics and the durable horizon come in through [`snowflake::Env`] and
//! [`snowflake::SharedState`], so tests step the clock back, freeze it or fill a millisecond
//! without sleeping; property tests pin the laws (round trips, ordering, no duplicates under any
//! clock sequence) and loom checks the generator's lock-free protocol.
//!
//! - [`layout`]: the snowflake layouts a fleet may choose (bit split, time unit), checked, and
//!   the one codec of ids (an id from its fields and back, the lowest id of a tick);
//! - [`snowflake`]: the generator's state machine, under any layout (Twitter's by default);
//! - [`horizon`]: the persisted high-water mark's rules and its file;
//! - [`uuid7`]: the RFC 9562 v7 layout, its ordering word and the fork-safe random stream;
//! - [`base62`]: alphabets, fixed widths and the keyed permutation;
//! - [`key_file`]: how the base62 key file is opened and checked;
//! - [`hosts`]: the hosts of a multi-host libpq connection string, one connect deadline each;
//! - [`lease`]: what a worker-id registry's answer means for a server;
//! - [`peers`]: a Citus node's check of its worker id against the other nodes', with no registry;
//! - [`short_code`]: a fleet's short codes: blocks from the registry, or numbers that carry the
//!   worker id.

pub mod base62;
pub mod horizon;
pub mod hosts;
pub mod key_file;
pub mod layout;
pub mod lease;
pub mod peers;
pub mod short_code;
pub mod snowflake;
pub mod uuid7;
