"""Snowflake layouts on a server (idgen.layout): ids made under the chosen split and time unit, a
layout checked at start-up, the layout recorded with the horizon so that it never changes
silently, and a standby that replays a primary of another layout."""
import json
import os
import subprocess
import time

import psycopg2
import pytest
from conftest import sqlstate_and_hint
from idgen_harness.cluster import wait_for_replay

pytestmark = pytest.mark.version_specific("guc", "wal")

EPOCH = 1288834974657  # idgen.epoch's default


def horizon_file(c):
    with open(os.path.join(c.data_dir, "idgen_horizon")) as f:
        return f.read()


def test_a_sonyflake_server_makes_sonyflake_ids_of_its_worker_and_its_ten_millisecond_ticks(cluster_factory):
    c = cluster_factory("sony", worker_id=40000, conf=["idgen.layout = 'sonyflake'"])
    c.q("CREATE EXTENSION idgen")
    assert c.one("SHOW idgen.layout") == "sonyflake"
    before_ms = time.time() * 1000
    rows = c.q("""SELECT id, snowflake_worker_id(id, 'sonyflake'), snowflake_sequence(id, 'sonyflake'),
                         extract(epoch FROM snowflake_timestamp(id)) * 1000
                  FROM (SELECT snowflake_next() AS id FROM generate_series(1, 2000)) s""")
    after_ms = time.time() * 1000
    ids = [r[0] for r in rows]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert {r[1] for r in rows} == {40000}
    assert max(r[2] for r in rows) <= 255, "8 bits of sequence"
    # each id's tick began at most a tick before the call, and not after it
    assert all(before_ms - 10 <= r[3] <= after_ms for r in rows), (before_ms, rows[0], after_ms)
    assert all((int(r[3]) - EPOCH) % 10 == 0 for r in rows), "10-ms ticks from the epoch"
    # 2,000 ids need at least 8 ticks of 256: the generator waited into each next tick
    assert len({r[3] for r in rows}) >= 8
    # the decoders that read the server's layout agree with the explicit ones; the one-argument
    # IMMUTABLE ones (Twitter's layout) refuse and name the form to use
    assert c.one(f"SELECT snowflake_timestamp({ids[0]}) = snowflake_timestamp({ids[0]}, {EPOCH}, 'sonyflake')")
    text = sqlstate_and_hint(c.error(f"SELECT snowflake_worker_id({ids[0]})"))
    assert text.startswith("55000: snowflake_worker_id(id) decodes Twitter's layout, and this server's "
                           "idgen.layout is sonyflake"), text
    assert "HINT: Pass the layout: snowflake_worker_id(id, 'sonyflake')" in text, text
    c.stop()
    assert " layout=sonyflake" in horizon_file(c), "the horizon records the layout"


def test_a_js53_server_makes_only_ids_a_javascript_number_holds(cluster_factory):
    c = cluster_factory("js", worker_id=127, conf=["idgen.layout = 'js53'"])
    c.q("CREATE EXTENSION idgen")
    top, n = c.q("SELECT max(id), count(*) FROM (SELECT snowflake_next() AS id FROM generate_series(1, 5000)) s")[0]
    assert n == 5000 and top < 2**53
    assert float(top) == top, "exact as a double"


@pytest.mark.parametrize("conf, says", [
    (["idgen.layout = '42/11/12'"], "invalid value for idgen.layout: 42/11/12 does not fit a bigint"),
    (["idgen.layout = 'snowflakes'"], 'invalid value for idgen.layout: "snowflakes" is not a snowflake layout'),
    (["idgen.layout = 'js53'", "idgen.worker_id = 128"],
     "idgen.worker_id = 128 does not fit layout js53's worker field (7 bits: 0-127)"),
])
def test_a_layout_that_does_not_fit_stops_the_server_from_starting_saying_why(cluster_factory, conf, says):
    c = cluster_factory("bad_layout", start=False, conf=conf)
    assert not c.try_start()
    assert says in c.log(), c.log()[-2000:]


def test_a_changed_layout_is_taken_only_where_its_ids_sort_above_every_id_made_before(cluster_factory):
    """Twitter's ids to Instagram's: Instagram's carry the time a bit further up, so they sort
    above; back to Twitter's, they would sort below, and snowflake_next() refuses until the
    setting is put back. The horizon file keeps naming the layout ids were made under."""
    c = cluster_factory("change", worker_id=5)
    c.q("CREATE EXTENSION idgen")
    c.q("CREATE TABLE t (id bigint)")
    c.q("INSERT INTO t SELECT snowflake_next() FROM generate_series(1, 10000)")
    twitter_top = c.one("SELECT max(id) FROM t")
    c.stop()
    assert "layout=" not in horizon_file(c) and f" epoch={EPOCH}" in horizon_file(c), \
        "Twitter's layout is implied; the epoch is written"
    c.append_conf("idgen.layout = 'instagram'")
    c.start()
    assert (f"snowflake ids now made under idgen.epoch {EPOCH} and idgen.layout instagram, before under "
            f"idgen.epoch {EPOCH} and idgen.layout twitter") in c.log()
    c.q("INSERT INTO t SELECT snowflake_next() FROM generate_series(1, 10000)")
    assert c.one(f"SELECT min(id) > {twitter_top} FROM t WHERE id > {twitter_top}")
    assert c.one(f"SELECT count(*) FROM t WHERE id > {twitter_top}") == 10000
    assert c.one("SELECT count(DISTINCT id) FROM t") == 20000
    instagram_top = c.one("SELECT max(id) FROM t")
    c.stop()
    assert " layout=instagram" in horizon_file(c)
    c.append_conf("idgen.layout = 'twitter'")
    c.start()
    e = c.error("SELECT snowflake_next()")
    text = sqlstate_and_hint(e)
    assert text.startswith(f"55000: snowflake_next() refuses to run: this server makes ids under idgen.epoch {EPOCH} "
                           "and idgen.layout twitter, and the file idgen_horizon records ids made under "
                           f"idgen.epoch {EPOCH} and idgen.layout instagram"), text
    assert f"HINT: Set idgen.epoch = '{EPOCH}' and idgen.layout = 'instagram' in postgresql.conf and restart" \
        in text, text
    assert "records ids made under idgen.epoch" in c.log()
    c.stop()
    assert " layout=instagram" in horizon_file(c), "a refused change leaves the file naming the old layout"
    c.append_conf("idgen.layout = 'instagram'")
    c.start()
    assert c.one(f"SELECT snowflake_next() > {instagram_top}")


def ids_and_stop(c, n=20000):
    c.q(f"INSERT INTO t SELECT snowflake_next() FROM generate_series(1, {n})")
    top = c.one("SELECT max(id) FROM t")
    c.stop()
    return top


def test_a_later_epoch_after_a_clean_stop_never_reissues_an_id(cluster_factory):
    """idgen.epoch moved 3 s later after a clean stop: ids of time t would be the old epoch's ids
    of t - 3 s, which this server issued. Refused, saying from when it could be taken; taken
    when the server starts again after that moment, every new id above every old one."""
    c = cluster_factory("later_epoch", worker_id=1)
    c.q("CREATE EXTENSION idgen")
    c.q("CREATE TABLE t (id bigint)")
    top = ids_and_stop(c)
    assert f" epoch={EPOCH}" in horizon_file(c)
    c.append_conf(f"idgen.epoch = '{EPOCH + 3000}'")
    c.start()
    e = c.error("SELECT snowflake_next()")
    text = sqlstate_and_hint(e)
    assert text.startswith(f"55000: snowflake_next() refuses to run: this server makes ids under idgen.epoch "
                           f"{EPOCH + 3000} and idgen.layout twitter, and the file idgen_horizon records ids made "
                           f"under idgen.epoch {EPOCH} and idgen.layout twitter"), text
    detail = e.diag.message_detail
    assert "sort above every id made under" in detail and " only from " in detail, detail
    assert f"HINT: Set idgen.epoch = '{EPOCH}' and idgen.layout = 'twitter' in postgresql.conf and restart the " \
           "server, or restart it after " in text, text
    c.stop()
    assert f" epoch={EPOCH}" in horizon_file(c), "a refused change leaves the file naming the old epoch"
    time.sleep(4.5)  # past the moment the refusal named (3 s, plus a second's margin, after the last id)
    c.start()
    assert "they resume after" in c.log() or "snowflake ids now made under" in c.log(), c.log()[-2000:]
    c.q("INSERT INTO t SELECT snowflake_next() FROM generate_series(1, 20000)")
    assert c.one(f"SELECT count(*) FROM t WHERE id > {top}") == 20000
    assert c.one("SELECT count(DISTINCT id) FROM t") == 40000
    c.stop()
    assert f" epoch={EPOCH + 3000}" in horizon_file(c)


def test_a_slightly_later_epoch_is_taken_and_its_first_ids_wait_for_the_clock(cluster_factory):
    c = cluster_factory("slightly_later", worker_id=1, conf=["idgen.max_clock_wait = '10s'"])
    c.q("CREATE EXTENSION idgen")
    c.q("CREATE TABLE t (id bigint)")
    top = ids_and_stop(c)
    c.append_conf(f"idgen.epoch = '{EPOCH + 2000}'")
    c.start()
    assert "they resume after" in c.log(), c.log()[-2000:]
    c.q("INSERT INTO t SELECT snowflake_next() FROM generate_series(1, 20000)")
    assert c.one(f"SELECT count(*) FROM t WHERE id > {top}") == 20000
    assert c.one("SELECT count(DISTINCT id) FROM t") == 40000


def test_an_earlier_epoch_is_taken_at_once_and_discords_layout_is_twitters(cluster_factory):
    c = cluster_factory("earlier", worker_id=1)
    c.q("CREATE EXTENSION idgen")
    c.q("CREATE TABLE t (id bigint)")
    top = ids_and_stop(c)
    # Discord's layout makes Twitter's ids: the same id space, nothing logged, nothing refused
    c.append_conf("idgen.layout = 'discord'")
    c.start()
    assert "snowflake ids now made under" not in c.log()
    top = ids_and_stop(c)
    c.append_conf(f"idgen.epoch = '{EPOCH - 60000}'")
    c.start()
    assert "snowflake ids now made under" in c.log() and "they resume after" not in c.log(), c.log()[-2000:]
    c.q("INSERT INTO t SELECT snowflake_next() FROM generate_series(1, 20000)")
    assert c.one(f"SELECT count(*) FROM t WHERE id > {top}") == 20000


def test_the_instagram_recipe_works_on_a_server_that_has_already_issued_ids(cluster_factory):
    """docs/layouts.md's move from Instagram's next_id(), on a server that issued Twitter ids
    before: its layout, its (later) epoch and its shard id, a restart, the floor raised. Taken at
    once (Instagram's ids carry the time one bit further up, so they sort above Twitter's of any
    time since 2012), and every new id is above every old one, with the shard id in its place."""
    c = cluster_factory("recipe", worker_id=1)
    c.q("CREATE EXTENSION idgen")
    c.q("CREATE TABLE t (id bigint)")
    top = ids_and_stop(c)
    c.append_conf("idgen.layout = 'instagram'", "idgen.epoch = 1314220021721", "idgen.worker_id = 5")
    c.start()
    assert "snowflake ids now made under" in c.log(), c.log()[-2000:]
    c.q("INSERT INTO t SELECT snowflake_next() FROM generate_series(1, 20000)")
    assert c.one(f"SELECT count(*) FROM t WHERE id > {top}") == 20000
    assert c.one(f"SELECT bool_and(snowflake_worker_id(id, 'instagram') = 5) FROM t WHERE id > {top}")
    floor = c.one("SELECT snowflake_raise_floor(max(id)) FROM t")
    assert floor > c.one("SELECT max(id) FROM t") and c.one("SELECT snowflake_next()") >= floor


def test_after_a_crash_the_settings_are_judged_as_after_a_clean_stop_and_an_unused_layout_traps_nothing(
        cluster_factory):
    """Crash recovery replays the server's own WAL, not a primary's: Twitter's layout to
    Instagram's after a crash is taken as after a clean stop. No id was made under Instagram's,
    so the file keeps naming Twitter's, and Twitter's again is taken without a refusal. A later
    epoch after a crash is refused as the id-space change it is, not as a primary's."""
    c = cluster_factory("crashed", worker_id=5)
    c.q("CREATE EXTENSION idgen")
    c.q("CREATE TABLE t (id bigint)")
    c.q("INSERT INTO t SELECT snowflake_next() FROM generate_series(1, 20000)")
    top = c.one("SELECT max(id) FROM t")
    c.stop("immediate")
    c.append_conf("idgen.layout = 'instagram'")
    c.start()
    assert c.one("SELECT count(*) FROM idgen_stats()") == 1  # the server runs; no id asked for
    assert "idgen.layout instagram, before under" in c.log() and "the primary's idgen.layout" not in c.log(), \
        c.log()[-3000:]
    c.stop()
    assert "layout=" not in horizon_file(c), "no id was made under Instagram's: the file names Twitter's"
    c.append_conf("idgen.layout = 'twitter'")
    c.start()
    c.q("INSERT INTO t SELECT snowflake_next() FROM generate_series(1, 20000)")
    assert c.one(f"SELECT count(*) FROM t WHERE id > {top}") == 20000
    top = c.one("SELECT max(id) FROM t")
    c.stop("immediate")
    c.append_conf(f"idgen.epoch = '{EPOCH + 3000}'")
    c.start()
    text = sqlstate_and_hint(c.error("SELECT snowflake_next()"))
    assert text.startswith(f"55000: snowflake_next() refuses to run: this server makes ids under idgen.epoch "
                           f"{EPOCH + 3000}"), text
    c.append_conf(f"idgen.epoch = '{EPOCH}'")
    c.stop()
    c.start()
    assert c.one(f"SELECT snowflake_next() > {top}")


def test_a_standby_with_another_layout_warns_and_refuses_ids_after_promotion(cluster_factory):
    primary = cluster_factory("primary", worker_id=1, conf=["idgen.layout = 'instagram'"])
    primary.q("CREATE EXTENSION idgen")
    standby = primary.base_backup(os.path.join(cluster_factory.base, "standby"),
                                  conf=["idgen.layout = 'twitter'"])
    cluster_factory.made.append(standby)
    standby.start()
    last = primary.one("SELECT max(snowflake_next()) FROM generate_series(1, 100)")  # a horizon record
    wait_for_replay(primary, standby)
    deadline = time.monotonic() + 10
    while "the primary's idgen.layout (instagram) differs from this server's (twitter)" not in standby.log():
        assert time.monotonic() < deadline, standby.log()[-2000:]
        time.sleep(0.2)
    primary.stop("immediate")
    standby.promote()
    with pytest.raises(psycopg2.Error) as e:
        standby.one("SELECT snowflake_next()")
    assert e.value.pgcode == "55000" and "idgen.layout = 'instagram'" in (e.value.diag.message_hint or ""), e.value
    standby.stop()
    assert " primary-layout=instagram" in horizon_file(standby), "a restart does not forget the conflict"
    standby.append_conf("idgen.layout = 'instagram'")
    standby.start()
    assert standby.one(f"SELECT snowflake_next() > {last}")


NODE_ROUND_TRIP = "process.stdout.write(JSON.stringify(JSON.parse(require('fs').readFileSync(0, 'utf8'))))"


def through_javascript(json_text):
    """What a JavaScript client gets back: the JSON parsed by JSON.parse and written again, in
    Node (Debian's nodejs, which install.sh installs)."""
    done = subprocess.run(["node", "-e", NODE_ROUND_TRIP], input=json_text, capture_output=True, text=True,
                          check=True, timeout=60)
    return done.stdout


@pytest.mark.parametrize("layout, worker", [("twitter", 1), ("js53", 127)])
def test_ids_as_json_numbers_through_javascript_change_under_64_bits_and_stay_under_js53(
        cluster_factory, layout, worker):
    """The README's section for web APIs: a Twitter-layout id in a JSON number comes back from
    JSON.parse rounded, and two ids can come back as one; a js53 id comes back unchanged."""
    c = cluster_factory(f"json_{layout}", worker_id=worker, conf=[f"idgen.layout = '{layout}'"])
    c.q("CREATE EXTENSION idgen")
    n = 20000
    text = c.one(f"SELECT json_agg(snowflake_next())::text FROM generate_series(1, {n})")
    ids = json.loads(text)
    assert len(set(ids)) == n
    back = json.loads(through_javascript(text))
    changed = sum(a != b for a, b in zip(ids, back, strict=True))
    if layout == "js53":
        assert back == ids
    else:
        assert changed > n // 2, changed
        assert len(set(back)) < n, "two ids came back as one"
        # the way out the README gives: ids as text
        as_text = c.one("SELECT json_agg(id::text)::text FROM (SELECT snowflake_next() AS id"
                        " FROM generate_series(1, 1000)) s")
        assert json.loads(through_javascript(as_text)) == json.loads(as_text)
