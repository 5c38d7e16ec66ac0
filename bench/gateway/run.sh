#!/usr/bin/env bash
# tollgate beside nginx limit_req (and Fastify/Redis) in ../shared/bench, side by side in one
# run. Usage: bench/gateway/run.sh [memory|redis|decision|redis-decision]   (results: see the
# printed OUT_DIR). memory: the proxy beside nginx proxying to the same upstream; decision: the
# decision service beside nginx answering by itself; redis: the proxy on Redis beside Fastify on
# Redis; redis-decision: the decision service on Redis beside Fastify, both answering by
# themselves (the like-for-like pairing of ../shared/bench/README.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
mode=${1:-memory}
export TOLLGATE_BIN=${TOLLGATE_BIN:-$PWD/build/tollgate}
export SANITY_KEY=sanity-1-1 SANITY_BURST_KEY=sanity-burst
export GATEWAY_NAME=tollgate GATEWAY_CMD="$PWD/bench/gateway/tollgate-target.sh"
export GATEWAY_UPSTREAM=1
export OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/tollgate-bench-out.XXXXXX)}
if [[ $mode == decision ]]; then
  export TOLLGATE_DECISION=1 GATEWAY_UPSTREAM=0
  export TARGETS=${TARGETS:-"nginx-limit-high tollgate-high nginx-limit-low tollgate-low"}
elif [[ $mode == redis-decision ]]; then
  export TOLLGATE_DECISION=1 GATEWAY_UPSTREAM=0 GATEWAY_REDIS=1
  export TARGETS=${TARGETS:-"fastify-redis tollgate-high fastify-redis-low tollgate-low"}
elif [[ $mode == redis ]]; then
  export GATEWAY_REDIS=1
  export TARGETS=${TARGETS:-"fastify-redis tollgate-high fastify-redis-low tollgate-low"}
else
  export TARGETS=${TARGETS:-"nginx-proxy nginx-proxy-limit-high tollgate-high nginx-proxy-limit-low tollgate-low"}
fi
export REPS=${REPS:-2} REDIS_BENCH=${REDIS_BENCH:-0}
../shared/bench/setup.sh >/dev/null
exec ../shared/bench/run-all.sh
