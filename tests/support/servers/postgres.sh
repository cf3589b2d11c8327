#!/usr/bin/env bash
# Starts / stops a private PostgreSQL for the tests (a CTest fixture).
#
#   postgres.sh start DIR   writes a postgres:// URL to DIR/postgres.url, and the TLS files below
#   postgres.sh stop DIR    stops the server and removes its files; safe when none runs
#
# With POSTGRES_URL set, start only records that URL. Otherwise it creates a throwaway
# cluster under DIR on a free 127.0.0.1 port (loopback only, fsync off, password auth over
# TCP so the tests can exercise an auth failure). initdb refuses to run as root, so as root
# the cluster belongs to the `postgres` system user and its commands run through runuser.
#
# The server also speaks TLS, with a certificate from a test CA made here by the openssl CLI
# (test_certs.sh) for the name `localhost` only (so verify-full to 127.0.0.1 is a hostname
# mismatch):
#   DIR/postgres.url          plain TCP (sslmode=disable: the other suites pay no handshakes)
#   DIR/postgres_tls.url      host localhost (hostaddr 127.0.0.1), sslmode=verify-full, the CA
#   DIR/postgres_ca.path      the CA certificate's path
#   DIR/postgres_wrong_ca.path  another CA's certificate, which signed nothing the server has
#   DIR/postgres_client_cert.url  as postgres_tls.url, as role idem_cert, which the server
#                             admits by its client certificate (sslcert, sslkey) and no password
#
# PgBouncer in transaction pooling mode stands in front of it (pgbouncer.sh, DIR/pgbouncer.url):
# started last, stopped first.
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

# shellcheck source=test_certs.sh
. "$(dirname "$0")/test_certs.sh"

stop() {
  "$(dirname "$0")/pgbouncer.sh" stop "$dir"
  if [[ -f "$state/data/postmaster.pid" ]]; then
    as_owner "$(find_bin pg_ctl)" -D "$state/data" -m fast -w -t 30 stop >/dev/null 2>&1 ||
      echo "postgres.sh: pg_ctl stop failed (continuing cleanup)" >&2
  fi
  rm -rf "$state"
  rm -f "$dir/postgres.url" "$dir/postgres.dir" "$dir/postgres_tls.url" "$dir/postgres_ca.path" \
    "$dir/postgres_wrong_ca.path" "$dir/postgres_client_cert.url"
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
  make_test_certs "$state/tls" idem_cert
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
ssl = on
ssl_cert_file = '$state/tls/server.crt'
ssl_key_file = '$state/tls/server.key'
ssl_ca_file = '$state/tls/ca.crt'
CONF
  # First match wins: idem_cert logs in by certificate over TLS only; everyone else as before.
  as_owner sed -i '1i hostssl all idem_cert 127.0.0.1/32 cert' "$state/data/pg_hba.conf"
  if ! as_owner "$pg_ctl" -D "$state/data" -l "$log" -w -t 60 start >/dev/null 2>&1; then
    die "pg_ctl start failed: $(tail -n 1 "$log" 2>/dev/null)"
  fi
  local psql
  psql=$(find_bin psql)
  if ! as_owner "$psql" -h "$state/run" -p "$port" -U postgres -d postgres -qAt \
      -c "CREATE DATABASE idempotency_test" >/dev/null 2>"$state/psql.err"; then
    die "CREATE DATABASE failed: $(tail -n 1 "$state/psql.err")"
  fi
  if ! as_owner "$psql" -h "$state/run" -p "$port" -U postgres -d idempotency_test -qAt \
      -c "CREATE ROLE idem_cert LOGIN" -c "GRANT CREATE ON SCHEMA public TO idem_cert" \
      >/dev/null 2>"$state/psql.err"; then
    die "CREATE ROLE failed: $(tail -n 1 "$state/psql.err")"
  fi
  printf 'postgres://postgres:%s@127.0.0.1:%s/idempotency_test?sslmode=disable\n' "$password" \
    "$port" >"$dir/postgres.url"
  printf 'postgres://postgres:%s@localhost:%s/idempotency_test?hostaddr=127.0.0.1&%s\n' \
    "$password" "$port" "sslmode=verify-full&sslrootcert=$state/tls/ca.crt" >"$dir/postgres_tls.url"
  printf 'postgres://idem_cert@localhost:%s/idempotency_test?hostaddr=127.0.0.1&%s&%s\n' "$port" \
    "sslmode=verify-full&sslrootcert=$state/tls/ca.crt" \
    "sslcert=$state/tls/client.crt&sslkey=$state/tls/client.key" >"$dir/postgres_client_cert.url"
  printf '%s\n' "$state/tls/ca.crt" >"$dir/postgres_ca.path"
  printf '%s\n' "$state/tls/other-ca.crt" >"$dir/postgres_wrong_ca.path"
  "$(dirname "$0")/pgbouncer.sh" start "$dir"
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  *) die "unknown command '$cmd' (start|stop)" ;;
esac
