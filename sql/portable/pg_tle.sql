-- idgen_portable as a trusted-language extension (pg_tle): what the extension's script adds to the
-- shared body of idgen_portable.sql. benches/idgen_harness/tle.py writes the script from the two
-- (idgen_portable.sql without its psql-only regions, then this file); `make package` puts it in
-- target/dist/. Installed by a role with pgtle_admin, no superuser:
--
--   SELECT pgtle.install_extension('idgen_portable', '<version>', '<description>', $tle$ <the script> $tle$);
--   CREATE EXTENSION idgen_portable SCHEMA keys;
--   SELECT keys.idgen_portable_configure(worker_id => 3);      -- epoch, layout, max_clock_wait too
--   GRANT EXECUTE ON FUNCTION keys.snowflake_next() TO app;
--
-- An extension's script takes no variables, so the settings live in a one-row table,
-- idgen_portable_config, that only the extension's owner can write: a trigger on it checks them
-- and writes snowflake_next() with them as constants (idgen_portable_build()), as the psql
-- edition does at install; no session, role or database setting changes them. Until a row is
-- there, snowflake_next() raises 55000 with a HINT naming idgen_portable_configure().
--
-- pg_dump dumps the row and the state sequence's value (pg_extension_config_dump), after the
-- CREATE EXTENSION that makes the unconfigured generator: the row's restore fires the trigger,
-- which writes the configured one again, and the state's setval follows, so the restored
-- generator resumes where the dumped one was, above every id the dump holds.
--
-- The script is also the update script (ALTER EXTENSION idgen_portable UPDATE): every object is
-- made with IF NOT EXISTS or OR REPLACE, the state is kept, and the generator is written again
-- from the stored row at the end.

CREATE TABLE IF NOT EXISTS idgen_portable_config (
  one boolean PRIMARY KEY DEFAULT true CHECK (one),  -- a single row
  worker_id integer NOT NULL,
  epoch bigint NOT NULL DEFAULT 1288834974657,
  layout text NOT NULL DEFAULT 'twitter',
  max_clock_wait integer NOT NULL DEFAULT 1000
);
COMMENT ON TABLE idgen_portable_config IS
  'idgen portable edition (pg_tle): the settings snowflake_next() is written with; change them with idgen_portable_configure()';
REVOKE ALL ON TABLE idgen_portable_config FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('idgen_portable_config', '');
SELECT pg_catalog.pg_extension_config_dump('idgen_portable_snowflake_state', '');

-- The row's trigger: its settings checked and written into snowflake_next(); an error refuses
-- the row and changes nothing. Another layout than the installed one only while the generator
-- is unconfigured (no worker id), when it has issued no id: the first configuration (an
-- unconfigured psql install whose state had issued ids is not taken in, pg_tle_adopt.sql), and
-- a restore's row, whichever way pg_restore orders it with the state's value (an INSERT). An
-- UPDATE while unconfigured (a restore without triggers) keeps the row's layout unless the state
-- is untouched.
CREATE OR REPLACE FUNCTION idgen_portable_config_apply() RETURNS trigger
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF TG_OP = 'DELETE' OR TG_OP = 'TRUNCATE' THEN
    RAISE EXCEPTION 'idgen_portable: its configuration cannot be removed'
      USING ERRCODE = 'object_not_in_prerequisite_state',
            DETAIL = 'snowflake_next() keeps the settings it was written with; without the row a dump would restore it unconfigured.',
            HINT = 'Change it with idgen_portable_configure(), or DROP EXTENSION idgen_portable.';
  END IF;
  NEW.layout := @extschema@.idgen_portable_build((pg_catalog.parse_ident('@extschema@'))[1], NEW.worker_id::pg_catalog.text,
    NEW.epoch::pg_catalog.text, NEW.layout, NEW.max_clock_wait::pg_catalog.text, NULL, 'pg_tle',
    (SELECT s.worker_id IS NULL FROM @extschema@.idgen_portable_settings() s)
      AND (TG_OP OPERATOR(pg_catalog.=) 'INSERT' OR NEW.layout OPERATOR(pg_catalog.=) OLD.layout
           OR pg_catalog.pg_sequence_last_value('@extschema@.idgen_portable_snowflake_state'::pg_catalog.regclass) IS NULL));
  RETURN NEW;
END
$fn$;
REVOKE ALL ON FUNCTION idgen_portable_config_apply() FROM PUBLIC;
DROP TRIGGER IF EXISTS idgen_portable_config_apply ON idgen_portable_config;
CREATE TRIGGER idgen_portable_config_apply BEFORE INSERT OR UPDATE OR DELETE ON idgen_portable_config
  FOR EACH ROW EXECUTE FUNCTION idgen_portable_config_apply();
DROP TRIGGER IF EXISTS idgen_portable_config_keep ON idgen_portable_config;
CREATE TRIGGER idgen_portable_config_keep BEFORE TRUNCATE ON idgen_portable_config
  FOR EACH STATEMENT EXECUTE FUNCTION idgen_portable_config_apply();

-- The settings, given by name; those left out keep their value (or take the default, the first
-- time, when worker_id is needed). Returns the row as stored (the layout as idgen writes it).
-- Only the extension's owner (and superusers) may call it: it writes the owner's table.
CREATE OR REPLACE FUNCTION idgen_portable_configure(worker_id integer DEFAULT NULL, epoch bigint DEFAULT NULL,
    layout text DEFAULT NULL, max_clock_wait integer DEFAULT NULL) RETURNS @extschema@.idgen_portable_config
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  r @extschema@.idgen_portable_config;
BEGIN
  UPDATE @extschema@.idgen_portable_config c
     SET worker_id = coalesce($1, c.worker_id), epoch = coalesce($2, c.epoch), layout = coalesce($3, c.layout),
         max_clock_wait = coalesce($4, c.max_clock_wait)
  RETURNING c.* INTO r;
  IF NOT FOUND THEN
    IF $1 IS NULL THEN
      RAISE EXCEPTION 'idgen_portable_configure(): the first configuration needs a worker id'
        USING ERRCODE = 'invalid_parameter_value',
              HINT = 'Pass worker_id => <0-1023>, unique per server that writes ids.';
    END IF;
    INSERT INTO @extschema@.idgen_portable_config AS c (worker_id, epoch, layout, max_clock_wait)
    VALUES ($1, coalesce($2, 1288834974657), coalesce($3, 'twitter'), coalesce($4, 1000))
    RETURNING c.* INTO r;
  END IF;
  RETURN r;
END
$fn$;
REVOKE ALL ON FUNCTION idgen_portable_configure(integer, bigint, text, integer) FROM PUBLIC;

-- The generator: on CREATE EXTENSION the unconfigured one (snowflake_next() is not there yet), the
-- installer's alone until granted (GRANT EXECUTE ON FUNCTION snowflake_next() TO the writers; the
-- grants are kept by updates and by pg_dump). Over an adopted psql edition (pg_tle_adopt.sql),
-- its settings become the row: its worker id and epoch (idgen_portable_settings()), its layout,
-- and the max_clock_wait written into its snowflake_next(). On an update, written again from
-- the row.
DO $generator$
DECLARE
  adopted record;
BEGIN
  IF pg_catalog.to_regprocedure('@extschema@.snowflake_next()') IS NULL THEN
    PERFORM @extschema@.idgen_portable_build((pg_catalog.parse_ident('@extschema@'))[1], '', '1288834974657',
                                             'twitter', '1000', NULL, 'pg_tle', false);
    REVOKE ALL ON FUNCTION @extschema@.snowflake_next() FROM PUBLIC;
  ELSIF NOT EXISTS (SELECT FROM @extschema@.idgen_portable_config) THEN
    IF pg_catalog.to_regprocedure('@extschema@.idgen_portable_installed_layout()') IS NULL THEN
      RAISE EXCEPTION 'idgen_portable: the psql edition in schema @extschema@ is of a release before 0.3.0'
        USING ERRCODE = 'object_not_in_prerequisite_state',
              HINT = 'Run this release''s idgen_portable.sql over it first (psql -v worker_id=<its worker id> ...), then create the extension; nothing was changed.';
    END IF;
    IF (SELECT s.worker_id IS NULL FROM @extschema@.idgen_portable_settings() s)
       AND pg_catalog.pg_sequence_last_value('@extschema@.idgen_portable_snowflake_state'::pg_catalog.regclass) IS NOT NULL THEN
      RAISE EXCEPTION 'idgen_portable: the psql edition in schema @extschema@ has issued ids but has no worker id now'
        USING ERRCODE = 'object_not_in_prerequisite_state',
              DETAIL = 'Its state counts ticks of the layout it was installed with; taken in without its settings, another layout could be configured over it.',
              HINT = 'Run idgen_portable.sql over it again with -v worker_id=<its worker id>, then create the extension; nothing was changed.';
    END IF;
    SELECT s.worker_id, s.epoch, @extschema@.idgen_portable_installed_layout() AS layout,
           pg_catalog.substring(p.prosrc, 'longer than max_clock_wait \((\d+) ms\)')::integer AS max_clock_wait
      INTO adopted
      FROM @extschema@.idgen_portable_settings() s, pg_catalog.pg_proc p
     WHERE p.oid OPERATOR(pg_catalog.=) '@extschema@.snowflake_next()'::pg_catalog.regprocedure;
    IF adopted.worker_id IS NOT NULL THEN
      INSERT INTO @extschema@.idgen_portable_config (worker_id, epoch, layout, max_clock_wait)
      VALUES (adopted.worker_id, adopted.epoch, adopted.layout, adopted.max_clock_wait);
    END IF;
  END IF;
END
$generator$;
UPDATE idgen_portable_config SET worker_id = worker_id;
