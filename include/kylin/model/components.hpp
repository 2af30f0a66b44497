// The transformer's building blocks as types: RMSNorm, grouped-query attention (with Qwen3's
// per-head q/k RMSNorm or Qwen2's q/k/v biases, chosen at compile time), the SwiGLU MLP and
// Qwen3-MoE's routed experts.
// Each holds views of its weights and runs one Pass (rows of several sequences) on any Backend.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "kylin/backends/backend.hpp"
#include "kylin/model/kv_cache.hpp"
#include "kylin/model/routing.hpp"
#include "kylin/model/weights.hpp"

namespace kylin {

// Rows of one pass that a sequence wants back: rows [first, first + count) of its chunk.
struct OutputRows {
  std::int64_t first = 0;
  std::int64_t count = 0;         // 0: nothing (an early chunk of a long prompt)
  std::span<float> logits = {};   // [count, vocab] on the host, or empty
  std::span<float> hidden = {};   // [count, hidden] on the host, or empty
  std::span<int> greedy = {};     // [count] on the host, or empty (ForwardOutputs::greedy)
  std::span<kernels::RankedLogit> top = {};  // [count, top_k] on the host, or empty (ForwardOutputs::top)
  std::int64_t top_k = 0;
  std::int64_t pick_end = 0;    // ids at or past it are not picked
  std::span<int> drawn = {};                     // [count] on the host, or empty (ForwardOutputs::drawn)
  std::span<const kernels::RowDraw> draws = {};  // [count] their draws
};

// One sequence's chunk in a pass: `tokens` at positions cache->size().. fill rows [row0, row0 + n).
struct PassSequence {
  KVCache* cache;  // never null
  std::span<const int> tokens;
  std::int64_t row0 = 0;
  OutputRows out;
  std::int64_t n() const { return static_cast<std::int64_t>(tokens.size()); }
};

// One forward pass over the rows of several sequences. Sequences with a single new token come
// first, and their rows take the matmuls' dot-product kernel (kernels::RowPlan).
struct Pass {
  std::span<const PassSequence> seqs;
  std::int64_t rows = 0;
  std::int64_t decode_rows = 0;
  kernels::RowPlan plan() const { return {rows, decode_rows}; }
};

// One expert's rows in a SparseMoE pass: gathered at row `at` of Workspace::expert_in.
struct ExpertBlock {
  kernels::RowSelection rows;
  const ExpertWeights* expert;
  std::int64_t at;
};

// Activation buffers for a pass of up to `max_pass_rows` rows, in one allocation of the backend.
class Workspace {
 public:
  // LM-head rows computed per call: bounds the logits buffer when every position is wanted.
  static constexpr std::int64_t logit_rows = 16;

  template <Backend B>
  Workspace(B& b, const ModelConfig& c, std::int64_t max_pass_rows) : max_pass_rows(max_pass_rows) {
    const std::int64_t T = max_pass_rows, H = c.hidden_size, half = c.head_dim / 2;
    // An MoE pass gathers every row's k experts' rows at once: k * T rows of moe_intermediate.
    const std::int64_t moe_rows = c.moe ? T * c.moe->num_experts_per_tok : 0, E = c.moe ? c.moe->num_experts : 0;
    const std::int64_t I = std::max(c.intermediate_size, c.moe ? c.moe->num_experts_per_tok * c.moe->moe_intermediate_size : 0);
    // Each view with its size in floats, in one table so that the two cannot fall out of step.
    const struct {
      float** view;
      std::int64_t floats;
    } buffers[] = {
        {&x, T * H},           {&xn, T * H},          {&out, T * H},
        {&q, T * c.q_dim()},   {&k, T * c.kv_dim()},  {&v, T * c.kv_dim()},
        {&attn, T * c.q_dim()}, {&gate, T * I},        {&up, T * I},
        {&cos, T * half},      {&sin, T * half},      {&logits, std::min(T, logit_rows) * c.vocab_size},
        {&router, T * E},      {&expert_in, moe_rows * H},
    };
    std::size_t bytes = 0;
    for (const auto& buf : buffers) bytes += padded(buf.floats);
    memory_ = b.allocate(bytes);
    std::size_t offset = 0;
    for (const auto& buf : buffers) {
      *buf.view = memory_.as<float>(offset);
      offset += padded(buf.floats);
    }
    expert_out = expert_in;  // the gathered rows are read by gate/up before down writes its outputs
    attention_seqs.reserve(static_cast<std::size_t>(T));
    ids_host.resize(static_cast<std::size_t>(T));
    picked_ids.resize(static_cast<std::size_t>(logit_rows));
    picked_draws.resize(static_cast<std::size_t>(logit_rows));
    cos_host.resize(static_cast<std::size_t>(T * half));
    sin_host.resize(static_cast<std::size_t>(T * half));
    if (c.moe) {
      routing = ExpertRouting(T, *c.moe);
      expert_blocks.reserve(static_cast<std::size_t>(c.moe->num_experts));
      expert_products.reserve(static_cast<std::size_t>(2 * c.moe->num_experts));
    }
  }

  std::int64_t max_pass_rows;
  float* x = nullptr;       // [T, hidden]              residual stream
  float* xn = nullptr;      // [T, hidden]              normalised input of a sub-layer
  float* out = nullptr;     // [T, hidden]              an MoE layer's output before it joins the residual stream
  float* q = nullptr;       // [T, n_heads*head_dim]
  float* k = nullptr;       // [T, n_kv_heads*head_dim]
  float* v = nullptr;       // [T, n_kv_heads*head_dim]
  float* attn = nullptr;    // [T, n_heads*head_dim]    attention output before o_proj
  float* gate = nullptr;    // [T, max(intermediate, k * moe_intermediate)]
  float* up = nullptr;      // [T, max(intermediate, k * moe_intermediate)]
  float* cos = nullptr;     // [T, head_dim/2]          rotary table of each row's position
  float* sin = nullptr;     // [T, head_dim/2]
  float* logits = nullptr;  // [logit_rows, vocab]      LM-head output before it goes to the host
  float* router = nullptr;      // [T, num_experts]     router logits       (MoE configs only)
  float* expert_in = nullptr;   // [k * T, hidden]      every row's experts' rows, gathered expert by expert
  float* expert_out = nullptr;  // [k * T, hidden]      their outputs before they are weighted into `out` (expert_in's memory)
  ExpertRouting routing;        // host-side top-k choice and per-expert row groups
  std::vector<ExpertBlock> expert_blocks;             // [<= num_experts] rows gathered per expert
  std::vector<kernels::DotProduct> expert_products;   // [<= 2 * num_experts] their products of one pass
  std::vector<kernels::AttentionSeq> attention_seqs;  // [<= T] host-side per-sequence attention arguments
  std::vector<int> ids_host;                           // [T] the pass's token ids in row order
  std::vector<float> cos_host, sin_host;               // [T, head_dim/2] rotary tables, made on the host, uploaded to cos/sin
  std::vector<int> picked_ids;                         // [logit_rows] greedy or drawn ids of a run of sequences, before each gets its share
  std::vector<kernels::RowDraw> picked_draws;          // [logit_rows] the run's draws, gathered from its sequences
  std::vector<kernels::RankedLogit> picked_top;        // [logit_rows, top_k] their top-k, grown to the largest top_k asked

 private:
  static std::size_t padded(std::int64_t floats) { return (static_cast<std::size_t>(floats) * sizeof(float) + 63) / 64 * 64; }
  Memory memory_;
};

struct RMSNorm {
  MatRef weight;  // [dim]
  double eps;

  template <Backend B>
  void operator()(B& b, const float* x, float* out, std::int64_t rows) const {
    b.rms_norm(x, weight, out, rows, eps);
  }
};

// QKNorm (Qwen3's per-head q/k RMSNorm) and QKVBias (Qwen2's q/k/v biases): model/arch.hpp

template <QKNorm qk_norm, QKVBias bias>
struct GroupedQueryAttention {
  static constexpr QKNorm qk_norm_kind = qk_norm;
  static constexpr QKVBias bias_kind = bias;

  const LayerWeights* w;
  std::int64_t n_heads, n_kv_heads, head_dim;
  double eps;

  // acc[R, hidden] += attention of xn[R, hidden]: each sequence's rows against (and into) its own cache.
  template <Backend B>
  void operator()(B& b, Workspace& ws, const float* xn, float* acc, const Pass& pass, std::int64_t layer) const {
    const std::int64_t R = pass.rows;
    // q/k/v projections (+ biases for Qwen2), in one pass over the three weights
    const kernels::MatmulOut qkv[] = {{w->q_proj, bias_ptr(w->q_bias), ws.q}, {w->k_proj, bias_ptr(w->k_bias), ws.k},
                                      {w->v_proj, bias_ptr(w->v_bias), ws.v}};
    b.matmul_fused(xn, qkv, pass.plan());
    // Qwen3's per-head q/k RMSNorm, RoPE on q and k (each row at its own position), and each
    // sequence's new keys/values appended to its cache
    ws.attention_seqs.clear();
    for (const PassSequence& s : pass.seqs)
      ws.attention_seqs.push_back({s.cache->keys(layer), s.cache->values(layer), s.cache->head_stride(), s.row0, s.n(), s.cache->size()});
    b.attention_inputs({ws.q, ws.k, ws.v, R, n_heads, n_kv_heads, head_dim}, norms(), {ws.cos, ws.sin}, ws.attention_seqs);
    // causal GQA softmax(q k^T * head_dim^-0.5) v of every sequence over its cached positions
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
    b.attention(ws.q, ws.attn, ws.attention_seqs, {n_heads, n_kv_heads, head_dim, scale});
    // output projection, added to the residual stream
    b.matmul_add(ws.attn, w->o_proj, acc, pass.plan());
  }

 private:
  QKNorms norms() const {
    if constexpr (qk_norm == QKNorm::per_head) return {w->q_norm, w->k_norm, eps};
    return {};
  }
  static const float* bias_ptr(const std::vector<float>& b) {
    if constexpr (bias == QKVBias::qkv) return b.data();
    (void)b;
    return nullptr;
  }
};

struct SwiGLU {
  const LayerWeights* w;
  std::int64_t intermediate_size;

  static SwiGLU from(const LayerWeights& L, const ModelConfig& c) { return {&L, c.intermediate_size}; }

  // acc[R, hidden] += down(silu(gate(xn)) * up(xn))
  template <Backend B>
  void operator()(B& b, Workspace& ws, const float* xn, float* acc, const Pass& pass) const {
    b.swiglu(xn, {w->gate_proj, w->up_proj, ws.gate, ws.up}, pass.plan());
    b.matmul_add(ws.gate, w->down_proj, acc, pass.plan());
  }
};

// Qwen3-MoE's MLP slot: in a sparse layer, each row's top-k experts (ExpertRouting) weighted by
// the router. Every row of a pass (decode and prefill alike) runs its chosen experts in two
// parallel passes (gate/up, then down), reading only the chosen experts, each once.
// A dense layer (mlp_only_layers, decoder_sparse_step) is a plain SwiGLU.
struct SparseMoE {
  const LayerWeights* w;
  std::int64_t intermediate_size, moe_intermediate_size;

  static SparseMoE from(const LayerWeights& L, const ModelConfig& c) {
    return {&L, c.intermediate_size, c.moe ? c.moe->moe_intermediate_size : 0};
  }

  // acc[R, hidden] += out[R, hidden] = sum over each row's experts e (ascending) of weight_e *
  // down_e(silu(gate_e(xn)) * up_e(xn)), out summed in Workspace::out
  template <Backend B>
  void operator()(B& b, Workspace& ws, const float* xn, float* acc, const Pass& pass) const {
    if (w->experts.empty()) return SwiGLU{w, intermediate_size}(b, ws, xn, acc, pass);
    const std::int64_t R = pass.rows;
    float* out = ws.out;
    // router logits, then each row's top-k experts and weights on the host
    b.matmul(xn, w->router, nullptr, ws.router, pass.plan());
    b.download(ws.routing.logits(R), ws.router);
    ws.routing.route(R);
    b.fill_zero(out, R * w->router.cols);
    expert_rows(b, ws, xn, out);
    b.add(acc, out, R * w->router.cols);
  }

 private:
  // Every row of the pass (decode and prefill alike): each expert's rows gathered one after
  // another, gate/up of all experts in one matmul pass, down of all in another, so a prefill's
  // experts share a fork-join instead of taking one each (the kernels pick the GEMM for the
  // experts with enough rows; their outputs are the same bits as one expert at a time).
  template <Backend B>
  void expert_rows(B& b, Workspace& ws, const float* xn, float* out) const {
    const std::int64_t H = w->router.cols, M = moe_intermediate_size;
    auto& blocks = ws.expert_blocks;
    auto& products = ws.expert_products;
    blocks.clear();
    products.clear();
    std::int64_t at = 0;  // routed rows gathered so far
    for (std::int64_t e = 0; e < ws.routing.experts(); ++e) {
      const kernels::RowSelection part = ws.routing.group(e);
      if (part.rows.empty()) continue;
      const auto n = static_cast<std::int64_t>(part.rows.size());
      const ExpertWeights& x = w->experts[static_cast<std::size_t>(e)];
      b.gather_rows(xn, part, ws.expert_in + at * H, H);
      products.push_back({ws.expert_in + at * H, n, {x.gate_proj, nullptr, ws.gate + at * M}});
      products.push_back({ws.expert_in + at * H, n, {x.up_proj, nullptr, ws.up + at * M}});
      blocks.push_back({part, &x, at});
      at += n;
    }
    b.matmul_each(products);
    b.silu_mul(ws.gate, ws.up, at * M);
    products.clear();
    for (const ExpertBlock& blk : blocks)
      products.push_back({ws.gate + blk.at * M, static_cast<std::int64_t>(blk.rows.rows.size()),
                          {blk.expert->down_proj, nullptr, ws.expert_out + blk.at * H}});
    b.matmul_each(products);
    for (const ExpertBlock& blk : blocks) b.add_rows_scaled(out, ws.expert_out + blk.at * H, blk.rows, H);
  }
};

}  // namespace kylin
