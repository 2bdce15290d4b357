-- idgen portable edition: from the psql install (idgen_portable.sql) to the pg_tle extension, in
-- one transaction, with writers running: the installed objects become the extension's members as
-- they are (their OIDs, the generator's state), its settings the extension's configuration, and
-- the roles that could call snowflake_next() still can.
--
--   psql -f idgen_portable--<version>.pgtle.sql                    (once per database: stores it)
--   psql -v schema=keys -f sql/portable/move_to_pg_tle.sql         (or the current schema)
--
-- Run it as the role that installed the psql edition, with pgtle_admin. Writers are not stopped:
-- the calls made during the move use the psql edition's snowflake_next(), those after it the
-- extension's, both drawing from the same state.

\set ON_ERROR_STOP on
\if :{?schema}
SELECT pg_catalog.set_config('search_path', pg_catalog.quote_ident(:'schema') || ', pg_temp', false) AS search_path \gset
\endif

BEGIN;
-- who may call snowflake_next() now: the extension's script takes these grants away before it
-- takes the function in (else they would count as the extension's own and pg_dump would leave
-- them out), and they are made again below, after it
CREATE TEMPORARY TABLE idgen_portable_move_grants ON COMMIT DROP AS
SELECT pg_catalog.format('GRANT EXECUTE ON FUNCTION %I.snowflake_next() TO %s%s', pg_catalog.current_schema(),
                         CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                              ELSE a.grantee::pg_catalog.regrole::pg_catalog.text END,
                         CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END) AS grant_again
  FROM pg_catalog.pg_proc p, LATERAL pg_catalog.aclexplode(p.proacl) a
 WHERE p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure(pg_catalog.quote_ident(pg_catalog.current_schema()) || '.snowflake_next()')
   AND a.grantee OPERATOR(pg_catalog.<>) p.proowner AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE';
SELECT pg_catalog.format('CREATE EXTENSION idgen_portable SCHEMA %I', pg_catalog.current_schema()) \gexec
SELECT grant_again FROM pg_temp.idgen_portable_move_grants \gexec
COMMIT;
