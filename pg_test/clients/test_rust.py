"""The postgres crate (sync rust-postgres, pinned) reads back idgen's keys as i64
(docs/clients.md): pg_test/clients/rust/src/main.rs, built by pg_test/install.sh."""
import json
import os
import subprocess

import pytest
from shop import made_the_extension, shop_server

BINARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rust", "target", "release", "idgen-client-rust")
WORKER = 17


@pytest.fixture(scope="module")
def server(module_factory):
    return shop_server(module_factory, "rust", WORKER)


def test_the_postgres_crate_reads_back_the_keys_as_i64(server):
    assert os.access(BINARY, os.X_OK), "pg_test/install.sh builds the client (cargo build in pg_test/clients/rust)"
    done = subprocess.run([BINARY, server.socket_dir, str(server.port), "shop"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    out = json.loads(done.stdout)
    assert made_the_extension(server), "CREATE EXTENSION IF NOT EXISTS idgen before the table"
    ids = [out["one"], *out["many"]]
    assert len(set(ids)) == 1001 and ids == sorted(ids)
    assert all((i >> 12) & 1023 == WORKER for i in ids)
    assert [i for (i,) in server.q("SELECT id FROM orders ORDER BY id", db="shop")] == ids
