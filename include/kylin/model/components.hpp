// The transformer's building blocks as types: RMSNorm, grouped-query attention (with Qwen3's
// per-head q/k RMSNorm or Qwen2's q/k/v biases, chosen at compile time), the SwiGLU MLP and
// the routed experts (with Qwen3.5's gated shared expert). The hybrid stack's mixers (gated attention,
// Gated DeltaNet) are in model/hybrid_components.hpp.
// Each holds views of its weights and runs one Pass (rows of several sequences) on any Backend.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "kylin/backends/backend.hpp"
#include "kylin/model/image_rows.hpp"
#include "kylin/model/kv_cache.hpp"
#include "kylin/model/routing.hpp"
#include "kylin/model/weights.hpp"

namespace kylin {

// Rows of one pass that a sequence wants back: rows [first, first + count) of its chunk through the LM head,
// rows [hidden_first, hidden_first + hidden_count) as final hidden states.
struct OutputRows {
  std::int64_t first = 0;
  std::int64_t count = 0;         // 0: no logits (an early chunk of a long prompt, hidden states only)
  std::span<float> logits = {};   // [count, vocab] on the host, or empty
  std::int64_t hidden_first = 0;
  std::int64_t hidden_count = 0;
  std::span<float> hidden = {};   // [hidden_count, hidden] on the host, or empty
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
  std::span<const std::int64_t> keep_states = {};  // positions whose recurrent states the cache keeps (SequenceInput::keep_states)
  std::span<const float> hidden_in = {};  // [n, hidden] the MTP head's second input (SequenceInput::hidden_in), or empty
  std::span<const ImageRows> images = {};  // the chunk's image tokens (SequenceInput::images), rows relative to the chunk
  std::int64_t n() const { return static_cast<std::int64_t>(tokens.size()); }
};

// One forward pass over the rows of several sequences. Sequences with a single new token come
// first, and their rows take the matmuls' dot-product kernel (kernels::RowPlan).
struct Pass {
  std::span<const PassSequence> seqs;
  std::int64_t rows = 0;
  std::int64_t decode_rows = 0;
  kernels::RowPlan plan() const { return {rows, decode_rows}; }
  // Whether sequence s's rows are decode rows (the planner puts them first).
  bool decodes(const PassSequence& s) const { return s.row0 < decode_rows; }
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
    const std::int64_t I = std::max({c.intermediate_size, c.moe ? c.moe->num_experts_per_tok * c.moe->moe_intermediate_size : 0,
                                     c.moe ? c.moe->shared_expert_intermediate_size : 0});
    const bool gated = find_arch(c.model_type) && find_arch(c.model_type)->attention_output_gate;
    const std::int64_t S = c.moe && c.moe->shared_expert_intermediate_size > 0 ? T * H : 0;  // shared expert outputs
    const LinearAttentionConfig g = c.linear.value_or(LinearAttentionConfig{.linear_num_key_heads = 0, .linear_num_value_heads = 0});
    const bool fused = c.linear && find_arch(c.model_type)->linear_projections == LinearProjections::fused_per_key_head;
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
        {&query_gate, gated ? T * 2 * c.q_dim() : 0}, {&attn_gate, gated ? T * c.q_dim() : 0},
        {&shared_out, S},      {&shared_logit, S > 0 ? T : 0},
        {&lin_qkv, c.linear ? T * g.conv_dim() : 0},  {&lin_z, c.linear ? T * g.value_dim() : 0},
        {&lin_b, T * g.linear_num_value_heads},      {&lin_a, T * g.linear_num_value_heads},
        {&lin_out, c.linear ? T * g.value_dim() : 0},
        {&lin_fused, fused ? T * (g.conv_dim() + g.value_dim()) : 0}, {&lin_ba, fused ? T * 2 * g.linear_num_value_heads : 0},
    };
    std::size_t bytes = 0;
    for (const auto& buf : buffers) bytes += padded(buf.floats);
    memory_ = b.allocate(bytes);
    std::size_t offset = 0;
    for (const auto& buf : buffers) {
      *buf.view = buf.floats > 0 ? memory_.as<float>(offset) : nullptr;
      offset += padded(buf.floats);
    }
    expert_out = expert_in;  // the gathered rows are read by gate/up before down writes its outputs
    attention_seqs.reserve(static_cast<std::size_t>(T));
    delta_seqs.reserve(static_cast<std::size_t>(T));
    pass_states.reserve(static_cast<std::size_t>(T));
    state_ptrs.resize(static_cast<std::size_t>(18 * T));
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
    if (S > 0) {
      shared_weights.resize(static_cast<std::size_t>(T));
      all_rows.resize(static_cast<std::size_t>(T));
      for (std::int64_t r = 0; r < T; ++r) all_rows[static_cast<std::size_t>(r)] = r;
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
  float* query_gate = nullptr;  // [T, n_heads*2*head_dim] gated attention's q_proj output: [query | gate] per head
  float* attn_gate = nullptr;   // [T, n_heads*head_dim]  its gates, gathered
  float* shared_out = nullptr;  // [T, hidden]          the shared expert's outputs   (ArchInfo::shared_expert)
  float* shared_logit = nullptr;  // [T, 1]             its gate logits
  float* lin_qkv = nullptr;     // [T, C]               Gated DeltaNet: q | k | v before the conv, its output after
  float* lin_z = nullptr;       // [T, nv*dv]           the output gate
  float* lin_b = nullptr;       // [T, nv]              beta before its sigmoid
  float* lin_a = nullptr;       // [T, nv]              the decay input
  float* lin_out = nullptr;     // [T, nv*dv]           the gated, normalised core output (out_proj's input)
  float* lin_fused = nullptr;   // [T, C + nv*dv]       Qwen3-Next's in_proj_qkvz output, grouped per key head
  float* lin_ba = nullptr;      // [T, 2nv]             its in_proj_ba output
  ExpertRouting routing;        // host-side top-k choice and per-expert row groups
  std::vector<ExpertBlock> expert_blocks;             // [<= num_experts] rows gathered per expert
  std::vector<kernels::DotProduct> expert_products;   // [<= 2 * num_experts] their products of one pass
  std::vector<kernels::AttentionSeq> attention_seqs;  // [<= T] host-side per-sequence attention arguments
  std::vector<RecurrentStates::Targets> pass_states;  // [<= T] each sequence's state buffers of the pass (all layers)
  std::vector<kernels::DeltaNetSeq> delta_seqs;       // [<= T] one layer's per-sequence DeltaNet arguments
  std::vector<float*> state_ptrs;                     // [18T] their layer's state pointers (outputs, up to 16 kept a sequence)
  std::vector<float> shared_weights;                  // [T] sigmoid of the shared expert's gate logits, on the host
  std::vector<std::int64_t> all_rows;                 // [T] 0, 1, ..: the shared expert weighs every row
  std::vector<int> ids_host;                           // [T] the pass's token ids in row order
  std::vector<float> cos_host, sin_host;               // [T, head_dim/2] rotary tables, made on the host, uploaded to cos/sin
  std::vector<MRopePosition> positions_host;           // [T] M-RoPE positions of a sequence with images (grown on first use)
  std::vector<std::int64_t> next_after_host;           // [T] the position after each of its rows (KVCache::commit)
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

// Each sequence's rows of q/k/v (ws.q, ws.k, ws.v) through the q/k norms, RoPE (on tables' rotary dims) and
// the store into layer kv_layer of its cache, then causal GQA softmax(q k^T * head_dim^-0.5) v over its cached
// positions into ws.attn. Grouped-query and gated attention share it.
template <Backend B>
void attend(B& b, Workspace& ws, const Pass& pass, std::int64_t kv_layer, const QKNorms& norms, const kernels::RopeTables& tables,
            const kernels::AttentionHeads& heads) {
  ws.attention_seqs.clear();
  for (const PassSequence& s : pass.seqs)
    ws.attention_seqs.push_back({s.cache->keys(kv_layer), s.cache->values(kv_layer), s.cache->head_stride(), s.row0, s.n(), s.cache->size()});
  b.attention_inputs({ws.q, ws.k, ws.v, pass.rows, heads.n_heads, heads.n_kv_heads, heads.head_dim}, norms, tables, ws.attention_seqs);
  b.attention(ws.q, ws.attn, ws.attention_seqs, heads);
}

inline kernels::AttentionHeads attention_heads(const ModelConfig& c) {
  return {c.num_attention_heads, c.num_key_value_heads, c.head_dim, static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)))};
}

template <QKNorm qk_norm, QKVBias bias>
struct GroupedQueryAttention {
  static constexpr QKNorm qk_norm_kind = qk_norm;
  static constexpr QKVBias bias_kind = bias;

  const LayerWeights* w;
  kernels::AttentionHeads heads;
  double eps;
  std::int64_t kv_layer;  // this layer's keys and values in each cache

  static GroupedQueryAttention from(const LayerWeights& L, const ModelConfig& c, std::int64_t layer) {
    return {&L, attention_heads(c), c.rms_norm_eps, c.index_in_kind(layer)};
  }

  // acc[R, hidden] += attention of xn[R, hidden]: each sequence's rows against (and into) its own cache.
  template <Backend B>
  void operator()(B& b, Workspace& ws, const float* xn, float* acc, const Pass& pass) const {
    // q/k/v projections (+ biases for Qwen2), in one pass over the three weights
    const kernels::MatmulOut qkv[] = {{w->q_proj, bias_ptr(w->q_bias), ws.q}, {w->k_proj, bias_ptr(w->k_bias), ws.k},
                                      {w->v_proj, bias_ptr(w->v_bias), ws.v}};
    b.matmul_fused(xn, qkv, pass.plan());
    // Qwen3's per-head q/k RMSNorm, RoPE on q and k (each row at its own position), each sequence's new
    // keys/values appended to its cache, and causal GQA over its cached positions
    attend(b, ws, pass, kv_layer, norms(), {ws.cos, ws.sin}, heads);
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

// The MLP slot of the expert archs: in a sparse layer, each row's top-k experts (ExpertRouting) weighted by
// the router, plus (Qwen3.5-MoE, Qwen3-Next) the shared expert weighted by sigmoid(x . shared_expert_gate).
// Every row of a pass (decode and prefill alike) runs its chosen experts in two parallel passes (gate/up, then
// down), reading only the chosen experts, each once. A dense layer (mlp_only_layers, decoder_sparse_step) is a
// plain SwiGLU.
struct SparseMoE {
  const LayerWeights* w;
  std::int64_t intermediate_size, moe_intermediate_size;

  static SparseMoE from(const LayerWeights& L, const ModelConfig& c) {
    return {&L, c.intermediate_size, c.moe ? c.moe->moe_intermediate_size : 0};
  }

  // acc[R, hidden] += out[R, hidden] = sum over each row's experts e (ascending) of weight_e *
  // down_e(silu(gate_e(xn)) * up_e(xn)) [+ sigmoid(xn . gate_s) shared(xn)], out summed in Workspace::out
  template <Backend B>
  void operator()(B& b, Workspace& ws, const float* xn, float* acc, const Pass& pass) const {
    if (w->experts.empty()) return SwiGLU{w, intermediate_size}(b, ws, xn, acc, pass);
    const std::int64_t R = pass.rows;
    float* out = ws.out;
    // router logits, then each row's top-k experts and weights on the host
    b.matmul(xn, w->router, nullptr, ws.router, pass.plan());
    b.download(ws.routing.logits(R), ws.router);
    ws.routing.route(R);
    if (w->experts_mapped) prefetch_routed(ws);
    b.fill_zero(out, R * w->router.cols);
    expert_rows(b, ws, xn, out);
    if (w->shared_expert.gate.data) shared_expert(b, ws, xn, out, pass);
    b.add(acc, out, R * w->router.cols);
  }

 private:
  // out[r] += sigmoid(xn[r] . gate) * down(silu(gate_proj xn[r]) * up_proj xn[r]) for every row, after the
  // routed experts' sum (transformers adds the shared expert's output to the experts' total).
  template <Backend B>
  void shared_expert(B& b, Workspace& ws, const float* xn, float* out, const Pass& pass) const {
    const SharedExpertWeights& se = w->shared_expert;
    const std::int64_t R = pass.rows, H = se.down_proj.rows;
    b.swiglu(xn, {se.gate_proj, se.up_proj, ws.gate, ws.up}, pass.plan());
    b.matmul(ws.gate, se.down_proj, nullptr, ws.shared_out, pass.plan());
    b.matmul(xn, se.gate, nullptr, ws.shared_logit, pass.plan());
    const std::span<float> weights = std::span(ws.shared_weights).first(static_cast<std::size_t>(R));
    b.download(weights, ws.shared_logit);
    for (float& x : weights) x = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x))));
    b.add_rows_scaled(out, ws.shared_out, {std::span(ws.all_rows).first(static_cast<std::size_t>(R)), weights}, H);
  }

  // --experts mapped: every routed expert's pages asked for at once, so the disk reads them in parallel
  // while the first expert's products wait for theirs (one page fault at a time otherwise).
  void prefetch_routed(const Workspace& ws) const {
    for (std::int64_t e = 0; e < ws.routing.experts(); ++e) {
      if (ws.routing.group(e).rows.empty()) continue;
      const ExpertWeights& x = w->experts[static_cast<std::size_t>(e)];
      for (const MatRef* m : {&x.gate_proj, &x.up_proj, &x.down_proj}) io::will_need(m->data, held_bytes(*m));
    }
  }

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
