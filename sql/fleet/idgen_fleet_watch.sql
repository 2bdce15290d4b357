-- idgen fleet watch: run on a server where rows from several idgen servers meet (a logical
-- replication subscriber), to catch two publishers that were given the same snowflake worker
-- id before their ids collide, or at the latest at the first colliding row.
--
-- Plain SQL and PL/pgSQL, PostgreSQL core only (no contrib): the subscriber needs neither idgen
-- nor a superuser to install it (CREATE on the database, and ownership of the watched tables).
-- Install, and upgrade an installed watch (in one transaction, -1, so that no apply worker
-- meets half of it):
--   psql -1 -d <subscriber db> -f sql/fleet/idgen_fleet_watch.sql
-- Watch a subscribed table whose bigint column holds snowflake ids (of the fleet's layout,
-- idgen.layout: Twitter's unless named, e.g. watch('events', 'id', 'instagram')):
--   SELECT idgen_fleet.watch('events', 'id');
-- Look:
--   SELECT * FROM idgen_fleet.worker_origins;   -- which origin sent each worker id first
--   SELECT * FROM idgen_fleet.clashes;          -- worker ids that arrived from a second origin
--
-- How: a BEFORE INSERT trigger, enabled ALWAYS so that it fires in logical replication's apply
-- workers, reads the worker id (Twitter's layout: bits 12-21) of each arriving id and the origin of the row: the
-- subscription the apply worker serves (pg_stat_subscription), or 'local'. The first origin of
-- each worker id is recorded; a row of that worker id from any other origin is a clash: it is
-- recorded once per (worker id, origin), and a WARNING naming the worker id and both origins
-- goes to the server log each time a session first meets it. The row itself goes on (a clash is
-- not yet a duplicate; if it is one, the primary key stops it right after the warning). Each
-- session remembers the worker ids it has checked, so a row costs a setting lookup and a string
-- search, not a table lookup.
--
-- A clash outlives the transaction that met it. The trigger runs inside the apply transaction,
-- and when the clashing row is itself a duplicate key that transaction rolls back, on every
-- retry of the apply worker, forever: a record written only to a table would roll back with it,
-- leaving nothing but the WARNING in the server log. So each clash is also written, before its
-- table row, where no rollback reaches: sequences, whose setval() is never rolled back. Ways
-- weighed, and why this one:
--   * dblink or postgres_fdw to this same server (an autonomous transaction): contrib, which
--     some builds lack (the PostgreSQL 16 build idgen tests on has none); CREATE EXTENSION,
--     which needs rights the watch does not need today; a connection string and a password or
--     trust rule that work from an apply worker (the subscription owner, empty search_path);
--     and one more connection per clash. Rejected.
--   * pg_background, a background worker, a log file read back (COPY TO, pg_read_file): an
--     extension or superuser rights. Rejected.
--   * Sequences: core, no new rights beyond owning them (the sessions that run the trigger
--     need SELECT and UPDATE on them, as they already need INSERT on the tables), crash-safe
--     through WAL, copied to standbys. A sequence holds one bigint and a flag, so a clash takes
--     a slot of four sequences (clash_slot_<n>_id, _from, _seen, _stamp below), and there are
--     clash_slots() slots. Chosen.
-- idgen_fleet.clashes is then a view: the committed log (idgen_fleet.clash_log, the table the
-- clashes were before) plus every slot whose clash the log lacks yet, marked `pending`.
--
-- A slot is taken under a lock (below) and freed once the log holds its clash in a committed
-- row, so a few slots suffice: a slot stays taken only while its clash has no committed row,
-- which means an apply worker stuck on that very clash (or one stopped, or skipped past it).
-- A session that meets a clash first looks for its slot, so the retries of a stuck apply
-- worker find it and write nothing more: one record per (worker id, origin), kept across every
-- retry. If every slot is taken, the WARNING says that this clash is kept only if its
-- transaction commits; CALL idgen_fleet.settle_clashes() moves every pending clash into the log
-- (committed) and frees the slots.
--
-- Costs: a row that is no clash costs what it did (the trigger is unchanged: a setting lookup
-- and a string search; check_id once per worker id per session). A clash costs its session
-- about a millisecond more (the slots read under the lock); reading idgen_fleet.clashes reads
-- the 32 sequences. The lock is a table lock on idgen_fleet.slot_guard, which no other role can
-- take (an advisory lock any role can take and hold, and so stall every apply worker that meets
-- a clash).
-- To let a role read the clashes: GRANT USAGE ON SCHEMA idgen_fleet, SELECT ON
-- idgen_fleet.clashes and EXECUTE ON FUNCTION idgen_fleet.pending_clashes().
--
-- Limits: a clash can be told only once the worker id's first origin is committed in
-- worker_origins. A crash within a moment of a rolled-back clash (until the WAL writer writes
-- the rolled-back transaction's WAL, wal_writer_delay) can lose its slot write; the apply worker
-- then meets the same row again after the restart and writes it again. A pending clash names its
-- origin by the subscription's OID: by name while the subscription exists ('subscription oid N'
-- after DROP SUBSCRIPTION), and its table by OID. Upgrading from the watch whose clashes was a
-- table: run the file with psql -1 (above), or an apply worker that meets a clash between the
-- rename and the new check_id fails once and retries.

CREATE SCHEMA IF NOT EXISTS idgen_fleet;

CREATE TABLE IF NOT EXISTS idgen_fleet.worker_origins (
    worker_id integer PRIMARY KEY CHECK (worker_id BETWEEN 0 AND 65535),
    origin text NOT NULL,
    first_id bigint NOT NULL,
    first_seen timestamptz NOT NULL DEFAULT now()
);
-- A watch installed before layouts checked 0-1023 (Twitter's worker field); the widest is 16 bits.
ALTER TABLE idgen_fleet.worker_origins DROP CONSTRAINT IF EXISTS worker_origins_worker_id_check;
ALTER TABLE idgen_fleet.worker_origins ADD CONSTRAINT worker_origins_worker_id_check
    CHECK (worker_id BETWEEN 0 AND 65535);

-- The tables watched and the layout of their ids (one fleet, one layout): where the worker id
-- lies in an id. A table watched before layouts has no row: Twitter's.
CREATE TABLE IF NOT EXISTS idgen_fleet.watched (
    watched oid PRIMARY KEY,
    layout text NOT NULL,
    worker_shift integer NOT NULL,
    worker_bits integer NOT NULL
);

-- Where layout's worker field lies: its shift and width. The named layouts (docs/layouts.md:
-- Sonyflake's sequence lies above its machine id), or time/worker/sequence/unit as idgen writes
-- it (the worker above the sequence).
CREATE OR REPLACE FUNCTION idgen_fleet.worker_field(layout text, OUT shift integer, OUT bits integer)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    m text[];
BEGIN
    CASE layout
        WHEN 'twitter' THEN shift := 12; bits := 10;
        WHEN 'instagram' THEN shift := 10; bits := 13;
        WHEN 'discord' THEN shift := 12; bits := 10;
        WHEN 'sonyflake' THEN shift := 0; bits := 16;
        WHEN 'js53' THEN shift := 8; bits := 7;
        ELSE
            m := pg_catalog.regexp_match(layout, '^([0-9]{1,2})/([0-9]{1,2})/([0-9]{1,2})/(1|10|100|1000)ms$');
            IF m IS NULL OR m[2]::integer NOT BETWEEN 1 AND 16 THEN
                RAISE EXCEPTION 'idgen fleet: % is not a snowflake layout', layout
                    USING ERRCODE = 'invalid_parameter_value',
                          HINT = 'Name the fleet''s idgen.layout as its servers show it (SHOW idgen.layout): twitter, instagram, discord, sonyflake, js53, or time/worker/sequence/unit such as 40/12/11/10ms.';
            END IF;
            shift := m[3]::integer;
            bits := m[2]::integer;
    END CASE;
END
$$;

-- Upgrading a watch whose idgen_fleet.clashes was this table: it becomes idgen_fleet.clash_log,
-- rows and all (and whatever the owner built on it follows the rename).
DO $upgrade$
BEGIN
    IF (SELECT c.relkind FROM pg_class c WHERE c.oid = to_regclass('idgen_fleet.clashes')) IN ('r', 'p') THEN
        IF to_regclass('idgen_fleet.clash_log') IS NULL THEN
            ALTER TABLE idgen_fleet.clashes RENAME TO clash_log;
            IF to_regclass('idgen_fleet.clashes_pkey') IS NOT NULL AND to_regclass('idgen_fleet.clash_log_pkey') IS NULL THEN
                ALTER INDEX idgen_fleet.clashes_pkey RENAME TO clash_log_pkey;
            END IF;
        ELSE
            INSERT INTO idgen_fleet.clash_log (worker_id, origin, first_origin, id, watched, seen)
            SELECT worker_id, origin, first_origin, id, watched, seen FROM idgen_fleet.clashes
            ON CONFLICT DO NOTHING;
            DROP TABLE idgen_fleet.clashes;
        END IF;
    END IF;
END
$upgrade$;

-- The clashes whose record committed.
CREATE TABLE IF NOT EXISTS idgen_fleet.clash_log (
    worker_id integer NOT NULL,
    origin text NOT NULL,
    first_origin text NOT NULL,
    id bigint NOT NULL,
    watched regclass NOT NULL,
    seen timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (worker_id, origin)
);

-- How many clashes can be kept outside their transaction at once.
CREATE OR REPLACE FUNCTION idgen_fleet.clash_slots() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS 'SELECT 8';

-- Slot n: clash_slot_<n>_id the clashing id (its bits 12-21 are the worker id); _from the
-- origin's subscription OID (0: local) in the high 32 bits and the watched table's OID in the
-- low 32; _seen when, in microseconds since 1970; _stamp the 64-bit ID of the last transaction
-- that met the clash, and the slot's state: taken while it is_called. A taker writes _stamp
-- last and a freer clears it first; a reader reads _stamp before and after the rest.
-- Never nextval()ed: only setval(), under the lock below.
DO $slots$
DECLARE
    part text;
BEGIN
    FOR n IN 1 .. idgen_fleet.clash_slots() LOOP
        FOREACH part IN ARRAY ARRAY['id', 'from', 'seen', 'stamp'] LOOP
            EXECUTE format('CREATE SEQUENCE IF NOT EXISTS idgen_fleet.%I AS bigint MINVALUE %s NO CYCLE',
                           format('clash_slot_%s_%s', n, part), -9223372036854775808);
        END LOOP;
    END LOOP;
END
$slots$;

-- The origin of rows inserted by this session: the subscription its apply worker serves, or
-- 'local' for anything else.
CREATE OR REPLACE FUNCTION idgen_fleet.origin() RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce((SELECT 'subscription ' || subname FROM pg_stat_subscription
                     WHERE pid = pg_backend_pid() LIMIT 1), 'local')
$$;

-- The same origin as the subscription's OID, 0 for 'local': what a slot keeps (a name is too
-- long for a bigint).
CREATE OR REPLACE FUNCTION idgen_fleet.origin_oid() RETURNS oid
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce((SELECT subid FROM pg_stat_subscription WHERE pid = pg_backend_pid() LIMIT 1), 0::oid)
$$;

-- An origin OID as origin() names it.
CREATE OR REPLACE FUNCTION idgen_fleet.origin_name(sub oid) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN sub = 0 THEN 'local'
                ELSE 'subscription ' || coalesce((SELECT s.subname::text FROM pg_subscription s WHERE s.oid = sub),
                                                 'oid ' || sub) END
$$;

-- Sequence `name`'s value, NULL while it is not called (a free slot's _stamp). A plain SELECT
-- on the sequence, which raises "permission denied" for a role without SELECT on it rather
-- than passing a slot over.
CREATE OR REPLACE FUNCTION idgen_fleet.slot_value(name text) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v bigint;
BEGIN
    EXECUTE format('SELECT CASE WHEN is_called THEN last_value END FROM idgen_fleet.%I', name) INTO v;
    RETURN v;
END
$$;

CREATE OR REPLACE FUNCTION idgen_fleet.slot_set(n integer, part text, v bigint, taken boolean DEFAULT true)
RETURNS void LANGUAGE sql VOLATILE AS $$
    SELECT setval(format('idgen_fleet.clash_slot_%s_%s', n, part)::regclass, v, taken)
$$;

-- Every taken slot, read consistently without the lock (a slot freed and taken again while it
-- is read changes its _stamp: it is read again). SECURITY DEFINER, so that a role that may read
-- the clashes needs SELECT on the view and EXECUTE on this function, not rights on the 32
-- sequences; EXECUTE is revoked from PUBLIC below.
CREATE OR REPLACE FUNCTION idgen_fleet.pending_clashes()
RETURNS TABLE (slot integer, worker_id integer, origin text, first_origin text, id bigint, watched regclass,
               seen timestamptz, stamp xid8)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    s1 bigint;
    s2 bigint;
    v_id bigint;
    v_from bigint;
    v_seen bigint;
BEGIN
    FOR n IN 1 .. idgen_fleet.clash_slots() LOOP
        FOR attempt IN 1 .. 100 LOOP
            s1 := idgen_fleet.slot_value(format('clash_slot_%s_stamp', n));
            EXIT WHEN s1 IS NULL;
            v_id := idgen_fleet.slot_value(format('clash_slot_%s_id', n));
            v_from := idgen_fleet.slot_value(format('clash_slot_%s_from', n));
            v_seen := idgen_fleet.slot_value(format('clash_slot_%s_seen', n));
            s2 := idgen_fleet.slot_value(format('clash_slot_%s_stamp', n));
            EXIT WHEN s2 IS NOT DISTINCT FROM s1 OR attempt = 100;
        END LOOP;
        CONTINUE WHEN s1 IS NULL OR s2 IS NULL;
        slot := n;
        worker_id := coalesce((SELECT ((v_id >> w.worker_shift) & ((1 << w.worker_bits) - 1))::integer
                               FROM idgen_fleet.watched w WHERE w.watched = (v_from & 4294967295)::oid),
                              ((v_id >> 12) & 1023)::integer);
        origin := idgen_fleet.origin_name(((v_from >> 32) & 4294967295)::oid);
        first_origin := coalesce((SELECT o.origin FROM idgen_fleet.worker_origins o
                                  WHERE o.worker_id = pending_clashes.worker_id), '?');
        id := v_id;
        watched := (v_from & 4294967295)::oid::regclass;
        seen := timestamptz 'epoch' + v_seen * interval '1 microsecond';
        stamp := s2::text::xid8;
        RETURN NEXT;
    END LOOP;
END
$$;

REVOKE EXECUTE ON FUNCTION idgen_fleet.pending_clashes() FROM PUBLIC;

-- Every clash: the committed log, and the slots whose clash the log lacks (pending: the
-- transaction that met it has not committed, and may never, as when the clashing row is a
-- duplicate key).
CREATE OR REPLACE VIEW idgen_fleet.clashes AS
    SELECT l.worker_id, l.origin, l.first_origin, l.id, l.watched, l.seen, false AS pending
    FROM idgen_fleet.clash_log l
    UNION ALL
    SELECT DISTINCT ON (p.worker_id, p.origin) p.worker_id, p.origin, p.first_origin, p.id, p.watched, p.seen,
           true AS pending
    FROM idgen_fleet.pending_clashes() p
    WHERE NOT EXISTS (SELECT 1 FROM idgen_fleet.clash_log l WHERE l.worker_id = p.worker_id AND l.origin = p.origin);

-- The lock that takes and frees slots: a table without rows, locked SHARE UPDATE EXCLUSIVE, a
-- mode that conflicts with itself but not with the ACCESS SHARE lock any role can take on any
-- table. LOCK TABLE checks the right (UPDATE, DELETE or TRUNCATE) before it waits, so only the
-- watch's owner, and roles it grants such a right, can hold it: no other role can stall the
-- apply workers. It is taken inside a block that is rolled back on purpose once the slots are
-- written (RAISE SQLSTATE 'IDGF0'): the rollback of that subtransaction releases the lock at
-- once, while setval() stays (it is never rolled back). A lock held to the end of the
-- transaction would be held while the apply transaction goes on and waits for other rows' locks
-- (a deadlock with another apply worker meeting a clash). An error or a cancel rolls the block
-- back too, and with it the lock.
CREATE TABLE IF NOT EXISTS idgen_fleet.slot_guard ();
REVOKE ALL ON idgen_fleet.slot_guard FROM PUBLIC;

-- Under the lock: frees every slot whose clash the log holds in a row this session sees and that
-- this transaction did not write. Such a row committed: the only uncommitted rows a session sees
-- are its own transaction's, and a transaction stamps a clash's slot before it inserts the clash
-- into the log. Returns the slot that holds (w, sub), if any, and a free slot, if any.
CREATE OR REPLACE FUNCTION idgen_fleet.tidy_slots(w integer, sub oid, OUT held integer, OUT free integer)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    me bigint := pg_current_xact_id()::text::bigint;
    p record;
BEGIN
    FOR p IN SELECT * FROM idgen_fleet.pending_clashes() LOOP
        IF p.worker_id = w AND idgen_fleet.origin_name(sub) = p.origin THEN
            held := coalesce(held, p.slot);
        ELSIF p.stamp::text::bigint <> me
              AND EXISTS (SELECT 1 FROM idgen_fleet.clash_log l WHERE l.worker_id = p.worker_id AND l.origin = p.origin) THEN
            PERFORM idgen_fleet.slot_set(p.slot, 'stamp', 0, false);
        END IF;
    END LOOP;
    SELECT min(n) INTO free FROM generate_series(1, idgen_fleet.clash_slots()) n
    WHERE idgen_fleet.slot_value(format('clash_slot_%s_stamp', n)) IS NULL;
END
$$;

-- Keeps clash (w, this session's origin) outside the transaction: in its slot, stamped with
-- this transaction, or in a free one. Returns whether it is kept (already in the log, or in a
-- slot), and the clash as first kept (the log row takes it: the first clashing id met).
CREATE OR REPLACE FUNCTION idgen_fleet.keep_clash(w integer, here text, new_id bigint, new_watched regclass,
                                                  OUT kept boolean, OUT id bigint, OUT watched regclass,
                                                  OUT seen timestamptz)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_variable
DECLARE
    sub oid := idgen_fleet.origin_oid();
    me bigint := pg_current_xact_id()::text::bigint;
    t record;
    p record;
BEGIN
    id := new_id;
    watched := new_watched;
    seen := now();
    IF EXISTS (SELECT 1 FROM idgen_fleet.clash_log l WHERE l.worker_id = w AND l.origin = here) THEN
        kept := true;   -- committed before
        RETURN;
    END IF;
    BEGIN
        LOCK TABLE idgen_fleet.slot_guard IN SHARE UPDATE EXCLUSIVE MODE;
        SELECT * INTO t FROM idgen_fleet.tidy_slots(w, sub);
        IF t.held IS NOT NULL THEN
            SELECT * INTO p FROM idgen_fleet.pending_clashes() c WHERE c.slot = t.held;
            id := p.id;
            watched := p.watched;
            seen := p.seen;
            PERFORM idgen_fleet.slot_set(t.held, 'stamp', me);
            kept := true;
        ELSIF t.free IS NOT NULL THEN
            PERFORM idgen_fleet.slot_set(t.free, 'id', new_id);
            PERFORM idgen_fleet.slot_set(t.free, 'from', (sub::bigint << 32) | new_watched::oid::bigint);
            PERFORM idgen_fleet.slot_set(t.free, 'seen', (extract(epoch FROM seen) * 1000000)::bigint);
            PERFORM idgen_fleet.slot_set(t.free, 'stamp', me);
            kept := true;
        ELSE
            kept := false;
        END IF;
        RAISE SQLSTATE 'IDGF0';  -- releases the lock; the setval()s and these variables stay
    EXCEPTION WHEN SQLSTATE 'IDGF0' THEN
        NULL;
    END;
END
$$;

-- Moves every pending clash into the log and frees every slot the log holds. A procedure that
-- commits in between: CALL idgen_fleet.settle_clashes(); outside a transaction block.
CREATE OR REPLACE PROCEDURE idgen_fleet.settle_clashes()
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO idgen_fleet.clash_log (worker_id, origin, first_origin, id, watched, seen)
    SELECT p.worker_id, p.origin, p.first_origin, p.id, p.watched, p.seen FROM idgen_fleet.pending_clashes() p
    ON CONFLICT DO NOTHING;
    COMMIT;
    BEGIN
        LOCK TABLE idgen_fleet.slot_guard IN SHARE UPDATE EXCLUSIVE MODE;
        PERFORM idgen_fleet.tidy_slots(-1, 0);
        RAISE SQLSTATE 'IDGF0';  -- releases the lock; the setval()s stay
    EXCEPTION WHEN SQLSTATE 'IDGF0' THEN
        NULL;
    END;
END
$$;

-- The check itself, for one id of worker id w arriving in `watched`.
CREATE OR REPLACE FUNCTION idgen_fleet.check_id(id bigint, watched regclass, w integer) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    here text := idgen_fleet.origin();
    first text;
    k record;
BEGIN
    INSERT INTO idgen_fleet.worker_origins (worker_id, origin, first_id) VALUES (w, here, id)
    ON CONFLICT (worker_id) DO NOTHING;
    SELECT o.origin INTO first FROM idgen_fleet.worker_origins o WHERE o.worker_id = w;
    IF first IS DISTINCT FROM here THEN
        -- Outside the transaction first (the row may be a duplicate key that rolls it back),
        -- then in the log.
        SELECT * INTO k FROM idgen_fleet.keep_clash(w, here, id, watched);
        INSERT INTO idgen_fleet.clash_log (worker_id, origin, first_origin, id, watched, seen)
        VALUES (w, here, first, k.id, k.watched, k.seen) ON CONFLICT DO NOTHING;
        RAISE WARNING 'idgen fleet: snowflake worker id % arrives from two origins: % and %', w, first, here
            USING DETAIL = format('Row id %s in %s. Two servers with one worker id can issue the same id, and the primary key will stop replication when they do.', id, watched)
                           || CASE WHEN k.kept THEN '' ELSE format(' The clash could not be kept outside this transaction (all %s clash slots hold clashes the log lacks: CALL idgen_fleet.settle_clashes()), so idgen_fleet.clashes keeps it only if this transaction commits.', idgen_fleet.clash_slots()) END,
                  HINT = 'Give every server that issues snowflake ids its own idgen.worker_id (postgresql.conf, restart); see the README, "Many servers and the registry". idgen_fleet.clashes lists every clash.';
    END IF;
    PERFORM set_config('idgen_fleet.checked', coalesce(current_setting('idgen_fleet.checked', true), ',') || w || ',', false);
END
$$;

-- The check of a trigger written before layouts (Twitter's layout): the triggers of an upgraded
-- watch call it until their table is watched again.
CREATE OR REPLACE FUNCTION idgen_fleet.check_id(id bigint, watched regclass) RETURNS void
LANGUAGE sql AS $$
    SELECT idgen_fleet.check_id(id, watched, ((id >> 12) & 1023)::integer)
$$;

-- Watches `tbl`'s snowflake id column `col`, whose ids are of `layout`: a trigger function with
-- the column and the worker field built in (a generic one would read the row as JSON, several
-- times slower), and its trigger, ENABLE ALWAYS. Everything the trigger calls is schema-qualified
-- or named by OID: apply workers run with an empty search_path. One fleet has one layout: a
-- table of another layout than those watched already is refused.
DROP FUNCTION IF EXISTS idgen_fleet.watch(regclass, name);
CREATE OR REPLACE FUNCTION idgen_fleet.watch(tbl regclass, col name, layout text DEFAULT 'twitter') RETURNS void
LANGUAGE plpgsql AS $watch$
DECLARE
    fn text := format('idgen_fleet.%I', 'watch_' || tbl::oid);
    f record := idgen_fleet.worker_field(layout);
    other record;
BEGIN
    SELECT w.watched::regclass AS tbl, w.layout INTO other FROM idgen_fleet.watched w
     WHERE w.layout <> watch.layout AND w.watched <> tbl::oid LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'idgen fleet: % is watched with layout %, and one fleet has one layout', other.tbl, other.layout
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = format('Worker ids of two layouts are different fields of the id: watch %s with layout %s, or watch the other fleet in another database.', tbl, other.layout);
    END IF;
    INSERT INTO idgen_fleet.watched VALUES (tbl::oid, layout, f.shift, f.bits)
    ON CONFLICT (watched) DO UPDATE SET layout = excluded.layout, worker_shift = excluded.worker_shift,
                                        worker_bits = excluded.worker_bits;
    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $b$
        DECLARE
            w integer;
        BEGIN
            IF NEW.%I IS NOT NULL THEN
                w := ((NEW.%I >> %s) & %s)::integer;
                IF strpos(coalesce(current_setting('idgen_fleet.checked', true), ''), ',' || w || ',') = 0 THEN
                    PERFORM idgen_fleet.check_id(NEW.%I, %s::oid::regclass, w);
                END IF;
            END IF;
            RETURN NEW;
        END $b$$f$, fn, col, col, f.shift, (1 << f.bits) - 1, col, tbl::oid);
    EXECUTE format('DROP TRIGGER IF EXISTS idgen_fleet_watch ON %s', tbl);
    EXECUTE format('CREATE TRIGGER idgen_fleet_watch BEFORE INSERT ON %s FOR EACH ROW EXECUTE FUNCTION %s()', tbl, fn);
    EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER idgen_fleet_watch', tbl);
END
$watch$;
