#!/usr/bin/env bash
# Starts / stops a private Redis for the tests (a CTest fixture).
#
#   redis.sh start DIR   writes a redis:// URL to DIR/redis.url
#   redis.sh stop DIR    stops the server and removes its files; safe when none runs
#
# With REDIS_URL set, start only records that URL (and stop only forgets it). Otherwise it
# starts Debian's redis-server on a free 127.0.0.1 port, bound to loopback only, in a
# temporary directory under DIR, daemonized with a pidfile and with persistence on
# (appendonly yes); DIR/redis.dir names that directory for `stop`. Works as root and not.
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

# stop_server STATE_DIR: ends the redis-server whose pidfile is in STATE_DIR, by its pid.
stop_server() {
  local state=$1 pid
  [[ -f "$state/redis.pid" ]] || return 0
  pid=$(cat "$state/redis.pid" 2>/dev/null || true)
  [[ "$pid" =~ ^[0-9]+$ ]] || return 0
  # Only a live redis-server: a stale pidfile may name a pid reused by something else.
  if [[ "$(cat "/proc/$pid/comm" 2>/dev/null || true)" == redis-server* ]]; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || return 0
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  fi
}

stop() {
  local state
  state=$(cat "$dir/redis.dir" 2>/dev/null || true)
  if [[ -n "$state" && -d "$state" ]]; then
    stop_server "$state"
    rm -rf "$state"
  fi
  rm -f "$dir/redis.url" "$dir/redis.dir"
}

start() {
  if [[ -n "${REDIS_URL:-}" ]]; then
    printf '%s\n' "$REDIS_URL" >"$dir/redis.url"
    exit 0
  fi
  stop  # a leftover from an interrupted run
  [[ -x "$server" ]] || die "$server not found (install Debian's redis-server package)"
  [[ -x "$cli" ]] || die "$cli not found (install Debian's redis-tools package)"
  local state port attempt
  state=$(mktemp -d "$dir/redis.XXXXXX") || die "cannot create a directory under $dir"
  printf '%s\n' "$state" >"$dir/redis.dir"
  for attempt in 1 2 3 4 5; do
    port=$(free_port) || die "no free port found"
    rm -f "$state/redis.pid"
    if ! "$server" --port "$port" --bind 127.0.0.1 --protected-mode yes \
        --dir "$state" --daemonize yes --pidfile "$state/redis.pid" \
        --logfile "$state/redis.log" --appendonly yes --save "" \
        --enable-debug-command local >/dev/null 2>&1; then
      die "redis-server failed to start: $(tail -n 1 "$state/redis.log" 2>/dev/null)"
    fi
    for _ in $(seq 1 100); do
      if [[ "$("$cli" -h 127.0.0.1 -p "$port" ping 2>/dev/null)" == PONG ]]; then
        printf 'redis://127.0.0.1:%s\n' "$port" >"$dir/redis.url"
        exit 0
      fi
      # The daemon exits at once when the port was taken between the probe and the bind.
      if [[ -f "$state/redis.pid" ]] && ! kill -0 "$(cat "$state/redis.pid")" 2>/dev/null; then
        break
      fi
      if grep -q "Address already in use" "$state/redis.log" 2>/dev/null; then break; fi
      sleep 0.1
    done
    stop_server "$state"
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
