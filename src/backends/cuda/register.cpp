// Registers the CUDA backend, "cuda": a BasicModel on CudaBackend<DeviceRuntime>. Linked into a
// program by the kylin::cuda CMake target with kernels.cu; module.cpp hands the same entry out.
#include "kylin/backends/cuda/backend.hpp"
#include "kylin/backends/cuda/device_runtime.hpp"
#include "kylin/model/model.hpp"

namespace kylin::cuda {

std::unique_ptr<kylin::detail::AnyModel> load_model(const std::filesystem::path& dir, const ModelOptions& o) {
  return std::make_unique<kylin::detail::ModelOn<CudaBackend<DeviceRuntime>>>(dir, o);
}

extern const BackendEntry backend_entry{"cuda", "NVIDIA GPUs: CUDA kernels and cuBLAS (docs/CUDA.md)", &load_model};

}  // namespace kylin::cuda

namespace {
const kylin::BackendRegistration registration{kylin::cuda::backend_entry};
}  // namespace
