#!/usr/bin/env bash
# Installs the Debian 12 packages tollgate needs to build, test and run.
# Idempotent: installs only what is missing, and does nothing when all is there.
set -euo pipefail

packages=(
  g++ cmake ninja-build ccache make pkg-config
  libboost1.81-dev libboost-json1.81-dev libboost-url1.81-dev
  libyaml-cpp-dev libhiredis-dev libssl-dev openssl ca-certificates libabsl-dev
  libgtest-dev libgmock-dev libbenchmark-dev libxxhash-dev
  redis-server redis-sentinel redis-tools curl python3 python3-jsonschema python3-yaml
  python3-httpx  # a real HTTPS client (tests/integration/e2e/test_tls.py)
  python3-websockets  # a real WebSocket client and server (tests/integration/e2e/test_websocket.py)
  libnghttp2-dev  # HTTP/2 on the gateway listener (issue 34)
  python3-h2 nghttp2-client python3-grpcio  # HTTP/2 and gRPC clients (test_http2.py)
  libpq-dev postgresql nginx-light prometheus
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  clang-14 libclang-rt-14-dev clang-format clang-tidy
  libcli11-dev help2man dpkg-dev file man-db systemd
  chromium  # the live page's browser test (tests/integration/e2e/test_admin_ui.py)
)
if [[ ${TOLLGATE_EXTRA_PACKAGES:-} ]]; then
  read -r -a extra <<<"$TOLLGATE_EXTRA_PACKAGES"
  packages+=("${extra[@]}")
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

sudo=""
[[ $(id -u) -ne 0 ]] && sudo="sudo"
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
