"""Moving a table from another generator of the same layout onto idgen: a table
whose ids come from Instagram's PL/pgSQL next_id() switches its DEFAULT to snowflake_next() while
writers keep inserting, and snowflake_raise_floor() keeps every new id above every stored one —
durably (the horizon file, its WAL record on a standby, a crash). Without the floor the same switch
hands out ids below the stored ones: the control test shows it."""
import os
import threading
import time

import psycopg2
import pytest
from conftest import sqlstate_and_hint
from idgen_harness.cluster import wait_for_replay

pytestmark = pytest.mark.version_specific("wal")

INSTAGRAM_EPOCH = 1314220021721  # Instagram's next_id(): 2011-08-24 21:07:01.721 UTC
SHARD = 5

# Instagram's published generator (41 bits of ms, 13 of shard id, 10 of a sequence), as shops run
# it. `ahead` shifts its clock: the ids of a table often came from another server (the shard's
# earlier home, an application host), whose clock may run ahead of this one's.
NEXT_ID = """
CREATE SEQUENCE orders_id_seq;
CREATE FUNCTION next_id(OUT result bigint) AS $$
DECLARE
    our_epoch bigint := {epoch};
    seq_id bigint;
    now_millis bigint;
    shard_id int := {shard};
BEGIN
    SELECT nextval('orders_id_seq') % 1024 INTO seq_id;
    SELECT FLOOR(EXTRACT(EPOCH FROM clock_timestamp() + interval '{ahead} ms') * 1000) INTO now_millis;
    result := (now_millis - our_epoch) << 23;
    result := result | (shard_id << 10);
    result := result | (seq_id);
END;
$$ LANGUAGE plpgsql;
"""

SWITCH = ["BEGIN",
          # waits for the inserts in flight (their ids are then in max(id)) and holds new ones
          # until COMMIT; they then take the new DEFAULT
          "ALTER TABLE orders ALTER COLUMN id SET DEFAULT snowflake_next(),"
          " ALTER COLUMN made_by SET DEFAULT 'idgen'"]


def instagram_server(cluster_factory, name, ahead_ms):
    c = cluster_factory(name, worker_id=SHARD,
                        conf=["idgen.layout = 'instagram'", f"idgen.epoch = {INSTAGRAM_EPOCH}"])
    c.q("CREATE EXTENSION idgen",
        NEXT_ID.format(epoch=INSTAGRAM_EPOCH, shard=SHARD, ahead=ahead_ms),
        "CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT next_id(), made_by text NOT NULL DEFAULT 'next_id',"
        " note text)")
    return c


def switch_under_load(c, *, raise_floor, writers=3, before_s=1.0, after_s=2.5):
    """Writers insert rows one by one, each in its own transaction; after `before_s` the table
    switches to snowflake_next() (with or without raising the floor), and they go on for
    `after_s`. Returns (the value snowflake_raise_floor() returned or None, writer errors)."""
    stop = threading.Event()
    errors = []
    deadline = time.monotonic() + before_s + after_s + 30

    def write():
        conn = c.connect()
        try:
            with conn.cursor() as cur:
                while not stop.is_set() and time.monotonic() < deadline:
                    cur.execute("INSERT INTO orders (note) VALUES ('load')")
        except psycopg2.Error as e:
            errors.append(f"{e.pgcode}: {e}")
        finally:
            conn.close()

    threads = [threading.Thread(target=write) for _ in range(writers)]
    for t in threads:
        t.start()
    try:
        time.sleep(before_s)
        statements = list(SWITCH)
        if raise_floor:
            statements.append("SELECT snowflake_raise_floor(max(id)) FROM orders")
        conn = c.connect()
        try:
            with conn.cursor() as cur:
                for sql in statements:
                    cur.execute(sql)
                returned = cur.fetchone()[0] if raise_floor else None
                cur.execute("COMMIT")
        finally:
            conn.close()
        time.sleep(after_s)
    finally:
        stop.set()
        for t in threads:
            t.join()
    return returned, errors


def test_a_table_moves_from_instagrams_next_id_under_load_and_every_new_id_is_above_every_stored_one(
        cluster_factory):
    c = instagram_server(cluster_factory, "moving", ahead_ms=1500)
    standby = c.base_backup(os.path.join(cluster_factory.base, "standby"))
    cluster_factory.made.append(standby)
    standby.start()
    returned, errors = switch_under_load(c, raise_floor=True)
    assert errors == []
    old_n, old_top, new_n, new_low, distinct, total = c.q(
        "SELECT count(*) FILTER (WHERE made_by = 'next_id'), max(id) FILTER (WHERE made_by = 'next_id'),"
        "       count(*) FILTER (WHERE made_by = 'idgen'), min(id) FILTER (WHERE made_by = 'idgen'),"
        "       count(DISTINCT id), count(*) FROM orders")[0]
    assert old_n > 100 and new_n > 100, (old_n, new_n)
    assert distinct == total, "no duplicate"
    assert new_low > old_top, (new_low, old_top)
    assert returned > old_top and new_low >= returned, (returned, old_top, new_low)
    # idgen's ids are Instagram's layout, epoch and shard: decoded by the same formula
    assert c.one(f"SELECT snowflake_worker_id({new_low}, 'instagram') = {SHARD}"
                 f" AND snowflake_sequence({new_low}, 'instagram') < 1024")
    # Durable: the horizon the floor raised is on the standby (the WAL record) and in the file
    # a crash restarts from.
    end_of_top = (f"snowflake_timestamp({old_top}, {INSTAGRAM_EPOCH}, 'instagram')"
                  " + interval '1 ms' - interval '1 us'")
    wait_for_replay(c, standby)
    assert standby.one(f"SELECT horizon >= {end_of_top} FROM idgen_stats()")
    c.stop("immediate")
    c.start()
    assert c.one(f"SELECT horizon >= {end_of_top} FROM idgen_stats()")
    assert c.one(f"SELECT snowflake_next() > {old_top}")


def test_without_the_floor_the_same_switch_issues_ids_below_the_stored_ones(cluster_factory):
    """The control: the hazard the floor guards against is real in this setting."""
    c = instagram_server(cluster_factory, "unguarded", ahead_ms=1500)
    _, errors = switch_under_load(c, raise_floor=False, after_s=0.5)
    assert all(e.startswith("23505") for e in errors), errors  # a duplicate key, if any
    old_top = c.one("SELECT max(id) FROM orders WHERE made_by = 'next_id'")
    below = c.one(f"SELECT count(*) FROM orders WHERE made_by = 'idgen' AND id <= {old_top}")
    assert below > 0, "new ids below the stored ones"


def test_only_a_superuser_raises_the_floor_and_an_id_from_far_ahead_is_refused(cluster_factory):
    c = instagram_server(cluster_factory, "rights", ahead_ms=0)
    c.q("CREATE ROLE app LOGIN")
    e = c.error("SELECT snowflake_raise_floor(1)", user="app")
    assert e.pgcode == "42501", e  # EXECUTE is revoked from PUBLIC
    c.q("GRANT EXECUTE ON FUNCTION snowflake_raise_floor(bigint) TO app")
    text = sqlstate_and_hint(c.error("SELECT snowflake_raise_floor(1)", user="app"))
    assert text.startswith("42501: permission denied for function snowflake_raise_floor"), text
    assert "HINT: Run it as a superuser" in text, text
    # An id an hour ahead of the clock: idgen would issue nothing for an hour.
    ahead = c.one(f"SELECT snowflake_from_timestamp(now() + interval '1 hour', {INSTAGRAM_EPOCH}, 'instagram')")
    before = c.one("SELECT snowflake_next()")
    e = c.error(f"SELECT snowflake_raise_floor({ahead})")
    text = sqlstate_and_hint(e)
    assert text.startswith(f"22023: snowflake_raise_floor() refuses id {ahead}: the id's time"), text
    assert "HINT: Check that the ids were made under this server's idgen.layout and idgen.epoch" in text, text
    assert c.one(f"SELECT snowflake_next() BETWEEN {before} AND {before} + (10000::bigint << 23)"), \
        "the refused floor moved nothing"
    assert c.one("SELECT snowflake_raise_floor(-1) > 0"), "a negative id is below every id"


def test_a_sessions_longer_clock_wait_does_not_let_it_raise_the_floor_past_the_servers(cluster_factory):
    """The floor holds back every session's ids: how far ahead it may go is the configured
    idgen.max_clock_wait (1 s here), not what the calling session SET."""
    c = instagram_server(cluster_factory, "session_wait", ahead_ms=0)
    ahead = c.one(f"SELECT snowflake_from_timestamp(now() + interval '60 seconds', {INSTAGRAM_EPOCH}, 'instagram')")
    e = c.error("SET idgen.max_clock_wait = '1h'", f"SELECT snowflake_raise_floor({ahead})")
    assert e.pgcode == "22023" and "refuses id" in e.diag.message_primary, e
    # every other session on the configured wait still gets ids at once
    assert c.one("SELECT snowflake_next() > 0")
