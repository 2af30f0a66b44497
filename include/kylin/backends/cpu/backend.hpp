// The CPU backend: the Backend concept (backends/backend.hpp) over kernels/ on one jthread pool,
// in the kernel set the translation unit is compiled for (kernels/simd.hpp).
#pragma once

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <cstring>
#include <new>
#include <span>
#include <vector>

#include "kylin/backends/backend.hpp"
#include "kylin/core/huge_pages.hpp"
#include "kylin/core/thread_pool.hpp"
#include "kylin/kernels/attention.hpp"
#include "kylin/kernels/draw_row.hpp"
#include "kylin/kernels/linear_attention.hpp"
#include "kylin/kernels/matmul.hpp"
#include "kylin/kernels/ops.hpp"

namespace kylin {

class CpuBackend {
 public:
  static constexpr bool reads_host_weights = true;  // matmuls read weights where they lie, mapped file pages too (--experts mapped)
  // Everything the kernels need is allocated here, never per call: GEMM panels for the widest
  // matrix input, attention scratch for the largest GQA group.
  CpuBackend(const ModelConfig& c, const BackendOptions& o)
      : pool_(o.threads),
        matmul_scratch_(pool_.size(), std::max({c.hidden_size, c.intermediate_size, c.q_dim(), c.moe ? c.moe->moe_intermediate_size : 0}),
                        std::max<std::int64_t>(1, o.max_pass_rows) * (c.moe ? c.moe->num_experts_per_tok : 1),  // an MoE pass's routed rows
                        std::max(kernels::max_fused_products, static_cast<std::size_t>(c.moe ? 2 * c.moe->num_experts : 0))),
        attention_scratch_(pool_.size(), c.n_groups(), c.head_dim),
        sum_rows_(std::max<std::int64_t>(1, o.max_pass_rows)),
        sum_(allocate(static_cast<std::size_t>(sum_rows_ * c.hidden_size) * sizeof(float))),
        prefill_(o.prefill_activations) {
    if (c.linear)
      delta_scratch_ = kernels::DeltaNetScratch(pool_.size(), sum_rows_,
                                                {.nk = c.linear->linear_num_key_heads, .nv = c.linear->linear_num_value_heads,
                                                 .dk = c.linear->linear_key_head_dim, .dv = c.linear->linear_value_head_dim,
                                                 .conv_kernel = c.linear->linear_conv_kernel_dim});
    if (prefill_ == kernels::PrefillActivations::bf16 && !kernels::bf16_gemm_supported())
      throw no_bf16_prefill("a CPU with AVX512_BF16 and the AVX-512 kernels (these: " + std::string(kernel_set()) + ")");
    draw_.ids.reserve(static_cast<std::size_t>(c.vocab_size));
    draw_.weights.reserve(static_cast<std::size_t>(c.vocab_size));
  }

  ThreadPool& pool() { return pool_; }
  // The instruction set its kernels were compiled for: part of a saved KV state's identity.
  static std::string_view kernel_set() { return kernels::simd_arch_name(); }
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
  static void top_k_rows(const LogitRows& r, std::span<kernels::RankedLogit> top, std::int64_t k) {
    for (std::size_t i = 0; i * static_cast<std::size_t>(k) < top.size(); ++i)
      kernels::top_k({r.data + static_cast<std::int64_t>(i) * r.stride, static_cast<std::size_t>(r.width)},
                     top.subspan(i * static_cast<std::size_t>(k), static_cast<std::size_t>(k)));
  }

  // kernels::draw_row itself: the host draws as Sampler does, token for token.
  void draw_rows(const LogitRows& r, std::span<const kernels::RowDraw> draws, std::span<int> ids) {
    for (std::size_t i = 0; i < ids.size(); ++i)
      ids[i] = kernels::draw_row({r.data + static_cast<std::int64_t>(i) * r.stride, static_cast<std::size_t>(r.width)}, draws[i], draw_);
  }

  void matmul(const float* x, const kernels::MatRef& w, const float* bias, float* y, const kernels::RowPlan& plan) {
    kernels::matmul(x, w, bias, y, plan, pool_, matmul_scratch_, prefill_);
  }
  // The product into scratch, then one add: the same sums as matmul then add, bit for bit.
  // Residual products are hidden_size wide (o_proj, down_proj) and a pass has at most max_pass_rows rows.
  void matmul_add(const float* x, const kernels::MatRef& w, float* acc, const kernels::RowPlan& plan) {
    assert(plan.rows <= sum_rows_ && w.rows * plan.rows <= static_cast<std::int64_t>(sum_.bytes() / sizeof(float)));
    matmul(x, w, nullptr, sum_.as<float>(), plan);
    kernels::add_inplace(acc, sum_.as<float>(), plan.rows * w.rows);
  }
  // Products sharing the input x (q/k/v, gate/up): one fork-join streams all their weights, one per run of
  // products held alike (Gated DeltaNet's quantized in_proj_qkv/z beside its BF16 in_proj_b/a: the kernels
  // take one dtype and layout a call).
  void matmul_fused(const float* x, std::span<const kernels::MatmulOut> outs, const kernels::RowPlan& plan) {
    for (std::size_t i = 0; i < outs.size();) {
      std::size_t j = i + 1;
      while (j < outs.size() && outs[j].w.dtype == outs[i].w.dtype && outs[j].w.layout == outs[i].w.layout) ++j;
      kernels::matmul_fused(x, outs.subspan(i, j - i), plan, pool_, matmul_scratch_, prefill_);
      i = j;
    }
  }
  void swiglu(const float* x, const SwiGLUProduct& p, const kernels::RowPlan& plan) {
    const kernels::MatmulOut gate_up[] = {{p.gate, nullptr, p.y}, {p.up, nullptr, p.up_y}};
    matmul_fused(x, gate_up, plan);
    silu_mul(p.y, p.up_y, plan.rows * p.gate.rows);
  }
  // An MoE layer's experts over their decode rows: one fork-join for all of them.
  void matmul_each(std::span<const kernels::DotProduct> products) { kernels::matmul_each(products, pool_, matmul_scratch_, prefill_); }
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
  // Every query of one sequence over all its keys (a ViT's attention, vision/tower.hpp).
  void full_attention(const float* q, float* out, const kernels::AttentionSeq& seq, const kernels::AttentionHeads& h) {
    kernels::full_attention(q, out, seq, h, pool_, attention_scratch_);
  }
  // A Gated DeltaNet layer's conv, gates, delta rule and gated norm over every sequence of the pass.
  void gated_delta_net(const kernels::DeltaNetRows& rows, const kernels::DeltaNetLayer& layer, std::span<const kernels::DeltaNetSeq> seqs) {
    kernels::gated_delta_net(rows, layer, seqs, pool_, delta_scratch_);
  }
  void sigmoid_mul(float* x, const float* gate, std::int64_t n) {
    pool_.parallel_for(n, 4096, [&](std::int64_t i0, std::int64_t i1) { kernels::sigmoid_mul(x + i0, gate + i0, i1 - i0); });
  }
  static void gather_columns(const float* in, std::int64_t in_width, std::span<const kernels::ColumnRun> runs, float* out,
                             std::int64_t out_width, std::int64_t rows) {
    kernels::gather_columns(in, in_width, runs, out, out_width, rows);
  }
  void silu_mul(float* gate, const float* up, std::int64_t n) {
    pool_.parallel_for(n, 4096, [&](std::int64_t i0, std::int64_t i1) { kernels::silu_mul(gate + i0, up + i0, i1 - i0); });
  }
  void gelu_tanh(float* x, std::int64_t n) {
    pool_.parallel_for(n, 4096, [&](std::int64_t i0, std::int64_t i1) { kernels::gelu_tanh(x + i0, i1 - i0); });
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
  kernels::DrawScratch draw_;  // draw_rows' kept tokens and top-p histogram
  kernels::DeltaNetScratch delta_scratch_;  // Gated DeltaNet layers (hybrid configs only)
  kernels::PrefillActivations prefill_;  // what the GEMM rows of BF16 weights multiply
};

static_assert(Backend<CpuBackend>, "CpuBackend must model the Backend concept");
static_assert(HybridBackend<CpuBackend>, "CpuBackend runs the hybrid (Gated DeltaNet) layers");

}  // namespace kylin
