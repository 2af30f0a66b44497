// The entry point of libkylin-cuda.so, the CUDA backend as a shared module (module.hpp loads it).
// Built with kernels.cu and register.cpp, whose loader this hands out.
#include "kylin/model/model.hpp"

extern "C" __attribute__((visibility("default"))) kylin::detail::ModelFactory kylin_cuda_model_factory() {
  return kylin::detail::cuda_model_factory();
}
