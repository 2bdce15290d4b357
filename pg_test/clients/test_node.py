"""Node's stacks read back idgen's keys, and a browser's JSON does not keep them
(docs/clients.md): Knex and node-postgres, Drizzle ORM and Sequelize, each in its own database.
The clients are in pg_test/clients/node/, their packages pinned in package.json and
package-lock.json and installed by pg_test/install.sh (npm ci)."""
import json
import os
import subprocess

import pytest
from shop import check_keys_and_pages, made_the_extension, shop_server

NODE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node")
WORKER = 9


@pytest.fixture(scope="module")
def server(module_factory):
    return shop_server(module_factory, "node", WORKER, databases=("shop", "drizzle", "sequelize"))


def node(server, program, db):
    assert os.path.isdir(os.path.join(NODE_DIR, "node_modules")), "pg_test/install.sh installs the packages (npm ci)"
    done = subprocess.run(["node", program, server.socket_dir, str(server.port), db], cwd=NODE_DIR,
                          capture_output=True, text=True, timeout=60)  # seconds; each takes about one
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def assert_paging_went_wrong(server, db, trap):
    """Paging latest first by a rounded key (at most 101 pages) did not visit every row once: it
    lost rows, repeated them, or did not end."""
    table = [i for (i,) in server.q("SELECT id::text FROM orders ORDER BY id DESC", db=db)]
    walk = trap["walk"]
    lost, repeated = len(set(table) - set(walk)), len(walk) - len(set(walk))
    assert walk != table and (lost or repeated or trap["pages"] == 101), (trap["pages"], lost, repeated)


def test_node_postgres_and_knex_read_back_the_keys_as_strings_and_json_numbers_round_them(server):
    knex = node(server, "knex_orders.js", "shop")
    assert made_the_extension(server), "knex.raw('CREATE EXTENSION IF NOT EXISTS idgen') before the table"
    out = node(server, "keys.js", "shop")
    # node-postgres gives a bigint as a string, through Knex too: nothing is rounded
    assert knex["type"] == "string" and out["pg_direct_type"] == "string"
    ids = [int(i) for i in out["stored"]]
    table = [int(i) for (i,) in server.q("SELECT id::text FROM orders ORDER BY id", db="shop")]
    assert ids == table and len(ids) == 2001
    got = [int(knex["one"]), *(int(i) for i in knex["many"]), *(int(i) for i in out["pg_direct"])]
    assert got == table, "every key read back as the table holds it, in the order it was made"
    assert all((i >> 12) & 1023 == WORKER for i in ids)
    # as JSON numbers almost every id changes, and distinct ids come back equal; as text, or as
    # base62 codes, they arrive intact
    assert out["json_numbers_changed"] > 1900 and out["json_numbers_distinct"] < 2001, out["json_numbers_changed"]
    assert out["text_intact"] is True
    decoded = server.q(f"SELECT base62_decode(c) FROM unnest(ARRAY{out['codes']}::text[]) WITH ORDINALITY AS u(c, n)"
                       " ORDER BY n", db="shop")
    assert [d for (d,) in decoded] == ids


def test_drizzle_in_bigint_mode_reads_back_every_key_and_pages_by_it_and_number_mode_rounds_them(server):
    out = node(server, "drizzle_orders.js", "drizzle")
    assert out["type"] == "bigint"
    check_keys_and_pages(server, "drizzle", WORKER, out["one"], out["many"], out["pages"])
    assert server.one("SELECT count(*) FROM drizzle.__drizzle_migrations", db="drizzle") == 2, \
        "both migrations of drizzle/migrations/ ran: the extension's, then the table's"
    # The trap: mode 'number' gives doubles. Nearly every key is wrong, distinct keys come back
    # equal, and paging by the rounded key never ends.
    trap = node(server, "drizzle_number_trap.js", "drizzle")
    assert trap["type"] == "number" and trap["rows"] == 1001
    assert trap["wrong"] > 900 and trap["distinct"] < 100, trap
    assert_paging_went_wrong(server, "drizzle", trap)
    assert trap["stringify"] == "TypeError: Do not know how to serialize a BigInt"


def test_sequelize_reads_back_every_key_as_a_string_and_pages_by_it_and_parse_int8_rounds_them(server):
    out = node(server, "sequelize_orders.js", "sequelize")
    assert out["type"] == "string"
    check_keys_and_pages(server, "sequelize", WORKER, out["one"], out["many"], out["pages"])
    # The trap: pg.defaults.parseInt8 = true gives doubles, as in Drizzle's number mode.
    trap = node(server, "sequelize_parseint8_trap.js", "sequelize")
    assert trap["type"] == "number" and trap["rows"] == 1003
    assert trap["wrong"] > 900 and trap["distinct"] < 100, trap
    assert_paging_went_wrong(server, "sequelize", trap)
    # the model's defaultValue is written into each row of the INSERT, not left to the DEFAULT
    assert 'VALUES (snowflake_next(),' in trap["insert"] and "),(snowflake_next()," in trap["insert"], trap["insert"]
