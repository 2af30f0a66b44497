// A CPU kernel set: the CPU engine and the machine probes compiled for one instruction set. A
// build for one machine has one, compiled in; the portable build (KYLIN_ARCH=portable) has one
// module per set and runs the best this CPU has (backends/cpu/dispatch.hpp).
#pragma once

#include <string>
#include <string_view>

#include "kylin/backends/registry.hpp"

namespace kylin {

struct CpuKernelSet {
  std::string_view name;  // what KYLIN_CPU takes ("avx512-vnni"); "built-in": the program's own flags
  std::string_view simd;  // the instruction set the kernels were compiled for (kernels::simd_arch_name)
  ModelFactory load;      // the CPU backend's model, with these kernels
  double (*read_bandwidth_gbs)(int threads);  // kernels/probes.hpp
  double (*fma_peak_gflops)(int threads);
  double (*bf16_dot_peak_gflops)(int threads);  // 0 where this set or this CPU has no BF16 GEMM
};

// What --version and `kylin bench` print: "avx512-vnni (avx512bw+vnni)".
inline std::string describe(const CpuKernelSet& k) { return std::string(k.name) + " (" + std::string(k.simd) + ")"; }

}  // namespace kylin
