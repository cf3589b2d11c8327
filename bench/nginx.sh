# shellcheck shell=bash
# bench/nginx.sh — sourced by the bench's scripts: the nginx they measure against, configured in
# one place, so the upstream and the peer are the same wherever they run.
#
# nginx_config DIR PORT WORKERS SERVER_BODY [HTTP_EXTRA]: writes DIR/nginx.conf for nginx in the
# foreground (daemon off, so that $! is the master), listening on 127.0.0.1:PORT, with its
# temporary paths under DIR.
nginx_config() {
  local dir=$1 port=$2 workers=$3 server_body=$4 http_extra=${5:-}
  mkdir -p "$dir"
  # Workers run as root when we are root (the default 'nobody' may not read $TMP); an
  # unprivileged nginx cannot switch user, so the directive is left out then.
  local user=""
  [ "$(id -u)" -eq 0 ] && user="user root;"
  cat >"$dir/nginx.conf" <<CONF
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
  # Raised so that the upstream never closes a proxy's or wrk's connection during a run (the
  # default is 1000); the peer sets its own, the gateway's, for its clients (PEER_LOCATION).
  keepalive_requests 1000000;
  keepalive_timeout 75s;
$http_extra
  server {
    listen 127.0.0.1:$port;
$server_body
  }
}
CONF
}

# The app stand-in: `return 200` with an empty body.
# shellcheck disable=SC2034  # used by the scripts that source this file
UPSTREAM_LOCATION="    location / { return 200; }"

# The peer: nginx as a reverse proxy, set up as an operator would: pooled keep-alive connections
# to the upstream (HTTP/1.1, no Connection: close). PEER_LOCATION is its server body,
# `peer_upstream UPSTREAM_PORT` its http block's addition. A client connection is closed after
# 1000 requests, nginx's default and the gateway's (`keep_alive_max_requests`), so that wrk
# reconnects as often through either.
# shellcheck disable=SC2034  # used by the scripts that source this file
PEER_LOCATION="    keepalive_requests 1000;
    location / {
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
    }"
peer_upstream() {
  printf '  upstream app {\n    server 127.0.0.1:%s;\n    keepalive 64;\n    keepalive_requests 1000000;\n  }' "$1"
}
