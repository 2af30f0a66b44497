// The Backend concept: the handful of operations the transformer components call, and the memory
// they run on. The model code is written against it only, so a CUDA or Metal backend is a new
// type in a folder of its own (backends/cpu, backends/cuda), not a new model. No CPU kernels here.
#pragma once

#include <concepts>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>

#include "kylin/core/error.hpp"
#include "kylin/io/config.hpp"
#include "kylin/kernels/types.hpp"

namespace kylin {

// Where a backend's bytes live: host memory the CPU can read, or a device's own memory.
enum class Placement : std::uint8_t { host, device };

// How the host copies bytes out of and into device memory (a backend's runtime); each copy has
// finished, and every operation the backend issued before it too, when the function returns.
struct DeviceCopies {
  void (*to_host)(void* host, const void* device, std::size_t bytes);
  void (*from_host)(void* device, const void* host, std::size_t bytes);
};

// Bytes owned by a backend, in its address space (host memory for the CPU, device memory for a
// GPU), freed by the function that came with them (given the pointer and the byte count). Device
// memory comes with its copies, so the host can read and write it (a KV cache saved and restored).
// Move-only.
class Memory {
 public:
  using Release = void (*)(void*, std::size_t);
  Memory() = default;
  Memory(void* data, std::size_t bytes, Release release) : data_(data), bytes_(bytes), release_(release) {}
  Memory(void* data, std::size_t bytes, Release release, const DeviceCopies& device)
      : data_(data), bytes_(bytes), release_(release), placement_(Placement::device), device_(&device) {}
  Memory(Memory&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)), release_(std::exchange(o.release_, nullptr)),
        placement_(o.placement_), device_(o.device_) {}
  Memory& operator=(Memory&& o) noexcept {
    if (this != &o) {
      reset();
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      release_ = std::exchange(o.release_, nullptr);
      placement_ = o.placement_;
      device_ = o.device_;
    }
    return *this;
  }
  // host = bytes [offset, offset + host.size()); and the reverse. Between a backend's passes.
  void read(std::size_t offset, std::span<std::byte> host) const {
    check_range(offset, host.size());
    if (host.empty()) return;
    if (device_) return device_->to_host(host.data(), as<std::byte>(offset), host.size());
    std::memcpy(host.data(), as<std::byte>(offset), host.size());
  }
  void write(std::size_t offset, std::span<const std::byte> host) {
    check_range(offset, host.size());
    if (host.empty()) return;
    if (device_) return device_->from_host(as<std::byte>(offset), host.data(), host.size());
    std::memcpy(as<std::byte>(offset), host.data(), host.size());
  }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  ~Memory() { reset(); }

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Placement placement() const { return placement_; }
  template <class T>
  T* as(std::size_t byte_offset = 0) const { return reinterpret_cast<T*>(static_cast<std::byte*>(data_) + byte_offset); }

 private:
  void reset() {
    if (data_ && release_) release_(data_, bytes_);
    data_ = nullptr;
  }
  void check_range(std::size_t offset, std::size_t n) const {
    if (offset > bytes_ || n > bytes_ - offset)
      throw Error(ErrorCategory::runtime, "backend memory",
                  "bytes [" + std::to_string(offset) + ", " + std::to_string(offset + n) + ") are outside its " + std::to_string(bytes_));
  }
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  Release release_ = nullptr;
  Placement placement_ = Placement::host;
  const DeviceCopies* device_ = nullptr;  // device memory: how the host reads and writes it
};

// What a backend is sized for; the model sizes come from the config.
struct BackendOptions {
  int threads = 0;                // 0: all hardware threads
  std::int64_t max_pass_rows = 512;  // rows of one pass (GEMM panels, workspace)
  kernels::PrefillActivations prefill_activations = kernels::PrefillActivations::f32;  // bf16: where the backend has it, else an error
};

// The error for a backend without the BF16 prefill GEMM that was asked for it.
inline Error no_bf16_prefill(std::string_view why) {
  return Error(ErrorCategory::config, "prefill activations", "bf16 needs " + std::string(why) + "; f32 (the default) runs everywhere");
}

// A pass's new query/key/value rows, as attention_inputs takes them.
struct QKVRows {
  float* q;        // [rows, n_heads, head_dim]     rotated in place
  float* k;        // [rows, n_kv_heads, head_dim]  rotated in place, then stored
  const float* v;  // [rows, n_kv_heads, head_dim]  stored
  std::int64_t rows, n_heads, n_kv_heads, head_dim;
};
// Qwen3's per-head RMSNorm of q and k before RoPE ([head_dim] weights); null q.data: none (Qwen2).
struct QKNorms {
  kernels::MatRef q, k;
  double eps = 0;
};

// A SwiGLU MLP's input side: y = silu(x · gate^T) * (x · up^T), both [rows, gate.rows]. up_y may
// hold x · up^T on the way (a backend that fuses the two leaves it untouched); read only y after.
struct SwiGLUProduct {
  kernels::MatRef gate, up;
  float* y;     // [rows, gate.rows]
  float* up_y;  // [rows, up.rows] scratch
};

// Logit rows whose greedy ids, top-k or draws a backend picks (argmax_rows, top_k_rows, draw_rows): row i is data[i * stride, + width);
// width <= stride cuts ids a sampler may never return (a vocabulary's padding rows).
struct LogitRows {
  const float* data;  // [rows, stride] in backend memory
  std::int64_t width, stride;
};

template <class B>
concept Backend = std::constructible_from<B, const ModelConfig&, const BackendOptions&> &&
    requires(B& b, const float* in, float* out, const kernels::MatRef& w, std::span<const kernels::MatmulOut> outs,
             const kernels::RowPlan& plan, std::int64_t n, double eps, const kernels::RowSelection& sel,
             std::span<const kernels::DotProduct> products, const kernels::HeadRows& heads,
             const kernels::RopeTables& tables, const QKVRows& qkv, const QKNorms& norms,
             std::span<const kernels::AttentionSeq> seqs, const kernels::AttentionHeads& ah,
             const SwiGLUProduct& glu, std::span<const int> ids, std::size_t bytes, std::span<float> host, std::span<const float> host_in,
             const LogitRows& logit_rows, std::span<int> host_ids, std::span<kernels::RankedLogit> host_top,
             std::span<const kernels::RowDraw> host_draws) {
      { b.allocate(bytes) } -> std::same_as<Memory>;  // uninitialised; pages may be committed on first use
      { b.allocate_weights(bytes) } -> std::same_as<Memory>;  // the same for weights, read whole by every pass
      { b.threads() } -> std::convertible_to<int>;
      b.matmul(in, w, in, out, plan);        // out[rows, w.rows] = in[rows, w.cols] · w^T + bias
      b.matmul_add(in, w, out, plan);        // out[rows, w.rows] += in · w^T: a residual added where it is made
      b.matmul_fused(in, outs, plan);        // several such products of one input in one pass
      b.matmul_each(products);               // decode products with inputs of their own, one pass
      b.swiglu(in, glu, plan);               // glu.y = silu(in · gate^T) * (in · up^T)
      b.rms_norm(in, w, out, n, eps);        // n rows of width w.cols, in place allowed
      b.attention_inputs(qkv, norms, tables, seqs);  // q/k norms, RoPE, new keys/values into each sequence's cache
      b.attention(in, out, seqs, ah);        // q, out, one entry per sequence
      b.silu_mul(out, in, n);
      b.add(out, in, n);
      b.fill_zero(out, n);
      b.gather_rows(in, sel, out, n);        // out[i] = in[sel.rows[i]], rows of width n
      b.add_rows_scaled(out, in, sel, n);    // out[sel.rows[i]] += sel.weights[i] * in[i]
      b.embed(w, ids, out);                  // out[i] = row ids[i] of the table: a pass's tokens in one call
      b.download(host, in);                  // host.size() floats from backend memory to the host
      b.upload(out, host_in);                // host_in.size() floats from the host to backend memory
      b.argmax_rows(logit_rows, host_ids);   // host_ids[i] = kernels::argmax of row i: one int a row comes back
      b.top_k_rows(logit_rows, host_top, n); // host_top[i * n, + n) = kernels::top_k of row i: n pairs a row come back
      b.draw_rows(logit_rows, host_draws, host_ids);  // host_ids[i] = a draw from row i as kernels::draw_row(host_draws[i]) makes it
    };

// A backend that runs the hybrid layers of Qwen3.5 and Qwen3-Next: Gated DeltaNet (its states in each
// sequence's cache), gated attention's sigmoid gate, and column gathers (the query/gate split of q_proj,
// Qwen3-Next's fused projections). Its attention_inputs honours RopeTables::rotary_dim (partial RoPE). A
// model of a hybrid architecture is refused at load on a backend without them, naming it.
template <class B>
concept HybridBackend = Backend<B> && requires(B& b, const kernels::DeltaNetRows& rows, const kernels::DeltaNetLayer& layer,
                                               std::span<const kernels::DeltaNetSeq> seqs, float* x, const float* in, std::int64_t n,
                                               std::span<const kernels::ColumnRun> runs) {
  b.gated_delta_net(rows, layer, seqs);             // rows.out = the layer's core over every sequence's rows and states
  b.sigmoid_mul(x, in, n);                          // x[i] *= sigmoid(in[i])
  b.gather_columns(in, n, runs, x, n, n);           // out rows = the runs of each input row (in, in_width, runs, out, out_width, rows)
};

// What WeightLayout::packed repacks B's BF16/F16/F32 weights into: B::packed_layout where B declares
// one (the CPU's panels), else the checkpoint's own rows, and nothing is repacked.
template <class B>
inline constexpr kernels::Layout packed_layout_of = [] {
  if constexpr (requires { B::packed_layout; }) return kernels::Layout{B::packed_layout};
  else return kernels::Layout::rows;
}();

}  // namespace kylin
