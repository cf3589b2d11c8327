# shellcheck shell=bash
# bench/scratch.sh — sourced by the bench's scripts: a temporary directory, $TMP, and the
# background processes a script starts, appended to $PIDS; when the script exits, however it
# exits, the processes are stopped (SIGTERM, then SIGKILL after 5 s: a server draining under
# valgrind must not hold the exit) and the directory is removed.
TMP=$(mktemp -d)
PIDS=()
scratch_cleanup() {
  # Only the main shell: a $(...) subshell that exits must not stop the main shell's processes.
  [ "$BASHPID" = "$$" ] || return 0
  local p i
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for ((i = 0; i < 50; i++)); do
    kill -0 "${PIDS[@]}" 2>/dev/null || break  # true while any one is alive
    sleep 0.1
  done
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap scratch_cleanup EXIT
