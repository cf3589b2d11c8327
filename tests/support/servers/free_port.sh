# free_port: prints a free TCP port on 127.0.0.1 (sourced by the server scripts).
free_port() {
  python3 - <<'PY' 2>/dev/null && return
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
PY
  # No python: probe random high ports with bash's /dev/tcp.
  local port
  for _ in $(seq 1 50); do
    port=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then echo "$port"; return; fi
  done
  return 1
}
