#!/usr/bin/env bash
# tollgate's Envoy RLS gRPC listener (RateLimitService/ShouldRateLimit) under a load generator
# that is not ours: h2load (Debian's nghttp2-client) sending gRPC over h2c, one request frame
# encoded by bench/rls/grpc_bench.py from the field numbers of src/rls/proto/rls.proto.
#
#   bench/rls/run.sh BINARY [BINARY2]            memory store, e.g. /tmp/before/tollgate-sync build/tollgate
#   STORE=redis bench/rls/run.sh BINARY [BINARY2] the same on a throwaway Redis
#   ENVOY_CONFIG=1 bench/rls/run.sh BINARY       descriptors from an envoyproxy/ratelimit config
#                                                (needs a binary that knows rls.envoy_config)
# Needs: apt-get install -y nghttp2-client (h2load, nghttp); redis-server for STORE=redis.
#
# For each round, each binary in turn: a fresh tollgate (temp config: memory store, one key of a
# plan with a limit of 1e9/s, rls domain `bench` with key_entry api_key) pinned to CPU 0; one
# sanity call with nghttp (grpc-status 0 in the trailers, overall_code OK in the body); WARMUP
# calls; then per SHAPE (clients x streams per client) h2load for DURATION s pinned to CPU 1.
# Printed per round: calls/s, p50/p99/p99.9 (from h2load --log-file), and errors: h2load's
# failed/errored/timeout, non-200 statuses, and gRPC answers that were not OK (tollgate's
# tollgate_rls_ok_total must grow by h2load's succeeded count). Then the medians (each column on
# its own), per binary and shape. Files (configs, h2load output, JSON per round): OUT_DIR.
#
# Environment: STORE=memory|redis (redis: a throwaway redis-server on a free port, pinned to
# CPU 1 beside h2load; REDIS_TIMEOUT_MS sets store.timeout_ms, default tollgate's own),
# ROUNDS=3, DURATION=5, SHAPES="1x50 5x10" (both 50 streams in flight), WARMUP=5000,
# ENVOY_CONFIG=1 (descriptors in the envoyproxy/ratelimit format, `rls.envoy_config: DIR`,
# instead of `rls.domains`: a binary without that key fails check-config and the script stops),
# OUT_DIR (default a new /tmp/tollgate-rls-bench.*), KEEP_LOGS=1 keeps h2load's per-request logs,
# QUIET_WAIT=300: before each round, wait up to that many seconds for both CPUs to be under 10%
# busy (a shared machine); each row then says how much of each CPU went to processes not ours,
# and a measurement where that exceeds OTHER_MAX=10 % is discarded and run again (RETRIES=5).
# `calib`: ms of a fixed Python loop on CPU 0 just before: a host that got slower (a VM's
# neighbours; no steal time shown) makes it grow, and the figures of that round drop with it.
# Everything listens on and talks to 127.0.0.1 only; every process started here is stopped by
# its PID on exit.
set -euo pipefail
(($# >= 1 && $# <= 2)) || { sed -n '2,11p' "$0" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
py() { python3 "$here/grpc_bench.py" "$@"; }
store=${STORE:-memory} rounds=${ROUNDS:-3} duration=${DURATION:-5} warmup=${WARMUP:-5000}
shapes=${SHAPES:-"1x50 5x10"} envoy_config=${ENVOY_CONFIG:-0}
[[ $store == memory || $store == redis ]] || { echo "STORE must be memory or redis" >&2; exit 2; }
for tool in h2load nghttp taskset python3; do
  command -v "$tool" >/dev/null || { echo "$tool missing: apt-get install -y nghttp2-client" >&2; exit 1; }
done
bins=()
for b in "$@"; do
  [[ -x $b ]] || { echo "$b: not an executable" >&2; exit 2; }
  bins+=("$(realpath "$b")")
done
out=${OUT_DIR:-$(mktemp -d /tmp/tollgate-rls-bench.XXXXXX)}
mkdir -p "$out"

declare -A running=()  # PID -> name, of what is still to stop
stop() {  # PID: SIGTERM, then wait for it
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  unset "running[$1]"
}
cleanup() { for pid in "${!running[@]}"; do stop "$pid"; done; }
trap cleanup EXIT
trap 'exit 130' INT TERM

redis_url="" redis_pid=""
if [[ $store == redis ]]; then
  command -v redis-server >/dev/null || { echo "redis-server missing" >&2; exit 1; }
  redis_port=$(py port)
  mkdir -p "$out/redis"
  taskset -c 1 redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$out/redis" --logfile "$out/redis/redis.log" &
  redis_pid=$!
  running[$redis_pid]=redis-server
  for _ in $(seq 100); do redis-cli -p "$redis_port" PING >/dev/null 2>&1 && break; sleep 0.1; done
  redis-cli -p "$redis_port" PING >/dev/null
  redis_url=redis://127.0.0.1:$redis_port
fi

key=bench-key-1
py frame bench "api_key=$key" > "$out/request.bin"
rls_path=/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
grpc_headers=(-H 'content-type: application/grpc' -H 'te: trailers')

write_config() {  # DIR: tollgate.yaml (and envoy/ for ENVOY_CONFIG=1); sets the ports
  local dir=$1
  port=$(py port) admin=$(py port) rls=$(py port) unused=$(py port)
  {
    echo "server: {listen: 127.0.0.1:$port, admin_listen: 127.0.0.1:$admin, threads: 1, access_log: false}"
    echo "upstream: {url: http://127.0.0.1:$unused}  # never called: no HTTP request is proxied"
    if [[ $store == redis ]]; then
      echo "store: {type: redis, url: $redis_url, prefix: rlsbench${REDIS_TIMEOUT_MS:+, timeout_ms: $REDIS_TIMEOUT_MS}}"
    else
      echo "store: {type: memory}"
    fi
    echo "plans: {bench: {limits: [{name: burst, capacity: 1000000000, refill_per_second: 1000000000}]}}"
    echo "keys: [{key: $key, id: bench, plan: bench}]"
    if [[ $envoy_config == 1 ]]; then
      mkdir -p "$dir/envoy"
      printf '%s\n' "domain: bench" "descriptors:" "  - key: api_key" \
        "    rate_limit: {unit: second, requests_per_unit: 1000000000}" > "$dir/envoy/bench.yaml"
      echo "rls: {listen: 127.0.0.1:$rls, envoy_config: $dir/envoy}"
    else
      echo "rls: {listen: 127.0.0.1:$rls, domains: [{domain: bench, key_entry: api_key}]}"
    fi
  } > "$dir/tollgate.yaml"
}

start_tollgate() {  # BINARY DIR: serve, wait for /metrics and the RLS port; sets $tg
  local bin=$1 dir=$2
  if ! "$bin" check-config "$dir/tollgate.yaml" > "$dir/check-config.txt" 2>&1; then
    cat "$dir/check-config.txt" >&2
    [[ $envoy_config == 1 ]] && echo "(ENVOY_CONFIG=1: $bin does not take rls.envoy_config)" >&2
    exit 1
  fi
  taskset -c 0 "$bin" serve --config "$dir/tollgate.yaml" > "$dir/tollgate.log" 2>&1 &
  tg=$!
  running[$tg]=tollgate
  for _ in $(seq 100); do
    kill -0 "$tg" 2>/dev/null || { tail -20 "$dir/tollgate.log" >&2; exit 1; }
    if py metrics "$admin" >/dev/null 2>&1 && (exec 3<>"/dev/tcp/127.0.0.1/$rls") 2>/dev/null; then
      return
    fi
    sleep 0.1
  done
  echo "tollgate did not start" >&2; exit 1
}

sanity() {  # DIR: one call by nghttp; the trailers must say grpc-status 0, the body OK
  local dir=$1 url=http://127.0.0.1:$rls$rls_path code
  nghttp -v -H ':method: POST' "${grpc_headers[@]}" -d "$out/request.bin" "$url" > "$dir/sanity.txt"
  grep -q 'grpc-status: 0$' "$dir/sanity.txt" || { cat "$dir/sanity.txt" >&2; echo "sanity: no grpc-status 0" >&2; exit 1; }
  code=$(nghttp -H ':method: POST' "${grpc_headers[@]}" -d "$out/request.bin" "$url" | py decode)
  [[ $code == OK ]] || { echo "sanity: overall_code $code, not OK" >&2; exit 1; }
}

quiet() {  # waits up to QUIET_WAIT s (300) for both CPUs under 10% busy for 3 s in a row
  local waited=0 calm=0 busy
  while ((calm < 3 && waited < ${QUIET_WAIT:-300})); do
    busy=$(py busy)
    if ((busy < 10)); then calm=$((calm + 1)); else calm=0; fi
    ((waited++ > 0 || calm > 0)) || echo "# waiting for a quiet machine (a CPU is ${busy}% busy)" >&2
  done
  ((calm >= 3)) || echo "# still busy after ${waited}s: measuring anyway" >&2
}

h2() {  # ARGS...: h2load pinned to CPU 1, as a PID of its own
  taskset -c 1 h2load "${grpc_headers[@]}" -d "$out/request.bin" "$@" "http://127.0.0.1:$rls$rls_path" &
  local pid=$!
  running[$pid]=h2load
  wait "$pid"
  unset "running[$pid]"
}

{
  echo "# $(date -Is) $(uname -r), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# h2load $(h2load --version | awk '{print $2}'), STORE=$store ROUNDS=$rounds DURATION=$duration SHAPES=\"$shapes\" WARMUP=$warmup ENVOY_CONFIG=$envoy_config"
} | tee "$out/summary.txt"
for ((r = 1; r <= rounds; r++)); do
  for i in "${!bins[@]}"; do
    bin=${bins[$i]} dir=$out/round$r-bin$i
    mkdir -p "$dir"
    write_config "$dir"
    [[ -n $redis_url ]] && redis-cli -p "$redis_port" FLUSHALL >/dev/null
    quiet
    start_tollgate "$bin" "$dir"
    sanity "$dir"
    h2 -c 1 -m 10 -n "$warmup" > "$dir/warmup.txt"
    for shape in $shapes; do
      c=${shape%x*} m=${shape#*x}
      base=$dir/c${c}m$m
      for ((try = 1; ; try++)); do  # again (up to RETRIES) if someone else took a CPU
        calib=$(taskset -c 0 python3 "$here/grpc_bench.py" calib)
        py metrics "$admin" "$tg" "$redis_pid" > "$base.before.json"
        times > "$base.times0"
        h2 -c "$c" -m "$m" -D "$duration" --log-file "$base.log" > "$base.txt"
        times > "$base.times1"
        py metrics "$admin" "$tg" "$redis_pid" > "$base.after.json"
        CALIB_MS=$calib py stats "$base".{log,txt,before.json,after.json,times0,times1} > "$base.json"
        [[ ${KEEP_LOGS:-0} == 1 ]] || rm -f "$base.log"
        line="round $r  $(basename "$bin")  -c $c -m $m  $(py row "$base.json")"
        py clean "$base.json" && break
        ((try < ${RETRIES:-5})) || { line+="  KEPT although busy: out of RETRIES"; break; }
        echo "$line  DISCARDED: the machine was busy" | tee -a "$out/summary.txt"
        quiet
      done
      cat "$base.json" >> "$out/bin$i-$shape.jsonl"
      echo "$line" | tee -a "$out/summary.txt"
    done
    stop "$tg"
  done
done
for i in "${!bins[@]}"; do
  for shape in $shapes; do
    echo "${bins[$i]}  -c ${shape%x*} -m ${shape#*x}  $(py median "$out/bin$i-$shape.jsonl")"
  done
done | tee -a "$out/summary.txt"
echo "# results and logs: $out"
