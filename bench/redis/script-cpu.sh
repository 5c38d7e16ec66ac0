#!/usr/bin/env bash
# Redis's own CPU per decision for tollgate's group script with random keys, as RedisStore sends
# it (groups of 16 requests, each key named once: the 'U' path): a floor for what a random-key
# decision costs Redis, without the client. redis-server on CPU 1, redis-benchmark on CPU 0,
# /proc CPU times of redis-server over the run.
#   bench/redis/script-cpu.sh [keys]   (default 10000; BENCH_BIN as in run.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
keys=${1:-10000}
bench=${BENCH_BIN:-build/bench/redis_store_bench}
port=${PORT:-16394}
source bench/redis/lib.sh
start_redis taskset -c 1
sha=$(cli SCRIPT LOAD "$("$bench" --print-script)")
rand=() group=()
for _ in $(seq 16); do rand+=('b:{key:__rand_int__}:burst:tb'); group+=(5); done
# need 1, refill 1000 units/us, TTL 1 s, room, enforced; 16 requests of shape 1, consume
args=(EVALSHA "$sha" 16 "${rand[@]}" 0 U 1 1 1 1000 1000 999999999 1 "${group[@]}")
run() { taskset -c 0 timeout 120 redis-benchmark -p "$port" -c 4 -P 2 -n "$1" -r "$keys" "${args[@]}"; }
run 20000 >/dev/null  # warm: keys exist, script compiled
read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$redis/stat")
n=60000
run "$n" | grep -E "throughput summary"
read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$redis/stat")
hz=$(getconf CLK_TCK)
awk -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v d=$((n * 16)) -v hz="$hz" \
  'BEGIN { printf "redis-server per decision: %.2f us user, %.2f us system\n", u * 1e6 / hz / d, s * 1e6 / hz / d }'
cli INFO commandstats | grep -E "^cmdstat_(evalsha|mget|set):"
