// One kernel set's CPU engine as a module, libkylin-cpu-<KYLIN_CPU_SET>.so, compiled with that set's
// -m flags; its only export is kylin_cpu_kernel_set (module.map hides the rest, so none of its
// inline functions, compiled for this set, can stand in for the program's own).
#include "kylin/model/model.hpp"

extern "C" __attribute__((visibility("default"))) const kylin::CpuKernelSet* kylin_cpu_kernel_set() {
  static const kylin::CpuKernelSet set = kylin::detail::compiled_kernel_set(KYLIN_CPU_SET);
  return &set;
}
