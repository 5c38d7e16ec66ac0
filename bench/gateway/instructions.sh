#!/usr/bin/env bash
# Instructions tollgate's worker thread executes per request (callgrind), memory store, against
# an nginx upstream on loopback: proxied (high limit) and 429 (low limit), one hot key and 10,000
# keys. A deterministic measure of the gateway's own cost, unlike throughput on a shared machine
# (the kernel's share, about half of every request, is not counted). Needs valgrind, nginx, wrk.
# Usage: bench/gateway/instructions.sh [redis-decision]   (TOLLGATE_BIN: default build/tollgate;
# ACCESS_LOG=true to count the access log too, off by default as in the throughput benchmarks).
# redis-decision: the decision service (200 or 429, no upstream) on a throwaway redis-server
# instead; its I/O runs on the worker thread too (a lane), so it is counted.
set -euo pipefail
mode=${1:-memory}
cd "$(dirname "$0")/../.."
bin=${TOLLGATE_BIN:-$PWD/build/tollgate}
port=${PORT:-18190} admin=$((${PORT:-18190} + 1)) up=$((${PORT:-18190} + 2))
dir=$(mktemp -d /tmp/tollgate-gw-instr.XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$dir"' EXIT
mkdir -p "$dir/www" "$dir/tmp"
head -c 100 /dev/zero | tr '\0' x > "$dir/www/index.html"
cat > "$dir/up.conf" <<CONF
worker_processes 1; daemon off; master_process off; pid $dir/up.pid; error_log $dir/up.err warn;
events { worker_connections 1024; }
http { access_log off; client_body_temp_path $dir/tmp; proxy_temp_path $dir/tmp;
  fastcgi_temp_path $dir/tmp; uwsgi_temp_path $dir/tmp; scgi_temp_path $dir/tmp;
  keepalive_requests 100000000;
  server { listen 127.0.0.1:$up; root $dir/www; location / { try_files /index.html =404; } } }
CONF
if [[ $mode == redis-decision ]]; then
  redis_port=$((${PORT:-18190} + 3))
  taskset -c 1 redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
    > "$dir/redis.log" 2>&1 & pids+=($!)
else
  taskset -c 1 nginx -c "$dir/up.conf" & pids+=($!)
fi
config() { # capacity
  if [[ $mode == redis-decision ]]; then
    echo "server: {listen: 127.0.0.1:$up, admin_listen: 127.0.0.1:$admin, threads: 1, access_log: ${ACCESS_LOG:-false}}"
    echo "decision: {listen: 127.0.0.1:$port, deny_status: 429}"
    echo "store: {type: redis, url: redis://127.0.0.1:$redis_port, prefix: instr}"
  else
    echo "server: {listen: 127.0.0.1:$port, admin_listen: 127.0.0.1:$admin, threads: 1, access_log: ${ACCESS_LOG:-false}}"
    echo "upstream: {url: http://127.0.0.1:$up, max_connections: 64}"
  fi
  echo "identity: {api_key_headers: [X-API-Key]}"
  echo "plans: {bench: {limits: [{name: burst, capacity: $1, refill_per_second: $1}]}}"
  echo "keys:"
  echo "  - {key: hot-key-0001, id: hot, plan: bench}"
  for ((i = 1; i <= 10000; i++)); do echo "  - {key: key-$i, id: k$i, plan: bench}"; done
}
served() { curl -s "127.0.0.1:$admin/metrics" | awk '/^tollgate_requests_total/ {s += $2} END {print s + 0}'; }
echo "== instructions per request in tollgate's worker thread (csv: case,requests,instructions)"
for limit in high low; do
  config "$([[ $limit == high ]] && echo 10000000 || echo 1)" > "$dir/$limit.yaml"
  valgrind --tool=callgrind --callgrind-out-file="$dir/cg.%p.out" "$bin" serve --config "$dir/$limit.yaml" \
    > "$dir/tollgate.log" 2>&1 & vg=$!
  pids+=($vg)
  for _ in $(seq 300); do curl -s -o /dev/null "127.0.0.1:$port/" -H 'X-API-Key: hot-key-0001' && break; sleep 0.2; done
  for keys in hot rand; do
    taskset -c 0 wrk -t1 -c10 -d3s -s ../shared/bench/wrk/$keys.lua "http://127.0.0.1:$port/" >/dev/null  # warm
    n0=$(served)
    callgrind_control -z "$vg" >/dev/null 2>&1
    WRK_KEYS=10000 taskset -c 0 wrk -t1 -c10 -d6s -s ../shared/bench/wrk/$keys.lua "http://127.0.0.1:$port/" >/dev/null
    callgrind_control -d "$vg" >/dev/null 2>&1
    n=$(( $(served) - n0 ))
    f=$(ls -t "$dir"/cg.*.out.* | head -1)
    # The worker thread only (the main thread's periodic sweeps are not per request).
    ir=$(callgrind_annotate --inclusive=yes --threshold=100 "$f" 2>/dev/null |
         awk '/Gateway::Run\(\)::\{lambda\(\)#1\}> > >::_M_run/ && !ir {ir = $1; gsub(",", "", ir)} END {print ir}')
    echo "$limit-$keys,$n,$((ir / n))"
  done
  kill "$vg"; wait "$vg" 2>/dev/null || true
done
