#!/usr/bin/env bash
# Where a request's CPU goes: tollgate's decision service (answering by itself, as in run.sh's
# decision and redis-decision modes) on CPU 1, with a redis-server of its own on CPU 1 when
# STORE=redis, one wrk on CPU 0. Prints, per request, the user and system CPU of tollgate and of
# Redis (/proc), over one wrk run after a warm-up; with Redis, also its commands per request and
# the time each takes inside Redis (INFO commandstats over the same run).
#   bench/gateway/cpu-split.sh [memory|redis] [hot|rand]
# Knobs: TOLLGATE_BIN (build/tollgate), WRK_DURATION (4s), WRK_KEYS (10000), LIMIT (10000000).
set -euo pipefail
cd "$(dirname "$0")/../.."
store=${1:-redis} pattern=${2:-rand}
[[ $store == memory || $store == redis ]] || { echo "usage: $0 [memory|redis] [hot|rand]" >&2; exit 2; }
port=18190 redis_port=16490
export TOLLGATE_BIN=${TOLLGATE_BIN:-build/tollgate} BENCH_PORT=$port TOLLGATE_DECISION=1
export BENCH_WRK_KEYS=${WRK_KEYS:-10000} BENCH_LIMIT_RPS=${LIMIT:-10000000} WRK_KEYS=${WRK_KEYS:-10000}
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
if [[ $store == redis ]]; then
  dir=$(mktemp -d /tmp/tollgate-cpu-split.XXXXXX)
  taskset -c 1 redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$dir" >/dev/null &
  pids+=($!)
  export BENCH_REDIS_PORT=$redis_port
fi
taskset -c 1 bench/gateway/tollgate-target.sh >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  curl -s -o /dev/null -H 'X-API-Key: hot-key-0001' "http://127.0.0.1:$port/" && break
  sleep 0.1
done
wrk_run() { # DURATION
  timeout 60 taskset -c 0 wrk -t1 -c50 -d"$1" --latency -s ../shared/bench/wrk/"$pattern".lua \
    "http://127.0.0.1:$port/"
}
wrk_run 1s >/dev/null
if [[ $store == redis ]]; then redis-cli -p "$redis_port" CONFIG RESETSTAT >/dev/null; fi
cpu() { awk '{print $14, $15}' "/proc/$1/stat"; }  # user and system, in clock ticks
snap() { for p in "${pids[@]}"; do cpu "$p"; done; }
before=$(snap)
out=$(wrk_run "${WRK_DURATION:-4s}")
after=$(snap)
n=$(awk '/requests in/ {print $1}' <<<"$out")
hz=$(getconf CLK_TCK)
echo "$store $pattern: $(awk '/Requests\/sec/ {print $2}' <<<"$out") requests/s, p99 $(awk '/ 99%/ {print $2}' <<<"$out")"
names=()
[[ $store == redis ]] && names+=(redis-server)
names+=(tollgate)
paste <(echo "$before") <(echo "$after") | awk -v n="$n" -v hz="$hz" -v names="${names[*]}" '
  BEGIN { split(names, name, " ") }
  { printf "  %-12s %5.1f us user, %5.1f us system per request\n", name[NR], ($3 - $1) * 1e6 / hz / n,
           ($4 - $2) * 1e6 / hz / n }'
if [[ $store == redis ]]; then
  redis-cli -p "$redis_port" INFO commandstats | awk -F'[:=,]' -v n="$n" '
    /^cmdstat_/ && !/config/ { sub("cmdstat_", "", $1)
      printf "  redis %-8s %6.3f calls, %6.2f us each, %5.2f us per request\n", $1, $3 / n, $7, $5 / n }' |
    sort -k2,2  # (a script's time includes its commands')
fi
