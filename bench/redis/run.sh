#!/usr/bin/env bash
# RedisStore beside the physical limit of Redis, in one run, on 127.0.0.1:
#  1. redis-benchmark EVALSHA of ../shared/bench/redis/token_bucket.lua (the generic script)
#     with -P 16 and -P 1: the most decisions/s one Redis core gives a typical script;
#  2. redis-benchmark EVALSHA of tollgate's own script (its cost per call): its general path (one
#     token bucket through the all-algorithm evaluator) and its token-bucket path (what RedisStore
#     sends when every check of a batch is a token bucket, as in step 3);
#  3. "$bench" through RedisStore: one hot key and 100,000 random keys, 50 in
#     flight, from another thread and (--lane) from the store's own event loop; then a flood: one key at 100x its limit, with and without the deny cache.
# Redis runs pinned to CPU 1, clients to CPU 0. Usage: bench/redis/run.sh [seconds]
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-5}
bench=${BENCH_BIN:-build/bench/redis_store_bench}
port=${PORT:-16390}
source bench/redis/lib.sh
start_redis taskset -c 1
run() { echo "+ $*" >&2; "$@"; }

generic=$(cli SCRIPT LOAD "$(cat ../shared/bench/redis/token_bucket.lua)")
ours=$(cli SCRIPT LOAD "$("$bench" --print-script)")
rb() { # label args...
  local label=$1; shift
  cli FLUSHALL >/dev/null
  local out
  out=$(run taskset -c 0 timeout 120 redis-benchmark -p "$port" -c 50 --csv "$@" | tail -1)
  echo "$label,$out"
}
echo "== redis-benchmark (requests/s as reported; csv: test,rps,avg,min,p50,p95,p99,max)"
for p in 16 1; do
  rb "generic token_bucket.lua hot -P $p" -P $p -n 300000 EVALSHA "$generic" 1 tb:hot 1000000000 1000000000 1
  rb "generic token_bucket.lua rand -P $p" -P $p -n 300000 -r 100000 EVALSHA "$generic" 1 tb:__rand_int__ 1000000000 1000000000 1
done
if [[ -n $ours ]]; then
  # General path: one token-bucket check (algorithm 0, cost 1, enforced, capacity 1e9, 1 unit/us,
  # 1000 units/token).
  for p in 16 1; do
    rb "tollgate script general path hot -P $p" -P $p -n 300000 EVALSHA "$ours" 1 'b:{key:hot}:burst:tb' 0 1 0 1 1 1000000000 1 1
  done
  # Token-bucket path, the arguments RedisStore sends for the bucket of step 3 (capacity 1e9,
  # refill 1e9/s: need 1 unit, 1000 units/us, TTL 1000 ms, room 1e9 - 1, enforced).
  for p in 16 1; do
    rb "tollgate script token-bucket path hot -P $p" -P $p -n 300000 EVALSHA "$ours" 1 'b:{key:hot}:burst:tb' 0 B 1 1000 1000 999999999 1
    rb "tollgate script token-bucket path rand -P $p" -P $p -n 300000 -r 100000 EVALSHA "$ours" 1 'b:{key:__rand_int__}:burst:tb' 0 B 1 1000 1000 999999999 1
  done
fi
echo "== RedisStore (redis_store_bench, pinned to CPU 0)"
url=redis://127.0.0.1:$port
run taskset -c 0 "$bench" --url "$url" --keys 1 --concurrency 50 --seconds "$secs"
run taskset -c 0 "$bench" --url "$url" --keys 100000 --concurrency 50 --seconds "$secs"
run taskset -c 0 "$bench" --url "$url" --keys 1 --concurrency 1 --seconds "$secs"
# As the gateway uses the store: issued and completed on one event loop with its own lane.
run taskset -c 0 "$bench" --url "$url" --keys 1 --concurrency 50 --seconds "$secs" --lane
run taskset -c 0 "$bench" --url "$url" --keys 100000 --concurrency 50 --seconds "$secs" --lane
echo "== flood: one key at far above its limit (limit 100/s, offered ~100x)"
run taskset -c 0 "$bench" --url "$url" --keys 1 --concurrency 50 --seconds "$secs" --limit 100
run taskset -c 0 "$bench" --url "$url" --keys 1 --concurrency 50 --seconds "$secs" --limit 100 --deny-cache
