-- From idgen's portable edition to the extension, in one transaction, in one database; the
-- portable edition installed with psql (idgen_portable.sql) or as the pg_tle extension
-- idgen_portable (its members are released from it first, and it is dropped at the end):
--
--   psql -f sql/portable/switch_to_extension.sql                 (the schema it was installed in
--   psql -v schema=keys -f sql/portable/switch_to_extension.sql   is the current one, or given)
--
-- Run it as a superuser (CREATE EXTENSION idgen needs one) on a server where idgen is installed
-- and preloaded, with idgen.worker_id set and the same idgen.epoch as the portable edition was
-- installed with. It
--   1. takes the portable snowflake_next()'s lock (idgen_portable_snowflake_jump_lock, SHARE
--      UPDATE EXCLUSIVE) for its whole transaction and leaves its seqlock odd, which sends every
--      call to that lock: from then on no portable id is issued (callers wait, and get an error
--      once the switch commits; their next call is the extension's);
--   2. waits until the clock passes the last millisecond the portable snowflake_next() used
--      (at most 10 s, writers waiting meanwhile; it fails and changes nothing if the clock is
--      further behind), so that no id the portable edition issued is issued again;
--   3. moves the portable functions, unchanged, into the schema idgen_portable_retired: every
--      DEFAULT, index, generated column and view that uses them keeps working throughout (the
--      retired snowflake_next() only raises an error that names the extension's);
--   4. runs CREATE EXTENSION idgen in the same schema, so the same names now are the extension's,
--      and calls the extension's snowflake_next() once: if it cannot run (not preloaded, no
--      worker id) the switch fails with its SQLSTATE and changes nothing; else a NOTICE gives
--      its first id, greater than every portable one;
--   5. re-points every column DEFAULT that called a portable function at the extension's
--      function of the same name (the same expression otherwise);
--   6. drops idgen_portable_retired if nothing uses it any more. Indexes, generated columns and
--      views keep calling the retired deterministic functions, whose results are the
--      extension's bit for bit; the NOTICE names them, to re-create at leisure.

\set ON_ERROR_STOP on
\if :{?schema}
-- the schema, with this session's temporary schema searched last (not first) for relations
SELECT pg_catalog.set_config('search_path', pg_catalog.quote_ident(:'schema') || ', pg_temp', false) AS search_path \gset
\endif

BEGIN;

DO $check$
DECLARE
  s text := current_schema();
  installed record;
  installed_layout text;
  same_layout boolean;
  layout_shift integer;
  layout_unit integer;
  state_c bigint;
  last_ms bigint;
  deadline timestamptz := clock_timestamp() + interval '10 s';
  tbl regclass;
BEGIN
  IF to_regprocedure(quote_ident(s) || '.idgen_portable_settings()') IS NULL THEN
    RAISE EXCEPTION 'idgen portable edition: not installed in schema %', s
      USING ERRCODE = 'object_not_in_prerequisite_state',
            HINT = 'Name its schema: psql -v schema=<schema> -f switch_to_extension.sql';
  END IF;
  IF NOT EXISTS (SELECT FROM pg_available_extensions WHERE name = 'idgen') THEN
    RAISE EXCEPTION 'the idgen extension is not installed on this server'
      USING ERRCODE = 'object_not_in_prerequisite_state',
            HINT = 'Install its package (or cargo pgrx install), preload it and set idgen.worker_id, restart, then run this again.';
  END IF;
  IF current_setting('idgen.epoch', true) IS NULL OR current_setting('idgen.worker_id', true) IS NULL THEN
    RAISE EXCEPTION 'idgen is not preloaded on this server'
      USING ERRCODE = 'object_not_in_prerequisite_state',
            HINT = 'Add idgen to shared_preload_libraries and set idgen.worker_id in postgresql.conf, restart, then run this again.';
  END IF;
  EXECUTE format('SELECT * FROM %I.idgen_portable_settings()', s) INTO installed;
  IF current_setting('idgen.epoch')::bigint <> installed.epoch THEN
    RAISE EXCEPTION 'idgen.epoch is %, the portable edition was installed with epoch %', current_setting('idgen.epoch'), installed.epoch
      USING ERRCODE = 'object_not_in_prerequisite_state',
            DETAIL = 'Ids made under one epoch decode to other times under another, and could sort below the old ones.',
            HINT = 'Set idgen.epoch in postgresql.conf to the portable edition''s epoch and restart.';
  END IF;
  -- The layout too (an installation from before layouts made Twitter's).
  installed_layout := 'twitter';
  IF to_regprocedure(quote_ident(s) || '.idgen_portable_installed_layout()') IS NOT NULL THEN
    EXECUTE format('SELECT %I.idgen_portable_installed_layout()', s) INTO installed_layout;
  END IF;
  -- compared as ids, not as text: '41/13/10' and ' Instagram' are Instagram's layout, and
  -- Discord's is Twitter's (its 42nd time bit is the sign bit)
  IF to_regprocedure(quote_ident(s) || '.idgen_portable_layout(text)') IS NOT NULL THEN
    EXECUTE format('SELECT (SELECT ROW(LEAST(time_bits, 63 - worker_bits - sequence_bits), worker_bits, sequence_bits,'
                   ' unit_ms, sequence_above)::text FROM %1$I.idgen_portable_layout(%2$L))'
                   ' = (SELECT ROW(LEAST(time_bits, 63 - worker_bits - sequence_bits), worker_bits, sequence_bits,'
                   ' unit_ms, sequence_above)::text FROM %1$I.idgen_portable_layout(%3$L))',
                   s, coalesce(current_setting('idgen.layout', true), 'twitter'), installed_layout)
      INTO same_layout;
  ELSE
    same_layout := lower(btrim(coalesce(current_setting('idgen.layout', true), 'twitter'))) = installed_layout;
  END IF;
  IF NOT same_layout THEN
    RAISE EXCEPTION 'idgen.layout is %, the portable edition was installed with layout %',
      coalesce(current_setting('idgen.layout', true), 'twitter'), installed_layout
      USING ERRCODE = 'object_not_in_prerequisite_state',
            DETAIL = 'Ids of another layout decode to other times and worker ids, and could sort below the old ones.',
            HINT = 'Set idgen.layout in postgresql.conf to the portable edition''s layout and restart.';
  END IF;
  IF installed_layout = 'twitter' THEN
    layout_shift := 12;
    layout_unit := 1;
  ELSE
    EXECUTE format('SELECT sequence_bits, unit_ms FROM %I.idgen_portable_layout(%L)', s, installed_layout)
      INTO layout_shift, layout_unit;
  END IF;
  IF installed.worker_id IS DISTINCT FROM current_setting('idgen.worker_id')::int THEN
    RAISE NOTICE 'idgen.worker_id is %, the portable edition used %: fine, as long as no other server uses %',
      current_setting('idgen.worker_id'), coalesce(installed.worker_id::text, 'none'), current_setting('idgen.worker_id');
  END IF;
  -- The tables whose DEFAULTs step 5 re-points, locked first: a writer waiting below for the
  -- generator's lock while it holds one of these would otherwise deadlock with ALTER TABLE.
  FOR tbl IN SELECT DISTINCT ad.adrelid::regclass
               FROM pg_attrdef ad
               JOIN pg_depend dep ON dep.classid = 'pg_attrdef'::regclass AND dep.objid = ad.oid
                                 AND dep.refclassid = 'pg_proc'::regclass
               JOIN pg_proc p ON p.oid = dep.refobjid AND p.pronamespace = s::regnamespace
                             AND (p.proname LIKE 'idgen\_portable\_%' OR p.proname IN ('base62_encode',
                                  'base62_decode', 'uuid_to_base62', 'base62_to_uuid', 'snowflake_next',
                                  'snowflake_timestamp', 'snowflake_worker_id', 'snowflake_sequence',
                                  'snowflake_from_timestamp', 'uuid_v7', 'uuid_v7_timestamp', 'uuid_v7_boundary'))
              ORDER BY 1 LOOP
    EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', tbl);
  END LOOP;
  -- No portable id from here on. The portable snowflake_next() takes no lock on its fast path,
  -- but only while its seqlock is even: with the jump lock held and the seqlock odd, every call
  -- waits for the lock (a call that read the seqlock even before drew its value before, so the
  -- state read below covers it). An idgen_portable.sql of before the seqlock took
  -- idgen_portable_snowflake_lock for each id, and an older one this advisory lock.
  IF to_regclass(quote_ident(s) || '.idgen_portable_snowflake_jump_lock') IS NOT NULL THEN
    EXECUTE format('LOCK TABLE %I.idgen_portable_snowflake_jump_lock IN SHARE UPDATE EXCLUSIVE MODE', s);
    PERFORM setval(seqlock, pg_sequence_last_value(seqlock) + 1)
       FROM to_regclass(quote_ident(s) || '.idgen_portable_snowflake_seqlock') seqlock
      WHERE pg_sequence_last_value(seqlock) % 2 = 0;
  ELSIF to_regclass(quote_ident(s) || '.idgen_portable_snowflake_lock') IS NOT NULL THEN
    EXECUTE format('LOCK TABLE %I.idgen_portable_snowflake_lock IN SHARE UPDATE EXCLUSIVE MODE', s);
  ELSE
    PERFORM pg_advisory_xact_lock(1768187749,
      to_regclass(quote_ident(s) || '.idgen_portable_snowflake_state')::oid::bigint::integer);
  END IF;
  EXECUTE format('SELECT last_value FROM %I.idgen_portable_snowflake_state', s) INTO state_c;
  -- the last millisecond of the last tick the portable generator used
  last_ms := ((state_c >> layout_shift) + 1) * layout_unit - 1 + installed.epoch;
  WHILE floor(extract(epoch FROM clock_timestamp()) * 1000) <= last_ms LOOP
    IF clock_timestamp() > deadline THEN
      RAISE EXCEPTION 'the clock is % ms behind the last id the portable snowflake_next() issued',
        last_ms - floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint + 1
        USING ERRCODE = 'object_not_in_prerequisite_state',
              HINT = 'Check the system clock (NTP), or run this again once it has passed that id; nothing was changed.';
    END IF;
    PERFORM pg_sleep(0.01);
  END LOOP;
END
$check$;

CREATE SCHEMA idgen_portable_retired;
COMMENT ON SCHEMA idgen_portable_retired IS
  'idgen portable edition, replaced by the extension: kept while indexes, generated columns or views use it';

DO $retire$
DECLARE
  f regprocedure;
  lock_table text;
  member record;
BEGIN
  -- The pg_tle edition (CREATE EXTENSION idgen_portable): its members become loose objects, as
  -- the psql edition's are, all but its configuration table and the two functions that write
  -- it, which stay where they are and go with the extension (DROP EXTENSION idgen_portable,
  -- below, once idgen's generator runs).
  FOR member IN SELECT pg_catalog.upper(o.type) AS type, o.identity
                  FROM pg_depend d, LATERAL pg_identify_object(d.classid, d.objid, d.objsubid) o
                 WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
                   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'idgen_portable'
                                        AND extnamespace = current_schema()::regnamespace)
                   AND NOT (d.classid = 'pg_class'::regclass AND d.objid = to_regclass(quote_ident(current_schema())
                                                                             || '.idgen_portable_config'))
                   -- a table's row type and its array (members of their own on 18) follow the table
                   AND NOT (d.classid = 'pg_type'::regclass
                            AND EXISTS (SELECT FROM pg_type t LEFT JOIN pg_type e ON e.oid = t.typelem
                                         WHERE t.oid = d.objid AND (t.typrelid <> 0 OR e.typrelid <> 0)))
                   AND NOT (d.classid = 'pg_proc'::regclass AND d.objid IN (
                              to_regprocedure(quote_ident(current_schema()) || '.idgen_portable_config_apply()'),
                              to_regprocedure(quote_ident(current_schema())
                                              || '.idgen_portable_configure(integer, bigint, text, integer)'))) LOOP
    EXECUTE format('ALTER EXTENSION idgen_portable DROP %s %s', member.type, member.identity);
  END LOOP;
  FOR f IN SELECT p.oid FROM pg_proc p
            WHERE p.pronamespace = current_schema()::regnamespace
              AND (p.proname LIKE 'idgen\_portable\_%'
                   OR p.proname IN ('base62_encode', 'base62_decode', 'uuid_to_base62', 'base62_to_uuid',
                                    'snowflake_next', 'snowflake_timestamp', 'snowflake_worker_id',
                                    'snowflake_sequence', 'snowflake_from_timestamp', 'uuid_v7',
                                    'uuid_v7_timestamp', 'uuid_v7_boundary'))
              AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                                                        AND d.deptype = 'e') LOOP
    EXECUTE format('ALTER FUNCTION %s SET SCHEMA idgen_portable_retired', f);
  END LOOP;
  -- A portable call waiting for the lock then finds no table of that name (LOCK TABLE looks
  -- the name up again after a wait): an error, no id. This transaction holds the lock, so it
  -- waits only for a session that holds a lock on the table without calling snowflake_next():
  -- 10 s at most, then it fails and changes nothing. (The state sequence moves after the
  -- commit: writers that wait for this transaction may hold a lock on it.)
  FOR lock_table IN SELECT t FROM unnest(ARRAY['idgen_portable_snowflake_jump_lock', 'idgen_portable_snowflake_lock']) t
                     WHERE to_regclass(quote_ident(current_schema()) || '.' || t) IS NOT NULL LOOP
    BEGIN
      PERFORM set_config('lock_timeout', '10s', true);
      EXECUTE format('ALTER TABLE %I.%I SET SCHEMA idgen_portable_retired', current_schema(), lock_table);
      PERFORM set_config('lock_timeout', '0', true);
    EXCEPTION WHEN lock_not_available THEN
      RAISE EXCEPTION 'another session holds a lock on %.%', quote_ident(current_schema()), lock_table
        USING ERRCODE = 'lock_not_available',
              HINT = 'Find it in pg_locks, end it, and run this again; nothing was changed.';
    END;
  END LOOP;
  -- The retired generator issues no more ids (the extension's has the worker id now).
  CREATE OR REPLACE FUNCTION idgen_portable_retired.snowflake_next() RETURNS bigint
  LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE AS $fn$
  BEGIN
    RAISE EXCEPTION 'the portable snowflake_next() was retired by switch_to_extension.sql'
      USING ERRCODE = 'object_not_in_prerequisite_state',
            HINT = 'Call the extension''s snowflake_next() (in the schema the portable edition was in).';
  END
  $fn$;
  -- their calls of one another follow them
  FOR f IN SELECT p.oid FROM pg_proc p
            WHERE p.pronamespace = 'idgen_portable_retired'::regnamespace AND p.prosrc ~ 'idgen_portable_\w+\(' LOOP
    EXECUTE replace(pg_get_functiondef(f), quote_ident(current_schema()) || '.idgen_portable_',
                    'idgen_portable_retired.idgen_portable_');
  END LOOP;
END
$retire$;

SELECT format('CREATE EXTENSION idgen SCHEMA %I', current_schema()) \gexec

-- The extension's generator must run before anything is committed: idgen.worker_id = -1 (unset)
-- or a library that is not preloaded passes the checks above but issues no id.
DO $first$
DECLARE
  first_id bigint;
  state text;
  message text;
  hint text;
BEGIN
  BEGIN
    EXECUTE format('SELECT %I.snowflake_next()', current_schema()) INTO first_id;
  EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT;
    RAISE EXCEPTION 'the extension''s snowflake_next() cannot run: %', message
      USING ERRCODE = state,
            HINT = concat_ws(' ', nullif(hint, ''),
                             'Nothing was changed: the portable edition stays in place; run this again once that is fixed.');
  END;
  RAISE NOTICE 'the extension''s snowflake_next() works: its first id is %', first_id;
END
$first$;

DO $repoint$
DECLARE
  d record;
  expr text;
  left_over text;
BEGIN
  -- With the search path at this schema alone, the retired functions print qualified.
  PERFORM set_config('search_path', quote_ident(current_schema()), true);
  FOR d IN SELECT DISTINCT ad.adrelid::regclass AS tbl, a.attname, ad.adbin, ad.adrelid
             FROM pg_attrdef ad
             JOIN pg_attribute a ON a.attrelid = ad.adrelid AND a.attnum = ad.adnum AND a.attgenerated = ''
             JOIN pg_depend dep ON dep.classid = 'pg_attrdef'::regclass AND dep.objid = ad.oid
                               AND dep.refclassid = 'pg_proc'::regclass
             JOIN pg_proc p ON p.oid = dep.refobjid AND p.pronamespace = 'idgen_portable_retired'::regnamespace LOOP
    expr := replace(pg_get_expr(d.adbin, d.adrelid), 'idgen_portable_retired.', '');
    EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT %s', d.tbl, d.attname, expr);
    RAISE NOTICE 'column % of %: DEFAULT %', d.attname, d.tbl, expr;
  END LOOP;
  -- the pg_tle edition: the extension, now only its configuration table (its functions, moved
  -- into idgen_portable_retired with the others, go with that schema)
  IF EXISTS (SELECT FROM pg_extension WHERE extname = 'idgen_portable' AND extnamespace = current_schema()::regnamespace) THEN
    DROP EXTENSION idgen_portable;
    RAISE NOTICE 'the pg_tle extension idgen_portable is dropped; pgtle.uninstall_extension(''idgen_portable'') removes its stored versions';
  END IF;
  SELECT string_agg(DISTINCT pg_describe_object(dep.classid, dep.objid, dep.objsubid), ', ') INTO left_over
    FROM pg_depend dep
    JOIN pg_proc p ON dep.refclassid = 'pg_proc'::regclass AND p.oid = dep.refobjid
   WHERE p.pronamespace = 'idgen_portable_retired'::regnamespace
     AND NOT (dep.classid = 'pg_proc'::regclass
              AND dep.objid IN (SELECT oid FROM pg_proc WHERE pronamespace = 'idgen_portable_retired'::regnamespace));
  IF left_over IS NULL THEN
    DROP SCHEMA idgen_portable_retired CASCADE;
  ELSE
    RAISE NOTICE 'idgen_portable_retired stays: % use its functions (their results are the extension''s); re-create them with the extension''s functions, then DROP SCHEMA idgen_portable_retired CASCADE', left_over;
  END IF;
END
$repoint$;

COMMIT;

-- After the commit: the portable edition's state sequence (and its seqlock) follows its functions into
-- idgen_portable_retired, or is dropped if that schema was. A transaction still open that drew
-- a portable id holds a lock on it: then it stays where it is (a NOTICE says so), unused, to
-- move or drop later.
DO $state$
DECLARE
  s text := current_schema();
  retired boolean := to_regnamespace('idgen_portable_retired') IS NOT NULL;
  obj record;
BEGIN
  PERFORM set_config('lock_timeout', '5s', true);
  FOR obj IN SELECT c.oid::regclass AS rel, CASE c.relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END AS kind
               FROM pg_class c
              WHERE c.relnamespace = s::regnamespace
                AND c.relname IN ('idgen_portable_snowflake_state', 'idgen_portable_snowflake_seqlock') LOOP
    BEGIN
      IF retired THEN
        EXECUTE format('ALTER %s %s SET SCHEMA idgen_portable_retired', obj.kind, obj.rel);
      ELSE
        EXECUTE format('DROP %s %s', obj.kind, obj.rel);
      END IF;
    EXCEPTION WHEN lock_not_available THEN
      RAISE NOTICE '% is still in use: left in place, unused; drop it later', obj.rel;
    END;
  END LOOP;
END
$state$;
