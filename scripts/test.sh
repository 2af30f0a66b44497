#!/usr/bin/env bash
# The whole test suite: the Release build's tests (with the CUDA backend compiled and linked
# where nvcc exists: scripts/setup.sh), the same tests under AddressSanitizer +
# UndefinedBehaviorSanitizer (clang, build-asan/), the server and generation tests under
# ThreadSanitizer (clang, build-tsan/), the kernel tests cross-compiled for arm64 and run under
# qemu (scripts/test-arm64.sh), and a bounded libFuzzer run. Fails when a build
# registers fewer tests than the source tree defines (tests or examples switched off).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

# The tests a complete build registers: one per tests/<area>/ folder with sources, plus these.
expected_tests() {
  for dir in tests/*/; do
    area=$(basename "$dir")
    case $area in data | fuzz | common) continue ;; esac
    if compgen -G "$dir*.cpp" >/dev/null; then echo "$area"; fi
  done
  printf '%s\n' kernels_avx2 kernels_scalar constrain_ajv server_openai_client server_anthropic_client server_responses_client deploy_nginx package
  # kernel variants that run only where the CPU has their instructions (tests/kernels/extra.cmake)
  local flags
  flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
  if [[ " $flags " =~ \ avx512f\  && " $flags " =~ \ avx512bw\  && " $flags " =~ \ avx512vl\  && " $flags " =~ \ avx512dq\  && " $flags " =~ \ avx512cd\  ]]; then echo kernels_avx512; fi
  if [[ " $flags " =~ \ avx_vnni\  ]]; then echo kernels_avxvnni; fi
  # the Release build has the CUDA backend wherever nvcc is (scripts/setup.sh)
  if [ "$1" = build ] && { command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; }; then echo cuda_device; fi
}

run_tests() {  # build directory, then the tests it leaves out (names)
  local dir=$1 missing skip
  shift
  skip=$(printf '%s\n' "$@")
  missing=$(comm -23 <(expected_tests "$dir" | grep -vxF -e "$skip" -e '' | sort) \
                     <(ctest --test-dir "$dir" -N | sed -n 's/^ *Test *#[0-9]*: //p' | sort))
  if [ -n "$missing" ]; then
    echo "!! $dir does not register these tests: $(echo $missing) (KYLIN_BUILD_TESTS or KYLIN_BUILD_EXAMPLES off?)" >&2
    exit 1
  fi
  local exclude=()
  (($#)) && exclude=(-E "^($(IFS='|'; echo "$*"))\$")
  ctest --test-dir "$dir" --output-on-failure --no-tests=error -j"$jobs" "${exclude[@]}"
}

bash scripts/setup.sh
echo "== tests (Release, g++)"
run_tests build

bash scripts/test-arm64.sh

echo "== tests (ASan + UBSan, clang)"
# Line tables are all a sanitizer report needs for its stack traces; full debug info costs build time.
# ASan at -O1 (what its documentation suggests): measured on test_model, 21 % less to compile and
# 16 % more to run than -O2, a net gain over the whole suite.
# The sanitizer builds compile the CPU engine into the programs (KYLIN_ARCH=native): the Release
# build above tests the portable build's kernel-set modules.
san_flags=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ -DKYLIN_ARCH=native)
cmake -S . -B build-asan "${san_flags[@]}" "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
      -DKYLIN_SANITIZE=ON -DKYLIN_WERROR=ON -DKYLIN_BUILD_BENCHMARKS=OFF \
      -DKYLIN_BUILD_TESTS=ON -DKYLIN_BUILD_EXAMPLES=ON >/dev/null
# Left out here, each run in the Release build above: the CUDA backend's tests (its emulator's
# fibers are most of this stage's time under ASan: 852 s of 1053 on a Zen 3 VM), the install-and-
# consume package test, and the kernel tests' forced-instruction-set variants (the native kernel
# tests and the scalar references run). Only the targets the remaining tests run are built.
asan_skip=(backends package kernels_avx2 kernels_avx512 kernels_avxvnni)
asan_targets=(test_kernels_scalar kylin_cli kylin_server kylin_similarity)  # the programs the tests run
for dir in tests/*/; do
  area=$(basename "$dir")
  case " data fuzz common ${asan_skip[*]} " in *" $area "*) continue ;; esac
  if compgen -G "$dir*.cpp" >/dev/null; then asan_targets+=("test_$area"); fi
done
cmake --build build-asan -j"$jobs" --target "${asan_targets[@]}"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 run_tests build-asan "${asan_skip[@]}"

echo "== tests (ThreadSanitizer, clang): server and generation"
cmake -S . -B build-tsan "${san_flags[@]}" "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -gline-tables-only -DNDEBUG" \
      -DKYLIN_SANITIZE_THREAD=ON -DKYLIN_WERROR=ON -DKYLIN_BUILD_BENCHMARKS=OFF \
      -DKYLIN_BUILD_TESTS=ON -DKYLIN_BUILD_EXAMPLES=ON >/dev/null
cmake --build build-tsan -j"$jobs" --target test_server test_generate kylin_server kylin_cli
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
  ctest --test-dir build-tsan -R '^(server|generate)$' --output-on-failure --no-tests=error -j"$jobs"

echo "== fuzzing (libFuzzer, bounded: 90 s over the targets of scripts/fuzz.sh)"
bash scripts/fuzz.sh 90
