// The CPU engine compiled in this translation unit, for a program built with KYLIN_EXTERN_CPU_MODEL
// (model.hpp): include it in exactly one source file, so the others skip the engine's instantiation.
#pragma once

#if !defined(KYLIN_EXTERN_CPU_MODEL)
#error "cpu_model_instance.hpp is for programs that define KYLIN_EXTERN_CPU_MODEL in every translation unit (kylin/model/model.hpp)"
#endif

#include "kylin/model/model.hpp"

namespace kylin::detail {

std::unique_ptr<AnyModel> make_cpu_model(const std::filesystem::path& dir, const ModelOptions& o) {
  return std::make_unique<ModelOn<CpuBackend>>(dir, o);
}

}  // namespace kylin::detail

namespace kylin {

const CpuKernelSet& cpu_kernels() {
  static const CpuKernelSet set = detail::compiled_kernel_set("built-in");
  return set;
}

}  // namespace kylin
