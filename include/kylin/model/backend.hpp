// The Backend concept: the handful of operations the transformer components call. The model
// code is written against it only, so a CUDA or Metal backend is a new type, not a new model.
// CpuBackend is the first model of the concept: kernels/ on a std::jthread pool.
#pragma once

#include <concepts>
#include <cstdint>
#include <span>

#include "kylin/core/thread_pool.hpp"
#include "kylin/kernels/attention.hpp"
#include "kylin/kernels/matmul.hpp"
#include "kylin/kernels/ops.hpp"

namespace kylin {

template <class B>
concept Backend = requires(B& b, const float* in, float* out, const kernels::MatRef& w, std::int64_t n,
                           double eps, const kernels::AttentionShape& shape, kernels::KVRef kv,
                           std::span<const kernels::MatmulOut> outs) {
  b.matmul(in, w, in, out, n);                // out[n, w.rows] = in[n, w.cols] · w^T + bias
  b.matmul_fused(in, outs, n);                // several such products of one input in one pass
  b.rms_norm(in, w, out, n, n, eps);          // rows x dim, in place allowed
  b.rope(out, in, in, n, n, n);               // x, cos, sin, tokens, heads, head_dim
  b.store_kv(kv, in, n, n, n, n, n);          // cache, new rows, tokens, pos0, kv heads, head_dim, head stride
  b.attention(in, kv, kv, out, shape);        // q, k cache, v cache, out
  b.silu_mul(out, in, n);
  b.add(out, in, n);
  b.embed(w, n, out);
};

class CpuBackend {
 public:
  // max_cols / max_tokens: widest matrix input and largest chunk (GEMM panels);
  // max_groups / head_dim: attention scratch. Everything is allocated here, never per call.
  CpuBackend(int threads, std::int64_t max_cols, std::int64_t max_groups, std::int64_t head_dim, std::int64_t max_tokens)
      : pool_(threads),
        matmul_scratch_(pool_.size(), max_cols, max_tokens),
        attention_scratch_(pool_.size(), max_groups, head_dim) {}

  ThreadPool& pool() { return pool_; }
  int threads() const { return pool_.size(); }

  void matmul(const float* x, const kernels::MatRef& w, const float* bias, float* y, std::int64_t n_tokens) {
    kernels::matmul(x, w, bias, y, n_tokens, pool_, matmul_scratch_);
  }
  // Products sharing the input x (q/k/v, gate/up): one fork-join streams all their weights.
  void matmul_fused(const float* x, std::span<const kernels::MatmulOut> outs, std::int64_t n_tokens) {
    kernels::matmul_fused(x, outs, n_tokens, pool_, matmul_scratch_);
  }
  // Norms of fewer than `min_parallel_norm` elements (every norm of a decode step) run on the
  // calling thread: a fork-join would cost more than the work.
  static constexpr std::int64_t min_parallel_norm = std::int64_t{1} << 15;
  void rms_norm(const float* x, const kernels::MatRef& w, float* out, std::int64_t rows, std::int64_t dim, double eps) {
    const std::int64_t grain = rows * dim < min_parallel_norm ? rows : 8;
    pool_.parallel_for(rows, grain, [&](std::int64_t r0, std::int64_t r1) {
      kernels::rms_norm(x + r0 * dim, w, out + r0 * dim, r1 - r0, dim, eps);
    });
  }
  void rope(float* x, const float* cos, const float* sin, std::int64_t n_tokens, std::int64_t n_heads, std::int64_t head_dim) {
    kernels::rope(x, cos, sin, n_tokens, n_heads, head_dim);
  }
  // Copies new key or value rows [n_tokens, n_kv*head_dim] into the cache layout [n_kv][capacity][head_dim].
  void store_kv(kernels::KVRef cache, const float* rows, std::int64_t n_tokens, std::int64_t pos0, std::int64_t n_kv,
                std::int64_t head_dim, std::int64_t head_stride) {
    kernels::store_kv(cache, rows, n_tokens, pos0, n_kv, head_dim, head_stride);
  }
  void attention(const float* q, kernels::KVRef k, kernels::KVRef v, float* out, const kernels::AttentionShape& s) {
    kernels::attention(q, k, v, out, s, pool_, attention_scratch_);
  }
  void silu_mul(float* gate, const float* up, std::int64_t n) {
    pool_.parallel_for(n, 4096, [&](std::int64_t i0, std::int64_t i1) { kernels::silu_mul(gate + i0, up + i0, i1 - i0); });
  }
  void add(float* acc, const float* x, std::int64_t n) { kernels::add_inplace(acc, x, n); }
  void embed(const kernels::MatRef& table, std::int64_t id, float* out) { kernels::embed_row(table, id, out); }

 private:
  ThreadPool pool_;
  kernels::MatmulScratch matmul_scratch_;
  kernels::AttentionScratch attention_scratch_;
};

static_assert(Backend<CpuBackend>, "CpuBackend must model the Backend concept");

}  // namespace kylin
