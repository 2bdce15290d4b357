"""Fixtures of idgen's test harness: clusters made on demand and always stopped afterwards.

Every scenario takes its servers from `cluster_factory` (or a module's shared one), so the same
test runs against whichever PostgreSQL `PG_BIN` names (pg_test/run passes it). Runs as the
postgres user; `make test` is the way in.

Which version runs what (docs/testing.md): a test marked `version_specific(...)` with the code
paths it exercises whose behaviour differs by server version (VERSION_PATHS) runs on every
version; any other test runs on the default version (15) and the newest (18) only, and is
deselected on 16 and 17. So is a test marked `default_and_newest`: a long one (a random
fault schedule, a measurement) whose paths a shorter test exercises on every version. A test
marked `alone` measures CPU time or a wall-clock rate, so pg_test/run runs it after the
concurrent part, with nothing else running beside it. A test marked `soak` is a long run that
`make test` leaves to `make soak` (`IDGEN_SOAK=1`, which runs the soak tests and no other), save on
the versions its `make_test_on` names.

Under pytest-xdist the long tests (LONG_TESTS_FILE, seconds measured by `make test`) go first,
one worker's share at the head of each worker's first batch, so that no worker starts a
two-minute test when the others are nearly done (`long_tests.first`).
"""

import os

import long_tests
import pytest
from idgen_harness import cluster

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

DEFAULT_MAJOR, NEWEST_MAJOR = 15, 18

# The server's code paths whose behaviour differs by version: a test that exercises one runs on
# every version, and says which with @pytest.mark.version_specific("name", ...).
VERSION_PATHS = {
    "guc": "the idgen.* settings' check and assign hooks, and their memory (malloc() up to 15, "
           "guc_malloc() from 16: src/pg/settings.rs)",
    "shmem": "shared memory and its LWLock and condition variable (the shmem request hook, 15+: "
             "src/pg/shared.rs)",
    "wal": "the horizon's WAL record and custom resource manager, redo, crash recovery, "
           "pg_walinspect and pg_waldump (src/pg/horizon_store.rs)",
    "syncrep": "waiting for synchronous standbys before ids past a horizon are handed out",
    "bgworker": "the lease worker: a background worker with libpq, signals and restarts "
                "(src/pg/registry.rs, src/pg/registry_client.rs); the relocatable builds' own libpq",
    "replication": "streaming replication, promotion and pg_rewind as the server version does them",
    "pg_stat_io": "the study's I/O counters (pg_statio_* on 15, pg_stat_io from 16)",
    "core_uuidv7": "18's own uuidv7() and uuid_extract_timestamp(), which idgen's pg18 build leaves to core",
    "pg_upgrade": "pg_upgrade between majors, and the libraries each version's build installs",
    "sql_surface": "the SQL API as each build declares it (labels, defaults, errors), through pg_regress",
}


def pytest_configure(config):
    config.addinivalue_line("markers", "version_specific(*paths): runs on every server version; each path is "
                            "a key of conftest.VERSION_PATHS")
    config.addinivalue_line("markers", "default_and_newest(reason): a long test of a version-specific path that a "
                            "shorter test exercises on every version: runs on 15 and 18 only")
    config.addinivalue_line("markers", "alone: measures CPU time or a wall-clock rate; pg_test/run runs it with "
                            "no other test beside it")
    config.addinivalue_line("markers", "soak(reason, make_test_on=()): a long run that make test leaves to make soak, "
                            "save on the server versions make_test_on names")


def soak_selection(items, major, soak):
    """The items a run keeps as (kept, dropped): under make soak (soak true) the tests marked
    `soak`, otherwise every test but those, save where their make_test_on names this version."""
    def keep(item):
        mark = item.get_closest_marker("soak")
        if soak:
            return mark is not None
        return mark is None or major in mark.kwargs.get("make_test_on", ())
    kept = [i for i in items if keep(i)]
    return kept, [i for i in items if not keep(i)]


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected theirs: the ordering sees what runs
def pytest_collection_modifyitems(config, items):
    """Checks every version_specific marker's paths; leaves the soak tests to make soak; on a
    version other than the default and the newest deselects the tests that exercise none of those
    paths; under pytest-xdist puts the long tests first (long_tests.first)."""
    for item in items:
        for mark in item.iter_markers("version_specific"):
            unknown = [p for p in mark.args if p not in VERSION_PATHS]
            if not mark.args or unknown:
                raise pytest.UsageError(f"{item.nodeid}: version_specific takes code paths from conftest.VERSION_PATHS"
                                        f" ({', '.join(VERSION_PATHS)}), not {unknown or 'none'}")
    major = cluster.server_major()
    kept, dropped = soak_selection(items, major, os.environ.get("IDGEN_SOAK") == "1")
    if major not in (DEFAULT_MAJOR, NEWEST_MAJOR):
        def every_version(item):
            return item.get_closest_marker("version_specific") and not item.get_closest_marker("default_and_newest")
        dropped += [i for i in kept if not every_version(i)]
        kept = [i for i in kept if every_version(i)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    workers = getattr(config, "workerinput", {}).get("workercount")
    items[:] = long_tests.first(kept, workers, long_tests.load()) if workers else kept


@pytest.fixture(scope="session")
def pg_major():
    return cluster.server_major()


@pytest.fixture
def cluster_factory(tmp_path):
    f = cluster.Factory(str(tmp_path))
    yield f
    f.close()


@pytest.fixture(scope="module")
def module_factory(tmp_path_factory, request):
    f = cluster.Factory(str(tmp_path_factory.mktemp(request.module.__name__)))
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
