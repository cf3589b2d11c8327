#!/usr/bin/env bash
# bench/peer/install.sh — installs the peer's Node.js packages exactly as package-lock.json pins
# them (`npm ci` into bench/peer/node_modules, which git ignores), unless that very lock file is
# already installed. Run by ./dev bench before it builds (after installing Debian's nodejs and npm
# if no node is there) and by bench/run.sh before the store part. Never part of ./dev test.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "bench/peer: node and npm are needed (./dev bench installs Debian's nodejs and npm)" >&2
  exit 1
fi
# @redis/client 6 declares Node.js >= 20; an older node would fail in the middle of the bench.
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
  echo "bench/peer: Node.js >= 20 is needed (@redis/client 6), found $(node --version)" >&2
  exit 1
fi
# npm ci empties node_modules first, so a stamp written after it marks a complete install.
stamp=node_modules/.installed-package-lock.json
if [ -f "$stamp" ] && cmp -s package-lock.json "$stamp"; then exit 0; fi
npm ci --no-audit --no-fund --loglevel=error >&2
cp package-lock.json "$stamp"
