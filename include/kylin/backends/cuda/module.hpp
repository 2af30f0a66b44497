// The CUDA backend loaded at run time from a shared module (libkylin-cuda.so, built from
// kernels.cu and module.cpp), so a program pays for cudart and cuBLAS only when it asks for
// BackendKind::cuda. kylin's CLI and server use it; the kylin::cuda target links the backend instead.
#pragma once

#include <dlfcn.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "kylin/core/error.hpp"
#include "kylin/model/model.hpp"

namespace kylin::cuda {

inline constexpr const char* module_file_name = "libkylin-cuda.so";
// The module's one export: returns the factory that loads a model on the CUDA backend.
inline constexpr const char* module_entry = "kylin_cuda_model_factory";
using ModuleEntry = detail::ModelFactory (*)();

// Makes BackendKind::cuda load models through the module `file`. Nothing to do when a CUDA backend
// is already registered (linked in, or loaded before). The module stays loaded for the process.
inline void load_module(const std::filesystem::path& file) {
  if (detail::cuda_model_factory()) return;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec))
    throw Error(ErrorCategory::config, "backend",
                "cuda: this build has no CUDA backend (no " + file.string() + "; configure with -DKYLIN_CUDA=ON)");
  void* handle = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) throw Error(ErrorCategory::runtime, "backend", std::string("cuda: cannot load the CUDA backend module: ") + ::dlerror());
  auto* entry = reinterpret_cast<ModuleEntry>(::dlsym(handle, module_entry));
  if (!entry) throw Error(ErrorCategory::runtime, "backend", "cuda: " + file.string() + " has no " + module_entry);
  detail::cuda_model_factory() = entry();
}

// The module installed beside the running program (kylin's build puts it in bin/ with the tools).
inline std::filesystem::path module_beside_executable() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (ec ? std::filesystem::path(".") : exe.parent_path()) / module_file_name;
}

// What a program that never links the backend calls before loading a model on `kind`.
inline void prepare_backend(BackendKind kind) {
  if (kind == BackendKind::cuda) load_module(module_beside_executable());
}

}  // namespace kylin::cuda
