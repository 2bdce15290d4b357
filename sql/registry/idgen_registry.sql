-- idgen's worker-id registry: one lease per snowflake worker id, in any PostgreSQL database.
--
-- Plain SQL; idgen need not be installed here. Install once, as the role that is to own the
-- registry, in the database the idgen servers' idgen.registry names:
--
--     psql -X -v ON_ERROR_STOP=1 -d registry -f sql/registry/idgen_registry.sql
--
-- A registry serves one id space for life: one snowflake layout (idgen.layout) under one epoch
-- (idgen.epoch), since the ids of two servers are apart only if both are the same and their
-- worker ids differ. Twitter's layout and epoch unless psql's variables name others, e.g.
-- -v layout=instagram -v epoch=1314220021721, or an explicit layout such as 40/12/11/10ms. It
-- has one lease for each worker id the layout's worker field holds, and refuses the claims of a
-- server of another layout or epoch (docs/registry.md).
--
-- then give each idgen server a login role in the group idgen_fleet:
--
--     CREATE ROLE idgen_a LOGIN PASSWORD '...' IN ROLE idgen_fleet;
--
-- Who may do what: only members of idgen_fleet may call claim() or read the holders view;
-- nobody but the owner reads or writes the table itself. claim() runs with the owner's rights
-- (SECURITY DEFINER) with a pinned search_path that ends in pg_temp and schema-qualified names;
-- it locks only rows its caller may take, never the table (see claim()), so that a member can
-- block no one else's claim, and an ordinary role can neither take a lease nor block one (it
-- cannot call claim(), lock the table or read it).
--
-- Times are Unix milliseconds. A lease ends lease_ends_ms (the registry's clock): the lease plus
-- the holder's grace (idgen.lease_grace) after the claim that granted it, since a holder that
-- cannot reach the registry issues on through its grace, and its id goes to no other server
-- until then. A holder is fenced: it reports fence_ms, the millisecond (its own clock) from
-- which it issues nothing unless it renews, so a lease nobody renews is free once it ends,
-- whatever kind of id it was. The exception is a fixed id under idgen.unverified_worker_id =
-- issue (fence_ms NULL): it carries on while the registry is unreachable, so its lease, ended
-- or released, goes to no other server (only to a later run of that server) until the owner
-- frees it (idgen_registry.free()). A server that takes an id over resumes after the highest
-- fence and horizon any earlier holder reported, and the latest end of their leases plus its
-- own idgen.max_clock_skew (see docs/registry.md).
--
-- A registry that was promoted, restored (from a dump, from an older copy of its data directory)
-- or merely started again may have lost the last claims it granted: a claim that finds a new
-- timeline, another data identity or another postmaster start begins a new term, and until every
-- lease it may have granted in the history it lost has ended (its bounds plus the time since its
-- state is known) it grants no new lease, while the holders it lost re-assert theirs (the
-- hold-off); every lease it grants later resumes above that time. Its owner may end a hold-off
-- where nothing was lost: idgen_registry.end_hold_off() (docs/registry.md).
--
-- A lease is one run's: the holder's system identifier (shared by a primary, its standbys and
-- every copy of it) and the run its postmaster drew at start, so that two copies of a server
-- running at once are two holders. Give every server a registry role of its own too: a lease
-- of one role is never another's.

\set ON_ERROR_STOP on
\if :{?layout}
\else
\set layout twitter
\endif
\if :{?epoch}
\else
\set epoch 1288834974657
\endif
BEGIN;

DO $roles$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'idgen_fleet') THEN
        CREATE ROLE idgen_fleet NOLOGIN;
    END IF;
END
$roles$;

CREATE SCHEMA idgen_registry;
REVOKE ALL ON SCHEMA idgen_registry FROM PUBLIC;
GRANT USAGE ON SCHEMA idgen_registry TO idgen_fleet;

-- The id space this registry serves, fixed for its life: the layout as idgen writes it
-- (idgen.layout's canonical form: a named layout's name, else time/worker/sequence/unit), its
-- worker field's width, and the epoch (idgen.epoch, Unix ms). One row.
CREATE TABLE idgen_registry.id_space (
    one         boolean PRIMARY KEY DEFAULT true CHECK (one),
    layout      text NOT NULL,
    worker_bits integer NOT NULL CHECK (worker_bits BETWEEN 1 AND 16),
    epoch_ms    bigint NOT NULL CHECK (epoch_ms BETWEEN 0 AND 2147483647000)
);
REVOKE ALL ON TABLE idgen_registry.id_space FROM PUBLIC;
GRANT SELECT ON TABLE idgen_registry.id_space TO idgen_fleet;

-- How far ahead of the registry's clock a member may report what it issued: a real server's
-- clock is at most max_clock_skew_ms ahead of the registry's (the fleet's idgen.max_clock_skew,
-- 1 s by default), and its durable horizon at most idgen's 1-s horizon lead ahead of its clock.
-- So a horizon or a last millisecond may lie at most max_clock_skew_ms + 1000 ms ahead, and a
-- fence at most the lease plus max_clock_skew_ms; anything further is refused, so that no member
-- can make the servers that take an id after it wait. The owner may change it:
--   UPDATE idgen_registry.clock SET max_clock_skew_ms = 2000;
--
-- And the longest lease (idgen.lease) and grace (idgen.lease_grace) a member may hold: a claim of
-- longer ones is granted these (the answer says so, and the server fences at what was granted),
-- never refused, so that lowering them stops no running server. A lowering takes effect at once.
-- A raise takes effect only as long after it is made as it raises their sum (from 16 min to 31 min:
-- 15 min later): the lease and grace the registry grants can then grow by at most a millisecond a
-- millisecond, which is what lets a registry that lost its latest history (a failover to a standby
-- that missed it, a restore, a start from an older copy) bound every lease it may have granted in
-- it (the hold-off, below). A trigger keeps that, however the row is updated:
--   UPDATE idgen_registry.clock SET max_lease_ms = 30000, max_grace_ms = 600000;
CREATE TABLE idgen_registry.clock (
    one               boolean PRIMARY KEY DEFAULT true CHECK (one),
    max_clock_skew_ms integer NOT NULL DEFAULT 1000 CHECK (max_clock_skew_ms BETWEEN 0 AND 600000),
    max_lease_ms      integer NOT NULL DEFAULT 60000 CHECK (max_lease_ms BETWEEN 1000 AND 3600000),
    max_grace_ms      integer NOT NULL DEFAULT 900000 CHECK (max_grace_ms BETWEEN 0 AND 86400000),
    -- A raise in progress: until raise_takes_effect_ms (Unix ms, the registry's clock; 0: none),
    -- a grant's lease and grace add up to at most keep_before_raise_ms. Kept by the trigger.
    keep_before_raise_ms bigint NOT NULL DEFAULT 0,
    raise_takes_effect_ms bigint NOT NULL DEFAULT 0,
    -- When the row last changed (Unix ms): a moment the registry's state is known to be from.
    changed_ms        bigint NOT NULL DEFAULT pg_catalog.floor(EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000)
);
REVOKE ALL ON TABLE idgen_registry.clock FROM PUBLIC;
GRANT SELECT ON TABLE idgen_registry.clock TO idgen_fleet;
INSERT INTO idgen_registry.clock DEFAULT VALUES;

-- The longest lease plus grace the registry grants at now_ms under the bounds c.
CREATE FUNCTION idgen_registry._grantable_ms(c idgen_registry.clock, now_ms bigint)
RETURNS bigint
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $grantable$
    SELECT CASE WHEN now_ms >= c.raise_takes_effect_ms THEN c.max_lease_ms::bigint + c.max_grace_ms
                ELSE LEAST(c.keep_before_raise_ms, c.max_lease_ms::bigint + c.max_grace_ms) END
$grantable$;
REVOKE ALL ON FUNCTION idgen_registry._grantable_ms(idgen_registry.clock, bigint) FROM PUBLIC;

-- A change of the bounds: a raise of their sum takes effect as long after it is made as it
-- raises it, from what is grantable at that moment (a raise that is itself still waiting counts
-- at what it raised from); a lowering at once. The raise's fields are the trigger's alone.
CREATE FUNCTION idgen_registry._clock_changed()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $changed$
DECLARE
    now_ms bigint := pg_catalog.floor(EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000);
    grantable bigint := idgen_registry._grantable_ms(OLD, now_ms);
    wanted bigint := NEW.max_lease_ms::bigint + NEW.max_grace_ms;
BEGIN
    PERFORM idgen_registry._term(now_ms);  -- as release() does
    NEW.keep_before_raise_ms := OLD.keep_before_raise_ms;
    NEW.raise_takes_effect_ms := OLD.raise_takes_effect_ms;
    IF (NEW.max_lease_ms, NEW.max_grace_ms) IS DISTINCT FROM (OLD.max_lease_ms, OLD.max_grace_ms) THEN
        IF wanted > grantable THEN
            NEW.keep_before_raise_ms := grantable;
            NEW.raise_takes_effect_ms := now_ms + (wanted - grantable);
        ELSE
            NEW.keep_before_raise_ms := 0;
            NEW.raise_takes_effect_ms := 0;
        END IF;
    END IF;
    NEW.changed_ms := now_ms;
    RETURN NEW;
END
$changed$;
REVOKE ALL ON FUNCTION idgen_registry._clock_changed() FROM PUBLIC;
CREATE TRIGGER bounds_change BEFORE UPDATE ON idgen_registry.clock
    FOR EACH ROW EXECUTE FUNCTION idgen_registry._clock_changed();

-- The registry's term: its timeline (the first 8 hex digits of its current WAL file's name) in
-- the high bits and, below bit 42, when the registry first answered a claim in it (Unix ms; 0:
-- the term it was installed in, which follows no other). A sequence, not a table: claim() records
-- a new term with setval(), which no transaction undoes and no row lock holds up, so a member
-- that keeps its claim's transaction open delays no one's view of the term.
--
-- A new term begins at the first claim after anything that may have lost the registry's latest
-- history: a new timeline (a promotion, a point-in-time restore), a restore into another database
-- or cluster (pg_dump and pg_restore, a copy of another cluster: the data's identity, below,
-- changed), and every start of the server, since a start from an older copy of its own data
-- directory (a snapshot, a file-level backup) cannot be told from a plain restart. Each is
-- recorded in sequences beside the term, which pg_dump carries as they were (so a restore finds
-- them unlike the server it runs on) and no rollback undoes:
--   incarnation     the data's identity: a hash of the server's system identifier, the
--                   database's and the lease table's OIDs, and the id_space row's xmin (a new
--                   one after any reload of the data, pg_restore --data-only included)
--   started         the postmaster's start (Unix ms)
--   hold_off_until  when the current term's hold-off ends (Unix ms; 0: none)
--   term_cause      why the current term began: 0 installed, 1 a new timeline, 2 restored,
--                   3 started (a restart, or a start from an older copy), 4 the owner's hold_off()
CREATE SEQUENCE idgen_registry.term MINVALUE 0 MAXVALUE 9223372036854775807 START 0;
CREATE SEQUENCE idgen_registry.incarnation MINVALUE 0 MAXVALUE 9223372036854775807 START 0;
CREATE SEQUENCE idgen_registry.started MINVALUE 0 MAXVALUE 9223372036854775807 START 0;
CREATE SEQUENCE idgen_registry.hold_off_until MINVALUE 0 MAXVALUE 9223372036854775807 START 0;
CREATE SEQUENCE idgen_registry.term_cause MINVALUE 0 MAXVALUE 4 START 0;
-- counters_term: the term whose move of the counters (_counters_jump()) is done. A term is begun
-- (the term sequence set) before its counters are moved, and a take grants nothing while the two
-- differ; a move cut short (an error, a cancel) is done again by the next call that finds them so.
CREATE SEQUENCE idgen_registry.counters_term MINVALUE 0 MAXVALUE 9223372036854775807 START 0;
REVOKE ALL ON SEQUENCE idgen_registry.term, idgen_registry.incarnation, idgen_registry.started,
    idgen_registry.hold_off_until, idgen_registry.term_cause, idgen_registry.counters_term FROM PUBLIC;

-- This server's timeline, the data's identity and the postmaster's start, as the sequences above
-- record them.
CREATE FUNCTION idgen_registry._where(OUT timeline bigint, OUT incarnation bigint, OUT started_ms bigint)
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $where$
    SELECT ('x' || pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8))::bit(32)::bigint,
           ('x' || pg_catalog.substr(pg_catalog.md5(pg_catalog.concat_ws('/',
                (SELECT s.system_identifier FROM pg_catalog.pg_control_system() AS s),
                (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = pg_catalog.current_database()),
                pg_catalog.to_regclass('idgen_registry.lease')::pg_catalog.oid,
                (SELECT i.xmin FROM idgen_registry.id_space AS i))), 1, 15))::bit(60)::bigint,
           pg_catalog.floor(EXTRACT(epoch FROM pg_catalog.pg_postmaster_start_time()) * 1000)::bigint
$where$;
REVOKE ALL ON FUNCTION idgen_registry._where() FROM PUBLIC;

-- Begins a new term at now_ms for cause (term_cause's numbers). Its hold-off covers every lease
-- the registry may have granted in a history it lost: such a lease was granted after the latest
-- moment this state is known to be from (the last claim, release or bounds change it holds), at
-- most the longest lease and grace grantable then, which grow by at most a millisecond a
-- millisecond since (a raise takes effect as long after it is made as it raises); so it ends by
-- now plus the bounds this state holds plus the time since that moment, plus the clock skew the
-- registry allows between its own hosts and the fleet; never longer than the longest lease and
-- grace a registry can allow at all, and never ending before the hold-off of the term it follows.
-- Returns the hold-off's end.
CREATE FUNCTION idgen_registry._begin_term(now_ms bigint, cause integer)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $begin$
DECLARE
    here record;
    c idgen_registry.clock%ROWTYPE;
    known_ms bigint;
    until_ms bigint;
BEGIN
    -- One term begins at a time (the owner's hold_off() too): the id_space row, which no member
    -- can lock.
    PERFORM FROM idgen_registry.id_space FOR UPDATE;
    SELECT * INTO here FROM idgen_registry._where();
    SELECT * INTO c FROM idgen_registry.clock;
    known_ms := GREATEST(c.changed_ms,
        (SELECT pg_catalog.floor(EXTRACT(epoch FROM pg_catalog.max(GREATEST(l.renewed_at, l.claimed_at))) * 1000)::bigint
           FROM idgen_registry.lease AS l));
    until_ms := now_ms + LEAST(c.max_lease_ms::bigint + c.max_grace_ms + GREATEST(now_ms - known_ms, 0),
                               3600000 + 86400000) + c.max_clock_skew_ms;
    -- Never before the hold-off of the term this one follows: a restart soon after a promotion
    -- knows no more of what the promotion lost than the promotion did.
    until_ms := GREATEST(until_ms, (SELECT s.last_value FROM idgen_registry.hold_off_until AS s));
    PERFORM pg_catalog.setval('idgen_registry.term', (here.timeline << 42) | now_ms);
    -- Then every counter, past every block the history lost may have granted: after the term,
    -- so that a take still running from before it (the owner's hold_off() under a live fleet)
    -- either drew its blocks before the jump read the counter, or sees the new term at its end
    -- and grants nothing (take_block()).
    PERFORM idgen_registry._counters_jump(now_ms + c.max_clock_skew_ms);
    PERFORM pg_catalog.setval('idgen_registry.counters_term', (here.timeline << 42) | now_ms);
    PERFORM pg_catalog.setval('idgen_registry.hold_off_until', until_ms);
    PERFORM pg_catalog.setval('idgen_registry.term_cause', cause);
    PERFORM pg_catalog.setval('idgen_registry.incarnation', here.incarnation);
    PERFORM pg_catalog.setval('idgen_registry.started', here.started_ms);
    RETURN until_ms;
END
$begin$;
REVOKE ALL ON FUNCTION idgen_registry._begin_term(bigint, integer) FROM PUBLIC;

-- The registry's term now (the sequence's word, which names it), when it began, the hold-off's end
-- (Unix ms, 0: none) and why the term began, beginning a new one first where the registry may
-- have lost history since the last claim (above). For claim() only.
CREATE FUNCTION idgen_registry._term(now_ms bigint, OUT word bigint, OUT began_ms bigint,
                                     OUT hold_off_until_ms bigint, OUT cause text)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $term$
DECLARE
    here record;
    new_cause integer;
BEGIN
    SELECT * INTO here FROM idgen_registry._where();
    word := (SELECT s.last_value FROM idgen_registry.term AS s);
    new_cause := CASE
        WHEN word >> 42 <> here.timeline THEN 1
        WHEN (SELECT s.last_value FROM idgen_registry.incarnation AS s) <> here.incarnation THEN 2
        WHEN (SELECT s.last_value FROM idgen_registry.started AS s) <> here.started_ms THEN 3 END;
    IF new_cause IS NOT NULL THEN
        -- One claim begins the term: the others wait for it (the id_space row, which no member
        -- can lock) and then find it begun. Two beginning it at once could leave the shorter
        -- hold-off, computed from the other's writes.
        PERFORM FROM idgen_registry.id_space FOR UPDATE;
        word := (SELECT s.last_value FROM idgen_registry.term AS s);
        new_cause := CASE
            WHEN word >> 42 <> here.timeline THEN 1
            WHEN (SELECT s.last_value FROM idgen_registry.incarnation AS s) <> here.incarnation THEN 2
            WHEN (SELECT s.last_value FROM idgen_registry.started AS s) <> here.started_ms THEN 3 END;
        IF new_cause IS NOT NULL THEN
            PERFORM idgen_registry._begin_term(now_ms, new_cause);
            word := (SELECT s.last_value FROM idgen_registry.term AS s);
        END IF;
    END IF;
    -- A term whose move of the counters was cut short: done again, once.
    IF (SELECT s.last_value FROM idgen_registry.counters_term AS s) <> word THEN
        PERFORM FROM idgen_registry.id_space FOR UPDATE;
        IF (SELECT s.last_value FROM idgen_registry.counters_term AS s) <> word THEN
            PERFORM idgen_registry._counters_jump(now_ms + (SELECT c.max_clock_skew_ms FROM idgen_registry.clock AS c));
            PERFORM pg_catalog.setval('idgen_registry.counters_term', word);
        END IF;
    END IF;
    -- Each answer keeps the counters' anchors fresh (a restore then skips less).
    PERFORM idgen_registry._counters_reanchor(now_ms, NULL);
    began_ms := word & ((1::bigint << 42) - 1);
    hold_off_until_ms := CASE WHEN began_ms = 0 THEN 0
        ELSE (SELECT s.last_value FROM idgen_registry.hold_off_until AS s) END;
    cause := CASE (SELECT s.last_value FROM idgen_registry.term_cause AS s)
        WHEN 0 THEN 'installed' WHEN 1 THEN 'new timeline' WHEN 2 THEN 'restored'
        WHEN 3 THEN 'started' ELSE 'hold_off' END;
END
$term$;
REVOKE ALL ON FUNCTION idgen_registry._term(bigint) FROM PUBLIC;

-- The layout, read as idgen reads idgen.layout (src/core/src/layout.rs: ASCII blanks around the
-- whole and each part, ASCII case, an optional unit with or without "ms") and stored as idgen
-- writes it, which is what a server sends: a named layout's name (an explicit split equal to a
-- named one's goes by the name), else time/worker/sequence/unit. A split idgen would refuse
-- (it does not fit a bigint, a unit other than 1, 10, 100 or 1000 ms, a life under 10 years) is
-- refused here too, and so is a worker field wider than 16 bits.
SET LOCAL idgen_registry.install_layout = :'layout';
SET LOCAL idgen_registry.install_epoch = :'epoch';
DO $layout$
DECLARE
    blanks constant text := E' \t\n\r\013\014';
    given text := pg_catalog.current_setting('idgen_registry.install_layout');
    given_epoch text := pg_catalog.btrim(pg_catalog.current_setting('idgen_registry.install_epoch'), blanks);
    l text := pg_catalog.translate(pg_catalog.btrim(given, blanks),
                                   'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz');
    parts text[] := pg_catalog.string_to_array(l, '/');
    n numeric[];
    usable numeric;
    bits integer;
BEGIN
    IF l NOT IN ('twitter', 'instagram', 'discord', 'sonyflake', 'js53') THEN
        IF pg_catalog.cardinality(parts) BETWEEN 3 AND 4 THEN
            FOR i IN 1 .. pg_catalog.cardinality(parts) LOOP
                parts[i] := pg_catalog.btrim(parts[i], blanks);
                IF i = 4 THEN
                    parts[i] := pg_catalog.btrim(pg_catalog.regexp_replace(parts[i], 'ms$', ''), blanks);
                END IF;
                EXIT WHEN parts[i] !~ '^\+?[0-9]{1,20}$';
                n[i] := parts[i]::numeric;
            END LOOP;
        END IF;
        IF pg_catalog.cardinality(n) = 3 THEN
            n[4] := 1;
        END IF;
        IF pg_catalog.cardinality(n) = 4 AND n[1] >= 1 AND n[2] BETWEEN 1 AND 16 AND n[3] >= 1
           AND n[1] + n[2] + n[3] <= 64 AND n[4] IN (1, 10, 100, 1000) THEN
            usable := LEAST(n[1], 63 - n[2] - n[3]);
            IF usable >= 1 AND (2 ^ usable) * n[4] >= 10 * 31556952000 THEN
                l := pg_catalog.format('%s/%s/%s/%sms', n[1], n[2], n[3], n[4]);
                l := CASE l WHEN '41/10/12/1ms' THEN 'twitter' WHEN '41/13/10/1ms' THEN 'instagram'
                            WHEN '42/10/12/1ms' THEN 'discord' WHEN '38/7/8/10ms' THEN 'js53' ELSE l END;
            ELSE
                l := NULL;
            END IF;
        ELSE
            l := NULL;
        END IF;
    END IF;
    bits := CASE l WHEN 'twitter' THEN 10 WHEN 'instagram' THEN 13 WHEN 'discord' THEN 10
                   WHEN 'sonyflake' THEN 16 WHEN 'js53' THEN 7
                   ELSE (pg_catalog.regexp_match(l, '^[0-9]+/([0-9]+)/'))[1]::integer END;
    IF l IS NULL OR bits IS NULL THEN
        RAISE EXCEPTION 'layout % is not one this registry can serve', pg_catalog.btrim(given, blanks)
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Name one (twitter, instagram, discord, sonyflake, js53), or give time/worker/sequence/unit as idgen.layout takes it, e.g. 40/12/11/10ms: it must fit a bigint, last 10 years, and have a worker field of 1 to 16 bits.';
    END IF;
    -- The epoch as idgen.epoch takes it: whole Unix milliseconds, 0 to 2147483647000.
    IF given_epoch !~ '^[0-9]{1,13}$' OR given_epoch::bigint > 2147483647000 THEN
        RAISE EXCEPTION 'epoch % is not one this registry can serve', given_epoch
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Give the fleet''s idgen.epoch: a Unix time in whole milliseconds, 0 to 2147483647000, e.g. 1288834974657 (Twitter''s, idgen''s default).';
    END IF;
    INSERT INTO idgen_registry.id_space (layout, worker_bits, epoch_ms) VALUES (l, bits, given_epoch::bigint);
END
$layout$;

CREATE TABLE idgen_registry.lease (
    worker_id           integer PRIMARY KEY CHECK (worker_id BETWEEN 0 AND 65535),
    -- The holder's PostgreSQL system identifier, which a primary, its physical standbys and
    -- its copies share (with holder_run, it names one running server).
    -- NULL: never leased (the table has a row for each id of the layout from the start, so that
    -- a claim locks rows, never the table).
    holder              text CHECK (holder ~ '^[0-9]{1,20}$'),
    -- cluster_name@host:port, for people: printable ASCII only (what PostgreSQL allows in
    -- cluster_name), as it reaches other servers' errors and logs.
    holder_name         text CHECK (holder_name ~ '^[ -~]{1,200}$'),
    -- The registry role that claimed it, which the registry authenticated: the lease is that
    -- role's. holder and holder_run are what the role says of itself, and tell its own servers
    -- apart (a role an HA pair shares); naming another role's holder gains nothing.
    holder_role         name,
    -- The holder's run: a random number the server draws each time its postmaster starts, so
    -- that two running copies of one server (a base backup started as a second primary, a
    -- promoted standby beside its live primary) are two holders, not one. NULL: the run that
    -- held it released it at a clean shutdown.
    holder_run          text CHECK (holder_run ~ '^[0-9]{1,20}$'),
    lease_ends_ms       bigint NOT NULL DEFAULT 0,
    -- The highest durable horizon any holder of this id recorded (Unix ms): ids of this worker
    -- id were issued only at or below it, or before predecessor_ends_ms.
    last_horizon_ms     bigint NOT NULL DEFAULT 0,
    -- The latest end of an earlier holder's lease (0: none). A new holder resumes after it plus
    -- the clock-skew allowance, after last_horizon_ms and after predecessor_fence_ms.
    predecessor_ends_ms bigint NOT NULL DEFAULT 0,
    -- The holder's own fence (its clock): it issues nothing from this millisecond on unless
    -- it renews. NULL: not fenced (a fixed worker id under idgen.unverified_worker_id = issue).
    fence_ms            bigint,
    -- The highest fence any earlier holder reported (0: none, or none fenced): not only the
    -- last holder's, as a holder whose clock ran ahead may have issued past later fences.
    predecessor_fence_ms bigint NOT NULL DEFAULT 0,
    claimed_at          timestamptz,
    renewed_at          timestamptz,
    CHECK ((holder IS NULL) = (holder_role IS NULL) AND (holder IS NULL) = (holder_name IS NULL))
);
REVOKE ALL ON TABLE idgen_registry.lease FROM PUBLIC;
INSERT INTO idgen_registry.lease (worker_id)
SELECT g FROM idgen_registry.id_space, pg_catalog.generate_series(0, (1 << worker_bits) - 1) AS g;

-- How many leases each registry role may hold at once (the servers that connect as it): its
-- live ones, and its unfenced ones until the owner frees them, ended or not, since those keep
-- their ids from every other server; one where the role has no row. The owner sets more, e.g.
-- 2 for the role an HA pair shares, so that a standby promoted after its primary crashed need
-- not wait for the primary's lease:
--   INSERT INTO idgen_registry.quota VALUES ('idgen_pair', 2)
--       ON CONFLICT (role) DO UPDATE SET max_ids = excluded.max_ids;
-- A claim adds the row of a role that has none (with the default); its lock is what makes one
-- role's claims of new ids wait for each other, and only for each other.
CREATE TABLE idgen_registry.quota (
    role    name PRIMARY KEY,
    max_ids integer NOT NULL DEFAULT 1 CHECK (max_ids BETWEEN 0 AND 65536)
);
REVOKE ALL ON TABLE idgen_registry.quota FROM PUBLIC;

-- Whether row_'s lease keeps holder p_holder, claiming as registry role who, from its id: a
-- lease of another run that has not ended, or an unfenced one (a fixed id under
-- idgen.unverified_worker_id = issue, which may still be issuing whatever its lease says), which
-- only a later run of its own server (its system identifier, under its registry role) takes
-- back. Nothing else keeps an id: an ended fenced lease goes to whoever claims it, above what
-- its holders issued, whatever holder it names (a member could name any).
CREATE FUNCTION idgen_registry._kept_from(row_ idgen_registry.lease, p_holder text, who name, now_ms bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $kept$
    SELECT row_.holder IS NOT NULL
       AND (row_.lease_ends_ms >= now_ms
            OR (row_.fence_ms IS NULL AND NOT (row_.holder = p_holder AND row_.holder_role = who)))
$kept$;
REVOKE ALL ON FUNCTION idgen_registry._kept_from(idgen_registry.lease, text, name, bigint) FROM PUBLIC;

-- claim()'s answer when another run holds the id: who it is, and when its lease ends.
CREATE FUNCTION idgen_registry._conflict(row_ idgen_registry.lease, p_holder text, who name, now_ms bigint)
RETURNS TABLE (outcome text, worker_id integer, lease_ends_ms bigint, last_horizon_ms bigint,
               predecessor_ends_ms bigint, predecessor_fence_ms bigint, other_holder_name text,
               other_lease_ends_ms bigint, registry_now_ms bigint, role_leases integer, role_quota integer,
               registry_epoch_ms bigint)
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $conflict$
    SELECT 'conflict'::text, row_.worker_id, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint,
        row_.holder_name || ' (system identifier ' || row_.holder || ', registry role ' || row_.holder_role
            || CASE WHEN row_.holder = p_holder AND row_.holder_role = who
               THEN ', another run of this server: a copy of it started beside it, a promoted standby '
                    'beside its primary, or the run before a crash, whose lease has not ended'
               WHEN row_.fence_ms IS NULL AND row_.lease_ends_ms < now_ms
               THEN ', unfenced: it runs with idgen.unverified_worker_id = issue and may still be issuing '
                    'although its lease has ended; the registry''s owner frees the id once that server is gone '
                    'for good: SELECT idgen_registry.free(' || row_.worker_id || ')'
               ELSE '' END || ')',
        row_.lease_ends_ms, now_ms, NULL::integer, NULL::integer, NULL::bigint
$conflict$;
REVOKE ALL ON FUNCTION idgen_registry._conflict(idgen_registry.lease, text, name, bigint) FROM PUBLIC;

-- Claims or renews a lease for run p_run of holder p_holder: the fixed id p_worker_id, or (NULL)
-- any id: one this run holds already, else this server's own from an earlier run, else one
-- never leased, else the fenced one whose lease ended longest ago. An unfenced lease (p_fence_ms
-- NULL: a fixed id that issues without the registry) goes to no other server, ended or
-- released, until the owner frees it. A lease is a run's: another run of
-- the same server (a copy of it, a promoted standby, a start after a crash) takes it only once
-- it has ended or was released, as any other server would. p_fence_ms: the claimant's fence
-- if this claim succeeds (NULL: unfenced). p_horizon_ms: its durable horizon. p_grace_ms: how
-- long past its lease the claimant issues while it cannot reach the registry (idgen.lease_grace),
-- so the lease keeps the id from others that much longer. Returns one row:
--   outcome 'held'        this run had it (a renewal)
--           'claimed'     a never-leased id
--           'resumed'     an id an earlier run of this server held, whose lease has ended or
--                         was released (a restart)
--           'taken_over'  an id another server held, whose lease has ended or was released
--           'conflict'    p_worker_id is held by another run (other_*)
--           'over_quota'  the caller's registry role holds role_leases leases already (live, or
--                         unfenced and not freed), its role_quota (idgen_registry.quota);
--                         other_holder_name lists them and other_lease_ends_ms is when the
--                         first fenced one ends (NULL: none is fenced)
--           'exhausted'   no id is free (auto only)
--           'wrong_id_space' p_layout or p_epoch_ms is not the layout or epoch this registry
--                         serves (other_holder_name, registry_epoch_ms)
--           'holding_off' a new term began (a promotion): no new lease until hold_off_until_ms
--           'reasserted'  p_worker_id, which the caller held under an earlier term (p_term), is
--                         its again: the registry may have lost that lease in a failover
--   registry_term: the registry's term (its timeline and when it began), which the caller keeps with its lease
--   and sends back as p_term to re-assert it after a failover.
--   lease_ends_ms, last_horizon_ms, predecessor_ends_ms, predecessor_fence_ms: the lease as it
--   now stands; with 'taken_over' and 'resumed', other_holder_name is the holder it was taken
--   from (NULL: the owner freed it).
-- It locks rows, never the table, and only rows the caller may take: its own, one it found
-- free, and its role's quota row. A caller that keeps its transaction open holds those, so
-- other claims pass over a free row it locked (SKIP LOCKED), and only its own role's claims and
-- claims of that very id wait for it (at most lock_timeout, 2 s, then they fail and are retried).
CREATE FUNCTION idgen_registry.claim(
    p_holder text, p_run text, p_holder_name text, p_worker_id integer, p_lease_ms integer,
    p_horizon_ms bigint, p_fence_ms bigint, p_layout text, p_epoch_ms bigint, p_grace_ms integer DEFAULT 0,
    p_term bigint DEFAULT NULL)
RETURNS TABLE (outcome text, worker_id integer, lease_ends_ms bigint, last_horizon_ms bigint,
               predecessor_ends_ms bigint, predecessor_fence_ms bigint, other_holder_name text,
               other_lease_ends_ms bigint, registry_now_ms bigint, role_leases integer, role_quota integer,
               registry_epoch_ms bigint, registry_term bigint, hold_off_until_ms bigint,
               granted_lease_ms integer, granted_grace_ms integer, term_cause text,
               clock_ahead_ms bigint, allowed_skew_ms integer)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '2s'
AS $claim$
DECLARE
    now_ms bigint := pg_catalog.floor(EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000);
    who name := pg_catalog.session_user();
    row_ idgen_registry.lease%ROWTYPE;
    id integer;
    allowed integer;
    held integer;
    first_end bigint;
    holding text;
    served idgen_registry.id_space%ROWTYPE;
    ahead integer;
    bounds idgen_registry.clock%ROWTYPE;
    previous text;
    term record;
    reasserting boolean;
    -- The lease and grace granted: those asked for, within the bounds of idgen_registry.clock
    -- as they stand now (a raise takes effect later), which the server fences at.
    g_lease integer;
    g_grace integer;
    -- How long a lease granted or renewed now keeps the id from every other server: the lease,
    -- and the grace through which its holder issues on while it cannot reach the registry.
    keep_ms bigint;
    grantable bigint;
    own_only boolean;
BEGIN
    SELECT * INTO served FROM idgen_registry.id_space;
    SELECT * INTO bounds FROM idgen_registry.clock AS c;
    ahead := bounds.max_clock_skew_ms;
    SELECT * INTO term FROM idgen_registry._term(now_ms);
    -- A server of another layout or epoch: its ids and those of this registry's servers may be
    -- equal whatever their worker ids.
    IF p_layout IS DISTINCT FROM served.layout OR p_epoch_ms IS DISTINCT FROM served.epoch_ms THEN
        RETURN QUERY SELECT 'wrong_id_space'::text, NULL::integer, NULL::bigint, NULL::bigint, NULL::bigint,
            NULL::bigint, served.layout, NULL::bigint, now_ms, NULL::integer, NULL::integer, served.epoch_ms, term.word, term.hold_off_until_ms, g_lease, g_grace, term.cause, NULL::bigint, ahead;
        RETURN;
    END IF;
    IF p_holder IS NULL OR p_holder !~ '^[0-9]{1,20}$' THEN
        RAISE EXCEPTION 'invalid holder %: a PostgreSQL system identifier is expected', p_holder
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_run IS NULL OR p_run !~ '^[0-9]{1,20}$' THEN
        RAISE EXCEPTION 'invalid run %: the number the server drew when it started is expected', p_run
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Longer than the bounds is granted the bounds (the answer says so): lowering them stops no
    -- running server.
    IF p_lease_ms IS NULL OR p_lease_ms < 1000 THEN
        RAISE EXCEPTION 'invalid lease length % ms: a lease lasts at least 1000 ms', p_lease_ms
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_grace_ms IS NULL OR p_grace_ms < 0 THEN
        RAISE EXCEPTION 'invalid lease grace % ms: a grace is 0 ms or more', p_grace_ms
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    grantable := idgen_registry._grantable_ms(bounds, now_ms);
    g_lease := LEAST(p_lease_ms, bounds.max_lease_ms, grantable);
    g_grace := GREATEST(LEAST(p_grace_ms::bigint, bounds.max_grace_ms, grantable - g_lease), 0);
    keep_ms := g_lease::bigint + g_grace;
    IF p_holder_name IS NULL OR p_holder_name !~ '^[ -~]{1,200}$' THEN
        RAISE EXCEPTION 'invalid holder name: 1 to 200 printable ASCII characters are expected'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- What a real server reports lies at most its clock's skew (and, for a horizon, idgen's 1-s
    -- lead) ahead of the registry's clock; anything further would make whoever takes the id
    -- next wait for nothing (idgen_registry.clock).
    -- Answered, not raised, so that the server names its clock and by about how much it runs ahead
    -- (clock_ahead_ms: its fence less the lease and grace, or its horizon less idgen's 1-s lead,
    -- against this clock), and keeps its lease's fence.
    IF coalesce(p_horizon_ms, 0) > now_ms + ahead + 1000 OR coalesce(p_fence_ms, 0) > now_ms + p_lease_ms + p_grace_ms + ahead THEN
        RETURN QUERY SELECT 'clock_ahead'::text, p_worker_id, NULL::bigint, NULL::bigint, NULL::bigint,
            NULL::bigint, NULL::text, NULL::bigint, now_ms, NULL::integer, NULL::integer, NULL::bigint, term.word,
            term.hold_off_until_ms, g_lease, g_grace, term.cause,
            GREATEST(coalesce(p_horizon_ms, 0) - now_ms - 1000, coalesce(p_fence_ms, 0) - now_ms - p_lease_ms - p_grace_ms),
            ahead;
        RETURN;
    END IF;
    -- The fence recorded is no further ahead than what was granted (and the skew): a claimant
    -- asking for more than the bounds makes the next holder of its id wait no longer for it.
    p_fence_ms := CASE WHEN p_fence_ms IS NOT NULL THEN LEAST(p_fence_ms, now_ms + keep_ms + ahead) END;
    -- An automatic id is always fenced: an unfenced lease is kept from every other server until
    -- the owner frees it, which is for a fixed id that its server issues on without the registry.
    IF p_worker_id IS NULL AND p_fence_ms IS NULL THEN
        RAISE EXCEPTION 'an automatic claim (no worker id) must give its fence'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Only a fixed id may be leased unfenced (p_fence_ms NULL).';
    END IF;
    IF p_worker_id IS NOT NULL AND p_worker_id NOT BETWEEN 0 AND (1 << served.worker_bits) - 1 THEN
        RAISE EXCEPTION 'worker id % is out of range 0..% of layout %', p_worker_id,
            (1 << served.worker_bits) - 1, served.layout
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- A claimant re-asserting a lease it held under an earlier term of this registry (below).
    reasserting := p_term IS NOT NULL AND p_term <> term.word AND p_worker_id IS NOT NULL;

    -- 1. A renewal of this run's own lease. Only this run's own calls lock its row. Not of a row
    -- an earlier term left whose lease ended before this term began (unless re-asserted live):
    -- the registry this one was promoted from may have given the id to another server after
    -- that end, in a history this one lost; the claim is then a new one (held off, and above the
    -- hold-off). A lease that ends in this term, or ended in it, was this registry's to keep.
    SELECT l.worker_id INTO id FROM idgen_registry.lease AS l
     WHERE l.holder = p_holder AND l.holder_role = who AND l.holder_run = p_run
       AND (p_worker_id IS NULL OR l.worker_id = p_worker_id)
     ORDER BY l.worker_id LIMIT 1;
    IF FOUND THEN
        SELECT * INTO row_ FROM idgen_registry.lease AS l WHERE l.worker_id = id FOR UPDATE;
        IF row_.holder = p_holder AND row_.holder_role = who AND row_.holder_run = p_run
           AND (row_.lease_ends_ms >= LEAST(now_ms, term.began_ms) OR reasserting) THEN
            UPDATE idgen_registry.lease AS l
               SET lease_ends_ms = GREATEST(l.lease_ends_ms, now_ms + keep_ms),
                   last_horizon_ms = GREATEST(l.last_horizon_ms, coalesce(p_horizon_ms, 0)),
                   fence_ms = CASE WHEN p_fence_ms IS NULL THEN NULL
                                   ELSE GREATEST(coalesce(l.fence_ms, 0), p_fence_ms) END,
                   holder_name = p_holder_name, renewed_at = pg_catalog.now()
             WHERE l.worker_id = id
            RETURNING * INTO row_;
            RETURN QUERY SELECT CASE WHEN reasserting THEN 'reasserted' ELSE 'held' END, row_.worker_id, row_.lease_ends_ms, row_.last_horizon_ms,
                row_.predecessor_ends_ms, row_.predecessor_fence_ms, NULL::text, NULL::bigint, now_ms, NULL::integer, NULL::integer, NULL::bigint, term.word, term.hold_off_until_ms, g_lease, g_grace, term.cause, NULL::bigint, ahead;
            RETURN;
        END IF;
    END IF;

    -- 2. A fixed id another run holds: a conflict, seen without taking a lock, so that no claim
    -- of someone else's live lease ever holds that lease's row.
    IF p_worker_id IS NOT NULL THEN
        SELECT * INTO row_ FROM idgen_registry.lease AS l WHERE l.worker_id = p_worker_id;
        IF idgen_registry._kept_from(row_, p_holder, who, now_ms) THEN
            RETURN QUERY SELECT c.*, term.word, term.hold_off_until_ms, g_lease, g_grace, term.cause, NULL::bigint, ahead
                FROM idgen_registry._conflict(row_, p_holder, who, now_ms) AS c;
            RETURN;
        END IF;
    END IF;

    -- After a new term (a promotion: this registry may have lost the last leases it granted), no
    -- new lease until every lease it may have lost has ended (the hold-off). Meanwhile a holder
    -- re-asserts its own: a server that held p_worker_id under an earlier term (p_term), whose
    -- lease is live by its own clock (it sends p_term only then), takes it back unless the
    -- registry keeps it for another run (2. above), as a renewal would, so that a failover stops
    -- none of the servers that were issuing. Every lease granted from then on resumes after the
    -- hold-off's end (predecessor_ends_ms, below), above what a lost holder may have issued.
    IF now_ms < term.hold_off_until_ms AND NOT reasserting THEN
        RETURN QUERY SELECT 'holding_off'::text, p_worker_id, NULL::bigint, NULL::bigint, NULL::bigint,
            NULL::bigint, NULL::text, NULL::bigint, now_ms, NULL::integer, NULL::integer, NULL::bigint, term.word, term.hold_off_until_ms, g_lease, g_grace, term.cause, NULL::bigint, ahead;
        RETURN;
    END IF;

    -- 3. A new lease: at most the role's quota of leases that keep an id from others: live ones,
    -- and unfenced ones, ended, released or not, until the owner frees them (else a member could
    -- claim and release unfenced leases one after another and keep every id for good); the id
    -- asked for is not counted, as this claim would replace that lease. The role's quota row is
    -- locked until the caller commits: one role's claims of new ids wait for each other
    -- (lock_timeout), never for another role's.
    INSERT INTO idgen_registry.quota AS q (role) VALUES (who) ON CONFLICT (role) DO NOTHING;
    SELECT q.max_ids INTO allowed FROM idgen_registry.quota AS q WHERE q.role = who FOR UPDATE;
    SELECT count(*), min(l.lease_ends_ms) FILTER (WHERE l.fence_ms IS NOT NULL), bool_and(l.holder = p_holder),
           pg_catalog.string_agg(l.holder_name || ' (worker id ' || l.worker_id
               || CASE WHEN l.fence_ms IS NULL THEN ', unfenced: kept until the registry''s owner frees it'
                       ELSE '' END || ')', ', ' ORDER BY l.worker_id)
      INTO held, first_end, own_only, holding
      FROM idgen_registry.lease AS l
     WHERE l.holder_role = who AND l.holder IS NOT NULL
       AND ((l.holder_run IS NOT NULL AND l.lease_ends_ms >= now_ms) OR l.fence_ms IS NULL)
       AND l.worker_id IS DISTINCT FROM p_worker_id;
    -- All of them this server's own (its system identifier): an earlier run, the one before a
    -- crash or an immediate stop that could not release its lease (or a copy of this server
    -- running beside it): said as such, with when the first one ends.
    IF held >= allowed THEN
        RETURN QUERY SELECT CASE WHEN own_only AND first_end IS NOT NULL THEN 'earlier_run' ELSE 'over_quota' END, p_worker_id, NULL::bigint, NULL::bigint, NULL::bigint,
            NULL::bigint, holding, first_end, now_ms, held, allowed, NULL::bigint, term.word, term.hold_off_until_ms, g_lease, g_grace, term.cause, NULL::bigint, ahead;
        RETURN;
    END IF;

    -- 4. The id: the fixed one, or the first free one: this server's own from an earlier run
    -- (released, or its lease ended), else one never leased, else the fenced one whose lease
    -- ended longest ago, fixed, automatic or freed by the owner (an unfenced holder may still
    -- be issuing).
    -- SKIP LOCKED passes over a row that another claim holds locked, for as long as its caller
    -- keeps its transaction open.
    IF p_worker_id IS NULL THEN
        SELECT l.worker_id INTO id FROM idgen_registry.lease AS l
         WHERE l.holder = p_holder AND l.holder_role = who AND l.fence_ms IS NOT NULL
           AND (l.holder_run IS NULL OR l.lease_ends_ms < now_ms)
         ORDER BY l.worker_id LIMIT 1 FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            SELECT l.worker_id INTO id FROM idgen_registry.lease AS l WHERE l.holder IS NULL AND l.lease_ends_ms = 0
             ORDER BY l.worker_id LIMIT 1 FOR UPDATE SKIP LOCKED;
        END IF;
        IF NOT FOUND THEN
            SELECT l.worker_id INTO id FROM idgen_registry.lease AS l
             WHERE l.lease_ends_ms < now_ms AND l.fence_ms IS NOT NULL
             ORDER BY l.lease_ends_ms, l.worker_id LIMIT 1 FOR UPDATE SKIP LOCKED;
        END IF;
        IF NOT FOUND THEN
            RETURN QUERY SELECT 'exhausted'::text, NULL::integer, NULL::bigint, NULL::bigint,
                NULL::bigint, NULL::bigint, NULL::text, NULL::bigint, now_ms, NULL::integer, NULL::integer, NULL::bigint, term.word, term.hold_off_until_ms, g_lease, g_grace, term.cause, NULL::bigint, ahead;
            RETURN;
        END IF;
    ELSE
        id := p_worker_id;
    END IF;

    -- 5. Decided on the row locked, as it now stands.
    SELECT * INTO row_ FROM idgen_registry.lease AS l WHERE l.worker_id = id FOR UPDATE;
    previous := row_.holder_name;
    IF row_.holder IS NULL AND row_.lease_ends_ms = 0 THEN
        outcome := 'claimed';
    ELSIF row_.holder IS NULL THEN
        outcome := 'taken_over';
    ELSIF idgen_registry._kept_from(row_, p_holder, who, now_ms) THEN
        RETURN QUERY SELECT c.*, term.word, term.hold_off_until_ms, g_lease, g_grace, term.cause, NULL::bigint, ahead
                FROM idgen_registry._conflict(row_, p_holder, who, now_ms) AS c;
        RETURN;
    ELSIF row_.holder = p_holder AND row_.holder_role = who THEN
        outcome := 'resumed';
    ELSE
        outcome := 'taken_over';
    END IF;
    IF reasserting THEN
        outcome := 'reasserted';
    END IF;
    UPDATE idgen_registry.lease AS l
       SET holder = p_holder, holder_name = p_holder_name, holder_role = who, holder_run = p_run,
           predecessor_ends_ms = GREATEST(l.predecessor_ends_ms, l.lease_ends_ms, term.hold_off_until_ms),
           predecessor_fence_ms = GREATEST(l.predecessor_fence_ms, coalesce(l.fence_ms, 0)),
           fence_ms = p_fence_ms,
           lease_ends_ms = now_ms + keep_ms,
           last_horizon_ms = GREATEST(l.last_horizon_ms, coalesce(p_horizon_ms, 0)),
           claimed_at = pg_catalog.now(), renewed_at = pg_catalog.now()
     WHERE l.worker_id = id
    RETURNING * INTO row_;
    RETURN QUERY SELECT outcome, row_.worker_id, row_.lease_ends_ms, row_.last_horizon_ms,
        row_.predecessor_ends_ms, row_.predecessor_fence_ms, previous, NULL::bigint, now_ms, NULL::integer, NULL::integer,
        NULL::bigint, term.word, term.hold_off_until_ms, g_lease, g_grace, term.cause, NULL::bigint, ahead;
END
$claim$;
REVOKE ALL ON FUNCTION idgen_registry.claim(text, text, text, integer, integer, bigint, bigint, text, bigint, integer, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION idgen_registry.claim(text, text, text, integer, integer, bigint, bigint, text, bigint, integer, bigint) TO idgen_fleet;

-- Releases run p_run's lease once its server has stopped (the postmaster calls it as it exits,
-- every other process of the server gone), so it issues nothing more: the lease ends now, and
-- p_last_ms (Unix ms, its own clock), the last millisecond it issued in, joins the id's horizon
-- and becomes the fence, so that whoever takes the id next (the same server restarted, its
-- promoted standby) resumes after it at once instead of waiting for the lease and the fence.
-- Touches only the caller's own row of this run; returns the worker id released, or NULL.
CREATE FUNCTION idgen_registry.release(p_holder text, p_run text, p_last_ms bigint)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '2s'
AS $release$
DECLARE
    now_ms bigint := pg_catalog.floor(EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000);
    id integer;
    ahead integer := (SELECT c.max_clock_skew_ms FROM idgen_registry.clock AS c);
BEGIN
    -- A start or restore since the last claim begins its term first: this write must not make
    -- the registry's state look newer than the history it may have lost.
    PERFORM idgen_registry._term(now_ms);
    IF coalesce(p_last_ms, 0) > now_ms + ahead + 1000 THEN
        RAISE EXCEPTION 'last millisecond % lies further ahead of the registry''s clock (%) than this server''s could be',
            p_last_ms, now_ms
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = pg_catalog.format('It may lie at most %s ms ahead (the clock skew the registry allows, idgen_registry.clock, plus idgen''s 1-s horizon lead).', ahead + 1000),
                  HINT = 'Check the clock of the server that releases (NTP) against the registry''s.';
    END IF;
    UPDATE idgen_registry.lease AS l
       SET holder_run = NULL, lease_ends_ms = LEAST(l.lease_ends_ms, now_ms - 1),
           last_horizon_ms = GREATEST(l.last_horizon_ms, coalesce(p_last_ms, 0)),
           -- An ended run issues nothing more: its fence comes down to just past its last id
           -- (an unfenced lease stays so: its server may come back and issue before the
           -- registry answers, so its id goes to no other server).
           fence_ms = CASE WHEN l.fence_ms IS NOT NULL
                           THEN LEAST(l.fence_ms, coalesce(p_last_ms, 0) + 1) END,
           renewed_at = pg_catalog.now()
     WHERE l.holder = p_holder AND l.holder_run = p_run AND l.holder_role = pg_catalog.session_user()
    RETURNING l.worker_id INTO id;
    RETURN id;
END
$release$;
REVOKE ALL ON FUNCTION idgen_registry.release(text, text, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION idgen_registry.release(text, text, bigint) TO idgen_fleet;

-- For the registry's owner only: frees worker id p_worker_id, whose server is gone for good (its
-- data directory deleted, its machine retired) and will never release it, or whose lease is
-- unfenced (idgen.unverified_worker_id = issue), which no other server takes otherwise. It is
-- no one's any more: holder, role, run and name are cleared, the lease ends now and is fenced,
-- so any claim may take it (an automatic one once no never-leased id is left). Whoever takes it
-- resumes after the id's highest horizon and fences and after now plus its own
-- idgen.max_clock_skew, so above every id the gone server issued, as long as it really stopped
-- before this call. Returns the holder it was freed from.
CREATE FUNCTION idgen_registry.free(p_worker_id integer)
RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $free$
DECLARE
    now_ms bigint := pg_catalog.floor(EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000);
    freed text;
BEGIN
    PERFORM idgen_registry._term(now_ms);  -- as release() does
    SELECT l.holder_name || ' (system identifier ' || l.holder || ', registry role ' || l.holder_role || ')'
      INTO freed FROM idgen_registry.lease AS l WHERE l.worker_id = p_worker_id AND l.holder IS NOT NULL FOR UPDATE;
    UPDATE idgen_registry.lease AS l
       SET holder = NULL, holder_name = NULL, holder_role = NULL, holder_run = NULL,
           lease_ends_ms = now_ms - 1, fence_ms = coalesce(l.fence_ms, 0),
           renewed_at = pg_catalog.now()
     WHERE l.worker_id = p_worker_id AND l.holder IS NOT NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'worker id % is held by no server: there is nothing to free', p_worker_id
            USING ERRCODE = 'no_data_found', HINT = 'SELECT * FROM idgen_registry.holders lists the ids leased.';
    END IF;
    RETURN freed;
END
$free$;
REVOKE ALL ON FUNCTION idgen_registry.free(integer) FROM PUBLIC;

-- For the registry's owner only: begins a new term now, as a start or a promotion does, where the
-- owner has a reason of its own to think leases were lost: no new lease until every lease the
-- registry may have granted has ended (as for any new term), while the servers that hold leases
-- re-assert them, and every lease granted later resumes above that time. Returns the hold-off's
-- end.
CREATE FUNCTION idgen_registry.hold_off()
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $hold_off$
BEGIN
    RETURN pg_catalog.to_timestamp(idgen_registry._begin_term(
        pg_catalog.floor(EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint, 4) / 1000.0);
END
$hold_off$;
REVOKE ALL ON FUNCTION idgen_registry.hold_off() FROM PUBLIC;

-- For the registry's owner only, and dangerous: ends the current term's hold-off now, so that new
-- leases are granted at once. Safe only where the registry lost nothing: a restart after a clean
-- shutdown of a registry whose data directory is the one it stopped with, or a failover to a
-- standby that was synchronous (it had every claim the old primary acknowledged). After a restore
-- from a dump or an older copy, or a failover to an asynchronous standby, a server still issuing
-- under a lease the registry lost may see its worker id handed to another, and both then issue the
-- same ids. Leases granted from now on still resume above this moment. Returns the end it
-- replaced (NULL: no hold-off was running).
CREATE FUNCTION idgen_registry.end_hold_off()
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $end_hold_off$
DECLARE
    now_ms bigint := pg_catalog.floor(EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000);
    term record;
BEGIN
    -- The term as a claim would find it now: a start since the last claim begins its term first.
    SELECT * INTO term FROM idgen_registry._term(now_ms);
    IF term.hold_off_until_ms <= now_ms THEN
        RAISE NOTICE 'no hold-off is running: the registry grants leases';
        RETURN NULL;
    END IF;
    PERFORM pg_catalog.setval('idgen_registry.hold_off_until', now_ms);
    RAISE WARNING 'the hold-off that was to end at % ended now (the term began %: %)',
        pg_catalog.to_timestamp(term.hold_off_until_ms / 1000.0), pg_catalog.to_timestamp(term.began_ms / 1000.0), term.cause
        USING DETAIL = 'New leases are granted from now on. A server still issuing under a lease the registry lost can now see its worker id go to another server.';
    RETURN pg_catalog.to_timestamp(term.hold_off_until_ms / 1000.0);
END
$end_hold_off$;
REVOKE ALL ON FUNCTION idgen_registry.end_hold_off() FROM PUBLIC;

-- The registry's term and its hold-off, and the bounds it grants now, for people: one row.
CREATE VIEW idgen_registry.status AS
SELECT CASE WHEN t.began_ms > 0 THEN pg_catalog.to_timestamp(t.began_ms / 1000.0) END AS term_began,
       t.cause AS term_cause,
       CASE WHEN t.hold_off_until_ms > 0 THEN pg_catalog.to_timestamp(t.hold_off_until_ms / 1000.0) END AS hold_off_until,
       t.hold_off_until_ms > pg_catalog.floor(EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000) AS holding_off,
       c.max_lease_ms, c.max_grace_ms,
       -- _grantable_ms() written out: a view runs functions with its reader's rights
       CASE WHEN pg_catalog.floor(EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000) >= c.raise_takes_effect_ms
            THEN c.max_lease_ms::bigint + c.max_grace_ms
            ELSE LEAST(c.keep_before_raise_ms, c.max_lease_ms::bigint + c.max_grace_ms) END AS grantable_ms,
       CASE WHEN c.raise_takes_effect_ms > pg_catalog.floor(EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000)
            THEN pg_catalog.to_timestamp(c.raise_takes_effect_ms / 1000.0) END AS raise_takes_effect
  FROM idgen_registry.clock AS c,
       LATERAL (SELECT s.last_value & ((1::bigint << 42) - 1) AS began_ms,
                       CASE WHEN s.last_value & ((1::bigint << 42) - 1) = 0 THEN 0
                            ELSE (SELECT h.last_value FROM idgen_registry.hold_off_until AS h) END AS hold_off_until_ms,
                       CASE (SELECT k.last_value FROM idgen_registry.term_cause AS k)
                           WHEN 0 THEN 'installed' WHEN 1 THEN 'new timeline' WHEN 2 THEN 'restored'
                           WHEN 3 THEN 'started' ELSE 'hold_off' END AS cause
                  FROM idgen_registry.term AS s) AS t;
REVOKE ALL ON TABLE idgen_registry.status FROM PUBLIC;
GRANT SELECT ON TABLE idgen_registry.status TO idgen_fleet;

-- Who holds which id, until when, and how far each id's holders have issued. A member sees the
-- system identifier of its own role's servers only (the owner sees all).
CREATE VIEW idgen_registry.holders AS
SELECT l.worker_id,
       CASE WHEN l.holder_role = pg_catalog.session_user()
              OR pg_catalog.has_table_privilege('idgen_registry.lease', 'SELECT') THEN l.holder END AS holder,
       l.holder_name, l.holder_role,
       pg_catalog.to_timestamp(l.lease_ends_ms / 1000.0) AS lease_ends,
       l.lease_ends_ms >= pg_catalog.floor(EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000) AS live,
       l.fence_ms IS NOT NULL AS fenced,
       l.holder_run IS NULL AS released,
       CASE WHEN l.last_horizon_ms > 0 THEN pg_catalog.to_timestamp(l.last_horizon_ms / 1000.0) END AS last_horizon,
       l.claimed_at, l.renewed_at
  FROM idgen_registry.lease AS l
 WHERE l.holder IS NOT NULL;
REVOKE ALL ON TABLE idgen_registry.holders FROM PUBLIC;
GRANT SELECT ON TABLE idgen_registry.holders TO idgen_fleet;

-- ---- Counters of short codes ------------------------------------------------------------------
--
-- A counter hands the fleet's servers blocks of consecutive numbers (block_size each, 1,000 by
-- default: the article's INCRBY 1000), which each server issues as short codes of the counter's
-- width from shared memory, taking the next block in the background before its block runs out
-- (short_code_next(), docs/base62.md). A block is granted once: its index comes from a sequence
-- (nextval, which no transaction undoes and no member can hold up).
--
-- A registry that lost its latest history (a failover to a standby that missed it, a restore, a
-- start from an older copy) may have granted blocks it no longer knows of, and the codes made from
-- them are in the fleet's tables for good: unlike a lease, a block does not end. So grants are
-- paced: a counter grants block indexes below its line, L(t) = anchor_block + floor((t -
-- anchor_ms) / block_ms), plus a burst of ceil(burst_ms / block_ms) blocks, plus at most 16 more
-- for takes that raced (a take past that is refused and its index skipped). Every index ever
-- granted lies below L(t) + K then (K: the burst plus 16), on any line the counter recorded
-- before, since an anchor only moves onto or below the line it replaces. A new term (the same
-- moments that begin one for leases, _begin_term()) sets each counter's next index to L(now +
-- the clock skew) + K from the line its state holds: above every block the lost history may have
-- granted, whenever it was lost, with no hold-off and no operator step. The line stays the same
-- across the jump (anchored at now + skew), so terms that follow each other skip no more than one
-- would; grants pause until the line reaches the new index (16 blocks and the skew: about 1.2 s
-- with the defaults). An idle counter's line is moved down to its next index at each answer the
-- registry gives (a claim, a renewal, a block), so that a restore skips about the rate times the
-- time since then: docs/base62.md has the figures.
--
-- A counter's shape (its width, its block size, its pace) is fixed for its life: codes of two
-- widths do not sort together, and a raised pace would let a lost history grant more than the
-- state it left says. Create another counter instead. The owner creates one with
--   SELECT idgen_registry.create_counter('links', 6);
CREATE TABLE idgen_registry.counter (
    name         text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]{0,39}$'),
    -- Codes of exactly this many base62 digits: numbers 0 to 62^width - 1 (11: every bigint).
    width        integer NOT NULL CHECK (width BETWEEN 1 AND 11),
    block_size   integer NOT NULL CHECK (block_size BETWEEN 1 AND 10000000),
    -- The pace: a block every block_ms on average (a fraction of a millisecond for a fast
    -- counter), and bursts of up to burst_ms worth.
    block_ms     numeric NOT NULL CHECK (block_ms BETWEEN 0.001 AND 3600000),
    burst_ms     integer NOT NULL CHECK (burst_ms BETWEEN 0 AND 3600000),
    -- The line's anchor: block index anchor_block at anchor_ms (Unix ms, the registry's clock;
    -- in the future just after a new term).
    anchor_block bigint NOT NULL,
    anchor_ms    bigint NOT NULL,
    -- Numbers skipped by new terms (the blocks a lost history may have granted), for people.
    skipped      numeric NOT NULL DEFAULT 0,
    created_at   timestamptz NOT NULL DEFAULT pg_catalog.now()
);
REVOKE ALL ON TABLE idgen_registry.counter FROM PUBLIC;

CREATE FUNCTION idgen_registry._counter_fixed()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fixed$
BEGIN
    IF (NEW.name, NEW.width, NEW.block_size, NEW.block_ms, NEW.burst_ms)
       IS DISTINCT FROM (OLD.name, OLD.width, OLD.block_size, OLD.block_ms, OLD.burst_ms) THEN
        RAISE EXCEPTION 'counter %''s name, width, block size and pace are fixed for its life', OLD.name
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Create another counter (idgen_registry.create_counter()) and move the servers to it: codes of two widths do not sort together, and a faster pace would let a registry that lost its latest history hand out blocks twice.';
    END IF;
    RETURN NEW;
END
$fixed$;
REVOKE ALL ON FUNCTION idgen_registry._counter_fixed() FROM PUBLIC;
CREATE TRIGGER counter_fixed BEFORE UPDATE ON idgen_registry.counter
    FOR EACH ROW EXECUTE FUNCTION idgen_registry._counter_fixed();

-- The sequence of counter name's block indexes.
CREATE FUNCTION idgen_registry._counter_seq(name text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $seq$
    SELECT pg_catalog.format('idgen_registry.%I', 'counter_' || name)
$seq$;
REVOKE ALL ON FUNCTION idgen_registry._counter_seq(text) FROM PUBLIC;

-- The next block index counter name's sequence hands out.
CREATE FUNCTION idgen_registry._counter_next(name text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $next$
DECLARE
    n bigint;
BEGIN
    EXECUTE pg_catalog.format('SELECT CASE WHEN s.is_called THEN s.last_value + 1 ELSE s.last_value END FROM %s AS s',
                              idgen_registry._counter_seq(name)) INTO n;
    RETURN n;
END
$next$;
REVOKE ALL ON FUNCTION idgen_registry._counter_next(text) FROM PUBLIC;

-- Counter k's line at t_ms, and the blocks past it any grant may reach (K above).
CREATE FUNCTION idgen_registry._counter_line(k idgen_registry.counter, t_ms bigint)
RETURNS bigint
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $line$
    SELECT k.anchor_block + pg_catalog.floor((t_ms - k.anchor_ms) / k.block_ms)::bigint
$line$;
REVOKE ALL ON FUNCTION idgen_registry._counter_line(idgen_registry.counter, bigint) FROM PUBLIC;

CREATE FUNCTION idgen_registry._counter_burst(k idgen_registry.counter)
RETURNS bigint
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $burst$
    SELECT pg_catalog.ceil(k.burst_ms / k.block_ms)::bigint
$burst$;
REVOKE ALL ON FUNCTION idgen_registry._counter_burst(idgen_registry.counter) FROM PUBLIC;

-- How many blocks a counter has: its numbers are 0 to LEAST(62^width, 2^63) - 1.
CREATE FUNCTION idgen_registry._counter_blocks(k idgen_registry.counter)
RETURNS numeric
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $blocks$
    SELECT pg_catalog.ceil(LEAST(62::numeric ^ k.width, 9223372036854775807::numeric) / k.block_size)
$blocks$;
REVOKE ALL ON FUNCTION idgen_registry._counter_blocks(idgen_registry.counter) FROM PUBLIC;

-- Moves the lines of counter p_only (NULL: every counter) whose anchor is older than their burst
-- (at least a second) down to their next index, never above the line they replace; a row another
-- transaction holds is passed over (a member that keeps a take open blocks no one: its anchor
-- just stays where it was, which only costs a restore more skipped numbers).
CREATE FUNCTION idgen_registry._counters_reanchor(now_ms bigint, p_only text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $reanchor$
DECLARE
    k idgen_registry.counter%ROWTYPE;
BEGIN
    FOR k IN SELECT * FROM idgen_registry.counter AS c
              WHERE (p_only IS NULL OR c.name = p_only) AND now_ms - c.anchor_ms >= GREATEST(c.burst_ms, 1000)
              FOR UPDATE SKIP LOCKED LOOP
        UPDATE idgen_registry.counter AS c
           SET anchor_block = LEAST(idgen_registry._counter_next(k.name), idgen_registry._counter_line(k, now_ms)),
               anchor_ms = now_ms
         WHERE c.name = k.name;
    END LOOP;
END
$reanchor$;
REVOKE ALL ON FUNCTION idgen_registry._counters_reanchor(bigint, text) FROM PUBLIC;

-- At a new term (from _begin_term(), which holds the id_space row): each counter's next index
-- goes to its line at at_ms (now plus the clock skew the registry allows between its hosts) plus
-- K, above every index granted in any history of the state it holds; its anchor to the same line
-- at at_ms. A row another transaction holds keeps its anchor (the sequence, which is what
-- matters, is raised all the same).
CREATE FUNCTION idgen_registry._counters_jump(at_ms bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $jump$
DECLARE
    name_ text;
    k idgen_registry.counter%ROWTYPE;
    locked boolean;
    n bigint;
    line bigint;
    to_ bigint;
BEGIN
    FOR name_ IN SELECT c.name FROM idgen_registry.counter AS c LOOP
        -- The row as it stands now, locked (a re-anchor committed meanwhile is seen); where
        -- another transaction holds it, as last committed, which only errs high.
        SELECT * INTO k FROM idgen_registry.counter AS c WHERE c.name = name_ FOR UPDATE SKIP LOCKED;
        locked := FOUND;
        IF NOT locked THEN
            SELECT * INTO k FROM idgen_registry.counter AS c WHERE c.name = name_;
        END IF;
        n := idgen_registry._counter_next(k.name);
        line := idgen_registry._counter_line(k, at_ms);
        to_ := line + idgen_registry._counter_burst(k) + 16;
        IF to_ > n THEN
            PERFORM pg_catalog.setval(idgen_registry._counter_seq(k.name), to_, false);
            IF locked THEN
                UPDATE idgen_registry.counter AS c
                   SET anchor_block = line, anchor_ms = at_ms,
                       skipped = c.skipped + (to_ - n)::numeric * c.block_size
                 WHERE c.name = k.name;
            END IF;
        END IF;
    END LOOP;
END
$jump$;
REVOKE ALL ON FUNCTION idgen_registry._counters_jump(bigint) FROM PUBLIC;

-- For the registry's owner only: a counter of short codes of p_width base62 digits, handed out in
-- blocks of p_block_size numbers, at most p_codes_per_second on average (a block each
-- block_size / p_codes_per_second s, 10 ms with the defaults; at most 1,000 blocks a
-- millisecond) in bursts of up to p_burst_ms worth.
-- Pace it near the fleet's real need: a registry that lost its latest history skips the blocks
-- the pace allowed meanwhile (docs/base62.md). Its first block starts at p_start.
CREATE FUNCTION idgen_registry.create_counter(p_name text, p_width integer, p_block_size integer DEFAULT 1000,
                                              p_codes_per_second integer DEFAULT 100000,
                                              p_burst_ms integer DEFAULT 1000, p_start bigint DEFAULT 0)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $create$
DECLARE
    now_ms bigint := pg_catalog.floor(EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000);
    first_block bigint;
BEGIN
    IF p_name IS NULL OR p_name !~ '^[a-z][a-z0-9_]{0,39}$' THEN
        RAISE EXCEPTION 'counter name % is not one a counter can have', p_name
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A lower-case letter, then up to 39 lower-case letters, digits or underscores, e.g. links.';
    END IF;
    IF p_codes_per_second IS NULL OR p_codes_per_second < 1 OR p_block_size IS NULL OR p_block_size < 1 THEN
        RAISE EXCEPTION 'a counter needs a block size and a pace of at least 1'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_start IS NULL OR p_start < 0 OR p_start % p_block_size <> 0 THEN
        RAISE EXCEPTION 'a counter starts at a whole block: % is not a multiple of the block size %', p_start, p_block_size
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    first_block := p_start / p_block_size;
    INSERT INTO idgen_registry.counter (name, width, block_size, block_ms, burst_ms, anchor_block, anchor_ms)
    VALUES (p_name, p_width, p_block_size,
            GREATEST(pg_catalog.round(p_block_size::numeric * 1000 / p_codes_per_second, 6), 0.001), p_burst_ms,
            first_block, now_ms);
    EXECUTE pg_catalog.format('CREATE SEQUENCE %s AS bigint MINVALUE 0 START %s NO CYCLE',
                              idgen_registry._counter_seq(p_name), first_block);
    EXECUTE pg_catalog.format('REVOKE ALL ON SEQUENCE %s FROM PUBLIC', idgen_registry._counter_seq(p_name));
END
$create$;
REVOKE ALL ON FUNCTION idgen_registry.create_counter(text, integer, integer, integer, integer, bigint) FROM PUBLIC;

-- Blocks of counter p_counter for the caller (a member of idgen_fleet): up to p_blocks
-- consecutive ones (1 to 64: a server that issues fast asks for more at once), as one row,
--   outcome 'granted'       numbers first_number to end_number - 1, to be encoded in width digits
--           'no_counter'    the registry has no counter of that name
--           'rate_limited'  the counter's pace allows the next block at retry_at_ms (the
--                           registry's clock): just after a new term, or a fleet taking blocks
--                           faster than the counter was created for
--           'exhausted'     every number of the counter's width was handed out
--   registry_term, term_cause: the registry's term, as claim() says it.
-- It locks nothing a member can hold up: each index is a nextval, and the anchor's row is passed
-- over when another transaction holds it. Fewer blocks than asked come where the pace allows
-- fewer, or where another take's index falls between two (the grant stops there; that index is
-- skipped).
CREATE FUNCTION idgen_registry.take_block(p_counter text, p_blocks integer DEFAULT 1)
RETURNS TABLE (outcome text, first_number bigint, end_number bigint, width integer, block_size integer,
               retry_at_ms bigint, registry_now_ms bigint, registry_term bigint, term_cause text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $take$
DECLARE
    now_ms bigint := pg_catalog.floor(EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000);
    term record;
    k idgen_registry.counter%ROWTYPE;
    n bigint;
    allowed bigint;
    idx bigint;
    first_idx bigint;
    last_idx bigint;
BEGIN
    -- Each statement below must see what others committed before it (the re-read after the
    -- draws): a snapshot held from the transaction's start would see an old line.
    IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'take_block() runs at READ COMMITTED only, not %', pg_catalog.current_setting('transaction_isolation')
            USING ERRCODE = 'invalid_transaction_state',
                  HINT = 'Call it in a transaction of the default isolation level (idgen''s block worker does).';
    END IF;
    SELECT * INTO term FROM idgen_registry._term(now_ms);
    SELECT * INTO k FROM idgen_registry.counter AS c WHERE c.name = p_counter;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'no_counter'::text, NULL::bigint, NULL::bigint, NULL::integer, NULL::integer,
            NULL::bigint, now_ms, term.word, term.cause;
        RETURN;
    END IF;
    allowed := idgen_registry._counter_line(k, now_ms) + idgen_registry._counter_burst(k);
    FOR i IN 1 .. LEAST(GREATEST(coalesce(p_blocks, 1), 1), 64) LOOP
        n := idgen_registry._counter_next(k.name);
        EXIT WHEN n >= allowed;
        idx := pg_catalog.nextval(idgen_registry._counter_seq(k.name));
        -- Too many takes raced past the check above, or another take's index came between
        -- two of this one: this index is skipped, never granted.
        EXIT WHEN idx >= allowed + 16 OR (last_idx IS NOT NULL AND idx <> last_idx + 1);
        EXIT WHEN idx >= idgen_registry._counter_blocks(k);
        first_idx := coalesce(first_idx, idx);
        last_idx := idx;
    END LOOP;
    IF first_idx IS NULL THEN
        IF idx IS NOT NULL AND idx >= idgen_registry._counter_blocks(k) THEN
            RETURN QUERY SELECT 'exhausted'::text, NULL::bigint, NULL::bigint, k.width, k.block_size,
                NULL::bigint, now_ms, term.word, term.cause;
        ELSE
            RETURN QUERY SELECT 'rate_limited'::text, NULL::bigint, NULL::bigint, k.width, k.block_size,
                now_ms + pg_catalog.ceil((GREATEST(n, coalesce(idx, n)) - allowed + 1) * k.block_ms)::bigint, now_ms, term.word, term.cause;
        END IF;
        RETURN;
    END IF;
    -- A re-anchor committed while the draws ran lowered the line they were checked against:
    -- the grant stops below the line as it stands now (the rest is skipped, never granted).
    SELECT * INTO k FROM idgen_registry.counter AS c WHERE c.name = p_counter;
    last_idx := LEAST(last_idx, idgen_registry._counter_line(k, now_ms) + idgen_registry._counter_burst(k) + 15);
    -- A new term begun while this take ran (the owner's hold_off()), or whose move of the
    -- counters is not done, may have read the counter before these indexes were drawn: they are
    -- skipped, never granted.
    IF last_idx < first_idx
       OR (SELECT s.last_value FROM idgen_registry.term AS s) <> term.word
       OR (SELECT s.last_value FROM idgen_registry.counters_term AS s) <> term.word THEN
        RETURN QUERY SELECT 'rate_limited'::text, NULL::bigint, NULL::bigint, k.width, k.block_size,
            now_ms + 1, now_ms, term.word, term.cause;
        RETURN;
    END IF;
    PERFORM idgen_registry._counters_reanchor(now_ms, k.name);
    -- The grant is durable before it is answered: the commit then flushes the WAL (and waits for
    -- synchronous standbys) even where this call's nextvals wrote none (values another call
    -- logged ahead, whose transaction may not have committed).
    PERFORM pg_catalog.pg_current_xact_id();
    RETURN QUERY SELECT 'granted'::text, first_idx * k.block_size,
        LEAST((last_idx::numeric + 1) * k.block_size, LEAST(62::numeric ^ k.width, 9223372036854775807::numeric))::bigint,
        k.width, k.block_size, NULL::bigint, now_ms, term.word, term.cause;
END
$take$;
REVOKE ALL ON FUNCTION idgen_registry.take_block(text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION idgen_registry.take_block(text, integer) TO idgen_fleet;

-- The counters, for people: where each stands.
CREATE VIEW idgen_registry.counters AS
SELECT k.name, k.width, k.block_size,
       pg_catalog.round(k.block_size * 1000.0 / k.block_ms) AS codes_per_second,
       idgen_registry._counter_next(k.name)::numeric * k.block_size AS next_number,
       k.skipped, k.created_at
  FROM idgen_registry.counter AS k;
REVOKE ALL ON TABLE idgen_registry.counters FROM PUBLIC;

-- The term it is installed in, which follows no other (no hold-off), on this server, its data and
-- its start as they are now.
DO $first_term$
DECLARE
    here record;
BEGIN
    SELECT * INTO here FROM idgen_registry._where();
    PERFORM pg_catalog.setval('idgen_registry.term', here.timeline << 42);
    PERFORM pg_catalog.setval('idgen_registry.counters_term', here.timeline << 42);
    PERFORM pg_catalog.setval('idgen_registry.incarnation', here.incarnation);
    PERFORM pg_catalog.setval('idgen_registry.started', here.started_ms);
END
$first_term$;

COMMIT;
