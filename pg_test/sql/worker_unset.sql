-- Preloaded, but idgen.worker_id never set: snowflake_next() refuses and names the setting.
SHOW idgen.worker_id;
SELECT error_of('SELECT snowflake_next()');
SELECT worker_id, ids_issued FROM idgen_stats();
