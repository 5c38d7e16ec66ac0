#!/usr/bin/env bash
# HTTPS beside nginx (issue 33): tollgate and nginx, each one thread / one worker, terminating
# TLS with the same ECDSA P-256 certificate and cipher, limiting (a limit no request reaches:
# every request is decided and proxied) and proxying to the same plaintext upstream (an nginx
# answering "ok"). Side by side in one run, ROUNDS rounds alternating the order:
#   keep-alive: wrk over HTTPS, requests per server-CPU-second (utime+stime of the server
#               process from /proc) and requests per second, one hot key and 10,000 keys
#               (a wrk script cycling through them);
#   handshakes: openssl s_time, new connections with full handshakes (-new) and resumed ones
#               (-reuse), per server-CPU-second.
# Usage: bench/tls/run.sh   (ROUNDS=3 SECONDS_EACH=8 CONNS=32; TOLLGATE_BIN=build/tollgate)
# Traffic to 127.0.0.1 only; every process started is stopped by its PID.
set -euo pipefail
cd "$(dirname "$0")/../.."
TOLLGATE_BIN=${TOLLGATE_BIN:-$PWD/build/tollgate}
ROUNDS=${ROUNDS:-3} SECONDS_EACH=${SECONDS_EACH:-8} CONNS=${CONNS:-32}
dir=$(mktemp -d /tmp/tollgate-tls-bench.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
cd "$dir"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout key.pem \
  -out cert.pem -days 2 -subj /CN=localhost -addext subjectAltName=DNS:localhost 2>/dev/null
CIPHER=ECDHE-ECDSA-AES128-GCM-SHA256
mkdir -p up nx www && echo -n ok > www/index.html
common="daemon off; master_process off; worker_processes 1; events { worker_connections 4096; }"
temps="client_body_temp_path DIR/b; proxy_temp_path DIR/p; fastcgi_temp_path DIR/f; uwsgi_temp_path DIR/u; scgi_temp_path DIR/s; access_log off; keepalive_requests 100000000;"
cat > up/nginx.conf <<NGX
$common pid $dir/up/pid; error_log $dir/up/error.log;
http { ${temps//DIR/$dir/up} server { listen 127.0.0.1:18601; root $dir/www; location / { try_files /index.html =404; } } }
NGX
cat > nx/nginx.conf <<NGX
$common pid $dir/nx/pid; error_log $dir/nx/error.log;
http { ${temps//DIR/$dir/nx}
  limit_req_zone \$http_authorization zone=keys:64m rate=100000000r/s;
  upstream up { server 127.0.0.1:18601; keepalive 64; }
  server {
    listen 127.0.0.1:18602 ssl;
    ssl_certificate $dir/cert.pem; ssl_certificate_key $dir/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3; ssl_ciphers $CIPHER;
    ssl_session_cache shared:tls:10m; ssl_session_tickets on;
    location / { limit_req zone=keys burst=100000000 nodelay; proxy_pass http://up;
                 proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
NGX
cat > tollgate.yaml <<YML
server:
  listen: 127.0.0.1:18603
  admin_listen: 127.0.0.1:18604
  threads: 1
  access_log: false
  top_offenders: false
  tls:
    certificates: [{cert_file: $dir/cert.pem, key_file: $dir/key.pem}]
    ciphers: $CIPHER
upstream: {url: "http://127.0.0.1:18601"}
store: {type: memory}
mode: enforce
plans:
  big: {limits: [{name: burst, algorithm: token_bucket, capacity: 100000000, refill_per_second: 100000000}]}
keys:
  - {key: bench-hot-key, id: hot, plan: big}
YML
for i in $(seq 1 10000); do echo "  - {key: bench-k$i, id: k$i, plan: big}"; done >> tollgate.yaml
cat > keys.lua <<'LUA'
local i = 0
request = function()
  i = i % 10000 + 1
  return wrk.format(nil, "/", {Authorization = "Bearer bench-k" .. i})
end
LUA
nginx -c "$dir/up/nginx.conf" -p "$dir/up" & pids+=($!)
nginx -c "$dir/nx/nginx.conf" -p "$dir/nx" & pids+=($!); nx_pid=$!
"$TOLLGATE_BIN" serve --config tollgate.yaml >/dev/null 2>tollgate.err & pids+=($!); tg_pid=$!
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }  # clock ticks
hz=$(getconf CLK_TCK)
for port in 18602 18603; do  # both answer before the first round
  for _ in $(seq 1 50); do
    curl -sfk -H 'Authorization: Bearer bench-k1' "https://127.0.0.1:$port/" >/dev/null && break
    sleep 0.2
  done
done
keepalive() {  # name pid port keys(hot|10k)
  local before after out rps
  local load=(-H 'Authorization: Bearer bench-hot-key')
  [[ $4 == 10k ]] && load=(-s keys.lua)
  before=$(cpu "$2")
  out=$(wrk -t1 -c"$CONNS" -d"${SECONDS_EACH}s" "${load[@]}" "https://127.0.0.1:$3/")
  after=$(cpu "$2")
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  local total=$(awk '/requests in/ {print $1}' <<<"$out")
  awk -v n="$1" -v k="$4" -v r="$rps" -v t="$total" -v c=$((after - before)) -v hz="$hz" \
    'BEGIN { printf "keepalive-%-4s %-9s %10.0f req/s %10.0f req/cpu-s\n", k, n, r, t / (c / hz) }'
}
handshakes() {  # name pid port mode(-new|-reuse)
  local before after out conns
  before=$(cpu "$2")
  out=$(openssl s_time -connect "127.0.0.1:$3" "$4" -time "$SECONDS_EACH" -cipher $CIPHER 2>&1 || true)
  after=$(cpu "$2")
  conns=$(awk '/connections in [0-9.]+s/ {print $1; exit}' <<<"$out")
  awk -v n="$1" -v m="$4" -v k="$conns" -v c=$((after - before)) -v hz="$hz" -v s="$SECONDS_EACH" \
    'BEGIN { printf "handshake%-6s %-9s %10.0f conn/s %10.0f conn/cpu-s\n", m, n, k / s, (c > 0 ? k / (c / hz) : 0) }'
}
for r in $(seq 1 "$ROUNDS"); do
  order=("nginx $nx_pid 18602" "tollgate $tg_pid 18603")
  ((r % 2 == 0)) && order=("${order[1]}" "${order[0]}")
  for k in hot 10k; do for t in "${order[@]}"; do keepalive $t $k; done; done
  for m in -new -reuse; do for t in "${order[@]}"; do handshakes $t $m; done; done
done
