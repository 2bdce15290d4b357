# Sourced, not run: the set-up shared by `make run` and `make test`, in bash because it installs
# packages. Installs what is missing (idempotently), builds and installs idgen, and prepares the
# Python side (pytest, testgres, ruff: pinned in pg_test/requirements.txt) in a virtual
# environment the postgres user can run: Postgres refuses to run as root, so the harness and the
# clusters it starts run as postgres. Clusters themselves are started from Python
# (pg_test/cluster.py, on testgres).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PG_BIN=/usr/lib/postgresql/15/bin
PG_CONFIG=$PG_BIN/pg_config
APT_PACKAGES=(postgresql-15 postgresql-server-dev-15 postgresql-contrib libclang-dev clang sudo
              faketime make rsync python3 python3-venv python3-psycopg2 python3-matplotlib)
PGRX_VERSION=0.18.1

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
as_postgres() { runuser -u postgres -- "$@"; }

ensure_deps() {
  [ "$(id -u)" = 0 ] || die "run as root (it installs packages and runs Postgres as the postgres user)"
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  if ! cargo pgrx --version 2>/dev/null | grep -q "$PGRX_VERSION"; then
    log "installing cargo-pgrx $PGRX_VERSION (about 5 minutes)"
    cargo install cargo-pgrx --version "$PGRX_VERSION" --locked
  fi
  if ! grep -q '^pg15 *= *"'"$PG_CONFIG"'"' "${PGRX_HOME:-$HOME/.pgrx}/config.toml" 2>/dev/null; then
    log "cargo pgrx init --pg15"
    cargo pgrx init --pg15 "$PG_CONFIG" >/dev/null
  fi
  ensure_python
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
    rsync -a --delete --exclude .venv --exclude __pycache__ "$ROOT/pg_test" "$ROOT/benches" "$HERE/"
    chown -R postgres:postgres "$HERE"
  fi
  VENV=$HERE/.venv
}

ensure_python() {
  postgres_tree
  local want="$ROOT/pg_test/requirements.txt" stamp="$VENV/.requirements"
  if [ -x "$VENV/bin/python" ] && cmp -s "$want" "$stamp"; then
    return
  fi
  log "preparing the Python harness in $VENV (pytest, testgres, ruff; pinned)"
  rm -rf "$VENV"
  # --system-site-packages: Debian's psycopg2 and matplotlib, as the benches use them.
  /usr/bin/python3 -m venv --system-site-packages "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps -r "$want"
  cp "$want" "$stamp"
  chmod -R a+rX "$VENV"
}

# No running server may have its idgen library replaced under it. cargo-pgrx rewrites the file
# in place, so a server would read pages of the new build into the old one's mapping (a
# backend was seen dying with SIGSEGV that way); a fresh file instead would be loaded a second
# time, beside the preloaded copy, by every new backend. So stop every server that runs from
# this installation first (the harness's throwaway clusters included).
stop_running_clusters() {
  local pid_file data
  for pid_file in $(find "$ROOT/.pgdata" /tmp/idgen-pgdata /tmp/pytest-of-postgres \
                      -maxdepth 6 -name postmaster.pid 2>/dev/null); do
    data=$(dirname "$pid_file")
    log "stopping the cluster in $data before its library is replaced"
    as_postgres "$PG_BIN/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1 || true
  done
}

install_extension() {
  log "building and installing idgen (release) into $($PG_CONFIG --pkglibdir)"
  stop_running_clusters
  (cd "$ROOT" && cargo pgrx install --release --pg-config "$PG_CONFIG" >/dev/null)
}

# Where `make run` keeps its cluster: the checkout's ignored .pgdata/ when the postgres user can
# write there, else /tmp/idgen-pgdata.
cluster_base() {
  local base="$ROOT/.pgdata"
  mkdir -p "$base" && chown postgres:postgres "$base"
  if ! as_postgres test -w "$base"; then
    base=/tmp/idgen-pgdata
    mkdir -p "$base" && chown postgres:postgres "$base"
  fi
  echo "$base"
}

# py SCRIPT ARGS...: one of the checkout's Python programs, as the postgres user, in the venv.
py() {
  local script=$1; shift
  as_postgres env PG_BIN="$PG_BIN" PYTHONDONTWRITEBYTECODE=1 "$VENV/bin/python" "$HERE/$script" "$@"
}
