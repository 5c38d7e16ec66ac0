#!/usr/bin/env bash
# Instructions executed inside redis-server per EVALSHA, for the generic script and both paths of
# tollgate's script: a deterministic measure of a script's cost (callgrind counts instructions),
# unlike throughput on a shared machine. Used to weigh each piece of the token-bucket path.
# The group path is given per decision. Needs valgrind. Usage: bench/redis/instructions.sh [calls]   (BENCH_BIN as in run.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-2000}
bench=${BENCH_BIN:-build/bench/redis_store_bench}
port=${PORT:-16393}
source bench/redis/lib.sh
out=$(mktemp -d /tmp/tollgate-redis-instr.XXXXXX)
start_redis valgrind --tool=callgrind --callgrind-out-file="$out/cg.%p.out"
trap 'kill "$redis" 2>/dev/null; wait "$redis" 2>/dev/null; rm -rf "$dir" "$out"' EXIT
vg=$redis
measure() { # label [per] redis-benchmark-args...   (per: decisions per call, default 1)
  local label=$1 per=1; shift
  if [[ $1 =~ ^[0-9]+$ ]]; then per=$1; shift; fi
  cli FLUSHALL >/dev/null
  redis-benchmark -p "$port" -c 10 -P 16 -n 500 "$@" >/dev/null  # warm: keys exist, script compiled
  callgrind_control -z "$vg" >/dev/null 2>&1
  redis-benchmark -p "$port" -c 10 -P 16 -n "$n" "$@" >/dev/null
  callgrind_control -d "$vg" >/dev/null 2>&1
  local f ir
  f=$(ls -t "$out"/cg.*.out.* | head -1)
  ir=$(grep -E '^(summary|totals):' "$f" | head -1 | awk '{print $2}')
  echo "$label,$((ir / n / per))"
}
generic=$(cli SCRIPT LOAD "$(cat ../shared/bench/redis/token_bucket.lua)")
ours=$(cli SCRIPT LOAD "$("$bench" --print-script)")
echo "== instructions per call inside redis-server (csv: script,instructions)"
measure "generic token_bucket.lua hot" EVALSHA "$generic" 1 tb:hot 1000000000 1000000000 1
measure "generic token_bucket.lua rand" -r 100000 EVALSHA "$generic" 1 tb:__rand_int__ 1000000000 1000000000 1
measure "tollgate general path hot" EVALSHA "$ours" 1 'b:{key:hot}:burst:tb' 0 1 0 1 1 1000000000 1 1
measure "tollgate token-bucket path hot" EVALSHA "$ours" 1 'b:{key:hot}:burst:tb' 0 B 1 1000 1000 999999999 1
measure "tollgate token-bucket path rand" -r 100000 EVALSHA "$ours" 1 'b:{key:__rand_int__}:burst:tb' 0 B 1 1000 1000 999999999 1
# A group of 16 decisions of one shape in one call (the 'M' path), per decision: one hot key
# (as RedisStore sends it: the key once, then 15 requests marked "same keys as the previous"; and
# with the key sent for each request), and 16 random keys. Per request: 4 x shape + 2 if same
# keys + 1 to consume.
group=() same=(5) hot=() rand=()
for i in $(seq 16); do hot+=('b:{key:hot}:burst:tb'); rand+=('b:{key:__rand_int__}:burst:tb'); group+=(5); done
for i in $(seq 15); do same+=(7); done
measure "tollgate group of 16 hot, per decision" 16 EVALSHA "$ours" 1 'b:{key:hot}:burst:tb' 0 M 1 1 1000 1000 999999999 1 "${same[@]}"
measure "tollgate group of 16 hot, key sent 16 times, per decision" 16 EVALSHA "$ours" 16 "${hot[@]}" 0 M 1 1 1000 1000 999999999 1 "${group[@]}"
measure "tollgate group of 16 rand, per decision" 16 -r 100000 EVALSHA "$ours" 16 "${rand[@]}" 0 M 1 1 1000 1000 999999999 1 "${group[@]}"
# The same with the client's word that no key is named twice (the 'U' path, which RedisStore takes
# for such groups): absent keys, then 2,000 keys with a TTL long enough that each is read again.
measure "tollgate group of 16 rand, distinct ('U'), per decision" 16 -r 100000 EVALSHA "$ours" 16 "${rand[@]}" 0 U 1 1 1000 1000 999999999 1 "${group[@]}"
measure "tollgate group of 16 of 2000 keys, per decision" 16 -r 2000 EVALSHA "$ours" 16 "${rand[@]}" 0 M 1 1 1000 1000000 999999999 1 "${group[@]}"
measure "tollgate group of 16 of 2000 keys, distinct ('U'), per decision" 16 -r 2000 EVALSHA "$ours" 16 "${rand[@]}" 0 U 1 1 1000 1000000 999999999 1 "${group[@]}"
