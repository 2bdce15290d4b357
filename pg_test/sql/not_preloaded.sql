-- A cluster without shared_preload_libraries: CREATE EXTENSION works, the functions that need
-- shared memory say what to do (SQLSTATE 55000), and the decoders still work.
SELECT error_of('SELECT snowflake_next()');
SELECT error_of('SELECT * FROM idgen_stats()');
SELECT snowflake_worker_id(1 << 12) AS worker, snowflake_timestamp(0) AS epoch;
SHOW idgen.max_clock_wait;
