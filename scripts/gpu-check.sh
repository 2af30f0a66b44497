#!/usr/bin/env bash
# The CUDA backend on real hardware (a machine with an NVIDIA GPU and the CUDA toolkit): builds with
# -DKYLIN_CUDA=ON into build-gpu/ (needs the Debian packages of scripts/setup.sh), runs every
# reference checkpoint on --backend cuda against the float64 references with the emulated backend's
# bars (kylin-gpu-check: <= 1e-4 relative L2 with an f32 KV cache and greedy tokens identical, <= 2e-3
# with f16; q8/q4 weights within the CPU's agreement bars), the CLI on cpu and cuda (three sequences in one batch),
# compute-sanitizer's memcheck and racecheck where it is installed, then `kylin bench --backend cuda`.
# Usage: scripts/gpu-check.sh [--prebuilt DIR] [BENCH_MODEL_DIR]
#   --prebuilt DIR  use DIR's kylin, kylin-gpu-check and libkylin-cuda.so instead of building, for a
#                   GPU machine without the packages (docs/CUDA.md, "Running on a GPU"); the checkout
#                   must sit at the path DIR was built from, where kylin-gpu-check finds tests/data
#   BENCH_MODEL_DIR default: a random Qwen3-0.6B-shaped checkpoint
set -euo pipefail
cd "$(dirname "$0")/.."

bin=build-gpu/bin
if [ "${1:-}" = "--prebuilt" ]; then bin=$2; shift 2; fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader ||
  { echo "gpu-check: no NVIDIA GPU visible (nvidia-smi failed)" >&2; exit 1; }
if [ "$bin" = build-gpu/bin ]; then
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKYLIN_CUDA=ON -DKYLIN_BUILD_TESTS=ON \
        -DKYLIN_BUILD_BENCHMARKS=OFF -DKYLIN_BUILD_EXAMPLES=ON >/dev/null
  cmake --build build-gpu -j"$(nproc)" --target kylin_cli kylin_gpu_check kylin_cuda_module
fi

echo "== every reference checkpoint on --backend cuda"
"$bin/kylin-gpu-check"

echo "== kylin generate --backend cuda == --backend cpu (greedy, three sequences in one batch)"
model=tests/data/models/small-qwen3
gen() { "$bin/kylin" generate --model "$model" --tokens 1,2,3,4 --tokens 9,8 --tokens 5,6,7,8,9,10,11 -n 12 --greedy --format json "$@"; }
cpu=$(gen --backend cpu)
gpu=$(gen --backend cuda)
[ "$cpu" = "$gpu" ] || { echo "gpu-check: greedy tokens differ: cpu $cpu, cuda $gpu" >&2; exit 1; }
echo "identical: $gpu"

sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -n "$sanitizer" ]; then
  echo "== compute-sanitizer memcheck and racecheck"
  mem=$("$sanitizer" --tool memcheck --leak-check full "$bin/kylin" generate --model "$model" --tokens 1,2,3,4 --tokens 9,8 -n 3 \
        --greedy --backend cuda 2>&1) || true
  grep -q "ERROR SUMMARY: 0 errors" <<<"$mem" || { echo "$mem" >&2; echo "gpu-check: memcheck found errors" >&2; exit 1; }
  race=$("$sanitizer" --tool racecheck "$bin/kylin" generate --model tests/data/models/tiny-qwen3-untied --tokens 1,2,3,4 -n 2 \
         --greedy --backend cuda 2>&1) || true
  grep -q "RACECHECK SUMMARY: 0 hazards" <<<"$race" || { echo "$race" >&2; echo "gpu-check: racecheck found hazards" >&2; exit 1; }
  echo "memcheck: 0 errors; racecheck: 0 hazards"
else
  echo "== compute-sanitizer not installed: memcheck and racecheck skipped"
fi

echo "== kylin bench --backend cuda"
bench_model=${1:-}
if [ -z "$bench_model" ]; then
  bench_model=$(mktemp -d)/qwen3-0.6b
  "$bin/kylin" make-test-model --preset qwen3-0.6b --seed 1 --out "$bench_model" >/dev/null
fi
for weights in stored q8 q4; do
  "$bin/kylin" bench --model "$bench_model" -p 512 -n 128 -r 3 --backend cuda --weights "$weights" --format json
done
for batch in 8 32; do
  "$bin/kylin" bench --model "$bench_model" -p 0 -n 64 -r 3 --backend cuda --batch "$batch" --format json
done
echo "gpu-check: passed"
