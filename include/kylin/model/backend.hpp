// The Backend concept: the handful of operations the transformer components call, and the memory
// they run on. The model code is written against it only, so a CUDA or Metal backend is a new
// type, not a new model. CpuBackend is the first model of the concept: kernels/ on a jthread pool.
#pragma once

#include <algorithm>
#include <cassert>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <new>
#include <span>
#include <string>
#include <utility>

#include "kylin/core/error.hpp"
#include "kylin/core/huge_pages.hpp"
#include "kylin/core/thread_pool.hpp"
#include "kylin/io/config.hpp"
#include "kylin/kernels/attention.hpp"
#include "kylin/kernels/matmul.hpp"
#include "kylin/kernels/ops.hpp"

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
};

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

// Logit rows whose greedy ids a backend picks (argmax_rows): row i is data[i * stride, + width);
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
             const LogitRows& logit_rows, std::span<int> host_ids) {
      { b.allocate(bytes) } -> std::same_as<Memory>;  // uninitialised; pages may be committed on first use
      { b.allocate_weights(bytes) } -> std::same_as<Memory>;  // the same for weights, read whole by every pass
      { B::packed_layout } -> std::convertible_to<kernels::Layout>;  // what WeightLayout::packed repacks weights into
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
    };

class CpuBackend {
 public:
  // Everything the kernels need is allocated here, never per call: GEMM panels for the widest
  // matrix input, attention scratch for the largest GQA group.
  CpuBackend(const ModelConfig& c, const BackendOptions& o)
      : pool_(o.threads),
        matmul_scratch_(pool_.size(), std::max({c.hidden_size, c.intermediate_size, c.q_dim(), c.moe ? c.moe->moe_intermediate_size : 0}),
                        std::max<std::int64_t>(1, o.max_pass_rows) * (c.moe ? c.moe->num_experts_per_tok : 1),  // an MoE pass's routed rows
                        std::max(kernels::max_fused_products, static_cast<std::size_t>(c.moe ? 2 * c.moe->num_experts : 0))),
        attention_scratch_(pool_.size(), c.n_groups(), c.head_dim),
        sum_rows_(std::max<std::int64_t>(1, o.max_pass_rows)),
        sum_(allocate(static_cast<std::size_t>(sum_rows_ * c.hidden_size) * sizeof(float))) {}

  ThreadPool& pool() { return pool_; }
  int threads() const { return pool_.size(); }

  // The kernels' own layout for BF16/F16/F32 weights: every output a single FMA chain, one
  // contiguous stream per 16 rows (kernels/panel.hpp).
  static constexpr kernels::Layout packed_layout = kernels::Layout::panels;

  // 64-byte aligned and not value-initialised: an 8k-context KV cache costs memory only for the
  // 4 KiB pages its written positions touch.
  static Memory allocate(std::size_t bytes) {
    void* p = ::operator new[](std::max<std::size_t>(bytes, 1), std::align_val_t{64});
    return Memory(p, bytes, [](void* q, std::size_t) { ::operator delete[](q, std::align_val_t{64}); });
  }
  // Weights are streamed whole by every pass: from 2 MiB on, in huge pages (core/huge_pages.hpp),
  // which a KV cache is not given, since each position written would commit 2 MiB of it.
  static Memory allocate_weights(std::size_t bytes) {
    if (bytes < detail::huge_page_bytes) return allocate(bytes);
    std::byte* p = detail::map_huge(bytes);
    if (!p) throw std::bad_alloc();
    return Memory(p, bytes, [](void* q, std::size_t n) { detail::unmap_huge(q, n); });
  }
  static void download(std::span<float> host, const float* src) { std::memcpy(host.data(), src, host.size_bytes()); }
  static void upload(float* dst, std::span<const float> host) { std::memcpy(dst, host.data(), host.size_bytes()); }
  static void argmax_rows(const LogitRows& r, std::span<int> ids) {
    for (std::size_t i = 0; i < ids.size(); ++i)
      ids[i] = kernels::argmax({r.data + static_cast<std::int64_t>(i) * r.stride, static_cast<std::size_t>(r.width)});
  }

  void matmul(const float* x, const kernels::MatRef& w, const float* bias, float* y, const kernels::RowPlan& plan) {
    kernels::matmul(x, w, bias, y, plan, pool_, matmul_scratch_);
  }
  // The product into scratch, then one add: the same sums as matmul then add, bit for bit.
  // Residual products are hidden_size wide (o_proj, down_proj) and a pass has at most max_pass_rows rows.
  void matmul_add(const float* x, const kernels::MatRef& w, float* acc, const kernels::RowPlan& plan) {
    assert(plan.rows <= sum_rows_ && w.rows * plan.rows <= static_cast<std::int64_t>(sum_.bytes() / sizeof(float)));
    matmul(x, w, nullptr, sum_.as<float>(), plan);
    kernels::add_inplace(acc, sum_.as<float>(), plan.rows * w.rows);
  }
  // Products sharing the input x (q/k/v, gate/up): one fork-join streams all their weights.
  void matmul_fused(const float* x, std::span<const kernels::MatmulOut> outs, const kernels::RowPlan& plan) {
    kernels::matmul_fused(x, outs, plan, pool_, matmul_scratch_);
  }
  void swiglu(const float* x, const SwiGLUProduct& p, const kernels::RowPlan& plan) {
    const kernels::MatmulOut gate_up[] = {{p.gate, nullptr, p.y}, {p.up, nullptr, p.up_y}};
    matmul_fused(x, gate_up, plan);
    silu_mul(p.y, p.up_y, plan.rows * p.gate.rows);
  }
  // An MoE layer's experts over their decode rows: one fork-join for all of them.
  void matmul_each(std::span<const kernels::DotProduct> products) { kernels::matmul_each(products, pool_, matmul_scratch_); }
  // Norms of fewer than `min_parallel_norm` elements (every norm of a decode step) run on the
  // calling thread: a fork-join would cost more than the work.
  static constexpr std::int64_t min_parallel_norm = std::int64_t{1} << 15;
  void rms_norm(const float* x, const kernels::MatRef& w, float* out, std::int64_t rows, double eps) {
    const std::int64_t dim = w.cols, grain = rows * dim < min_parallel_norm ? rows : 8;
    pool_.parallel_for(rows, grain, [&](std::int64_t r0, std::int64_t r1) {
      kernels::rms_norm(x + r0 * dim, w, out + r0 * dim, r1 - r0, eps);
    });
  }
  // Qwen3's per-head norms (when given), RoPE on q and k, then each sequence's new keys and values
  // into its cache (seqs: its caches, rows and first position).
  void attention_inputs(const QKVRows& r, const QKNorms& norms, const kernels::RopeTables& tables,
                        std::span<const kernels::AttentionSeq> seqs) {
    if (norms.q.data) {
      rms_norm(r.q, norms.q, r.q, r.rows * r.n_heads, norms.eps);
      rms_norm(r.k, norms.k, r.k, r.rows * r.n_kv_heads, norms.eps);
    }
    kernels::rope(r.q, {r.rows, r.n_heads, r.head_dim}, tables);
    kernels::rope(r.k, {r.rows, r.n_kv_heads, r.head_dim}, tables);
    const std::int64_t kv_dim = r.n_kv_heads * r.head_dim;
    for (const kernels::AttentionSeq& s : seqs) {
      const kernels::KVLayout layout{r.n_kv_heads, r.head_dim, s.kv_stride};
      kernels::store_kv(s.k, layout, {r.k + s.row0 * kv_dim, s.n_tokens, s.pos0});
      kernels::store_kv(s.v, layout, {r.v + s.row0 * kv_dim, s.n_tokens, s.pos0});
    }
  }
  void attention(const float* q, float* out, std::span<const kernels::AttentionSeq> seqs, const kernels::AttentionHeads& h) {
    kernels::attention(q, out, seqs, h, pool_, attention_scratch_);
  }
  void silu_mul(float* gate, const float* up, std::int64_t n) {
    pool_.parallel_for(n, 4096, [&](std::int64_t i0, std::int64_t i1) { kernels::silu_mul(gate + i0, up + i0, i1 - i0); });
  }
  void add(float* acc, const float* x, std::int64_t n) { kernels::add_inplace(acc, x, n); }
  static void fill_zero(float* out, std::int64_t n) { std::fill_n(out, n, 0.0f); }
  static void gather_rows(const float* x, const kernels::RowSelection& sel, float* out, std::int64_t width) {
    kernels::gather_rows(x, sel, out, width);
  }
  static void add_rows_scaled(float* acc, const float* y, const kernels::RowSelection& sel, std::int64_t width) {
    kernels::add_rows_scaled(acc, y, sel, width);
  }
  static void embed(const kernels::MatRef& table, std::span<const int> ids, float* out) {
    for (std::size_t i = 0; i < ids.size(); ++i) kernels::embed_row(table, ids[i], out + static_cast<std::int64_t>(i) * table.cols);
  }

 private:
  ThreadPool pool_;
  kernels::MatmulScratch matmul_scratch_;
  kernels::AttentionScratch attention_scratch_;
  std::int64_t sum_rows_;
  Memory sum_;  // [max_pass_rows, hidden] a residual product before matmul_add adds it
};

static_assert(Backend<CpuBackend>, "CpuBackend must model the Backend concept");

}  // namespace kylin
