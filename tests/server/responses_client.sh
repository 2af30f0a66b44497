#!/usr/bin/env bash
# ctest server_responses_client: starts kylin-server on a free loopback port with each e2e test
# checkpoint (Qwen3, and Qwen3.5 with its official template and XML tool calls), installs the pinned
# Responses API clients (openai, @openai/agents, @ai-sdk/openai; npm ci of
# responses-client/package-lock.json) and runs responses-client/check.mjs against them.
# Usage: responses_client.sh <kylin-server binary> <tests/data dir>
set -euo pipefail
bin="$1"
data="$2"
here="$(cd "$(dirname "$0")" && pwd)"
[[ -x "$bin" ]] || { echo "kylin-server not built: $bin" >&2; exit 1; }
source "$here/client_servers.sh"

cd "$here/responses-client"
npm ci --no-audit --no-fund --loglevel=error --fetch-timeout=60000 --fetch-retries=3  # a stalled registry fails the test instead of hanging it
for name in e2e-qwen3 e2e-qwen35; do
  serve "$name" --ctx 2048
  KYLIN_SERVER_URL="http://127.0.0.1:$port/v1" KYLIN_MODEL_NAME="$name" node check.mjs || { tail -n 40 "$log" >&2; exit 1; }
  stop
done
echo "responses clients check passed"
