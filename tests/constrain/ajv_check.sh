#!/usr/bin/env bash
# ctest constrain_ajv: samples texts from the JSON-schema grammars of schema_samples_test.cpp
# (test_constrain writes them to a file) and validates each with ajv + ajv-formats (pinned in
# ajv-check/package-lock.json, installed with npm ci).
# Usage: ajv_check.sh <test_constrain binary>
set -euo pipefail
bin="$1"
here="$(cd "$(dirname "$0")" && pwd)"
[[ -x "$bin" ]] || { echo "test_constrain not built: $bin" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

KYLIN_SCHEMA_SAMPLES="$work/samples.jsonl" "$bin" -tc="texts sampled from grammars*"
cd "$here/ajv-check"
npm ci --no-audit --no-fund --loglevel=error
node validate.mjs "$work/samples.jsonl"
