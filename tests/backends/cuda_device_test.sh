#!/usr/bin/env bash
# `kylin logits --backend cuda`. In a KYLIN_CUDA build (mode "built"): kylin links nothing of CUDA
# (it loads bin/libkylin-backend-cuda.so when asked, so CPU runs never pay for cuBLAS), and on a machine with
# an NVIDIA GPU it prints logits (scripts/gpu-check.sh compares them with the references); without
# one it exits 1 with kylin's named error, not a crash, a hang or CUDA's own abort. In a build
# without it (mode "absent"): refused by --backend, which names the backends the program has.
set -uo pipefail
kylin=$1 model=$2 mode=${3:-built}
if [ "$mode" = built ] && readelf -d "$kylin" | grep -E 'NEEDED.*(cudart|cublas)'; then
  echo "cuda_device: $kylin links CUDA libraries itself" >&2; exit 1
fi
out=$("$kylin" logits --model "$model" --tokens 1,2,3 --backend cuda 2>&1)
rc=$?
if [ "$mode" = absent ]; then
  if [ $rc -ne 0 ] && grep -q "no backend named 'cuda' in this program; it has: cpu" <<<"$out"; then
    echo "cuda_device: no CUDA backend built, refused by name: $out"; exit 0
  fi
  echo "cuda_device: exit $rc, unexpected output: $out" >&2; exit 1
fi
if [ $rc -eq 0 ]; then
  case $out in '{"logits": [['*) echo "cuda_device: a GPU ran the model"; exit 0 ;; esac
  echo "cuda_device: exit 0 without logits: $out" >&2; exit 1
fi
if [ $rc -eq 1 ] && grep -q '^kylin: error: \[kylin.runtime\] cuda: no CUDA device' <<<"$out"; then
  echo "cuda_device: no GPU here, refused by name: $out"
  exit 0
fi
echo "cuda_device: exit $rc, unexpected output: $out" >&2
exit 1
