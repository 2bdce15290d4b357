"""The end of PostgreSQL's timestamp range: every function that turns a timestamp into an id or a
UUID refuses the last ones with 22008 and a HINT, instead of wrapping around."""

import pytest


@pytest.fixture(scope="module")
def ext(module_factory):
    c = module_factory("timestamps")
    c.q("CREATE EXTENSION idgen")
    return c


LAST = "'294276-12-31 23:59:59.999999+00'::timestamptz"


@pytest.mark.parametrize("sql, message", [
    (f"SELECT snowflake_from_timestamp({LAST})", "timestamp out of range for a snowflake id"),
    (f"SELECT snowflake_from_timestamp({LAST}, 0)", "timestamp out of range for a snowflake id"),
    (f"SELECT uuid_v7_boundary({LAST})", "uuid_v7_boundary: timestamp out of range for a UUID v7"),
    (f"SELECT uuid_v7({LAST})", "uuid_v7: timestamp out of range for a UUID v7"),
])
def test_the_last_timestamps_are_out_of_range_with_22008(ext, sql, message):
    """The Unix time of these timestamps once wrapped around i64 in this (release) build, and
    the call failed for the wrong reason or none; the debug build panicked (src/pg_tests.rs)."""
    e = ext.error(sql)
    assert (e.pgcode, e.diag.message_primary) == ("22008", message), e
    assert e.diag.message_hint


def test_a_long_lived_layouts_last_ids_are_out_of_range_with_their_true_time(ext):
    """61 bits of seconds: the largest id's time is 2,305,843,009,213,693,951,000 ms after 1970,
    past any 64-bit count of ms, and the error says so rather than a saturated 2^64 - 1."""
    e = ext.error("SELECT snowflake_timestamp(9223372036854775807, 0, '61/1/1/1000ms')")
    assert (e.pgcode, e.diag.message_primary) == (
        "22008", "2305843009213693951000 ms since 1970 is out of the timestamp range"), e
