#!/usr/bin/env bash
# RedisStore on a 3-master Redis Cluster: decisions per second and p99 with random keys (their
# slots spread over the three masters), each binary in turn, interleaved. The three
# redis-servers share CPU 1; redis_store_bench runs on CPU 0.
#   bench/redis/cluster.sh [bench binary...]   (default build/bench/redis_store_bench)
# Knobs: KEYS (100000), CONCURRENCY (50), DURATION (4), ROUNDS (2), PORT (first of 3; 16420).
set -euo pipefail
cd "$(dirname "$0")/../.."
bins=("$@")
[[ ${#bins[@]} -gt 0 ]] || bins=(build/bench/redis_store_bench)
port=${PORT:-16420}
dir=$(mktemp -d /tmp/tollgate-cluster-bench.XXXXXX)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null; rm -rf "$dir"' EXIT
nodes=()
for i in 0 1 2; do
  p=$((port + i))
  mkdir "$dir/$p"
  taskset -c 1 redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no \
    --cluster-enabled yes --cluster-config-file nodes.conf --dir "$dir/$p" \
    --logfile "$dir/$p/redis.log" &
  pids+=($!)
  nodes+=("127.0.0.1:$p")
done
for p in $port $((port + 1)) $((port + 2)); do
  for _ in $(seq 100); do redis-cli -p "$p" PING >/dev/null 2>&1 && break; sleep 0.1; done
done
redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >/dev/null
for _ in $(seq 200); do
  ok=0
  for p in $port $((port + 1)) $((port + 2)); do
    redis-cli -p "$p" CLUSTER INFO | grep -q cluster_state:ok && ok=$((ok + 1))
  done
  [[ $ok == 3 ]] && break
  sleep 0.1
done
for ((round = 1; round <= ${ROUNDS:-2}; round++)); do
  for bin in "${bins[@]}"; do
    for p in $port $((port + 1)) $((port + 2)); do redis-cli -p "$p" FLUSHALL >/dev/null; done
    echo -n "round $round $bin: "
    taskset -c 0 timeout 120 "$bin" --url "redis-cluster://127.0.0.1:$port" --keys "${KEYS:-100000}" \
      --concurrency "${CONCURRENCY:-50}" --seconds "${DURATION:-4}" | grep RESULT
  done
done
