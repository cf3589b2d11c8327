#!/usr/bin/env bash
# Starts / stops a private Redis Cluster for the tests (a CTest fixture).
#
#   redis_cluster.sh start DIR       writes a redis+cluster:// URL naming every node to
#                                    DIR/redis_cluster.url
#   redis_cluster.sh start DIR tls   a second, TLS cluster: writes a rediss+cluster:// URL
#                                    naming every node's TLS port to DIR/redis_cluster_tls.url
#   redis_cluster.sh stop DIR [tls]  stops every node and removes their files; safe when none runs
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
# The TLS cluster is three masters without replicas that require a password (generated per run,
# in the URL), as Memorystore's TLS + AUTH do, each also on a TLS port (test certificates from
# test_certs.sh) with the cluster bus and replication over TLS too: that is what makes a node
# announce its TLS port to TLS clients. It is a cluster of its own because a TLS bus also makes
# MIGRATE speak TLS, so slots could no longer be moved over the plain ports the other tests use.
set -euo pipefail

die() { echo "redis_cluster.sh: $*" >&2; exit 1; }

cmd=${1:-}
dir=${2:-}
tls=${3:-}
[[ -n "$cmd" && -n "$dir" && ( -z "$tls" || "$tls" == tls ) ]] ||
  die "usage: redis_cluster.sh start|stop DIR [tls]"
mkdir -p "$dir" || die "cannot create $dir"
dir=$(cd "$dir" && pwd)

server=${REDIS_SERVER:-/usr/bin/redis-server}
cli=${REDIS_CLI:-/usr/bin/redis-cli}
name=redis_cluster${tls:+_tls}
nodes=6 replicas=1
[[ -n "$tls" ]] && nodes=3 replicas=0

# shellcheck source=free_port.sh
. "$(dirname "$0")/free_port.sh"

# shellcheck source=stop_redis.sh
. "$(dirname "$0")/stop_redis.sh"

# shellcheck source=test_certs.sh
. "$(dirname "$0")/test_certs.sh"

stop() {
  local state node
  state=$(cat "$dir/$name.dir" 2>/dev/null || true)
  if [[ -n "$state" && -d "$state" ]]; then
    # In parallel: a master told to stop would otherwise wait for its replica to catch up.
    for node in "$state"/node*; do [[ -d "$node" ]] && stop_redis "$node" & done
    wait
    rm -rf "$state"
  fi
  rm -f "$dir/$name.url" "$dir/$name.dir"
}

# start_node NODE_DIR [TLS_DIR]: one cluster node on fresh free ports (client, bus, and with
# TLS_DIR a TLS port serving its certificates); prints its client port and its TLS port (or 0).
# Retries when a port was taken between the probe and the bind.
start_node() {
  local node=$1 certs=${2:-} port tls_port=0 bus
  mkdir -p "$node"
  for _ in 1 2 3 4 5; do
    port=$(free_port) || die "no free port found"
    [[ -z "$certs" ]] || tls_port=$(free_port) || die "no free port found"
    bus=$(free_port) || die "no free port found"
    [[ "$port" != "$bus" && "$port" != "$tls_port" && "$tls_port" != "$bus" ]] || continue
    rm -f "$node/redis.pid" "$node/nodes.conf"
    : >"$node/redis.log"
    local args=(--port "$port" --cluster-port "$bus" --bind 127.0.0.1 --protected-mode yes
      --cluster-enabled yes --cluster-config-file "$node/nodes.conf"
      --cluster-node-timeout 2000 --shutdown-timeout 0 --repl-diskless-sync-delay 0
      --dir "$node" --daemonize yes --pidfile "$node/redis.pid" --logfile "$node/redis.log"
      --appendonly no --save "" --enable-debug-command local)
    # The bus's TLS needs a client certificate too: without it `--cluster create` waits forever.
    [[ -z "$certs" ]] || args+=(--requirepass "$REDISCLI_AUTH"
      --tls-port "$tls_port" --tls-cert-file "$certs/server.crt"
      --tls-key-file "$certs/server.key" --tls-ca-cert-file "$certs/ca.crt" --tls-auth-clients no --tls-cluster yes --tls-replication yes
      --tls-client-cert-file "$certs/client.crt" --tls-client-key-file "$certs/client.key")
    # The node's own start command, for a test that kills a node and restarts it.
    printf '%q ' "$server" "${args[@]}" >"$node/start.cmd"
    "$server" "${args[@]}" >/dev/null 2>&1 ||
      die "redis-server failed to start: $(tail -n 1 "$node/redis.log" 2>/dev/null)"
    for _ in $(seq 1 100); do
      if [[ "$("$cli" -h 127.0.0.1 -p "$port" ping 2>/dev/null)" == PONG ]]; then
        echo "$port $tls_port"
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
  local state i pair certs="" ports=() addrs=() create=()
  state=$(mktemp -d "$dir/$name.XXXXXX") || die "cannot create a directory under $dir"
  printf '%s\n' "$state" >"$dir/$name.dir"
  if [[ -n "$tls" ]]; then
    certs=$state/tls
    make_test_certs "$certs" idempotency-test-client
    # redis-cli authenticates every call below with it.
    REDISCLI_AUTH=$("${OPENSSL:-openssl}" rand -hex 16) || die "openssl rand failed"
    export REDISCLI_AUTH
    # With a TLS bus the address a node is met at must be its TLS port.
    create=(--tls --cacert "$certs/ca.crt" --sni localhost)
  fi
  for i in $(seq 1 "$nodes"); do
    pair=$(start_node "$state/node$i" "$certs") || { stop; die "cannot start node $i"; }
    ports+=("${pair% *}")
    if [[ -n "$tls" ]]; then addrs+=("127.0.0.1:${pair#* }"); else addrs+=("127.0.0.1:${pair% *}"); fi
  done
  if ! "$cli" "${create[@]}" --cluster create "${addrs[@]}" --cluster-replicas "$replicas" \
      --cluster-yes >"$state/create.log" 2>&1; then
    local reason
    reason=$(tail -n 1 "$state/create.log")
    stop
    die "redis-cli --cluster create failed: $reason"
  fi
  for _ in $(seq 1 300); do
    if cluster_ready "${ports[@]}"; then
      local IFS=,
      if [[ -n "$tls" ]]; then
        printf 'rediss+cluster://:%s@%s?ca=%s&sni=localhost\n' "$REDISCLI_AUTH" "${addrs[*]}" \
          "$(url_path "$certs/ca.crt")" >"$dir/$name.url"
      else
        printf 'redis+cluster://%s\n' "${addrs[*]}" >"$dir/$name.url"
      fi
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
