#!/usr/bin/env bash
# bench/run.sh GATEWAY_BINARY [throughput|rss|slowloris|purge|store ...] — the benchmark behind
# `./dev bench`.
#
# Everything runs in one go on this machine, on 127.0.0.1, so the numbers that matter are the
# RATIOS between targets measured minutes apart under the same conditions (gateway vs an nginx
# reverse proxy in front of the same upstream), not the absolute requests/s of this box.
#
#   throughput  wrk at -t1 -c1 and -t2 -c16 against: the upstream directly, an nginx peer
#               (worker_processes 1, and 2), the gateway on memory:// (and at 16 connections on
#               a private redis-server's redis://); with the CPU per request
#               of the proxy, the upstream and wrk in each run; then BENCH_THROUGHPUT_ROUNDS - 1
#               more rounds of the direct, 1-worker nginx and gateway runs back to back, whose
#               ratios the verdicts take the median of; then the push's path in
#               instructions, gateway and nginx (bench/push_path.sh); last, what verifying a
#               push's OIDC token costs, fresh and repeated (bench/oidc_bench)
#   rss         the gateway on sqlite:// under the 16-connection load: VmRSS / VmHWM
#   slowloris   the gateway holding BENCH_SLOW_CONNS never-finished requests while wrk -c1 runs
#   purge       the gateway on sqlite:// (1 s ttl) under -c16, without and with a purge every 1 s
#   store       every store path through the library (bench/store_bench) at 1, 8 and 64 threads,
#               each right beside the store's own limit for the same statements (redis-benchmark
#               EVALSHA, pgbench -M prepared, raw SQLite), on private servers, and on the same
#               Redis (blocking threads, and as many pairs in flight by claim_async) the peer
#               (bench/peer: AWS Lambda Powertools' idempotency on Node.js, its
#               packages installed by bench/peer/install.sh), and what a blocking call cannot
#               cost less than there (store_bench floor); the Redis script's weight in
#               instructions (bench/script_weight.sh); then scale, purge
#
# No part given: all five. Knobs (environment): BENCH_DURATION (10, seconds), BENCH_WARMUP (2),
# BENCH_SLOW_CONNS (200), BENCH_HEADER_TIMEOUT (5s), BENCH_THROUGHPUT_ROUNDS (3: rounds of the
# upstream direct, the 1-worker nginx peer and the gateway, back to back); for store: STORE_BENCH (the driver,
# build/bench/store_bench), BENCH_STORE_SECONDS (3), BENCH_STORE_ROUNDS (3),
# BENCH_STORE_THREADS (1,8,64), BENCH_STORE_BACKENDS (memory,sqlite,redis,postgres,peer: which
# stores, and the peer, the part runs), BENCH_STORE_SCALE (1000,100000,1000000, and 10000000
# with 8 GiB of memory available),
# BENCH_STORE_PURGE (1000,10000,100000; either empty: that step is left out),
# BENCH_PEER_SECONDS (5), BENCH_PEER_WARMUP (1). Output: the markdown table on stdout and in
# bench/results/latest.md (a full run) or bench/results/last-PART.md (a partial one), and beside
# it the same as one JSON document (.json: every verdict, and the raw records).
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$BENCH_DIR")
[ $# -ge 1 ] || { sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
GATEWAY=$(realpath "$1"); shift
PARTS=("$@")
[ ${#PARTS[@]} -eq 0 ] && PARTS=(throughput rss slowloris purge store)
for p in "${PARTS[@]}"; do
  case "$p" in throughput | rss | slowloris | purge | store) ;; *) echo "unknown part: $p" >&2; exit 2 ;; esac
done
# The store part alone needs no gateway (bench/run.sh - store).
[ "${PARTS[*]}" = store ] || [ -x "$GATEWAY" ] || { echo "no gateway binary at $GATEWAY" >&2; exit 2; }

DURATION=${BENCH_DURATION:-10} # seconds, each measured wrk run
WARMUP=${BENCH_WARMUP:-2}     # seconds, an unrecorded wrk run just before each measured one
THROUGHPUT_ROUNDS=${BENCH_THROUGHPUT_ROUNDS:-3}
SLOW_CONNS=${BENCH_SLOW_CONNS:-200}
HEADER_TIMEOUT=${BENCH_HEADER_TIMEOUT:-5s}
STORE_BENCH=${STORE_BENCH:-$ROOT/build/bench/store_bench}
OIDC_BENCH=${OIDC_BENCH:-$ROOT/build/bench/oidc_bench} # the throughput part's token verifier
STORE_SECONDS=${BENCH_STORE_SECONDS:-3}
STORE_ROUNDS=${BENCH_STORE_ROUNDS:-3}
STORE_THREADS=${BENCH_STORE_THREADS:-1,8,64}
# 10^7 live records where memory allows (issue 15). Every count is a store of its own, so the
# step holds 1.11 x 10^7 records a backend: the memory store ~1.4 GB in its process while it
# runs (and ~0.3 GB for its random reads after), Redis ~2.5 GB in memory until it is flushed
# after its step; PostgreSQL's ~2.0 GB and SQLite's ~1.1 GB are files. With less than 8 GiB
# available the list ends at 10^6.
SCALE_DEFAULT=1000,100000,1000000
MEM_AVAILABLE_KB=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo)
if ((${MEM_AVAILABLE_KB:-0} >= 8 * 1024 * 1024)); then
  SCALE_DEFAULT+=,10000000
fi
STORE_SCALE=${BENCH_STORE_SCALE-$SCALE_DEFAULT}
STORE_PURGE=${BENCH_STORE_PURGE-1000,10000,100000}
STORE_BACKENDS=${BENCH_STORE_BACKENDS:-memory,sqlite,redis,postgres,peer}
PEER_SECONDS=${BENCH_PEER_SECONDS:-5}
PEER_WARMUP=${BENCH_PEER_WARMUP:-1}
PEER_OVERLAP_KEYS=20 # keys called twice at once in the peer's overlap check
for b in ${STORE_BACKENDS//,/ }; do
  case "$b" in memory | sqlite | redis | postgres | peer) ;; *) echo "unknown store backend: $b" >&2; exit 2 ;; esac
done

TMP=$(mktemp -d /tmp/idem-bench.XXXXXX)
RECORDS=$TMP/records.jsonl # one JSON object per measurement; bench/report.py renders them
: >"$RECORDS"
PIDS=() # every background process we started, stopped by the trap

say() { printf '\033[1m--> %s\033[0m\n' "$*" >&2; }

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
  stop_postgres
  rm -rf "$TMP"
}
trap cleanup EXIT
trap '[ "$BASHPID" = "$$" ] && exit 130' INT TERM

# shellcheck source=servers.sh
. "$BENCH_DIR/servers.sh"

# gateway_outcomes PORT: its requests_total counters as one JSON object {"handled": N, ...}.
gateway_outcomes() {
  curl -fsS "http://127.0.0.1:$1/metrics" |
    sed -n 's/^idempotency_gateway_requests_total{outcome="\([a-z_]*\)"} \([0-9.e+]*\)$/"\1":\2/p' |
    paste -sd, | sed 's/^/{/; s/$/}/'
}

# tree_cpu PID: "USER SYS" CPU seconds so far of PID and its children (an nginx master's
# workers; a process's own line already sums its threads).
tree_cpu() {
  local p
  for p in "$1" $(pgrep -P "$1" || true); do cat "/proc/$p/stat" 2>/dev/null || true; done |
    awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); u += $12; s += $13 }
      END { printf "%.3f %.3f\n", u / hz, s / hz }'
}

# record JSON: append one measurement.
record() { echo "$1" >>"$RECORDS"; }

# run_wrk TARGET CONNS PORT [gateway] [EXTRA_JSON]: warm up, measure, record. A fresh nonce per
# wrk invocation keeps every messageId unique against a gateway that has seen earlier runs.
# Against a gateway, its outcome counters are read around the measured run: every request must
# come out 'handled' (a 'duplicate' would mean the run measured the 204 path).
# PROXY_PID (set by part_throughput; empty for the upstream measured directly) and UP_PID: whose
# CPU per request each measured run records beside wrk's own, for the whole-box accounting.
PROXY_PID="" UP_PID="" ROUND=1
run_wrk() {
  local target=$1 conns=$2 port=$3 is_gateway=${4:-} extra=${5:-} threads=1 out json
  local url="http://127.0.0.1:$port/" before=null after=null cpu up0 up1 px0="0 0" px1="0 0" wrk_cpu
  [ "$conns" -ge 2 ] && threads=2
  wrk -t"$threads" -c"$conns" -d"${WARMUP}s" -s "$BENCH_DIR/push.lua" "$url" \
    -- "warm-$RANDOM-$(date +%s%N)" >/dev/null
  [ -n "$is_gateway" ] && before=$(gateway_outcomes "$port")
  up0=$(tree_cpu "$UP_PID")
  [ -z "$PROXY_PID" ] || px0=$(tree_cpu "$PROXY_PID")
  # wrk's own CPU from bash's `time` (TIMEFORMAT: user and system seconds).
  wrk_cpu=$( { TIMEFORMAT='%U %S'; time wrk -t"$threads" -c"$conns" -d"${DURATION}s" --latency \
    -s "$BENCH_DIR/push.lua" "$url" -- "run-$RANDOM-$(date +%s%N)" >"$TMP/wrk.out" 2>&1; } 2>&1)
  out=$(cat "$TMP/wrk.out")
  up1=$(tree_cpu "$UP_PID")
  [ -z "$PROXY_PID" ] || px1=$(tree_cpu "$PROXY_PID")
  [ -n "$is_gateway" ] && after=$(gateway_outcomes "$port")
  json=$(sed -n 's/^BENCH_JSON //p' <<<"$out")
  [ -n "$json" ] || { echo "$out" >&2; die "wrk printed no BENCH_JSON line"; }
  # CPU seconds spent during the measured run: proxy user, proxy system, upstream, wrk.
  cpu=$(awk -v a="$px0 $px1 $up0 $up1 $wrk_cpu" -v proxy="$PROXY_PID" 'BEGIN { split(a, v, " ");
    if (proxy != "") printf "{\"proxy_user_s\":%.3f,\"proxy_sys_s\":%.3f,", v[3] - v[1], v[4] - v[2]
    else printf "{"
    printf "\"upstream_s\":%.3f,\"wrk_s\":%.3f}", v[7] + v[8] - v[5] - v[6], v[9] + v[10] }')
  record "{\"kind\":\"wrk\",\"target\":\"$target\",\"conns\":$conns,\"threads\":$threads,\"round\":$ROUND,\"wrk\":$json,\"cpu\":$cpu,\"outcomes_before\":$before,\"outcomes_after\":$after${extra:+,$extra}}"
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
    PROXY_PID=$STARTED_PID
    for c in 1 16; do run_wrk "nginx peer (worker_processes $w)" "$c" "$STARTED_PORT"; done
    stop "$STARTED_PID"
  done

  start_gateway gw-memory "$up" memory://
  PROXY_PID=$STARTED_PID
  for c in 1 16; do run_wrk "gateway memory://" "$c" "$STARTED_PORT" gateway; done
  PROXY_PID=""
  record "{\"kind\":\"rss\",\"target\":\"gateway memory:// after the throughput runs\",\"vmrss_kb\":$(vm "$STARTED_PID" VmRSS),\"vmhwm_kb\":$(vm "$STARTED_PID" VmHWM)}"
  stop "$STARTED_PID"

  # On this shared VM one pair of runs minutes apart moved the gateway ÷ nginx ratio by a fifth
  # (0.68-0.98x at one commit): further rounds of the runs the verdicts compare, back to back,
  # and the report decides on the median of each round's own ratio. Each round's gateway starts
  # with an empty store, as the first. Even rounds run the gateway before nginx, so that
  # neither side always comes second (as the store part does with the Powertools peer).
  nginx_round() {
    start_peer "$up" 1
    PROXY_PID=$STARTED_PID
    for c in 1 16; do run_wrk "nginx peer (worker_processes 1)" "$c" "$STARTED_PORT"; done
    PROXY_PID=""
    stop "$STARTED_PID"
  }
  gateway_round() {
    start_gateway "gw-memory-$ROUND" "$up" memory://
    PROXY_PID=$STARTED_PID
    for c in 1 16; do run_wrk "gateway memory://" "$c" "$STARTED_PORT" gateway; done
    PROXY_PID=""
    stop "$STARTED_PID"
  }
  local even
  for ((ROUND = 2; ROUND <= THROUGHPUT_ROUNDS; ROUND++)); do
    even=$((ROUND % 2 == 0))
    say "throughput, round $ROUND of $THROUGHPUT_ROUNDS: upstream direct, then $( ((even)) && echo "gateway, nginx peer (1 worker)" || echo "nginx peer (1 worker), gateway")"
    run_wrk "upstream direct" 1 "$up"
    if ((even)); then gateway_round; else nginx_round; fi
    if ((even)); then nginx_round; else gateway_round; fi
  done
  ROUND=1

  # The sidecar's usual deployment: the same load on a single Redis node (no persistence, as in
  # the store part), for what a real store costs the gateway per request.
  say "throughput: gateway on redis://"
  start_redis
  local redis_pid=$STARTED_PID redis_port=$STARTED_PORT
  start_gateway gw-redis "$up" "redis://127.0.0.1:$redis_port"
  PROXY_PID=$STARTED_PID
  run_wrk "gateway redis://" 16 "$STARTED_PORT" gateway
  PROXY_PID=""
  stop "$STARTED_PID"
  stop "$redis_pid"

  # Why one connection is where the gateway trails nginx, in counts the VM cannot move.
  say "throughput: the push's path in instructions, gateway and nginx (bench/push_path.sh, valgrind)"
  # A failure is said and recorded (the report names it), not fatal: the runs above stand.
  # Three pushes: the runs' (12 bytes of data, three headers); one with 4 KiB of data, where a
  # proxy's cost a byte shows; and one as Pub/Sub sends it (1 KiB of data, five attributes, its
  # OIDC token and Google's other headers).
  local shape why
  for shape in "--data-bytes 12" "--data-bytes 4096" "--data-bytes 1024 --as-pubsub"; do
    # shellcheck disable=SC2086  # $shape is a list of options
    if "$BENCH_DIR/push_path.sh" --json $shape "$GATEWAY" \
        >"$TMP/push_path.jsonl" 2>"$TMP/push_path.err"; then
      while IFS= read -r line; do record "$line"; done <"$TMP/push_path.jsonl"
    else
      why=$(tail -n 1 "$TMP/push_path.err" | tr -d '"' | tr -d '\\')
      say "push_path.sh $shape failed: $why"
      record "{\"kind\":\"push_path_failed\",\"shape\":\"$shape\",\"error\":\"$why\"}"
    fi
  done

  # What an OIDC-authenticated push adds, by the verifier alone (the gateway's --oidc-* flags
  # run it on every push): a token not seen before, and one seen (Pub/Sub reuses it an hour).
  say "throughput: OidcVerifier::verify(), fresh and repeated tokens (bench/oidc_bench)"
  if [ -x "$OIDC_BENCH" ]; then
    while IFS= read -r line; do record "$line"; say "$line"; done < <("$OIDC_BENCH" 3)
  else
    say "no $OIDC_BENCH (./dev bench builds it): the OIDC row is left out"
  fi
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
# The store part: private servers, the library against each store's own limit, back to back.

PG_DATA="" PG_CTL=""

# as_postgres CMD...: initdb and postgres refuse to run as root; the cluster then belongs to
# the `postgres` system user (as in tests/support/servers/postgres.sh).
as_postgres() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_bin() { echo "$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin | sort -V | tail -n 1)/$1"; }

stop_postgres() {
  [ -n "$PG_DATA" ] && [ -f "$PG_DATA/postmaster.pid" ] || return 0
  as_postgres "$PG_CTL" -D "$PG_DATA" -m fast -w -t 30 stop >/dev/null 2>&1 || true
  rm -rf "$(dirname "$PG_DATA")"
}

# start_postgres: a throwaway cluster on a free port with PostgreSQL's durable defaults
# (fsync, synchronous_commit, full_page_writes all on); trust auth, loopback only.
start_postgres() {
  local dir port
  dir=$(mktemp -d /tmp/idem-bench-pg.XXXXXX) # outside $TMP: the postgres user must reach it
  port=$(free_port)
  PG_CTL=$(pg_bin pg_ctl) PG_DATA=$dir/data
  if [ "$(id -u)" -eq 0 ]; then chown postgres: "$dir"; fi
  as_postgres "$(pg_bin initdb)" -D "$PG_DATA" -U postgres --auth=trust -E UTF8 --no-locale \
    >"$TMP/initdb.log" 2>&1 || { cat "$TMP/initdb.log" >&2; die "initdb failed"; }
  printf "listen_addresses = '127.0.0.1'\nport = %s\nunix_socket_directories = '%s'\nmax_connections = 120\n" \
    "$port" "$dir" >>"$PG_DATA/postgresql.conf"
  as_postgres "$PG_CTL" -D "$PG_DATA" -l "$dir/postgres.log" -w -t 60 start >/dev/null ||
    { cat "$dir/postgres.log" >&2; die "postgres did not start"; }
  STARTED_PORT=$port
}

# start_redis: redis-server on a free port, no persistence (no RDB snapshots, no AOF).
start_redis() {
  local port dir=$TMP/redis pid
  port=$(free_port)
  mkdir -p "$dir"
  redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no --dir "$dir" \
    --daemonize no >"$dir/redis.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  wait_port "$port" "$pid" "$dir/redis.log"
  STARTED_PORT=$port STARTED_PID=$pid
}

# store_run ROUND ARGS...: one store_bench invocation, its JSON lines recorded with the round.
store_run() {
  local round=$1 line status=0
  shift
  while IFS= read -r line; do
    record "${line%\}},\"round\":$round}"
    say "round $round $line"
  done < <("$STORE_BENCH" "$@")
  # A run that stopped early (a store error, an unexpected answer) may have printed some lines or
  # none: the report names it instead of reading the rest as the whole measurement.
  wait $! || status=$?
  if [ "$status" -ne 0 ]; then
    say "round $round: store_bench $* exited with status $status"
    record "{\"kind\":\"store_failed\",\"round\":$round,\"command\":\"$*\",\"status\":$status}"
  fi
}

us() { awk -v v="$1" 'BEGIN { print v * 1000 }'; } # ms → µs

# redis_limit ROUND THREADS PORT SHA CLAIMS_PER_S: redis-benchmark -c THREADS of EVALSHA of the
# library's script (the claim operation, on fresh random keys), and of SET NX PX (the least a
# claim can be). -n is sized from the library's rate just measured, for about STORE_SECONDS.
# -r is 2*10^9: redis-benchmark reads it into an int, and a larger value (10^12 until
# 2026-12-02) overflowed to a keyspace of one key, so every "fresh" claim met the first
# one's live record and the limit measured a read-only re-affirm at about twice the rate.
# Each run checks that it did write about one key per call (DBSIZE before and after; every key
# the store part writes lives an hour, so none expires meanwhile). redis-benchmark's own CPU
# (bash's `time`) ÷ its calls is recorded too: what Redis's own C client spends on one round
# trip here, the floor of any client that sends one call at a time.
redis_limit() {
  local round=$1 c=$2 port=$3 sha=$4 rate=$5 n csv rps p50 p99 what args keys rb_cpu cpu
  n=$(awk -v r="$rate" -v s="$STORE_SECONDS" 'BEGIN { n = int(r * s * 1.5); print (n < 20000 ? 20000 : n) }')
  for what in evalsha setnx; do
    empty_redis "$port"
    if [ "$what" = evalsha ]; then
      args=(EVALSHA "$sha" 1 "idempotency:rb-$round-$c-__rand_int__" claim ""
        0123456789abcdef0123456789abcdef 60000 3600000 -)
    else
      args=(SET "idempotency:rs-$round-$c-__rand_int__" 0123456789abcdef0123456789abcdef NX PX 3600000)
    fi
    keys=$(redis-cli -p "$port" DBSIZE)
    rb_cpu=$( { TIMEFORMAT='%U %S'; time redis-benchmark -h 127.0.0.1 -p "$port" -c "$c" -n "$n" \
      -r 2000000000 --csv --precision 3 "${args[@]}" >"$TMP/rb.out" 2>"$TMP/rb.err"; } 2>&1)
    csv=$(tail -n 1 "$TMP/rb.out")
    cpu=$(awk -v t="$rb_cpu" -v n="$n" 'BEGIN { split(t, v, " "); printf "%.2f", (v[1] + v[2]) * 1e6 / n }')
    keys=$(($(redis-cli -p "$port" DBSIZE) - keys))
    [ $((keys * 100)) -ge $((n * 99)) ] ||
      die "redis-benchmark $what wrote $keys keys in $n calls: its keys were not fresh"
    rps=$(cut -d, -f2 <<<"$csv" | tr -d '"')
    p50=$(cut -d, -f5 <<<"$csv" | tr -d '"')
    p99=$(cut -d, -f7 <<<"$csv" | tr -d '"')
    [ -n "$rps" ] || die "redis-benchmark printed no result"
    if [ "$what" = evalsha ]; then
      record "{\"kind\":\"limit\",\"backend\":\"redis\",\"path\":\"pair\",\"threads\":$c,\"rate\":$(awk -v r="$rps" 'BEGIN { print r / 2 }'),\"statement_rate\":$rps,\"p50_us\":$(us "$p50"),\"p99_us\":$(us "$p99"),\"requests\":$n,\"client_cpu_us_per_call\":$cpu,\"round\":$round,\"tool\":\"redis-benchmark EVALSHA claim; pairs/s = claims/s / 2\"}"
    else
      record "{\"kind\":\"floor\",\"backend\":\"redis\",\"path\":\"set-nx\",\"threads\":$c,\"statement_rate\":$rps,\"p50_us\":$(us "$p50"),\"p99_us\":$(us "$p99"),\"client_cpu_us_per_call\":$cpu,\"round\":$round,\"tool\":\"redis-benchmark SET NX PX\"}"
    fi
    say "round $round redis-benchmark $what -c $c: $rps/s, its client ${cpu} µs of CPU a call"
  done
}

# pg_limit ROUND THREADS PORT SCRIPT: pgbench -M prepared of the library's claim + complete
# statements (one script run = one pair, two autocommit round trips).
pg_limit() {
  local round=$1 c=$2 port=$3 script=$4 j=1 out tps lat
  [ "$c" -ge 2 ] && j=2
  out=$(pgbench -n -M prepared -h 127.0.0.1 -p "$port" -U postgres -c "$c" -j "$j" \
    -T "$STORE_SECONDS" -f "$script" postgres 2>&1) || { echo "$out" >&2; die "pgbench failed"; }
  tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' <<<"$out" | tail -n 1)
  lat=$(sed -n 's/^latency average = \([0-9.]*\) ms$/\1/p' <<<"$out")
  [ -n "$tps" ] || { echo "$out" >&2; die "pgbench printed no tps"; }
  record "{\"kind\":\"limit\",\"backend\":\"postgres\",\"path\":\"pair\",\"threads\":$c,\"rate\":$tps,\"latency_avg_ms\":${lat:-null},\"round\":$round,\"tool\":\"pgbench -M prepared, the claim + complete statements\"}"
  say "round $round pgbench -c $c: $tps pairs/s"
}

# empty_redis PORT: the bench's Redis database emptied (synchronously: a background free would
# share the cores with the next run). on_empty_redis PORT COMMAND...: COMMAND run right after.
empty_redis() { redis-cli -p "$1" FLUSHDB SYNC >/dev/null; }
on_empty_redis() {
  empty_redis "$1"
  shift
  "$@"
}

# last_rate BACKEND PATH: the rate of the last record of BACKEND's PATH runs.
last_rate() {
  grep -F "\"backend\":\"$1\",\"path\":\"$2\"" "$RECORDS" | sed -n 's/.*"rate":\([0-9.]*\).*/\1/p' | tail -n 1
}

# peer_run ROUND ARGS...: one bench/peer/peer_bench.mjs invocation (the Powertools peer), its
# JSON lines recorded with the round. Unlike store_bench's lines these are read after it exits,
# so that a peer that fails stops the bench instead of leaving its rows out.
peer_run() {
  local round=$1 out line
  shift
  out=$(node "$BENCH_DIR/peer/peer_bench.mjs" "$@") || die "the peer (bench/peer/peer_bench.mjs $1) failed"
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    record "${line%\}},\"round\":$round}"
    say "round $round $line"
  done <<<"$out"
}

# has BACKEND: whether BENCH_STORE_BACKENDS names it.
has() { [[ ",$STORE_BACKENDS," == *",$1,"* ]]; }

part_store() {
  [ -x "$STORE_BENCH" ] || die "no store driver at $STORE_BENCH (./dev bench builds it)"
  local redis_port="" pg_port="" sha round c threads script=$TMP/claim_complete.pgbench
  local sqlite_dir=$TMP/sqlite psql_=(psql -h 127.0.0.1 -U postgres -d postgres -qAt)
  local redis_url="" pg_url="" setup servers=()
  mkdir -p "$sqlite_dir"
  if has peer; then
    say "store: the peer's Node.js packages (bench/peer/install.sh: npm ci of package-lock.json)"
    "$BENCH_DIR/peer/install.sh" || die "the peer's packages could not be installed"
  fi
  setup="\"kind\":\"store_setup\",\"backends\":\"$STORE_BACKENDS\",\"sqlite\":\"$(sqlite3 --version | cut -d' ' -f1)\",\"seconds\":$STORE_SECONDS,\"rounds\":$STORE_ROUNDS"
  if has redis || has peer; then
    start_redis
    redis_port=$STARTED_PORT
    redis_url="redis://127.0.0.1:$redis_port"
    sha=$(redis-cli -p "$redis_port" SCRIPT LOAD "$(cat "$ROOT/src/backends/redis/redis_script.lua")")
    setup+=",\"redis\":\"$(redis-server --version | sed 's/ sha=.*//')\",\"redis_persistence\":\"save='$(redis-cli -p "$redis_port" CONFIG GET save | tail -n 1)' appendonly=$(redis-cli -p "$redis_port" CONFIG GET appendonly | tail -n 1)\""
    servers+=("redis on $redis_port")
  fi
  if has peer; then
    setup+=",\"peer_seconds\":$PEER_SECONDS,\"peer_warmup\":$PEER_WARMUP,\"node\":\"$(node --version)\""
  fi
  if has postgres; then
    start_postgres
    pg_port=$STARTED_PORT
    psql_+=(-p "$pg_port")
    pg_url="postgres://postgres@127.0.0.1:$pg_port/postgres"
    "$STORE_BENCH" pgbench-script >"$script"
    setup+=",\"postgres\":\"$("$(pg_bin postgres)" --version)\",\"pg_durability\":\"fsync=$("${psql_[@]}" -c 'SHOW fsync') synchronous_commit=$("${psql_[@]}" -c 'SHOW synchronous_commit') full_page_writes=$("${psql_[@]}" -c 'SHOW full_page_writes')\""
    servers+=("postgres on $pg_port (durable defaults)")
  fi
  has sqlite && servers+=("sqlite in $sqlite_dir")
  record "{$setup}"
  say "store: ${STORE_BACKENDS}; ${servers[*]:-no servers}"

  IFS=, read -r -a threads <<<"$STORE_THREADS"
  for ((round = 1; round <= STORE_ROUNDS; round++)); do
    for c in "${threads[@]}"; do
      if has memory; then store_run "$round" run memory:// memory "$c" "$STORE_SECONDS" pair; fi
      if has sqlite; then
        store_run "$round" run "sqlite://$sqlite_dir/ours.db" sqlite "$c" "$STORE_SECONDS" pair
        store_run "$round" sqlite-limit "$sqlite_dir/raw.db" "$c" "$STORE_SECONDS"
      fi
      # Every Redis run of the round starts on an empty database: ours, the peer and the
      # limit alike. Carried over, the keys of the run before made the next one pay Redis's
      # incremental rehash of its main table; the peer, which ran right after our pairs in
      # flight had added ~150k keys, read 11.5-12.7k messages a second at 8 calls in flight
      # against 19-20k on an empty database (2026-12-06, BENCHMARKS.md).
      # Ours (blocking threads, then as many pairs in flight by claim_async / complete_async,
      # the way the peer keeps its calls in flight on one event loop) with the peer between
      # the two, and the two swapped every other round: each ratio to the peer compares runs
      # seconds apart, neither side always first. This VM has slow spells of 10-20 s; with
      # three runs between ours and the peer, one spell fell on ours alone and read a round
      # at 0.83x (2026-12-06 13:36, 8 threads, round 3).
      local -a ours_paths=(pair async)
      ((round % 2 == 0)) && ours_paths=(async pair)
      if has redis; then
        on_empty_redis "$redis_port" store_run "$round" run "$redis_url" redis "$c" "$STORE_SECONDS" "${ours_paths[0]}"
      fi
      if has peer; then
        on_empty_redis "$redis_port" peer_run "$round" run "$redis_url" "$c" "$PEER_SECONDS" "$PEER_WARMUP"
      fi
      if has redis; then
        on_empty_redis "$redis_port" store_run "$round" run "$redis_url" redis "$c" "$STORE_SECONDS" "${ours_paths[1]}"
        # The same pairs with a connection per call (no pipelining): the gain, in the round.
        on_empty_redis "$redis_port" store_run "$round" run "$redis_url?pipelines=0" redis-unpipelined "$c" "$STORE_SECONDS" pair
        # The limit is held to our blocking pairs' rate (their last record of this round).
        redis_limit "$round" "$c" "$redis_port" "$sha" "$(awk -v r="$(last_rate redis pair)" 'BEGIN { print r * 2 }')"
      fi
      if has postgres; then
        # A pool sized to the load, as pgbench opens a connection per client: with 64 threads on
        # the default 8 connections, calls queue for the pool while the server could commit
        # more of them in one flush (0.78x the limit against 1.03x with 64, on the 2-core VM).
        store_run "$round" run "$pg_url?pool_size=$((c > 8 ? c : 8))" postgres "$c" "$STORE_SECONDS" pair
        pg_limit "$round" "$c" "$pg_port" "$script"
      fi
    done
    # What a blocking call cannot cost less than here, without the library: a bare blocking
    # pair on one connection, and a sleeping thread's wake-up (bench/blocking_floor.h).
    if has redis; then store_run "$round" floor "$redis_port" "$STORE_SECONDS"; fi
  done
  if has peer; then
    say "store: the peer with and without a registered Lambda context, $PEER_OVERLAP_KEYS keys each called twice at once"
    peer_run 1 overlap "$redis_url" "$PEER_OVERLAP_KEYS"
  fi
  if has redis; then
    say "store: the Redis script's weight, in instructions (bench/script_weight.sh, valgrind)"
    while IFS= read -r line; do record "$line"; done < <("$BENCH_DIR/script_weight.sh")
  fi
  say "store: the duplicate path (direct and behind a DoneCache) and the one-hot-key path (one round)"
  if has memory; then store_run 1 run memory:// memory "$STORE_THREADS" "$STORE_SECONDS" dup,dupcache,hot; fi
  if has sqlite; then store_run 1 run "sqlite://$sqlite_dir/ours.db" sqlite "$STORE_THREADS" "$STORE_SECONDS" dup,dupcache,hot; fi
  if has redis; then store_run 1 run "$redis_url" redis "$STORE_THREADS" "$STORE_SECONDS" dup,dupcache,hot; fi
  if has postgres; then
    # The pool sized to the most threads of the list (at least the default 8), as above.
    local most=8 t
    for t in "${threads[@]}"; do ((t > most)) && most=$t; done
    store_run 1 run "$pg_url?pool_size=$most" postgres "$STORE_THREADS" "$STORE_SECONDS" dup,dupcache,hot
  fi

  if [ -n "$STORE_SCALE" ]; then
    say "store: claim latency against live records (a store each count, in rounds)"
    # The scale step's stores are Redis databases 1.. and tables of their own; the records of
    # the runs above only take memory.
    if [ -n "$redis_port" ]; then redis-cli -p "$redis_port" FLUSHALL >/dev/null; fi
    if has memory; then store_run 1 scale memory memory:// "$STORE_SCALE"; fi
    if has sqlite; then store_run 1 scale sqlite "sqlite://$sqlite_dir/scale.db" "$STORE_SCALE"; fi
    if has redis; then
      store_run 1 scale redis "$redis_url" "$STORE_SCALE"
      redis-cli -p "$redis_port" FLUSHALL >/dev/null # its ~2.5 GB back before PostgreSQL's fill
    fi
    if has postgres; then store_run 1 scale postgres "$pg_url" "$STORE_SCALE"; fi
  fi
  if [ -n "$STORE_PURGE" ]; then
    say "store: purge_expired against expired records"
    if has postgres; then "${psql_[@]}" -c 'TRUNCATE idempotency_records'; fi
    if has memory; then store_run 1 purge memory memory:// "$STORE_PURGE"; fi
    if has sqlite; then store_run 1 purge sqlite "sqlite://$sqlite_dir/purge.db" "$STORE_PURGE"; fi
    if has postgres; then store_run 1 purge postgres "$pg_url" "$STORE_PURGE"; fi
  fi
  stop_postgres
}

# ---------------------------------------------------------------------------------------------

main() {
  local started p up_pid name=latest load_start
  started=$(date +%s)
  # Other work on the machine skews the ratios: the load before we add ours goes into the report.
  load_start=$(cut -d' ' -f1-3 /proc/loadavg)
  # The store part needs no upstream; every other part does.
  UP_PORT="" up_pid=""
  if [ "${PARTS[*]}" != store ]; then
    start_upstream
    UP_PORT=$STARTED_PORT up_pid=$STARTED_PID UP_PID=$STARTED_PID
    say "upstream nginx (return 200) on 127.0.0.1:$UP_PORT; gateway: $GATEWAY"
  fi
  for p in "${PARTS[@]}"; do "part_$p" "$UP_PORT"; done
  [ -z "$up_pid" ] || stop "$up_pid"

  [ "${PARTS[*]}" = "throughput rss slowloris purge store" ] || name="last-$(tr ' ' '-' <<<"${PARTS[*]}")"
  mkdir -p "$BENCH_DIR/results"
  python3 "$BENCH_DIR/report.py" "$RECORDS" --duration "$DURATION" --warmup "$WARMUP" \
    --elapsed $(($(date +%s) - started)) --gateway "$GATEWAY" --root "$ROOT" \
    --load "$load_start" --store-bench "$STORE_BENCH" --json "$BENCH_DIR/results/$name.json" |
    tee "$BENCH_DIR/results/$name.md"
  say "written: bench/results/$name.md and $name.json (its verdicts and raw records)"
}

main
