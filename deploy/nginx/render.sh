#!/usr/bin/env bash
# Prints deploy/nginx/kylin.conf.in filled in: nginx listening on 127.0.0.1:LISTEN_PORT, its pid,
# logs and temp files under RUN_DIR, balancing the kylin-server replicas at HOST:PORT ...
# Usage: deploy/nginx/render.sh LISTEN_PORT RUN_DIR HOST:PORT [HOST:PORT ...]
# Then: nginx -c "$PWD/kylin.conf" (as root or not; it stays in the foreground: daemon off).
set -euo pipefail
(($# >= 3)) || { echo "usage: $0 LISTEN_PORT RUN_DIR HOST:PORT [HOST:PORT ...]" >&2; exit 2; }
listen="$1"
run_dir="$2"
shift 2
upstreams=""
for replica in "$@"; do
  # max_fails/fail_timeout: a replica that failed is left out for 5 s, then tried again.
  upstreams+="    server $replica max_fails=1 fail_timeout=5s;"$'\n'
done
template="$(dirname "$0")/kylin.conf.in"
awk -v listen="$listen" -v run_dir="$run_dir" -v upstreams="${upstreams%$'\n'}" '
  { gsub(/@LISTEN@/, listen); gsub(/@RUN_DIR@/, run_dir) }
  /^@UPSTREAMS@$/ { print upstreams; next }
  { print }' "$template"
