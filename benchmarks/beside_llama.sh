#!/usr/bin/env bash
# kylin bench beside llama.cpp's llama-bench on the same checkpoints, interleaved: each round runs
# every pair back to back, the two engines taking turns at going first, and prints one line per
# pair with both speeds and their ratio (docs/PERFORMANCE.md, "How to measure": building the peer
# and converting the checkpoints). Nothing of llama.cpp is part of this repository.
#
#   benchmarks/beside_llama.sh --llama DIR [--kylin BIN] [--rounds N] [-p P] [-n N] [-r R] [-t T] \
#       MODEL_DIR:F.gguf[:q8|q4] ...
#
# DIR holds llama-bench (and its shared libraries); MODEL_DIR is a kylin checkpoint and F.gguf the
# same weights converted (for :q8 / :q4, quantized with `llama-quantize --pure` to Q8_0 / Q4_0).
set -euo pipefail

kylin=build/bin/kylin llama='' rounds=1 p=512 n=64 r=2 t=2 pairs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --llama) llama=$2; shift 2 ;;
    --kylin) kylin=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -p) p=$2; shift 2 ;;
    -n) n=$2; shift 2 ;;
    -r) r=$2; shift 2 ;;
    -t) t=$2; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    -*) echo "beside_llama.sh: unknown option $1" >&2; exit 2 ;;
    *) pairs+=("$1"); shift ;;
  esac
done
[ -x "$llama/llama-bench" ] || { echo "beside_llama.sh: --llama DIR must hold llama-bench" >&2; exit 2; }
[ -x "$kylin" ] || { echo "beside_llama.sh: no kylin at $kylin (--kylin BIN)" >&2; exit 2; }
[ ${#pairs[@]} -gt 0 ] || { echo "beside_llama.sh: name at least one MODEL_DIR:F.gguf pair" >&2; exit 2; }

err=$(mktemp)
trap 'rm -f "$err"' EXIT
failed() {  # what failed; its stderr is in $err
  echo "beside_llama.sh: $1 failed:" >&2
  cat "$err" >&2
  exit 1
}
run_kylin() {  # MODEL_DIR [q8|q4]
  "$kylin" bench --model "$1" ${2:+--weights "$2"} -p "$p" -n "$n" -r "$r" -t "$t" --format json 2>"$err" ||
    failed "kylin bench --model $1"
}
run_llama() {  # F.gguf
  LD_LIBRARY_PATH="$llama${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$llama/llama-bench" -m "$1" -p "$p" -n "$n" -r "$r" -t "$t" -o json 2>"$err" ||
    failed "llama-bench -m $1"
}

for ((round = 1; round <= rounds; ++round)); do
  echo "# round $round, $(date -u +%H:%M:%S) UTC, kylin first: $([ $((round % 2)) = 1 ] && echo yes || echo no)"
  for pair in "${pairs[@]}"; do
    IFS=: read -r model gguf weights <<< "$pair"
    if [ $((round % 2)) = 1 ]; then k=$(run_kylin "$model" "$weights"); l=$(run_llama "$gguf")
    else l=$(run_llama "$gguf"); k=$(run_kylin "$model" "$weights"); fi
    python3 - "$pair" "$k" "$l" <<'PY'
import json, sys
name, k, l = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
def llama(key):  # llama-bench reports a prompt test (n_gen 0) and a generation test (n_prompt 0)
    rows = [x["avg_ts"] for x in l if x[key] > 0 and x["n_prompt" if key == "n_gen" else "n_gen"] == 0]
    return rows[0] if rows else None
parts = [name]
for what, ours, theirs in (("pp", k.get("pp_tok_s"), llama("n_prompt")), ("tg", k.get("tg_tok_s"), llama("n_gen"))):
    if ours and theirs:
        parts.append(f"{what} kylin {ours:.1f} llama.cpp {theirs:.1f} = {ours / theirs:.2f}x")
if k.get("tg_roofline_fraction"):
    parts.append(f"kylin tg/roofline {k['tg_roofline_fraction']:.2f} (bandwidth {k['bandwidth_gb_s']:.0f} GB/s)")
if k.get("pp_compute_fraction"):
    parts.append(f"kylin pp/FMA peak {k['pp_compute_fraction']:.2f} ({k['compute_gflops']:.0f} GFLOP/s)")
print(" | ".join(parts), flush=True)
PY
  done
done
