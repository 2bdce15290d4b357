-- idgen, portable edition: what plain SQL and PL/pgSQL can do of idgen, for servers where no
-- extension can be installed (managed services, no superuser). PostgreSQL 13 to 18, core only.
--
--   psql -v worker_id=3 -v grant_to=app,writer -f sql/portable/idgen_portable.sql   (current schema)
--   psql -v worker_id=3 -v grant_to=app -v schema=keys -f sql/portable/idgen_portable.sql
--
-- Run it as any role with CREATE and USAGE on the schema (checked first: 42501 with the GRANT its
-- owner runs, nothing installed); that role (the installer) owns what it makes.
-- Install into a schema where no other role has CREATE: another role's function of the same
-- name with closer argument types would catch callers' calls (on 13 and 14 every role has
-- CREATE on public by default).
--
--   worker_id  0-1023, fixed in what is installed: no session can change it; without it
--              snowflake_next() raises an error that names it.
--   grant_to   the roles that may call snowflake_next(), comma-separated exact role names
--              (grant_to=app,writer), or PUBLIC. EXECUTE on it is revoked from PUBLIC on every
--              install and granted to these roles (grants made earlier to named roles stay:
--              REVOKE them by hand); without grant_to only the installer may call it. Each name
--              must be an existing role (else 42704 and nothing is installed).
--   epoch      Unix ms, default 1288834974657 (Twitter's and idgen's default).
--   max_clock_wait  ms, default 1000 (idgen.max_clock_wait's default): how far behind the last
--              id the clock may be (a step back) for snowflake_next() to wait for it rather
--              than raise 58000.
--   layout     the snowflake layout (docs/layouts.md), default twitter: instagram, discord,
--              sonyflake, js53, or time/worker/sequence/unit such as 40/12/11/10ms. The worker
--              id must fit its worker field. Like idgen.layout, it never changes silently: a
--              reinstall with another layout than the one installed is refused.
--
-- Running it again replaces the functions and keeps the generator's state. It refuses (42501)
-- to install over a state sequence or lock table that another role owns: the owner could move
-- the state back and have ids issued twice.
--
-- The deterministic functions return exactly what the extension's do, and raise the same
-- SQLSTATEs for the same bad inputs (pg_test/test_portable.py compares them). The generators
-- keep the same layout with different means and labels; docs/portable.md.
--
-- Every operator, function and non-keyword type in the function bodies is qualified
-- (OPERATOR(pg_catalog.+), pg_catalog.substr, pg_catalog.text, the helpers by this schema): a
-- caller's search path (evil, pg_catalog, ...) cannot supply an exact-match operator or
-- function that changes an IMMUTABLE function's result, e.g. in an index. Measured against the
-- alternative, a SET search_path clause on each function (PostgreSQL 15, 2 vCPUs, one run,
-- 100,000 rows, best of 3, measured once while choosing; pg_test/test_portable_security.py checks the
-- capture):
--   base62_encode(g):        unqualified 2.8 us/row, qualified 2.8 us/row, SET search_path on
--                            it and its helper 5.3 us/row (1.9x)
--   snowflake_worker_id(g):  unqualified and qualified alike, 0.3-0.5 us/row (inlined), SET search_path
--                            2.8 us/row (8.6x: a SET clause stops inlining)
-- Qualified names are resolved once, when PL/pgSQL plans a statement (or when a SQL function
-- is inlined), so they cost nothing per row; a SET clause saves and restores the setting on
-- every call and stops a SQL function from being inlined.

-- @psql-only {  (the pg_tle edition, sql/portable/pg_tle.sql, has none of this: see there)
\set ON_ERROR_STOP on
\if :{?schema}
-- the schema, with this session's temporary schema searched last (not first) for relations
SELECT pg_catalog.set_config('search_path', pg_catalog.quote_ident(:'schema') || ', pg_temp', false) AS search_path \gset
SELECT pg_catalog.set_config('idgen_portable.schema', :'schema', false) AS schema_named \gset
\else
SELECT pg_catalog.set_config('idgen_portable.schema', '', false) AS schema_named \gset
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
\if :{?layout}
SELECT set_config('idgen_portable.layout', :'layout', false) AS layout \gset
\else
SELECT set_config('idgen_portable.layout', 'twitter', false) AS layout \gset
\endif
\if :{?max_clock_wait}
SELECT set_config('idgen_portable.max_clock_wait', :'max_clock_wait', false) AS max_clock_wait \gset
\else
SELECT set_config('idgen_portable.max_clock_wait', '1000', false) AS max_clock_wait \gset
\endif
\if :{?grant_to}
SELECT set_config('idgen_portable.grant_to', :'grant_to', false) AS grant_to \gset
\else
SELECT set_config('idgen_portable.grant_to', '', false) AS grant_to \gset
\endif

BEGIN;
-- What the installer needs, checked before anything is made: the schema, and CREATE (to make the
-- functions) and USAGE (to find them: a schema without USAGE is left out of the search path, and
-- the install would fail later on a function "that does not exist") on it.
DO $grants$
DECLARE
  named text := NULLIF(pg_catalog.current_setting('idgen_portable.schema'), '');
  target text := COALESCE(named, pg_catalog.current_schema());
  nsp oid;
  owner text;
  missing text[] := '{}';
BEGIN
  IF target IS NULL THEN
    RAISE EXCEPTION 'idgen portable: no schema to install into: no schema of the search path (%) exists with USAGE for %',
                    pg_catalog.current_setting('search_path'), current_user
      USING ERRCODE = 'invalid_schema_name',
            HINT = 'Name the schema with -v schema=<schema>; its owner grants you CREATE and USAGE on it. Nothing was installed.';
  END IF;
  SELECT n.oid, n.nspowner::regrole::text INTO nsp, owner FROM pg_catalog.pg_namespace n WHERE n.nspname = target;
  IF nsp IS NULL THEN
    RAISE EXCEPTION 'idgen portable: schema % does not exist', pg_catalog.quote_ident(target)
      USING ERRCODE = 'invalid_schema_name',
            HINT = pg_catalog.format('Create it first (CREATE SCHEMA %I AUTHORIZATION %I, as a role that may), or name another with -v schema. Nothing was installed.',
                                     target, current_user);
  END IF;
  IF NOT pg_catalog.has_schema_privilege(nsp, 'CREATE') THEN
    missing := missing || 'CREATE'::text;
  END IF;
  IF NOT pg_catalog.has_schema_privilege(nsp, 'USAGE') THEN
    missing := missing || 'USAGE'::text;
  END IF;
  IF pg_catalog.cardinality(missing) > 0 THEN
    RAISE EXCEPTION 'idgen portable: % has no % privilege on schema %', current_user,
                    pg_catalog.array_to_string(missing, ' or '), pg_catalog.quote_ident(target)
      USING ERRCODE = 'insufficient_privilege',
            DETAIL = 'The installer makes the functions in the schema (CREATE) and calls them there (USAGE).',
            HINT = pg_catalog.format('Have the schema''s owner (%s) run: GRANT %s ON SCHEMA %I TO %I; then run this again. Nothing was installed.',
                                     owner, pg_catalog.array_to_string(missing, ', '), target, current_user);
  END IF;
END
$grants$;
-- @psql-only }

-- ---- base62 ----------------------------------------------------------------------------------

-- 22023 unless alphabet is 62 distinct ASCII characters, none of them a control character.
CREATE OR REPLACE FUNCTION idgen_portable_check_alphabet(alphabet text) RETURNS void
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
  i int;
  c pg_catalog.text;
BEGIN
  IF alphabet OPERATOR(pg_catalog.=) '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz' THEN
    RETURN;
  END IF;
  IF pg_catalog.octet_length(alphabet) OPERATOR(pg_catalog.<>) 62 THEN
    RAISE EXCEPTION 'invalid base62 alphabet: it has % bytes, not 62', pg_catalog.octet_length(alphabet)
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'An alphabet is 62 distinct ASCII characters, e.g. the default 0-9A-Za-z.';
  END IF;
  -- The usual case without a loop: translate() maps each character to the one at its first
  -- position in the second argument, so the result is the 62 digits in order exactly when no
  -- character repeats. The loop below only says what is wrong.
  IF pg_catalog.length(alphabet) OPERATOR(pg_catalog.=) 62
     AND alphabet OPERATOR(pg_catalog.!~) '[\x01-\x1f\x7f]'
     AND pg_catalog.translate(alphabet, alphabet, '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz')
         OPERATOR(pg_catalog.=) '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz' THEN
    RETURN;
  END IF;
  IF pg_catalog.length(alphabet) OPERATOR(pg_catalog.<>) 62 THEN
    RAISE EXCEPTION 'invalid base62 alphabet: it must be ASCII'
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'An alphabet is 62 distinct ASCII characters, e.g. the default 0-9A-Za-z.';
  END IF;
  FOR i IN 1..62 LOOP
    c := pg_catalog.substr(alphabet, i, 1);
    IF pg_catalog.strpos(pg_catalog.substr(alphabet, 1, i OPERATOR(pg_catalog.-) 1), c) OPERATOR(pg_catalog.>) 0 THEN
      RAISE EXCEPTION 'invalid base62 alphabet: % appears twice', c
        USING ERRCODE = 'invalid_parameter_value',
              HINT = 'An alphabet is 62 distinct ASCII characters, e.g. the default 0-9A-Za-z.';
    END IF;
    IF pg_catalog.ascii(c) OPERATOR(pg_catalog.<) 32 OR pg_catalog.ascii(c) OPERATOR(pg_catalog.=) 127 THEN
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
  out pg_catalog.text := '';
BEGIN
  LOOP
    out := pg_catalog.substr(alphabet, (v OPERATOR(pg_catalog.%) 62)::int OPERATOR(pg_catalog.+) 1, 1)
           OPERATOR(pg_catalog.||) out;
    v := pg_catalog.div(v, 62);
    EXIT WHEN v OPERATOR(pg_catalog.=) 0;
  END LOOP;
  RETURN pg_catalog.lpad(out, 22, pg_catalog.substr(alphabet, 1, 1));
END
$fn$;

CREATE OR REPLACE FUNCTION base62_encode(n bigint, width integer DEFAULT 0,
    alphabet text DEFAULT '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz')
RETURNS text LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
  out pg_catalog.text := '';
  d int;
BEGIN
  PERFORM idgen_portable_check_alphabet(alphabet);
  IF n OPERATOR(pg_catalog.<) 0 THEN
    RAISE EXCEPTION 'cannot base62-encode a negative number (%)', n
      USING ERRCODE = 'numeric_value_out_of_range', HINT = 'Only non-negative numbers have base62 codes.';
  END IF;
  IF width OPERATOR(pg_catalog.<) 0 OR width OPERATOR(pg_catalog.>) 64 THEN
    RAISE EXCEPTION 'base62 width % is out of range 0..64', width
      USING ERRCODE = 'invalid_parameter_value', HINT = 'Use 0 for the shortest code, 11 for any bigint, at most 64.';
  END IF;
  LOOP
    d := (n OPERATOR(pg_catalog.%) 62)::int;
    out := pg_catalog.substr(alphabet, d OPERATOR(pg_catalog.+) 1, 1) OPERATOR(pg_catalog.||) out;
    n := n OPERATOR(pg_catalog./) 62;
    EXIT WHEN n OPERATOR(pg_catalog.=) 0;
  END LOOP;
  IF width OPERATOR(pg_catalog.>) 0 THEN
    IF pg_catalog.length(out) OPERATOR(pg_catalog.>) width THEN
      RAISE EXCEPTION 'the value needs % base62 digits, more than width %', pg_catalog.length(out), width
        USING ERRCODE = 'numeric_value_out_of_range', HINT = 'A width of 11 fits every bigint.';
    END IF;
    RETURN pg_catalog.lpad(out, width, pg_catalog.substr(alphabet, 1, 1));
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
  c pg_catalog.text;
BEGIN
  IF code OPERATOR(pg_catalog.=) '' THEN
    RAISE EXCEPTION 'cannot decode an empty base62 code'
      USING ERRCODE = 'invalid_text_representation', HINT = 'Decode with the alphabet the code was encoded with.';
  END IF;
  FOR i IN 1..pg_catalog.length(code) LOOP
    c := pg_catalog.substr(code, i, 1);
    d := CASE WHEN pg_catalog.ascii(c) OPERATOR(pg_catalog.<) 128 THEN pg_catalog.strpos(alphabet, c) ELSE 0 END;
    IF d OPERATOR(pg_catalog.=) 0 THEN
      RAISE EXCEPTION 'invalid base62 character % at position %', pg_catalog.quote_literal(c), i
        USING ERRCODE = 'invalid_text_representation', HINT = 'Decode with the alphabet the code was encoded with.';
    END IF;
    v := (v OPERATOR(pg_catalog.*) 62) OPERATOR(pg_catalog.+) (d OPERATOR(pg_catalog.-) 1);
    IF v OPERATOR(pg_catalog.>) 340282366920938463463374607431768211455 THEN
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
  IF v OPERATOR(pg_catalog.>) 9223372036854775807 THEN
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
  hex pg_catalog.text := pg_catalog.replace(id::pg_catalog.text, '-', '');
  hi bigint := ('x' OPERATOR(pg_catalog.||) pg_catalog.substr(hex, 1, 16))::bit(64)::bigint;
  lo bigint := ('x' OPERATOR(pg_catalog.||) pg_catalog.substr(hex, 17, 16))::bit(64)::bigint;
BEGIN
  PERFORM idgen_portable_check_alphabet(alphabet);
  RETURN idgen_portable_digits(
    ((hi::numeric OPERATOR(pg_catalog.+) CASE WHEN hi OPERATOR(pg_catalog.<) 0 THEN 18446744073709551616 ELSE 0 END)
       OPERATOR(pg_catalog.*) 18446744073709551616)
    OPERATOR(pg_catalog.+)
    (lo::numeric OPERATOR(pg_catalog.+) CASE WHEN lo OPERATOR(pg_catalog.<) 0 THEN 18446744073709551616 ELSE 0 END),
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
  hi := pg_catalog.div(v, 18446744073709551616);
  lo := v OPERATOR(pg_catalog.%) 18446744073709551616;
  RETURN (pg_catalog.lpad(pg_catalog.to_hex((hi OPERATOR(pg_catalog.-) CASE WHEN hi OPERATOR(pg_catalog.>) 9223372036854775807
                                                  THEN 18446744073709551616 ELSE 0 END)::bigint), 16, '0')
          OPERATOR(pg_catalog.||)
          pg_catalog.lpad(pg_catalog.to_hex((lo OPERATOR(pg_catalog.-) CASE WHEN lo OPERATOR(pg_catalog.>) 9223372036854775807
                                                  THEN 18446744073709551616 ELSE 0 END)::bigint), 16, '0'))::pg_catalog.uuid;
END
$fn$;

-- ---- snowflake decoders ------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION idgen_portable_check_id(id bigint) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
BEGIN
  IF id OPERATOR(pg_catalog.<) 0 THEN
    RAISE EXCEPTION 'invalid snowflake id: % is negative', id
      USING ERRCODE = 'invalid_parameter_value', HINT = 'Snowflake ids are non-negative bigints.';
  END IF;
  RETURN id;
END
$fn$;

CREATE OR REPLACE FUNCTION idgen_portable_check_epoch(epoch_ms bigint) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
BEGIN
  IF epoch_ms OPERATOR(pg_catalog.<) 0 OR epoch_ms OPERATOR(pg_catalog.>) 2147483647000 THEN
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
-- (OPERATOR(...) has one precedence for all operators: every operation is in parentheses.)
CREATE OR REPLACE FUNCTION idgen_portable_ts(ms bigint) RETURNS timestamptz
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
  SELECT ((timestamp '1970-01-01'
           OPERATOR(pg_catalog.+) ((ms OPERATOR(pg_catalog./) 86400000) OPERATOR(pg_catalog.*) interval '1 day'))
          OPERATOR(pg_catalog.+) ((ms OPERATOR(pg_catalog.%) 86400000) OPERATOR(pg_catalog.*) interval '1 millisecond'))
         AT TIME ZONE 'UTC'
$fn$;

CREATE OR REPLACE FUNCTION snowflake_timestamp(id bigint, epoch_ms bigint) RETURNS timestamptz
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
  SELECT idgen_portable_ts((idgen_portable_check_id(id) OPERATOR(pg_catalog.>>) 22)
                           OPERATOR(pg_catalog.+) idgen_portable_check_epoch(epoch_ms))
$fn$;

CREATE OR REPLACE FUNCTION snowflake_worker_id(id bigint) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
  SELECT ((idgen_portable_check_id(id) OPERATOR(pg_catalog.>>) 12) OPERATOR(pg_catalog.&) 1023)::integer
$fn$;

CREATE OR REPLACE FUNCTION snowflake_sequence(id bigint) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
  SELECT (idgen_portable_check_id(id) OPERATOR(pg_catalog.&) 4095)::integer
$fn$;

-- The Unix millisecond a timestamp falls in, rounded down; 22008 for infinity.
CREATE OR REPLACE FUNCTION idgen_portable_unix_ms(ts timestamptz, what text) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
BEGIN
  IF NOT pg_catalog.isfinite(ts) THEN
    RAISE EXCEPTION '%: timestamp out of range: infinity', what
      USING ERRCODE = 'datetime_field_overflow', HINT = 'Pass a finite timestamp.';
  END IF;
  -- extract() is double precision before PostgreSQL 14: round() to the microsecond, which it
  -- holds exactly, and through bigint (a double to numeric keeps only 15 digits).
  RETURN pg_catalog.floor(pg_catalog.round(EXTRACT(epoch FROM ts) OPERATOR(pg_catalog.*) 1000000)::bigint::numeric
                          OPERATOR(pg_catalog./) 1000)::bigint;
END
$fn$;

CREATE OR REPLACE FUNCTION snowflake_from_timestamp(ts timestamptz, epoch_ms bigint) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
  epoch bigint := idgen_portable_check_epoch(epoch_ms);
  millis bigint := idgen_portable_unix_ms(ts, 'snowflake_from_timestamp') OPERATOR(pg_catalog.-) epoch;
BEGIN
  IF millis OPERATOR(pg_catalog.<) 0 OR millis OPERATOR(pg_catalog.>) 2199023255551 THEN
    RAISE EXCEPTION 'timestamp out of range for a snowflake id'
      USING ERRCODE = 'datetime_field_overflow',
            DETAIL = pg_catalog.format('Snowflake ids cover %s to %s ms since 1970.', epoch,
                                       epoch OPERATOR(pg_catalog.+) 2199023255551),
            HINT = 'Pass a timestamp at or after the epoch and less than about 69.7 years after it.';
  END IF;
  RETURN millis OPERATOR(pg_catalog.<<) 22;
END
$fn$;

-- ---- snowflake layouts (docs/layouts.md) -------------------------------------------------------

-- A layout's split, checked as idgen checks idgen.layout (src/core/src/layout.rs): a name, or
-- time/worker/sequence bits with an optional unit (/10 or /10ms; 1 ms if none), worker above
-- sequence. 22023 for anything else, saying why.
CREATE OR REPLACE FUNCTION idgen_portable_layout(layout text, OUT time_bits integer, OUT worker_bits integer,
                                                 OUT sequence_bits integer, OUT unit_ms integer,
                                                 OUT sequence_above boolean)
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
  -- blanks and case as idgen reads them (src/core/src/layout.rs, BLANKS): ASCII ones only
  t text := pg_catalog.translate(pg_catalog.btrim(layout, E' \t\n\r\013\014'),
                                 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz');
  unparsable text := pg_catalog.format('"%s" is not a snowflake layout', pg_catalog.btrim(layout, E' \t\n\r\013\014'));
  parts text[];
  n numeric[];
  usable integer;
  years numeric;
  why text;
BEGIN
  sequence_above := false;
  IF t OPERATOR(pg_catalog.=) 'twitter' THEN
    time_bits := 41; worker_bits := 10; sequence_bits := 12; unit_ms := 1;
  ELSIF t OPERATOR(pg_catalog.=) 'instagram' THEN
    time_bits := 41; worker_bits := 13; sequence_bits := 10; unit_ms := 1;
  ELSIF t OPERATOR(pg_catalog.=) 'discord' THEN
    time_bits := 42; worker_bits := 10; sequence_bits := 12; unit_ms := 1;
  ELSIF t OPERATOR(pg_catalog.=) 'sonyflake' THEN
    time_bits := 39; worker_bits := 16; sequence_bits := 8; unit_ms := 10; sequence_above := true;
  ELSIF t OPERATOR(pg_catalog.=) 'js53' THEN
    time_bits := 38; worker_bits := 7; sequence_bits := 8; unit_ms := 10;
  ELSE
    parts := pg_catalog.string_to_array(t, '/');
    IF pg_catalog.cardinality(parts) OPERATOR(pg_catalog.<) 3 OR pg_catalog.cardinality(parts) OPERATOR(pg_catalog.>) 4 THEN
      why := unparsable;
    ELSE
      FOR i IN 1 .. pg_catalog.cardinality(parts) LOOP
        parts[i] := pg_catalog.btrim(parts[i], E' \t\n\r\013\014');
        IF i OPERATOR(pg_catalog.=) 4 THEN
          parts[i] := pg_catalog.btrim(pg_catalog.regexp_replace(parts[i], 'ms$', ''), E' \t\n\r\013\014');
        END IF;
        -- at most 20 digits: Rust's u32 and u64, which idgen parses them as, take no more
        IF parts[i] OPERATOR(pg_catalog.!~) '^\+?[0-9]{1,20}$' THEN
          why := unparsable;
          EXIT;
        END IF;
        n[i] := parts[i]::numeric;
      END LOOP;
      IF why IS NULL AND (n[1] OPERATOR(pg_catalog.>) 4294967295::numeric OR n[2] OPERATOR(pg_catalog.>) 4294967295::numeric
                          OR n[3] OPERATOR(pg_catalog.>) 4294967295::numeric
                          OR n[4] OPERATOR(pg_catalog.>) 18446744073709551615::numeric) THEN
        why := unparsable;
      END IF;
      IF why IS NULL THEN
        IF n[1] OPERATOR(pg_catalog.=) 0::numeric OR n[2] OPERATOR(pg_catalog.=) 0::numeric
           OR n[3] OPERATOR(pg_catalog.=) 0::numeric
           OR ((n[1] OPERATOR(pg_catalog.+) n[2]) OPERATOR(pg_catalog.+) n[3]) OPERATOR(pg_catalog.>) 64::numeric THEN
          why := pg_catalog.format('%s/%s/%s does not fit a bigint: the three fields need at least 1 bit each and '
                                   'at most 64 together (the time field''s top bit is then the sign bit, which no id sets)',
                                   n[1], n[2], n[3]);
        ELSIF n[2] OPERATOR(pg_catalog.>) 16::numeric THEN
          why := pg_catalog.format('a worker field of %s bits is wider than the 16 allowed', n[2]);
        ELSIF n[4] IS NOT NULL AND NOT (n[4] OPERATOR(pg_catalog.=) ANY (ARRAY[1, 10, 100, 1000]::numeric[])) THEN
          why := pg_catalog.format('a time unit of %s ms is not allowed: use 1, 10, 100 or 1000 ms', n[4]);
        ELSE
          time_bits := n[1]::integer;
          worker_bits := n[2]::integer;
          sequence_bits := n[3]::integer;
          unit_ms := coalesce(n[4], 1::numeric)::integer;
          usable := LEAST(time_bits, (63 OPERATOR(pg_catalog.-) worker_bits) OPERATOR(pg_catalog.-) sequence_bits);
          years := pg_catalog.div((2::numeric OPERATOR(pg_catalog.^) usable::numeric) OPERATOR(pg_catalog.*) unit_ms::numeric,
                                  31556952000::numeric);
          IF years OPERATOR(pg_catalog.<) 10::numeric THEN
            why := pg_catalog.format('its time field runs out %s years after the epoch, fewer than the 10 allowed: '
                                     'give it more time bits or a longer unit', years);
          END IF;
        END IF;
      END IF;
    END IF;
    IF why IS NOT NULL THEN
      RAISE EXCEPTION 'invalid snowflake layout: %', why
        USING ERRCODE = 'invalid_parameter_value',
              HINT = 'Name one (twitter, instagram, discord, sonyflake, js53) or give time/worker/sequence bits and a unit, e.g. ''40/12/11/10ms''.';
    END IF;
  END IF;
END
$fn$;

-- The fields of an id under a layout (l: idgen_portable_layout()'s row); the time field holds
-- whatever lies above the worker and sequence fields, as the extension's does.
CREATE OR REPLACE FUNCTION snowflake_timestamp(id bigint, epoch_ms bigint, layout text) RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
  l record := idgen_portable_layout(layout);
  i bigint := idgen_portable_check_id(id);
  e bigint := idgen_portable_check_epoch(epoch_ms);
  ms numeric := ((i OPERATOR(pg_catalog.>>) (l.worker_bits OPERATOR(pg_catalog.+) l.sequence_bits))::numeric
                 OPERATOR(pg_catalog.*) l.unit_ms) OPERATOR(pg_catalog.+) e;
BEGIN
  -- a long-lived layout's time can pass the last timestamp (294276-12-31), as the extension says
  IF ms OPERATOR(pg_catalog.>) 9224318015999999 THEN
    RAISE EXCEPTION '% ms since 1970 is out of the timestamp range', ms
      USING ERRCODE = 'datetime_field_overflow', HINT = 'PostgreSQL timestamps end in the year 294276.';
  END IF;
  RETURN idgen_portable_ts(ms::bigint);
END
$fn$;

CREATE OR REPLACE FUNCTION snowflake_worker_id(id bigint, layout text) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
  l record := idgen_portable_layout(layout);
  i bigint := idgen_portable_check_id(id);
BEGIN
  RETURN ((i OPERATOR(pg_catalog.>>) CASE WHEN l.sequence_above THEN 0 ELSE l.sequence_bits END)
          OPERATOR(pg_catalog.&) ((1::bigint OPERATOR(pg_catalog.<<) l.worker_bits) OPERATOR(pg_catalog.-) 1))::integer;
END
$fn$;

CREATE OR REPLACE FUNCTION snowflake_sequence(id bigint, layout text) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
  l record := idgen_portable_layout(layout);
  i bigint := idgen_portable_check_id(id);
BEGIN
  RETURN ((i OPERATOR(pg_catalog.>>) CASE WHEN l.sequence_above THEN l.worker_bits ELSE 0 END)
          OPERATOR(pg_catalog.&) ((1::bigint OPERATOR(pg_catalog.<<) l.sequence_bits) OPERATOR(pg_catalog.-) 1))::integer;
END
$fn$;

CREATE OR REPLACE FUNCTION snowflake_from_timestamp(ts timestamptz, epoch_ms bigint, layout text) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
  epoch bigint := idgen_portable_check_epoch(epoch_ms);
  l record := idgen_portable_layout(layout);
  millis bigint := idgen_portable_unix_ms(ts, 'snowflake_from_timestamp') OPERATOR(pg_catalog.-) epoch;
  usable integer := LEAST(l.time_bits, 63 OPERATOR(pg_catalog.-) l.worker_bits OPERATOR(pg_catalog.-) l.sequence_bits);
  -- in ms, at most what a bigint holds (the longest-lived layouts outlast it, and any timestamp)
  lifetime bigint := LEAST((2::numeric OPERATOR(pg_catalog.^) usable) OPERATOR(pg_catalog.*) l.unit_ms,
                           9223372036854775807)::bigint;
BEGIN
  IF millis OPERATOR(pg_catalog.<) 0 OR millis OPERATOR(pg_catalog.>=) lifetime THEN
    RAISE EXCEPTION 'timestamp out of range for a snowflake id'
      USING ERRCODE = 'datetime_field_overflow',
            DETAIL = pg_catalog.format('Snowflake ids of layout %s cover %s to %s ms since 1970.', layout, epoch,
                                       (epoch OPERATOR(pg_catalog.+) lifetime) OPERATOR(pg_catalog.-) 1),
            HINT = pg_catalog.format('Pass a timestamp at or after the epoch and less than about %s years after it.',
                                     pg_catalog.round(lifetime OPERATOR(pg_catalog./) 31556952000.0, 1));
  END IF;
  RETURN (millis OPERATOR(pg_catalog./) l.unit_ms)
         OPERATOR(pg_catalog.<<) (l.worker_bits OPERATOR(pg_catalog.+) l.sequence_bits);
END
$fn$;

-- ---- UUID v7 decoders --------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION uuid_v7_timestamp(id uuid) RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
  hex pg_catalog.text := pg_catalog.replace(id::pg_catalog.text, '-', '');
BEGIN
  IF pg_catalog.substr(hex, 13, 1) OPERATOR(pg_catalog.<>) '7'
     OR pg_catalog.substr(hex, 17, 1) OPERATOR(pg_catalog.<>) ALL (ARRAY['8', '9', 'a', 'b']) THEN
    RAISE EXCEPTION '% is not a version 7 UUID', id
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'uuid_v7_timestamp() reads only version 7 UUIDs; uuid_extract_timestamp() returns NULL for other versions.';
  END IF;
  RETURN idgen_portable_ts(('x' OPERATOR(pg_catalog.||) pg_catalog.lpad(pg_catalog.substr(hex, 1, 12), 16, '0'))::bit(64)::bigint);
END
$fn$;

CREATE OR REPLACE FUNCTION idgen_portable_v7_ms(ts timestamptz, what text) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
  ms bigint := idgen_portable_unix_ms(ts, what);
BEGIN
  IF ms OPERATOR(pg_catalog.<) 0 OR ms OPERATOR(pg_catalog.>) 281474976710655 THEN
    RAISE EXCEPTION '%: timestamp out of range for a UUID v7', what
      USING ERRCODE = 'datetime_field_overflow', HINT = 'UUID v7 holds Unix milliseconds from 1970 to the year 10889.';
  END IF;
  RETURN ms;
END
$fn$;

CREATE OR REPLACE FUNCTION uuid_v7_boundary(ts timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
  SELECT (pg_catalog.lpad(pg_catalog.to_hex(idgen_portable_v7_ms(ts, 'uuid_v7_boundary')), 12, '0')
          OPERATOR(pg_catalog.||) '70008000000000000000')::pg_catalog.uuid
$fn$;

-- A version 7 UUID carrying the given time, with random bits (from gen_random_uuid()).
CREATE OR REPLACE FUNCTION uuid_v7(ts timestamptz) RETURNS uuid
LANGUAGE sql VOLATILE STRICT PARALLEL SAFE AS $fn$
  SELECT ((pg_catalog.lpad(pg_catalog.to_hex(idgen_portable_v7_ms(ts, 'uuid_v7')), 12, '0') OPERATOR(pg_catalog.||) '7')
          OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.replace(pg_catalog.gen_random_uuid()::pg_catalog.text, '-', ''), 14))::pg_catalog.uuid
$fn$;

-- ---- the generators ----------------------------------------------------------------------------

-- uuid_v7(): on PostgreSQL 18 core's uuidv7() (ordered within a session, parallel safe). Before
-- 18: the time with 12 bits of sub-millisecond fraction (RFC 9562's method 3), kept strictly
-- increasing within the session in a session setting; so PARALLEL RESTRICTED.
DO $uuid$
BEGIN
  IF pg_catalog.current_setting('server_version_num')::int >= 180000 THEN
    EXECUTE $body$
CREATE OR REPLACE FUNCTION uuid_v7() RETURNS uuid
LANGUAGE sql VOLATILE STRICT PARALLEL SAFE AS $fn$ SELECT pg_catalog.uuidv7() $fn$
$body$;
  ELSE
    EXECUTE $body$
CREATE OR REPLACE FUNCTION uuid_v7() RETURNS uuid
LANGUAGE plpgsql VOLATILE STRICT PARALLEL RESTRICTED AS $fn$
DECLARE
  us bigint := pg_catalog.round(EXTRACT(epoch FROM pg_catalog.clock_timestamp()) OPERATOR(pg_catalog.*) 1000000)::bigint;
  k bigint := ((us OPERATOR(pg_catalog./) 1000) OPERATOR(pg_catalog.*) 4096)
              OPERATOR(pg_catalog.+) (((us OPERATOR(pg_catalog.%) 1000) OPERATOR(pg_catalog.*) 4096) OPERATOR(pg_catalog./) 1000);
  setting pg_catalog.text := pg_catalog.current_setting('idgen_portable.uuid_last', true);
  last bigint := CASE WHEN setting IS NULL OR setting OPERATOR(pg_catalog.=) '' THEN 0 ELSE setting::bigint END;
BEGIN
  IF k OPERATOR(pg_catalog.<=) last THEN
    k := last OPERATOR(pg_catalog.+) 1;
  END IF;
  PERFORM pg_catalog.set_config('idgen_portable.uuid_last', k::pg_catalog.text, false);
  RETURN (((pg_catalog.lpad(pg_catalog.to_hex(k OPERATOR(pg_catalog.>>) 12), 12, '0') OPERATOR(pg_catalog.||) '7')
           OPERATOR(pg_catalog.||) pg_catalog.lpad(pg_catalog.to_hex(k OPERATOR(pg_catalog.&) 4095), 3, '0'))
          OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.replace(pg_catalog.gen_random_uuid()::pg_catalog.text, '-', ''), 17))::pg_catalog.uuid;
END
$fn$
$body$;
  END IF;
END
$uuid$;

-- snowflake_next(): the last id's tick and sequence (tick << sequence bits | sequence, c below)
-- live in a sequence, idgen_portable_snowflake_state, which is not transactional (a value is
-- never handed out twice, even after a rollback) and survives restarts and crashes (PostgreSQL
-- logs sequences ahead, so after a crash it resumes a little further on, never back).
--
-- The fast path takes no lock: c := nextval(state), used when it is in the clock's tick or
-- ahead of it. Nothing else moves the state forward but nextval, except the jump: when the state
-- is behind the clock (the first id of a tick, about once per tick under load), setval(state,
-- the clock's tick) under a lock. A setval can move the state back below values other callers
-- drew between the jumper's nextval and its setval (the state can cross into the new tick by
-- counting through the old one), so the jump is guarded by a seqlock: a second sequence,
-- idgen_portable_snowflake_seqlock, that only jumpers write (setval, under the lock), odd while
-- a jump is under way and two more at its end. The fast path reads it before and after its
-- nextval and keeps c only if both reads are equal and even, else it takes the locked path.
-- Why that suffices: every operation on a sequence holds its page's buffer lock, so all of
-- them are ordered, each backend's in program order. A jumper sets the seqlock odd before its
-- own nextval, so a nextval between the jumper's nextval and its setval comes after the
-- jumper's first setval of the seqlock and before its last: a read after it sees an odd value
-- or the new even one, and a read before it the old even one or an odd one, never the same even
-- value twice. (A value drawn before the jumper's nextval is below it, and the jump moves the
-- state above the jumper's value.) So every c that is used was drawn while no jump
-- was between its nextval and setval, and the state never goes below a value that is used:
-- ids are unique and, call by call, in the order the calls took effect (a call that returned
-- before another began has the smaller id), in every backend and across them. The seqlock only
-- increases, so an even value is never seen twice. A jump cut short (an error, a cancel, a
-- crash) leaves it odd: every call then takes the locked path, and the next one there makes it
-- even again (two more), slower until then, never wrong.
-- A value drawn outside any jump is safe to use whatever the clock says; the jump only keeps
-- ids' times near the clock. So a call whose value is one tick behind the clock tries the lock
-- without waiting (NOWAIT), and if another call holds it (jumping), uses its value, one tick
-- old, instead of queueing: at each tick one writer jumps and the others go on, where they all
-- waited in turn for the lock (16 writers on 2 cores made half of 8 writers' ids).
--
-- The lock is SHARE UPDATE EXCLUSIVE on idgen_portable_snowflake_jump_lock, an empty table of
-- the installer's on which no other role has any privilege: it conflicts with itself, so jumps
-- never overlap, but not with the ACCESS SHARE and ROW SHARE locks any role can take without
-- privileges (pg_relation_size(), a parse of SELECT ... FOR UPDATE), and every command that
-- takes a stronger one checks the role's privileges first; so only this function (its owner's
-- rights) takes it. It is taken inside a BEGIN ... EXCEPTION block and released by raising a
-- private SQLSTATE that rolls that block back (the values read stay: PL/pgSQL variables and
-- sequences are not rolled back); any other error or a cancel aborts the block or the
-- transaction, which releases it too: no path leaves it held. (An advisory lock's key is
-- readable in pg_proc and pg_locks, so any role could take it and stop every writer.) The
-- previous file's lock table, idgen_portable_snowflake_lock, taken for every id, is dropped
-- when this file is run over it: a call of the previous body still waiting for it then fails
-- (42P01) instead of jumping outside the seqlock.
--
-- The clock and the state, as the extension's snowflake_next(): a c in a later tick than the
-- clock's (a tick's ids used up, so the count carried into the next; or the clock stepped
-- back) waits for the clock to reach its tick, up to max_clock_wait ms (install variable,
-- default 1000, idgen.max_clock_wait's default) further than the carry, and beyond that raises
-- 58000. Then the seqlock is left odd, so that every call takes the locked path, where the
-- state is read without drawing from it and the call refused at once: refusals spend no ids
-- (else a loop of refused calls would push the state ever further ahead); the first call there
-- that finds the clock within the wait makes it even again.
--
-- Measured (benches/portable_insert, PostgreSQL 15, 2 vCPUs; docs/portable.md): see there. The
-- previous design, the lock and a subtransaction for every id, made 24,408 rows/s at 1 client
-- and 10,138 at 8 against Instagram's next_id()'s 70,267 and 100,228.
--
-- It runs with its installer's rights (SECURITY DEFINER), so roles that insert rows need no
-- privilege on the state: only EXECUTE, granted to the roles -v grant_to names. Its search path
-- names pg_temp last (else a role's temporary schema is searched first for types and tables)
-- and every name in it is qualified, so no object of the caller's is used in its stead.
CREATE SEQUENCE IF NOT EXISTS idgen_portable_snowflake_state AS bigint MINVALUE 0 START WITH 0;
CREATE SEQUENCE IF NOT EXISTS idgen_portable_snowflake_seqlock AS bigint MINVALUE 0 START WITH 0;
CREATE TABLE IF NOT EXISTS idgen_portable_snowflake_jump_lock ();

-- State objects made before by another role (on 13 and 14 any role may create in public, and
-- CREATE ... IF NOT EXISTS accepts what is there): its owner could setval the state back, or
-- hold the lock. Checked after the CREATEs, so that none can be made between check and use.
DO $owner$
DECLARE
  o record;
BEGIN
  FOR o IN SELECT c.relname, c.relkind, w.kind, w.what, c.relowner::regrole AS owner,
                  c.relowner = (SELECT oid FROM pg_roles WHERE rolname = current_user) AS mine
             FROM (VALUES ('idgen_portable_snowflake_state', 'S', 'sequence'),
                          ('idgen_portable_snowflake_seqlock', 'S', 'sequence'),
                          ('idgen_portable_snowflake_jump_lock', 'r', 'table'),
                          ('idgen_portable_snowflake_lock', 'r', 'table')) w(name, kind, what)
             JOIN pg_class c ON c.relname = w.name AND c.relnamespace = current_schema()::regnamespace LOOP
    IF o.relkind <> o.kind THEN
      RAISE EXCEPTION 'idgen portable: %.% is not a %', quote_ident(current_schema()), o.relname, o.what
        USING ERRCODE = 'wrong_object_type',
              HINT = 'The portable edition keeps its generator''s state under that name: rename that object, then run this again; nothing was installed.';
    END IF;
    IF NOT o.mine THEN
      RAISE EXCEPTION 'idgen portable: %.% belongs to %, not to %', quote_ident(current_schema()), o.relname,
                      o.owner, current_user
        USING ERRCODE = 'insufficient_privilege',
              DETAIL = 'Its owner could move the generator''s state back, or hold its lock, and have ids issued twice or none.',
              HINT = 'Install as its owner, or have it dropped (if it is not yours, nothing was issued from it) and run this again in a schema where only you have CREATE; nothing was installed.';
    END IF;
  END LOOP;
END
$owner$;
REVOKE ALL ON SEQUENCE idgen_portable_snowflake_state FROM PUBLIC;
REVOKE ALL ON SEQUENCE idgen_portable_snowflake_seqlock FROM PUBLIC;
REVOKE ALL ON TABLE idgen_portable_snowflake_jump_lock FROM PUBLIC;
COMMENT ON TABLE idgen_portable_snowflake_jump_lock IS
  'idgen portable edition: locked by snowflake_next() while it moves idgen_portable_snowflake_state to the clock';
COMMENT ON SEQUENCE idgen_portable_snowflake_seqlock IS
  'idgen portable edition: odd while snowflake_next() moves idgen_portable_snowflake_state to the clock (a seqlock)';
-- a new seqlock reads 0 (pg_sequence_last_value() is NULL until a value is set)
DO $seqlock$
BEGIN
  IF pg_sequence_last_value(to_regclass(quote_ident(current_schema()) || '.idgen_portable_snowflake_seqlock')) IS NULL THEN
    PERFORM setval(to_regclass(quote_ident(current_schema()) || '.idgen_portable_snowflake_seqlock'), 0);
  END IF;
END
$seqlock$;
-- The previous file's lock, taken for every id: dropped (this waits for the calls that hold
-- it; the ones still waiting for it then fail with 42P01 and issue nothing).
DO $old_lock$
BEGIN
  IF to_regclass(quote_ident(current_schema()) || '.idgen_portable_snowflake_lock') IS NOT NULL THEN
    EXECUTE format('DROP TABLE %I.idgen_portable_snowflake_lock', current_schema());
  END IF;
END
$old_lock$;

-- idgen_portable_build(): snowflake_next() and the decoders that depend on the settings, written
-- with the settings as constants (so that no session, role or database setting can change them),
-- into schema target, after checking them; returns the layout as idgen writes it. The psql part
-- below calls it with the psql variables; the pg_tle edition (sql/portable/pg_tle.sql) calls it
-- from the trigger on its configuration table, so that a restore from pg_dump, whose CREATE
-- EXTENSION makes the unconfigured generator, writes it again as the stored row says. edition
-- ('psql' or 'pg_tle') picks how the errors' HINTs name the settings; grant_to NULL leaves
-- EXECUTE on snowflake_next() as it is (pg_tle: plain GRANTs, which pg_dump keeps);
-- layout_may_change lets another layout than the installed one in (pg_tle: while it is
-- unconfigured). Only its owner may call it; its search path is pinned, as it runs on every
-- configuration of the pg_tle edition, not only at an install.
CREATE OR REPLACE FUNCTION idgen_portable_build(target text, worker text, epoch text, layout text, max_wait text,
    grant_to text, edition text, layout_may_change boolean) RETURNS text
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $install$
DECLARE
  l record;
  installed text;
  state regclass := pg_catalog.to_regclass(pg_catalog.quote_ident(target) || '.idgen_portable_snowflake_state');
  seqlock regclass := pg_catalog.to_regclass(pg_catalog.quote_ident(target) || '.idgen_portable_snowflake_seqlock');
  grantees text[] := '{}';
  g text;
  has_usage boolean;
  psql boolean := edition = 'psql';
  -- how a setting is given: psql's -v name=value, or the pg_tle edition's configure argument
  setting text := CASE WHEN edition = 'psql' THEN '-v %s=%s'
                  ELSE '%s => %s to ' || pg_catalog.replace(pg_catalog.quote_ident(target), '%', '%%')
                       || '.idgen_portable_configure()' END;
  change_wait text := CASE WHEN edition = 'psql'
                      THEN 'install idgen_portable.sql again with -v max_clock_wait=<ms>'
                      ELSE pg_catalog.format('run SELECT %I.idgen_portable_configure(max_clock_wait => <ms>) as the extension''s owner', target) END;
  epoch_given text := CASE WHEN edition = 'psql' THEN 'the epoch idgen_portable.sql was installed with'
                      ELSE 'the epoch idgen_portable was configured with' END;
BEGIN
  IF epoch !~ '^[0-9]{1,13}$' OR epoch::bigint > 2147483647000 THEN
    RAISE EXCEPTION 'idgen portable: epoch % is out of range', epoch
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Pass ' || format(setting, 'epoch', '<Unix ms between 0 and 2147483647000>') || ', or leave it out for 1288834974657.';
  END IF;
  IF max_wait !~ '^[0-9]{1,8}$' THEN
    RAISE EXCEPTION 'idgen portable: max_clock_wait % is not a number of milliseconds', max_wait
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Pass ' || format(setting, 'max_clock_wait', '<ms, 0 to 99999999>') || ', or leave it out for 1000.';
  END IF;
  EXECUTE pg_catalog.format('SELECT * FROM %I.idgen_portable_layout($1)', target) INTO l USING layout;
  -- as idgen writes it (SHOW idgen.layout): a named layout's name, else time/worker/sequence/unit
  layout := CASE (l.time_bits, l.worker_bits, l.sequence_bits, l.unit_ms, l.sequence_above)
              WHEN (41, 10, 12, 1, false) THEN 'twitter' WHEN (41, 13, 10, 1, false) THEN 'instagram'
              WHEN (42, 10, 12, 1, false) THEN 'discord' WHEN (39, 16, 8, 10, true) THEN 'sonyflake'
              WHEN (38, 7, 8, 10, false) THEN 'js53'
              ELSE format('%s/%s/%s/%sms', l.time_bits, l.worker_bits, l.sequence_bits, l.unit_ms) END;
  IF worker <> '' AND (worker !~ '^[0-9]{1,5}$' OR worker::int >= (1 << l.worker_bits)) THEN
    RAISE EXCEPTION 'idgen portable: worker_id % is out of range for layout % (0-%)', worker, layout, (1 << l.worker_bits) - 1
      USING ERRCODE = 'invalid_parameter_value',
            HINT = format('Pass %s, unique per server that writes ids.', format(setting, 'worker_id', format('<0-%s>', (1 << l.worker_bits) - 1)));
  END IF;
  -- The layout never changes silently: the state counts ticks and sequences of the installed one.
  IF to_regprocedure(quote_ident(target) || '.idgen_portable_settings()') IS NOT NULL AND NOT layout_may_change THEN
    installed := 'twitter';  -- an installation from before layouts
    IF to_regprocedure(quote_ident(target) || '.idgen_portable_installed_layout()') IS NOT NULL THEN
      EXECUTE format('SELECT %I.idgen_portable_installed_layout()', target) INTO installed;
    END IF;
    IF installed <> layout THEN
      RAISE EXCEPTION 'idgen portable: schema % has the portable edition of layout %, not %', target, installed, layout
        USING ERRCODE = 'object_not_in_prerequisite_state',
              DETAIL = 'Its generator''s state counts ticks of that layout; ids of another could sort below the ones it issued.',
              HINT = CASE WHEN psql THEN format('Install again with -v layout=%s, or install the other layout into a schema of its own. Nothing was installed.', installed)
                      ELSE format('Keep layout %s; the other layout needs a database of its own. Nothing was changed.', installed) END;
    END IF;
  END IF;
  -- grant_to: role names as they are in pg_roles (exact case), or PUBLIC
  IF grant_to !~ '^\s*$' THEN  -- (NULL: not a match)
    FOREACH g IN ARRAY string_to_array(grant_to, ',') LOOP
      g := btrim(g);
      IF g = '' THEN
        RAISE EXCEPTION 'idgen portable: grant_to % has an empty role name', quote_literal(grant_to)
          USING ERRCODE = 'invalid_parameter_value',
                HINT = 'Pass -v grant_to=<role>[,<role>...], the roles that may call snowflake_next(), or PUBLIC.';
      ELSIF lower(g) = 'public' THEN
        g := 'PUBLIC';
        has_usage := EXISTS (SELECT FROM pg_namespace n, aclexplode(coalesce(n.nspacl, acldefault('n', n.nspowner))) a
                           WHERE n.nspname = target AND a.grantee = 0 AND a.privilege_type = 'USAGE');
      ELSIF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = g) THEN
        RAISE EXCEPTION 'idgen portable: grant_to names role %, which does not exist', quote_ident(g)
          USING ERRCODE = 'undefined_object',
                HINT = 'Role names are matched exactly, case included; create the role first, or leave it out. Nothing was installed.';
      ELSE
        has_usage := has_schema_privilege(g, (SELECT oid FROM pg_namespace WHERE nspname = target), 'USAGE');
        g := quote_ident(g);
      END IF;
      -- without USAGE on the schema a role cannot call the function it is granted: only the
      -- schema's owner (or a role it let grant) can give it, so name the GRANT
      IF NOT has_usage THEN
        RAISE NOTICE 'idgen portable: % has no USAGE on schema %, so its calls of %.snowflake_next() fail (42501)',
          g, quote_ident(target), quote_ident(target)
          USING HINT = format('Have the schema''s owner (%s) run: GRANT USAGE ON SCHEMA %I TO %s;',
                              (SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = target), target, g);
      END IF;
      grantees := grantees || g;
    END LOOP;
  END IF;
  IF worker = '' THEN
    EXECUTE format($body$
CREATE OR REPLACE FUNCTION %I.snowflake_next() RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE AS $fn$
BEGIN
  RAISE EXCEPTION %L
    USING ERRCODE = 'object_not_in_prerequisite_state',
          DETAIL = 'The portable edition fixes the worker id when it is installed, so that no session can change it.',
          HINT = %L;
END
$fn$ $body$, target,
      CASE WHEN psql THEN 'snowflake_next(): no worker id was given when idgen_portable.sql was installed'
           ELSE 'snowflake_next(): idgen_portable has no worker id yet' END,
      CASE WHEN psql THEN 'Install it again with the psql variable worker_id: psql -v worker_id=<0-1023> -f idgen_portable.sql'
           ELSE format('Give it one, as the extension''s owner: SELECT %I.idgen_portable_configure(worker_id => <0-1023>);', target) END);
  ELSE
    EXECUTE format($body$
CREATE OR REPLACE FUNCTION %4$I.snowflake_next() RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  g bigint;            -- the seqlock
  c bigint;            -- the state's value this call uses
  now_ms bigint;       -- the clock, in ms since the epoch
  now_t bigint;        -- its tick
  t bigint;            -- c's tick
  refused boolean := false;
  behind_ms bigint;
  stale bigint;        -- a value drawn outside any jump, one tick behind the clock
BEGIN
  -- the fast path: no lock
  g := pg_catalog.pg_sequence_last_value(%12$s::pg_catalog.oid::pg_catalog.regclass);
  IF (g OPERATOR(pg_catalog.&) 1) OPERATOR(pg_catalog.=) 0 THEN
    c := pg_catalog.nextval(%1$s::pg_catalog.oid::pg_catalog.regclass);
    now_ms := (pg_catalog.round(EXTRACT(epoch FROM pg_catalog.clock_timestamp()) OPERATOR(pg_catalog.*) 1000000)::bigint
               OPERATOR(pg_catalog./) 1000) OPERATOR(pg_catalog.-) %2$s;
    -- the common case in one test, its id returned at once: c in the clock's tick (neither
    -- behind it nor carried past it), within the layout's lifetime, drawn outside any jump
    IF (c OPERATOR(pg_catalog.>>) %5$s) OPERATOR(pg_catalog.=) (now_ms OPERATOR(pg_catalog./) %6$s)
       AND now_ms OPERATOR(pg_catalog.>=) 0 AND (c OPERATOR(pg_catalog.>>) %5$s) OPERATOR(pg_catalog.<=) %7$s
       AND pg_catalog.pg_sequence_last_value(%12$s::pg_catalog.oid::pg_catalog.regclass) OPERATOR(pg_catalog.=) g THEN
      RETURN (((c OPERATOR(pg_catalog.>>) %5$s) OPERATOR(pg_catalog.<<) %8$s)
              OPERATOR(pg_catalog.|) (%3$s::bigint OPERATOR(pg_catalog.<<) %9$s))
             OPERATOR(pg_catalog.|) ((c OPERATOR(pg_catalog.&) %10$s) OPERATOR(pg_catalog.<<) %11$s);
    END IF;
    now_t := now_ms OPERATOR(pg_catalog./) %6$s;
    t := c OPERATOR(pg_catalog.>>) %5$s;
    IF pg_catalog.pg_sequence_last_value(%12$s::pg_catalog.oid::pg_catalog.regclass) OPERATOR(pg_catalog.<>) g
       OR t OPERATOR(pg_catalog.>) (now_t OPERATOR(pg_catalog.+) 1) THEN
      -- drawn while a jump was under way, or ahead of the clock by more than a carry (it
      -- stepped back): not used
      c := NULL;
    ELSIF t OPERATOR(pg_catalog.<) now_t THEN
      -- behind the clock: a jump is due. Drawn outside any jump, the value is safe to use (the
      -- state never goes back below it); one tick behind, it is used if another call is
      -- jumping at this moment, rather than waiting for that call
      IF t OPERATOR(pg_catalog.>=) (now_t OPERATOR(pg_catalog.-) 1) THEN
        stale := c;
      END IF;
      c := NULL;
    END IF;
  END IF;
  IF c IS NULL THEN
    -- the locked path: the jump to the clock, and every call while the seqlock is odd
    BEGIN
      IF stale IS NULL THEN
        LOCK TABLE %4$I.idgen_portable_snowflake_jump_lock IN SHARE UPDATE EXCLUSIVE MODE;
      ELSE
        LOCK TABLE %4$I.idgen_portable_snowflake_jump_lock IN SHARE UPDATE EXCLUSIVE MODE NOWAIT;
      END IF;
      g := pg_catalog.pg_sequence_last_value(%12$s::pg_catalog.oid::pg_catalog.regclass);
      now_ms := (pg_catalog.round(EXTRACT(epoch FROM pg_catalog.clock_timestamp()) OPERATOR(pg_catalog.*) 1000000)::bigint
                 OPERATOR(pg_catalog./) 1000) OPERATOR(pg_catalog.-) %2$s;
      now_t := now_ms OPERATOR(pg_catalog./) %6$s;
      -- the last value drawn, read without drawing one
      c := pg_catalog.pg_sequence_last_value(%1$s::pg_catalog.oid::pg_catalog.regclass);
      IF c IS NOT NULL AND (c OPERATOR(pg_catalog.>>) %5$s) OPERATOR(pg_catalog.>) (now_t OPERATOR(pg_catalog.+) 1)
         AND (((c OPERATOR(pg_catalog.>>) %5$s) OPERATOR(pg_catalog.-) now_t) OPERATOR(pg_catalog.*) %6$s) OPERATOR(pg_catalog.>) %13$s THEN
        -- the clock is further behind than the wait: refused, and every call comes here (the
        -- seqlock odd) until it catches up, so that refusals spend no value
        IF (g OPERATOR(pg_catalog.&) 1) OPERATOR(pg_catalog.=) 0 THEN
          PERFORM pg_catalog.setval(%12$s::pg_catalog.oid::pg_catalog.regclass, g OPERATOR(pg_catalog.+) 1);
        END IF;
        refused := true;
      ELSE
        IF (g OPERATOR(pg_catalog.&) 1) OPERATOR(pg_catalog.=) 1 THEN
          g := g OPERATOR(pg_catalog.+) 1;  -- left odd (a jump cut short, or the clock far behind): even again
          PERFORM pg_catalog.setval(%12$s::pg_catalog.oid::pg_catalog.regclass, g);
        END IF;
        IF c IS NULL OR (c OPERATOR(pg_catalog.>>) %5$s) OPERATOR(pg_catalog.<) now_t THEN
          -- the jump: the seqlock odd BEFORE this call draws, so that every value drawn from
          -- here to the jump's end is drawn during it (the fast path discards it); then the
          -- state to the clock's tick if it is still behind, and the seqlock even
          PERFORM pg_catalog.setval(%12$s::pg_catalog.oid::pg_catalog.regclass, g OPERATOR(pg_catalog.+) 1);
          c := pg_catalog.nextval(%1$s::pg_catalog.oid::pg_catalog.regclass);
          IF (c OPERATOR(pg_catalog.>>) %5$s) OPERATOR(pg_catalog.<) now_t AND now_ms OPERATOR(pg_catalog.>=) 0 THEN
            c := now_t OPERATOR(pg_catalog.<<) %5$s;
            PERFORM pg_catalog.setval(%1$s::pg_catalog.oid::pg_catalog.regclass, c);
          END IF;
          PERFORM pg_catalog.setval(%12$s::pg_catalog.oid::pg_catalog.regclass, g OPERATOR(pg_catalog.+) 2);
        ELSE
          -- not behind: a value drawn here needs no jump, so no setval follows it
          c := pg_catalog.nextval(%1$s::pg_catalog.oid::pg_catalog.regclass);
        END IF;
      END IF;
      RAISE SQLSTATE 'IDGUL';  -- rolls this block back, which releases the lock
    EXCEPTION
      WHEN SQLSTATE 'IDGUL' THEN
        NULL;
      WHEN lock_not_available THEN
        IF stale IS NULL THEN
          RAISE;  -- the caller's lock_timeout, on the waiting LOCK
        END IF;
        c := stale;  -- another call is jumping: the value drawn before, one tick behind
    END;
  END IF;
  -- c's tick ahead of the clock: wait for the clock, as the extension does
  t := c OPERATOR(pg_catalog.>>) %5$s;
  LOOP
    IF now_ms OPERATOR(pg_catalog.<) 0 THEN
      RAISE EXCEPTION 'the clock is before the snowflake epoch' USING ERRCODE = 'system_error',
        HINT = 'Check the system clock, or ' OPERATOR(pg_catalog.||) %15$L OPERATOR(pg_catalog.||) '.';
    END IF;
    now_t := now_ms OPERATOR(pg_catalog./) %6$s;
    EXIT WHEN NOT refused AND t OPERATOR(pg_catalog.<=) now_t;
    IF refused OR t OPERATOR(pg_catalog.>) (now_t OPERATOR(pg_catalog.+) 1) THEN
      -- more than a carry into the next tick: the clock stepped back
      -- behind the last id issued before (the extension's measure): c, or the one before c
      behind_ms := ((((c OPERATOR(pg_catalog.-) (NOT refused)::pg_catalog.int4)) OPERATOR(pg_catalog.>>) %5$s) OPERATOR(pg_catalog.-) now_t)
                   OPERATOR(pg_catalog.*) %6$s;
      IF refused OR behind_ms OPERATOR(pg_catalog.>) %13$s THEN
        RAISE EXCEPTION 'the system clock is %% ms behind the last snowflake id issued, longer than max_clock_wait (%13$s ms)',
          behind_ms USING ERRCODE = 'system_error',
          DETAIL = pg_catalog.format('No id is issued from a millisecond before the last one used, so ids never repeat or decrease. Ids resume once the clock reaches %%s.',
                                     pg_catalog.to_timestamp(((t OPERATOR(pg_catalog.*) %6$s) OPERATOR(pg_catalog.+) %2$s)::pg_catalog.float8 OPERATOR(pg_catalog./) 1000)),
          HINT = 'Check the system clock (NTP). To wait longer instead of failing, ' OPERATOR(pg_catalog.||) %14$L OPERATOR(pg_catalog.||) '.';
      END IF;
    END IF;
    PERFORM pg_catalog.pg_sleep(LEAST(GREATEST((t OPERATOR(pg_catalog.*) %6$s) OPERATOR(pg_catalog.-) now_ms, 1), 10)::pg_catalog.float8
                                OPERATOR(pg_catalog./) 1000);
    now_ms := (pg_catalog.round(EXTRACT(epoch FROM pg_catalog.clock_timestamp()) OPERATOR(pg_catalog.*) 1000000)::bigint
               OPERATOR(pg_catalog./) 1000) OPERATOR(pg_catalog.-) %2$s;
  END LOOP;
  IF t OPERATOR(pg_catalog.>) %7$s THEN
    RAISE EXCEPTION 'snowflake ids are exhausted for this epoch' USING ERRCODE = 'system_error',
      HINT = 'Snowflake ids span the layout''s lifetime from ' OPERATOR(pg_catalog.||) %15$L OPERATOR(pg_catalog.||) ' (docs/layouts.md).';
  END IF;
  RETURN ((t OPERATOR(pg_catalog.<<) %8$s)
          OPERATOR(pg_catalog.|) (%3$s::bigint OPERATOR(pg_catalog.<<) %9$s))
         OPERATOR(pg_catalog.|) ((c OPERATOR(pg_catalog.&) %10$s) OPERATOR(pg_catalog.<<) %11$s);
END
$fn$ $body$, state::oid, epoch, worker, target,
      l.sequence_bits,                                                     -- 5: the sequence's bits in the state
      l.unit_ms,                                                           -- 6: ms per tick
      (1::bigint << LEAST(l.time_bits, 63 - l.worker_bits - l.sequence_bits)) - 1,  -- 7: the last tick
      l.worker_bits + l.sequence_bits,                                     -- 8: the time field's shift
      CASE WHEN l.sequence_above THEN 0 ELSE l.sequence_bits END,         -- 9: the worker's shift
      (1::bigint << l.sequence_bits) - 1,                                  -- 10: the sequence's mask
      CASE WHEN l.sequence_above THEN l.worker_bits ELSE 0 END,           -- 11: the sequence's shift
      seqlock::oid,                                                        -- 12: the seqlock
      max_wait::bigint,                                                    -- 13: max_clock_wait, ms
      change_wait,                                                         -- 14: how to change it
      epoch_given);                                                        -- 15: where the epoch comes from
  END IF;
  -- EXECUTE: the installer and the roles of grant_to only (a reinstall keeps grants made before
  -- to named roles, and takes PUBLIC's away unless grant_to names it).
  IF grant_to IS NULL THEN
    NULL;
  ELSE
  EXECUTE format('REVOKE ALL ON FUNCTION %I.snowflake_next() FROM PUBLIC', target);
  IF cardinality(grantees) > 0 THEN
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.snowflake_next() TO %s', target,
                   array_to_string(grantees, ', '));
  ELSE
    RAISE NOTICE 'idgen portable: no -v grant_to: only % and roles granted EXECUTE before may call %.snowflake_next()',
      current_user, quote_ident(target)
      USING HINT = 'Run it again with -v grant_to=<role>[,<role>...] for the roles that insert rows.';
  END IF;
  END IF;
  -- snowflake_timestamp(id) and snowflake_from_timestamp(ts): under the installed epoch and
  -- layout, as the extension's are under idgen.epoch and idgen.layout.
  EXECUTE format($body$
CREATE OR REPLACE FUNCTION %1$I.snowflake_timestamp(id bigint) RETURNS timestamptz
LANGUAGE sql STABLE STRICT PARALLEL SAFE AS $fn$ SELECT %1$I.snowflake_timestamp(id, %2$s, %4$L) $fn$;
CREATE OR REPLACE FUNCTION %1$I.snowflake_from_timestamp(ts timestamptz) RETURNS bigint
LANGUAGE sql STABLE STRICT PARALLEL SAFE AS $fn$ SELECT %1$I.snowflake_from_timestamp(ts, %2$s, %4$L) $fn$;
CREATE OR REPLACE FUNCTION %1$I.idgen_portable_settings(OUT worker_id integer, OUT epoch bigint)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$ SELECT %3$s::integer, %2$s::bigint $fn$;
CREATE OR REPLACE FUNCTION %1$I.idgen_portable_installed_layout() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$ SELECT %4$L::text $fn$;
$body$, target, epoch, coalesce(nullif(worker, ''), 'NULL'), layout);
  -- The one-argument worker and sequence decoders read Twitter's layout, IMMUTABLE (an index on
  -- them stays true): under another, they refuse and name the form to use, as the extension's.
  IF layout <> 'twitter' THEN
    EXECUTE format($body$
CREATE OR REPLACE FUNCTION %2$I.snowflake_worker_id(id bigint) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
BEGIN
  RAISE EXCEPTION 'snowflake_worker_id(id) decodes Twitter''s layout, and this portable edition''s layout is %1$s'
    USING ERRCODE = 'object_not_in_prerequisite_state', HINT = 'Pass the layout: snowflake_worker_id(id, ''%1$s'').';
END $fn$;
CREATE OR REPLACE FUNCTION %2$I.snowflake_sequence(id bigint) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
BEGIN
  RAISE EXCEPTION 'snowflake_sequence(id) decodes Twitter''s layout, and this portable edition''s layout is %1$s'
    USING ERRCODE = 'object_not_in_prerequisite_state', HINT = 'Pass the layout: snowflake_sequence(id, ''%1$s'').';
END $fn$;
$body$, layout, target);
  END IF;
  RETURN layout;
END
$install$;
REVOKE ALL ON FUNCTION idgen_portable_build(text, text, text, text, text, text, text, boolean) FROM PUBLIC;

-- @psql-only {
SELECT idgen_portable_build(current_schema(), current_setting('idgen_portable.worker_id'),
         current_setting('idgen_portable.epoch'), current_setting('idgen_portable.layout'),
         current_setting('idgen_portable.max_clock_wait'), current_setting('idgen_portable.grant_to'), 'psql', false)
       AS layout \gset
-- @psql-only }

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

-- @psql-only {
COMMIT;
-- @psql-only }
