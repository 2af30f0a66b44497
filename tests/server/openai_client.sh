#!/usr/bin/env bash
# ctest server_openai_client: starts kylin-server on a free loopback port with each e2e test
# checkpoint (Qwen3, and Qwen3.5 with its official template and XML tool calls; and one with --task
# embed on the embedding checkpoint; the Qwen3.5 one, with its vision tower, also gets an image), installs the pinned openai npm client (npm ci) and runs
# check.mjs against them.
# Usage: openai_client.sh <kylin-server binary> <tests/data dir>
set -euo pipefail
bin="$1"
data="$2"
here="$(cd "$(dirname "$0")" && pwd)"
[[ -x "$bin" ]] || { echo "kylin-server not built: $bin" >&2; exit 1; }
source "$here/client_servers.sh"

cd "$here/openai-client"
npm ci --no-audit --no-fund --loglevel=error
serve e2e-qwen3-embedding --ctx 256
embed_port=$port
embed_pid=$pid
serve e2e-qwen3 --ctx 1024
KYLIN_SERVER_URL="http://127.0.0.1:$port/v1" KYLIN_EMBED_URL="http://127.0.0.1:$embed_port/v1" node check.mjs
stop
# Qwen3.5 thinks unless told not to: the check's plain answers ask for none
serve e2e-qwen35 --ctx 1024
KYLIN_SERVER_URL="http://127.0.0.1:$port/v1" KYLIN_NO_THINKING=1 KYLIN_IMAGE_FILE="$data/images/a_64x48.png" node check.mjs
stop
pid=$embed_pid
stop
echo "openai client check passed"
