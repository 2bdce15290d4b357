-- snowflake_next() and its decoders, on a cluster with idgen preloaded and idgen.worker_id = 1.

-- The volatility, strictness and parallel labels, the arguments and their defaults are part of
-- the API.
SELECT p.oid::regprocedure AS function, provolatile AS vol, proisstrict AS strict, proparallel AS par,
       pg_get_function_arguments(p.oid) AS arguments
FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e'
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'idgen'
WHERE proname LIKE 'snowflake%' OR proname = 'idgen_stats'
ORDER BY p.oid::regprocedure::text COLLATE "C";

-- Ids are positive, carry the worker id, and strictly increase within a statement.
SELECT snowflake_next() > 0 AS positive, snowflake_worker_id(snowflake_next()) AS worker;
WITH ids AS (SELECT n, snowflake_next() AS id FROM generate_series(1, 200000) n)
SELECT count(*) AS ids, count(DISTINCT id) AS distinct_ids,
       bool_and(id > prev) AS strictly_increasing
FROM (SELECT id, lag(id) OVER (ORDER BY n) AS prev FROM ids) t;

-- The timestamp is the clock's, to the millisecond.
SELECT abs(extract(epoch FROM snowflake_timestamp(snowflake_next()) - clock_timestamp())) < 1 AS now_ish;

-- The layout: bit 22 is the first millisecond bit, bit 12 the first worker bit.
SELECT snowflake_worker_id((1::bigint << 22) | (1023 << 12) | 4095) AS worker,
       snowflake_sequence((1::bigint << 22) | (1023 << 12) | 4095) AS seq,
       snowflake_timestamp((1::bigint << 22), 0) AS one_ms_after_1970,
       snowflake_timestamp(0) AS epoch_default;

-- snowflake_from_timestamp gives the smallest id of its millisecond: a bound for range scans.
SELECT snowflake_from_timestamp('2024-05-01 12:00:00.0019+00') AS bound,
       snowflake_timestamp(snowflake_from_timestamp('2024-05-01 12:00:00.0019+00')) AS bound_ts,
       snowflake_from_timestamp('2024-05-01 12:00:00.0019+00', 1288834974657)
         = snowflake_from_timestamp('2024-05-01 12:00:00.0019+00') AS same_as_explicit_epoch;
SELECT snowflake_next() >= snowflake_from_timestamp(now()) AS after_bound,
       snowflake_next() < snowflake_from_timestamp(clock_timestamp() + interval '1 second') AS before_next_bound;

-- IMMUTABLE forms serve in index expressions and partition bounds.
CREATE TABLE events (id bigint PRIMARY KEY DEFAULT snowflake_next(), body text)
  PARTITION BY RANGE (id);
CREATE TABLE events_2024 PARTITION OF events FOR VALUES
  FROM (snowflake_from_timestamp('2024-01-01+00', 1288834974657))
  TO (snowflake_from_timestamp('2025-01-01+00', 1288834974657));
CREATE TABLE events_later PARTITION OF events FOR VALUES
  FROM (snowflake_from_timestamp('2025-01-01+00', 1288834974657)) TO (MAXVALUE);
CREATE INDEX ON events ((snowflake_timestamp(id, 1288834974657)));
INSERT INTO events (body) VALUES ('a'), ('b');
SELECT tableoid::regclass AS partition, count(*) FROM events GROUP BY 1;
DROP TABLE events;

-- Stats count exactly the ids issued (this suite runs alone on its server).
SELECT ids_issued AS before FROM idgen_stats() \gset
SELECT count(snowflake_next()) FROM generate_series(1, 12345);
SELECT ids_issued - :before AS issued, worker_id, horizon > clock_timestamp() AS horizon_ahead,
       last_issued <= clock_timestamp() AS last_issued_past FROM idgen_stats();

-- Errors: SQLSTATE, message, HINT.
SELECT error_of('SELECT snowflake_timestamp(-1)');
SELECT error_of('SELECT snowflake_worker_id(-5)');
SELECT error_of($$SELECT snowflake_from_timestamp('2001-01-01+00')$$);
SELECT error_of($$SELECT snowflake_from_timestamp('infinity')$$);
SELECT error_of($$SELECT snowflake_from_timestamp('2100-01-01+00')$$);
SELECT error_of($$SELECT snowflake_timestamp(1, -1)$$);
SELECT snowflake_timestamp(NULL) IS NULL AS strict_null;

-- The worker id and epoch are fixed at server start: no session may choose its own.
SELECT error_of('SET idgen.worker_id = 7');
SELECT error_of('SET idgen.epoch = 0');
SELECT error_of($$SELECT set_config('idgen.worker_id', '7', false)$$);
SHOW idgen.worker_id;
SHOW idgen.epoch;
SHOW idgen.max_clock_wait;
SET idgen.max_clock_wait = 0;
SELECT snowflake_next() > 0 AS works_without_waiting;
RESET idgen.max_clock_wait;
-- PostgreSQL's own range message, worded differently from 18 on: the SQLSTATE alone.
SELECT sqlstate_of('SET idgen.max_clock_wait = -1');

-- Layouts (idgen.layout): this server runs Twitter's, the default; the forms that take a layout
-- take apart ids of any. Discord's documented example id, under Discord's epoch (2015): worker 1,
-- process 0 (one 10-bit worker field: 1 << 5), increment 7, at 2016-04-30 11:18:25.796 UTC.
SHOW idgen.layout;
SELECT error_of('SET idgen.layout = ''js53''');
SELECT snowflake_timestamp(175928847299117063, 1420070400000, 'discord') AS discord_at,
       snowflake_worker_id(175928847299117063, 'discord') AS worker,
       snowflake_sequence(175928847299117063, 'discord') AS increment;
-- Instagram's next_id() formula: ms since its epoch << 23 | shard << 10 | sequence % 1024.
SELECT snowflake_worker_id((1387263000::bigint << 23) | (1341 << 10) | 905, 'instagram') AS shard,
       snowflake_sequence((1387263000::bigint << 23) | (1341 << 10) | 905, 'instagram') AS seq,
       snowflake_timestamp((1387263000::bigint << 23) | (1341 << 10) | 905, 0, 'instagram') AS since_1970;
-- Sonyflake: 10-ms ticks, the sequence above the 16-bit machine id.
SELECT snowflake_worker_id((100::bigint << 24) | (3 << 16) | 65535, 'sonyflake') AS machine,
       snowflake_sequence((100::bigint << 24) | (3 << 16) | 65535, 'sonyflake') AS seq,
       snowflake_timestamp((100::bigint << 24) | (3 << 16) | 65535, 0, 'sonyflake') AS one_second;
-- A bound for a range scan under a layout is the smallest id of the tick, and decodes back to it.
SELECT snowflake_from_timestamp('2026-01-01 00:00:00.017+00', 0, 'js53') AS js_bound,
       snowflake_timestamp(snowflake_from_timestamp('2026-01-01 00:00:00.017+00', 0, 'js53'), 0, 'js53')
         AS its_tick,
       snowflake_from_timestamp('2026-01-01+00', 1288834974657, 'twitter')
         = snowflake_from_timestamp('2026-01-01+00', 1288834974657) AS twitter_as_before;
-- The one-argument forms decode Twitter's layout, as an explicit 'twitter' does.
SELECT snowflake_worker_id(id) = snowflake_worker_id(id, 'twitter') AND
       snowflake_sequence(id) = snowflake_sequence(id, '41/10/12/1ms') AS same
FROM (SELECT snowflake_next() AS id) s;
SELECT error_of($$SELECT snowflake_worker_id(1, 'twitterx')$$);
SELECT error_of($$SELECT snowflake_timestamp(1, 0, '42/11/12')$$);
SELECT error_of($$SELECT snowflake_from_timestamp('2200-01-01+00', 0, 'instagram')$$);
