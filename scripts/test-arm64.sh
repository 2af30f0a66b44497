#!/usr/bin/env bash
# The kernel tests (tests/kernels) cross-compiled for arm64 with Debian's g++-aarch64-linux-gnu and
# run under qemu-user: the NEON code (xsimd's neon64 arch) that no x86 build compiles. Incremental
# (a generated build.ninja in build-arm64/): a cold build is ~90 s of compiler CPU time, the run
# ~20 s under qemu on a free core. Skips, saying so, where the cross compiler or qemu is missing;
# scripts/setup.sh installs both.
set -euo pipefail
cd "$(dirname "$0")/.."
out=build-arm64
cxx=aarch64-linux-gnu-g++
if ! command -v "$cxx" >/dev/null 2>&1 || ! command -v qemu-aarch64 >/dev/null 2>&1; then
  echo "== arm64 kernel tests SKIPPED: $cxx or qemu-aarch64 missing (apt-get install g++-aarch64-linux-gnu qemu-user)" >&2
  exit 0
fi

# xsimd and doctest are header-only; linking just their folders keeps the x86 system headers of
# /usr/include out of the cross compiler's search path.
mkdir -p "$out/include"
for lib in xsimd doctest; do ln -sfn "/usr/include/$lib" "$out/include/$lib"; done

src=$PWD
# The flags of tests/kernels/extra.cmake's variants: warnings as errors, armv8-a (NEON is baseline).
flags="-std=c++20 -O2 -march=armv8-a -Wall -Wextra -Werror -isystem $src/$out/include -I$src/include -I$src/tests \
-DDOCTEST_CONFIG_SUPER_FAST_ASSERTS -DKYLIN_TEST_DATA=\\\"$src/tests/data\\\" -DKYLIN_BIN_DIR=\\\"$src/$out\\\" \
-DKYLIN_SOURCE_DIR=\\\"$src\\\""
{
  echo "rule cxx"
  echo "  command = $cxx $flags -MD -MF \$out.d -c \$in -o \$out"
  echo "  depfile = \$out.d"
  echo "  deps = gcc"
  echo "  description = CXX(arm64) \$in"
  echo "rule link"
  echo "  command = $cxx \$in -o \$out -pthread"
  echo "  description = LINK(arm64) \$out"
  objs=()
  for f in tests/kernels/*.cpp tests/doctest_main.cpp; do
    obj="obj/$(basename "$f" .cpp).o"
    objs+=("$obj")
    echo "build $obj: cxx $src/$f"
  done
  echo "build test_kernels_arm64: link ${objs[*]}"
} >"$out/build.ninja.new"
# rewritten only when it changes, so an unchanged tree rebuilds nothing
cmp -s "$out/build.ninja.new" "$out/build.ninja" || mv "$out/build.ninja.new" "$out/build.ninja"
rm -f "$out/build.ninja.new"

echo "== kernel tests (arm64: $cxx, qemu-aarch64)"
ninja -C "$out" -j"$(nproc)" test_kernels_arm64
# Run from tests/, the kernel tests' working directory under ctest; the whole report only on failure.
if (cd tests && qemu-aarch64 -L /usr/aarch64-linux-gnu "../$out/test_kernels_arm64" >"../$out/test.log" 2>&1); then
  grep '^\[doctest\] test cases' "$out/test.log"
else
  cat "$out/test.log"
  echo "!! arm64 kernel tests failed (report above, also in $out/test.log)" >&2
  exit 1
fi
