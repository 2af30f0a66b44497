// The transformer's building blocks as types: RMSNorm, grouped-query attention (with Qwen3's
// per-head q/k RMSNorm or Qwen2's q/k/v biases, chosen at compile time), and the SwiGLU MLP.
// Each holds views of its weights and runs on any Backend over a preallocated Workspace.
#pragma once

#include <cstdint>
#include <vector>

#include "kylin/model/backend.hpp"
#include "kylin/model/kv_cache.hpp"
#include "kylin/model/weights.hpp"

namespace kylin {

// Activation buffers for one chunk of up to `max_tokens` tokens, allocated once at load.
struct Workspace {
  explicit Workspace(const ModelConfig& c, std::int64_t max_tokens)
      : max_tokens(max_tokens),
        x(size(max_tokens * c.hidden_size)),
        xn(size(max_tokens * c.hidden_size)),
        out(size(max_tokens * c.hidden_size)),
        q(size(max_tokens * c.q_dim())),
        k(size(max_tokens * c.kv_dim())),
        v(size(max_tokens * c.kv_dim())),
        attn(size(max_tokens * c.q_dim())),
        gate(size(max_tokens * c.intermediate_size)),
        up(size(max_tokens * c.intermediate_size)),
        cos(size(max_tokens * c.head_dim / 2)),
        sin(size(max_tokens * c.head_dim / 2)) {}

  static std::size_t size(std::int64_t n) { return static_cast<std::size_t>(n); }

  std::int64_t max_tokens;
  std::vector<float> x;     // [T, hidden]              residual stream
  std::vector<float> xn;    // [T, hidden]              normalised input of a sub-layer
  std::vector<float> out;   // [T, hidden]              sub-layer output
  std::vector<float> q;     // [T, n_heads*head_dim]
  std::vector<float> k;     // [T, n_kv_heads*head_dim]
  std::vector<float> v;     // [T, n_kv_heads*head_dim]
  std::vector<float> attn;  // [T, n_heads*head_dim]    attention output before o_proj
  std::vector<float> gate;  // [T, intermediate]
  std::vector<float> up;    // [T, intermediate]
  std::vector<float> cos;   // [T, head_dim/2]
  std::vector<float> sin;   // [T, head_dim/2]
};

struct RMSNorm {
  MatRef weight;  // [dim]
  double eps;

  template <Backend B>
  void operator()(B& b, const float* x, float* out, std::int64_t rows) const {
    b.rms_norm(x, weight, out, rows, weight.cols, eps);
  }
};

enum class QKNorm { none, per_head };  // Qwen3 normalises each head's q and k before RoPE
enum class QKVBias { none, qkv };      // Qwen2 adds biases to the q/k/v projections

template <QKNorm qk_norm, QKVBias bias>
struct GroupedQueryAttention {
  static constexpr QKNorm qk_norm_kind = qk_norm;
  static constexpr QKVBias bias_kind = bias;

  const LayerWeights* w;
  std::int64_t n_heads, n_kv_heads, head_dim;
  double eps;

  // out[T, hidden] = attention of xn[T, hidden] at positions pos0.. against (and into) the cache.
  template <Backend B>
  void operator()(B& b, Workspace& ws, const float* xn, float* out, std::int64_t T, KVCache& cache,
                  std::int64_t layer) const {
    const std::int64_t pos0 = cache.size();
    // q/k/v projections (+ biases for Qwen2), in one pass over the three weights
    const kernels::MatmulOut qkv[] = {{w->q_proj, bias_ptr(w->q_bias), ws.q.data()},
                                      {w->k_proj, bias_ptr(w->k_bias), ws.k.data()},
                                      {w->v_proj, bias_ptr(w->v_bias), ws.v.data()}};
    b.matmul_fused(xn, qkv, T);
    // Qwen3: RMSNorm over each head's head_dim slice, before RoPE
    if constexpr (qk_norm == QKNorm::per_head) {
      b.rms_norm(ws.q.data(), w->q_norm, ws.q.data(), T * n_heads, head_dim, eps);
      b.rms_norm(ws.k.data(), w->k_norm, ws.k.data(), T * n_kv_heads, head_dim, eps);
    }
    // rotary position embedding on q and k
    b.rope(ws.q.data(), ws.cos.data(), ws.sin.data(), T, n_heads, head_dim);
    b.rope(ws.k.data(), ws.cos.data(), ws.sin.data(), T, n_kv_heads, head_dim);
    // append the new keys/values to the cache
    b.store_kv(cache.keys(layer), ws.k.data(), T, pos0, n_kv_heads, head_dim, cache.head_stride());
    b.store_kv(cache.values(layer), ws.v.data(), T, pos0, n_kv_heads, head_dim, cache.head_stride());
    // causal GQA softmax(q k^T * head_dim^-0.5) v over all cached positions
    const kernels::AttentionShape shape{T, pos0, n_heads, n_kv_heads, head_dim, cache.head_stride(),
                                        static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)))};
    b.attention(ws.q.data(), cache.keys(layer), cache.values(layer), ws.attn.data(), shape);
    // output projection
    b.matmul(ws.attn.data(), w->o_proj, nullptr, out, T);
  }

 private:
  static const float* bias_ptr(const std::vector<float>& b) {
    if constexpr (bias == QKVBias::qkv) return b.data();
    (void)b;
    return nullptr;
  }
};

struct SwiGLU {
  const LayerWeights* w;
  std::int64_t intermediate_size;

  // out[T, hidden] = down(silu(gate(xn)) * up(xn))
  template <Backend B>
  void operator()(B& b, Workspace& ws, const float* xn, float* out, std::int64_t T) const {
    const kernels::MatmulOut gate_up[] = {{w->gate_proj, nullptr, ws.gate.data()}, {w->up_proj, nullptr, ws.up.data()}};
    b.matmul_fused(xn, gate_up, T);
    b.silu_mul(ws.gate.data(), ws.up.data(), T * intermediate_size);
    b.matmul(ws.gate.data(), w->down_proj, nullptr, out, T);
  }
};

using Qwen3Attention = GroupedQueryAttention<QKNorm::per_head, QKVBias::none>;
using Qwen2Attention = GroupedQueryAttention<QKNorm::none, QKVBias::qkv>;

}  // namespace kylin
