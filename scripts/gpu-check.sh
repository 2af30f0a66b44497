#!/usr/bin/env bash
# The CUDA backend on real hardware (a machine with an NVIDIA GPU and the CUDA toolkit): builds with
# -DKYLIN_CUDA=ON into build-gpu/ (needs the Debian packages of scripts/setup.sh), runs every
# reference checkpoint on --backend cuda against the float64 references with the emulated backend's
# bars (kylin-gpu-check: <= 1e-4 relative L2 with an f32 KV cache and greedy tokens identical, <= 2e-3
# with f16; q8/q4 weights within the CPU's agreement bars), the CLI on cpu and cuda (three sequences in one batch),
# compute-sanitizer's memcheck and racecheck where it is installed, the matvec's bandwidth against
# the card's copy bandwidth, then `kylin bench --backend cuda` on the Qwen3-0.6B shape and on 12
# layers of the Qwen3-8B shape (random weights made here), and llama.cpp's llama-bench on the same
# checkpoints converted to GGUF when --llama gives its binaries, and the 0.6B shape with each speed
# switch (KYLIN_CUDA_OVERLAP/FUSE/GRAPHS/ATTN_SPLIT=0, KYLIN_CUDA_FUSE_NORM/ATTN_SPLIT=1) turned and
# with each step's logits downloaded (--download-logits), its top 20 picked on the device for
# top-k sampling (--top-k 20) or its token drawn from the whole row there (--draw, and from its
# top-p nucleus with --top-p 0.9). Results go to --out as JSON lines.
# Usage: scripts/gpu-check.sh [--prebuilt DIR] [--base DIR] [--out DIR] [--llama DIR] [--models DIR] [--steps LIST]
#   --prebuilt DIR  use DIR's kylin, kylin-gpu-check, libkylin-backend-cuda.so and libkylin-cpu-*.so instead of building, for a
#                   GPU machine without the packages; kylin-gpu-check finds tests/data at the path
#                   of the checkout it was built from (link it there)
#   --base DIR      another build's kylin and its modules (e.g. the last commit measured): every
#                   bench runs on both, alternating, in two rounds, each JSON line tagged with its
#                   "build" (GPU time drifts: only builds compared in one run compare); the
#                   switch variants run on this build only
#   --out DIR       where log.txt, matvec.jsonl, bench.jsonl and llama.jsonl go (default gpu-check-out/)
#   --llama DIR     llama-bench, llama-quantize, gguf-py/, convert_qwen3_gguf.py and tokenizer/ (the
#                   Qwen3 tokenizer.json) of a llama.cpp CUDA build (docs/CUDA.md says how it was made)
#   --models DIR    where the random checkpoints are made and kept (default: a temporary folder)
#   --steps LIST    comma-separated subset of check,matvec,bench,variants,bench8b,llama,llama8b (default: all, in that order)
set -euo pipefail
cd "$(dirname "$0")/.."

bin=build-gpu/bin prebuilt=0 base="" out=gpu-check-out llama="" models="" steps=check,matvec,bench,variants,bench8b,llama,llama8b
while [ $# -gt 0 ]; do
  case $1 in
    --prebuilt) bin=$2; prebuilt=1; shift 2 ;;
    --base) base=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --llama) llama=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader ||
  { echo "gpu-check: no NVIDIA GPU visible (nvidia-smi failed)" >&2; exit 1; }
if [ "$prebuilt" = 0 ]; then
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKYLIN_CUDA=ON -DKYLIN_BUILD_TESTS=ON \
        -DKYLIN_BUILD_BENCHMARKS=OFF -DKYLIN_BUILD_EXAMPLES=ON >/dev/null
  cmake --build build-gpu -j"$(nproc)" --target kylin_cli kylin_gpu_check kylin_cuda_module
fi
failed=0
step() { [[ ",$steps," == *",$1,"* ]]; }
work=${models:-$(mktemp -d)}
mkdir -p "$work"
tok=${llama:+$llama/tokenizer}
make_model() {  # preset, layers or "", folder name
  [ -f "$work/$3/config.json" ] ||
    "$bin/kylin" make-test-model --preset "$1" ${2:+--layers "$2"} --seed 1 --out "$work/$3" ${tok:+--tokenizer-from "$tok"} >/dev/null
}

if step check; then
echo "== every reference checkpoint on --backend cuda (decode steps replayed as CUDA graphs)"
"$bin/kylin-gpu-check" || failed=1

echo "== kylin generate --backend cuda == --backend cpu (greedy, three sequences in one batch)"
model=tests/data/models/small-qwen3
gen() { "$bin/kylin" generate --model "$model" --tokens 1,2,3,4 --tokens 9,8 --tokens 5,6,7,8,9,10,11 -n 12 --greedy --format json "$@"; }
cpu=$(gen --backend cpu)
gpu=$(gen --backend cuda)
if [ "$cpu" = "$gpu" ]; then echo "identical: $gpu"; else echo "gpu-check: greedy tokens differ: cpu $cpu, cuda $gpu"; failed=1; fi

sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -n "$sanitizer" ]; then
  echo "== compute-sanitizer memcheck and racecheck"
  mem=$("$sanitizer" --tool memcheck --leak-check full "$bin/kylin" generate --model "$model" --tokens 1,2,3,4 --tokens 9,8 -n 4 \
        --greedy --backend cuda 2>&1) || true
  if grep -q "ERROR SUMMARY: 0 errors" <<<"$mem"; then echo "memcheck: 0 errors"; else echo "$mem" | tail -40; echo "gpu-check: memcheck found errors"; failed=1; fi
  race=$("$sanitizer" --tool racecheck "$bin/kylin" generate --model tests/data/models/tiny-qwen3-untied --tokens 1,2,3,4 -n 3 \
         --greedy --backend cuda 2>&1) || true
  if grep -q "RACECHECK SUMMARY: 0 hazards" <<<"$race"; then echo "racecheck: 0 hazards"; else echo "$race" | tail -40; echo "gpu-check: racecheck found hazards"; failed=1; fi
else
  echo "== compute-sanitizer not installed: memcheck and racecheck skipped"
fi
fi

if step matvec; then
  echo "== the matvec's bandwidth against the copy bandwidth"
  "$bin/kylin-gpu-check" --matvec-bench | tee -a "$out/matvec.jsonl"
fi

m=$work/qwen3-0.6b
# One bench on this build (and, with --base, on both, alternating, twice); each JSON line tagged.
bench_on() {  # build tag, its folder, bench arguments
  local tag=$1 dir=$2
  shift 2
  echo "-- $tag: $*" >&2
  "$dir/kylin" bench --backend cuda --format json "$@" | sed "s|^{|{\"build\": \"$tag\", \"variant\": \"${variant:-default}\", |" | tee -a "$out/bench.jsonl"
}
bench() {
  if [ -z "$base" ]; then bench_on this "$bin" "$@"; return; fi
  for round in 1 2; do bench_on base "$base" "$@"; bench_on this "$bin" "$@"; done
}
if step bench; then
echo "== kylin bench --backend cuda"
make_model qwen3-0.6b "" qwen3-0.6b
bench --model "$m" -p 512 -n 128 -r 3
bench --model "$m" -p 0 -n 64 -r 3 -d 1024  # decode at depth
for weights in q8 q4; do bench --model "$m" -p 512 -n 128 -r 3 --weights "$weights"; done
for batch in 8 32; do bench --model "$m" -p 0 -n 64 -r 3 --batch "$batch"; done
fi
if step variants; then
echo "== kylin bench --backend cuda with one speed switch changed (this build only)"
make_model qwen3-0.6b "" qwen3-0.6b
# overlapping launches; adds and SwiGLU in the matvecs' stores; norms taken into the matvecs
# (opt-in); CUDA graphs
for v in OVERLAP=0 FUSE=0 FUSE_NORM=1 GRAPHS=0; do
  (export "KYLIN_CUDA_$v" variant="${v,,}"; bench_on this "$bin" --model "$m" -p 512 -n 128 -r 3)
done
# each step's logits row downloaded and the token picked on the host (what llama-bench times), top-k
# sampling from the row's top 20 picked on the device, a draw from the whole row made on the
# device (and from its top-p nucleus: the top 256 and row sums come back, or the row where the cut
# falls past them), beside the default greedy ids picked there
(variant=download_logits; bench_on this "$bin" --model "$m" -p 0 -n 128 -r 3 --download-logits)
(variant=top_k_20; bench_on this "$bin" --model "$m" -p 0 -n 128 -r 3 --top-k 20)
(variant=draw; bench_on this "$bin" --model "$m" -p 0 -n 128 -r 3 --draw)
(variant=draw_top_p_0.9; bench_on this "$bin" --model "$m" -p 0 -n 128 -r 3 --draw --top-p 0.9)
bench_on this "$bin" --model "$m" -p 0 -n 128 -r 3
for d in 0 1024; do  # attention's key shares (flash-decoding) forced on, forced off, and from 256 keys (the default)
  for v in 1 0; do (export KYLIN_CUDA_ATTN_SPLIT=$v variant=attn_split=$v; bench_on this "$bin" --model "$m" -p 0 -n 64 -r 3 -d "$d"); done
  bench_on this "$bin" --model "$m" -p 0 -n 64 -r 3 -d "$d"
done
fi
if step bench8b; then
  echo "== kylin bench --backend cuda, 12 layers of the Qwen3-8B shape"
  make_model qwen3-8b 12 qwen3-8b-l12
  bench --model "$work/qwen3-8b-l12" -p 512 -n 64 -r 3
  bench --model "$work/qwen3-8b-l12" -p 0 -n 64 -r 3 --weights q8
fi

if [ -n "$llama" ] && { step llama || step llama8b; } && [ ! -x "$llama/llama-bench" ]; then
  echo "== llama.cpp: no $llama/llama-bench, skipped"
elif [ -n "$llama" ] && { step llama || step llama8b; }; then
  echo "== llama.cpp (CUDA) on the same checkpoints, converted to GGUF"
  conv() { PYTHONPATH="$llama/gguf-py" python3 "$llama/convert_qwen3_gguf.py" "$1" --outfile "$2" >/dev/null; }
  lb() { echo "-- llama-bench $*" >&2; "$llama/llama-bench" -ngl 99 -r 3 -o jsonl "$@" | tee -a "$out/llama.jsonl"; }
  if step llama; then
    make_model qwen3-0.6b "" qwen3-0.6b
    [ -f "$work/q06-bf16.gguf" ] || conv "$m" "$work/q06-bf16.gguf"
    [ -f "$work/q06-q8_0.gguf" ] || "$llama/llama-quantize" --pure "$work/q06-bf16.gguf" "$work/q06-q8_0.gguf" Q8_0 >/dev/null 2>&1
    lb -m "$work/q06-bf16.gguf" -p 512 -n 128
    lb -m "$work/q06-q8_0.gguf" -p 512 -n 128
  fi
  if step llama8b; then
    make_model qwen3-8b 12 qwen3-8b-l12
    conv "$work/qwen3-8b-l12" "$work/q8b-bf16.gguf"
    lb -m "$work/q8b-bf16.gguf" -p 512 -n 64
  fi
fi
[ -n "$models" ] || rm -rf "$work"
[ "$failed" = 0 ] && echo "gpu-check: passed" || { echo "gpu-check: FAILED (above)"; exit 1; }
