#!/usr/bin/env bash
# bench/function_order.sh GATEWAY_BINARY — rewrites src/gateway/function_order.txt: the
# gateway's own functions that a push runs, busiest first, for the linker to lay out side by side.
#
# At one connection every push starts on cold caches, and the push path's code was spread over
# 155 pages of the binary's text among code that never runs per push; laid out together it takes
# 91, and the gateway's user CPU a push fell by ~1–2 µs (BENCHMARKS.md, "The push path's code laid
# out together"). The list comes from a run, not by hand: the gateway on memory:// under
# valgrind's callgrind behind nginx `return 200`, `wrk -c1` with bench/push.lua, the counters
# zeroed after a warm-up. Names the code no longer has are ignored by the linker, so a stale list
# costs only locality: run this again after changing the push path (`./dev bench` installs what
# it needs: nginx, wrk, valgrind).
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$BENCH_DIR")
[ $# -eq 1 ] || { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
GATEWAY=$(realpath "$1")
OUT=$ROOT/src/gateway/function_order.txt
# shellcheck source=scratch.sh
. "$BENCH_DIR/scratch.sh"

# shellcheck source=../tests/support/servers/free_port.sh
. "$ROOT/tests/support/servers/free_port.sh"

# shellcheck source=nginx.sh
. "$BENCH_DIR/nginx.sh"

up=$(free_port)
nginx_config "$TMP/up" "$up" 1 "$UPSTREAM_LOCATION"
nginx -p "$TMP/up/" -c "$TMP/up/nginx.conf" -e "$TMP/up/error.log" &
PIDS+=($!)

port=$(free_port)
valgrind --tool=callgrind --demangle=no --callgrind-out-file="$TMP/callgrind.%p" "$GATEWAY" \
  --upstream "http://127.0.0.1:$up" --backend memory:// --listen "127.0.0.1:$port" \
  >"$TMP/gateway.log" 2>&1 &
gw=$!
PIDS+=("$gw")
# fail MESSAGE: says why, with the gateway's own last lines (the temporary directory goes).
fail() {
  echo "function_order: $1" >&2
  tail -n 20 "$TMP/gateway.log" >&2
  exit 1
}
for _ in $(seq 300); do curl -fsS -o /dev/null "http://127.0.0.1:$port/healthz" 2>/dev/null && break; sleep 0.1; done
curl -fsS -o /dev/null "http://127.0.0.1:$port/healthz" || fail "the gateway did not answer /healthz"
wrk -t1 -c4 -d2s -s "$BENCH_DIR/push.lua" "http://127.0.0.1:$port/" -- "warm-$RANDOM" >/dev/null
callgrind_control -z "$gw" >"$TMP/control.log" 2>&1 || fail "callgrind_control -z: $(cat "$TMP/control.log")"
wrk -t1 -c1 -d4s -s "$BENCH_DIR/push.lua" "http://127.0.0.1:$port/" -- "run-$RANDOM" >/dev/null
callgrind_control -d "$gw" >"$TMP/control.log" 2>&1 || fail "callgrind_control -d: $(cat "$TMP/control.log")"
sleep 1

# The functions of the gateway binary itself (not libc's, libstdc++'s or simdjson's, which the
# linker cannot move), by instructions, each as the section -ffunction-sections gave it. Some
# entries match no section and are ignored: `main` (GCC puts it in .text.startup) and
# tcmalloc's functions (Debian's static library has no section per function); callgrind's
# placeholders, "(below main)" and bare addresses, are left out.
binary=$(basename "$GATEWAY")
callgrind_annotate --threshold=100 "$TMP"/callgrind.*.1 >"$TMP/annotate.txt"
{ grep -F "[$GATEWAY]" "$TMP/annotate.txt" || true; } |
  sed -nE 's/^ *[0-9,]+ \([^)]*\) +[^:]*:(.*) \[.*$/\1/p' |
  { grep -v -e '^0x' -e '^(' || true; } | sed 's/^/.text./' >"$TMP/order"
[ -s "$TMP/order" ] || fail "callgrind named no function of $binary"
mv "$TMP/order" "$OUT"
echo "$(wc -l <"$OUT") functions of $binary written to ${OUT#"$ROOT"/}"
