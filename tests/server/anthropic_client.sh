#!/usr/bin/env bash
# ctest server_anthropic_client: starts kylin-server on a free loopback port with each e2e test
# checkpoint (Qwen3, and Qwen3.5 with its official template and XML tool calls), installs the pinned
# @anthropic-ai/sdk npm client (npm ci) and runs check.mjs against them.
# Usage: anthropic_client.sh <kylin-server binary> <tests/data dir>
set -euo pipefail
bin="$1"
data="$2"
here="$(cd "$(dirname "$0")" && pwd)"
[[ -x "$bin" ]] || { echo "kylin-server not built: $bin" >&2; exit 1; }
source "$here/client_servers.sh"

cd "$here/anthropic-client"
npm ci --no-audit --no-fund --loglevel=error
for name in e2e-qwen3 e2e-qwen35; do
  serve "$name" --ctx 1024
  # The SDK appends /v1/messages itself: the base URL is the server root.
  image=""
  [[ "$name" == e2e-qwen35 ]] && image="$data/images/a_64x48.png"  # its vision tower takes an image
  KYLIN_SERVER_URL="http://127.0.0.1:$port" KYLIN_MODEL_NAME="$name" KYLIN_IMAGE_FILE="$image" node check.mjs || { tail -n 40 "$log" >&2; exit 1; }
  stop
done
echo "anthropic client check passed"
