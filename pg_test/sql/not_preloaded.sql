-- A cluster without shared_preload_libraries: CREATE EXTENSION works, the functions that need
-- shared memory say what to do (SQLSTATE 55000), and the decoders still work.
SELECT error_of('SELECT snowflake_next()');
SELECT error_of('SELECT * FROM idgen_stats()');
SELECT snowflake_worker_id(1 << 12) AS worker, snowflake_timestamp(0) AS epoch;
SHOW idgen.max_clock_wait;
-- uuid_v7() needs no preload: without it, ordering holds within each backend.
WITH ids AS (SELECT n, uuid_v7() AS u FROM generate_series(1, 10000) n)
SELECT count(*) AS ids, bool_and(u > prev) AS increasing_in_this_backend
FROM (SELECT u, lag(u) OVER (ORDER BY n) AS prev FROM ids) t;
SELECT base62_encode(42, 3) AS base62_works;
