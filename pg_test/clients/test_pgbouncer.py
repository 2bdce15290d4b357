"""idgen behind pgbouncer (Debian's) in transaction and statement pooling (docs/clients.md):
many clients share a few server connections, each client's statements land on whichever
backend is free, and still every id is unique and each client's ids keep increasing, since the
generator's state is the server's (shared memory), not a backend's or a session's."""
import subprocess
import time

import psycopg2
import pytest
from idgen_harness.cluster import free_port
from idgen_harness.waiting import run_threads

PGBOUNCER = "/usr/sbin/pgbouncer"
CLIENTS = 24
ROUNDS = 150
WORKER = 19


@pytest.fixture(scope="module")
def server(module_factory):
    c = module_factory("pooled", worker_id=WORKER)
    c.q("CREATE DATABASE shop")
    c.q("CREATE EXTENSION idgen",
        "CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_next(), ref uuid NOT NULL DEFAULT uuid_v7(),"
        " client int NOT NULL, step int NOT NULL, backend int NOT NULL DEFAULT pg_backend_pid())", db="shop")
    return c


@pytest.fixture
def bouncer(server, tmp_path, request):
    """pgbouncer in front of the server, in the pool mode asked for, 4 server connections."""
    port = free_port()
    ini = tmp_path / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        f"shop = host={server.socket_dir} port={server.port} dbname=shop user=postgres\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = any\npool_mode = {request.param}\ndefault_pool_size = 4\nmax_client_conn = 100\n"
        f"logfile = {tmp_path}/pgbouncer.log\npidfile = {tmp_path}/pgbouncer.pid\n")
    proc = subprocess.Popen([PGBOUNCER, str(ini)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg2.connect(host="127.0.0.1", port=port, dbname="shop", user="postgres").close()
                break
            except psycopg2.OperationalError:
                assert time.monotonic() < deadline and proc.poll() is None, (tmp_path / "pgbouncer.log").read_text()
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.parametrize("bouncer", ["transaction", "statement"], indirect=True)
def test_through_pgbouncer_every_id_is_unique_and_each_clients_ids_increase(server, bouncer):
    server.q("TRUNCATE orders", db="shop")
    got = {}

    def client(k):
        conn = psycopg2.connect(host="127.0.0.1", port=bouncer, dbname="shop", user="postgres")
        conn.autocommit = True
        mine = []
        with conn.cursor() as cur:
            for step in range(ROUNDS):
                # a key made by the DEFAULT, and one handed out by SELECT, in turn
                if step % 2:
                    cur.execute("INSERT INTO orders (client, step) VALUES (%s, %s) RETURNING id, ref", (k, step))
                else:
                    cur.execute("SELECT snowflake_next(), uuid_v7()")
                mine.append(cur.fetchone())
        conn.close()
        got[k] = mine

    errors = run_threads(client, range(CLIENTS), timeout=300)
    assert errors == [] and len(got) == CLIENTS, errors
    ids = [i for mine in got.values() for i, _ in mine]
    refs = [r for mine in got.values() for _, r in mine]
    assert len(set(ids)) == len(ids) == CLIENTS * ROUNDS and len(set(refs)) == len(refs)
    for mine in got.values():
        assert [i for i, _ in mine] == sorted(i for i, _ in mine), "a client's ids increase"
        assert [r for _, r in mine] == sorted(r for _, r in mine), "and its UUIDs"
    assert all((i >> 12) & 1023 == WORKER for i in ids)
    # The pooler did move clients between backends: one client's inserts ran on several.
    backends = server.one("SELECT max(n) FROM (SELECT count(DISTINCT backend) AS n FROM orders GROUP BY client) s",
                          db="shop")
    assert backends > 1, "every client stayed on one backend: nothing was pooled"
    assert server.one("SELECT count(DISTINCT backend) FROM orders", db="shop") <= 4
