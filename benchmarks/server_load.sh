#!/usr/bin/env bash
# The server load benchmark of docs/SERVER.md: 16 concurrent streaming clients against kylin-server
# on MODEL (e.g. `kylin make-test-model --preset qwen3-0.6b --tokenizer-from tests/data/qwen3-tokenizer`),
# once with --parallel 1 and once with --parallel 8, loopback only, bounded (each client one
# request of MAX_TOKENS). Prints one JSON line per run with the server's idle and after-load RSS.
# Usage: [SERVER_FLAGS="--no-mmap"] benchmarks/server_load.sh MODEL [CLIENTS=16] [MAX_TOKENS=64] [THREADS=2]
# (SERVER_FLAGS: more kylin-server options for both runs, split on spaces)
set -euo pipefail
cd "$(dirname "$0")/.."
model="$1"
clients="${2:-16}"
max_tokens="${3:-64}"
threads="${4:-2}"
read -r -a extra <<<"${SERVER_FLAGS:-}"
bin=build/bin
[[ -x $bin/kylin-server && -x $bin/server_load ]] || { echo "build first: kylin-server and server_load" >&2; exit 1; }

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

for parallel in 1 8; do
  port=$((20000 + RANDOM % 20000))
  "$bin/kylin-server" --model "$model" --port "$port" --threads "$threads" --ctx 1024 --parallel "$parallel" \
    --queue 64 ${extra[@]+"${extra[@]}"} >"/tmp/kylin-load-$parallel.log" 2>&1 &
  pid=$!
  trap 'kill $pid 2>/dev/null || true' EXIT
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    sleep 0.1
  done
  # Warm-up (page cache, first-touch of buffers), then the idle baseline.
  "$bin/server_load" --port "$port" --clients 1 --max-tokens 8 >/dev/null
  idle=$(rss_kib "$pid")
  result=$("$bin/server_load" --port "$port" --clients "$clients" --max-tokens "$max_tokens")
  sleep 1
  after=$(rss_kib "$pid")
  echo "{\"parallel\": $parallel, \"idle_rss_kib\": $idle, \"after_rss_kib\": $after, \"load\": $result}"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  trap - EXIT
done
