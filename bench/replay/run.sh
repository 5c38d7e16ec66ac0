#!/usr/bin/env bash
# tollgate replay's speed: lines per second on one core (docs/benchmarks.md, "Replay").
#   bench/replay/run.sh [LINES]
# Generates the log and candidate once (bench/replay/generate.py, 5,000,000 lines over 10,000
# keys by default) into BENCH_DIR (/tmp/tollgate-replay-bench), then times ROUNDS (3) runs of
#   taskset -c 0 tollgate replay --config candidate.yaml --log access.jsonl --format json
# and prints each run's wall time and lines/s, and the median. Knobs: TOLLGATE_BIN
# (build/tollgate), BENCH_DIR, ROUNDS.
set -euo pipefail
cd "$(dirname "$0")/../.."
lines=${1:-5000000}
bin=${TOLLGATE_BIN:-build/tollgate}
dir=${BENCH_DIR:-/tmp/tollgate-replay-bench}
rounds=${ROUNDS:-3}
if [[ ! -s $dir/access.jsonl || $(wc -l <"$dir/access.jsonl") -ne $lines ]]; then
  python3 bench/replay/generate.py "$dir" --lines "$lines"
fi
rates=()
for i in $(seq "$rounds"); do
  start=$(date +%s.%N)
  taskset -c 0 "$bin" replay --config "$dir/candidate.yaml" --log "$dir/access.jsonl" \
    --format json >"$dir/report.json"
  end=$(date +%s.%N)
  rate=$(python3 -c "print(int($lines / ($end - $start)))")
  echo "run $i: $(python3 -c "print(round($end - $start, 3))") s, $rate lines/s"
  rates+=("$rate")
done
median=$(printf '%s\n' "${rates[@]}" | sort -n | sed -n "$(((rounds + 1) / 2))p")
echo "median: $median lines/s ($lines lines, $(nproc) CPUs, $(uname -m))"
python3 -c "
import json; r = json.load(open('$dir/report.json'))
print('report: %d lines, %d malformed, %d rejected, %d newly rejected, %d newly admitted' % (
    r['lines'], r['malformed']['count'], r['total']['rejected'], r['total']['newly_rejected'],
    r['total']['newly_admitted']))"
