# Sourced, not run: the set-up shared by `make run` and `make test`.
# Installs what is missing (idempotently), builds and installs idgen, and runs throwaway
# PostgreSQL 15 clusters as the postgres user (Postgres refuses to run as root).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PG_BIN=/usr/lib/postgresql/15/bin
PG_CONFIG=$PG_BIN/pg_config
PG_REGRESS=/usr/lib/postgresql/15/lib/pgxs/src/test/regress/pg_regress
LIBFAKETIME=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
APT_PACKAGES=(postgresql-15 postgresql-server-dev-15 libclang-dev clang sudo faketime make
              python3 python3-psycopg2 python3-matplotlib)
PGRX_VERSION=0.18.1

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

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
}

# No running server may have its idgen library replaced under it. cargo-pgrx rewrites the file
# in place, so a server would read pages of the new build into the old one's mapping (a
# backend was seen dying with SIGSEGV that way); a fresh file instead would be loaded a second
# time, beside the preloaded copy, by every new backend. So stop our clusters first.
stop_running_clusters() {
  local data
  for data in "$(cluster_base)"/*/data; do
    if [ -f "$data/postmaster.pid" ]; then
      log "stopping the cluster in $(dirname "$data") before its library is replaced"
      stop_cluster "$(basename "$(dirname "$data")")"
    fi
  done
}

install_extension() {
  log "building and installing idgen (release) into $($PG_CONFIG --pkglibdir)"
  stop_running_clusters
  (cd "$ROOT" && cargo pgrx install --release --pg-config "$PG_CONFIG" >/dev/null)
}

as_postgres() { runuser -u postgres -- "$@"; }

# Clusters live in the checkout's ignored .pgdata/ when the postgres user can reach it, else
# in /tmp (a checkout under /root is closed to other users).
cluster_base() {
  local base="$ROOT/.pgdata"
  mkdir -p "$base" && chown postgres:postgres "$base"
  if ! as_postgres test -w "$base"; then
    base=/tmp/idgen-pgdata
    mkdir -p "$base" && chown postgres:postgres "$base"
  fi
  echo "$base"
}

cluster_dir() { echo "$(cluster_base)/$1"; }

# new_cluster NAME PORT [postgresql.conf lines...]: a fresh cluster, not started.
new_cluster() {
  local name=$1 port=$2; shift 2
  local dir; dir=$(cluster_dir "$name")
  stop_cluster "$name"
  rm -rf "$dir"
  as_postgres mkdir -p "$dir"
  # ICU "en" as the default collation, like most real databases: the study shows what a
  # linguistic collation does to unpadded base62 codes.
  as_postgres "$PG_BIN/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 \
    --locale=C.UTF-8 --locale-provider=icu --icu-locale=en >/dev/null
  {
    echo "port = $port"
    echo "listen_addresses = ''"
    echo "unix_socket_directories = '$dir'"
    echo "max_connections = 40"
    echo "log_min_messages = warning"
    printf '%s\n' "$@"
  } | as_postgres tee -a "$dir/data/postgresql.conf" >/dev/null
}

# start_cluster NAME [FAKETIME_FILE]: starts it (optionally with its clock shifted by the
# offset written in FAKETIME_FILE, re-read on every clock call) and exports PG* for it.
start_cluster() {
  local name=$1 faketime_file=${2:-}
  local dir; dir=$(cluster_dir "$name")
  local env=()
  if [ -n "$faketime_file" ]; then
    env=(LD_PRELOAD="$LIBFAKETIME" FAKETIME_TIMESTAMP_FILE="$faketime_file" FAKETIME_NO_CACHE=1
         FAKETIME_DONT_FAKE_MONOTONIC=1)
  fi
  as_postgres env "${env[@]}" "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/log" -w -t 60 start >/dev/null \
    || { tail -20 "$dir/log" >&2; return 1; }
  use_cluster "$name"
}

use_cluster() {
  local dir; dir=$(cluster_dir "$1")
  export PGHOST=$dir PGUSER=postgres PGDATABASE=postgres
  PGPORT=$(sed -n 's/^port = //p' "$dir/data/postgresql.conf" | tail -1)
  export PGPORT
}

stop_cluster() {
  local dir; dir=$(cluster_dir "$1")
  if [ -f "$dir/data/postmaster.pid" ]; then
    as_postgres "$PG_BIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  fi
}
