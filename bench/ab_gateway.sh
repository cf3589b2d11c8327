#!/usr/bin/env bash
# bench/ab_gateway.sh OLD NEW [ROUNDS] — two gateway binaries alternated behind one nginx
# `return 200`, on memory://, at 16 connections (wrk -t2) and at one (wrk -t1): pushes a second,
# and a request's context switches and CPU in the upstream and in the gateway. Not part of
# `./dev bench`: for weighing one change on this noisy VM, where only runs minutes apart, in
# alternating order, compare.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: bench/ab_gateway.sh OLD_BINARY NEW_BINARY [ROUNDS]" >&2; exit 2; }
BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
declare -A BIN=([old]=$(realpath "$1") [new]=$(realpath "$2"))
ROUNDS=${3:-6}
# shellcheck source=bench/scratch.sh
source "$BENCH_DIR/scratch.sh"
# shellcheck source=bench/servers.sh
source "$BENCH_DIR/servers.sh"

start_upstream
UP=$STARTED_PORT
# The master listens before it forks its worker.
UP_WORKER=""
for _ in $(seq 100); do UP_WORKER=$(pgrep -P "$STARTED_PID") && break; sleep 0.05; done
[ -n "$UP_WORKER" ] || die "the upstream nginx started no worker"

switches() { awk '/ctxt_switches/ {s += $2} END {print s}' /proc/"$1"/task/*/status; }
ticks() { awk '{print $14 + $15}' /proc/"$1"/stat; }

run() { # run old|new CONNECTIONS
  local which=$1 conns=$2 threads=2 port="" pid
  [ "$conns" = 1 ] && threads=1
  GATEWAY=${BIN[$which]} start_gateway "gw-$which" "$UP" memory://
  port=$STARTED_PORT pid=$STARTED_PID
  wrk -t$threads -c"$conns" -d2s -s "$BENCH_DIR/push.lua" "http://127.0.0.1:$port/" -- "warm-$RANDOM$RANDOM" >/dev/null
  local -a before after
  local json
  before=("$(switches "$UP_WORKER")" "$(switches "$pid")" "$(ticks "$UP_WORKER")" "$(ticks "$pid")")
  json=$(wrk -t$threads -c"$conns" -d5s -s "$BENCH_DIR/push.lua" "http://127.0.0.1:$port/" \
    -- "run-$RANDOM$RANDOM" | sed -n 's/^BENCH_JSON //p')
  after=("$(switches "$UP_WORKER")" "$(switches "$pid")" "$(ticks "$UP_WORKER")" "$(ticks "$pid")")
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  # Reaped: out of the list the exit stops, whose numbers the system may give out again.
  local -a alive=()
  local p
  for p in "${PIDS[@]}"; do [ "$p" = "$pid" ] || alive+=("$p"); done
  PIDS=("${alive[@]}")
  python3 - "$which" "$conns" "$json" "${before[@]}" "${after[@]}" <<'PY'
import json, sys
which, conns, run = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
b, a = list(map(int, sys.argv[4:8])), list(map(int, sys.argv[8:12]))
n, tick_us = run["requests"], 1e6 / 100  # /proc's clock ticks, USER_HZ = 100
print(f"{which:4} c={conns:>2} pushes/s {run['rps']:8.0f}  a request: upstream switches "
      f"{(a[0] - b[0]) / n:.3f}, gateway switches {(a[1] - b[1]) / n:.3f}, upstream CPU "
      f"{(a[2] - b[2]) * tick_us / n:.1f} us, gateway CPU {(a[3] - b[3]) * tick_us / n:.1f} us")
PY
}

for ((round = 1; round <= ROUNDS; round++)); do
  for conns in 16 1; do
    if ((round % 2)); then run old "$conns"; run new "$conns"; else run new "$conns"; run old "$conns"; fi
  done
done
