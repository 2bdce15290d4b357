"""`make package PG=NN`: a Debian package, a tarball and PGXN's META.json in target/dist/, run
as root as an admin would. On PostgreSQL 15 (Debian's postgresql-15, what a .deb installs into
on this machine) the package is installed with `dpkg -i`, the SQL-level suite runs against it as
the postgres user, and `dpkg --purge` removes it cleanly; the files that `make test` had
installed are put back afterwards, whatever happens."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import tarfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PG = os.environ.get("PG", "15")
PKG = f"postgresql-{PG}-idgen"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="packages are built and installed as root")


def version():
    return re.search(r'^version = "(.*)"$', (ROOT / "Cargo.toml").read_text(), re.M).group(1)


def upgrade_scripts():
    """Every upgrade script the project ships (sql/idgen--A--B.sql): each must be in a package."""
    return sorted(p.name for p in (ROOT / "sql").glob("idgen--*--*.sql"))


def run(*cmd, **kwargs):
    return subprocess.run(cmd, capture_output=True, text=True, **kwargs)


@pytest.fixture(scope="module")
def dist():
    done = run("make", "-s", "-C", str(ROOT), "package", f"PG={PG}", timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    d = ROOT / "target" / "dist"
    arch = run("dpkg", "--print-architecture").stdout.strip()
    return {"deb": d / f"{PKG}_{version()}-1_{arch}.deb",
            "tar": d / f"idgen-{version()}-pg{PG}-linux-{os.uname().machine}.tar.gz",
            "meta": d / "META.json", "tle": d / f"idgen_portable-{version()}"}


def test_the_pg_tle_package_is_the_portable_edition_written_for_pg_tle(dist):
    names = sorted(p.name for p in dist["tle"].iterdir())
    assert names == sorted(["idgen_portable.control", f"idgen_portable--{version()}.sql",
                            f"idgen_portable--{version()}.pgtle.sql"])
    control = (dist["tle"] / "idgen_portable.control").read_text()
    assert f"default_version = '{version()}'" in control and "relocatable = false" in control
    script = (dist["tle"] / f"idgen_portable--{version()}.sql").read_text()
    assert "CREATE OR REPLACE FUNCTION idgen_portable_build(" in script and "\n\\" not in script
    assert script in (dist["tle"] / f"idgen_portable--{version()}.pgtle.sql").read_text()


def test_the_tarball_and_meta_json(dist):
    with tarfile.open(dist["tar"]) as t:
        names = sorted(m.name.split("/", 1)[1] for m in t.getmembers() if m.isfile())
        assert all(m.uid == 0 and m.gid == 0 for m in t.getmembers())
    assert len(upgrade_scripts()) >= 2, upgrade_scripts()
    assert names == sorted(["INSTALL", "LICENSE", "lib/idgen.so", "extension/idgen.control",
                            f"extension/idgen--{version()}.sql", *(f"extension/{s}" for s in upgrade_scripts())])
    meta = json.loads(dist["meta"].read_text())
    assert (meta["name"], meta["version"], meta["license"]) == ("idgen", version(), "mit")
    assert meta["provides"]["idgen"]["version"] == version()
    assert meta["meta-spec"]["version"] == "1.0.0"
    for field in ("abstract", "maintainer", "prereqs"):
        assert meta[field], field


def test_the_debian_package_names_its_server(dist):
    fields = {f: run("dpkg-deb", "-f", str(dist["deb"]), f).stdout.strip() for f in ("Package", "Version", "Depends")}
    assert fields["Package"] == PKG and fields["Version"] == f"{version()}-1"
    assert fields["Depends"].startswith(f"postgresql-{PG},")
    listed = run("dpkg-deb", "-c", str(dist["deb"])).stdout
    for path in (f"/usr/lib/postgresql/{PG}/lib/idgen.so", f"/usr/share/postgresql/{PG}/extension/idgen.control",
                 f"/usr/share/postgresql/{PG}/extension/idgen--{version()}.sql",
                 *(f"/usr/share/postgresql/{PG}/extension/{s}" for s in upgrade_scripts())):
        assert f".{path}\n" in listed, path


def installed_files():
    lib = pathlib.Path(f"/usr/lib/postgresql/{PG}/lib/idgen.so")
    ext = pathlib.Path(f"/usr/share/postgresql/{PG}/extension")
    return sorted(p for p in [lib, *ext.glob("idgen*")] if p.exists())


def is_installed():
    status = run("dpkg-query", "-W", "-f=${Status}", PKG)
    return status.returncode == 0 and "installed" in status.stdout.split()[-1:]


def test_dpkg_install_the_sql_suite_and_a_clean_removal(dist, tmp_path):
    if PG != "15":
        pytest.skip(f"a .deb installs into Debian's postgresql-{PG}; this machine has Debian's 15 only")
    harness = os.environ.get("IDGEN_HARNESS")
    if not harness:
        pytest.fail("IDGEN_HARNESS is not set: run the tests with `make test`")
    backup = tmp_path / "backup"
    backup.mkdir()
    kept = installed_files()
    for p in kept:
        shutil.copy2(p, backup / p.name)
    try:
        if is_installed():
            assert run("dpkg", "--purge", PKG).returncode == 0
        for p in installed_files():
            p.unlink()  # only the package provides idgen now
        done = run("dpkg", "-i", str(dist["deb"]))
        assert done.returncode == 0, done.stderr
        assert is_installed()
        owned = run("dpkg", "-L", PKG).stdout.split()
        assert f"/usr/lib/postgresql/{PG}/lib/idgen.so" in owned
        assert [str(p) for p in installed_files()] == sorted(p for p in owned if "/idgen" in p and "/doc/" not in p)

        suite = run("runuser", "-u", "postgres", "--", "env", f"PG_BIN=/usr/lib/postgresql/{PG}/bin",
                    "PYTHONDONTWRITEBYTECODE=1", f"{harness}/.venv/bin/python", "-m", "pytest", "-c",
                    "pg_test/pytest.ini", "--rootdir=.", "-p", "no:cacheprovider", "pg_test/test_sql_suite.py",
                    cwd=harness, timeout=900)
        assert suite.returncode == 0, suite.stdout[-5000:] + suite.stderr[-2000:]
        assert re.search(r"\b3 passed\b", suite.stdout), suite.stdout[-2000:]

        done = run("dpkg", "--purge", PKG)
        assert done.returncode == 0, done.stderr
        assert not is_installed()
        assert installed_files() == [], "dpkg --purge left idgen's files behind"
        assert not pathlib.Path(f"/usr/share/doc/{PKG}").exists()
    finally:
        if is_installed():
            run("dpkg", "--purge", PKG)
        for p in kept:
            shutil.copy2(backup / p.name, p)
