//! The `postgres` crate (sync rust-postgres) and idgen (docs/clients.md): the extension, the
//! table with DEFAULT snowflake_next(), rows inserted with RETURNING, the keys read back as i64.
//! Prints one JSON line.
//!   idgen-client-rust <socket dir> <port> <database>
use postgres::{Client, NoTls};

fn main() -> Result<(), postgres::Error> {
    let args: Vec<String> = std::env::args().collect();
    let mut client = Client::configure()
        .host_path(&args[1])
        .port(args[2].parse().expect("a port"))
        .dbname(&args[3])
        .user("postgres")
        .connect(NoTls)?;
    // the extension (the functions the DEFAULT calls), then the table
    client.batch_execute(
        "CREATE EXTENSION IF NOT EXISTS idgen;
         CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_next(), customer text NOT NULL)",
    )?;
    let one: i64 = client
        .query_one(
            "INSERT INTO orders (customer) VALUES ($1) RETURNING id",
            &[&"ada"],
        )?
        .get(0);
    let many: Vec<i64> = client
        .query(
            "INSERT INTO orders (customer) SELECT 'c' || g FROM generate_series(1, 1000) g RETURNING id",
            &[],
        )?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let many: Vec<String> = many.iter().map(i64::to_string).collect();
    println!("{{\"one\": {one}, \"many\": [{}]}}", many.join(", "));
    Ok(())
}
