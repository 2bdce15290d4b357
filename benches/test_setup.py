"""The set-up module's own parts that need neither root nor a server (idgen_harness/setup.py):
cargo-pgrx's configuration kept in step with the servers here, and the programs the lint gate
must be given by name."""
import os

from idgen_harness import setup

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def config_with(tmp_path, **entries):
    path = tmp_path / "config.toml"
    path.write_text("[configs]\n" + "".join(f'{k} = "{v}"\n' for k, v in entries.items()))
    return path


def fake_pg_config(tmp_path, name):
    p = tmp_path / name / "pg_config"
    p.parent.mkdir()
    p.write_text("#!/bin/sh\n")
    p.chmod(0o755)
    return str(p)


def test_a_configuration_that_names_the_server_and_debians_15_needs_no_init(tmp_path):
    pg18 = fake_pg_config(tmp_path, "18")
    config = config_with(tmp_path, pg15=setup.DEBIAN_PG_CONFIG, pg18=pg18)
    assert setup.pgrx_init_args(str(config), "18", pg18) == []


def test_a_server_that_is_gone_is_dropped_and_the_others_are_given_to_init_again(tmp_path):
    pg17, pg18 = fake_pg_config(tmp_path, "17"), fake_pg_config(tmp_path, "18")
    gone = str(tmp_path / "moved" / "pg_config")
    config = config_with(tmp_path, pg15=setup.DEBIAN_PG_CONFIG, pg16=gone, pg17=pg17)
    args = setup.pgrx_init_args(str(config), "18", pg18)
    assert args == ["--pg15", setup.DEBIAN_PG_CONFIG, "--pg17", pg17, "--pg18", pg18]
    assert gone not in config.read_text() and pg17 in config.read_text(), "only the gone entry is dropped"
    # no configuration at all: init with Debian's 15 and the server in use
    assert setup.pgrx_init_args(str(tmp_path / "none.toml"), "15", setup.DEBIAN_PG_CONFIG) == [
        "--pg15", setup.DEBIAN_PG_CONFIG]


def test_the_lint_gate_is_given_every_python_program_without_py(tmp_path):
    found = setup.python_entry_points(ROOT)
    for script in ("benches/run", "benches/speed", "benches/portable", "benches/pagination", "benches/partitions",
                   "benches/portable_writers"):
        assert script in found, script
    assert not [f for f in found if f.endswith(".py")]
    # one made now is found too, and a shell script is not
    for top in ("benches", "pg_test"):
        (tmp_path / top).mkdir()
    (tmp_path / "benches" / "new").write_text("#!/usr/bin/env python3\nprint(1)\n")
    (tmp_path / "pg_test" / "run").write_text("#!/usr/bin/env bash\n")
    assert setup.python_entry_points(str(tmp_path)) == ["benches/new"]
