#!/usr/bin/env bash
# HTTP/2 over TLS beside nginx (issue 34): tollgate and nginx (`http2`, `limit_req`), each one
# thread / one worker, terminating TLS with the same ECDSA P-256 certificate and cipher and
# proxying to the same plaintext upstream (an nginx answering "ok"). Side by side in one run,
# ROUNDS rounds alternating the order, h2load with CONNS connections x STREAMS concurrent
# streams:
#   proxied: a limit no request reaches (every request decided and proxied), one hot key;
#   429:     a key whose limit is spent (every request answered by the limiter);
# each as requests per server-CPU-second (utime+stime of the server process from /proc),
# requests per second, and the p99 of h2load's per-request times (--log-file). First, on the
# fresh processes, the memory of IDLE idle HTTP/2 connections (RSS after they opened, minus
# before), per connection.
# h2load sends one set of headers, so there is no 10,000-keys run here (bench/tls/run.sh has one
# over HTTP/1.1).
# Usage: bench/http2/run.sh   (ROUNDS=3 REQUESTS=200000 CONNS=10 STREAMS=100 IDLE=500)
# Traffic to 127.0.0.1 only; every process started is stopped by its PID.
set -euo pipefail
cd "$(dirname "$0")/../.."
TOLLGATE_BIN=${TOLLGATE_BIN:-$PWD/build/tollgate}
ROUNDS=${ROUNDS:-3} REQUESTS=${REQUESTS:-200000} CONNS=${CONNS:-10} STREAMS=${STREAMS:-100}
IDLE=${IDLE:-500}
dir=$(mktemp -d /tmp/tollgate-h2-bench.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
cd "$dir"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout key.pem \
  -out cert.pem -days 2 -subj /CN=localhost -addext subjectAltName=DNS:localhost 2>/dev/null
CIPHER=ECDHE-ECDSA-AES128-GCM-SHA256
mkdir -p up nx www && echo -n ok > www/index.html
common="daemon off; master_process off; worker_processes 1; worker_rlimit_nofile 65536; events { worker_connections 8192; }"
temps="client_body_temp_path DIR/b; proxy_temp_path DIR/p; fastcgi_temp_path DIR/f; uwsgi_temp_path DIR/u; scgi_temp_path DIR/s; access_log off; keepalive_requests 100000000;"
cat > up/nginx.conf <<NGX
$common pid $dir/up/pid; error_log $dir/up/error.log;
http { ${temps//DIR/$dir/up} server { listen 127.0.0.1:18701 backlog=4096; root $dir/www; location / { try_files /index.html =404; } } }
NGX
cat > nx/nginx.conf <<NGX
$common pid $dir/nx/pid; error_log $dir/nx/error.log;
http { ${temps//DIR/$dir/nx}
  limit_req_zone \$http_authorization zone=keys:64m rate=100000000r/s;
  limit_req_zone \$http_authorization zone=spent:1m rate=1r/m;
  limit_req_status 429;
  upstream up { server 127.0.0.1:18701; keepalive 256; }
  server {
    listen 127.0.0.1:18702 ssl http2;
    ssl_certificate $dir/cert.pem; ssl_certificate_key $dir/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3; ssl_ciphers $CIPHER;
    location /spent { limit_req zone=spent nodelay; proxy_pass http://up; }
    location / { limit_req zone=keys burst=100000000 nodelay; proxy_pass http://up;
                 proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
NGX
cat > tollgate.yaml <<YML
server:
  listen: 127.0.0.1:18703
  admin_listen: 127.0.0.1:18704
  threads: 1
  access_log: false
  top_offenders: false
  tls:
    certificates: [{cert_file: $dir/cert.pem, key_file: $dir/key.pem}]
    ciphers: $CIPHER
upstream: {url: "http://127.0.0.1:18701", max_connections: 256, max_client_share_percent: 100}
store: {type: memory}
mode: enforce
plans:
  big: {limits: [{name: burst, algorithm: token_bucket, capacity: 100000000, refill_per_second: 100000000}]}
  spent: {limits: [{name: burst, algorithm: token_bucket, capacity: 1, refill_per_second: 0.0001}]}
keys:
  - {key: bench-hot-key, id: hot, plan: big}
  - {key: bench-spent-key, id: spent, plan: spent}
YML
nginx -c "$dir/up/nginx.conf" -p "$dir/up" & pids+=($!)
nginx -c "$dir/nx/nginx.conf" -p "$dir/nx" & pids+=($!); nx_pid=$!
"$TOLLGATE_BIN" serve --config tollgate.yaml >/dev/null 2>tollgate.err & pids+=($!); tg_pid=$!
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }  # clock ticks
rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }  # kB
hz=$(getconf CLK_TCK)
for port in 18702 18703; do  # both answer before the first round
  for _ in $(seq 1 50); do
    curl -sfk --http2 -H 'Authorization: Bearer bench-hot-key' "https://127.0.0.1:$port/" >/dev/null && break
    sleep 0.2
  done
done
# The spent key's one token goes before the runs.
curl -sk -o /dev/null -H 'Authorization: Bearer bench-spent-key' https://127.0.0.1:18703/spent
curl -sk -o /dev/null -H 'Authorization: Bearer bench-spent-key' https://127.0.0.1:18702/spent
load() {  # name pid port path key
  local before after out rps
  before=$(cpu "$2")
  out=$(h2load -n "$REQUESTS" -c "$CONNS" -m "$STREAMS" --log-file=lat.log \
          -H "Authorization: Bearer $5" "https://127.0.0.1:$3$4")
  after=$(cpu "$2")
  rps=$(awk '/finished in/ {print $4}' <<<"$out")
  local done_n=$(awk '/^requests:/ {print $6}' <<<"$out")
  local codes=$(awk '/^status codes:/ {print $3 "/" $7 "/" $9}' <<<"$out")
  local p99=$(sort -n -k3 lat.log | awk '{a[NR]=$3} END {print a[int(NR*0.99)]/1000}')
  awk -v n="$1" -v p="$4" -v r="$rps" -v t="$done_n" -v c=$((after - before)) -v hz="$hz" \
    -v q="$p99" -v s="$codes" \
    'BEGIN { printf "%-8s %-9s %10.0f req/s %10.0f req/cpu-s  p99 %7.2f ms  2xx/4xx/5xx %s\n", (p == "/" ? "proxied" : "429"), n, r, t / (c / hz), q, s }'
}
cat > idle.py <<'PY'
import socket, ssl, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
ctx.set_alpn_protocols(["h2"])
held = []
for _ in range(n):
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="localhost")
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
    held.append(s)
time.sleep(6)
PY
idle() {  # name pid port: IDLE HTTP/2 connections held open, RSS per connection
  local before after
  before=$(rss "$2")
  /usr/bin/python3 idle.py "$3" "$IDLE" &
  local py=$!
  sleep 4
  after=$(rss "$2")
  wait "$py" || true
  awk -v n="$1" -v b="$before" -v a="$after" -v k="$IDLE" \
    'BEGIN { printf "idle     %-9s %10.1f KiB per idle HTTP/2 connection (%d connections)\n", n, (a - b) / k, k }'
}
idle nginx "$nx_pid" 18702
idle tollgate "$tg_pid" 18703
for r in $(seq 1 "$ROUNDS"); do
  order=("nginx $nx_pid 18702" "tollgate $tg_pid 18703")
  ((r % 2 == 0)) && order=("${order[1]}" "${order[0]}")
  for t in "${order[@]}"; do load $t / bench-hot-key; done
  for t in "${order[@]}"; do load $t /spent bench-spent-key; done
done
