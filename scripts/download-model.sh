#!/usr/bin/env bash
# Fetches a model directory from the Hugging Face hub with curl (resumable, with progress):
#   scripts/download-model.sh Qwen/Qwen3-0.6B [DIR]     (DIR defaults to models/<name>)
# Set HF_TOKEN for gated repositories, HF_ENDPOINT for a mirror.
set -euo pipefail

repo=${1:?usage: scripts/download-model.sh ORG/NAME [DIR]}
dir=${2:-models/${repo##*/}}
endpoint=${HF_ENDPOINT:-https://huggingface.co}
auth=()
[ -n "${HF_TOKEN:-}" ] && auth=(-H "Authorization: Bearer $HF_TOKEN")

# fetch FILE [optional]: resumes a partial download (-C -), fails on HTTP errors.
fetch() {
  local file=$1 optional=${2:-}
  local url="$endpoint/$repo/resolve/main/$file"
  echo "download-model: $file" >&2
  if ! curl -fL --retry 3 --connect-timeout 15 -C - --progress-bar "${auth[@]}" -o "$dir/$file.part" "$url"; then
    rm -f "$dir/$file.part"
    [ -n "$optional" ] && return 0
    echo "download-model: cannot fetch $url (offline, or no such repository/file)." >&2
    echo "download-model: copy a model directory by hand and run with KYLIN_MODEL=DIR instead." >&2
    exit 1
  fi
  mv "$dir/$file.part" "$dir/$file"
}

mkdir -p "$dir"
if ! curl -fsS --connect-timeout 15 -o /dev/null "${auth[@]}" "$endpoint/$repo/resolve/main/config.json"; then
  echo "download-model: $endpoint is not reachable from this machine (or $repo does not exist)." >&2
  echo "download-model: copy a model directory here by hand and run with KYLIN_MODEL=DIR instead." >&2
  exit 1
fi
for f in config.json generation_config.json tokenizer.json tokenizer_config.json; do
  [ -f "$dir/$f" ] || fetch "$f" $([ "$f" = config.json ] || echo optional)
done
# Single file, or the shards an index names.
if fetch model.safetensors.index.json optional && [ -f "$dir/model.safetensors.index.json" ]; then
  for shard in $(grep -o '"[^"]*\.safetensors"' "$dir/model.safetensors.index.json" | tr -d '"' | sort -u); do
    [ -f "$dir/$shard" ] || fetch "$shard"
  done
else
  [ -f "$dir/model.safetensors" ] || fetch model.safetensors
fi
echo "$dir"
