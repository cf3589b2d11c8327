# shellcheck shell=bash
# bench/scratch.sh — sourced by the bench's scripts: a temporary directory, $TMP, and the
# background processes a script starts, appended to $PIDS; the processes are stopped and the
# directory removed when the script exits, however it exits.
TMP=$(mktemp -d)
PIDS=()
scratch_cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap scratch_cleanup EXIT
