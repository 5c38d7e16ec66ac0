#!/usr/bin/env bash
# The fuzzers' short run in the test suite (ctest -L fuzz): builds them into the build dir and
# runs each for a few seconds over its corpus (tests/fuzz/run.sh). Without clang-14 it installs
# nothing and reports a skip (77, CTest's SKIP_RETURN_CODE for these tests).
# Usage: tests/fuzz/smoke.sh OUT_DIR [SECONDS] [NAME...]
set -euo pipefail
if ! command -v clang++-14 >/dev/null || ! compgen -G "/usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-*.a" >/dev/null; then
  echo "tests/fuzz/smoke.sh: clang-14 or libclang-rt-14-dev is not installed: skipped" >&2
  exit 77
fi
out=$1
shift
FUZZ_DIR=$out exec "$(dirname "$0")/run.sh" "${@:-10}"
