"""JDBC reads back idgen's keys with getGeneratedKeys(), one row and a batch (docs/clients.md):
pg_test/clients/jdbc/Keys.java, compiled and run against Debian's driver."""
import json
import os
import subprocess

import pytest
from shop import made_the_extension, shop_server

JAVA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jdbc")
DRIVER = "/usr/share/java/postgresql.jar"  # Debian's libpostgresql-jdbc-java
WORKER = 11


@pytest.fixture(scope="module")
def server(module_factory):
    return shop_server(module_factory, "jdbc", WORKER)


def test_jdbc_reads_back_the_keys_of_one_insert_and_of_a_batch(server, tmp_path):
    assert os.path.exists(DRIVER), "pg_test/install.sh installs libpostgresql-jdbc-java"
    built = subprocess.run(["javac", "-cp", DRIVER, "-d", str(tmp_path), os.path.join(JAVA_DIR, "Keys.java")],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    done = subprocess.run(["java", "-cp", f"{tmp_path}:{DRIVER}", "Keys", str(server.port), "shop"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    out = json.loads(done.stdout)
    assert made_the_extension(server), "CREATE EXTENSION IF NOT EXISTS idgen before the table"
    ids = out["one"] + out["batch"]
    assert len(ids) == 1001 and ids == sorted(ids) and len(set(ids)) == 1001
    assert all((i >> 12) & 1023 == WORKER for i in ids)
    assert [i for (i,) in server.q("SELECT id FROM orders ORDER BY id", db="shop")] == ids
    assert server.one(f"SELECT ref::text FROM orders WHERE id = {out['one'][0]}", db="shop") == out["ref"]
    assert out["driver"].startswith("42."), out["driver"]  # Debian 12: 42.5.5
