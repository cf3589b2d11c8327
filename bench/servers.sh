# shellcheck shell=bash
# bench/servers.sh — sourced by bench/run.sh and bench/ab_gateway.sh: the servers they measure,
# started one way wherever they run. Each start_* registers its process in $PIDS and its files
# under $TMP/NAME (the sourcing script provides both, and stops what PIDS holds on exit), and
# sets STARTED_PORT and STARTED_PID.
# shellcheck disable=SC2034  # STARTED_PORT and STARTED_PID are read by the sourcing scripts

# shellcheck source=nginx.sh
. "$(dirname "${BASH_SOURCE[0]}")/nginx.sh"

# die MESSAGE: the script's one-line error, and exit 1.
die() { echo "bench: $*" >&2; exit 1; }

# free_port: a port no socket uses (checked with ss; a start that still races fails loudly),
# below Linux's ephemeral range (32768+), where the benchmark's own client sockets live.
free_port() {
  local port i
  for ((i = 0; i < 100; i++)); do
    port=$((20000 + RANDOM % 12000))
    [ -z "$(ss -Htan "sport = :$port")" ] && { echo "$port"; return 0; }
  done
  die "no free port found"
}

# wait_port PORT PID LOG: until something listens on PORT (at most 10 s), or PID died.
wait_port() {
  local port=$1 pid=$2 log=$3 i
  for ((i = 0; i < 200; i++)); do
    [ -n "$(ss -Htln "sport = :$port")" ] && return 0
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; die "process $pid exited before listening"; }
    sleep 0.05
  done
  cat "$log" >&2
  die "nothing listens on $port after 10 s"
}

# The start_* functions set STARTED_PORT and STARTED_PID (not printed: they must run in this
# shell, not a $(...) subshell, so that the process is our child and lands in PIDS).
STARTED_PORT="" STARTED_PID=""

# start_nginx NAME WORKERS SERVER_BODY [HTTP_EXTRA]: its own prefix, conf, pid, error log and
# temp paths under $TMP/NAME, in the foreground (daemon off) so that $! is the master.
start_nginx() {
  local workers=$2 server_body=$3 http_extra=${4:-} dir=$TMP/$1 port
  port=$(free_port)
  nginx_config "$dir" "$port" "$workers" "$server_body" "$http_extra"
  nginx -p "$dir/" -c "$dir/nginx.conf" -e "$dir/error.log" >"$dir/stdout.log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  wait_port "$port" "$pid" "$dir/error.log"
  STARTED_PORT=$port STARTED_PID=$pid
}

# start_upstream: the app stand-in, `return 200` with an empty body.
start_upstream() {
  start_nginx upstream 1 "$UPSTREAM_LOCATION"
}

# start_peer UPSTREAM_PORT WORKERS: nginx as a reverse proxy, set up as an operator would:
# pooled keep-alive connections to the upstream (HTTP/1.1, no Connection: close).
start_peer() {
  start_nginx "peer-w$2" "$2" "$PEER_LOCATION" "$(peer_upstream "$1")"
}

# start_gateway NAME UPSTREAM_PORT BACKEND [FLAGS...]: the gateway binary $GATEWAY, listening
# on port 0; the port is read from its `listening on N` line (no race for a free port).
start_gateway() {
  local up=$2 backend=$3 dir=$TMP/$1 i port=""
  shift 3
  mkdir -p "$dir"
  : >"$dir/stdout.log"  # a gateway started here before said its port in it
  "$GATEWAY" --upstream "http://127.0.0.1:$up" --backend "$backend" \
    --listen 127.0.0.1:0 "$@" >"$dir/stdout.log" 2>"$dir/stderr.log" &
  local pid=$!
  PIDS+=("$pid")
  for ((i = 0; i < 200; i++)); do
    port=$(sed -n 's/^listening on \([0-9]*\)$/\1/p' "$dir/stdout.log")
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || { tail -n 20 "$dir/stderr.log" >&2; die "gateway exited at start"; }
    sleep 0.05
  done
  [ -n "$port" ] || { tail -n 20 "$dir/stderr.log" >&2; die "gateway did not say 'listening on'"; }
  STARTED_PORT=$port STARTED_PID=$pid
}
