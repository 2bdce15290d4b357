-- idgen_portable (pg_tle): what its script does first, before the shared body of
-- idgen_portable.sql. CREATE EXTENSION idgen_portable in a schema where idgen_portable.sql was run
-- takes that install's objects in as they are, by ALTER EXTENSION ... ADD: their OIDs stay, so
-- every DEFAULT, index, generated column and view that calls them keeps working, and the
-- generator's state sequence, with the ids it counted, becomes the extension's. (The shared body
-- then replaces the functions, which PostgreSQL allows an extension's script only for its own
-- members.) Use sql/portable/move_to_pg_tle.sql, which also keeps snowflake_next()'s grants: they
-- are taken away here, before the function is added, else they would be recorded as the
-- extension's own privileges and pg_dump would leave them out; it grants them again after.
-- The settings the psql edition was installed with become the configuration's row (pg_tle.sql).
DO $adopt$
DECLARE
  o record;
  revoke text;
BEGIN
  IF pg_catalog.to_regprocedure('@extschema@.idgen_portable_settings()') IS NULL
     OR EXISTS (SELECT FROM pg_catalog.pg_depend d  -- an update: they are members already
                 WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
                   AND d.objid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure('@extschema@.idgen_portable_settings()')
                   AND d.deptype OPERATOR(pg_catalog.=) 'e') THEN
    RETURN;
  END IF;
  -- snowflake_next()'s grants taken away before it is added (see above)
  SELECT pg_catalog.string_agg(CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                                    ELSE a.grantee::pg_catalog.regrole::pg_catalog.text END, ', ')
    INTO revoke
    FROM pg_catalog.pg_proc p, LATERAL pg_catalog.aclexplode(p.proacl) a
   WHERE p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure('@extschema@.snowflake_next()')
     AND a.grantee OPERATOR(pg_catalog.<>) p.proowner;
  IF revoke IS NOT NULL THEN
    EXECUTE 'REVOKE ALL ON FUNCTION @extschema@.snowflake_next() FROM ' OPERATOR(pg_catalog.||) revoke;
    RAISE WARNING 'idgen_portable: EXECUTE on @extschema@.snowflake_next() taken from % while it is taken in', revoke
      USING HINT = 'sql/portable/move_to_pg_tle.sql grants it again in the same transaction; run alone, GRANT EXECUTE ON FUNCTION @extschema@.snowflake_next() TO those roles before committing.';
  END IF;
  FOR o IN SELECT c.oid, pg_catalog.format('%s @extschema@.%I', CASE c.relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END,
                                           c.relname) AS what, c.relowner AS owner
             FROM pg_catalog.pg_class c
            WHERE c.relnamespace OPERATOR(pg_catalog.=) '@extschema@'::pg_catalog.regnamespace
              AND c.relname IN ('idgen_portable_snowflake_state', 'idgen_portable_snowflake_seqlock',
                                'idgen_portable_snowflake_jump_lock', 'idgen_portable_snowflake_lock')
           UNION ALL
           SELECT p.oid, 'FUNCTION ' OPERATOR(pg_catalog.||) p.oid::pg_catalog.regprocedure::pg_catalog.text, p.proowner
             FROM pg_catalog.pg_proc p
            WHERE p.pronamespace OPERATOR(pg_catalog.=) '@extschema@'::pg_catalog.regnamespace
              AND (p.proname IN ('base62_encode', 'base62_decode', 'uuid_to_base62', 'base62_to_uuid',
                                 'snowflake_next', 'snowflake_timestamp', 'snowflake_worker_id', 'snowflake_sequence',
                                 'snowflake_from_timestamp', 'uuid_v7', 'uuid_v7_timestamp', 'uuid_v7_boundary')
                   OR p.proname LIKE 'idgen\_portable\_%') LOOP
    IF o.owner OPERATOR(pg_catalog.<>) (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) current_user) THEN
      RAISE EXCEPTION 'idgen_portable: % belongs to %, not to %', o.what, o.owner::pg_catalog.regrole, current_user
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'Create the extension as the role that ran idgen_portable.sql in that schema; nothing was changed.';
    END IF;
    EXECUTE 'ALTER EXTENSION idgen_portable ADD ' OPERATOR(pg_catalog.||) o.what;
  END LOOP;
END
$adopt$;
