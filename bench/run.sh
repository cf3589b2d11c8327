#!/usr/bin/env bash
# bench/run.sh GATEWAY_BINARY [throughput|rss|slowloris ...] — the benchmark behind `./dev bench`.
#
# Everything runs in one go on this machine, on 127.0.0.1, so the numbers that matter are the
# RATIOS between targets measured minutes apart under the same conditions (gateway vs an nginx
# reverse proxy in front of the same upstream), not the absolute requests/s of this box.
#
#   throughput  wrk at -t1 -c1 and -t2 -c16 against: the upstream directly, an nginx peer
#               (worker_processes 1, and 2), the gateway on memory://
#   rss         the gateway on sqlite:// under the 16-connection load: VmRSS / VmHWM
#   slowloris   the gateway holding BENCH_SLOW_CONNS never-finished requests while wrk -c1 runs
#   purge       the gateway on sqlite:// (1 s ttl) under -c16, without and with a purge every 1 s
#
# No part given: all three. Knobs (environment): BENCH_DURATION (10, seconds), BENCH_WARMUP (2),
# BENCH_SLOW_CONNS (200), BENCH_HEADER_TIMEOUT (5s). Output: the markdown table on stdout and in
# bench/results/latest.md (a full run) or bench/results/last-PART.md (a partial one), with the
# raw records beside it as .jsonl.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$BENCH_DIR")
[ $# -ge 1 ] || { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
GATEWAY=$(realpath "$1"); shift
[ -x "$GATEWAY" ] || { echo "no gateway binary at $GATEWAY" >&2; exit 2; }
PARTS=("$@")
[ ${#PARTS[@]} -eq 0 ] && PARTS=(throughput rss slowloris purge)
for p in "${PARTS[@]}"; do
  case "$p" in throughput | rss | slowloris | purge) ;; *) echo "unknown part: $p" >&2; exit 2 ;; esac
done

DURATION=${BENCH_DURATION:-10} # seconds, each measured wrk run
WARMUP=${BENCH_WARMUP:-2}     # seconds, an unrecorded wrk run just before each measured one
SLOW_CONNS=${BENCH_SLOW_CONNS:-200}
HEADER_TIMEOUT=${BENCH_HEADER_TIMEOUT:-5s}

TMP=$(mktemp -d /tmp/idem-bench.XXXXXX)
RECORDS=$TMP/records.jsonl # one JSON object per measurement; bench/report.py renders them
: >"$RECORDS"
PIDS=() # every background process we started, stopped by the trap

say() { printf '\033[1m--> %s\033[0m\n' "$*" >&2; }
die() { echo "bench: $*" >&2; exit 1; }

# stop PID: SIGTERM (nginx: fast shutdown; gateway: drain), then SIGKILL after 10 s.
stop() {
  local pid=$1 i
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# Only the main shell cleans up: a Ctrl-C can land in a $(...) subshell before bash resets its
# traps there, and that copy must not kill the processes or delete $TMP under the main shell.
cleanup() {
  [ "$BASHPID" = "$$" ] || return 0
  local pid
  for pid in "${PIDS[@]}"; do stop "$pid"; done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap '[ "$BASHPID" = "$$" ] && exit 130' INT TERM

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
  local name=$1 workers=$2 server_body=$3 http_extra=${4:-} dir=$TMP/$1 port
  port=$(free_port)
  mkdir -p "$dir"
  # Workers run as root when we are root (the default 'nobody' may not read $TMP); an
  # unprivileged nginx cannot switch user, so the directive is left out then.
  local user=""
  [ "$(id -u)" -eq 0 ] && user="user root;"
  cat >"$dir/nginx.conf" <<EOF
$user
daemon off;
worker_processes $workers;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $dir/client_body;
  proxy_temp_path $dir/proxy;
  fastcgi_temp_path $dir/fastcgi;
  uwsgi_temp_path $dir/uwsgi;
  scgi_temp_path $dir/scgi;
  # nginx closes a client connection after 1000 requests by default; the gateway does not.
  # Raised so wrk's connections stay up for the whole run against every target.
  keepalive_requests 1000000;
  keepalive_timeout 75s;
$http_extra
  server {
    listen 127.0.0.1:$port;
$server_body
  }
}
EOF
  nginx -p "$dir/" -c "$dir/nginx.conf" -e "$dir/error.log" >"$dir/stdout.log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  wait_port "$port" "$pid" "$dir/error.log"
  STARTED_PORT=$port STARTED_PID=$pid
}

# start_upstream: the app stand-in, `return 200` with an empty body.
start_upstream() {
  start_nginx upstream 1 "    location / { return 200; }"
}

# start_peer UPSTREAM_PORT WORKERS: nginx as a reverse proxy, set up as an operator would:
# pooled keep-alive connections to the upstream (HTTP/1.1, no Connection: close).
start_peer() {
  local up=$1 workers=$2
  start_nginx "peer-w$workers" "$workers" "    location / {
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
    }" "  upstream app {
    server 127.0.0.1:$up;
    keepalive 64;
    keepalive_requests 1000000;
  }"
}

# start_gateway NAME UPSTREAM_PORT BACKEND [FLAGS...]: listens on port 0, and the port is read
# from its `listening on N` line (no race for a free port).
start_gateway() {
  local name=$1 up=$2 backend=$3 dir=$TMP/$1 i port=""
  shift 3
  mkdir -p "$dir"
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

# gateway_outcomes PORT: its requests_total counters as one JSON object {"handled": N, ...}.
gateway_outcomes() {
  curl -fsS "http://127.0.0.1:$1/metrics" |
    sed -n 's/^idempotency_gateway_requests_total{outcome="\([a-z_]*\)"} \([0-9.e+]*\)$/"\1":\2/p' |
    paste -sd, | sed 's/^/{/; s/$/}/'
}

# record JSON: append one measurement.
record() { echo "$1" >>"$RECORDS"; }

# run_wrk TARGET CONNS PORT [gateway] [EXTRA_JSON]: warm up, measure, record. A fresh nonce per
# wrk invocation keeps every messageId unique against a gateway that has seen earlier runs.
# Against a gateway, its outcome counters are read around the measured run: every request must
# come out 'handled' (a 'duplicate' would mean the run measured the 204 path).
run_wrk() {
  local target=$1 conns=$2 port=$3 is_gateway=${4:-} extra=${5:-} threads=1 out json
  local url="http://127.0.0.1:$port/" before=null after=null
  [ "$conns" -ge 2 ] && threads=2
  wrk -t"$threads" -c"$conns" -d"${WARMUP}s" -s "$BENCH_DIR/push.lua" "$url" \
    -- "warm-$RANDOM-$(date +%s%N)" >/dev/null
  [ -n "$is_gateway" ] && before=$(gateway_outcomes "$port")
  out=$(wrk -t"$threads" -c"$conns" -d"${DURATION}s" --latency -s "$BENCH_DIR/push.lua" "$url" \
    -- "run-$RANDOM-$(date +%s%N)")
  [ -n "$is_gateway" ] && after=$(gateway_outcomes "$port")
  json=$(sed -n 's/^BENCH_JSON //p' <<<"$out")
  [ -n "$json" ] || { echo "$out" >&2; die "wrk printed no BENCH_JSON line"; }
  record "{\"kind\":\"wrk\",\"target\":\"$target\",\"conns\":$conns,\"threads\":$threads,\"wrk\":$json,\"outcomes_before\":$before,\"outcomes_after\":$after${extra:+,$extra}}"
  say "$(printf '%-40s c=%-3s %s' "$target" "$conns" "$json")"
}

# sample_rss PID OUT: VmRSS (kB) every 200 ms until the process ends or we are stopped —
# sampling, not waiting.
sample_rss() {
  while kill -0 "$1" 2>/dev/null; do
    awk '/^VmRSS:/ {print $2}' "/proc/$1/status" >>"$2" 2>/dev/null || true
    sleep 0.2
  done
}

vm() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; } # vm PID VmHWM → kB

# ---------------------------------------------------------------------------------------------

part_throughput() {
  local up=$1 w c
  say "throughput: upstream direct, nginx peer (1 and 2 workers), gateway on memory://"
  for c in 1 16; do run_wrk "upstream direct" "$c" "$up"; done

  for w in 1 2; do
    start_peer "$up" "$w"
    for c in 1 16; do run_wrk "nginx peer (worker_processes $w)" "$c" "$STARTED_PORT"; done
    stop "$STARTED_PID"
  done

  start_gateway gw-memory "$up" memory://
  for c in 1 16; do run_wrk "gateway memory://" "$c" "$STARTED_PORT" gateway; done
  record "{\"kind\":\"rss\",\"target\":\"gateway memory:// after the throughput runs\",\"vmrss_kb\":$(vm "$STARTED_PID" VmRSS),\"vmhwm_kb\":$(vm "$STARTED_PID" VmHWM)}"
  stop "$STARTED_PID"
}

part_rss() {
  local up=$1 port pid idle_kb samples=$TMP/rss-samples sampler peak
  say "rss: gateway on sqlite:// under -t2 -c16"
  start_gateway gw-sqlite "$up" "sqlite://$TMP/idem.db"
  port=$STARTED_PORT pid=$STARTED_PID
  idle_kb=$(vm "$pid" VmRSS)
  : >"$samples"
  sample_rss "$pid" "$samples" &
  sampler=$!
  PIDS+=("$sampler")
  run_wrk "gateway sqlite://" 16 "$port" gateway
  kill "$sampler" 2>/dev/null || true
  wait "$sampler" 2>/dev/null || true
  peak=$(sort -n "$samples" | tail -n 1)
  record "{\"kind\":\"rss\",\"target\":\"gateway sqlite:// under -c16\",\"idle_kb\":$idle_kb,\"peak_vmrss_kb\":${peak:-0},\"vmrss_kb\":$(vm "$pid" VmRSS),\"vmhwm_kb\":$(vm "$pid" VmHWM),\"samples\":$(wc -l <"$samples")}"
  stop "$pid"
}

part_slowloris() {
  local up=$1 port pid flags=() note i
  # A short header deadline is what an operator facing slowloris would set, if the flag exists.
  if "$GATEWAY" --help 2>&1 | grep -q -- '--header-timeout'; then
    flags=(--header-timeout "$HEADER_TIMEOUT")
    note="--header-timeout $HEADER_TIMEOUT"
  else
    note="no --header-timeout flag in this build: its defaults"
  fi
  say "slowloris: $SLOW_CONNS slow connections + wrk -t1 -c1 against the gateway ($note)"
  start_gateway gw-slowloris "$up" memory:// "${flags[@]}"
  port=$STARTED_PORT pid=$STARTED_PID

  # The slow clients outlive warm-up + run by a few seconds, then exit by themselves.
  local slow_out=$TMP/slowloris.out slow
  python3 "$BENCH_DIR/slowloris.py" 127.0.0.1 "$port" "$SLOW_CONNS" $((WARMUP + DURATION + 5)) \
    >"$slow_out" &
  slow=$!
  PIDS+=("$slow")
  for ((i = 0; i < 200; i++)); do
    grep -q '^ready' "$slow_out" && break
    kill -0 "$slow" 2>/dev/null || break
    sleep 0.05
  done
  grep -q '^ready' "$slow_out" || die "slowloris.py did not get $SLOW_CONNS connections open"
  # Client-side sockets to the gateway (dport): the slow ones, before wrk adds its own.
  local open_start open_end
  open_start=$(ss -Htn state established "dport = :$port" | wc -l)
  run_wrk "gateway memory:// + $SLOW_CONNS slowloris" 1 "$port" gateway
  open_end=$(ss -Htn state established "dport = :$port" | wc -l)
  wait "$slow" || true
  record "{\"kind\":\"slowloris\",\"note\":\"$note\",\"established_at_start\":$open_start,\"established_at_end\":$open_end,\"client\":$(tail -n 1 "$slow_out")}"
  stop "$pid"
}

# part_purge: does a background purge show in request latency? The gateway on sqlite:// with a
# 1 s lease and ttl, so that records expire during the run and every pass has work, under the
# 16-connection load: once with no purge, once purging every second.
part_purge() {
  local up=$1 interval metrics claim
  for interval in 0 1s; do
    start_gateway "purge-$interval" "$up" "sqlite://$TMP/purge-$interval.db" \
      --lease 1s --ttl 1s --purge-interval "$interval"
    run_wrk "gateway sqlite:// ttl 1s, --purge-interval $interval" 16 "$STARTED_PORT" gateway
    # The claim's own latency, from the gateway's histogram (cumulative counts per bound).
    metrics=$(curl -fsS "http://127.0.0.1:$STARTED_PORT/metrics")
    claim=$(sed -n 's/^idempotency_gateway_backend_duration_seconds_bucket{operation="claim",le="\([^"]*\)"} \([0-9]*\)$/["\1",\2]/p' <<<"$metrics" | paste -sd,)
    record "{\"kind\":\"purge\",\"interval\":\"$interval\",\"purged\":$(
      sed -n 's/^idempotency_gateway_purged_records_total \([0-9]*\)$/\1/p' <<<"$metrics"),\"claim_buckets\":[$claim]}"
    stop "$STARTED_PID"
  done
}

# ---------------------------------------------------------------------------------------------

main() {
  local started p up_pid name=latest load_start
  started=$(date +%s)
  # Other work on the machine skews the ratios: the load before we add ours goes into the report.
  load_start=$(cut -d' ' -f1-3 /proc/loadavg)
  start_upstream
  UP_PORT=$STARTED_PORT up_pid=$STARTED_PID
  say "upstream nginx (return 200) on 127.0.0.1:$UP_PORT; gateway: $GATEWAY"
  for p in "${PARTS[@]}"; do "part_$p" "$UP_PORT"; done
  stop "$up_pid"

  [ "${PARTS[*]}" = "throughput rss slowloris purge" ] || name="last-$(tr ' ' '-' <<<"${PARTS[*]}")"
  mkdir -p "$BENCH_DIR/results"
  cp "$RECORDS" "$BENCH_DIR/results/$name.jsonl"
  python3 "$BENCH_DIR/report.py" "$RECORDS" --duration "$DURATION" --warmup "$WARMUP" \
    --elapsed $(($(date +%s) - started)) --gateway "$GATEWAY" --root "$ROOT" \
    --load "$load_start" |
    tee "$BENCH_DIR/results/$name.md"
  say "written: bench/results/$name.md (raw records: $name.jsonl)"
}

main
