pub mod horizon;
pub mod snowflake;
