-- uuid_v7() and its companions, on a cluster with idgen preloaded.
-- Expected output: uuid7.out on 13-17, uuid7_1.out on 18, where uuidv7() and
-- uuid_extract_timestamp() are core's, so idgen does not define them (the labels list lacks
-- them; the calls further down reach core's, with the same results).

SELECT p.oid::regprocedure AS function, provolatile AS vol, proisstrict AS strict, proparallel AS par,
       pg_get_function_arguments(p.oid) AS arguments
FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e'
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'idgen'
WHERE proname LIKE 'uuid%'
ORDER BY p.oid::regprocedure::text COLLATE "C";

-- Version 7, RFC variant, and the time of the call.
SELECT substr(u::text, 15, 1) AS version, substr(u::text, 20, 1) IN ('8', '9', 'a', 'b') AS rfc_variant,
       abs(extract(epoch FROM uuid_v7_timestamp(u) - clock_timestamp())) < 1 AS now_ish
FROM (SELECT uuid_v7() AS u) s;

-- 1,000,000 in one backend: strictly increasing, all distinct.
WITH ids AS (SELECT n, uuid_v7() AS u FROM generate_series(1, 1000000) n)
SELECT count(*) AS ids, count(DISTINCT u) AS distinct_ids, bool_and(u > prev) AS strictly_increasing
FROM (SELECT u, lag(u) OVER (ORDER BY n) AS prev FROM ids) t;

-- Two backends called in turn, and their random streams: pg_test/test_generators.py.

-- Backfill from a stored time, and range bounds.
SELECT uuid_v7_timestamp(uuid_v7('2024-01-02 03:04:05.678+00')) AS backfilled,
       uuid_v7_boundary('2024-01-02 03:04:05.678+00') AS boundary,
       uuid_v7_boundary('2024-01-02 03:04:05.678+00') <= uuid_v7('2024-01-02 03:04:05.678+00') AS boundary_below,
       uuid_v7('2024-01-02 03:04:05.677+00') < uuid_v7_boundary('2024-01-02 03:04:05.678+00') AS earlier_below;

-- PostgreSQL 18's names: the same meaning (uuid_extract_timestamp also reads version 1, and
-- gives NULL for other versions). The v1 value is RFC 9562's test vector.
SELECT substr(u::text, 15, 1) AS uuidv7_version, uuid_extract_timestamp(u) = uuid_v7_timestamp(u) AS same_time
FROM (SELECT uuidv7() AS u) s;
SELECT uuid_extract_timestamp('c232ab00-9414-11ec-b3c8-9f6bdeced846') AS v1_rfc_example,
       uuid_extract_timestamp('017f22e2-79b0-7cc3-98c4-dc0c0c07398f') AS v7_rfc_example,
       uuid_extract_timestamp(gen_random_uuid()) AS v4_is_null;

-- Errors.
SELECT error_of($$SELECT uuid_v7_timestamp('c232ab00-9414-11ec-b3c8-9f6bdeced846')$$);
SELECT error_of($$SELECT uuid_v7_timestamp('017f22e2-79b0-7cc3-18c4-dc0c0c07398f')$$);
SELECT error_of($$SELECT uuid_v7('1969-12-31 23:59:59+00')$$);
SELECT error_of($$SELECT uuid_v7_boundary('infinity')$$);
SELECT uuid_v7(NULL) IS NULL AS strict_null;

-- A v4 -> v7 migration, with backfill from created_at.
CREATE TABLE accounts (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), created_at timestamptz NOT NULL);
INSERT INTO accounts (created_at)
  SELECT '2024-01-01+00'::timestamptz + n * interval '1 hour' FROM generate_series(1, 1000) n;
ALTER TABLE accounts ADD COLUMN new_id uuid;
UPDATE accounts SET new_id = uuid_v7(created_at);
ALTER TABLE accounts ALTER COLUMN new_id SET NOT NULL, ALTER COLUMN new_id SET DEFAULT uuid_v7();
ALTER TABLE accounts DROP CONSTRAINT accounts_pkey, ADD PRIMARY KEY (new_id);
INSERT INTO accounts (created_at) VALUES (now());
SELECT count(*) AS rows, count(DISTINCT new_id) AS distinct_ids,
       bool_and(abs(extract(epoch FROM uuid_v7_timestamp(new_id) - created_at)) < 1) AS time_kept,
       bool_and(substr(new_id::text, 15, 1) = '7') AS all_v7
FROM accounts;
DROP TABLE accounts;
