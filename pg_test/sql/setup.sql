-- Shared by every file of the suite: the extension, and a helper that shows an error's
-- SQLSTATE, message and HINT (psql's verbose mode would also print source locations).
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
