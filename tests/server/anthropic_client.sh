#!/usr/bin/env bash
# ctest server_anthropic_client: starts kylin-server on a free loopback port with the e2e test
# checkpoint, installs the pinned @anthropic-ai/sdk npm client (npm ci) and runs check.mjs against it.
# Usage: anthropic_client.sh <kylin-server binary> <tests/data dir>
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

port="$(node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); })')"
"$bin" --model "$model" --port "$port" --ctx 1024 --threads 2 >"$work/server.log" 2>&1 &
pid=$!
healthy=""
for _ in $(seq 1 300); do
  if node -e 'fetch(process.argv[1]).then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))' \
       "http://127.0.0.1:$port/health"; then healthy=1; break; fi
  kill -0 "$pid" 2>/dev/null || { cat "$work/server.log" >&2; echo "kylin-server exited early" >&2; exit 1; }
  sleep 0.2
done
[[ -n "$healthy" ]] || { cat "$work/server.log" >&2; echo "kylin-server never became healthy" >&2; exit 1; }

cd "$here/anthropic-client"
npm ci --no-audit --no-fund --loglevel=error
# The SDK appends /v1/messages itself: the base URL is the server root.
KYLIN_SERVER_URL="http://127.0.0.1:$port" node check.mjs

kill -TERM "$pid"
status=0
wait "$pid" || status=$?
pid=""
[[ $status -eq 0 ]] || { cat "$work/server.log" >&2; echo "kylin-server exited with $status after SIGTERM" >&2; exit 1; }
echo "anthropic client check passed"
