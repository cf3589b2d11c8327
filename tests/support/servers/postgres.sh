#!/usr/bin/env bash
# Starts / stops a private PostgreSQL for the tests (a CTest fixture).
#
#   postgres.sh start DIR   writes a postgres:// URL to DIR/postgres.url
#   postgres.sh stop DIR    stops the server and removes its files; safe when none runs
#
# With POSTGRES_URL set, start only records that URL. Otherwise it creates a throwaway
# cluster under DIR on a free 127.0.0.1 port (loopback only, fsync off, password auth over
# TCP so the tests can exercise an auth failure). initdb refuses to run as root, so as root
# the cluster belongs to the `postgres` system user and its commands run through runuser.
set -euo pipefail

die() { echo "postgres.sh: $*" >&2; exit 1; }

cmd=${1:-}
dir=${2:-}
[[ -n "$cmd" && -n "$dir" ]] || die "usage: postgres.sh start|stop DIR"
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
# The cluster lives in DIR/postgres, or in a /tmp directory when the server user cannot reach
# DIR or its socket path would be too long; DIR/postgres.dir names it for `stop`.
state=$(cat "$dir/postgres.dir" 2>/dev/null || echo "$dir/postgres")

as_owner() {
  if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

find_bin() {
  local name=$1 candidate
  if command -v pg_config >/dev/null 2>&1; then
    candidate="$(pg_config --bindir)/$name"
    [[ -x "$candidate" ]] && { echo "$candidate"; return; }
  fi
  for candidate in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    [[ -x "$candidate/$name" ]] && { echo "$candidate/$name"; return; }
  done
  command -v "$name" 2>/dev/null || die "$name not found (install Debian's postgresql package)"
}

# shellcheck source=free_port.sh
. "$(dirname "$0")/free_port.sh"

stop() {
  if [[ -f "$state/data/postmaster.pid" ]]; then
    as_owner "$(find_bin pg_ctl)" -D "$state/data" -m fast -w -t 30 stop >/dev/null 2>&1 ||
      echo "postgres.sh: pg_ctl stop failed (continuing cleanup)" >&2
  fi
  rm -rf "$state"
  rm -f "$dir/postgres.url" "$dir/postgres.dir"
}

start() {
  if [[ -n "${POSTGRES_URL:-}" ]]; then
    printf '%s\n' "$POSTGRES_URL" >"$dir/postgres.url"
    exit 0
  fi
  stop  # a leftover from an interrupted run
  state="$dir/postgres"
  if [[ ${#state} -gt 80 ]] ||
      { [[ $(id -u) -eq 0 ]] && ! runuser -u postgres -- test -x "$dir" 2>/dev/null; }; then
    state=$(mktemp -d /tmp/idempotency-pg.XXXXXX)
  fi
  printf '%s\n' "$state" >"$dir/postgres.dir"
  local initdb pg_ctl port password log
  initdb=$(find_bin initdb)
  pg_ctl=$(find_bin pg_ctl)
  port=$(free_port) || die "no free port found"
  password=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
  mkdir -p "$state/data" "$state/run"
  printf '%s\n' "$password" >"$state/pwfile"
  if [[ $(id -u) -eq 0 ]]; then
    getent passwd postgres >/dev/null || die "running as root but no 'postgres' user exists"
    chown -R postgres: "$state"
  fi
  chmod 700 "$state/data"
  log="$state/postgres.log"
  if ! as_owner "$initdb" -D "$state/data" -U postgres --pwfile="$state/pwfile" \
      --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --no-locale \
      >"$state/initdb.log" 2>&1; then
    die "initdb failed: $(tail -n 1 "$state/initdb.log")"
  fi
  cat >>"$state/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$state/run'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
shared_buffers = 32MB
CONF
  if ! as_owner "$pg_ctl" -D "$state/data" -l "$log" -w -t 60 start >/dev/null 2>&1; then
    die "pg_ctl start failed: $(tail -n 1 "$log" 2>/dev/null)"
  fi
  local psql
  psql=$(find_bin psql)
  if ! as_owner "$psql" -h "$state/run" -p "$port" -U postgres -d postgres -qAt \
      -c "CREATE DATABASE idempotency_test" >/dev/null 2>"$state/psql.err"; then
    die "CREATE DATABASE failed: $(tail -n 1 "$state/psql.err")"
  fi
  printf 'postgres://postgres:%s@127.0.0.1:%s/idempotency_test\n' "$password" "$port" \
    >"$dir/postgres.url"
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  *) die "unknown command '$cmd' (start|stop)" ;;
esac
