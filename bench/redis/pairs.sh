#!/usr/bin/env bash
# The random-key ratio on a noisy machine: PAIRS interleaved pairs on one redis-server, each the
# generic script (../shared/bench/redis/token_bucket.lua, redis-benchmark -c 50 -P 16, 100,000
# random keys) then RedisStore for SECONDS with 100,000 random keys, from a lane (--lane) and
# from another thread. Redis on CPU 1, clients on CPU 0. Usage: bench/redis/pairs.sh [PAIRS] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
pairs=${1:-5}
secs=${2:-3}
bench=${BENCH_BIN:-build/bench/redis_store_bench}
port=${PORT:-16393}
source bench/redis/lib.sh
start_redis taskset -c 1
generic=$(cli SCRIPT LOAD "$(cat ../shared/bench/redis/token_bucket.lua)")
store() { # extra args...
  cli FLUSHALL >/dev/null
  taskset -c 0 "$bench" --url "redis://127.0.0.1:$port" --keys 100000 --concurrency 50 --seconds "$secs" "$@" |
    grep -o 'decisions_per_s=[0-9]*\|p99_us=[0-9]*' | tr '\n' ' '
}
for i in $(seq "$pairs"); do
  cli FLUSHALL >/dev/null
  rps=$(taskset -c 0 redis-benchmark -p "$port" -c 50 --csv -P 16 -n 200000 -r 100000 \
          EVALSHA "$generic" 1 tb:__rand_int__ 1000000000 1000000000 1 | tail -1 | cut -d, -f2 | tr -d '"')
  echo "pair $i: generic -P 16 $rps/s | lane: $(store --lane)| thread: $(store)"
done
