-- idgen, portable edition: what plain SQL and PL/pgSQL can do of idgen, for servers where no
-- extension can be installed (managed services, no superuser). PostgreSQL 13 to 18, core only.
--
--   psql -v worker_id=3 -f sql/portable/idgen_portable.sql              (into the current schema)
--   psql -v worker_id=3 -v schema=keys -f sql/portable/idgen_portable.sql
--
-- Run it as any role with CREATE on the schema. worker_id (0-1023) is fixed in what is installed:
-- no session can change it; without it snowflake_next() raises an error that names it. epoch
-- (Unix ms, default 1288834974657, Twitter's and idgen's default) can be given the same way.
-- Running it again replaces the functions and keeps the generator's state.
--
-- The deterministic functions return exactly what the extension's do, and raise the same
-- SQLSTATEs for the same bad inputs (pg_test/test_portable.py compares them). The generators
-- keep the same layout with different means and labels; README, "Without the extension".

\set ON_ERROR_STOP on
\if :{?schema}
SET search_path = :"schema";
\endif
\if :{?worker_id}
SELECT set_config('idgen_portable.worker_id', :'worker_id', false) AS worker_id \gset
\else
SELECT set_config('idgen_portable.worker_id', '', false) AS worker_id \gset
\endif
\if :{?epoch}
SELECT set_config('idgen_portable.epoch', :'epoch', false) AS epoch \gset
\else
SELECT set_config('idgen_portable.epoch', '1288834974657', false) AS epoch \gset
\endif

BEGIN;

-- ---- base62 ----------------------------------------------------------------------------------

-- 22023 unless alphabet is 62 distinct ASCII characters, none of them a control character.
CREATE OR REPLACE FUNCTION idgen_portable_check_alphabet(alphabet text) RETURNS void
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
  i int;
  c text;
BEGIN
  IF alphabet = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz' THEN
    RETURN;
  END IF;
  IF octet_length(alphabet) <> 62 THEN
    RAISE EXCEPTION 'invalid base62 alphabet: it has % bytes, not 62', octet_length(alphabet)
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'An alphabet is 62 distinct ASCII characters, e.g. the default 0-9A-Za-z.';
  END IF;
  -- The usual case without a loop: translate() maps each character to the one at its first
  -- position in the second argument, so the result is the 62 digits in order exactly when no
  -- character repeats. The loop below only says what is wrong.
  IF length(alphabet) = 62 AND alphabet !~ '[\x01-\x1f\x7f]'
     AND translate(alphabet, alphabet, '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz')
         = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz' THEN
    RETURN;
  END IF;
  IF length(alphabet) <> 62 THEN
    RAISE EXCEPTION 'invalid base62 alphabet: it must be ASCII'
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'An alphabet is 62 distinct ASCII characters, e.g. the default 0-9A-Za-z.';
  END IF;
  FOR i IN 1..62 LOOP
    c := substr(alphabet, i, 1);
    IF strpos(substr(alphabet, 1, i - 1), c) > 0 THEN
      RAISE EXCEPTION 'invalid base62 alphabet: % appears twice', c
        USING ERRCODE = 'invalid_parameter_value',
              HINT = 'An alphabet is 62 distinct ASCII characters, e.g. the default 0-9A-Za-z.';
    END IF;
    IF ascii(c) < 32 OR ascii(c) = 127 THEN
      RAISE EXCEPTION 'invalid base62 alphabet: it contains a control character'
        USING ERRCODE = 'invalid_parameter_value',
              HINT = 'An alphabet is 62 distinct ASCII characters, e.g. the default 0-9A-Za-z.';
    END IF;
  END LOOP;
END
$fn$;

-- The 22 digits of a 128-bit value (numeric), padded with the alphabet's zero: every UUID fits
-- (62^22 > 2^128). base62_encode() has its own loop, in bigint arithmetic, which is faster.
CREATE OR REPLACE FUNCTION idgen_portable_digits(v numeric, alphabet text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
  out text := '';
BEGIN
  LOOP
    out := substr(alphabet, (v % 62)::int + 1, 1) || out;
    v := div(v, 62);
    EXIT WHEN v = 0;
  END LOOP;
  RETURN lpad(out, 22, substr(alphabet, 1, 1));
END
$fn$;

CREATE OR REPLACE FUNCTION base62_encode(n bigint, width integer DEFAULT 0,
    alphabet text DEFAULT '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz')
RETURNS text LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
  out text := '';
  d int;
BEGIN
  PERFORM idgen_portable_check_alphabet(alphabet);
  IF n < 0 THEN
    RAISE EXCEPTION 'cannot base62-encode a negative number (%)', n
      USING ERRCODE = 'numeric_value_out_of_range', HINT = 'Only non-negative numbers have base62 codes.';
  END IF;
  IF width < 0 OR width > 64 THEN
    RAISE EXCEPTION 'base62 width % is out of range 0..64', width
      USING ERRCODE = 'invalid_parameter_value', HINT = 'Use 0 for the shortest code, 11 for any bigint, at most 64.';
  END IF;
  LOOP
    d := (n % 62)::int;
    out := substr(alphabet, d + 1, 1) || out;
    n := n / 62;
    EXIT WHEN n = 0;
  END LOOP;
  IF width > 0 THEN
    IF length(out) > width THEN
      RAISE EXCEPTION 'the value needs % base62 digits, more than width %', length(out), width
        USING ERRCODE = 'numeric_value_out_of_range', HINT = 'A width of 11 fits every bigint.';
    END IF;
    RETURN lpad(out, width, substr(alphabet, 1, 1));
  END IF;
  RETURN out;
END
$fn$;
COMMENT ON FUNCTION base62_encode(bigint, integer, text) IS
  'A non-negative bigint as base62 text (idgen portable edition)';

-- A code's value as numeric: 22P02 for an empty code or a character outside the alphabet,
-- 22003 past 128 bits, checked character by character in order, as the extension does.
CREATE OR REPLACE FUNCTION idgen_portable_value(code text, alphabet text) RETURNS numeric
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
  v numeric := 0;
  d int;
  i int;
  c text;
BEGIN
  IF code = '' THEN
    RAISE EXCEPTION 'cannot decode an empty base62 code'
      USING ERRCODE = 'invalid_text_representation', HINT = 'Decode with the alphabet the code was encoded with.';
  END IF;
  FOR i IN 1..length(code) LOOP
    c := substr(code, i, 1);
    d := CASE WHEN ascii(c) < 128 THEN strpos(alphabet, c) ELSE 0 END;
    IF d = 0 THEN
      RAISE EXCEPTION 'invalid base62 character % at position %', quote_literal(c), i
        USING ERRCODE = 'invalid_text_representation', HINT = 'Decode with the alphabet the code was encoded with.';
    END IF;
    v := v * 62 + (d - 1);
    IF v > 340282366920938463463374607431768211455 THEN
      RAISE EXCEPTION 'base62 code is out of range for the result type'
        USING ERRCODE = 'numeric_value_out_of_range',
              HINT = 'The code is longer or larger than any value of the result type.';
    END IF;
  END LOOP;
  RETURN v;
END
$fn$;

CREATE OR REPLACE FUNCTION base62_decode(code text,
    alphabet text DEFAULT '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz')
RETURNS bigint LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
  v numeric;
BEGIN
  PERFORM idgen_portable_check_alphabet(alphabet);
  v := idgen_portable_value(code, alphabet);
  IF v > 9223372036854775807 THEN
    RAISE EXCEPTION 'base62 code is out of range for the result type'
      USING ERRCODE = 'numeric_value_out_of_range',
            HINT = 'The code is longer or larger than any value of the result type.';
  END IF;
  RETURN v::bigint;
END
$fn$;

CREATE OR REPLACE FUNCTION uuid_to_base62(id uuid,
    alphabet text DEFAULT '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz')
RETURNS text LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
  hex text := replace(id::text, '-', '');
  hi bigint := ('x' || substr(hex, 1, 16))::bit(64)::bigint;
  lo bigint := ('x' || substr(hex, 17, 16))::bit(64)::bigint;
BEGIN
  PERFORM idgen_portable_check_alphabet(alphabet);
  RETURN idgen_portable_digits(
    ((hi::numeric + CASE WHEN hi < 0 THEN 18446744073709551616 ELSE 0 END) * 18446744073709551616)
      + (lo::numeric + CASE WHEN lo < 0 THEN 18446744073709551616 ELSE 0 END),
    alphabet);
END
$fn$;

CREATE OR REPLACE FUNCTION base62_to_uuid(code text,
    alphabet text DEFAULT '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz')
RETURNS uuid LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
  v numeric;
  hi numeric;
  lo numeric;
BEGIN
  PERFORM idgen_portable_check_alphabet(alphabet);
  v := idgen_portable_value(code, alphabet);
  hi := div(v, 18446744073709551616);
  lo := v % 18446744073709551616;
  RETURN (lpad(to_hex((hi - CASE WHEN hi > 9223372036854775807 THEN 18446744073709551616 ELSE 0 END)::bigint), 16, '0')
       || lpad(to_hex((lo - CASE WHEN lo > 9223372036854775807 THEN 18446744073709551616 ELSE 0 END)::bigint), 16, '0'))::uuid;
END
$fn$;

-- ---- snowflake decoders ------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION idgen_portable_check_id(id bigint) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
BEGIN
  IF id < 0 THEN
    RAISE EXCEPTION 'invalid snowflake id: % is negative', id
      USING ERRCODE = 'invalid_parameter_value', HINT = 'Snowflake ids are non-negative bigints.';
  END IF;
  RETURN id;
END
$fn$;

CREATE OR REPLACE FUNCTION idgen_portable_check_epoch(epoch_ms bigint) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
BEGIN
  IF epoch_ms < 0 OR epoch_ms > 2147483647000 THEN
    RAISE EXCEPTION 'epoch % is out of range', epoch_ms
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Pass the epoch as Unix milliseconds between 0 and 2147483647000, e.g. 1288834974657.';
  END IF;
  RETURN epoch_ms;
END
$fn$;

-- Unix milliseconds as a timestamp, exactly: whole days, then the milliseconds of the day (an
-- interval times a number is computed in double precision, which holds neither all
-- microseconds of the range at once), on a timestamp without time zone (no daylight saving).
CREATE OR REPLACE FUNCTION idgen_portable_ts(ms bigint) RETURNS timestamptz
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
  SELECT (timestamp '1970-01-01' + (ms / 86400000) * interval '1 day' + (ms % 86400000) * interval '1 millisecond')
         AT TIME ZONE 'UTC'
$fn$;

CREATE OR REPLACE FUNCTION snowflake_timestamp(id bigint, epoch_ms bigint) RETURNS timestamptz
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
  SELECT idgen_portable_ts((idgen_portable_check_id(id) >> 22) + idgen_portable_check_epoch(epoch_ms))
$fn$;

CREATE OR REPLACE FUNCTION snowflake_worker_id(id bigint) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
  SELECT ((idgen_portable_check_id(id) >> 12) & 1023)::integer
$fn$;

CREATE OR REPLACE FUNCTION snowflake_sequence(id bigint) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
  SELECT (idgen_portable_check_id(id) & 4095)::integer
$fn$;

-- The Unix millisecond a timestamp falls in, rounded down; 22008 for infinity.
CREATE OR REPLACE FUNCTION idgen_portable_unix_ms(ts timestamptz, what text) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
BEGIN
  IF NOT isfinite(ts) THEN
    RAISE EXCEPTION '%: timestamp out of range: infinity', what
      USING ERRCODE = 'datetime_field_overflow', HINT = 'Pass a finite timestamp.';
  END IF;
  -- extract() is double precision before PostgreSQL 14: round() to the microsecond, which it
  -- holds exactly, and through bigint (a double to numeric keeps only 15 digits).
  RETURN floor(round(extract(epoch FROM ts) * 1000000)::bigint::numeric / 1000)::bigint;
END
$fn$;

CREATE OR REPLACE FUNCTION snowflake_from_timestamp(ts timestamptz, epoch_ms bigint) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
  epoch bigint := idgen_portable_check_epoch(epoch_ms);
  millis bigint := idgen_portable_unix_ms(ts, 'snowflake_from_timestamp') - epoch;
BEGIN
  IF millis < 0 OR millis > 2199023255551 THEN
    RAISE EXCEPTION 'timestamp out of range for a snowflake id'
      USING ERRCODE = 'datetime_field_overflow',
            DETAIL = format('Snowflake ids cover %s to %s ms since 1970.', epoch, epoch + 2199023255551),
            HINT = 'Pass a timestamp at or after the epoch and less than about 69.7 years after it.';
  END IF;
  RETURN millis << 22;
END
$fn$;

-- ---- UUID v7 decoders --------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION uuid_v7_timestamp(id uuid) RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
  hex text := replace(id::text, '-', '');
BEGIN
  IF substr(hex, 13, 1) <> '7' OR substr(hex, 17, 1) NOT IN ('8', '9', 'a', 'b') THEN
    RAISE EXCEPTION '% is not a version 7 UUID', id
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'uuid_v7_timestamp() reads only version 7 UUIDs; uuid_extract_timestamp() returns NULL for other versions.';
  END IF;
  RETURN idgen_portable_ts(('x' || lpad(substr(hex, 1, 12), 16, '0'))::bit(64)::bigint);
END
$fn$;

CREATE OR REPLACE FUNCTION idgen_portable_v7_ms(ts timestamptz, what text) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
  ms bigint := idgen_portable_unix_ms(ts, what);
BEGIN
  IF ms < 0 OR ms > 281474976710655 THEN
    RAISE EXCEPTION '%: timestamp out of range for a UUID v7', what
      USING ERRCODE = 'datetime_field_overflow', HINT = 'UUID v7 holds Unix milliseconds from 1970 to the year 10889.';
  END IF;
  RETURN ms;
END
$fn$;

CREATE OR REPLACE FUNCTION uuid_v7_boundary(ts timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
  SELECT (lpad(to_hex(idgen_portable_v7_ms(ts, 'uuid_v7_boundary')), 12, '0') || '70008000000000000000')::uuid
$fn$;

-- A version 7 UUID carrying the given time, with random bits (from gen_random_uuid()).
CREATE OR REPLACE FUNCTION uuid_v7(ts timestamptz) RETURNS uuid
LANGUAGE sql VOLATILE STRICT PARALLEL SAFE AS $fn$
  SELECT (lpad(to_hex(idgen_portable_v7_ms(ts, 'uuid_v7')), 12, '0') || '7'
          || substr(replace(gen_random_uuid()::text, '-', ''), 14))::uuid
$fn$;

-- ---- the generators ----------------------------------------------------------------------------

-- uuid_v7(): on PostgreSQL 18 core's uuidv7() (ordered within a session, parallel safe). Before
-- 18: the time with 12 bits of sub-millisecond fraction (RFC 9562's method 3), kept strictly
-- increasing within the session in a session setting; so PARALLEL RESTRICTED.
SELECT current_setting('server_version_num')::int >= 180000 AS has_uuidv7 \gset
\if :has_uuidv7
CREATE OR REPLACE FUNCTION uuid_v7() RETURNS uuid
LANGUAGE sql VOLATILE STRICT PARALLEL SAFE AS $fn$ SELECT pg_catalog.uuidv7() $fn$;
\else
CREATE OR REPLACE FUNCTION uuid_v7() RETURNS uuid
LANGUAGE plpgsql VOLATILE STRICT PARALLEL RESTRICTED AS $fn$
DECLARE
  us bigint := round(extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
  k bigint := (us / 1000) * 4096 + (us % 1000) * 4096 / 1000;
  last bigint := coalesce(nullif(current_setting('idgen_portable.uuid_last', true), '')::bigint, 0);
BEGIN
  IF k <= last THEN
    k := last + 1;
  END IF;
  PERFORM set_config('idgen_portable.uuid_last', k::text, false);
  RETURN (lpad(to_hex(k >> 12), 12, '0') || '7' || lpad(to_hex(k & 4095), 3, '0')
          || substr(replace(gen_random_uuid()::text, '-', ''), 17))::uuid;
END
$fn$;
\endif

-- snowflake_next(): the last id's millisecond and sequence (ms * 4096 + sequence) live in a
-- sequence, which is not transactional (an id is never handed out twice, even after a
-- rollback) and survives restarts and crashes (PostgreSQL logs sequences ahead, so after a
-- crash it resumes a little further on, never back). Each call takes a session advisory lock
-- for the few microseconds of read-the-clock, nextval, maybe setval, so concurrent sessions
-- never draw the same value; it is released at once, not at the end of the transaction.
-- It runs with its installer's rights (SECURITY DEFINER, with a fixed search path), so roles
-- that insert rows need no privilege on the state sequence.
-- When the clock is behind the last id (a step back), ids go on from the last one: a full
-- millisecond of 4,096 carries into the next millisecond instead of wrapping, so they never
-- repeat or decrease, and run ahead of the clock by at most one millisecond per 4,096 ids.
CREATE SEQUENCE IF NOT EXISTS idgen_portable_snowflake_state AS bigint MINVALUE 0 START WITH 0;

DO $install$
DECLARE
  worker text := current_setting('idgen_portable.worker_id');
  epoch text := current_setting('idgen_portable.epoch');
  state regclass := to_regclass(quote_ident(current_schema()) || '.idgen_portable_snowflake_state');
BEGIN
  IF epoch !~ '^[0-9]{1,13}$' OR epoch::bigint > 2147483647000 THEN
    RAISE EXCEPTION 'idgen portable: epoch % is out of range', epoch
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Pass -v epoch=<Unix ms between 0 and 2147483647000>, or leave it out for 1288834974657.';
  END IF;
  IF worker = '' THEN
    EXECUTE $body$
CREATE OR REPLACE FUNCTION snowflake_next() RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE AS $fn$
BEGIN
  RAISE EXCEPTION 'snowflake_next(): no worker id was given when idgen_portable.sql was installed'
    USING ERRCODE = 'object_not_in_prerequisite_state',
          DETAIL = 'The portable edition fixes the worker id when it is installed, so that no session can change it.',
          HINT = 'Install it again with the psql variable worker_id: psql -v worker_id=<0-1023> -f idgen_portable.sql';
END
$fn$ $body$;
  ELSIF worker !~ '^[0-9]{1,4}$' OR worker::int > 1023 THEN
    RAISE EXCEPTION 'idgen portable: worker_id % is out of range', worker
      USING ERRCODE = 'invalid_parameter_value', HINT = 'Pass -v worker_id=<0-1023>, unique per server that writes ids.';
  ELSE
    EXECUTE format($body$
CREATE OR REPLACE FUNCTION snowflake_next() RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog AS $fn$
DECLARE
  now_c bigint;
  c bigint;
BEGIN
  PERFORM pg_advisory_lock(1768187749, %1$s);  -- 'idge', the state's oid
  BEGIN
    now_c := (round(extract(epoch FROM clock_timestamp()) * 1000000)::bigint / 1000 - %2$s) * 4096;
    c := nextval(%1$s::regclass);
    IF c < now_c THEN
      PERFORM setval(%1$s::regclass, now_c);
      c := now_c;
    END IF;
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    PERFORM pg_advisory_unlock(1768187749, %1$s);
    RAISE;
  END;
  PERFORM pg_advisory_unlock(1768187749, %1$s);
  IF now_c < 0 THEN
    RAISE EXCEPTION 'the clock is before the snowflake epoch' USING ERRCODE = 'system_error',
      HINT = 'Check the system clock, or the epoch idgen_portable.sql was installed with.';
  END IF;
  IF c >> 12 > 2199023255551 THEN
    RAISE EXCEPTION 'snowflake ids are exhausted for this epoch' USING ERRCODE = 'system_error',
      HINT = 'Snowflake ids span about 69.7 years from the epoch idgen_portable.sql was installed with.';
  END IF;
  RETURN ((c >> 12) << 22) | (%3$s << 12) | (c & 4095);
END
$fn$ $body$, state::oid, epoch, worker);
  END IF;
  -- snowflake_timestamp(id) and snowflake_from_timestamp(ts): under the installed epoch, as the
  -- extension's are under idgen.epoch.
  EXECUTE format($body$
CREATE OR REPLACE FUNCTION snowflake_timestamp(id bigint) RETURNS timestamptz
LANGUAGE sql STABLE STRICT PARALLEL SAFE AS $fn$ SELECT %1$I.snowflake_timestamp(id, %2$s) $fn$;
CREATE OR REPLACE FUNCTION snowflake_from_timestamp(ts timestamptz) RETURNS bigint
LANGUAGE sql STABLE STRICT PARALLEL SAFE AS $fn$ SELECT %1$I.snowflake_from_timestamp(ts, %2$s) $fn$;
CREATE OR REPLACE FUNCTION idgen_portable_settings(OUT worker_id integer, OUT epoch bigint)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$ SELECT %3$s::integer, %2$s::bigint $fn$;
$body$, current_schema(), epoch, coalesce(nullif(worker, ''), 'NULL'));
END
$install$;

-- The functions call their helpers by schema-qualified name, as their DEFAULTs, indexes and
-- generated columns are evaluated under other search paths (logical replication's apply
-- workers, pg_dump's restore, maintenance commands run with an empty one).
DO $qualify$
DECLARE
  f oid;
BEGIN
  FOR f IN SELECT p.oid FROM pg_proc p
            WHERE p.pronamespace = current_schema()::regnamespace AND p.prosrc ~ 'idgen_portable_\w+\('
              AND p.proname IN ('base62_encode', 'base62_decode', 'uuid_to_base62', 'base62_to_uuid',
                                'snowflake_timestamp', 'snowflake_worker_id', 'snowflake_sequence',
                                'snowflake_from_timestamp', 'uuid_v7_timestamp', 'uuid_v7_boundary', 'uuid_v7',
                                'idgen_portable_unix_ms', 'idgen_portable_v7_ms', 'idgen_portable_ts') LOOP
    EXECUTE regexp_replace(pg_get_functiondef(f), '(?<![.\w])(idgen_portable_\w+\()',
                           quote_ident(current_schema()) || '.\1', 'g');
  END LOOP;
END
$qualify$;

COMMIT;
