#!/usr/bin/env bash
# Builds the libFuzzer targets with clang in build-fuzz/ and runs each for its share of
# SECONDS (default 90 in total). Exits non-zero on any crash, leak, timeout or sanitizer report,
# and when a target's seed corpus (tests/fuzz/corpus/<name>) is missing or empty; the reproducer
# is left in build-fuzz/artifacts/. The committed corpus is copied, so new inputs found by a run
# stay in build-fuzz/corpus/. `scripts/fuzz.sh SECONDS TARGET...` runs only the named targets.
set -euo pipefail

total=${1:-90}
shift $(( $# > 0 ? 1 : 0 ))
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build-fuzz"
targets=(fuzz_safetensors fuzz_config fuzz_json fuzz_tokenizer fuzz_jinja fuzz_server fuzz_constrain fuzz_kvfile fuzz_image)
(( $# == 0 )) || targets=("$@")
per_target=$(( total / ${#targets[@]} ))
(( per_target >= 1 )) || per_target=1
cxx=${CXX_FUZZ:-$(command -v clang++ || command -v clang++-14)}

for target in "${targets[@]}"; do
  seeds="$root/tests/fuzz/corpus/${target#fuzz_}"
  if [ -z "$(ls -A "$seeds" 2>/dev/null)" ]; then
    echo "!! $target: seed corpus $seeds is missing or empty" >&2
    exit 1
  fi
done

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DKYLIN_BUILD_FUZZERS=ON -DKYLIN_BUILD_TESTS=ON -DKYLIN_BUILD_EXAMPLES=OFF -DKYLIN_BUILD_BENCHMARKS=OFF \
  -DKYLIN_ARCH=generic >/dev/null
cmake --build "$build" --target "${targets[@]}" -j "${FUZZ_JOBS:-2}"

mkdir -p "$build/artifacts"
status=0
for target in "${targets[@]}"; do
  name=${target#fuzz_}
  corpus="$build/corpus/$name"
  mkdir -p "$corpus"
  cp -n "$root/tests/fuzz/corpus/$name"/* "$corpus"/
  dict=()
  [ ! -f "$root/tests/fuzz/$name.dict" ] || dict=(-dict="$root/tests/fuzz/$name.dict")
  echo "== $target: ${per_target}s"
  if ! "$build/bin/$target" "$corpus" "${dict[@]}" -max_total_time="$per_target" \
      -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
      -artifact_prefix="$build/artifacts/$name-" 2>"$build/$target.log"; then
    echo "!! $target failed; see $build/$target.log and $build/artifacts/" >&2
    tail -n 40 "$build/$target.log" >&2
    status=1
  fi
  grep -E "^stat::number_of_executed_units|^stat::new_units_added|^stat::peak_rss_mb" "$build/$target.log" || true
done
exit $status
