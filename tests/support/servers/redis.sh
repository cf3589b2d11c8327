#!/usr/bin/env bash
# Starts / stops a private Redis for the tests (a CTest fixture).
#
#   redis.sh start DIR   writes a redis:// URL to DIR/redis.url and a rediss:// one to
#                        DIR/redis_tls.url
#   redis.sh stop DIR    stops the server and removes its files; safe when none runs
#
# It starts Debian's redis-server on free 127.0.0.1 ports, bound to loopback only, in a
# temporary directory under DIR, daemonized with a pidfile and without persistence (save "",
# appendonly no): with an append-only file, the server's one thread writes it on every event
# loop, and on a disk busy with PostgreSQL's and SQLite's fsyncs that write(2) stalled the
# server past the tests' 2 s command_timeout under ASan (twice, in the differential tests).
# The tests that need a durable server (a restart, a fault) start their own (PrivateRedis,
# appendfsync always). DIR/redis.dir names that directory for `stop`. The same server listens
# for TLS on a second port, with certificates made here by the openssl CLI (test_certs.sh, in
# tls/ in that directory): a test CA, a server certificate for DNS:localhost only, and a
# client certificate the server requires (tls-auth-clients yes); other-ca.crt is a CA that
# signed nothing, for tests of a wrong trust anchor. The rediss:// URL connects to 127.0.0.1
# with sni=localhost and the client certificate. With REDIS_URL set, redis.url records that URL
# and the server listens for TLS only. Works as root and not.
set -euo pipefail

die() { echo "redis.sh: $*" >&2; exit 1; }

cmd=${1:-}
dir=${2:-}
[[ -n "$cmd" && -n "$dir" ]] || die "usage: redis.sh start|stop DIR"
mkdir -p "$dir" || die "cannot create $dir"
dir=$(cd "$dir" && pwd)

server=${REDIS_SERVER:-/usr/bin/redis-server}
cli=${REDIS_CLI:-/usr/bin/redis-cli}

# shellcheck source=free_port.sh
. "$(dirname "$0")/free_port.sh"

# shellcheck source=stop_redis.sh
. "$(dirname "$0")/stop_redis.sh"

# shellcheck source=test_certs.sh
. "$(dirname "$0")/test_certs.sh"

stop() {
  local state
  state=$(cat "$dir/redis.dir" 2>/dev/null || true)
  if [[ -n "$state" && -d "$state" ]]; then
    stop_redis "$state"
    rm -rf "$state"
  fi
  rm -f "$dir/redis.url" "$dir/redis_tls.url" "$dir/redis.dir"
}

start() {
  stop  # a leftover from an interrupted run
  [[ -x "$server" ]] || die "$server not found (install Debian's redis-server package)"
  [[ -x "$cli" ]] || die "$cli not found (install Debian's redis-tools package)"
  local state port tls_port attempt tls
  state=$(mktemp -d "$dir/redis.XXXXXX") || die "cannot create a directory under $dir"
  printf '%s\n' "$state" >"$dir/redis.dir"
  tls=$state/tls
  make_test_certs "$tls" idempotency-test-client
  local tls_cli=(--tls --cacert "$tls/ca.crt" --cert "$tls/client.crt" --key "$tls/client.key")
  for attempt in 1 2 3 4 5; do
    port=0  # no plain port when REDIS_URL names the plain server
    if [[ -z "${REDIS_URL:-}" ]]; then port=$(free_port) || die "no free port found"; fi
    tls_port=$(free_port) || die "no free port found"
    rm -f "$state/redis.pid"
    if ! "$server" --port "$port" --bind 127.0.0.1 --protected-mode yes \
        --tls-port "$tls_port" --tls-cert-file "$tls/server.crt" \
        --tls-key-file "$tls/server.key" --tls-ca-cert-file "$tls/ca.crt" \
        --tls-auth-clients yes \
        --dir "$state" --daemonize yes --pidfile "$state/redis.pid" \
        --logfile "$state/redis.log" --appendonly no --save "" \
        --enable-debug-command local >/dev/null 2>&1; then
      die "redis-server failed to start: $(tail -n 1 "$state/redis.log" 2>/dev/null)"
    fi
    for _ in $(seq 1 100); do
      if [[ "$("$cli" "${tls_cli[@]}" -h 127.0.0.1 -p "$tls_port" ping 2>/dev/null)" == PONG ]] &&
          [[ "$port" == 0 || "$("$cli" -h 127.0.0.1 -p "$port" ping 2>/dev/null)" == PONG ]]; then
        if [[ -n "${REDIS_URL:-}" ]]; then
          printf '%s\n' "$REDIS_URL" >"$dir/redis.url"
        else
          printf 'redis://127.0.0.1:%s\n' "$port" >"$dir/redis.url"
        fi
        printf 'rediss://127.0.0.1:%s?ca=%s&cert=%s&key=%s&sni=localhost\n' "$tls_port" \
          "$(url_path "$tls/ca.crt")" "$(url_path "$tls/client.crt")" \
          "$(url_path "$tls/client.key")" >"$dir/redis_tls.url"
        exit 0
      fi
      # The daemon exits at once when a port was taken between the probe and the bind.
      if [[ -f "$state/redis.pid" ]] && ! kill -0 "$(cat "$state/redis.pid")" 2>/dev/null; then
        break
      fi
      if grep -q "Address already in use" "$state/redis.log" 2>/dev/null; then break; fi
      sleep 0.1
    done
    stop_redis "$state"
    grep -q "Address already in use" "$state/redis.log" 2>/dev/null || break
    : >"$state/redis.log"
  done
  local reason
  reason=$(tail -n 1 "$state/redis.log" 2>/dev/null || true)
  stop
  die "redis-server did not answer PING: ${reason:-no log}"
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  *) die "unknown command '$cmd' (start|stop)" ;;
esac
