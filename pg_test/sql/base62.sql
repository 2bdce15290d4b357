-- base62 codes.

SELECT p.oid::regprocedure AS function, provolatile AS vol, proisstrict AS strict, proparallel AS par,
       pg_get_function_arguments(p.oid) AS arguments
FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e'
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'idgen'
WHERE proname LIKE '%base62%'
ORDER BY p.oid::regprocedure::text COLLATE "C";

SELECT base62_encode(0) AS zero, base62_encode(61) AS z, base62_encode(62) AS ten,
       base62_encode(9223372036854775807) AS max, base62_encode(5, 11) AS padded,
       base62_decode('AzL8n0Y58m7') AS max_back, base62_decode('00000000005') AS padded_back;

-- Round trips, and ordering: padded codes under COLLATE "C" sort like the numbers; unpadded
-- codes, or any codes under a linguistic collation (the database's default here: ICU "en" on
-- builds with ICU, glibc's en_US.UTF-8 on those without), do not.
CREATE TEMP TABLE nums AS
  SELECT n FROM generate_series(0, 20000) n
  UNION ALL SELECT (random() * 9223372036854775807)::bigint FROM generate_series(1, 20000);
SELECT bool_and(base62_decode(base62_encode(n)) = n) AS round_trip,
       bool_and(base62_decode(base62_encode(n, 11)) = n) AS padded_round_trip
FROM nums;
SELECT (SELECT array_agg(n ORDER BY base62_encode(n, 11) COLLATE "C") FROM nums)
         = (SELECT array_agg(n ORDER BY n) FROM nums) AS padded_c_sorts_like_numbers,
       (SELECT array_agg(n ORDER BY base62_encode(n) COLLATE "C") FROM nums)
         = (SELECT array_agg(n ORDER BY n) FROM nums) AS unpadded_sorts_like_numbers,
       (SELECT array_agg(n ORDER BY base62_encode(n, 11) COLLATE "default") FROM nums)
         = (SELECT array_agg(n ORDER BY n) FROM nums) AS padded_linguistic_sorts_like_numbers;

-- A custom alphabet (the article's a-z A-Z 0-9) is honoured both ways.
SELECT base62_encode(12345, alphabet => 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789') AS custom,
       base62_decode('dnh', 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789') AS custom_back;

-- base62_encode keeps a constant alphabet per call site for the query (fn_extra): an alphabet
-- that changes from row to row, and one prepared statement run with two alphabets, must each
-- get their own digits, never a cached one.
SELECT n, base62_encode(n, 2, a) AS code
FROM (VALUES (1, 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789'),
             (1, '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'),
             (63, 'zyxwvutsrqponmlkjihgfedcbaZYXWVUTSRQPONMLKJIHGFEDCBA9876543210'),
             (63, '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz')) v(n, a);
SET plan_cache_mode = force_generic_plan;
PREPARE enc(text) AS SELECT base62_encode(n, 0, $1) FROM generate_series(61, 62) n;
EXECUTE enc('abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789');
EXECUTE enc('0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz');
DEALLOCATE enc;
RESET plan_cache_mode;

-- UUIDs as 22 characters, in the same order.
CREATE TEMP TABLE uuids AS SELECT uuid_v7() AS u FROM generate_series(1, 2000)
  UNION ALL SELECT gen_random_uuid() FROM generate_series(1, 2000);
SELECT bool_and(base62_to_uuid(uuid_to_base62(u)) = u) AS round_trip,
       bool_and(length(uuid_to_base62(u)) = 22) AS always_22,
       (SELECT array_agg(u ORDER BY uuid_to_base62(u) COLLATE "C") FROM uuids)
         = (SELECT array_agg(u ORDER BY u) FROM uuids) AS same_order
FROM uuids;
SELECT uuid_to_base62('00000000-0000-0000-0000-000000000000') AS nil,
       uuid_to_base62('ffffffff-ffff-ffff-ffff-ffffffffffff') AS max;

-- Short codes from a sequence. CACHE 1000 hands each session a block of 1,000 numbers, as the
-- article's Redis INCRBY 1000 does: one round trip to the shared counter per 1,000 codes (that a
-- second session starts at 1001 is checked in pg_test/test_generators.py).
CREATE SEQUENCE short_codes CACHE 1000;
SELECT base62_encode(nextval('short_codes'), 6) AS first_code, base62_encode(nextval('short_codes'), 6) AS second_code;
CREATE TABLE links (code text COLLATE "C" PRIMARY KEY DEFAULT base62_encode(nextval('short_codes'), 6), url text);
INSERT INTO links (url) VALUES ('https://example.com/a'), ('https://example.com/b');
SELECT code, base62_decode(code) AS n, url FROM links ORDER BY code;
DROP TABLE links;

-- Hiding volume: a keyed permutation. The key lives in a file that only the server's OS user
-- can read, named by idgen.base62_key_file in the server configuration; the path is a setting,
-- the key is in none. The harness (pg_test/test_sql_suite.py) wrote idgen_base62.key into the
-- data directory, mode 0600, before this suite.
SELECT error_of('SELECT base62_encode_keyed(1)');
SELECT error_of($$SET idgen.base62_key_file = 'idgen_base62.key'$$);
SELECT error_of($$ALTER DATABASE idgen_regress SET idgen.base62_key_file = 'leaked'$$);
SELECT error_of($$ALTER ROLE CURRENT_USER SET idgen.base62_key_file = 'leaked'$$);
-- 0.2.0's setting of the key itself refuses every value, and names none of them.
ALTER SYSTEM SET idgen.base62_key = 'tr0ub4dor';
ALTER SYSTEM SET idgen.base62_key_file = 'no_such.key';
-- COPY creates its files readable by everyone (mode 0644): refused.
DO $$ BEGIN EXECUTE format('COPY (SELECT %L) TO %L', 'a passphrase',
                           current_setting('data_directory') || '/idgen_public.key'); END $$;
ALTER SYSTEM SET idgen.base62_key_file = 'idgen_public.key';
ALTER SYSTEM SET idgen.base62_key_file = 'idgen_base62.key';
SELECT pg_reload_conf();
SELECT pg_sleep(1);
-- The codes idgen 0.1.0 made under this key, unchanged.
SELECT n, base62_encode_keyed(n) AS code, base62_decode_keyed(base62_encode_keyed(n)) AS back
FROM generate_series(1, 3) n;
SELECT bool_and(base62_decode_keyed(base62_encode_keyed(n)) = n) AS keyed_round_trip,
       count(DISTINCT base62_encode_keyed(n)) = count(*) AS distinct_codes
FROM nums;
CREATE ROLE idgen_plain_user LOGIN;
GRANT USAGE ON SCHEMA public TO idgen_plain_user;
SET ROLE idgen_plain_user;
SELECT current_setting('idgen.base62_key_file') AS the_path_is_no_secret;
SELECT count(*) AS in_catalogs FROM (
  SELECT unnest(setconfig) AS s FROM pg_db_role_setting
  UNION ALL SELECT unnest(rolconfig) FROM pg_roles
  UNION ALL SELECT unnest(proconfig) FROM pg_proc) c
WHERE s LIKE 'idgen.base62_key%';
SELECT error_of($$SET idgen.base62_key_file = 'mine.key'$$);
SELECT sqlstate_of($$SELECT pg_read_file('idgen_base62.key')$$);
SELECT base62_decode_keyed(base62_encode_keyed(42)) AS plain_user_can_use_it;
RESET ROLE;
DROP OWNED BY idgen_plain_user;
DROP ROLE idgen_plain_user;
ALTER SYSTEM RESET idgen.base62_key_file;
SELECT pg_reload_conf();

-- Errors.
SELECT error_of('SELECT base62_encode(-1)');
SELECT error_of('SELECT base62_encode(1, -1)');
SELECT error_of('SELECT base62_encode(1, 65)');
SELECT error_of('SELECT base62_encode(62, 1)');
SELECT error_of($$SELECT base62_decode('')$$);
SELECT error_of($$SELECT base62_decode('ab-c')$$);
SELECT error_of($$SELECT base62_decode('AzL8n0Y58m8')$$);
SELECT error_of($$SELECT base62_encode(1, 0, 'abc')$$);
SELECT error_of($$SELECT base62_encode(1, 0, '0023456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz')$$);
SELECT error_of($$SELECT base62_to_uuid('zzzzzzzzzzzzzzzzzzzzzz')$$);
SELECT base62_encode(NULL) IS NULL AS strict_null;
