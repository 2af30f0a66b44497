// The portable build's CPU engine: no kernels of its own, it loads the kernel-set module this CPU
// runs best (backends/cpu/dispatch.hpp) the first time a CPU model is loaded or a probe is asked for.
#include "kylin/backends/cpu/dispatch.hpp"
#include "kylin/model/model.hpp"

namespace kylin {

const CpuKernelSet& cpu_kernels() {
  static const CpuKernelSet& set = cpu::choose_kernel_set(program_dir());
  return set;
}

namespace detail {

std::unique_ptr<AnyModel> make_cpu_model(const std::filesystem::path& dir, const ModelOptions& o) { return cpu_kernels().load(dir, o); }

}  // namespace detail
}  // namespace kylin
