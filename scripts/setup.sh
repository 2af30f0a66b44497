#!/usr/bin/env bash
# Installs the Debian packages kylin needs (only those missing) and builds into build/ (executables
# in build/bin/). Safe to run repeatedly.
#   bash scripts/setup.sh        everything: every program, test and benchmark, all kernel sets (scripts/test.sh)
#   bash scripts/setup.sh run    the main job only: the kylin CLI and the one kernel-set module this
#                                CPU loads (scripts/run.sh); `kylin_server` and other targets may follow
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-all}
shift || true
case $mode in all | run) ;; *) echo "usage: scripts/setup.sh [all | run [TARGET...]]" >&2; exit 2 ;; esac

# What building the programs needs (CMakeLists.txt, examples/: the CLIs link CLI11, kylin-similarity Eigen).
packages=(build-essential cmake ninja-build pkg-config curl ca-certificates
          libeigen3-dev libxsimd-dev xtl-dev libsimdjson-dev libcli11-dev
          libpng-dev libjpeg62-turbo-dev libwebp-dev libgif-dev)  # kylin::image's decoders (the CLI's image input)
if [ "$mode" = all ]; then
  packages+=(clang libclang-rt-14-dev doctest-dev libbenchmark-dev libcpp-httplib-dev libpcre2-dev
             libboost-context-dev  # the fibers of the tests' CUDA emulator
             prometheus   # its promtool checks kylin-server's /metrics in the tests
             nginx-light  # deploy/nginx in front of kylin-server replicas, in the tests
             g++-aarch64-linux-gnu qemu-user)  # the kernel tests on arm64 (scripts/test-arm64.sh)
  command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)  # for the OpenAI-client compatibility test
fi

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
if [ "$mode" = run ]; then
  # A build/ configured before (by either mode) keeps its configuration; a fresh one gets the
  # programs only, one kernel set, no CUDA: 116 targets cost 19 minutes on 2 cores, these few.
  if [ ! -f build/CMakeCache.txt ]; then
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKYLIN_WERROR=ON -DKYLIN_CUDA=OFF \
          -DKYLIN_BUILD_TESTS=OFF -DKYLIN_BUILD_BENCHMARKS=OFF -DKYLIN_BUILD_EXAMPLES=ON -DKYLIN_CPU_SETS=host >/dev/null
  fi
  cmake --build build -j"$jobs" --target kylin_cli "$@" >&2  # stdout stays the answer (scripts/run.sh)
  exit 0
fi
# Where the CUDA toolkit is installed (nvcc + cuBLAS; no GPU needed to build), the CUDA backend is
# built too, for sm_80 and sm_90 with warnings as errors (docs/CUDA.md).
cuda=OFF
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then cuda=ON; fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKYLIN_WERROR=ON -DKYLIN_CUDA=$cuda \
      -DKYLIN_BUILD_TESTS=ON -DKYLIN_BUILD_BENCHMARKS=ON -DKYLIN_BUILD_EXAMPLES=ON -DKYLIN_CPU_SETS=all >/dev/null
cmake --build build -j"$jobs"
