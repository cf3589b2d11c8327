# stop_redis DIR: ends the redis-server whose pidfile is DIR/redis.pid, by its pid (sourced by
# the Redis fixture scripts).
stop_redis() {
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
