#!/usr/bin/env bash
# bench/script_weight.sh [CALLS] — what the Redis script costs the server, in instructions.
#
# Time per call is what the store part measures, but on a shared 2-core VM it moves by ±30%
# from one run to the next; the instructions redis-server executes per call do not. Each case
# runs CALLS commands (5000) through `redis-cli --pipe` into a fresh redis-server (no
# persistence) under valgrind's callgrind, and the count of a server that only started and
# stopped is taken off (5000 calls read within 1.1 % of 20,000 in every case, in a quarter of
# the time). One JSON line per case on stdout:
#   noop        EVALSHA of `return 1` with a claim's arguments: what any script call costs
#   setnx       SET key token NX PX: the least a claim can be, without a script
#   minimal     EVALSHA of the least a claim of our record can be: TIME, HGETALL, one HSET of
#               the five fields, PEXPIREAT, a reply of three values
#   claim       EVALSHA of src/backends/redis/redis_script.lua: a claim of a fresh key
#   complete    the same script: complete of each key just claimed (fence 1)
#   fresh       what a claim sends first on Redis 7 instead of the script (a fresh key's whole
#               claim): SET NX PX GET of the record's fresh form, then PEXPIRETIME (its lease)
#   fresh_complete  the script's complete of each such fresh record (its short path)
#   fresh_complete_many  the same completes joined 16 to a call (complete_many), as
#               complete_async sends those queued for one write: the instructions per key
#   held        a claim of a key that `fresh` claimed, by another token, after a claim that met
#               a holder: the same SET NX PX GET (which writes nothing) and PEXPIRETIME, and TIME
#   held_script the script's claim of such a key (what a held key cost before `held`)
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
SCRIPT=${REDIS_SCRIPT:-$(dirname "$BENCH_DIR")/src/backends/redis/redis_script.lua}
CALLS=${1:-5000}
command -v valgrind >/dev/null || { echo "script_weight: valgrind is missing (apt-get install valgrind)" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# shellcheck source=../tests/support/servers/free_port.sh
. "$(dirname "$BENCH_DIR")/tests/support/servers/free_port.sh"

cat >"$TMP/noop.lua" <<'EOF'
return 1
EOF
cat >"$TMP/minimal.lua" <<'EOF'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HGETALL', KEYS[1])
local e = string.format('%d', now + 60000)
redis.call('HSET', KEYS[1], 'state', 'CLAIMED', 'fence', '1', 'lease_expiry', e,
           'expires_at', e, 'claim_token', ARGV[3])
redis.call('PEXPIREAT', KEYS[1], e)
return {'won', 1, now + 60000}
EOF

# commands KIND SHA: CALLS commands in RESP, for redis-cli --pipe.
commands() {
  python3 - "$1" "$2" "$CALLS" <<'EOF'
import sys
kind, sha, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)
token = "0123456789abcdef0123456789abcdef"
w = sys.stdout.buffer
for i in range(n):
    key = "idempotency:w-%d" % i
    if kind == "setnx":
        w.write(resp("SET", key, token, "NX", "PX", "60000"))
    elif kind == "fresh":
        w.write(resp("SET", key, "F 3600000 %d -1\n%s" % (len(token), token), "NX", "PX", "3660000",
                     "GET"))
        w.write(resp("PEXPIRETIME", key))
    elif kind == "held":
        w.write(resp("SET", key, "F 3600000 5 -1\nother", "NX", "PX", "3660000", "GET"))
        w.write(resp("PEXPIRETIME", key))
        w.write(resp("TIME"))
    elif kind == "complete":
        w.write(resp("EVALSHA", sha, "1", key, "complete", "", "1", "3600000", "-"))
    elif kind == "complete_many":
        if i % 16 == 15:
            keys = ["idempotency:w-%d" % j for j in range(i - 15, i + 1)]
            w.write(resp("EVALSHA", sha, "16", *keys, "complete_many", "3600000", *(["-"] * 16)))
    elif kind != "none":
        w.write(resp("EVALSHA", sha, "1", key, "claim", "", token, "60000", "3600000", "-"))
EOF
}

# instructions SCRIPT KIND...: redis-server's instruction count over one run of each KIND's
# commands, the script loaded first (for the `none` baseline: nothing sent).
instructions() {
  local script=$1 port dir pid sha kind
  shift
  port=$(free_port)
  dir=$(mktemp -d -p "$TMP")
  valgrind --tool=callgrind --callgrind-out-file="$dir/out" redis-server --bind 127.0.0.1 \
    --port "$port" --save "" --appendonly no --dir "$dir" >"$dir/log" 2>&1 &
  pid=$!
  for _ in $(seq 300); do redis-cli -p "$port" PING >/dev/null 2>&1 && break; sleep 0.1; done
  sha=$(redis-cli -p "$port" SCRIPT LOAD "$(cat "$script")")
  for kind in "$@"; do
    commands "$kind" "$sha" | redis-cli -p "$port" --pipe >"$dir/pipe.log" ||
      { cat "$dir/pipe.log" >&2; exit 1; }
    grep -q "errors: 0," "$dir/pipe.log" || { cat "$dir/pipe.log" >&2; exit 1; }
  done
  redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
  wait "$pid" || true
  sed -n 's/^summary: //p; s/^totals: //p' "$dir/out" | head -n 1
}

base=$(instructions "$TMP/noop.lua" none)
emit() { # emit CASE TOTAL [BEFORE]: the case's instructions per call above BEFORE (the baseline)
  local before=${3:-$base}
  echo "{\"kind\":\"script_weight\",\"case\":\"$1\",\"instructions_per_call\":$((($2 - before) / CALLS)),\"calls\":$CALLS,\"tool\":\"valgrind --tool=callgrind redis-server, redis-cli --pipe\"}"
}
emit noop "$(instructions "$TMP/noop.lua" claim)"
emit setnx "$(instructions "$TMP/noop.lua" setnx)"
emit minimal "$(instructions "$TMP/minimal.lua" claim)"
claimed=$(instructions "$SCRIPT" claim)
emit claim "$claimed"
emit complete "$(instructions "$SCRIPT" claim complete)" "$claimed"
fresh=$(instructions "$SCRIPT" fresh)
emit fresh "$fresh"
emit fresh_complete "$(instructions "$SCRIPT" fresh complete)" "$fresh"
emit fresh_complete_many "$(instructions "$SCRIPT" fresh complete_many)" "$fresh"
emit held "$(instructions "$SCRIPT" fresh held)" "$fresh"
emit held_script "$(instructions "$SCRIPT" fresh claim)" "$fresh"
