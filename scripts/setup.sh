#!/usr/bin/env bash
# Installs the Debian packages kylin needs (only those missing) and builds everything into build/
# (executables in build/bin/). Safe to run repeatedly; used by scripts/run.sh and scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev curl ca-certificates
          libeigen3-dev libxsimd-dev xtl-dev libsimdjson-dev doctest-dev libbenchmark-dev
          libcpp-httplib-dev libcli11-dev libpcre2-dev
          libboost-context-dev  # the fibers of the tests' CUDA emulator
          prometheus   # its promtool checks kylin-server's /metrics in the tests
          nginx-light  # deploy/nginx in front of kylin-server replicas, in the tests
          g++-aarch64-linux-gnu qemu-user)  # the kernel tests on arm64 (scripts/test-arm64.sh)
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)  # for the OpenAI-client compatibility test

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

jobs=$(nproc)
# Where the CUDA toolkit is installed (nvcc + cuBLAS; no GPU needed to build), the CUDA backend is
# built too, for sm_80 and sm_90 with warnings as errors (docs/CUDA.md).
cuda=OFF
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then cuda=ON; fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKYLIN_WERROR=ON -DKYLIN_CUDA=$cuda >/dev/null
cmake --build build -j"$jobs"
