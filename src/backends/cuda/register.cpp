// Makes ModelOptions::backend = BackendKind::cuda (`--backend cuda`) load a BasicModel on
// CudaBackend<DeviceRuntime>. Linked into a program by the kylin::cuda CMake target with kernels.cu.
#include "kylin/backends/cuda/backend.hpp"
#include "kylin/backends/cuda/device_runtime.hpp"
#include "kylin/model/model.hpp"

namespace {

std::unique_ptr<kylin::detail::AnyModel> load_cuda_model(const std::filesystem::path& dir, const kylin::ModelOptions& o) {
  return std::make_unique<kylin::detail::ModelOn<kylin::cuda::CudaBackend<kylin::cuda::DeviceRuntime>>>(dir, o);
}

[[maybe_unused]] const bool registered = (kylin::detail::cuda_model_factory() = &load_cuda_model, true);

}  // namespace
