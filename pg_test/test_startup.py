"""Start-up: settings checked when the server starts, and a damaged horizon file."""

import time

import pytest
from conftest import sqlstate_and_hint

pytestmark = pytest.mark.version_specific("guc", "wal")


def test_an_epoch_out_of_range_stops_the_server_from_starting_saying_why(cluster_factory):
    c = cluster_factory("bad_epoch", start=False, conf=["idgen.epoch = '99999999999999'"])
    assert not c.try_start()
    assert "invalid value for idgen.epoch: the epoch 99999999999999 is after 2147483647000" in c.log()


def test_an_epoch_after_the_clock_lets_the_server_start_and_snowflake_next_says_why(cluster_factory):
    """The clock is snowflake_next()'s business, not start-up's: a machine that boots with its
    clock before the epoch can still start PostgreSQL (0.1.0 refused to start)."""
    tomorrow_ms = int(time.time() * 1000) + 86_400_000
    c = cluster_factory("future_epoch", start=False, conf=[f"idgen.epoch = '{tomorrow_ms}'"])
    assert c.try_start(), c.log()
    c.q("CREATE EXTENSION idgen")
    assert sqlstate_and_hint(c.error("SELECT snowflake_next()")).startswith(
        "58000: the system clock (")
    assert f"is before idgen.epoch ({tomorrow_ms})" in str(c.error("SELECT snowflake_next()"))
    # everything else works
    assert c.one("SELECT base62_encode(42, 3)") == "00g"


def test_a_misspelt_idgen_setting_is_reported_not_ignored(cluster_factory):
    """The idgen.* prefix is reserved while preloading, as pg_stat_statements does."""
    c = cluster_factory("typo", conf=["idgen.worker_idd = 1"])
    assert 'invalid configuration parameter name "idgen.worker_idd"' in c.log()
    assert c.error("SHOW idgen.worker_idd").pgcode == "42704"
    assert c.error("SET idgen.anything = 1").pgcode == "42602"


def test_a_damaged_horizon_file_lets_the_server_start_and_snowflake_next_refuse(cluster_factory):
    c = cluster_factory("damaged", start=False, worker_id=3)
    with open(f"{c.data_dir}/idgen_horizon", "w") as f:
        f.write("garbage\n")
    c.start()
    c.q("CREATE EXTENSION idgen")
    text = sqlstate_and_hint(c.error("SELECT snowflake_next()"))
    assert text.startswith("XX001: ") and "\nHINT: Stop the server and write" in text, text
    # One rule for everything that depends on the horizon: uuid_v7() refuses too (it used to
    # drop its ordering silently), and idgen_stats() answers (it used to refuse), with no horizon.
    text = sqlstate_and_hint(c.error("SELECT uuid_v7()"))
    assert text.startswith("XX001: uuid_v7() refuses to run") and "\nHINT: Stop the server and write" in text, text
    assert c.q("SELECT ids_issued, horizon FROM idgen_stats()") == [(0, None)]
    # A clean shutdown leaves the damaged file for the operator.
    c.stop()
    with open(f"{c.data_dir}/idgen_horizon") as f:
        assert f.read() == "garbage\n"


def test_a_horizon_in_microseconds_is_refused_with_the_unit_named(cluster_factory):
    """The repair HINT asks for Unix milliseconds; a value in microseconds was accepted and stopped
    the generator for millennia (every call waited for a clock 1,000 times ahead)."""
    c = cluster_factory("micro", start=False, worker_id=3)
    with open(f"{c.data_dir}/idgen_horizon", "w") as f:
        f.write("idgen-horizon-v1 1767225600000000\n")
    c.start()
    c.q("CREATE EXTENSION idgen")
    assert "not microseconds or nanoseconds" in c.log()
    text = sqlstate_and_hint(c.error("SELECT snowflake_next()"))
    assert text.startswith("XX001: ") and "\nHINT: Stop the server and write" in text, text
    # repaired as the HINT says, in milliseconds: ids again
    c.stop()
    with open(f"{c.data_dir}/idgen_horizon", "w") as f:
        f.write("idgen-horizon-v1 1767225600000\n")
    c.start()
    assert c.one("SELECT snowflake_worker_id(snowflake_next())") == 3
