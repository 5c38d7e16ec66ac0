#!/usr/bin/env bash
# `make run`: the gateway on its embedded defaults (in-memory store, examples/tollgate.yaml)
# in front of a small demo upstream on 127.0.0.1:8081. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
CONFIG=${CONFIG:-examples/tollgate.yaml}

python3 tests/support/upstream.py --port 8081 &
upstream=$!
trap 'kill "$upstream" 2>/dev/null; wait "$upstream" 2>/dev/null || true' EXIT

cat >&2 <<'TXT'
tollgate is starting on http://127.0.0.1:8080 (admin on 127.0.0.1:9090). Try:
  curl -i -H 'Authorization: Bearer demo-free-key' http://127.0.0.1:8080/hello
  for i in $(seq 25); do curl -s -o /dev/null -w '%{http_code} ' -H 'X-API-Key: demo-free-key' http://127.0.0.1:8080/hello; done; echo
  curl -s -H 'X-API-Key: demo-free-key' http://127.0.0.1:8080/v1/rate-limit
TXT
"$BUILD/tollgate" serve --config "$CONFIG" &
gateway=$!
trap 'kill "$gateway" "$upstream" 2>/dev/null; wait "$gateway" "$upstream" 2>/dev/null || true' EXIT INT TERM
wait "$gateway"
