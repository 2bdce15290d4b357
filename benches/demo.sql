-- The demo that `make run` shows: snowflake ids as a column default, decoded.
\set ON_ERROR_STOP on
CREATE EXTENSION IF NOT EXISTS idgen;
DROP TABLE IF EXISTS demo_orders;
CREATE TABLE demo_orders (
  id bigint PRIMARY KEY DEFAULT snowflake_next(),
  customer text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
INSERT INTO demo_orders (customer) SELECT 'customer ' || g FROM generate_series(1, 100000) g;

\echo '-- The first and last rows, decoded:'
(SELECT id, snowflake_timestamp(id) AS issued_at, snowflake_worker_id(id) AS worker,
        snowflake_sequence(id) AS seq, created_at
   FROM demo_orders ORDER BY id LIMIT 3)
UNION ALL
(SELECT id, snowflake_timestamp(id), snowflake_worker_id(id), snowflake_sequence(id), created_at
   FROM demo_orders ORDER BY id DESC LIMIT 1);

\echo '-- Ids sort like their insertion time; a time range is an id range:'
SELECT count(*) AS rows, count(DISTINCT id) AS distinct_ids,
       bool_and(snowflake_timestamp(id) <= created_at) AS ts_not_after_created_at
FROM demo_orders;
EXPLAIN (COSTS OFF)
SELECT count(*) FROM demo_orders WHERE id >= snowflake_from_timestamp(now() - interval '1 minute');

\echo '-- The generator since the server started:'
SELECT * FROM idgen_stats();
