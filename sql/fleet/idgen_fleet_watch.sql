-- idgen fleet watch: run on a server where rows from several idgen servers meet (a logical
-- replication subscriber), to catch two publishers that were given the same snowflake worker
-- id before their ids collide, or at the latest at the first colliding row.
--
-- Plain SQL and PL/pgSQL: the subscriber needs neither idgen nor a superuser to install it
-- (CREATE on the database, and ownership of the watched tables). Install:
--   psql -d <subscriber db> -f sql/fleet/idgen_fleet_watch.sql
-- Watch a subscribed table whose bigint column holds snowflake ids:
--   SELECT idgen_fleet.watch('events', 'id');
-- Look:
--   SELECT * FROM idgen_fleet.worker_origins;   -- which origin sent each worker id first
--   SELECT * FROM idgen_fleet.clashes;          -- worker ids that arrived from a second origin
--
-- How: a BEFORE INSERT trigger, enabled ALWAYS so that it fires in logical replication's apply
-- workers, reads the worker id (bits 12-21) of each arriving id and the origin of the row: the
-- subscription the apply worker serves (pg_stat_subscription), or 'local'. The first origin of
-- each worker id is recorded; a row of that worker id from any other origin is a clash: it is
-- recorded once per origin, and a WARNING naming the worker id and both origins goes to the
-- server log each time an apply session first meets it. The row itself goes on (a clash is not
-- yet a duplicate; if it is one, the primary key stops it right after the warning). Each apply
-- session remembers the worker ids it has checked, so a row costs a setting lookup and a string
-- search, not a table lookup.

CREATE SCHEMA IF NOT EXISTS idgen_fleet;

CREATE TABLE IF NOT EXISTS idgen_fleet.worker_origins (
    worker_id integer PRIMARY KEY CHECK (worker_id BETWEEN 0 AND 1023),
    origin text NOT NULL,
    first_id bigint NOT NULL,
    first_seen timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS idgen_fleet.clashes (
    worker_id integer NOT NULL,
    origin text NOT NULL,
    first_origin text NOT NULL,
    id bigint NOT NULL,
    watched regclass NOT NULL,
    seen timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (worker_id, origin)
);

-- The origin of rows inserted by this session: the subscription its apply worker serves, or
-- 'local' for anything else.
CREATE OR REPLACE FUNCTION idgen_fleet.origin() RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce((SELECT 'subscription ' || subname FROM pg_stat_subscription
                     WHERE pid = pg_backend_pid() LIMIT 1), 'local')
$$;

-- The check itself, for one id arriving in `watched`.
CREATE OR REPLACE FUNCTION idgen_fleet.check_id(id bigint, watched regclass) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    w integer := ((id >> 12) & 1023)::integer;
    here text := idgen_fleet.origin();
    first text;
BEGIN
    INSERT INTO idgen_fleet.worker_origins (worker_id, origin, first_id) VALUES (w, here, id)
    ON CONFLICT (worker_id) DO NOTHING;
    SELECT o.origin INTO first FROM idgen_fleet.worker_origins o WHERE o.worker_id = w;
    IF first IS DISTINCT FROM here THEN
        INSERT INTO idgen_fleet.clashes (worker_id, origin, first_origin, id, watched)
        VALUES (w, here, first, id, watched) ON CONFLICT DO NOTHING;
        RAISE WARNING 'idgen fleet: snowflake worker id % arrives from two origins: % and %', w, first, here
            USING DETAIL = format('Row id %s in %s. Two servers with one worker id can issue the same id, and the primary key will stop replication when they do.', id, watched),
                  HINT = 'Give every server that issues snowflake ids its own idgen.worker_id (postgresql.conf, restart); see the README, "Many servers". idgen_fleet.clashes lists every clash.';
    END IF;
    PERFORM set_config('idgen_fleet.checked', coalesce(current_setting('idgen_fleet.checked', true), ',') || w || ',', false);
END
$$;

-- Watches `tbl`'s snowflake id column `col`: a trigger function with the column built in (a
-- generic one would read the row as JSON, several times slower), and its trigger, ENABLE ALWAYS.
-- Everything the trigger calls is schema-qualified or named by OID: apply workers run with an
-- empty search_path.
CREATE OR REPLACE FUNCTION idgen_fleet.watch(tbl regclass, col name) RETURNS void
LANGUAGE plpgsql AS $watch$
DECLARE
    fn text := format('idgen_fleet.%I', 'watch_' || tbl::oid);
BEGIN
    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $b$
        BEGIN
            IF NEW.%I IS NOT NULL AND strpos(coalesce(current_setting('idgen_fleet.checked', true), ''),
                                            ',' || ((NEW.%I >> 12) & 1023) || ',') = 0 THEN
                PERFORM idgen_fleet.check_id(NEW.%I, %s::oid::regclass);
            END IF;
            RETURN NEW;
        END $b$$f$, fn, col, col, col, tbl::oid);
    EXECUTE format('DROP TRIGGER IF EXISTS idgen_fleet_watch ON %s', tbl);
    EXECUTE format('CREATE TRIGGER idgen_fleet_watch BEFORE INSERT ON %s FOR EACH ROW EXECUTE FUNCTION %s()', tbl, fn);
    EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER idgen_fleet_watch', tbl);
END
$watch$;
