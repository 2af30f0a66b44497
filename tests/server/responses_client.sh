#!/usr/bin/env bash
# ctest server_responses_client: starts kylin-server on a free loopback port with the e2e test
# checkpoint, installs the pinned Responses API clients (openai, @openai/agents, @ai-sdk/openai;
# npm ci of responses-client/package-lock.json) and runs responses-client/check.mjs against it.
# Usage: responses_client.sh <kylin-server binary> <tests/data dir>
set -euo pipefail
bin="$1"
data="$2"
here="$(cd "$(dirname "$0")" && pwd)"
[[ -x "$bin" ]] || { echo "kylin-server not built: $bin" >&2; exit 1; }

work="$(mktemp -d)"
pid=""
cleanup() {
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

model="$work/e2e-qwen3"
mkdir "$model"
ln -s "$data"/models/e2e-qwen3-fullvocab/* "$model"/
ln -s "$data"/qwen3-tokenizer/tokenizer.json "$data"/qwen3-tokenizer/tokenizer_config.json "$model"/

# node is needed for the check anyway; it also picks the free port and polls /health.
port="$(node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); })')"
"$bin" --model "$model" --port "$port" --ctx 2048 --threads 2 >"$work/server.log" 2>&1 &
pid=$!
wait_healthy() {  # port pid log
  for _ in $(seq 1 300); do
    if node -e 'fetch(process.argv[1]).then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))' \
         "http://127.0.0.1:$1/health"; then return 0; fi
    kill -0 "$2" 2>/dev/null || { cat "$3" >&2; echo "kylin-server exited early" >&2; exit 1; }
    sleep 0.2
  done
  cat "$3" >&2; echo "kylin-server never became healthy" >&2; exit 1
}
wait_healthy "$port" "$pid" "$work/server.log"

cd "$here/responses-client"
npm ci --no-audit --no-fund --loglevel=error --fetch-timeout=60000 --fetch-retries=3  # a stalled registry fails the test instead of hanging it
KYLIN_SERVER_URL="http://127.0.0.1:$port/v1" node check.mjs || { tail -n 40 "$work/server.log" >&2; exit 1; }

kill -TERM "$pid"
status=0
wait "$pid" || status=$?
pid=""
[[ $status -eq 0 ]] || { echo "kylin-server exited with $status after SIGTERM" >&2; exit 1; }
echo "responses clients check passed"
