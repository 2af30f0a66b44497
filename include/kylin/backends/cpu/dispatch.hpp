// The portable build's choice of CPU kernels: one module per kernel set (libkylin-cpu-<set>.so,
// compiled with that set's -m flags), and at run time the best set this CPU has, from CPUID, or
// the one KYLIN_CPU names. llama.cpp's all-variants CPU build does the same with its modules.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "kylin/backends/cpu/kernel_set.hpp"
#include "kylin/core/error.hpp"

namespace kylin::cpu {

// What a module exports: extern "C" const CpuKernelSet* kylin_cpu_kernel_set().
inline constexpr const char* kernel_set_entry = "kylin_cpu_kernel_set";
using KernelSetEntry = const CpuKernelSet* (*)();
inline std::string kernel_set_file(std::string_view set) { return "libkylin-cpu-" + std::string(set) + ".so"; }

// The instruction-set extensions the kernel sets are compiled for, as this CPU and OS report them.
struct Features {
  bool avx2_fma_f16c = false;  // with the OS saving YMM state
  bool avx512 = false;         // F, BW, DQ, VL, CD, with the OS saving ZMM state
  bool avx512_vnni = false;
  bool avx_vnni = false;
};

inline Features detect_features() {
  Features f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27), fma = c & (1u << 12), f16c = c & (1u << 29), avx = c & (1u << 28);
  if (!osxsave || !avx) return f;
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));  // XCR0: which register state the OS saves
  const bool os_ymm = (xcr0_lo & 0x6u) == 0x6u, os_zmm = (xcr0_lo & 0xE6u) == 0xE6u;
  unsigned a7 = 0, b7 = 0, c7 = 0, d7 = 0, a71 = 0, b71 = 0, c71 = 0, d71 = 0;
  __cpuid_count(7, 0, a7, b7, c7, d7);
  __cpuid_count(7, 1, a71, b71, c71, d71);
  const bool avx2 = b7 & (1u << 5);
  f.avx2_fma_f16c = os_ymm && avx2 && fma && f16c;
  const unsigned avx512_bits = (1u << 16) | (1u << 17) | (1u << 28) | (1u << 30) | (1u << 31);  // F DQ CD BW VL
  f.avx512 = f.avx2_fma_f16c && os_zmm && (b7 & avx512_bits) == avx512_bits;
  f.avx512_vnni = f.avx512 && (c7 & (1u << 11));
  f.avx_vnni = f.avx2_fma_f16c && (a71 & (1u << 4));
#endif
  return f;
}

// The kernel sets, best first, and which CPUs run them (their flags: CMakeLists.txt, kylin_cpu_sets).
struct KernelSetInfo {
  std::string_view name;
  bool (*runs_on)(const Features&);
};
#if defined(__aarch64__)
inline constexpr KernelSetInfo kernel_sets[] = {
    {"neon", [](const Features&) { return true; }},  // Advanced SIMD: part of every AArch64 core
    {"scalar", [](const Features&) { return true; }},
};
#else
inline constexpr KernelSetInfo kernel_sets[] = {
    {"avx512-vnni", [](const Features& f) { return f.avx512_vnni; }},
    {"avx512", [](const Features& f) { return f.avx512; }},
    {"avx2-vnni", [](const Features& f) { return f.avx_vnni; }},
    {"avx2", [](const Features& f) { return f.avx2_fma_f16c; }},
    {"scalar", [](const Features&) { return true; }},
};
#endif

inline const CpuKernelSet& load_kernel_set_module(const std::filesystem::path& file) {
  const CpuKernelSet* set = reinterpret_cast<KernelSetEntry>(module_symbol(file, kernel_set_entry, "cpu kernels"))();
  if (!set) throw Error(ErrorCategory::runtime, "cpu kernels", file.string() + " gave no kernel set");
  return *set;
}

// The set KYLIN_CPU names (refused if this CPU lacks its instructions or its module is missing),
// else the first of kernel_sets this CPU runs whose module is in `dir`. Loaded once per process.
inline const CpuKernelSet& choose_kernel_set(const std::filesystem::path& dir, const char* forced = std::getenv("KYLIN_CPU")) {
  const Features f = detect_features();
  std::error_code ec;
  if (forced && *forced) {
    const std::string_view want = forced;
    for (const KernelSetInfo& s : kernel_sets) {
      if (s.name != want) continue;
      if (!s.runs_on(f)) throw Error(ErrorCategory::config, "KYLIN_CPU", "this CPU cannot run the " + std::string(want) + " kernels");
      const auto file = dir / kernel_set_file(want);
      if (!std::filesystem::is_regular_file(file, ec)) throw Error(ErrorCategory::config, "KYLIN_CPU", "no " + file.string());
      return load_kernel_set_module(file);
    }
    std::string known;
    for (const KernelSetInfo& s : kernel_sets) known += (known.empty() ? "" : ", ") + std::string(s.name);
    throw Error(ErrorCategory::config, "KYLIN_CPU", "'" + std::string(want) + "' is not a kernel set; they are: " + known);
  }
  for (const KernelSetInfo& s : kernel_sets) {
    const auto file = dir / kernel_set_file(s.name);
    if (s.runs_on(f) && std::filesystem::is_regular_file(file, ec)) return load_kernel_set_module(file);
  }
  throw Error(ErrorCategory::config, "cpu kernels", "no CPU kernel module for this CPU in " + dir.string() + " (libkylin-cpu-*.so)");
}

}  // namespace kylin::cpu
