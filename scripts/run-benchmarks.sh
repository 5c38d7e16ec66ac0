#!/usr/bin/env bash
# Runs the Google Benchmark programs of a build and prints the exact commands it runs.
#
#   scripts/run-benchmarks.sh [BUILD_DIR]     (default: build)
#
# Each benchmark runs 3 times and only the aggregates (mean, median, stddev, cv) are reported;
# docs/benchmarks.md quotes the medians. Single-threaded benchmarks are pinned to one CPU with
# taskset (when present) so that the scheduler does not move them between cores; the 2-thread
# benchmarks get every CPU. JSON results go to BUILD_DIR/bench-results/.
# Build with -DCMAKE_BUILD_TYPE=RelWithDebInfo (or Release) first.
set -euo pipefail

build_dir=${1:-build}
bench_dir="$build_dir/bench"
out_dir="$build_dir/bench-results"
# The last CPU: CPU 0 takes most interrupts.
cpu=$(($(nproc) - 1))

for b in core_bench memory_store_bench; do
  if [[ ! -x $bench_dir/$b ]]; then
    echo "run-benchmarks: $bench_dir/$b not found; build with -DTOLLGATE_BENCH=ON" >&2
    exit 1
  fi
done
mkdir -p "$out_dir"

pin=()
if command -v taskset >/dev/null; then
  pin=(taskset -c "$cpu")
else
  echo "run-benchmarks: taskset not found; running unpinned" >&2
fi
common=(--benchmark_repetitions=3 --benchmark_report_aggregates_only=true)

run() {
  echo "+ $*"
  "$@"
  echo
}

run "${pin[@]}" "$bench_dir/core_bench" "${common[@]}" \
  --benchmark_out="$out_dir/core_bench.json" --benchmark_out_format=json
run "${pin[@]}" "$bench_dir/memory_store_bench" "${common[@]}" \
  '--benchmark_filter=threads:1|DependentLoadFloor' \
  --benchmark_out="$out_dir/memory_store_bench_1thread.json" --benchmark_out_format=json
run "$bench_dir/memory_store_bench" "${common[@]}" \
  '--benchmark_filter=threads:2' \
  --benchmark_out="$out_dir/memory_store_bench_2threads.json" --benchmark_out_format=json
