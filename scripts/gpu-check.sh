#!/usr/bin/env bash
# The CUDA backend on real hardware (a machine with an NVIDIA GPU, the CUDA toolkit and the Debian
# packages of scripts/setup.sh): builds with -DKYLIN_CUDA=ON into build-gpu/, runs every reference
# checkpoint on --backend cuda against the float64 references (<= 1e-3 relative L2, greedy tokens
# identical; kylin-gpu-check), the CLI on one of them, then `kylin bench --backend cuda`.
# Usage: scripts/gpu-check.sh [BENCH_MODEL_DIR]   (default: a random Qwen3-0.6B-shaped checkpoint)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

nvidia-smi -L || { echo "gpu-check: no NVIDIA GPU visible (nvidia-smi failed)" >&2; exit 1; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKYLIN_CUDA=ON -DKYLIN_BUILD_TESTS=ON \
      -DKYLIN_BUILD_BENCHMARKS=OFF -DKYLIN_BUILD_EXAMPLES=ON >/dev/null
cmake --build build-gpu -j"$jobs" --target kylin_cli kylin_gpu_check

echo "== every reference checkpoint on --backend cuda"
build-gpu/bin/kylin-gpu-check

echo "== kylin generate --backend cuda == --backend cpu (greedy)"
model=tests/data/models/small-qwen3
cpu=$(build-gpu/bin/kylin generate --model "$model" --tokens 1,2,3,4 -n 12 --greedy --format json)
gpu=$(build-gpu/bin/kylin generate --model "$model" --tokens 1,2,3,4 -n 12 --greedy --format json --backend cuda)
[ "$cpu" = "$gpu" ] || { echo "gpu-check: greedy tokens differ: cpu $cpu, cuda $gpu" >&2; exit 1; }
echo "identical: $gpu"

echo "== kylin bench --backend cuda"
bench_model=${1:-}
if [ -z "$bench_model" ]; then
  bench_model=$(mktemp -d)/qwen3-0.6b
  build-gpu/bin/kylin make-test-model --preset qwen3-0.6b --seed 1 --out "$bench_model" --tokenizer-from tests/data/qwen3-tokenizer
fi
for weights in stored q8 q4; do
  build-gpu/bin/kylin bench --model "$bench_model" -p 512 -n 128 -r 3 --backend cuda --weights "$weights" --format json
done
echo "gpu-check: passed"
