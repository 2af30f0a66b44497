// The entry point of libkylin-backend-cuda.so, the CUDA backend as a module that kylin's programs
// load only when "cuda" is asked for (backends/registry.hpp). Built with kernels.cu and register.cpp.
#include "kylin/backends/registry.hpp"

namespace kylin::cuda {
extern const BackendEntry backend_entry;  // register.cpp
}

extern "C" __attribute__((visibility("default"))) const kylin::BackendEntry* kylin_backend_entry() { return &kylin::cuda::backend_entry; }
