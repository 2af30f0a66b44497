#!/usr/bin/env bash
# The main job: build the kylin CLI (and the one CPU kernel-set module it loads), get a model, and
# answer a prompt with `kylin run`; the build log goes to stderr, the answer to stdout.
#   bash scripts/run.sh ["prompt"]
# The model is $KYLIN_MODEL if set, else models/Qwen3-0.6B, downloaded from the Hugging Face hub
# on first use. Without either (no network), it says so and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
prompt=${1:-"Give me a short introduction to large language models."}

bash scripts/setup.sh run
model=${KYLIN_MODEL:-models/Qwen3-0.6B}
if [ ! -f "$model/config.json" ]; then
  if [ -n "${KYLIN_MODEL:-}" ]; then
    echo "run: KYLIN_MODEL=$model has no config.json" >&2
    exit 1
  fi
  echo "run: no model at $model; downloading Qwen/Qwen3-0.6B (about 1.5 GB)" >&2
  bash scripts/download-model.sh Qwen/Qwen3-0.6B "$model" >/dev/null || {
    echo "run: no model available. Set KYLIN_MODEL=DIR to a Hugging Face Qwen3/Qwen2 directory" >&2
    echo "run: (config.json, *.safetensors, tokenizer.json, tokenizer_config.json) and run again." >&2
    exit 1
  }
fi
exec build/bin/kylin run --model "$model" -p "$prompt"
