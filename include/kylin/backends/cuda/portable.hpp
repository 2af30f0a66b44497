// What a kylin CUDA kernel is written against, so one source runs on a GPU (nvcc) and, for the
// tests, on the host (tests/common/cuda_emulator/emulate.hpp runs each block's threads as fibers).
// A kernel is a struct of device pointers and sizes with `template <class Thread> KYLIN_HD void operator()(Thread& t) const`.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define KYLIN_HD __host__ __device__
#define KYLIN_DEVICE_CODE 1
#else
#define KYLIN_HD
#define KYLIN_DEVICE_CODE 0
#endif

namespace kylin::cuda {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// A launch: grid of blocks, threads per block, dynamic shared memory per block.
struct LaunchShape {
  Dim3 grid;
  Dim3 block;
  std::size_t shared_bytes = 0;
};

inline constexpr unsigned warp_size = 32;
// Dynamic shared memory a launch gets without cudaFuncSetAttribute (DeviceRuntime opts in to none;
// the emulator refuses more).
inline constexpr std::size_t launch_shared_bytes = 48 * 1024;

// The thread interface every kernel body uses (DeviceThread below, emulate::HostThread on the host):
//   t.thread_idx(), t.block_idx(), t.block_dim(), t.grid_dim() -> Dim3
//   t.sync()                 __syncthreads(): every thread of the block must reach it
//   t.template shared<T>()   the block's dynamic shared memory (LaunchShape::shared_bytes), as T*
//   t.shfl_xor(v, mask)      __shfl_xor_sync(0xffffffff, v, mask) on a float, within a warp of 32
//                            (every lane of the warp calls it; blockDim.x is a multiple of 32)

#if KYLIN_DEVICE_CODE
struct DeviceThread {
  __device__ Dim3 thread_idx() const { return {threadIdx.x, threadIdx.y, threadIdx.z}; }
  __device__ Dim3 block_idx() const { return {blockIdx.x, blockIdx.y, blockIdx.z}; }
  __device__ Dim3 block_dim() const { return {blockDim.x, blockDim.y, blockDim.z}; }
  __device__ Dim3 grid_dim() const { return {gridDim.x, gridDim.y, gridDim.z}; }
  __device__ void sync() const { __syncthreads(); }
  template <class T>
  __device__ T* shared() const {
    extern __shared__ __align__(16) unsigned char kylin_dynamic_shared[];  // kernels keep doubles and floats there
    return reinterpret_cast<T*>(kylin_dynamic_shared);
  }
  __device__ float shfl_xor(float v, int mask) const { return __shfl_xor_sync(0xffffffffu, v, mask); }
};

// Every kernel's body runs behind programmatic dependent launch (sm_90 on; DeviceRuntime launches
// with it where the device has it, and without it the two instructions return at once): each block
// first lets the stream's next kernel be scheduled, so that its blocks are resident and waiting
// when this one ends instead of being launched then, and waits until the previous kernel has
// finished, its memory included, before the body reads or writes anything. (Prefetching a matvec's
// weights into L2 before the wait measured no faster on an H200: docs/CUDA.md.)
template <class Kernel>
__device__ void run_after_previous(const Kernel& k) {
  DeviceThread t;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  k(t);
}

template <class Kernel>
__global__ void run_kernel(Kernel k) {
  run_after_previous(k);
}

// A kernel whose speed depends on how many of its blocks an SM holds names that occupancy
// (Kernel::max_block_threads, Kernel::min_blocks_per_sm): nvcc keeps its registers within it.
template <class Kernel>
__global__ void __launch_bounds__(Kernel::max_block_threads, Kernel::min_blocks_per_sm) run_bounded_kernel(Kernel k) {
  run_after_previous(k);
}
#endif

template <class Kernel>
concept OccupancyBound = requires {
  Kernel::max_block_threads;
  Kernel::min_blocks_per_sm;
};

}  // namespace kylin::cuda
