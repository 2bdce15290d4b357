"""idgen inside Citus: a coordinator and two workers on loopback, each with idgen preloaded after
Citus and a worker id of its own, leased from a registry database on the coordinator. Each test
collects every id it made and checks them all.

Which node evaluates a key's DEFAULT decides which worker id an id carries: the coordinator for
what it routes (single- and multi-row INSERT, COPY, an INSERT ... SELECT it pulls through
itself), each worker for a pushed-down INSERT ... SELECT and for what is sent to it directly
(docs/citus.md). A worker id that two nodes share therefore issues ids twice inside one
statement. The registry stops it, and with no registry each node's check of the others (through
Citus's pg_dist_node, before its first id) does.

Runs on 15 (Citus 13.2.2) and 18 (Citus 14.0.1), which pg_test/install.sh builds once per machine.
"""

import datetime
import io
import re
import threading
import time

import psycopg2
import pytest
from idgen_harness.citus import CitusCluster, citus_missing
from idgen_harness.waiting import wait_until
from test_registry import NOT_IN_PREREQUISITE_STATE, conninfo, fleet_role, install_registry, status, worker_of

REASON = citus_missing()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

# No grace: a node restarted in these tests is refused while its old run's lease (3 s) runs on.
REGISTRY_CONF = ["idgen.lease = '3s'", "idgen.lease_grace = '0'", "idgen.max_clock_skew = '500ms'"]


def registry_citus(factory, prefix, worker_ids=(1, 2, 3), conf=REGISTRY_CONF):
    """A Citus cluster whose nodes lease their (fixed) worker ids from a registry database on the
    coordinator, each as a registry role of its own (node0, node1, ...): started, the registry
    installed, and every node holding its lease."""
    roles = [f"{prefix.replace('-', '_')}_node{i}" for i in range(len(worker_ids))]
    cc = CitusCluster(factory, prefix, worker_ids=worker_ids, conf=conf)
    coord = cc.coordinator
    # The coordinator's port is chosen before it starts: the nodes' settings can name it.
    for node, role in zip(cc.nodes, roles, strict=True):
        node.append_conf(f"idgen.registry = '{conninfo(coord, role)}'")
    coord.start()
    install_registry(coord)
    for role in roles:
        fleet_role(coord, role)
    cc.start()
    for n in cc.nodes:
        wait_for_lease(n)
    return cc


def wait_for_lease(node, timeout=30):
    deadline = time.monotonic() + timeout
    while status(node)["registry"] != "holding":
        assert time.monotonic() < deadline, f"{node.node.name}: no lease after {timeout} s: {status(node)}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def citus(module_factory):
    return registry_citus(module_factory, "cit")


def ids_of(node, sql):
    return [r[0] for r in node.q(sql)]


def distinct(values):
    return len(set(values)) == len(values)


# ---- worker ids ---------------------------------------------------------------------------------

def test_each_node_issues_under_its_own_worker_id_leased_from_the_registry(citus):
    coord = citus.coordinator
    assert citus.per_node("SELECT worker_id FROM idgen_stats()") == [1, 2, 3]
    # fixed ids, from each node's setting, each verified and held in the registry
    assert [(status(n)["worker_id_source"], status(n)["registry"]) for n in citus.nodes] == [("setting", "holding")] * 3
    # From the coordinator, Citus's own fan-out tells the same.
    on_workers = coord.q("SELECT nodeport, result FROM run_command_on_workers("
                         "$$SELECT worker_id FROM idgen_stats()$$) ORDER BY nodeport")
    assert sorted((citus.node_of_port(p).one("SELECT worker_id FROM idgen_stats()"), int(r))
                  for p, r in on_workers) == [(2, 2), (3, 3)]
    holders = coord.q("SELECT worker_id, split_part(holder_name, '@', 1), live FROM idgen_registry.holders "
                      "ORDER BY worker_id", db="registry")
    assert holders == [(1, "cit-coord", True), (2, "cit-w1", True), (3, "cit-w2", True)]


# ---- keys made everywhere Citus makes them ------------------------------------------------------

def test_keys_made_on_every_path_are_distinct_and_carry_the_worker_id_of_the_node_that_evaluated_them(citus):
    coord, w1, w2 = citus.nodes
    coord.q("CREATE TABLE ev (id bigint NOT NULL DEFAULT snowflake_next(), tenant int NOT NULL,"
            " u uuid NOT NULL DEFAULT uuid_v7(), path text NOT NULL)",
            "SELECT create_distributed_table('ev', 'tenant')")
    coord.q("INSERT INTO ev (tenant, path) VALUES (1, 'single row')")
    coord.q("INSERT INTO ev (tenant, path) SELECT g % 50, 'multi row' FROM generate_series(1, 2000) g")
    conn = coord.connect()
    try:
        with conn.cursor() as cur:
            cur.copy_expert("COPY ev (tenant, path) FROM STDIN",
                            io.StringIO("".join(f"{i % 50}\tcopy\n" for i in range(3000))))
        conn.commit()
    finally:
        conn.close()
    # Pushed down: each shard's rows are inserted into a colocated shard by the worker that holds it.
    coord.q("INSERT INTO ev (tenant, path) SELECT tenant, 'pushed down' FROM ev WHERE path = 'copy'")
    # Not pushable (a LIMIT): Citus pulls the rows to the coordinator and sends them back to the
    # workers, which make the DEFAULT as they insert them.
    coord.q("INSERT INTO ev (tenant, path) SELECT tenant, 'through the coordinator' FROM ev "
            "WHERE path = 'copy' ORDER BY tenant LIMIT 500")
    # Sent to a worker: the worker routes the statement to the shards itself.
    w1.q("INSERT INTO ev (tenant, path) SELECT g % 50, 'from worker 1' FROM generate_series(1, 1000) g")
    w2.q("INSERT INTO ev (tenant, path) VALUES (7, 'from worker 2'), (8, 'from worker 2')")

    rows = coord.q("SELECT id, u, path FROM ev")
    assert len(rows) == 1 + 2000 + 3000 + 3000 + 500 + 1000 + 2
    assert distinct([r[0] for r in rows]), "an id was stored twice"
    assert distinct([r[1] for r in rows]), "a uuid_v7() was stored twice"
    made_by = {}
    for i, _, path in rows:
        made_by.setdefault(path, set()).add(worker_of(i))
    assert made_by == {"single row": {1}, "multi row": {1}, "copy": {1}, "pushed down": {2, 3},
                       "through the coordinator": {2, 3}, "from worker 1": {2}, "from worker 2": {3}}
    # The decoders read the same on any node.
    sample = rows[0][0]
    assert len({n.one(f"SELECT snowflake_worker_id({sample})::text || snowflake_timestamp({sample})::text")
                for n in citus.nodes}) == 1


def test_snowflake_and_uuid_v7_keys_as_the_distribution_column_land_in_the_shard_their_value_hashes_to(citus):
    coord, w1, _ = citus.nodes
    coord.q("CREATE TABLE by_id (id bigint PRIMARY KEY DEFAULT snowflake_next(), path text)",
            "SELECT create_distributed_table('by_id', 'id')",
            "CREATE TABLE by_u (u uuid PRIMARY KEY DEFAULT uuid_v7(), path text)",
            "SELECT create_distributed_table('by_u', 'u')")
    for t in ("by_id", "by_u"):
        coord.q(f"INSERT INTO {t} (path) VALUES ('single row')")
        coord.q(f"INSERT INTO {t} (path) SELECT 'multi row' FROM generate_series(1, 1000) g")
        # The key is the distribution column, made by a volatile DEFAULT: each row's shard is known
        # only once its key is made, so Citus makes the keys on the workers and repartitions.
        coord.q(f"INSERT INTO {t} (path) SELECT 'insert select' FROM {t}")
        w1.q(f"INSERT INTO {t} (path) SELECT 'from worker 1' FROM generate_series(1, 500) g")
    rows = coord.q("SELECT id, path FROM by_id")
    uuids = ids_of(coord, "SELECT u FROM by_u")
    ids = [r[0] for r in rows]
    assert len(ids) == len(uuids) == 1 + 1000 + 1001 + 500
    assert distinct(ids) and distinct(uuids)
    made_by = {}
    for i, path in rows:
        made_by.setdefault(path, set()).add(worker_of(i))
    assert made_by == {"single row": {1}, "multi row": {1}, "insert select": {2, 3}, "from worker 1": {2}}
    # A row is where its key hashes to: each row, looked up by its key (routed to the one shard
    # the key hashes to), is found there, and the primary key is unique per shard only then.
    for t, col, values in (("by_id", "id", ids), ("by_u", "u", uuids)):
        by_shard = coord.q(f"SELECT get_shard_id_for_distribution_column('{t}', {col}), count(*) FROM {t}"
                           " GROUP BY 1")
        assert sum(n for _, n in by_shard) == len(values) and len(by_shard) == 4
        for v in values[::100]:
            assert coord.one(f"SELECT count(*) FROM {t} WHERE {col} = '{v}'") == 1
    shards = "SET citus.override_table_visibility = off"  # else Citus hides shards from pg_class
    placed = sum(w.one(shards, "SELECT count(*) FROM pg_class WHERE relname ~ '^by_id_[0-9]+$'") for w in citus.workers)
    assert placed == 4
    wrong = 0
    for w in citus.workers:
        for (shard,) in w.q(shards, "SELECT relname FROM pg_class WHERE relname ~ '^by_id_[0-9]+$'"):
            sid = int(shard.rsplit("_", 1)[1])
            keys = ids_of(w, f"SELECT id FROM {shard}")
            wrong += coord.one(f"SELECT count(*) FROM unnest(ARRAY[{','.join(map(str, keys)) or 'NULL'}]::bigint[]) k"
                               f" WHERE get_shard_id_for_distribution_column('by_id', k) <> {sid}")
    assert wrong == 0, f"{wrong} rows are in a shard their key does not hash to"


def test_a_table_is_converted_before_distribution_and_a_distributed_one_is_refused_with_the_way_out(citus):
    coord = citus.coordinator
    coord.q("CREATE TABLE conv (id bigserial PRIMARY KEY, note text)",
            "INSERT INTO conv (note) SELECT 'old' FROM generate_series(1, 300)",
            "SELECT create_distributed_table('conv', 'id')")
    e = coord.error("SELECT snowflake_convert_column('conv', drop_sequence => true)")
    assert e.pgcode == "0A000", e
    assert "conv is a distributed Citus table" in e.diag.message_primary
    assert ("SELECT undistribute_table('public.conv'); SELECT snowflake_convert_column('public.conv', 'id');"
            in e.diag.message_hint)
    assert "nextval" in coord.one("SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'conv'::regclass")
    # The way out, as the HINT says it: local, converted, distributed again.
    coord.q("SELECT undistribute_table('conv')",
            "SELECT snowflake_convert_column('conv', drop_sequence => true)",
            "SELECT create_distributed_table('conv', 'id')")
    old = ids_of(coord, "SELECT id FROM conv WHERE note = 'old' ORDER BY id")
    assert old == list(range(1, 301))
    coord.q("INSERT INTO conv (note) SELECT 'new' FROM generate_series(1, 300)")
    citus.workers[0].q("INSERT INTO conv (note) SELECT 'new on worker 1' FROM generate_series(1, 300)")
    new = ids_of(coord, "SELECT id FROM conv WHERE note <> 'old'")
    assert min(new) > 1 << 41 and {worker_of(i) for i in new} == {1, 2}
    assert distinct(ids_of(coord, "SELECT id FROM conv"))


def test_a_moved_shard_keeps_its_ids(citus):
    coord, w1, w2 = citus.nodes
    coord.q("CREATE TABLE moved (id bigint PRIMARY KEY DEFAULT snowflake_next(), n int)",
            "SELECT create_distributed_table('moved', 'id')",
            "INSERT INTO moved (n) SELECT g FROM generate_series(1, 2000) g")
    before = sorted(ids_of(coord, "SELECT id FROM moved"))
    shard, port = coord.q("SELECT shardid, nodeport FROM citus_shards WHERE table_name = 'moved'::regclass "
                          "ORDER BY shardid LIMIT 1")[0]
    target = w2 if port == w1.port else w1
    in_shard = coord.one("SELECT count(*) FROM moved"
                         f" WHERE get_shard_id_for_distribution_column('moved', id) = {shard}")
    assert in_shard > 0
    coord.q(f"SELECT citus_move_shard_placement({shard}, '127.0.0.1', {port}, '127.0.0.1', {target.port},"
            " shard_transfer_mode => 'block_writes')")
    assert coord.one(f"SELECT nodeport FROM citus_shards WHERE shardid = {shard}") == target.port
    assert sorted(ids_of(coord, "SELECT id FROM moved")) == before
    coord.q("INSERT INTO moved (n) SELECT g FROM generate_series(1, 500) g")
    after = ids_of(coord, "SELECT id FROM moved")
    assert distinct(after) and len(after) == 2500 and min(set(after) - set(before)) > max(before)


def test_keyset_pagination_over_a_distributed_table_returns_every_row_once_in_key_order(citus):
    coord, w1, w2 = citus.nodes
    coord.q("CREATE TABLE pages (id bigint NOT NULL DEFAULT snowflake_next(), tenant int NOT NULL,"
            " PRIMARY KEY (tenant, id))",
            "SELECT create_distributed_table('pages', 'tenant')",
            "INSERT INTO pages (tenant) SELECT g % 9 FROM generate_series(1, 700) g")
    w1.q("INSERT INTO pages (tenant) SELECT g % 9 FROM generate_series(1, 300) g")
    w2.q("INSERT INTO pages (tenant) SELECT g % 9 FROM generate_series(1, 300) g")
    every = sorted(ids_of(coord, "SELECT id FROM pages"))
    seen, last = [], 0
    while True:
        page = ids_of(coord, f"SELECT id FROM pages WHERE id > {last} ORDER BY id LIMIT 97")
        if not page:
            break
        seen += page
        last = page[-1]
    assert seen == every and len(every) == 1300
    # One tenant's pages: routed to one shard.
    tenant = sorted(ids_of(coord, "SELECT id FROM pages WHERE tenant = 4"))
    seen, last = [], 0
    while page := ids_of(coord, f"SELECT id FROM pages WHERE tenant = 4 AND id > {last} ORDER BY id LIMIT 10"):
        seen += page
        last = page[-1]
    assert seen == tenant
    plan = "\n".join(r[0] for r in coord.q("EXPLAIN SELECT id FROM pages WHERE tenant = 4 AND id > 0"
                                           " ORDER BY id LIMIT 10"))
    assert "Task Count: 1" in plan, plan


def test_ids_made_on_different_nodes_sort_in_the_order_they_were_made_where_citus_bigserial_sorts_by_node(citus):
    """Citus's own answer for a bigserial made on a worker: each node's copy of the sequence
    counts in a range of its own, its group id shifted 48 bits up (int and smallint sequences
    cannot be used on a worker at all). Unique, but a key's order is then its node's order: rows
    made on the second worker sort after every row of the first, whenever they were made. Made
    in turns on the coordinator and the two workers, snowflake ids sort in the order the turns
    ran."""
    coord, w1, w2 = citus.nodes
    coord.q("CREATE TABLE turns (seq bigserial, id bigint NOT NULL DEFAULT snowflake_next(),"
            " tenant int NOT NULL, turn int NOT NULL)",
            "SELECT create_distributed_table('turns', 'tenant')",
            "CREATE TABLE small (id serial, tenant int NOT NULL)",
            "SELECT create_distributed_table('small', 'tenant')")
    order = [coord, w1, w2, w1, w2, coord, w2, w1]
    for turn, node in enumerate(order):
        node.q(f"INSERT INTO turns (tenant, turn) SELECT g % 20, {turn} FROM generate_series(1, 200) g")
        time.sleep(0.005)  # the next turn begins in a later millisecond
    rows = coord.q("SELECT seq, id, turn FROM turns")
    assert len(rows) == 200 * len(order)
    assert distinct([r[0] for r in rows]) and distinct([r[1] for r in rows])
    by_id = [turn for _, _, turn in sorted(rows, key=lambda r: r[1])]
    assert by_id == sorted(by_id), "snowflake ids made in turns on three nodes do not sort in turn order"
    group = {n.port: n.one("SELECT groupid FROM pg_dist_local_group") for n in citus.nodes}
    assert group[coord.port] == 0 and sorted(group.values()) == [0, 1, 2]
    for seq, _, turn in rows:
        assert seq >> 48 == group[order[turn].port], (seq, turn)
    by_seq = [turn for _, _, turn in sorted(rows, key=lambda r: r[0])]
    first, second = sorted((w1, w2), key=lambda n: group[n.port])
    runs = [t for i, t in enumerate(by_seq) if i == 0 or by_seq[i - 1] != t]
    assert runs == [t for node in (coord, first, second) for t, n in enumerate(order) if n is node], runs
    # Citus refuses it with an internal error (XX000), not a SQLSTATE a client could act on.
    e = w1.error("INSERT INTO small (tenant) VALUES (1)")
    assert e.pgcode == "XX000", e
    assert e.diag.message_primary == ("nextval(sequence) calls in worker nodes are not supported for column"
                                      " defaults of type int or smallint"), e
    assert coord.one("INSERT INTO small (tenant) VALUES (1) RETURNING id") == 1


# ---- a copied worker id --------------------------------------------------------------------------

def pushed_down_rounds(coord, table, rounds):
    """Pushed-down INSERT ... SELECT statements; returns the errors they raised."""
    errors = []
    for _ in range(rounds):
        try:
            coord.q(f"INSERT INTO {table} (tenant) SELECT tenant FROM {table}_src")
        except psycopg2.Error as e:
            errors.append(e)
    return errors


def seed_copied_id_table(coord, table):
    """A table whose key is made a little apart in time (a sleep of half a millisecond before
    each snowflake_next()), so that each worker's part of a pushed-down statement lasts about a
    second and both run at once whatever else the machine runs: two workers with one worker id
    that issue in the same millisecond both start it at sequence 0, and store that id twice."""
    coord.q("CREATE FUNCTION paced_snowflake_next() RETURNS bigint LANGUAGE plpgsql VOLATILE AS "
            "$$BEGIN PERFORM pg_sleep(0.0005); RETURN snowflake_next(); END$$",
            f"CREATE TABLE {table} (id bigint NOT NULL DEFAULT paced_snowflake_next(), tenant int NOT NULL)",
            f"SELECT create_distributed_table('{table}', 'tenant')",
            f"CREATE TABLE {table}_src (tenant int NOT NULL)",
            f"SELECT create_distributed_table('{table}_src', 'tenant', colocate_with => '{table}')",
            f"INSERT INTO {table}_src SELECT g % 64 FROM generate_series(1, 2000) g")


def restart_with_worker_id(node, worker_id):
    node.stop()
    node.append_conf(f"idgen.worker_id = {worker_id}")
    node.start()


def twice(ids):
    return len(ids) - len(set(ids))


def identity(node):
    return node.one("SELECT row(worker_id, epoch_ms, layout, peer_check)::text FROM idgen_identity()")


def refusals(errors):
    """The primary messages of errors, each checked to be snowflake_next()'s refusal (55000)."""
    assert errors and all(e.pgcode == NOT_IN_PREREQUISITE_STATE for e in errors), [str(e) for e in errors]
    return {e.diag.message_primary for e in errors}


def test_without_the_registry_a_worker_given_another_nodes_worker_id_is_refused_naming_it_and_stores_no_id_twice(
        cluster_factory):
    """Three fixed worker ids and no registry, then worker 2 restarted with worker 1's (a copied
    configuration): its check of the other nodes in pg_dist_node finds worker 1 issuing under
    that id and refuses (55000, naming it) before its first id, so each pushed-down INSERT ...
    SELECT, which runs on both workers at once, fails whole and stores nothing. With the check
    taken out (the mutant citus-check-off), the copy's three statements stored 2,761 of their
    6,000 ids twice on 15. With its own id back it issues; with the coordinator down it still
    starts and issues, warning that the coordinator went unchecked; and under another epoch it
    is refused as another id space."""
    cc = CitusCluster(cluster_factory, "noreg").start()
    coord, w1, w2 = cc.nodes
    seed_copied_id_table(coord, "ev")
    assert not pushed_down_rounds(coord, "ev", 3)
    restart_with_worker_id(w2, 2)
    failed = pushed_down_rounds(coord, "ev", 3)
    stored = ids_of(coord, "SELECT id FROM ev")
    print(f"stored twice: {twice(stored)} of {len(stored)}")
    assert twice(stored) == 0, f"{twice(stored)} of {len(stored)} ids stored twice"
    assert len(failed) == 3 and len(stored) == 3 * 2000, (len(failed), len(stored))
    assert refusals(failed) == {
        "snowflake_next() refuses to run: worker id 2 is also the worker id of node "
        f"127.0.0.1:{w1.port} (Citus group 1), and two nodes of one Citus cluster would issue the same ids"}
    e = w2.error("SELECT snowflake_next()")
    assert "pg_dist_local_group" in e.diag.message_hint, e.diag.message_hint
    assert identity(w2).endswith(",clash)") and identity(w1).endswith(",clear)"), (identity(w1), identity(w2))
    # its own settings back
    restart_with_worker_id(w2, 3)
    assert not pushed_down_rounds(coord, "ev", 2)
    stored = ids_of(coord, "SELECT id FROM ev")
    assert twice(stored) == 0 and len(stored) == 5 * 2000
    assert {worker_of(i) for i in stored} == {2, 3}
    # The coordinator down: a worker restarted meanwhile checks what it can reach and issues.
    coord.stop()
    w2.stop()
    w2.start()
    conn = w2.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT snowflake_next()")
            assert worker_of(cur.fetchone()[0]) == 3
        warned = [n for n in conn.notices if "was not checked against node" in n]
        assert len(warned) == 1 and f"127.0.0.1:{coord.port} (Citus group 0)" in warned[0], conn.notices
    finally:
        conn.close()
    coord.start()
    # Its own worker id under an earlier epoch (the server takes it: its ids still grow): another
    # id space, refused; the coordinator (group 0) is the first node it meets.
    w2.stop()
    w2.append_conf("idgen.epoch = '1000000000000'")
    w2.start()
    assert refusals(pushed_down_rounds(coord, "ev", 1)) == {
        f"snowflake_next() refuses to run: node 127.0.0.1:{coord.port} (Citus group 0) issues ids under "
        "idgen.epoch 1288834974657 and idgen.layout twitter, and this server under idgen.epoch 1000000000000 "
        "and idgen.layout twitter"}
    assert twice(ids_of(coord, "SELECT id FROM ev")) == 0


def test_with_the_registry_a_worker_given_another_nodes_worker_id_refuses_and_no_id_is_stored_twice_under_load(
        cluster_factory):
    """The same copied configuration with the registry: the copied node's claim names the node
    that holds worker id 2; the copied node refuses (55000, naming it) before it has issued
    anything, so every pushed-down statement that reaches it fails whole and stores nothing.
    Statements run without pause from before the restart to after the node is given its own id
    back; every id stored is checked."""
    cc = registry_citus(cluster_factory, "reg")
    coord, w1, w2 = cc.nodes
    seed_copied_id_table(coord, "ev")
    stop = threading.Event()
    phase = ["own ids"]
    outcomes = []  # (phase when the statement began, None or its error)

    def load():
        while not stop.is_set():
            began = phase[0]
            failed = pushed_down_rounds(coord, "ev", 1)
            outcomes.append((began, failed[0] if failed else None))

    def succeeded_in(p):
        return any(ph == p and err is None for ph, err in outcomes)

    loader = threading.Thread(target=load)
    loader.start()
    try:
        wait_until("a statement with every node's own id", lambda: succeeded_in("own ids"))
        # A copy of worker 1's idgen settings, its registry role included.
        w2.stop()
        phase[0] = "copied id"
        w2.append_conf(f"idgen.registry = '{conninfo(coord, 'reg_node1')}'", "idgen.worker_id = 2")
        w2.start()
        wait_until("the copy's claim refused", lambda: status(w2)["registry"] == "conflict")
        e = w2.error("SELECT snowflake_next()")
        assert e.pgcode == NOT_IN_PREREQUISITE_STATE, e
        assert "worker id 2 is leased to another server, reg-w1@" in e.diag.message_primary, e.diag.message_primary
        # pushed-down statements meet the refusing node, and fail naming the holder
        wait_until("a statement refused by the copy", lambda: any(
            err is not None and err.pgcode == NOT_IN_PREREQUISITE_STATE and "reg-w1@" in err.diag.message_primary
            for ph, err in outcomes if ph == "copied id"))
        assert not succeeded_in("copied id")
        # Its own settings back: it takes worker id 3 again, and the statements succeed again.
        w2.stop()
        phase[0] = "restarting"
        w2.append_conf(f"idgen.registry = '{conninfo(coord, 'reg_node2')}'", "idgen.worker_id = 3")
        w2.start()
        wait_for_lease(w2)
        phase[0] = "own ids again"
        wait_until("a statement with the worker's own id again", lambda: succeeded_in("own ids again"))
    finally:
        stop.set()
        loader.join(timeout=120)
    assert not loader.is_alive()
    errors = [err for _, err in outcomes if err is not None]
    stored = ids_of(coord, "SELECT id FROM ev")
    assert twice(stored) == 0, f"{twice(stored)} ids stored twice"
    assert {worker_of(i) for i in stored} == {2, 3}
    # The statements failed only on the refusal, and while the worker was stopping (57P01, a
    # statement it was running) or down (08006). Citus relays a worker's FATAL as its own, so a
    # statement running on the worker as it stops can end the coordinator's session too: the
    # client then reads "server closed the connection" with no SQLSTATE. Each such error must
    # match one FATAL the coordinator relayed from that worker.
    ended = [x for x in errors if x.pgcode is None]
    assert all(str(x).startswith("server closed the connection unexpectedly") for x in ended), [str(x) for x in ended]
    relayed = re.findall(r"FATAL:  terminating connection due to administrator command\n[^\n]*DETAIL:  from "
                         rf"127\.0\.0\.1:{w2.port}\n", coord.log())
    assert len(ended) <= len(relayed), ([str(x) for x in ended], relayed)
    assert {x.pgcode for x in errors if x.pgcode} <= {NOT_IN_PREREQUISITE_STATE, "57P01", "08006"}, \
        [str(x) for x in errors]


# ---- the coordinator down ------------------------------------------------------------------------

OUTAGE_S = 120
# Leases far shorter than the outage, so that the writes cross it on the grace alone.
GRACE_CONF = ["idgen.lease = '5s'", "idgen.lease_grace = '5min'", "idgen.max_clock_skew = '500ms'"]


@pytest.mark.soak("two minutes of outage: on 18 the grace it relies on is test_registry.py's outage test, and Citus "
                  "14's check the tests above", make_test_on=(15,))
def test_the_coordinator_down_for_two_minutes_with_the_registry_on_it_refuses_no_write_through_the_workers(
        cluster_factory):
    """The set-up docs/citus.md gives, the registry in a database on the coordinator, with 5 s
    leases and a 5-minute grace; the coordinator stopped for two minutes while statements go
    through each worker (Citus runs them from any node): 50-row INSERTs, whose DEFAULT the
    worker they reach evaluates, and pushed-down INSERT ... SELECTs, evaluated on both workers.
    None is refused, no id is stored twice, and each worker renews its lease once the
    coordinator is back. With the grace left out of the server's fence (the mutant
    grace-not-in-the-fence) the workers stop within a lease."""
    cc = registry_citus(cluster_factory, "down", conf=GRACE_CONF)
    coord, w1, w2 = cc.nodes
    seed_copied_id_table(coord, "ev")
    stop = threading.Event()
    outcomes = {w1.port: [], w2.port: []}  # per worker: (when, None or its error)

    def load(node, pushed_down):
        conn = node.connect()
        conn.autocommit = True
        with conn.cursor() as cur:
            while not stop.is_set():
                try:
                    if pushed_down:
                        cur.execute("INSERT INTO ev (tenant) SELECT tenant FROM ev_src WHERE tenant < 8")
                    else:
                        cur.execute("INSERT INTO ev (tenant) SELECT g % 64 FROM generate_series(1, 50) g")
                    outcomes[node.port].append((time.monotonic(), None))
                except psycopg2.Error as e:
                    outcomes[node.port].append((time.monotonic(), e))
                time.sleep(0.05)
        conn.close()

    loaders = [threading.Thread(target=load, args=(w1, False)), threading.Thread(target=load, args=(w2, True))]
    for t in loaders:
        t.start()
    try:
        wait_until("statements through both workers", lambda: all(outcomes.values()))
        coord.stop("immediate")
        down_at = time.monotonic()
        time.sleep(OUTAGE_S)
        during = {port: sum(1 for at, e in out if at > down_at and e is None) for port, out in outcomes.items()}
        coord.start()
        up_at = datetime.datetime.now(datetime.timezone.utc)
        for w in (w1, w2):
            wait_until(f"{w.node.name} renewed on the coordinator", lambda w=w: (
                status(w)["last_renewal"] is not None and status(w)["last_renewal"] > up_at), timeout=30)
    finally:
        stop.set()
        for t in loaders:
            t.join(timeout=60)
    errors = [str(e) for out in outcomes.values() for _, e in out if e is not None]
    assert not errors, errors[:5]
    assert all(n > 100 for n in during.values()), during
    stored = ids_of(w1, "SELECT id FROM ev")
    print(f"statements through each worker while the coordinator was down: {during}; "
          f"{len(outcomes[w1.port]) + len(outcomes[w2.port])} statements in all, {len(stored)} ids")
    assert twice(stored) == 0, f"{twice(stored)} ids stored twice"
    assert {worker_of(i) for i in stored} == {2, 3}
