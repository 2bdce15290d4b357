// Tests that run inside Postgres (`cargo pgrx test`), against a cluster with idgen preloaded and
// idgen.worker_id = 42 (see `pg_test` in lib.rs). The SQL-level suite in pg_test/ covers the rest.
use pgrx::prelude::*;

#[pg_test]
fn snowflake_ids_carry_the_configured_worker_id() {
    let id = Spi::get_one::<i64>("SELECT snowflake_next()").unwrap().unwrap();
    assert_eq!(Spi::get_one::<i32>(&format!("SELECT snowflake_worker_id({id})")).unwrap(), Some(42));
}

#[pg_test]
fn snowflake_ids_strictly_increase_within_a_backend() {
    let not_increasing = Spi::get_one::<i64>(
        "WITH ids AS (SELECT n, snowflake_next() AS id FROM generate_series(1, 100000) n)
         SELECT count(*) FROM (SELECT id, lag(id) OVER (ORDER BY n) AS prev FROM ids) t WHERE id <= prev",
    );
    assert_eq!(not_increasing.unwrap(), Some(0));
}

#[pg_test]
fn snowflake_timestamp_is_now() {
    let skew_ms = Spi::get_one::<f64>(
        "SELECT abs(extract(epoch FROM snowflake_timestamp(snowflake_next()) - clock_timestamp()) * 1000)::float8",
    );
    assert!(skew_ms.unwrap().unwrap() < 1000.0);
}

