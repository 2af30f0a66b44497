// The device entry point of every kernel of kernels.hpp, for DeviceRuntime::launch. The one file
// nvcc compiles: a program using the CUDA backend builds it and register.cpp (the kylin::cuda target).
#include "kylin/backends/cuda/kernels.hpp"

namespace kylin::cuda {

template <class Kernel>
const void* kernel_entry() {
  if constexpr (OccupancyBound<Kernel>) return reinterpret_cast<const void*>(&run_bounded_kernel<Kernel>);
  else return reinterpret_cast<const void*>(&run_kernel<Kernel>);
}

template const void* kernel_entry<RmsNormKernel>();
template const void* kernel_entry<AttentionInputsKernel>();
template const void* kernel_entry<AttentionKernel>();
template const void* kernel_entry<SplitAttentionKernel>();
template const void* kernel_entry<AttentionCombineKernel>();
template const void* kernel_entry<SiluMulKernel>();
template const void* kernel_entry<AddKernel>();
template const void* kernel_entry<FillKernel>();
template const void* kernel_entry<GatherRowsKernel>();
template const void* kernel_entry<AddRowsScaledKernel>();
template const void* kernel_entry<EmbedKernel>();
template const void* kernel_entry<WidenRowsKernel>();
template const void* kernel_entry<MatvecKernel>();
template const void* kernel_entry<MatvecAddKernel>();
template const void* kernel_entry<SwiGLUMatvecKernel>();
template const void* kernel_entry<MatvecKernelOf<Store::assign, true>>();
template const void* kernel_entry<MatvecKernelOf<Store::add, true>>();
template const void* kernel_entry<MatvecKernelOf<Store::swiglu, true>>();
template const void* kernel_entry<SplitBf16Kernel>();
template const void* kernel_entry<AddBiasKernel>();
template const void* kernel_entry<ArgmaxKernel>();
template const void* kernel_entry<TopKSliceKernel>();
template const void* kernel_entry<TopKMergeKernel>();
template const void* kernel_entry<DrawSliceKernel>();
template const void* kernel_entry<DrawPickKernel>();

}  // namespace kylin::cuda
