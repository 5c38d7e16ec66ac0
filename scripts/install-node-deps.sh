#!/usr/bin/env bash
# Installs what tests/integration/e2e/test_decision.py needs to call tollgate's Envoy RLS listener
# with a real gRPC client, and what test_admin_ui.py needs to drive Chromium: Node.js and npm
# (Debian's packages, only when `node` or `npm` is missing), then @grpc/grpc-js,
# @grpc/proto-loader and playwright-core (no browser download: it drives Debian's `chromium`)
# into tests/integration/e2e/node/node_modules (git-ignored) from the committed package-lock.json.
# Idempotent: does nothing when node_modules is there and not older than package-lock.json.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$root/tests/integration/e2e/node"

sudo=""
[[ $(id -u) -ne 0 ]] && sudo="sudo"

missing=()
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "install-node-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# npm ci leaves node_modules/.package-lock.json behind: our stamp of a complete install.
stamp="$dir/node_modules/.package-lock.json"
if [[ -f $stamp && -f $dir/node_modules/@grpc/grpc-js/package.json &&
      -f $dir/node_modules/@grpc/proto-loader/package.json &&
      -f $dir/node_modules/playwright-core/package.json &&
      ! $dir/package-lock.json -nt $stamp ]]; then
  exit 0
fi
echo "install-node-deps: npm ci in tests/integration/e2e/node" >&2
# No install scripts: no package needs one to work (protobufjs's postinstall only checks its
# optional CLI; playwright-core has none and downloads no browser).
(cd "$dir" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
touch "$stamp"
