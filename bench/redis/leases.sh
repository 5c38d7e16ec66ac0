#!/usr/bin/env bash
# Token leasing measured: two tollgate replicas (decision service) on one redis-server, one hot
# key offered RATE requests/s in all (half to each replica) for SECS seconds, with LEASE=0
# (exact) and then LEASE=N. The key's bucket: capacity = refill = LIMIT per second, below the
# offered rate, so the budget is the binding constraint and over-admission would show.
#
#   bench/redis/leases.sh        # RATE=20000 LIMIT=10000 LEASES="0 100" SECS=10 REPS=2
#
# Prints per run: requests answered, admitted (200s), the exact budget over the run's span
# (capacity + refill x seconds, from the first to the last request h2load sent), admitted
# beyond it, the bound (replicas x N), Redis decisions and script calls (tollgate_redis_calls_total
# and tollgate_redis_scripts_total summed over both replicas) per request.
# Redis and both replicas on CPU 1, the two h2load processes on CPU 0.
set -euo pipefail
cd "$(dirname "$0")/../.."
rate=${RATE:-20000}
limit=${LIMIT:-10000}
leases=${LEASES:-"0 100"}
secs=${SECS:-10}
reps=${REPS:-2}
clients=${CLIENTS:-50}
port=${PORT:-16392}
export TOLLGATE_BIN=${TOLLGATE_BIN:-$PWD/build/tollgate}
command -v h2load >/dev/null || { echo "h2load missing: apt-get install nghttp2-client" >&2; exit 1; }
source bench/redis/lib.sh
start_redis taskset -c 1
pids=()
stop_replicas() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap 'stop_replicas; kill "$redis" 2>/dev/null; wait "$redis" 2>/dev/null; rm -rf "$dir"' EXIT
counter() { # admin_port metric
  { curl -s "http://127.0.0.1:$1/metrics" || true; } | awk -v m="$2" '$1 == m {n = $2} END {print n + 0}'
}

printf '%-4s %6s %9s %9s %9s %8s %6s %10s %10s\n' rep lease requests admitted budget beyond bound \
  calls/req scripts/req
for ((rep = 1; rep <= reps; rep++)); do
  for lease in $leases; do
    redis-cli -p "$port" FLUSHALL >/dev/null
    for i in 0 1; do
      BENCH_PORT=$((18100 + i)) TOLLGATE_ADMIN_PORT=$((18110 + i)) BENCH_REDIS_PORT=$port \
        TOLLGATE_DECISION=1 BENCH_WRK_KEYS=0 BENCH_LIMIT_RPS=$limit TOLLGATE_LEASE=$lease \
        taskset -c 1 bench/gateway/tollgate-target.sh >"$dir/tg$i.out" 2>"$dir/tg$i.err" &
      pids+=($!)
    done
    for i in 0 1; do
      for _ in $(seq 100); do
        curl -s -o /dev/null "http://127.0.0.1:$((18110 + i))/healthz" && break
        sleep 0.1
      done
    done
    redis-cli -p "$port" FLUSHALL >/dev/null  # a full bucket at the start
    loads=()
    rm -f "$dir"/h2load-*.log
    for i in 0 1; do
      taskset -c 0 timeout $((secs + 30)) h2load --h1 -c "$clients" -m 1 \
        --rps $((rate / 2 / clients)) -D "$secs" --log-file "$dir/h2load-$i.log" \
        -H 'X-API-Key: hot-key-0001' "http://127.0.0.1:$((18100 + i))/" >"$dir/h2load-$i.out" 2>&1 &
      loads+=($!)
    done
    wait "${loads[@]}"
    calls=0 scripts=0
    for i in 0 1; do
      calls=$((calls + $(counter $((18110 + i)) tollgate_redis_calls_total | cut -d. -f1)))
      scripts=$((scripts + $(counter $((18110 + i)) tollgate_redis_scripts_total | cut -d. -f1)))
    done
    stop_replicas
    python3 - "$dir/h2load-0.log" "$dir/h2load-1.log" "$limit" "$lease" "$calls" "$scripts" \
      "$rep" <<'PY'
import sys
logs, limit, lease, calls, scripts, rep = sys.argv[1:3], int(sys.argv[3]), int(sys.argv[4]), \
    int(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
starts, admitted, n = [], 0, 0
for log in logs:
    for line in open(log):
        f = line.split()
        if len(f) < 3:
            continue
        n += 1
        starts.append(int(f[0]))
        admitted += f[1] == "200"
span = (max(starts) - min(starts)) / 1e6
budget = limit + limit * span
print("%-4s %6d %9d %9d %9d %8d %6d %10.4f %10.4f" % (
    rep, lease, n, admitted, budget, max(0, admitted - budget), 2 * lease, calls / n,
    scripts / n))
PY
  done
done
