// Configure-time probe for KYLIN_CPU_SETS=host (CMakeLists.txt): prints the kernel set this machine
// would load, chosen by the same table and CPUID checks as the programs (backends/cpu/dispatch.hpp).
#include <cstdio>

#include "kylin/backends/cpu/dispatch.hpp"

int main() {
  const kylin::cpu::Features f = kylin::cpu::detect_features();
  for (const kylin::cpu::KernelSetInfo& s : kylin::cpu::kernel_sets)
    if (s.runs_on(f)) return std::printf("%.*s", static_cast<int>(s.name.size()), s.name.data()) > 0 ? 0 : 1;
  return 1;
}
