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


/// Checked by an independent parser, the uuid crate: version, variant, and the timestamp.
#[pg_test]
fn uuid_v7_is_rfc_9562_version_7_by_an_independent_parser() {
    let text = Spi::get_one::<String>("SELECT uuid_v7()::text").unwrap().unwrap();
    let parsed = uuid::Uuid::parse_str(&text).unwrap();
    assert_eq!(parsed.get_version_num(), 7);
    assert_eq!(parsed.get_variant(), uuid::Variant::RFC4122);
    let (secs, _) = parsed.get_timestamp().expect("v7 carries a timestamp").to_unix();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    assert!(now.abs_diff(secs) <= 1, "{secs} vs {now}");
}

#[pg_test]
fn uuid_v7_boundary_parses_as_the_millisecond_it_was_given() {
    let text = Spi::get_one::<String>("SELECT uuid_v7_boundary('2024-01-02 03:04:05.678+00')::text")
        .unwrap()
        .unwrap();
    let (secs, nanos) = uuid::Uuid::parse_str(&text).unwrap().get_timestamp().unwrap().to_unix();
    assert_eq!((secs, nanos), (1_704_164_645, 678_000_000));
}

// The last timestamps of PostgreSQL's range (the year 294276): converting them to Unix time once
// added 2000-01-01's offset to their microseconds, past i64::MAX (a panic in this debug build, a
// wrap in a release build). Now each function says the timestamp is out of its range.
#[pg_test(error = "timestamp out of range for a snowflake id")]
fn snowflake_from_the_last_timestamp_is_out_of_range_not_an_overflow() {
    Spi::run("SELECT snowflake_from_timestamp('294276-12-31 23:59:59.999999+00')").unwrap();
}

#[pg_test(error = "uuid_v7_boundary: timestamp out of range for a UUID v7")]
fn uuid_v7_boundary_of_the_last_timestamp_is_out_of_range_not_an_overflow() {
    Spi::run("SELECT uuid_v7_boundary('294276-12-31 23:59:59.999999+00')").unwrap();
}

#[pg_test(error = "uuid_v7: timestamp out of range for a UUID v7")]
fn uuid_v7_at_the_last_timestamp_is_out_of_range_not_an_overflow() {
    Spi::run("SELECT uuid_v7('294276-12-31 23:59:59.999999+00'::timestamptz)").unwrap();
}
