#!/usr/bin/env bash
# The whole test suite: the Release build's tests, the same tests under AddressSanitizer +
# UndefinedBehaviorSanitizer (clang, build-asan/), and a bounded libFuzzer run.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

bash scripts/setup.sh
echo "== tests (Release, g++)"
ctest --test-dir build --output-on-failure -j"$jobs"

echo "== tests (ASan + UBSan, clang)"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
      -DKYLIN_SANITIZE=ON -DKYLIN_WERROR=ON -DKYLIN_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs"

echo "== fuzzing (libFuzzer, bounded)"
bash scripts/fuzz.sh 30
