// The GPU under CudaBackend: cudaMalloc'd memory, one stream for every copy, launch and
// cublasGemmEx, a forward pass replayed as a CUDA graph when it repeats one seen before, and a
// named kylin::Error for any failing CUDA or cuBLAS call. Compiles with a plain C++ compiler; the
// kernels' entry points come from src/backends/cuda/kernels.cu, which nvcc compiles.
#pragma once

#include <cuda_runtime_api.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "kylin/backends/cuda/gemm_call.hpp"
#include "kylin/backends/cuda/pass_recording.hpp"
#include "kylin/backends/cuda/portable.hpp"
#include "kylin/backends/backend.hpp"

namespace kylin::cuda {

// &run_kernel<Kernel> (or run_bounded_kernel) for each kernel of kernels.hpp, instantiated in kernels.cu.
template <class Kernel>
const void* kernel_entry();

namespace detail {

inline void check(cudaError_t e, std::string_view call) {
  if (e != cudaSuccess) throw Error(ErrorCategory::runtime, "cuda", std::string(call) + ": " + cudaGetErrorString(e));
}
inline void check(cublasStatus_t s, std::string_view call) {
  if (s != CUBLAS_STATUS_SUCCESS) throw Error(ErrorCategory::runtime, "cublas", std::string(call) + ": " + cublasGetStatusString(s));
}
inline cublasOperation_t blas_op(GemmOp op) { return op == GemmOp::t ? CUBLAS_OP_T : CUBLAS_OP_N; }
inline cudaDataType_t blas_type(GemmType t) {
  switch (t) {
    case GemmType::bf16: return CUDA_R_16BF;
    case GemmType::f16: return CUDA_R_16F;
    case GemmType::f32: return CUDA_R_32F;
  }
  return CUDA_R_32F;
}

// An instantiated CUDA graph, destroyed with its handle.
class GraphExec {
 public:
  explicit GraphExec(cudaGraphExec_t e) : exec_(e) {}
  GraphExec(GraphExec&& o) noexcept : exec_(std::exchange(o.exec_, nullptr)) {}
  GraphExec& operator=(GraphExec&& o) noexcept {
    std::swap(exec_, o.exec_);
    return *this;
  }
  ~GraphExec() {
    if (exec_) cudaGraphExecDestroy(exec_);
  }
  cudaGraphExec_t get() const { return exec_; }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace detail

class DeviceRuntime {
 public:
  static constexpr std::string_view name = "cuda";

  // Device 0 (CUDA_VISIBLE_DEVICES picks another); a machine without one is refused by name.
  DeviceRuntime() {
    int devices = 0;
    const cudaError_t e = cudaGetDeviceCount(&devices);
    if (e != cudaSuccess || devices == 0)
      throw Error(ErrorCategory::runtime, "cuda", std::string("no CUDA device: ") + (e != cudaSuccess ? cudaGetErrorString(e) : "none found"));
    detail::check(cudaSetDevice(0), "cudaSetDevice");
    int major = 0;
    detail::check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), "cudaDeviceGetAttribute");
    overlap_ = major >= 9 && overlap_wanted();
    detail::check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    if (const cublasStatus_t s = cublasCreate(&blas_); s != CUBLAS_STATUS_SUCCESS) {
      cudaStreamDestroy(stream_);
      detail::check(s, "cublasCreate");
    }
    try {
      detail::check(cublasSetStream(blas_, stream_), "cublasSetStream");
      detail::check(cudaMallocHost(&staging_, staging_bytes), "cudaMallocHost of the staging buffer");
    } catch (...) {
      cudaFreeHost(staging_);
      cublasDestroy(blas_);
      cudaStreamDestroy(stream_);
      throw;
    }
  }
  DeviceRuntime(const DeviceRuntime&) = delete;
  DeviceRuntime& operator=(const DeviceRuntime&) = delete;
  ~DeviceRuntime() {
    cudaFreeHost(staging_);
    cublasDestroy(blas_);
    cudaStreamDestroy(stream_);
  }

  static Memory allocate(std::size_t bytes) {
    void* p = nullptr;
    detail::check(cudaMalloc(&p, std::max<std::size_t>(bytes, 1)), "cudaMalloc of " + std::to_string(bytes) + " bytes");
    return Memory(p, bytes, [](void* q, std::size_t) { cudaFree(q); }, copies);
  }
  // The host's copies of device memory (a KV cache saved or restored between passes): the device
  // drains first (the backend's stream does not wait on the default one), and a copy from pageable
  // memory has landed before the next pass reads it.
  static constexpr DeviceCopies copies{
      [](void* host, const void* device, std::size_t bytes) {
        detail::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize before a copy to the host");
        detail::check(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
      },
      [](void* device, const void* host, std::size_t bytes) {
        detail::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize before a copy to the device");
        detail::check(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the device");
        detail::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after a copy to the device");
      }};
  // The source may be reused on return. Small copies (a layer's attention sequences, row
  // selections) go through pinned staging memory: from pageable memory the copy may first wait for
  // the stream to drain, which would stall the launch queue at every layer.
  void to_device(void* dst, const void* src, std::size_t bytes) {
    if (bytes == 0) return;  // an empty selection may come with a null source
    if (bytes > staging_bytes / 16) {  // pageable (a weight's upload): what the pass held back goes first
      flush();
      detail::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync to the device");
      return;
    }
    if (staged_ + bytes > staging_bytes) synchronize();  // every staged copy has run: start over
    const void* from = std::memcpy(static_cast<unsigned char*>(staging_) + staged_, src, bytes);
    staged_ += (bytes + 255) / 256 * 256;
    if (queue_.holding()) return queue_.recording().copy(dst, from, bytes);
    copy_async(dst, from, bytes);
  }
  void to_host(void* dst, const void* src, std::size_t bytes) {
    flush();
    detail::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync to the host");
    synchronize();
  }
  template <class Kernel>
  void launch(const Kernel& k) {
    if (queue_.holding()) return queue_.recording().launch(kernel_entry<Kernel>(), k);
    launch_raw(kernel_entry<Kernel>(), k.shape(), &k);
  }
  void gemm(const GemmCall& c) {
    cuda::detail::check_gemm(c);
    if (queue_.holding()) return queue_.recording().gemm(c);
    gemm_now(c);
  }
  // Between these the pass's launches and staged copies are recorded (PassQueue), then issued at
  // the end or at a copy to the host (the MoE router's logits).
  void begin_pass() { queue_.begin(*this); }
  void end_pass() { queue_.end(*this); }
  std::size_t graphs() const { return queue_.graphs(); }

  // For PassQueue: issue a recording launch by launch, make it a graph, run a graph.
  void issue(const PassRecording& r) {
    for (const PassRecording::Op& op : r.ops()) switch (op.kind) {
        case PassRecording::Kind::launch: launch_raw(op.entry, op.shape, r.params(op)); break;
        case PassRecording::Kind::copy: copy_async(op.dst, op.src, op.bytes); break;
        case PassRecording::Kind::gemm: gemm_now(*static_cast<const GemmCall*>(r.params(op))); break;
      }
  }
  detail::GraphExec make_graph(const PassRecording& r) {
    detail::check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
    cudaGraph_t graph = nullptr;
    try {
      issue(r);
    } catch (...) {
      cudaStreamEndCapture(stream_, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    detail::check(cudaStreamEndCapture(stream_, &graph), "cudaStreamEndCapture");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    detail::check(e, "cudaGraphInstantiate");
    return detail::GraphExec(exec);
  }
  void run(const detail::GraphExec& g) { detail::check(cudaGraphLaunch(g.get(), stream_), "cudaGraphLaunch"); }

 private:
  static constexpr std::size_t staging_bytes = std::size_t{1} << 20;

  // What the pass holds back is issued.
  void flush() { queue_.flush(*this); }
  // With overlap_, a kernel may be scheduled while the previous one runs (programmatic dependent
  // launch; every kernel waits for its predecessor before touching its data: portable.hpp).
  void launch_raw(const void* entry, const LaunchShape& s, const void* params) {
    void* args[] = {const_cast<void*>(params)};
    cudaLaunchAttribute overlap{};
    overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    overlap.val.programmaticStreamSerializationAllowed = 1;
    const cudaLaunchConfig_t config{.gridDim = dim3(s.grid.x, s.grid.y, s.grid.z), .blockDim = dim3(s.block.x, s.block.y, s.block.z),
                                    .dynamicSmemBytes = s.shared_bytes, .stream = stream_, .attrs = &overlap, .numAttrs = overlap_ ? 1u : 0u};
    detail::check(cudaLaunchKernelExC(&config, entry, args), "cudaLaunchKernelExC");
  }
  // KYLIN_CUDA_OVERLAP=0 launches each kernel after the previous one has finished, for comparison.
  static bool overlap_wanted() {
    const char* v = std::getenv("KYLIN_CUDA_OVERLAP");
    return !(v && std::string_view(v) == "0");
  }
  void copy_async(void* dst, const void* src, std::size_t bytes) {
    detail::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync to the device");
  }
  void gemm_now(const GemmCall& c) {
    detail::check(cublasGemmEx(blas_, detail::blas_op(c.transa), detail::blas_op(c.transb), static_cast<int>(c.m), static_cast<int>(c.n),
                               static_cast<int>(c.k), &c.alpha, c.a, detail::blas_type(c.a_type), static_cast<int>(c.lda), c.b,
                               detail::blas_type(c.b_type), static_cast<int>(c.ldb), &c.beta, c.c, CUDA_R_32F, static_cast<int>(c.ldc),
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  "cublasGemmEx");
  }

  void synchronize() {
    flush();
    detail::check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    staged_ = 0;
  }

  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  void* staging_ = nullptr;  // [staging_bytes] pinned host memory, reused after each synchronization
  std::size_t staged_ = 0;
  bool overlap_ = false;  // programmatic dependent launch: compute capability 9.0 on, unless switched off
  PassQueue<detail::GraphExec> queue_{graphs_wanted()};
};

}  // namespace kylin::cuda
