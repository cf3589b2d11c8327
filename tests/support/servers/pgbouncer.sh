#!/usr/bin/env bash
# Starts / stops a private PgBouncer in front of the test PostgreSQL; postgres.sh runs it as
# part of the PostgreSQL fixture, after the server is up and before it stops.
#
#   pgbouncer.sh start DIR   writes a postgres:// URL to DIR/pgbouncer.url
#   pgbouncer.sh stop DIR    stops it and removes its files; safe when none runs
#
# With PGBOUNCER_URL set, start only records that URL; with POSTGRES_URL set (a server the
# fixture did not start) it starts nothing; without the pgbouncer binary it starts nothing
# unless CI is set (then the tests that need it skip; under CI its absence is a failure).
# Otherwise PgBouncer listens on a free 127.0.0.1
# port in transaction pooling mode, checks a password generated here (SCRAM, userlist in the
# server's state directory) and reaches the server over its Unix socket, where the cluster
# trusts local connections. Database `idempotency_test` pools normally; `idempotency_single`
# is the same database through one server connection, so a test can see session state leak
# from one client to the next. PgBouncer refuses to run as root, so as root it runs as the
# cluster's `postgres` user.
set -euo pipefail

die() { echo "pgbouncer.sh: $*" >&2; exit 1; }

cmd=${1:-}
dir=${2:-}
[[ -n "$cmd" && -n "$dir" ]] || die "usage: pgbouncer.sh start|stop DIR"
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

# shellcheck source=free_port.sh
. "$(dirname "$0")/free_port.sh"

as_owner() {
  if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# The PostgreSQL cluster's state directory (postgres.sh records it); PgBouncer lives inside it.
state() { cat "$dir/postgres.dir" 2>/dev/null; }

# running PID: true while PID is a PgBouncer that has not exited (a daemon's exit leaves a
# zombie until init reaps it, which may take a while).
running() {
  grep -qsx pgbouncer "/proc/$1/comm" && ! grep -qs '^State:[[:space:]]*Z' "/proc/$1/status"
}

stop() {
  local s pid
  s=$(state) || true
  if [[ -n "$s" && -f "$s/pgbouncer/pgbouncer.pid" ]]; then
    pid=$(cat "$s/pgbouncer/pgbouncer.pid")
    if running "$pid"; then
      kill -TERM "$pid" 2>/dev/null || true  # PgBouncer's fast exit
      for _ in $(seq 1 100); do
        running "$pid" || break
        sleep 0.02
      done
      if running "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
    fi
  fi
  if [[ -n "$s" ]]; then rm -rf "$s/pgbouncer"; fi
  rm -f "$dir/pgbouncer.url"
}

start() {
  if [[ -n "${PGBOUNCER_URL:-}" ]]; then
    printf '%s\n' "$PGBOUNCER_URL" >"$dir/pgbouncer.url"
    exit 0
  fi
  [[ -z "${POSTGRES_URL:-}" ]] || exit 0  # no cluster of ours to stand in front of
  stop
  local s bin port pg_port password here
  s=$(state) || die "no test PostgreSQL (run postgres.sh start first)"
  pg_port=$(sed -nE 's#^postgres://[^@]*@127\.0\.0\.1:([0-9]+)/.*#\1#p' "$dir/postgres.url")
  [[ -S "$s/run/.s.PGSQL.$pg_port" ]] || die "the test PostgreSQL is not running"
  bin=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
  if [[ ! -x "$bin" ]]; then
    [[ -z "${CI:-}" ]] || die "pgbouncer not found (install Debian's pgbouncer package)"
    echo "pgbouncer.sh: pgbouncer not found; the PgBouncer tests will skip" >&2
    return
  fi
  port=$(free_port) || die "no free port found"
  password=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
  here="$s/pgbouncer"
  mkdir -p "$here"
  printf '"postgres" "%s"\n' "$password" >"$here/userlist.txt"
  chmod 600 "$here/userlist.txt"
  cat >"$here/pgbouncer.ini" <<INI
[databases]
idempotency_test = host=$s/run port=$pg_port dbname=idempotency_test user=postgres
idempotency_single = host=$s/run port=$pg_port dbname=idempotency_test user=postgres pool_size=1

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $here/userlist.txt
pool_mode = transaction
default_pool_size = 20
max_client_conn = 1000
logfile = $here/pgbouncer.log
pidfile = $here/pgbouncer.pid
INI
  [[ $(id -u) -ne 0 ]] || chown -R postgres: "$here"
  if ! as_owner "$bin" -d -q "$here/pgbouncer.ini" 2>"$here/start.err"; then
    die "pgbouncer did not start: $(tail -n 1 "$here/start.err" "$here/pgbouncer.log" 2>/dev/null)"
  fi
  # -d returns once it has forked; wait until it accepts connections.
  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      printf 'postgres://postgres:%s@127.0.0.1:%s/idempotency_test\n' "$password" "$port" \
        >"$dir/pgbouncer.url"
      return
    fi
    sleep 0.05
  done
  die "pgbouncer is not listening on 127.0.0.1:$port: $(tail -n 1 "$here/pgbouncer.log" 2>/dev/null)"
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  *) die "unknown command '$cmd' (start|stop)" ;;
esac
