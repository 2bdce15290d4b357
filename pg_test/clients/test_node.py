"""node-postgres and Knex read back idgen's keys, and a browser's JSON does not keep them
(docs/clients.md). The client is pg_test/clients/node/keys.js, its packages pinned in
package.json and package-lock.json and installed by pg_test/install.sh (npm ci)."""
import json
import os
import subprocess

import pytest
from shop import made_the_extension, shop_server

NODE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node")
WORKER = 9


@pytest.fixture(scope="module")
def server(module_factory):
    return shop_server(module_factory, "node", WORKER)


def test_node_postgres_and_knex_read_back_the_keys_as_strings_and_json_numbers_round_them(server):
    assert os.path.isdir(os.path.join(NODE_DIR, "node_modules")), "pg_test/install.sh installs the packages (npm ci)"
    done = subprocess.run(["node", "keys.js", server.socket_dir, str(server.port), "shop"], cwd=NODE_DIR,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    out = json.loads(done.stdout)
    assert made_the_extension(server), "knex.raw('CREATE EXTENSION IF NOT EXISTS idgen') before the table"
    # node-postgres gives a bigint as a string, through Knex too: nothing is rounded
    assert out["knex_one"]["type"] == "string" and out["pg_direct_type"] == "string"
    ids = [int(i) for i in out["stored"]]
    table = [int(i) for (i,) in server.q("SELECT id::text FROM orders ORDER BY id", db="shop")]
    assert ids == table and len(ids) == 2001
    knex = [int(out["knex_one"]["id"]), *(int(i) for i in out["knex_many"])]
    direct = [int(i) for i in out["pg_direct"]]
    assert knex + direct == table, "every key read back as the table holds it, in the order it was made"
    assert all((i >> 12) & 1023 == WORKER for i in ids)
    # as JSON numbers almost every id changes, and distinct ids come back equal; as text, or as
    # base62 codes, they arrive intact
    assert out["json_numbers_changed"] > 1900 and out["json_numbers_distinct"] < 2001, out["json_numbers_changed"]
    assert out["text_intact"] is True
    decoded = server.q(f"SELECT base62_decode(c) FROM unnest(ARRAY{out['codes']}::text[]) WITH ORDINALITY AS u(c, n)"
                       " ORDER BY n", db="shop")
    assert [d for (d,) in decoded] == ids
