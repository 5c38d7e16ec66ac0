#!/usr/bin/env bash
# Fuzzes the parsers of untrusted input with libFuzzer (clang-14, ASan+UBSan), each for SECONDS
# seconds (default 60), starting from its checked-in corpus tests/fuzz/corpus/NAME (copied to a
# temp dir: the repo is not modified; copy an input worth keeping into it by hand):
#   request_head  ParseRequestHead against Beast's parser (src/http/request_head.cpp)
#   target        CanonicalizeTarget: its contract, and Boost.URL's normalisation
#                 (src/util/target.cpp), and the folded path of routes (src/util/path_fold.cpp)
#   admin_guard   AdminGuard's Host allow-list and token (src/http/admin_guard.cpp)
#   chunked_framing  ChunkedFraming: whole and byte by byte alike, never looser than Beast's
#                 parser (src/http/chunked_framing.cpp)
#   upstream_head HeadEnd and ParseSimpleHead against Beast's response parser
#                 (src/http/upstream_head.cpp)
#   h2_head       RenderH1Request: an HTTP/2 header block as one HTTP/1.1 head, nothing more
#                 (src/http/h2_head.cpp)
# A fuzzer is rebuilt when a source or a header is newer than it. Crashes are written to
# FUZZ_DIR (default /tmp/tollgate-fuzz) as NAME-crash-*; replay one with
# `$FUZZ_DIR/NAME_fuzz FILE`. Needs clang-14 and libclang-rt-14-dev (scripts/install-deps.sh).
# Usage: tests/fuzz/run.sh [SECONDS] [NAME...]   (tests/fuzz/smoke.sh runs it from ctest, 10 s each)
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}
shift || true
names=("$@")
[[ ${#names[@]} -eq 0 ]] && names=(request_head target admin_guard chunked_framing upstream_head h2_head)
out=${FUZZ_DIR:-/tmp/tollgate-fuzz}
mkdir -p "$out"

if ! command -v clang++-14 >/dev/null; then
  echo "tests/fuzz/run.sh: clang++-14 not found; install clang-14 and libclang-rt-14-dev" >&2
  exit 1
fi

# The sources of each fuzzer, and the extra libFuzzer flags it runs with.
sources() {
  case $1 in
    request_head) echo tests/fuzz/request_head_fuzz.cpp src/http/request_head.cpp ;;
    target) echo tests/fuzz/target_fuzz.cpp src/util/target.cpp src/util/path_fold.cpp ;;
    admin_guard) echo tests/fuzz/admin_guard_fuzz.cpp src/http/admin_guard.cpp src/util/digest.cpp ;;
    chunked_framing) echo tests/fuzz/chunked_framing_fuzz.cpp src/http/chunked_framing.cpp ;;
    upstream_head) echo tests/fuzz/upstream_head_fuzz.cpp src/http/upstream_head.cpp ;;
    h2_head) echo tests/fuzz/h2_head_fuzz.cpp src/http/h2_head.cpp ;;
    *) echo "tests/fuzz/run.sh: unknown fuzzer '$1' (request_head, target, admin_guard, chunked_framing, upstream_head, h2_head)" >&2
       exit 2 ;;
  esac
}
run_flags() {
  case $1 in
    target) echo "-dict=tests/fuzz/target.dict" ;;
  esac
}

build() {
  local name=$1 bin="$out/$1_fuzz"
  local srcs
  read -r -a srcs <<<"$(sources "$name")"
  if [[ -x $bin && -z $(find include src/http/*.hpp "${srcs[@]}" tests/fuzz/run.sh -newer "$bin" -print -quit) ]]; then
    return 0
  fi
  echo "tests/fuzz/run.sh: building $bin" >&2
  # Boost.URL is compiled into target_fuzz (boost/url/src.hpp), with the sanitizers.
  clang++-14 -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -DBOOST_ASIO_NO_DEPRECATED -Iinclude -Isrc "${srcs[@]}" -o "$bin.tmp" -lcrypto
  mv "$bin.tmp" "$bin"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=()
for name in "${names[@]}"; do
  sources "$name" >/dev/null
  build "$name"
  cp -r "tests/fuzz/corpus/$name" "$tmp/$name"
  flags=()
  read -r -a flags <<<"$(run_flags "$name")"
  echo "tests/fuzz/run.sh: $name for ${seconds}s" >&2
  if ! "$out/${name}_fuzz" -max_total_time="$seconds" -max_len=4096 -timeout=10 -print_final_stats=1 \
       -artifact_prefix="$out/$name-" "${flags[@]}" "$tmp/$name" 2>"$tmp/$name.log"; then
    failed+=("$name")
    grep -v '^#[0-9]' "$tmp/$name.log" | tail -n 60 >&2
  fi
  grep -E '^(Done|stat::number_of_executed_units|stat::average_exec_per_sec)' "$tmp/$name.log" >&2 || true
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "tests/fuzz/run.sh: FAILED: ${failed[*]} (inputs in $out)" >&2
  exit 1
fi
