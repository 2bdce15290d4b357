-- Shared by every file of the suite: the extension, and helpers that show an error's SQLSTATE,
-- message and HINT (psql's verbose mode would also print source locations), or its SQLSTATE
-- alone where the message is PostgreSQL's own and worded differently across versions.
CREATE EXTENSION IF NOT EXISTS idgen;
CREATE OR REPLACE FUNCTION public.error_of(query text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE state text; msg text; hint text;
BEGIN
  EXECUTE query;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT;
  RETURN state || ': ' || msg || coalesce(E'\nHINT: ' || nullif(hint, ''), '');
END $$;
CREATE OR REPLACE FUNCTION public.sqlstate_of(query text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE query;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE;
END $$;
