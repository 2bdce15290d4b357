"""The SQL-level suite: pg_regress over pg_test/sql against the expected pg_test/expected, the
convention pgrx and PGXS follow, driven from here on three kinds of server."""

import os

import pytest
from conftest import HERE

pytestmark = pytest.mark.version_specific("sql_surface", "guc")


def regress(c, tmp_path, *tests):
    ok, output = c.pg_regress(HERE, str(tmp_path / "regress"), ["setup", *tests])
    assert ok, output


def test_preloaded_suite(cluster_factory, tmp_path):
    """snowflake, uuid7 and base62 on a server with idgen preloaded and worker id 1."""
    c = cluster_factory("preloaded", conf=["max_parallel_workers_per_gather = 2"])
    # base62's key file, as the server's OS user writes it (docs/base62.md, "Keyed codes")
    key = os.path.join(c.data_dir, "idgen_base62.key")
    with open(os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write("correct horse battery staple\n")
    regress(c, tmp_path, "snowflake", "uuid7", "base62")


def test_not_preloaded_suite(cluster_factory, tmp_path):
    """CREATE EXTENSION without preload: the shared-memory functions raise 55000 with a HINT,
    everything else works."""
    regress(cluster_factory("plain", preload=False), tmp_path, "not_preloaded")


def test_worker_unset_suite(cluster_factory, tmp_path):
    """Preloaded without idgen.worker_id: snowflake_next() refuses and names the setting."""
    regress(cluster_factory("unset", worker_id=None), tmp_path, "worker_unset")
