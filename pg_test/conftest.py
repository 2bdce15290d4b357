"""Fixtures of idgen's test harness: clusters made on demand and always stopped afterwards.

Every scenario takes its servers from `cluster_factory` (or a module's shared one), so the same
test runs against whichever PostgreSQL `PG_BIN` names (pg_test/run passes it). Runs as the
postgres user; `make test` is the way in.
"""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "benches"))

import cluster  # noqa: E402


@pytest.fixture(scope="session")
def pg_major():
    return cluster.server_major()


class Factory:
    """Makes clusters under one directory and stops every one of them at the end."""

    def __init__(self, base):
        self.base = base
        self.made = []

    def __call__(self, name="node", *, start=True, fake_clock=False, **kwargs):
        c = cluster.Cluster(os.path.join(self.base, name), **kwargs).init()
        self.made.append(c)
        if fake_clock:
            c.with_fake_clock()
        if start:
            c.start()
        return c

    def close(self):
        for c in self.made:
            c.cleanup()


@pytest.fixture
def cluster_factory(tmp_path):
    f = Factory(str(tmp_path))
    yield f
    f.close()


@pytest.fixture(scope="module")
def module_factory(tmp_path_factory, request):
    f = Factory(str(tmp_path_factory.mktemp(request.module.__name__)))
    yield f
    f.close()


@pytest.fixture(scope="module")
def preloaded(module_factory):
    """One server per test module with idgen preloaded and worker id 1, on the real clock (the
    tests that shift a clock make their own server)."""
    c = module_factory("preloaded", conf=["max_parallel_workers_per_gather = 2"])
    c.q("CREATE EXTENSION idgen")
    return c


def sqlstate_and_hint(e):
    """An error as 'SQLSTATE: message' plus '\\nHINT: ...' when it has one."""
    text = f"{e.pgcode}: {e.diag.message_primary}"
    if e.diag.message_hint:
        text += f"\nHINT: {e.diag.message_hint}"
    return text
