#!/usr/bin/env bash
# Starts / stops a private Redis Cluster for the tests (a CTest fixture).
#
#   redis_cluster.sh start DIR   writes a redis+cluster:// URL naming every node to
#                                DIR/redis_cluster.url
#   redis_cluster.sh stop DIR    stops every node and removes their files; safe when none runs
#
# Six of Debian's redis-server with cluster-enabled yes on free 127.0.0.1 ports (client port
# and cluster bus port both probed: the default bus port, port + 10000, may be taken or out of
# range), bound to loopback only, each in its own directory under a temporary one under DIR
# (DIR/redis_cluster.dir names it for `stop`). `redis-cli --cluster create` makes them three
# masters with one replica each; start returns once every node reports cluster_state:ok and
# agrees on the slot map, and every replica is in sync with its master (diskless sync without
# the default 5 s delay). No persistence (save "", appendonly no): a test cluster lives for one
# run; shutdown-timeout 0: a stopping master does not wait for its replica. cluster-node-timeout
# is short (2 s) so a failover test promotes a replica quickly; each node's directory holds
# start.cmd, the shell command that started it, so such a test can restart the node it killed.
set -euo pipefail

die() { echo "redis_cluster.sh: $*" >&2; exit 1; }

cmd=${1:-}
dir=${2:-}
[[ -n "$cmd" && -n "$dir" ]] || die "usage: redis_cluster.sh start|stop DIR"
mkdir -p "$dir" || die "cannot create $dir"
dir=$(cd "$dir" && pwd)

server=${REDIS_SERVER:-/usr/bin/redis-server}
cli=${REDIS_CLI:-/usr/bin/redis-cli}
nodes=6

# shellcheck source=free_port.sh
. "$(dirname "$0")/free_port.sh"

# shellcheck source=stop_redis.sh
. "$(dirname "$0")/stop_redis.sh"

stop() {
  local state node
  state=$(cat "$dir/redis_cluster.dir" 2>/dev/null || true)
  if [[ -n "$state" && -d "$state" ]]; then
    # In parallel: a master told to stop would otherwise wait for its replica to catch up.
    for node in "$state"/node*; do [[ -d "$node" ]] && stop_redis "$node" & done
    wait
    rm -rf "$state"
  fi
  rm -f "$dir/redis_cluster.url" "$dir/redis_cluster.dir"
}

# start_node NODE_DIR: one cluster node on a fresh pair of free ports; prints its client port.
# Retries when a port was taken between the probe and the bind.
start_node() {
  local node=$1 port bus
  mkdir -p "$node"
  for _ in 1 2 3 4 5; do
    port=$(free_port) || die "no free port found"
    bus=$(free_port) || die "no free port found"
    [[ "$port" != "$bus" ]] || continue
    rm -f "$node/redis.pid" "$node/nodes.conf"
    : >"$node/redis.log"
    local args=(--port "$port" --cluster-port "$bus" --bind 127.0.0.1 --protected-mode yes
      --cluster-enabled yes --cluster-config-file "$node/nodes.conf"
      --cluster-node-timeout 2000 --shutdown-timeout 0 --repl-diskless-sync-delay 0
      --dir "$node" --daemonize yes --pidfile "$node/redis.pid" --logfile "$node/redis.log"
      --appendonly no --save "" --enable-debug-command local)
    # The node's own start command, for a test that kills a node and restarts it.
    printf '%q ' "$server" "${args[@]}" >"$node/start.cmd"
    "$server" "${args[@]}" >/dev/null 2>&1 ||
      die "redis-server failed to start: $(tail -n 1 "$node/redis.log" 2>/dev/null)"
    for _ in $(seq 1 100); do
      if [[ "$("$cli" -h 127.0.0.1 -p "$port" ping 2>/dev/null)" == PONG ]]; then
        echo "$port"
        return 0
      fi
      grep -q "Address already in use" "$node/redis.log" 2>/dev/null && break
      sleep 0.05
    done
    stop_redis "$node"
    grep -q "Address already in use" "$node/redis.log" 2>/dev/null || break
  done
  die "a cluster node did not answer PING: $(tail -n 1 "$node/redis.log" 2>/dev/null)"
}

# cluster_ready PORT...: every node says cluster_state:ok, every replica's link to its master
# is up (so WAIT can count it), and `--cluster check` finds all 16384 slots covered and every
# node agreeing about them.
cluster_ready() {
  local port info
  for port in "$@"; do
    "$cli" -h 127.0.0.1 -p "$port" cluster info 2>/dev/null | grep -q '^cluster_state:ok' ||
      return 1
    info=$("$cli" -h 127.0.0.1 -p "$port" info replication 2>/dev/null) || return 1
    if grep -q '^role:slave' <<<"$info"; then
      grep -q '^master_link_status:up' <<<"$info" || return 1
    fi
  done
  "$cli" --cluster check "127.0.0.1:$1" >/dev/null 2>&1
}

start() {
  stop  # a leftover from an interrupted run
  [[ -x "$server" ]] || die "$server not found (install Debian's redis-server package)"
  [[ -x "$cli" ]] || die "$cli not found (install Debian's redis-tools package)"
  local state i ports=() addrs=()
  state=$(mktemp -d "$dir/redis_cluster.XXXXXX") || die "cannot create a directory under $dir"
  printf '%s\n' "$state" >"$dir/redis_cluster.dir"
  for i in $(seq 1 "$nodes"); do
    ports+=("$(start_node "$state/node$i")") || { stop; die "cannot start node $i"; }
    addrs+=("127.0.0.1:${ports[-1]}")
  done
  if ! "$cli" --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes \
      >"$state/create.log" 2>&1; then
    local reason
    reason=$(tail -n 1 "$state/create.log")
    stop
    die "redis-cli --cluster create failed: $reason"
  fi
  for _ in $(seq 1 300); do
    if cluster_ready "${ports[@]}"; then
      local IFS=,
      printf 'redis+cluster://%s\n' "${addrs[*]}" >"$dir/redis_cluster.url"
      exit 0
    fi
    sleep 0.1
  done
  stop
  die "the cluster did not reach cluster_state:ok on every node in 30 s"
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  *) die "unknown command '$cmd' (start|stop)" ;;
esac
