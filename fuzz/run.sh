#!/usr/bin/env bash
# Fuzzes ParseRequestHead against Beast's parser with libFuzzer (clang-14, ASan+UBSan) for
# SECONDS seconds (default 60). Not part of the test suite: run by hand after changing
# src/http/request_head.cpp. Needs clang-14 and libclang-rt-14-dev.
# Usage: fuzz/run.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${FUZZ_DIR:-/tmp/tollgate-fuzz}
mkdir -p "$out/corpus"
printf 'GET /v1/items?page=2 HTTP/1.1\r\nHost: api\r\nX-API-Key: k-1\r\nConnection: keep-alive\r\n\r\n' > "$out/corpus/seed1"
printf 'POST /x HTTP/1.0\r\nContent-Length: 0\r\nConnection: Keep-Alive, Upgrade\r\nA:\r\n\r\n' > "$out/corpus/seed2"
clang++-14 -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -DBOOST_ASIO_NO_DEPRECATED -Iinclude \
  fuzz/request_head_fuzz.cpp src/http/request_head.cpp -o "$out/request_head_fuzz"
"$out/request_head_fuzz" -max_total_time="${1:-60}" -max_len=4096 "$out/corpus"
