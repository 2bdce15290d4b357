-- idgen 0.2.0 -> 0.3.0 (ALTER EXTENSION idgen UPDATE). psql refuses to run it outside it:
\echo Use "ALTER EXTENSION idgen UPDATE TO '0.3.0'" to load this file. \quit

-- snowflake_convert_column() runs snowflake_next() once before it makes it a column's DEFAULT,
-- and refuses (with that error's SQLSTATE and HINT) when it cannot run here: 0.2.0 committed a
-- DEFAULT that failed every INSERT on a server without idgen preloaded or without a worker id.
-- The same text as src/sql/convert.sql.
CREATE OR REPLACE FUNCTION snowflake_convert_column(tbl regclass, col name DEFAULT 'id', drop_sequence boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $convert$
DECLARE
  rel record;
  att record;
  seq regclass;
  seq_def record;
  seq_state record;
  default_expr text;
  first_id bigint;
  max_id bigint;
  seq_name text;
  w_rels regclass[];
  w_names name[];
  w_nums int2[];
  widen record;
  view_name text;
  e_state text;
  e_message text;
  e_hint text;
  distributed boolean := false;
BEGIN
  IF tbl IS NULL OR col IS NULL OR drop_sequence IS NULL THEN
    RAISE EXCEPTION 'snowflake_convert_column: the table, the column and drop_sequence must not be null'
      USING ERRCODE = 'null_value_not_allowed',
            HINT = 'Name the table, e.g. snowflake_convert_column(''orders''); the column defaults to id.';
  END IF;
  SELECT c.relkind, c.relispartition INTO rel FROM pg_class c WHERE c.oid = tbl;
  IF rel.relkind = 'p' OR rel.relispartition
     OR EXISTS (SELECT FROM pg_inherits WHERE inhparent = tbl OR inhrelid = tbl) THEN
    RAISE EXCEPTION 'snowflake_convert_column: % is partitioned, a partition, or in an inheritance tree', tbl
      USING ERRCODE = 'feature_not_supported',
            HINT = 'Convert such a table by hand: ALTER TABLE ... ALTER COLUMN ... SET DEFAULT snowflake_next() on the parent, after widening the column to bigint.';
  ELSIF rel.relkind <> 'r' THEN
    RAISE EXCEPTION 'snowflake_convert_column: % is not a table', tbl
      USING ERRCODE = 'wrong_object_type',
            HINT = 'Pass the table that holds the key; a view''s keys come from its table.';
  END IF;

  -- A Citus distributed table: Citus refuses to change its distribution column's DEFAULT, and its
  -- unique indexes hold the distribution column, so the key is converted while the table is local
  -- (docs/citus.md). Read through EXECUTE: without Citus the catalog does not exist.
  IF to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
    EXECUTE 'SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition WHERE logicalrelid = $1 AND partmethod <> ''n'')'
      INTO distributed USING tbl;
  END IF;
  IF distributed THEN
    RAISE EXCEPTION 'snowflake_convert_column: % is a distributed Citus table', tbl
      USING ERRCODE = 'feature_not_supported',
            DETAIL = 'Its key column is converted while the table is local: its distribution column''s DEFAULT cannot change, and its unique indexes include the distribution column. Nothing was changed.',
            HINT = format('Make it local, convert it, distribute it again: SELECT undistribute_table(%L); SELECT snowflake_convert_column(%L, %L); then create_distributed_table().', tbl::text, tbl::text, col);
  END IF;

  -- Nothing may insert between the check of the existing ids and the switch of the DEFAULT.
  EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', tbl);

  SELECT a.attnum, a.atttypid::regtype AS typ, a.attidentity INTO att
    FROM pg_attribute a WHERE a.attrelid = tbl AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'snowflake_convert_column: column "%" of % does not exist', col, tbl
      USING ERRCODE = 'undefined_column', HINT = 'Name the key column: snowflake_convert_column(''orders'', ''order_id'').';
  END IF;
  IF att.typ NOT IN ('smallint'::regtype, 'integer'::regtype, 'bigint'::regtype) THEN
    RAISE EXCEPTION 'snowflake_convert_column: column "%" of % is %, not an integer', col, tbl, att.typ
      USING ERRCODE = 'datatype_mismatch',
            HINT = 'Snowflake ids are bigint. A uuid key moves to uuid_v7() with uuid_v7_convert_column().';
  END IF;
  IF NOT EXISTS (SELECT FROM pg_index i WHERE i.indrelid = tbl AND i.indisunique AND i.indnatts = 1
                   AND i.indkey[0] = att.attnum AND i.indpred IS NULL AND i.indexprs IS NULL) THEN
    RAISE EXCEPTION 'snowflake_convert_column: column "%" of % is not a key', col, tbl
      USING ERRCODE = 'object_not_in_prerequisite_state',
            DETAIL = 'It has no single-column PRIMARY KEY or UNIQUE constraint, so nothing stops a duplicate id.',
            HINT = 'Convert a key column, or add the constraint first.';
  END IF;

  default_expr := pg_get_expr((SELECT adbin FROM pg_attrdef WHERE adrelid = tbl AND adnum = att.attnum), tbl);
  IF att.attidentity <> '' THEN
    seq := pg_get_serial_sequence(tbl::text, col)::regclass;
  ELSIF default_expr ~ '^nextval\(''.*''::regclass\)$' THEN
    seq := (SELECT d.refobjid::regclass FROM pg_attrdef ad
              JOIN pg_depend d ON d.classid = 'pg_attrdef'::regclass AND d.objid = ad.oid
                               AND d.refclassid = 'pg_class'::regclass
              JOIN pg_class s ON s.oid = d.refobjid AND s.relkind = 'S'
             WHERE ad.adrelid = tbl AND ad.adnum = att.attnum);
  ELSIF default_expr ~ '(^|\.)snowflake_next\(\)$' THEN
    RAISE NOTICE 'column "%" of % already defaults to snowflake_next(): nothing to do', col, tbl;
    RETURN;
  END IF;
  IF seq IS NULL THEN
    RAISE EXCEPTION 'snowflake_convert_column: column "%" of % takes its values from no sequence', col, tbl
      USING ERRCODE = 'object_not_in_prerequisite_state',
            DETAIL = format('Its default is %s.', coalesce(default_expr, 'none')),
            HINT = 'It converts serial, bigserial, identity and DEFAULT nextval(...) columns; set DEFAULT snowflake_next() by hand for any other.';
  END IF;

  -- The new DEFAULT must run before it is committed (idgen preloaded, a worker id set), or every
  -- INSERT after the commit would fail. Its first id is also the bound: every id issued from now
  -- on is above it.
  BEGIN
    first_id := @extschema@.snowflake_next();
  EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT, e_hint = PG_EXCEPTION_HINT;
    RAISE EXCEPTION 'snowflake_convert_column: snowflake_next() cannot run on this server, so it cannot be the DEFAULT of column "%" of %: %', col, tbl, e_message
      USING ERRCODE = e_state,
            DETAIL = 'Nothing was changed.',
            HINT = coalesce(nullif(e_hint, ''), 'Make snowflake_next() work here first (SELECT snowflake_next();), then convert.');
  END;
  EXECUTE format('SELECT max(%I) FROM %s', col, tbl) INTO max_id;
  IF max_id >= first_id THEN
    RAISE EXCEPTION 'snowflake_convert_column: column "%" of % holds ids up to %, at or above the first snowflake id %', col, tbl, max_id, first_id
      USING ERRCODE = 'object_not_in_prerequisite_state',
            DETAIL = 'New rows could be given ids that the table already holds.',
            HINT = 'Snowflake ids count milliseconds from idgen.epoch: keep the sequence, or renumber those rows first.';
  END IF;

  -- The columns to widen to bigint: this one, and every column of a foreign key that references
  -- it (PostgreSQL recurses from a partitioned referencing table to its partitions).
  IF att.typ <> 'bigint'::regtype THEN
    SELECT array_agg(w.rel), array_agg(w.attname), array_agg(w.attnum) INTO w_rels, w_names, w_nums
      FROM (SELECT tbl AS rel, col AS attname, att.attnum AS attnum
            UNION
            SELECT con.conrelid::regclass, a.attname, a.attnum
              FROM pg_constraint con
              CROSS JOIN LATERAL unnest(con.confkey, con.conkey) AS k(referenced, referencing)
              JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.referencing
             WHERE con.contype = 'f' AND con.confrelid = tbl AND con.conparentid = 0
               AND k.referenced = att.attnum
               AND a.atttypid IN ('smallint'::regtype, 'integer'::regtype)) w;
    FOR widen IN SELECT DISTINCT u.rel FROM unnest(w_rels) AS u(rel) WHERE u.rel <> tbl ORDER BY 1 LOOP
      EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', widen.rel);
    END LOOP;
    -- ALTER ... TYPE cannot rewrite a view or rule that reads the column: say which, up front.
    SELECT format('%s (on column "%s" of %s)', r.ev_class::regclass, u.attname, u.rel) INTO view_name
      FROM unnest(w_rels, w_names, w_nums) AS u(rel, attname, attnum)
      JOIN pg_depend d ON d.refclassid = 'pg_class'::regclass AND d.refobjid = u.rel AND d.refobjsubid = u.attnum
                      AND d.classid = 'pg_rewrite'::regclass
      JOIN pg_rewrite r ON r.oid = d.objid
     WHERE r.ev_class <> u.rel
     LIMIT 1;
    IF view_name IS NOT NULL THEN
      RAISE EXCEPTION 'snowflake_convert_column: widening % to bigint needs a rewrite that view % blocks', tbl, view_name
        USING ERRCODE = 'feature_not_supported',
              HINT = 'In one transaction: drop the view, call snowflake_convert_column(), create the view again.';
    END IF;
  END IF;

  -- The switch. An identity's sequence goes with the identity: to keep it, read it first.
  IF att.attidentity <> '' AND NOT drop_sequence THEN
    SELECT s.seqtypid::regtype AS typ, s.seqstart, s.seqincrement, s.seqmin, s.seqmax, s.seqcache, s.seqcycle
      INTO seq_def FROM pg_sequence s WHERE s.seqrelid = seq;
    EXECUTE format('SELECT last_value, is_called FROM %s', seq) INTO seq_state;
    seq_name := seq::text;
  END IF;
  IF att.attidentity <> '' THEN
    EXECUTE format('ALTER TABLE %s ALTER COLUMN %I DROP IDENTITY', tbl, col);
  ELSE
    EXECUTE format('ALTER TABLE %s ALTER COLUMN %I DROP DEFAULT', tbl, col);
  END IF;
  FOR widen IN SELECT u.rel, string_agg(format('ALTER COLUMN %I TYPE bigint', u.attname), ', ' ORDER BY u.attnum) AS clauses
                 FROM unnest(w_rels, w_names, w_nums) AS u(rel, attname, attnum)
                GROUP BY u.rel ORDER BY (u.rel = tbl) DESC, u.rel LOOP
    EXECUTE format('ALTER TABLE %s %s', widen.rel, widen.clauses);
  END LOOP;
  EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT @extschema@.snowflake_next()', tbl, col);

  IF drop_sequence AND att.attidentity = '' THEN
    EXECUTE format('DROP SEQUENCE %s', seq);
  ELSIF NOT drop_sequence AND att.attidentity <> '' THEN
    -- PostgreSQL drops an identity's sequence with the identity: keep a plain one of the same
    -- name and state, for whatever else calls nextval() on it.
    EXECUTE format('CREATE SEQUENCE %s AS %s INCREMENT BY %s MINVALUE %s MAXVALUE %s START WITH %s CACHE %s %s',
                   seq_name, seq_def.typ, seq_def.seqincrement, seq_def.seqmin, seq_def.seqmax,
                   seq_def.seqstart, seq_def.seqcache, CASE WHEN seq_def.seqcycle THEN 'CYCLE' ELSE 'NO CYCLE' END);
    PERFORM setval(seq_name::regclass, seq_state.last_value, seq_state.is_called);
  END IF;
END
$convert$;


-- Where this server's worker id came from and where its lease in the worker-id registry
-- stands (idgen.registry); for superusers and pg_monitor members, as idgen_stats().
CREATE FUNCTION idgen_lease_status() RETURNS TABLE (
	worker_id INT,
	worker_id_source TEXT,
	registry TEXT,
	lease_ends timestamp with time zone,
	issues_until timestamp with time zone,
	last_renewal timestamp with time zone,
	registry_reachable bool,
	last_error TEXT
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'idgen_lease_status_wrapper';


-- What ids this server issues (worker id, epoch, layout) and where its check of the other
-- nodes of its Citus cluster stands: what each Citus node asks the others before its first id
-- when no registry decides the worker ids. Any role may call it.
CREATE FUNCTION idgen_identity() RETURNS TABLE (
	worker_id INT,
	epoch_ms bigint,
	layout TEXT,
	peer_check TEXT
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'idgen_identity_wrapper';


-- Snowflake layouts (idgen.layout): the decoders that take a layout, so that an id of any
-- layout (a Discord id, an Instagram id, this server's own) can be taken apart in SQL and in
-- index expressions. The one-argument forms keep decoding Twitter's layout.
CREATE FUNCTION snowflake_timestamp(id bigint, epoch_ms bigint, layout text)
RETURNS timestamp with time zone
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'snowflake_timestamp_in_layout_wrapper';

CREATE FUNCTION snowflake_worker_id(id bigint, layout text) RETURNS integer
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'snowflake_worker_id_in_layout_wrapper';

CREATE FUNCTION snowflake_sequence(id bigint, layout text) RETURNS integer
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'snowflake_sequence_in_layout_wrapper';

CREATE FUNCTION snowflake_from_timestamp(ts timestamp with time zone, epoch_ms bigint, layout text)
RETURNS bigint
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'snowflake_from_timestamp_in_layout_wrapper';

-- Moving a table from another generator of the same layout (Instagram's next_id()): raises the
-- generator's floor past an id, durably. Superusers only.
CREATE FUNCTION snowflake_raise_floor(after_id bigint) RETURNS bigint
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'snowflake_raise_floor_wrapper';
REVOKE ALL ON FUNCTION snowflake_raise_floor(bigint) FROM PUBLIC;

-- Short codes across a fleet: blocks of a registry counter (idgen.registry), and codes that
-- carry the worker id for fleets without a registry; both VOLATILE PARALLEL UNSAFE, as nextval().
CREATE FUNCTION short_code_next(counter text) RETURNS text
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'idgen_short_code_next';
COMMENT ON FUNCTION short_code_next(text) IS
  'The next code of a counter of the worker-id registry (idgen.registry), from blocks the registry grants this server once each: distinct across the fleet, of the width the counter was created with.';

CREATE FUNCTION worker_code_next(counter regclass, width integer DEFAULT 7) RETURNS text
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'worker_code_next_wrapper';

-- The counters this server issues short codes of; for superusers and pg_monitor members, as
-- idgen_stats().
CREATE FUNCTION idgen_short_code_status() RETURNS TABLE (
	counter TEXT,
	width INT,
	in_hand bigint,
	issued bigint,
	blocks_taken bigint,
	last_block_ms double precision,
	mean_block_ms double precision,
	failing bool,
	last_error TEXT
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'idgen_short_code_status_wrapper';
