// The mixers of the hybrid stack (Qwen3.5, Qwen3.6, Qwen3-Next; transformers models/qwen3_5/, qwen3_next/):
// gated attention (q/k norms, partial RoPE, the output times sigmoid of a gate q_proj carries per head) and
// Gated DeltaNet linear attention (its recurrent state in each sequence's cache), chosen per layer from
// config.json's layer_types by HybridMixer, the Attention slot of their Transformer.
#pragma once

#include <cstdint>
#include <variant>
#include <vector>

#include "kylin/model/components.hpp"

namespace kylin {

// Gated attention (Qwen3_5Attention): q_proj gives [query hd | gate hd] per head; q/k RMSNorms (zero-centred
// weights, bound as 1 + w), RoPE on the first rotary_dim dims, causal GQA, then attn *= sigmoid(gate), o_proj.
struct GatedAttention {
  const LayerWeights* w;
  kernels::AttentionHeads heads;
  std::int64_t rotary_dim;
  double eps;
  std::int64_t kv_layer;                       // this layer's keys and values in each cache
  std::vector<kernels::ColumnRun> query_cols;  // [n_heads] q_proj's query columns, head by head
  std::vector<kernels::ColumnRun> gate_cols;   // [n_heads] its gate columns

  static GatedAttention from(const LayerWeights& L, const ModelConfig& c, std::int64_t layer) {
    GatedAttention a{&L, attention_heads(c), c.rotary_dim, c.rms_norm_eps, c.index_in_kind(layer), {}, {}};
    for (std::int64_t h = 0; h < c.num_attention_heads; ++h) {
      a.query_cols.push_back({2 * h * c.head_dim, c.head_dim});
      a.gate_cols.push_back({(2 * h + 1) * c.head_dim, c.head_dim});
    }
    return a;
  }

  // acc[R, hidden] += gated attention of xn[R, hidden], each sequence against (and into) its own cache.
  template <Backend B>
  void operator()(B& b, Workspace& ws, const float* xn, float* acc, const Pass& pass) const {
    const std::int64_t R = pass.rows, qd = heads.n_heads * heads.head_dim;
    // 1. q_proj [R, nh*2hd] ([query | gate] per head), k_proj, v_proj in one pass over the three weights
    const kernels::MatmulOut qkv[] = {{w->q_proj, nullptr, ws.query_gate}, {w->k_proj, nullptr, ws.k}, {w->v_proj, nullptr, ws.v}};
    b.matmul_fused(xn, qkv, pass.plan());
    // 2. the queries [R, nh*hd] and the gates [R, nh*hd], each head's half gathered
    b.gather_columns(ws.query_gate, 2 * qd, query_cols, ws.q, qd, R);
    b.gather_columns(ws.query_gate, 2 * qd, gate_cols, ws.attn_gate, qd, R);
    // 3. q/k norms, RoPE on rotary_dim dims, the KV store, causal GQA over each sequence's positions
    attend(b, ws, pass, kv_layer, {w->q_norm, w->k_norm, eps}, {ws.cos, ws.sin, rotary_dim}, heads);
    // 4. attn *= sigmoid(gate), then o_proj added to the residual stream
    b.sigmoid_mul(ws.attn, ws.attn_gate, R * qd);
    b.matmul_add(ws.attn, w->o_proj, acc, pass.plan());
  }
};

// Gated DeltaNet (Qwen3_5GatedDeltaNet / Qwen3NextGatedDeltaNet): input projections, then the backend's
// gated_delta_net (causal conv + SiLU, l2-normalised q/k, decay and beta, the gated delta rule against each
// sequence's state, the gated RMSNorm), then out_proj.
struct GatedDeltaNet {
  const LayerWeights* w;
  kernels::DeltaNetLayer layer;
  std::int64_t state_layer;                  // this layer's slot in each cache's recurrent state
  std::vector<kernels::ColumnRun> qkv_cols;  // Qwen3-Next: in_proj_qkvz's q, k, v columns in q | k | v order
  std::vector<kernels::ColumnRun> z_cols;    // its z columns
  std::vector<kernels::ColumnRun> b_cols;    // in_proj_ba's b columns
  std::vector<kernels::ColumnRun> a_cols;    // its a columns

  static GatedDeltaNet from(const LayerWeights& L, const ModelConfig& c, std::int64_t l) {
    const LinearAttentionConfig& g = *c.linear;
    GatedDeltaNet d{&L,
                    {.nk = g.linear_num_key_heads, .nv = g.linear_num_value_heads, .dk = g.linear_key_head_dim, .dv = g.linear_value_head_dim,
                     .conv_kernel = g.linear_conv_kernel_dim, .conv = L.linear.conv1d.data(), .neg_exp_a = L.linear.neg_exp_a.data(),
                     .dt_bias = L.linear.dt_bias.data(), .norm = static_cast<const float*>(L.linear.norm.data), .eps = c.rms_norm_eps},
                    c.index_in_kind(l), {}, {}, {}, {}};
    if (L.linear.in_proj_qkvz.data) d.fused_columns(g);
    return d;
  }

  // acc[R, hidden] += out_proj(Gated DeltaNet of xn[R, hidden]), each sequence from and into its own state.
  template <Backend B>
  void operator()(B& b, Workspace& ws, const float* xn, float* acc, const Pass& pass) const {
    const LinearAttentionWeights& L = w->linear;
    const std::int64_t R = pass.rows;
    // 1. the projections: q | k | v before the conv [R, C], z [R, nv*dv], b and a [R, nv]
    project(b, ws, xn, pass);
    // 2. each sequence's rows and its states of this layer (RecurrentStates::begin)
    ws.delta_seqs.clear();
    std::size_t p = 0;  // ws.state_ptrs used
    for (std::size_t i = 0; i < pass.seqs.size(); ++i) {
      const PassSequence& s = pass.seqs[i];
      const RecurrentStates::Targets& t = ws.pass_states[i];
      const std::int64_t at = state_layer * layer.state_floats();
      const std::span<float* const> ptrs(ws.state_ptrs);
      const std::size_t out0 = p;
      for (float* out : t.out) ws.state_ptrs[p++] = out + at;
      const std::size_t keep0 = p;
      for (float* out : t.keep) ws.state_ptrs[p++] = out + at;
      ws.delta_seqs.push_back({s.row0, s.n(), s.cache->size(), pass.decodes(s), t.in ? t.in + at : nullptr, ptrs.subspan(out0, t.out.size()),
                               t.keep_rows, ptrs.subspan(keep0, t.keep.size())});
    }
    // 3. conv + SiLU, q/k l2norm, g and beta, the gated delta rule, the gated RMSNorm: lin_out [R, nv*dv]
    b.gated_delta_net({ws.lin_qkv, ws.lin_z, ws.lin_b, ws.lin_a, ws.lin_out, R}, layer, ws.delta_seqs);
    // 4. out_proj added to the residual stream
    b.matmul_add(ws.lin_out, L.out_proj, acc, pass.plan());
  }

 private:
  template <Backend B>
  void project(B& b, Workspace& ws, const float* xn, const Pass& pass) const {
    const LinearAttentionWeights& L = w->linear;
    const std::int64_t R = pass.rows, C = layer.conv_dim(), Z = layer.nv * layer.dv, nv = layer.nv;
    if (!L.in_proj_qkvz.data) {
      const kernels::MatmulOut outs[] = {{L.in_proj_qkv, nullptr, ws.lin_qkv}, {L.in_proj_z, nullptr, ws.lin_z},
                                         {L.in_proj_b, nullptr, ws.lin_b}, {L.in_proj_a, nullptr, ws.lin_a}};
      return b.matmul_fused(xn, outs, pass.plan());
    }
    // Qwen3-Next: the fused outputs, grouped per key head, gathered into the q | k | v, z, b, a order
    const kernels::MatmulOut outs[] = {{L.in_proj_qkvz, nullptr, ws.lin_fused}, {L.in_proj_ba, nullptr, ws.lin_ba}};
    b.matmul_fused(xn, outs, pass.plan());
    b.gather_columns(ws.lin_fused, C + Z, qkv_cols, ws.lin_qkv, C, R);
    b.gather_columns(ws.lin_fused, C + Z, z_cols, ws.lin_z, Z, R);
    b.gather_columns(ws.lin_ba, 2 * nv, b_cols, ws.lin_b, nv, R);
    b.gather_columns(ws.lin_ba, 2 * nv, a_cols, ws.lin_a, nv, R);
  }

  // in_proj_qkvz holds per key head g [q dk | k dk | v r dv | z r dv], in_proj_ba per key head [b r | a r]
  // (value head g r + j): transformers' Qwen3NextGatedDeltaNet.fix_query_key_value_ordering.
  void fused_columns(const LinearAttentionConfig& g) {
    const std::int64_t nk = g.linear_num_key_heads, dk = g.linear_key_head_dim, r = g.value_heads_per_key(), rv = r * g.linear_value_head_dim;
    const std::int64_t group = 2 * dk + 2 * rv;
    for (std::int64_t h = 0; h < nk; ++h) qkv_cols.push_back({h * group, dk});
    for (std::int64_t h = 0; h < nk; ++h) qkv_cols.push_back({h * group + dk, dk});
    for (std::int64_t h = 0; h < nk; ++h) qkv_cols.push_back({h * group + 2 * dk, rv});
    for (std::int64_t h = 0; h < nk; ++h) z_cols.push_back({h * group + 2 * dk + rv, rv});
    for (std::int64_t h = 0; h < nk; ++h) b_cols.push_back({h * 2 * r, r}), a_cols.push_back({h * 2 * r + r, r});
  }
};

// The Attention slot of a hybrid Transformer: gated attention or Gated DeltaNet, as layer_types says.
struct HybridMixer {
  std::variant<GatedAttention, GatedDeltaNet> mixer;

  static HybridMixer from(const LayerWeights& L, const ModelConfig& c, std::int64_t layer) {
    if (c.is_linear_layer(layer)) return {GatedDeltaNet::from(L, c, layer)};
    return {GatedAttention::from(L, c, layer)};
  }

  template <Backend B>
  void operator()(B& b, Workspace& ws, const float* xn, float* acc, const Pass& pass) const {
    if constexpr (HybridBackend<B>) {
      std::visit([&](const auto& m) { m(b, ws, xn, acc, pass); }, mixer);
    } else {
      throw Error(ErrorCategory::config, "backend", "this backend does not run Gated DeltaNet / gated attention layers");
    }
  }
};

}  // namespace kylin
