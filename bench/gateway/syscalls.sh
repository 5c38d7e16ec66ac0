#!/usr/bin/env bash
# System calls per request: tollgate beside nginx limit_req proxying to the same upstream (as
# bench/gateway/paired.sh starts them), each under `strace -c -f` while wrk sends one hot key for
# a few seconds; prints each one's calls per request by name.
#
#   bench/gateway/syscalls.sh [high|low]     # high: proxied 200s; low: 429s
#
# strace slows the servers many times over: only the counts per request mean anything here.
set -euo pipefail
cd "$(dirname "$0")/../.."
variant=${1:-high}
secs=${SECS:-3}
export SANITY_KEY=sanity-1-1 SANITY_BURST_KEY=sanity-burst
# shellcheck source=/dev/null
source ../shared/bench/lib/common.sh
# shellcheck source=/dev/null
source ../shared/bench/lib/targets.sh
a_bin=$(realpath "${TOLLGATE_BIN:-build/tollgate}")
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/tollgate-syscalls.XXXXXX)}
RUN_DIR=$OUT_DIR
mkdir -p "$RUN_DIR"/{logs,pids,conf,tmp,raw}
trap stop_spawned EXIT
limit=$([[ $variant == high ]] && echo "$HIGH_RPS" || echo "$LOW_RPS")
"start_nginx_proxy_limit_$variant"
wait_port "$TARGET_PORT" 10
b_port=$TARGET_PORT
spawn tollgate env TOLLGATE_BIN="$a_bin" BENCH_PORT="$GATEWAY_PORT" \
  BENCH_UPSTREAM_PORT="$PORT_UPSTREAM" BENCH_LIMIT_RPS="$limit" BENCH_WRK_KEYS=10 \
  bench/gateway/tollgate-target.sh
wait_port "$GATEWAY_PORT" 20

measure() { # NAME PORT PIDS...
  local name=$1 port=$2; shift 2
  local args=() p
  for p in "$@"; do args+=(-p "$p"); done
  timeout $((secs + 20)) strace -c -f -o "$RUN_DIR/$name.strace" "${args[@]}" &
  local st=$!
  sleep 1
  local out
  out=$(taskset -c 0 timeout $((secs + 10)) wrk -t1 -c50 -d"${secs}s" -H 'X-API-Key: hot-key-0001' \
    "http://127.0.0.1:$port/")
  kill -INT "$st"
  wait "$st" || true
  local n
  n=$(awk '/requests in/ {print $1}' <<<"$out")
  echo "== $name: $n requests"
  # Columns: % time, seconds, usecs/call, calls, [errors,] syscall.
  awk -v n="$n" 'NF >= 5 && $4 ~ /^[0-9]+$/ {
                   errors = NF == 6 ? sprintf(" (%.3f failed)", $5 / n) : ""
                   printf "  %-16s %6.3f per request%s\n", $NF, $4 / n, errors}' \
    "$RUN_DIR/$name.strace"
}
threads() { ls "/proc/$1/task"; }  # every thread of a process: strace -p takes one each
tollgate_pid=$(cat "$RUN_DIR/pids/tollgate.pid")
nginx_master=$(cat "$RUN_DIR/pids/nginx-proxy-limit-$variant.pid")
measure tollgate "$GATEWAY_PORT" $(threads "$tollgate_pid")
measure nginx "$b_port" $(for w in $(pgrep -P "$nginx_master"); do threads "$w"; done)
