//! The SQL-callable functions, one file per family. Thin: read settings and shared state, call
//! the pure core, and raise what the Postgres layer words (src/pg/refusals.rs); no file here
//! imports another.

pub mod base62;
pub mod short_code;
pub mod snowflake;
pub mod uuid7;

// snowflake_convert_column() and uuid_v7_convert_column(), since 0.2.0: a few DDL statements
// each, so PL/pgSQL. The same text is in the upgrade script sql/idgen--0.1.0--0.2.0.sql.
pgrx::extension_sql_file!("convert.sql", name = "convert", finalize);
