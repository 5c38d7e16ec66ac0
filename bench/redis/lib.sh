# Sourced by bench/redis/*.sh: start_redis [WRAPPER...] starts a throwaway redis-server on
# 127.0.0.1:$port (no persistence, in a temporary folder), through WRAPPER if given (taskset,
# valgrind), waits for it, and stops it by its PID on exit. Sets $dir and $redis; cli() talks to it.
start_redis() {
  dir=$(mktemp -d /tmp/tollgate-redis-bench.XXXXXX)
  "$@" redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
    --logfile "$dir/redis.log" 2>"$dir/stderr.log" &
  redis=$!
  trap 'kill "$redis" 2>/dev/null; wait "$redis" 2>/dev/null; rm -rf "$dir"' EXIT
  for _ in $(seq 300); do redis-cli -p "$port" PING >/dev/null 2>&1 && return; sleep 0.1; done
  echo "redis-server did not start on port $port" >&2
  return 1
}
cli() { redis-cli -p "$port" "$@"; }
