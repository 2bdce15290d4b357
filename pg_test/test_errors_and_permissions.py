"""What a role meets when a call fails or is not its own: each error's LOCATION names the function
that raised it, idgen_stats() is for superusers and pg_monitor, and a 1 GB alphabet is refused by
its length without taking the server down."""

import pytest
from conftest import sqlstate_and_hint

pytestmark = pytest.mark.version_specific("sql_surface")


@pytest.fixture(scope="module")
def server(module_factory):
    c = module_factory("errors")
    c.q("CREATE EXTENSION idgen", "CREATE ROLE app LOGIN", "CREATE ROLE monitor LOGIN",
        "GRANT pg_monitor TO monitor")
    return c


def test_idgen_stats_is_for_superusers_and_pg_monitor(server):
    e = server.error("SELECT * FROM idgen_stats()", user="app")
    assert sqlstate_and_hint(e) == ("42501: permission denied for function idgen_stats\n"
                                    "HINT: A superuser can GRANT pg_monitor TO the role that needs it.")
    assert server.one("SELECT worker_id FROM idgen_stats()", user="monitor") == 1
    assert server.one("SELECT worker_id FROM idgen_stats()") == 1


@pytest.mark.parametrize("sql, file", [
    ("SELECT snowflake_worker_id(-5)", "snowflake.rs"),
    ("SELECT snowflake_timestamp(1, -1)", "snowflake.rs"),
    ("SELECT base62_decode('ab-c')", "base62.rs"),
    ("SELECT base62_encode(-1)", "base62.rs"),
    ("SELECT uuid_v7_timestamp('c232ab00-9414-11ec-b3c8-9f6bdeced846')", "uuid7.rs"),
    ("SELECT * FROM idgen_stats()", "snowflake.rs"),
])
def test_each_error_points_at_the_function_that_raised_it(server, sql, file):
    """Postgres keeps a LOCATION's file name only (src/sql/snowflake.rs is reported as
    snowflake.rs); 0.1.0 reported errors.rs for every error."""
    e = server.error(sql, user="app")
    assert e.diag.source_file == file, (sql, e.diag.source_file, e.diag.source_line)


def test_errors_from_different_places_report_different_lines(server):
    lines = {server.error(sql).diag.source_line for sql in [
        "SELECT snowflake_worker_id(-5)", "SELECT snowflake_timestamp(1, -1)",
        "SELECT snowflake_from_timestamp('infinity')"]}
    assert len(lines) == 3, lines


# random() * 0 keeps the planner from folding repeat() into a constant, which would hold a
# second copy of the gigabyte while planning.
HUGE = "repeat('a', 1000000000 + (random() * 0)::int)"


@pytest.mark.parametrize("sql", [
    f"SELECT base62_encode(1, 0, {HUGE})",
    f"SELECT base62_decode('1', {HUGE})",
    f"SELECT uuid_to_base62(gen_random_uuid(), {HUGE})",
])
@pytest.mark.default_and_newest("the length is read before the argument is copied, by the same code on every version")
def test_a_huge_alphabet_is_refused_by_its_length_without_crashing_the_server(cluster_factory, sql):
    """Each server process may map 1.8 GB: enough for the 1 GB argument, not for a Rust copy
    of it, whose failed allocation would abort the backend and make the postmaster restart every
    session (0.1.0 copied the alphabet before checking it; with that copy put back, this test
    fails)."""
    c = cluster_factory("huge", start=False)
    c.start(limit_address_space=1800 * 1024 * 1024)
    c.q("CREATE EXTENSION idgen")
    bystander = c.connect()
    assert c.one(f"SELECT length({HUGE})") == 1_000_000_000
    e = c.error(sql)
    assert sqlstate_and_hint(e).startswith("22023: invalid base62 alphabet: it has 1000000000 bytes, not 62"), e
    with bystander.cursor() as cur:  # the server did not restart under it
        cur.execute("SELECT 1")
        assert cur.fetchone() == (1,)
    bystander.close()
