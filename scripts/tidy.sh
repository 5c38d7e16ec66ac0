#!/usr/bin/env bash
# clang-tidy with .clang-tidy's checks over every source file of src/, using the compile
# commands of a build directory (default: build). Fails on the first finding.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
[[ -f $build/compile_commands.json ]] || { echo "tidy: no $build/compile_commands.json" >&2; exit 1; }
git ls-files 'src/*.cpp' | xargs -P "$(nproc)" -n 4 clang-tidy -p "$build" --quiet
