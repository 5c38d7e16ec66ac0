#!/usr/bin/env bash
# Paired runs: two gateways serve at the same time on the server CPU, one wrk each on the client
# CPU. Both see the machine at the same moment, so the hypervisor's noise, which moves single
# runs of bench/gateway/run.sh by 10-20 %, falls on both alike.
#
#   bench/gateway/paired.sh [high|low]
#
# A is tollgate (TOLLGATE_BIN, default build/tollgate). B is nginx with limit_req proxying to the
# same upstream (B=nginx, the default: ../shared/bench's nginx-proxy-limit-<variant>), or another
# tollgate binary (B=path), to weigh a change. Both proxy to one upstream nginx, whose CPU is
# shared out per request. Per round and key pattern: each one's requests/s, p99, and CPU per
# request of its own processes (/proc), and the system (kernel) part of it; the ratio of requests
# per server-CPU-second (B's CPU per request over A's, the upstream's share added to both, as
# run.sh counts it). The kernel share bounds what user-space work can win: with A's kernel time
# per request at k of B's whole, A can lead by at most 1/k.
# STORE=redis (with B=path): each tollgate decides on a redis-server of its own, whose CPU counts
# as its own; DECISION=1: each answers by itself (the decision service), as in run.sh's
# redis-decision mode. Weighs a change to RedisStore or its script.
# Knobs: ROUNDS (3), WRK_DURATION (10s), PATTERNS ("hot rand"), OUT_DIR (a fresh /tmp folder).
set -euo pipefail
cd "$(dirname "$0")/../.."
variant=${1:-high}
[[ $variant == high || $variant == low ]] || { echo "usage: $0 [high|low]" >&2; exit 2; }
export SANITY_KEY=sanity-1-1 SANITY_BURST_KEY=sanity-burst
# shellcheck source=/dev/null
source ../shared/bench/lib/common.sh
# shellcheck source=/dev/null
source ../shared/bench/lib/targets.sh
ROUNDS=${ROUNDS:-3}
a_bin=$(realpath "${TOLLGATE_BIN:-build/tollgate}")
b=${B:-nginx}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/tollgate-paired.XXXXXX)}
RUN_DIR=$OUT_DIR
mkdir -p "$RUN_DIR"/{logs,pids,conf,tmp,raw}
trap stop_spawned EXIT
limit=$([[ $variant == high ]] && echo "$HIGH_RPS" || echo "$LOW_RPS")
a_port=$GATEWAY_PORT
store=${STORE:-memory}
[[ $store == memory || $store == redis ]] || die "STORE: memory or redis"
[[ $store == memory || $b != nginx ]] || die "STORE=redis needs B=<another tollgate binary>"
export TOLLGATE_DECISION=${DECISION:-0}

start_tollgate() { # NAME BIN PORT [REDIS_PORT]
  require_free_port "$3" || return 1
  local redis=()
  if [[ -n ${4:-} ]]; then
    start_target_redis "$1-redis" "$4" || return 1
    redis=(BENCH_REDIS_PORT="$4")
  fi
  spawn "$1" env TOLLGATE_BIN="$2" BENCH_PORT="$3" BENCH_UPSTREAM_PORT="$PORT_UPSTREAM" \
    BENCH_LIMIT_RPS="$limit" BENCH_WRK_KEYS="$WRK_KEYS" "${redis[@]}" bench/gateway/tollgate-target.sh
  wait_port "$3" 20
}

if [[ $b == nginx ]]; then
  "start_nginx_proxy_limit_$variant"  # the upstream and the proxy
  wait_port "$TARGET_PORT" 10
  b_port=$TARGET_PORT b_name=nginx-proxy-limit-$variant b_pgid=${SPAWNED_PIDS[-1]}
else
  start_upstream upstream
  b_port=$((GATEWAY_PORT + 2)) b_name=tollgate-b
  start_tollgate "$b_name" "$(realpath "$b")" "$b_port" \
    "$([[ $store == redis ]] && echo $((PORT_TARGET_REDIS + 1)))"
  b_pgid=${SPAWNED_PIDS[-1]}
  [[ $store == memory ]] || b_redis_pgid=${SPAWNED_PIDS[-2]}
fi
up_pgid=${SPAWNED_PIDS[0]}
start_tollgate tollgate "$a_bin" "$a_port" "$([[ $store == redis ]] && echo "$PORT_TARGET_REDIS")"
a_pgid=${SPAWNED_PIDS[-1]}
[[ $store == memory ]] || a_redis_pgid=${SPAWNED_PIDS[-2]}
for p in "$a_port" "$b_port"; do sanity_check "$p" "$variant" || die "sanity check failed on port $p"; done

# "pid pgrp user system" (jiffies; reaped children included) for every user-space process: as
# the harness's proc_snap, with the kernel's part apart.
split_snap() {
  cat /proc/[0-9]*/stat 2>/dev/null | awk '{
    s = $0; k = 0
    while ((i = index(substr(s, k + 1), ")")) > 0) k += i
    split(substr(s, k + 2), f, " ")
    if ($1 == 2 || f[2] == 2) next
    print $1, f[3], f[12] + f[14], f[13] + f[15]
  }'
}
# CPU (jiffies) of every process in the process groups $1 (space-separated), from a split_snap:
# user and system ($3 = 3, 4), or both (the default).
group_jiffies() {
  awk -v g=" $1 " -v f="${3:-0}" 'index(g, " " $2 " ") { s += f ? $f : $3 + $4 } END { print s + 0 }' <<<"$2"
}
a_groups="$a_pgid ${a_redis_pgid:-}" b_groups="$b_pgid ${b_redis_pgid:-}"

# Both at once, wrk pinned to the client CPU, bounded by -d and an outer timeout.
pair() { # PATTERN DURATION LABEL
  run_wrk "$3-a" "$a_port" "$1" "$2" "$RUN_DIR/raw/$3-a.txt" &
  local wa=$!
  run_wrk "$3-b" "$b_port" "$1" "$2" "$RUN_DIR/raw/$3-b.txt" &
  local wb=$!
  wait "$wa" "$wb"
}

log "A: tollgate ($a_bin) on $a_port; B: $b_name on $b_port; variant $variant; store $store;" \
  "decision service $TOLLGATE_DECISION; results in $RUN_DIR"
pair hot "$WARMUP" warmup
hz=$(getconf CLK_TCK)
printf 'round\tpattern\ta_rps\tb_rps\ta_p99_ms\tb_p99_ms\ta_us\tb_us\tupstream_us\tratio_own\tratio_server\ta_sys_us\tb_sys_us\n' \
  >"$RUN_DIR/paired.tsv"
for ((r = 1; r <= ROUNDS; r++)); do
  for pattern in $PATTERNS; do
    s0=$(split_snap)
    pair "$pattern" "$WRK_DURATION" "r$r-$pattern"
    s1=$(split_snap)
    na=$(wrk_field "$RUN_DIR/raw/r$r-$pattern-a.txt" requests)
    nb=$(wrk_field "$RUN_DIR/raw/r$r-$pattern-b.txt" requests)
    awk -v r="$r" -v p="$pattern" -v hz="$hz" -v na="$na" -v nb="$nb" \
        -v da="$(($(group_jiffies "$a_groups" "$s1") - $(group_jiffies "$a_groups" "$s0")))" \
        -v db="$(($(group_jiffies "$b_groups" "$s1") - $(group_jiffies "$b_groups" "$s0")))" \
        -v du="$(($(group_jiffies "$up_pgid" "$s1") - $(group_jiffies "$up_pgid" "$s0")))" \
        -v sa="$(($(group_jiffies "$a_groups" "$s1" 4) - $(group_jiffies "$a_groups" "$s0" 4)))" \
        -v sb="$(($(group_jiffies "$b_groups" "$s1" 4) - $(group_jiffies "$b_groups" "$s0" 4)))" \
        -v ta="$(wrk_field "$RUN_DIR/raw/r$r-$pattern-a.txt" duration_us)" \
        -v tb="$(wrk_field "$RUN_DIR/raw/r$r-$pattern-b.txt" duration_us)" \
        -v pa="$(wrk_field "$RUN_DIR/raw/r$r-$pattern-a.txt" p99_us)" \
        -v pb="$(wrk_field "$RUN_DIR/raw/r$r-$pattern-b.txt" p99_us)" 'BEGIN {
      a = da * 1e6 / hz / na; b = db * 1e6 / hz / nb; u = du * 1e6 / hz / (na + nb)
      printf "%d\t%s\t%.0f\t%.0f\t%.2f\t%.2f\t%.1f\t%.1f\t%.1f\t%.3f\t%.3f\t%.1f\t%.1f\n", r, p,
             na * 1e6 / ta, nb * 1e6 / tb, pa / 1000, pb / 1000, a, b, u, b / a, (b + u) / (a + u),
             sa * 1e6 / hz / na, sb * 1e6 / hz / nb }' >>"$RUN_DIR/paired.tsv"
    tail -1 "$RUN_DIR/paired.tsv" >&2
  done
done

column -t "$RUN_DIR/paired.tsv"
echo
echo "medians (ratio > 1: A, tollgate, serves more requests per CPU-second than B, $b_name):"
for pattern in $PATTERNS; do
  awk -v p="$pattern" -F'\t' 'BEGIN { n = 0 }
    $2 == p { own[n] = $10; srv[n] = $11; pa[n] = $5; pb[n] = $6; ka[n] = $12 / $7; kb[n] = $13 / $8; n++ }
    function median(x, n,   i, j, t) {
      for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (x[j] < x[i]) { t = x[i]; x[i] = x[j]; x[j] = t }
      return n % 2 ? x[int(n / 2)] : (x[n / 2 - 1] + x[n / 2]) / 2 }
    END { printf "  %-5s own CPU %.3fx, server CPU %.3fx, p99 A %.2f ms / B %.2f ms, kernel share A %.0f %% / B %.0f %%\n",
          p, median(own, n), median(srv, n), median(pa, n), median(pb, n), 100 * median(ka, n),
          100 * median(kb, n) }' "$RUN_DIR/paired.tsv"
done
