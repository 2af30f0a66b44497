// The device the tests give CudaBackend: host memory (marked as device memory, so code that reads
// it from the host is refused as it would be on a GPU), kernels run by the grid emulator, GEMMs by
// host_gemm. Everything CudaBackend does besides the real CUDA calls runs through it.
#pragma once

#include <cstddef>
#include <cstring>
#include <new>
#include <string_view>

#include "kylin/backends/cuda/emulate.hpp"
#include "kylin/backends/cuda/gemm_call.hpp"
#include "kylin/model/backend.hpp"

namespace kylin::cuda {

class HostRuntime {
 public:
  static constexpr std::string_view name = "cuda (host emulation)";

  static Memory allocate(std::size_t bytes) {
    void* p = ::operator new[](std::max<std::size_t>(bytes, 1), std::align_val_t{256});
    return Memory(p, bytes, [](void* q, std::size_t) { ::operator delete[](q, std::align_val_t{256}); }, Placement::device);
  }
  static void to_device(void* dst, const void* src, std::size_t bytes) { std::memcpy(dst, src, bytes); }
  static void to_host(void* dst, const void* src, std::size_t bytes) { std::memcpy(dst, src, bytes); }
  template <class Kernel>
  static void launch(const Kernel& k) {
    emulate::launch(k, k.shape());
  }
  static void gemm(const GemmCall& call) { host_gemm(call); }
};

}  // namespace kylin::cuda
