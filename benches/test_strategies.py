"""Which strategies the study runs by default, and what --layouts adds (benches/run), without a
server."""

import pgconn
import pytest
import study

LAYOUTS = ["snowflake_instagram", "snowflake_js53"]


def names(strategies):
    return [s.name for s in strategies]


def test_the_default_is_every_key_strategy_without_the_plain_sql_editions_layouts():
    # what each key strategy does to a B-tree: the layouts' keys fill leaves as snowflake's do,
    # and the plain-SQL edition that makes them is the slowest run by far, so they are on demand
    assert names(study.load_strategies()) == ["bigserial", "uuid_v4", "uuid_v7", "uuidv7_core", "snowflake",
                                              "base62_padded", "base62_text"]
    assert all(s.portable is None for s in study.load_strategies())


def test_layouts_adds_the_plain_sql_editions_layouts_to_the_default_or_to_the_names_given():
    every = names(study.load_strategies(layouts=True))
    assert every == ["bigserial", "uuid_v4", "uuid_v7", "uuidv7_core", "snowflake", *LAYOUTS, "base62_padded",
                     "base62_text"]
    assert names(study.load_strategies(["bigserial", "snowflake"], layouts=True)) == ["bigserial", "snowflake",
                                                                                      *LAYOUTS]
    assert names(study.load_strategies(["snowflake_js53", "bigserial"], layouts=True)) == [
        "snowflake_js53", "bigserial", "snowflake_instagram"]
    assert [s.portable for s in study.load_strategies(LAYOUTS)] == ["instagram", "js53"]


def test_names_given_are_run_as_given():
    assert names(study.load_strategies(["snowflake_instagram", "uuid_v4"])) == ["snowflake_instagram", "uuid_v4"]
    with pytest.raises(pgconn.BenchError, match="unknown strategies"):
        study.load_strategies(["nope"])
