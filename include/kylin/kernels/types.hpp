// The operands of the kernels and of every backend's operations (backends/backend.hpp): plain
// structs over pointers and shapes, no SIMD, so a backend that is not the CPU (CUDA) uses them
// without including the CPU kernels.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "kylin/core/dtype.hpp"

namespace kylin::kernels {

// What a prefill GEMM over BF16 weights multiplies them with: the f32 activations (exact, the
// default), or the activations rounded to BF16, two products per f32 lane and instruction where
// the CPU has AVX512_BF16 (kernels/gemm_bf16.hpp; opt-in, as llama.cpp does by default).
enum class PrefillActivations : std::uint8_t { f32, bf16 };

inline std::string_view prefill_activations_name(PrefillActivations a) { return a == PrefillActivations::f32 ? "f32" : "bf16"; }
inline std::optional<PrefillActivations> parse_prefill_activations(std::string_view s) {
  for (PrefillActivations a : {PrefillActivations::f32, PrefillActivations::bf16})
    if (prefill_activations_name(a) == s) return a;
  return std::nullopt;
}

// How a matrix's elements are laid out: row-major as a checkpoint stores them, or in panels of 16
// rows, column by column (kernels/panel.hpp: what the CPU backend packs BF16/F16/F32 weights into).
enum class Layout : std::uint8_t { rows, panels };

// A matrix in its stored dtype; rows = output features, cols = input features.
struct MatRef {
  DType dtype = DType::f32;
  const void* data = nullptr;  // [rows, cols], or [panel_count(rows)][cols][16] for Layout::panels
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  Layout layout = Layout::rows;
};

// One product of a fused call: y[T, w.rows] = x · W^T + bias, x shared by every product.
struct MatmulOut {
  MatRef w;
  const float* bias = nullptr;  // [w.rows] or null
  float* y = nullptr;           // [T, w.rows]
};

// One product of a decode pass with its own input: y[n, w.rows] = x[n, w.cols] · W^T + bias
// (an MoE layer's experts, each over the decode rows routed to it).
struct DotProduct {
  const float* x = nullptr;  // [n, w.cols]
  std::int64_t n = 0;
  MatmulOut out;
};

// Which kernel each row of x goes through: rows [0, decode_rows) take the dot-product kernel (one
// token of each decoding sequence), rows [decode_rows, rows) the GEMM (prefill chunks). A row's sums
// depend only on its kernel, never on the other rows of the call, so a sequence gets the same
// numbers alone or in a batch as long as its rows keep their kind.
struct RowPlan {
  std::int64_t rows = 0;
  std::int64_t decode_rows = 0;
};

// The plan of one sequence's chunk of T tokens: a single token decodes, longer chunks prefill.
inline RowPlan chunk_plan(std::int64_t T) { return {T, T == 1 ? 1 : 0}; }

// Rows of attention heads: x is [n_tokens, n_heads * head_dim].
struct HeadRows {
  std::int64_t n_tokens = 0;
  std::int64_t n_heads = 0;
  std::int64_t head_dim = 0;
};

// Rotary tables, one row per token: [n_tokens, rotary_dim/2] each, already scaled by YaRN's
// attention factor. RoPE rotates the first rotary_dim dims of each head (0: all of head_dim), pairing
// dim i with i + rotary_dim/2 (rotate_half); the rest pass through (partial RoPE, Qwen3.5).
struct RopeTables {
  const float* cos = nullptr;
  const float* sin = nullptr;
  std::int64_t rotary_dim = 0;
};

// Rows of an expert's group: rows[i] of the pass and the routing weight it gives the expert.
struct RowSelection {
  std::span<const std::int64_t> rows;
  std::span<const float> weights;  // [rows.size()]; empty for a gather
};

// A KV cache slab of one layer: [n_kv_heads][capacity][head_dim] in f32 or f16.
struct KVRef {
  DType dtype = DType::f32;
  void* data = nullptr;
  template <class T>
  T* as() const { return static_cast<T*>(data); }
};

// One sequence of a batched attention call: its queries are rows [row0, row0 + n_tokens) of q
// and out, query t sits at position pos0 + t and sees keys [0, pos0 + t] of its own cache.
struct AttentionSeq {
  KVRef k;                  // [n_kv_heads][capacity][head_dim]
  KVRef v;                  // [n_kv_heads][capacity][head_dim]
  std::int64_t kv_stride;   // capacity * head_dim of this sequence's cache
  std::int64_t row0;
  std::int64_t n_tokens;
  std::int64_t pos0;
};

// The head layout shared by every sequence of a batch.
struct AttentionHeads {
  std::int64_t n_heads;
  std::int64_t n_kv_heads;
  std::int64_t head_dim;
  float scale;  // head_dim^-0.5
  std::int64_t groups() const { return n_heads / n_kv_heads; }
};

// A run of columns of a gather (kernels::gather_columns): the next n output columns of each row are input
// columns [from, from + n).
struct ColumnRun {
  std::int64_t from = 0, n = 0;
};

// One Gated DeltaNet layer's shapes and small weights (kernels/linear_attention.hpp). C = 2 nk dk + nv dv.
struct DeltaNetLayer {
  std::int64_t nk = 0, nv = 0, dk = 0, dv = 0;  // key heads, value heads (a multiple of nk), their dims
  std::int64_t conv_kernel = 0;                 // K
  const float* conv = nullptr;                  // [C, K] causal depthwise taps
  const float* neg_exp_a = nullptr;             // [nv] -exp(A_log)
  const float* dt_bias = nullptr;               // [nv]
  const float* norm = nullptr;                  // [dv] the gated output norm's weight
  double eps = 1e-6;
  std::int64_t conv_dim() const { return 2 * nk * dk + nv * dv; }
  std::int64_t conv_state_floats() const { return (conv_kernel - 1) * conv_dim(); }
  std::int64_t state_floats() const { return conv_state_floats() + nv * dk * dv; }
};

// A pass's rows of one Gated DeltaNet layer, after its input projections.
struct DeltaNetRows {
  float* qkv = nullptr;      // [rows, C] the projections before the conv: q | k | v; overwritten by the conv's SiLU output
  const float* z = nullptr;  // [rows, nv*dv] the output gate
  const float* b = nullptr;  // [rows, nv] beta before its sigmoid
  const float* a = nullptr;  // [rows, nv] the decay input
  float* out = nullptr;      // [rows, nv*dv] the gated, normalised output (out_proj's input)
  std::int64_t rows = 0;
};

// One sequence's rows of a Gated DeltaNet pass and its states for the layer: [conv (K-1)*C | S nv*dk*dv] f32.
struct DeltaNetSeq {
  std::int64_t row0 = 0, n_tokens = 0;
  std::int64_t pos0 = 0;     // the first token's position: the chunked form's chunks start at multiples of 64
  bool decode_rows = false;  // every row a one-token step (the recurrent form), else the chunked form
  const float* state_in = nullptr;    // the state at pos0 (null: zeros, position 0)
  std::span<float* const> state_out;  // decode rows: [n_tokens] the state after each row; else [1] after the last
  std::span<const std::int64_t> keep_rows;  // chunks: the states after these many rows (0 < rows < n_tokens), ascending,
  std::span<float* const> keep_out;         // [keep_rows] into these, besides state_out
};

// One entry of a logit row's top-k (kernels::top_k, ForwardOutputs::top).
struct RankedLogit {
  float logit = 0.0f;
  int id = -1;  // -1: an empty slot (the row has fewer non-NaN logits than k)
  bool operator==(const RankedLogit&) const = default;
};

// One logit row's draw over the whole row (kernels::draw_row, ForwardOutputs::draws): each token
// weighs exp((logit - max) * inv_temperature); below top_p only the best tokens holding that share
// of the mass stay (kernels/nucleus.hpp), those below min_weight are dropped, and the token where
// the running mass over the kept ones first passes u * their total is picked.
struct RowDraw {
  float inv_temperature = 1.0f;  // 1 / T: finite, > 0
  float min_weight = 0.0f;       // (0, 1]: min_p, or the least float above 0 without it
  double u = 0.0;                // [0, 1): the sampler's uniform number for this token
  float top_p = 1.0f;            // (0, 1]: 1 keeps the whole row
  bool operator==(const RowDraw&) const = default;
};

}  // namespace kylin::kernels
