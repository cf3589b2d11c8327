#!/usr/bin/env bash
# bench/push_path.sh [--json] [--data-bytes N] [--as-pubsub] GATEWAY_BINARY [REQUESTS] — the
# instructions a proxied push costs on the round trip's critical path and after it, for the
# gateway on memory:// and for nginx `proxy_pass`, both in front of the same nginx `return 200`.
#
# At one connection a push waits on every instruction run between a wake-up and the write that
# passes the request on (to the upstream, then back to the client); what runs after a write,
# before the next wait, overlaps the other side's work. Each proxy runs under valgrind's
# callgrind, which starts a new profile part before every write (send, sendmsg, writev) and
# every epoll_wait; a part that ends at a write is on the path, one that ends at epoll_wait is
# after it. REQUESTS (default 100) pushes with fresh messageIds go one at a time over one
# keep-alive connection after 300 unrecorded ones. Counts are exact and repeatable, unlike the
# time they take on a shared VM (BENCHMARKS.md, "The push's path, in instructions"). With
# --json, one JSON record per line instead of the tables (bench/run.sh's throughput part). Each
# push's message carries 12 bytes of data ({"order":42}), or with --data-bytes N, N bytes (as
# 4N/3 of base64): what a proxy's cost grows with, the envelope's size. With --as-pubsub each
# push also comes as Pub/Sub sends one: its OIDC token (1 KiB) and Google's eight other
# headers, and five attributes (a Cloud Storage notification's).
# Needs nginx, valgrind, python3 (`./dev bench` installs them).
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$BENCH_DIR")
usage() {
  sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}
JSON=0
DATA_BYTES=12
AS_PUBSUB=0
while [[ "${1:-}" == --* ]]; do
  case $1 in
    --json) JSON=1 ;;
    --data-bytes)
      [[ "${2:-}" =~ ^[0-9]+$ ]] || { echo "push_path: --data-bytes takes a number of bytes" >&2; exit 2; }
      DATA_BYTES=$2
      shift
      ;;
    --as-pubsub) AS_PUBSUB=1 ;;
    *) usage ;;
  esac
  shift
done
export DATA_BYTES AS_PUBSUB
[ $# -ge 1 ] && [ $# -le 2 ] || usage
GATEWAY=$(realpath "$1")
REQUESTS=${2:-100}
for tool in valgrind callgrind_annotate nginx python3; do
  command -v "$tool" >/dev/null || { echo "push_path: $tool is missing (./dev bench installs it)" >&2; exit 1; }
done
WARM=300
# shellcheck source=scratch.sh
. "$BENCH_DIR/scratch.sh"
fail() {
  echo "push_path: $1" >&2
  [ -n "${2:-}" ] && [ -f "$2" ] && tail -n 20 "$2" >&2
  exit 1
}

# shellcheck source=../tests/support/servers/free_port.sh
. "$ROOT/tests/support/servers/free_port.sh"

# shellcheck source=nginx.sh
. "$BENCH_DIR/nginx.sh"

# The upstream and the peer as bench/run.sh runs them; the peer without a master process
# (nginx -g), so that the process callgrind profiles is the worker that proxies.
up=$(free_port)
nginx_config "$TMP/up" "$up" 1 "$UPSTREAM_LOCATION"
nginx -p "$TMP/up/" -c "$TMP/up/nginx.conf" -e "$TMP/up/error.log" >/dev/null 2>&1 &
PIDS+=($!)
peer=$(free_port)
nginx_config "$TMP/peer" "$peer" 1 "$PEER_LOCATION" "$(peer_upstream "$up")"

gateway=$(free_port)
writes="--dump-before=send --dump-before=sendmsg --dump-before=writev"
# profile NAME COMMAND...: runs COMMAND under callgrind, parts in $TMP/NAME/.
profile() {
  local name=$1
  shift
  mkdir -p "$TMP/$name/parts"
  # shellcheck disable=SC2086  # $writes is a list of options
  valgrind --tool=callgrind --demangle=no $writes --dump-before=epoll_wait \
    --callgrind-out-file="$TMP/$name/parts/cg" "$@" >"$TMP/$name/log" 2>&1 &
  PIDS+=($!)
}
profile peer nginx -g "master_process off;" -p "$TMP/peer/" -c "$TMP/peer/nginx.conf" \
  -e "$TMP/peer/error.log"
profile gateway "$GATEWAY" --upstream "http://127.0.0.1:$up" --backend memory:// \
  --listen "127.0.0.1:$gateway"

# push PORT COUNT TAG: COUNT pushes, one at a time, over one connection; each must get a 2xx.
push() {
  python3 - "$@" <<'EOF'
import socket, sys, time
port, count, tag = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
import base64, os
size = int(os.environ["DATA_BYTES"])
data = ("eyJvcmRlciI6NDJ9" if size == 12  # {"order":42}
        else base64.b64encode(bytes(i % 251 for i in range(size))).decode())
attributes, headers = "{}", b""
if os.environ["AS_PUBSUB"] == "1":
    # A Cloud Storage notification's attributes, and the headers a push request carries (the
    # token is the size of Google's: a 2048-bit RS256 signature and Pub/Sub's claims).
    attributes = ('{"bucketId":"my-bucket","eventTime":"2026-12-05T06:00:00.000000Z",'
                  '"eventType":"OBJECT_FINALIZE","notificationConfig":'
                  '"projects/_/buckets/my-bucket/notificationConfigs/1",'
                  '"objectId":"images/2026/12/05/cat.png"}')
    token = ("eyJhbGciOiJSUzI1NiIsImtpZCI6ImE1MGY2ZTcwZWY0YjU0OGE1ZmQ5MTQyZWVjZDFmYjhmNTRkY2U5ZWUiLCJ0eXAiOiJKV1QifQ."
             + base64.urlsafe_b64encode(bytes(i % 253 for i in range(520))).decode().rstrip("=")
             + "." + base64.urlsafe_b64encode(bytes(i % 241 for i in range(256))).decode().rstrip("="))
    headers = ("Authorization: Bearer " + token + "\r\n"
               "User-Agent: APIs-Google; (+https://developers.google.com/webmasters/APIs-Google.html)\r\n"
               "From: noreply@google.com\r\nAccept-Encoding: gzip, deflate, br\r\n"
               "X-Cloud-Trace-Context: 105445aa7843bc8bf206b12000100000/1;o=1\r\n"
               "Traceparent: 00-105445aa7843bc8bf206b12000100000-0000000000000001-01\r\n"
               "Forwarded: for=\"35.187.132.1\";proto=https\r\n"
               "X-Forwarded-For: 35.187.132.1\r\nX-Forwarded-Proto: https\r\n").encode()
s = socket.create_connection(("127.0.0.1", port), timeout=30)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for i in range(count):
    body = ('{"message":{"messageId":"%s-%d","data":"%s","attributes":%s},'
            '"subscription":"projects/p/subscriptions/s","deliveryAttempt":1}'
            % (tag, i, data, attributes)).encode()
    s.sendall(b"POST / HTTP/1.1\r\nHost: push\r\nContent-Type: application/json\r\n" + headers
              + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(4096)
        if not chunk: sys.exit("push_path: the connection closed")
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 2"): sys.exit("push_path: " + head.split(b"\r\n")[0].decode())
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length": length = int(value)
    while len(rest) < length:
        chunk = s.recv(4096)
        if not chunk: sys.exit("push_path: the connection closed in a body")
        rest += chunk
    time.sleep(0.002)  # the proxy back in epoll_wait: each push starts from a wait
EOF
}

# measure NAME PORT: prints "NAME REQUESTS TO_UPSTREAM TO_CLIENT ON_PATH AFTER" (instructions a
# push), and for the gateway writes its guarding steps to $TMP/steps; the parts of
# the measured pushes are those dumped after the warm-up's.
measure() {
  local name=$1 port=$2 ready=0
  for _ in $(seq 600); do
    if push "$port" 1 "probe-$RANDOM" 2>/dev/null; then ready=1; break; fi
    sleep 0.1
  done
  [ $ready -eq 1 ] || fail "$name did not answer a push" "$TMP/$name/log"
  push "$port" "$WARM" "warm-$RANDOM-$name" || fail "$name: the warm-up failed" "$TMP/$name/log"
  sleep 0.5
  local before
  before=$(find "$TMP/$name/parts" -name 'cg.*' | wc -l)
  push "$port" "$REQUESTS" "run-$RANDOM-$name" || fail "$name: a push failed" "$TMP/$name/log"
  sleep 0.5
  python3 - "$TMP/$name/parts" "$before" "$REQUESTS" "$name" "$TMP/steps" <<'EOF'
import os, re, subprocess, sys
folder, before, requests, name, steps_out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    sys.argv[4], sys.argv[5]
parts = []  # (number, trigger, instructions, file) of each part after the warm-up's
for f in os.listdir(folder):
    m = re.fullmatch(r"cg(?:\.\d+)?\.(\d+)", f)
    if not m or int(m.group(1)) <= before: continue  # the parts are numbered from 1
    text = open(os.path.join(folder, f), errors="replace").read(4096)
    trigger = re.search(r"Trigger: --dump-before=(\w+)", text)
    total = re.search(r"^summary: (\d+)", text, re.M)
    if trigger and total: parts.append((int(m.group(1)), trigger.group(1), int(total.group(1)), f))
parts.sort()
writes = [p for p in parts if p[1] != "epoll_wait"]
after = [p[2] for p in parts if p[1] == "epoll_wait"]
if len(writes) < 2 * requests: sys.exit(f"push_path: {name}: {len(writes)} writes for {requests} pushes")
# The writes alternate: the request passed on (to the upstream), the answer passed back.
legs = writes[: 2 * requests]
# Two waits a push (one after each write), and a few for timers. Asio also calls epoll_wait
# without blocking when handlers are queued: had that split a push's path, its first part would
# count as "after", so more waits than that are refused rather than read as a shorter path.
waits = len(after) / requests
if waits > 2.5: sys.exit(f"push_path: {name}: {waits:.1f} epoll_wait parts a push, not 2: the path may be split")
print(name, requests, sum(p[2] for p in legs[0::2]) / requests,
      sum(p[2] for p in legs[1::2]) / requests, sum(p[2] for p in writes) / requests,
      sum(after) / requests)
if name != "gateway": sys.exit(0)

# What guarding the push costs the gateway: each step's inclusive instructions in a leg's part
# (on the path) and in the part after that leg's write, up to the next epoll_wait (after it:
# the complete, for one, runs once the answer has gone), averaged over the first 20 pushes.
steps = [  # (leg, what, the function whose inclusive count is the step's)
    (0, "the envelope parsed and checked", "idempotency::pubsub::internal::parse_push_into("),
    (0, "this process's flight for the key begun", "idempotency::detail::begin_async_flight("),
    (0, "the claim", "idempotency::LockBackend::claim("),
    (0, "the lease keeper started", "idempotency::detail::LeaseKeeper::LeaseKeeper("),
    (1, "the lease keeper stopped", "idempotency::detail::LeaseKeeper::stop("),
    (1, "the complete", "idempotency::LockBackend::complete("),
    (1, "the flight settled", "idempotency::detail::AsyncFlight::settle("),
    (1, "the outcome judged and counted", "idempotency::pubsub::detail::Wrapper::settled("),
]
def inclusive(file):
    mangled = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100",
                              os.path.join(folder, file)], capture_output=True, text=True).stdout
    return subprocess.run(["c++filt"], input=mangled, capture_output=True, text=True).stdout
def count(out, fn):
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \(.*?\)\s+\S*?:" + re.escape(fn), line)
        if m: return int(m.group(1).replace(",", ""))
    return 0
sample = legs[:40]
on_path, after_write = [0] * len(steps), [0] * len(steps)
for i, part in enumerate(sample):
    # The part that follows this write: the work after it, if it ends at an epoll_wait.
    following = next((p for p in parts if p[0] > part[0]), None)
    path_out = inclusive(part[3])
    after_out = inclusive(following[3]) if following and following[1] == "epoll_wait" else ""
    for j, (leg, _, fn) in enumerate(steps):
        if leg != i % 2: continue
        on_path[j] += count(path_out, fn)
        after_write[j] += count(after_out, fn)
with open(steps_out, "w") as f:
    pushes = len(sample) // 2
    for (leg, what, _), path, after in zip(steps, on_path, after_write):
        f.write(f"{leg}|{what}|{path / pushes:.0f}|{after / pushes:.0f}\n")
EOF
}

peer_line=$(measure peer "$peer")
gateway_line=$(measure gateway "$gateway")

if [ $JSON -eq 1 ]; then
  for line in "$peer_line" "$gateway_line"; do
    read -r name requests request answer path after <<<"$line"
    printf '{"kind":"push_path","proxy":"%s","data_bytes":%d,"as_pubsub":%s,"requests":%d,"to_upstream":%.0f,"to_client":%.0f,"on_path":%.0f,"after":%.0f}\n' \
      "$name" "$DATA_BYTES" "$([ $AS_PUBSUB = 1 ] && echo true || echo false)" "$requests" "$request" "$answer" "$path" "$after"
  done
  while IFS='|' read -r leg what count after; do
    printf '{"kind":"push_path_step","data_bytes":%d,"as_pubsub":%s,"leg":%d,"what":"%s","instructions":%.0f,"after_write":%.0f}\n' \
      "$DATA_BYTES" "$([ $AS_PUBSUB = 1 ] && echo true || echo false)" "$leg" "$what" "$count" "$after"
  done <"$TMP/steps"
  exit 0
fi

echo "| proxy (instructions per push, $REQUESTS pushes, one connection, $DATA_BYTES bytes of data$([ $AS_PUBSUB = 1 ] && echo ", as Pub/Sub sends it")) | wake → request to the upstream | upstream's answer → answer to the client | on the path | after the writes | total |"
echo "|---|---:|---:|---:|---:|---:|"
for line in "$peer_line" "$gateway_line"; do
  read -r name _ request answer path after <<<"$line"
  label="nginx proxy_pass (1 worker)"
  [ "$name" = gateway ] && label="gateway memory://"
  awk -v l="$label" -v a="$request" -v b="$answer" -v p="$path" -v o="$after" \
    'BEGIN { printf "| %s | %.1fk | %.1fk | %.1fk | %.1fk | %.1fk |\n", l, a/1e3, b/1e3, p/1e3, o/1e3, (p+o)/1e3 }'
done
echo
echo "| what guarding the push costs the gateway (instructions per push) | leg | on the path | after the leg's write |"
echo "|---|---|---:|---:|"
while IFS='|' read -r leg what count after; do
  where="wake → upstream"
  [ "$leg" = 1 ] && where="upstream → client"
  awk -v w="$what" -v l="$where" -v c="$count" -v a="$after" \
    'BEGIN { printf "| %s | %s | %.1fk | %.1fk |\n", w, l, c / 1e3, a / 1e3 }'
done <"$TMP/steps"
awk -F'|' '{ s += $3; a += $4 } END { printf "| all of the above | both | %.1fk | %.1fk |\n", s / 1e3, a / 1e3 }' "$TMP/steps"
