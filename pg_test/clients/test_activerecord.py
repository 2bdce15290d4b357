"""Rails' ActiveRecord (Debian's) reads back idgen's keys: a migration with
`default: -> { "snowflake_next()" }`, create! and insert_all (docs/clients.md):
pg_test/clients/activerecord/orders.rb."""
import json
import os
import subprocess

import pytest
from shop import made_the_extension, shop_server

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "activerecord", "orders.rb")
WORKER = 13


@pytest.fixture(scope="module")
def server(module_factory):
    return shop_server(module_factory, "activerecord", WORKER)


def test_activerecord_migrates_the_default_and_reads_back_the_keys(server):
    done = subprocess.run(["ruby", SCRIPT, server.socket_dir, str(server.port), "shop"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    out = json.loads(done.stdout)
    assert out["extension"] is True and made_the_extension(server), "the migration's enable_extension"
    assert out["default"] == "snowflake_next()" and out["id_class"] == "Integer"
    ids = [out["one"], *out["many"]]
    assert len(set(ids)) == 1001 and ids == sorted(ids)
    assert all((i >> 12) & 1023 == WORKER for i in ids)
    assert [i for (i,) in server.q("SELECT id FROM orders ORDER BY id", db="shop")] == ids
    assert server.one(f"SELECT ref::text FROM orders WHERE id = {out['one']}", db="shop") == out["one_ref"]
    assert out["one_ref_before_reload"] is None, "create! reads back only the key; ref after one.reload"
    assert out["version"].startswith("6.1."), out["version"]  # Debian 12's
