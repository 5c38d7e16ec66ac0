#!/usr/bin/env bash
# GATEWAY_CMD for ../shared/bench/run-all.sh: writes a tollgate config for the harness's
# variables and execs the gateway in the foreground (the harness stops it by its PID group).
#   BENCH_PORT BENCH_LIMIT_RPS BENCH_VARIANT BENCH_UPSTREAM_PORT BENCH_REDIS_PORT BENCH_WRK_KEYS
# TOLLGATE_LEASE: the bucket's lease (token leasing on Redis; 0, the default: exact).
# TOLLGATE_ADMIN_PORT: the admin listener's port (default: any free one).
# TOLLGATE_BIN (default build/tollgate), SANITY_KEY / SANITY_BURST_KEY (fixed by bench/gateway/run.sh).
# TOLLGATE_DECISION=1: the decision service answers on BENCH_PORT (200 or 429, no upstream), the
# proxy listens elsewhere: compare with nginx-limit-* (nginx answering itself).
# ROUTE_LIMITS_FOR=<binary path>: that binary (only) gets a route in front of every path with a
# limit of its own, of ROUTE_LIMIT_SCOPE (key, the default, or global), as large as the plan's:
# weighs what route limits cost (bench/gateway/paired.sh with B=<a copy of the same binary>).
set -euo pipefail
bin=${TOLLGATE_BIN:-build/tollgate}
dir=$(mktemp -d /tmp/tollgate-bench.XXXXXX)
keys=${BENCH_WRK_KEYS:-10000}
limit=${BENCH_LIMIT_RPS:-10000000}
{
  if [[ ${TOLLGATE_DECISION:-0} == 1 ]]; then
    echo "server: {listen: 127.0.0.1:0, admin_listen: 127.0.0.1:${TOLLGATE_ADMIN_PORT:-0}, threads: 1, access_log: false}"
    echo "decision: {listen: 127.0.0.1:${BENCH_PORT}, deny_status: 429}"
  else
    echo "server: {listen: 127.0.0.1:${BENCH_PORT}, admin_listen: 127.0.0.1:${TOLLGATE_ADMIN_PORT:-0}, threads: 1, access_log: false}"
  fi
  if [[ -n ${BENCH_UPSTREAM_PORT:-} ]]; then
    echo "upstream: {url: http://127.0.0.1:${BENCH_UPSTREAM_PORT}, max_connections: 256}"
  fi
  if [[ -n ${BENCH_REDIS_PORT:-} ]]; then
    echo "store: {type: redis, url: redis://127.0.0.1:${BENCH_REDIS_PORT}, prefix: bench, timeout_ms: ${TOLLGATE_REDIS_TIMEOUT_MS:-20}}"
  fi
  echo "identity: {api_key_headers: [X-API-Key]}"
  echo "plans:"
  echo "  bench:"
  lease=${TOLLGATE_LEASE:+, lease: $TOLLGATE_LEASE}  # absent unless set: older binaries refuse it
  echo "    limits: [{name: burst, capacity: ${limit}, refill_per_second: ${limit}${lease}}]"
  echo "keys:"
  echo "  - {key: hot-key-0001, id: hot, plan: bench}"
  echo "  - {key: ${SANITY_KEY:-sanity-1-1}, id: sanity, plan: bench}"
  echo "  - {key: ${SANITY_BURST_KEY:-sanity-burst}, id: sanity-burst, plan: bench}"
  for ((i = 1; i <= keys; i++)); do echo "  - {key: key-$i, id: k$i, plan: bench}"; done
  if [[ -n ${ROUTE_LIMITS_FOR:-} && $(realpath "$bin") == "$(realpath "$ROUTE_LIMITS_FOR")" ]]; then
    echo "routes:"
    echo "  - name: all"
    echo "    path: /*"
    echo "    limits: [{name: route, scope: ${ROUTE_LIMIT_SCOPE:-key}, capacity: ${limit}, refill_per_second: ${limit}}]"
  fi
} > "$dir/tollgate.yaml"
exec "$bin" serve --config "$dir/tollgate.yaml"
