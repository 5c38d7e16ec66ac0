#!/usr/bin/env bash
# Latency on Redis at offered rates (open loop): tollgate's decision service and Fastify +
# @fastify/rate-limit (../shared/bench/node/server.js, STORE=redis), both answering by
# themselves, both on one redis-server; servers and Redis on CPU 1, h2load on CPU 0.
#
#   bench/redis/open-loop.sh                      # RATES="2000 5000 10000 20000" SECS=10 REPS=2
#
# The load: h2load over HTTP/1.1 (--h1), CLIENTS connections (default 100), each paced to
# rate / CLIENTS requests per second (--rps), one request in flight per connection, for SECS
# seconds. A connection sends its next request at its next tick, or at once when its previous
# answer came later than that tick: a server slower than the offered rate is measured at the rate
# it sustains, and a late answer delays one connection's next request (not the others'). Each
# request's latency comes from h2load's --log-file (microseconds); percentiles computed here.
# Errors: requests h2load counts as failed or errored, answers other than 200, and (tollgate) the
# decisions its Redis deadline turned into fail-open answers (tollgate_degraded_total).
set -euo pipefail
cd "$(dirname "$0")/../.."
rates=${RATES:-"2000 5000 10000 20000"}
secs=${SECS:-10}
reps=${REPS:-2}
clients=${CLIENTS:-100}
port=${PORT:-16391}
tollgate_port=${TOLLGATE_PORT:-18095}
fastify_port=${FASTIFY_PORT:-18096}
admin_port=${ADMIN_PORT:-18097}
export TOLLGATE_BIN=${TOLLGATE_BIN:-$PWD/build/tollgate}
command -v h2load >/dev/null || { echo "h2load missing: apt-get install nghttp2-client" >&2; exit 1; }
source bench/redis/lib.sh
start_redis taskset -c 1
peers=../shared/bench
deps=${NODE_DEPS_DIR:-/tmp/tollgate-fastify-$(sha256sum <"$peers/node/package-lock.json" | cut -c1-12)}
if [[ ! -d $deps/node_modules/fastify ]]; then
  mkdir -p "$deps" && cp "$peers/node/package.json" "$peers/node/package-lock.json" "$deps/"
  (cd "$deps" && npm ci --no-audit --no-fund --loglevel=error)
fi

pids=()
stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  kill "$redis" 2>/dev/null || true; wait "$redis" 2>/dev/null || true
  rm -rf "$dir"
}
trap stop_all EXIT
BENCH_PORT=$tollgate_port BENCH_REDIS_PORT=$port TOLLGATE_DECISION=1 BENCH_WRK_KEYS=0 \
  TOLLGATE_ADMIN_PORT=$admin_port \
  taskset -c 1 bench/gateway/tollgate-target.sh >"$dir/tollgate.out" 2>"$dir/tollgate.err" &
pids+=($!)
STORE=redis PORT=$fastify_port LIMIT_MAX=10000000 LIMIT_WINDOW_MS=1000 REDIS_PORT=$port \
  NODE_ENV=production NODE_PATH="$deps/node_modules" \
  taskset -c 1 node "$peers/node/server.js" >"$dir/fastify.out" 2>&1 &
pids+=($!)
for p in $tollgate_port $fastify_port; do
  for _ in $(seq 100); do
    curl -s -o /dev/null -H 'X-API-Key: hot-key-0001' "http://127.0.0.1:$p/" && break
    sleep 0.1
  done
done
admin=127.0.0.1:$admin_port
degraded() { # tollgate_degraded_total, 0 before its first use
  { curl -s "http://$admin/metrics" || true; } |
    awk '$1 == "tollgate_degraded_total" {n = $2} END {print n + 0}'
}

# h2load at `rate` against `port`; prints: achieved_rps p50_ms p99_ms p999_ms errors
measure() { # port rate
  local log="$dir/h2load-$1-$2.log" out
  rm -f "$log"
  local per=$(( $2 / clients )); (( per > 0 )) || per=1
  out=$(taskset -c 0 timeout $((secs + 30)) h2load --h1 -c "$clients" -m 1 --rps "$per" \
          -D "$secs" --warm-up-time 1 --log-file "$log" -H 'X-API-Key: hot-key-0001' \
          "http://127.0.0.1:$1/" 2>&1)
  python3 - "$log" "$secs" "$out" <<'PY'
import re, sys
log, secs, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
lat, bad, starts = [], 0, []
for line in open(log):
    f = line.split()
    if len(f) < 3:
        continue
    starts.append(int(f[0]))
    lat.append(int(f[2]))
    bad += f[1] != "200"
lat.sort()
def pct(p):
    return lat[min(len(lat) - 1, int(p / 100 * len(lat)))] / 1000 if lat else float("nan")
m = re.search(r"requests: \d+ total, \d+ started, \d+ done, \d+ succeeded, (\d+) failed, (\d+) errored", out)
failed = int(m.group(1)) + int(m.group(2)) if m else -1
span = (max(starts) - min(starts)) / 1e6 if len(starts) > 1 else secs
print("%d %.3f %.3f %.3f %d" % (len(lat) / span, pct(50), pct(99), pct(99.9), bad + failed))
PY
}

printf '%-4s %-9s %7s %9s %8s %8s %8s %7s\n' rep server offered achieved p50_ms p99_ms p999_ms errors
for ((rep = 1; rep <= reps; rep++)); do
  for rate in $rates; do
    before=$(degraded)
    read -r got p50 p99 p999 errors < <(measure "$tollgate_port" "$rate")
    after=$(degraded)
    errors=$((errors + ${after%.*} - ${before%.*}))
    printf '%-4s %-9s %7s %9s %8s %8s %8s %7s\n' "$rep" tollgate "$rate" "$got" "$p50" "$p99" "$p999" "$errors"
    read -r got p50 p99 p999 errors < <(measure "$fastify_port" "$rate")
    printf '%-4s %-9s %7s %9s %8s %8s %8s %7s\n' "$rep" fastify "$rate" "$got" "$p50" "$p99" "$p999" "$errors"
  done
done
