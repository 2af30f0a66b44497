// The device the tests give CudaBackend: host memory (marked as device memory, so code that reads
// it from the host is refused as it would be on a GPU), kernels run by the grid emulator, GEMMs by
// host_gemm, and a pass held back and replayed as DeviceRuntime does it (the "graph" is the
// recording itself), so everything CudaBackend and the runtime do besides the CUDA calls runs here.
#pragma once

#include <cstddef>
#include <cstring>
#include <new>
#include <string_view>
#include <vector>

#include "common/cuda_emulator/emulate.hpp"
#include "kylin/backends/cuda/gemm_call.hpp"
#include "kylin/backends/cuda/pass_recording.hpp"
#include "kylin/backends/backend.hpp"

namespace kylin::cuda {

class HostRuntime {
 public:
  static constexpr std::string_view name = "cuda (host emulation)";

  static Memory allocate(std::size_t bytes) {
    void* p = ::operator new[](std::max<std::size_t>(bytes, 1), std::align_val_t{256});
    return Memory(p, bytes, [](void* q, std::size_t) { ::operator delete[](q, std::align_val_t{256}); }, copies);
  }
  // Between passes nothing is held back, so the host's copies are plain ones.
  static constexpr DeviceCopies copies{[](void* host, const void* device, std::size_t bytes) { std::memcpy(host, device, bytes); },
                                       [](void* device, const void* host, std::size_t bytes) { std::memcpy(device, host, bytes); }};
  // Held back in a pass: the source is staged now and copied when the pass is issued, as on the GPU.
  void to_device(void* dst, const void* src, std::size_t bytes) {
    if (bytes == 0) return;
    if (!queue_.holding() || bytes > staging_.size() / 16) {  // as DeviceRuntime: a large copy goes at once, after what was held
      queue_.flush(*this);
      std::memcpy(dst, src, bytes);
      return;
    }
    if (staged_ + bytes > staging_.size()) synchronize();
    unsigned char* from = staging_.data() + staged_;
    std::memcpy(from, src, bytes);
    staged_ += (bytes + 255) / 256 * 256;
    queue_.recording().copy(dst, from, bytes);
  }
  void to_host(void* dst, const void* src, std::size_t bytes) {
    synchronize();
    std::memcpy(dst, src, bytes);
    to_host_bytes_ += bytes;
  }
  template <class Kernel>
  void launch(const Kernel& k) {
    ++launches_;
    if (queue_.holding()) return queue_.recording().launch(reinterpret_cast<const void*>(&run_kernel<Kernel>), k);
    emulate::launch(k, k.shape());
  }
  void gemm(const GemmCall& call) {
    ++gemms_;
    if (queue_.holding()) return queue_.recording().gemm(call);
    host_gemm(call);
  }
  void begin_pass() { queue_.begin(*this); }
  void end_pass() { queue_.end(*this); }
  std::size_t graphs() const { return queue_.graphs(); }
  std::size_t launches() const { return launches_; }  // kernel launches asked for so far (each pass's, replayed or not)
  std::size_t gemms() const { return gemms_; }        // GEMMs asked for so far
  std::size_t to_host_bytes() const { return to_host_bytes_; }  // bytes copied to the host so far

  // For PassQueue: a "graph" is a copy of the recording, replayed with its own (captured) arguments.
  void issue(const PassRecording& r) {
    for (const PassRecording::Op& op : r.ops()) switch (op.kind) {
        case PassRecording::Kind::launch: reinterpret_cast<void (*)(const void*)>(const_cast<void*>(op.entry))(r.params(op)); break;
        case PassRecording::Kind::copy: std::memcpy(op.dst, op.src, op.bytes); break;
        case PassRecording::Kind::gemm: host_gemm(*static_cast<const GemmCall*>(r.params(op))); break;
      }
  }
  static PassRecording make_graph(const PassRecording& r) { return r; }
  void run(const PassRecording& g) { issue(g); }

 private:
  template <class Kernel>
  static void run_kernel(const void* params) {
    Kernel k;
    std::memcpy(&k, params, sizeof k);
    emulate::launch(k, k.shape());
  }
  // Everything held back has run: staging starts over.
  void synchronize() {
    queue_.flush(*this);
    staged_ = 0;
  }

  std::vector<unsigned char> staging_ = std::vector<unsigned char>(std::size_t{1} << 20);  // [1 MiB] pinned memory's stand-in
  std::size_t staged_ = 0;
  std::size_t launches_ = 0;
  std::size_t gemms_ = 0;
  std::size_t to_host_bytes_ = 0;
  PassQueue<PassRecording> queue_{graphs_wanted()};
};

}  // namespace kylin::cuda
