// Binds checkpoint tensors to the model by their Hugging Face names, in this one place, with
// dtype and exact-shape checks. Every missing or mismatched tensor is collected and reported
// together (one kylin::Error, or check_weights' list). Weights stay zero-copy views.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <optional>
#include <string_view>
#include <utility>
#include <unordered_set>
#include <vector>

#include "kylin/io/checkpoint.hpp"
#include "kylin/io/config.hpp"
#include "kylin/io/sentence_transformers.hpp"
#include "kylin/kernels/ops.hpp"
#include "kylin/model/arch.hpp"
#include "kylin/model/fp8.hpp"

namespace kylin {

using kernels::MatRef;

// One expert of a sparse layer: a SwiGLU of width moe_intermediate_size.
struct ExpertWeights {
  MatRef gate_proj;  // [moe_intermediate, hidden]
  MatRef up_proj;    // [moe_intermediate, hidden]
  MatRef down_proj;  // [hidden, moe_intermediate]
};

// A Gated DeltaNet layer's weights (LayerType::linear_attention), C = 2 nk dk + nv dv, r = nv / nk.
struct LinearAttentionWeights {
  MatRef in_proj_qkv;   // [C, hidden]          rows: nk q heads | nk k heads | nv v heads   (LinearProjections::separate)
  MatRef in_proj_z;     // [nv*dv, hidden]      the output gate
  MatRef in_proj_b;     // [nv, hidden]         beta = sigmoid(b)
  MatRef in_proj_a;     // [nv, hidden]         decay input
  MatRef in_proj_qkvz;  // [nk*(2dk + 2r dv), hidden]  per key head [q dk | k dk | v r dv | z r dv]  (fused_per_key_head)
  MatRef in_proj_ba;    // [2nv, hidden]        per key head [b r | a r]
  std::vector<float> conv1d;     // [K, C]  depthwise causal conv taps (conv1d.weight [C, 1, K]), widened, tap-major
  std::vector<float> neg_exp_a;  // [nv]    -exp(A_log): g = neg_exp_a * softplus(a + dt_bias)
  std::vector<float> dt_bias;    // [nv]
  MatRef norm;                   // [dv]    the gated output RMSNorm's weight (a plain scale), widened to f32
  MatRef out_proj;               // [hidden, nv*dv]
};

// The gated shared expert of a sparse layer (ArchInfo::shared_expert).
struct SharedExpertWeights {
  MatRef gate_proj;  // [shared_intermediate, hidden]
  MatRef up_proj;    // [shared_intermediate, hidden]
  MatRef down_proj;  // [hidden, shared_intermediate]
  MatRef gate;       // [1, hidden]  its weight per row: sigmoid(x . gate)
};

struct LayerWeights {
  MatRef input_layernorm;           // [hidden]
  MatRef q_proj;                    // [n_heads*head_dim, hidden]; gated attention: [n_heads*2*head_dim, hidden], [query | gate] per head
  MatRef k_proj;                    // [n_kv_heads*head_dim, hidden]
  MatRef v_proj;                    // [n_kv_heads*head_dim, hidden]
  MatRef o_proj;                    // [hidden, n_heads*head_dim]
  MatRef q_norm;                    // [head_dim]   (QKNorm::per_head archs only)
  MatRef k_norm;                    // [head_dim]   (QKNorm::per_head archs only)
  std::vector<float> q_bias;        // [n_heads*head_dim]     (QKVBias::qkv archs only; widened once, tiny)
  std::vector<float> k_bias;        // [n_kv_heads*head_dim]
  std::vector<float> v_bias;        // [n_kv_heads*head_dim]
  MatRef post_attention_layernorm;  // [hidden]
  MatRef gate_proj;                 // [intermediate, hidden]   (dense layers)
  MatRef up_proj;                   // [intermediate, hidden]
  MatRef down_proj;                 // [hidden, intermediate]
  MatRef router;                    // [num_experts, hidden]    (sparse layers: mlp.gate)
  std::vector<ExpertWeights> experts;  // [num_experts]
  bool experts_mapped = false;         // ExpertMemory::mapped: experts read in place from the mapped file, prefetched once routed
  SharedExpertWeights shared_expert;   // (sparse layers of ArchInfo::shared_expert archs)
  LinearAttentionWeights linear;       // (linear_attention layers; their attention fields stay empty)

  // Every matrix a matmul reads, for the passes that pack, quantize or page in weights.
  template <class Fn>
  void each_matrix(Fn fn) {
    for (MatRef* m : {&q_proj, &k_proj, &v_proj, &o_proj, &gate_proj, &up_proj, &down_proj, &router, &linear.in_proj_qkv, &linear.in_proj_z,
                      &linear.in_proj_b, &linear.in_proj_a, &linear.in_proj_qkvz, &linear.in_proj_ba, &linear.out_proj,
                      &shared_expert.gate_proj, &shared_expert.up_proj, &shared_expert.down_proj, &shared_expert.gate})
      fn(*m);
    for (ExpertWeights& x : experts)
      for (MatRef* m : {&x.gate_proj, &x.up_proj, &x.down_proj}) fn(*m);
  }
  // The projections --weights q8|q4 quantizes (not the router nor the shared expert's one-row gate, which are
  // tiny and steer: docs/QUANTIZATION.md).
  template <class Fn>
  void each_projection(Fn fn) {
    each_matrix([&](MatRef& m) {
      if (&m != &router && &m != &shared_expert.gate && &m != &linear.in_proj_b && &m != &linear.in_proj_a) fn(m);
    });
  }
  // The norm weights, read whole by every pass.
  template <class Fn>
  void each_norm(Fn fn) {
    for (MatRef* m : {&input_layernorm, &post_attention_layernorm, &q_norm, &k_norm, &linear.norm}) fn(*m);
  }
};

// The multi-token-prediction head of the Qwen3.5 / Qwen3-Next checkpoints (mtp.*), when loaded (MtpHead::loaded):
// mtp.fc.weight [hidden, 2 hidden] split by columns into its two halves, its three norms; its decoder layer is
// ModelWeights::layers.back(), past num_hidden_layers. The embedding table and the LM head are the target's.
struct MtpWeights {
  MatRef fc_embedding;           // [hidden, hidden] mtp.fc's columns [0, hidden): the token embedding's
  MatRef fc_hidden;              // [hidden, hidden] its columns [hidden, 2 hidden): the target's hidden state's
  MatRef pre_fc_norm_embedding;  // [hidden]
  MatRef pre_fc_norm_hidden;     // [hidden]
  MatRef norm;                   // [hidden] mtp.norm: the head's final norm

  template <class Fn>
  void each_norm(Fn fn) {
    for (MatRef* m : {&pre_fc_norm_embedding, &pre_fc_norm_hidden, &norm}) fn(*m);
  }
};

// Whether loading binds the MTP head (ModelOptions::mtp) or skips its tensors, as transformers does.
enum class MtpHead { skipped, loaded };

struct ModelWeights {
  MatRef embed_tokens;  // [vocab, hidden]
  std::vector<LayerWeights> layers;  // [num_hidden_layers], then the MTP head's layer when it is loaded
  MtpWeights mtp;
  MatRef norm;          // [hidden]
  MatRef lm_head;       // [vocab, hidden]: lm_head.weight, or embed_tokens when tied and absent; empty: LmHead::none
  // FP8 checkpoints only: their F8_E4M3 weights and the BF16 widenings the MatRefs above point
  // into once widen_fp8 ran (shared, so copies of these weights stay valid).
  std::shared_ptr<Fp8Weights> fp8;
  // f32 tensors made at bind time (the 1 + w of zero-centred norms) that MatRefs above point into.
  std::shared_ptr<std::deque<std::vector<float>>> owned;
};

// Where the LM head comes from. An embedding model (a sentence-transformers directory) may be
// saved as the bare Qwen3Model, without one; any other untied checkpoint must have lm_head.weight.
enum class LmHead { own, tied, none };

inline LmHead lm_head_source(const io::Checkpoint& ckpt, const ModelConfig& c) {
  if (ckpt.find("lm_head.weight")) return LmHead::own;
  if (c.tie_word_embeddings) return LmHead::tied;
  return io::is_sentence_transformers_dir(ckpt.dir()) ? LmHead::none : LmHead::own;
}

// The tensor holding the f16 scales of a Q8_0 tensor saved by `kylin quantize`.
inline std::string q8_scale_name(const std::string& tensor) { return tensor + "_q8_scale"; }
inline std::string q4_scale_name(const std::string& tensor) { return tensor + "_q4_scale"; }

// The tensor holding the block scales of an FP8 weight, as the FP8 releases name it.
inline std::string fp8_scale_name(const std::string& tensor) { return tensor + "_scale_inv"; }

namespace detail {

// load: FP8 weights are recorded (widen_fp8 widens them); check: only their scales are checked.
enum class BindMode { load, check };

class Binder {
 public:
  Binder(const io::Checkpoint& ckpt, std::optional<Fp8Config> fp8, BindMode mode)
      : ckpt_(ckpt), bare_(is_bare(ckpt)), fp8_(fp8), mode_(mode) {}

  MatRef bind(const std::string& hf_name, std::vector<std::int64_t> shape) {
    const std::string name = resolve(hf_name);
    bound_.insert(name);
    const io::TensorView* t = ckpt_.find(name);
    if (!t) {
      problems_.push_back(name + ": missing");
      return {};
    }
    const std::int64_t cols = shape.back();
    const std::int64_t rows = shape.size() == 2 ? shape[0] : 1;
    if (t->dtype == DType::u8 && shape.size() == 2) return bind_quantized<kernels::Q4View>(*t, rows, cols);
    if (t->shape != shape) {
      problems_.push_back(name + ": expected " + io::shape_string(shape) + ", got " + io::shape_string(t->shape));
      return {};
    }
    if (t->dtype == DType::i8) return bind_quantized<kernels::Q8View>(*t, rows, cols);
    if (t->dtype == DType::f8_e4m3 && shape.size() == 2) return bind_fp8(*t, rows, cols);
    if (!info(t->dtype).runnable) {
      problems_.push_back(name + ": dtype " + std::string(dtype_name(t->dtype)) + " is not supported (BF16, F16, F32 are)");
      return {};
    }
    return MatRef{t->dtype, t->data, rows, cols};
  }

  // A tensor written by `kylin quantize`: Q8_0 values (I8 [rows, cols]) or packed Q4_0 values (U8
  // [rows, cols / 2]), followed in the file by their f16 scales [rows, cols / 32], the tensor
  // named q8_scale_name(name) or q4_scale_name(name); bound as one quantized matrix.
  template <kernels::QuantView W>
  MatRef bind_quantized(const io::TensorView& t, std::int64_t rows, std::int64_t cols) {
    constexpr bool q8 = std::same_as<W, kernels::Q8View>;
    const std::string what = q8 ? "I8 (Q8_0)" : "U8 (Q4_0)";
    const std::string scale_name = q8 ? q8_scale_name(t.name) : q4_scale_name(t.name);
    bound_.insert(scale_name);
    const io::TensorView* s = ckpt_.find(scale_name);
    const std::vector<std::int64_t> value_shape{rows, kernels::row_value_bytes<W>(cols)}, scale_shape{rows, cols / kernels::q8_block};
    std::string problem;
    if (cols % kernels::q8_block != 0) problem = what + " with " + std::to_string(cols) + " columns, not a multiple of 32";
    else if (t.shape != value_shape)
      problem = what + " values of a [" + std::to_string(rows) + ", " + std::to_string(cols) + "] weight must be " +
                io::shape_string(value_shape) + ", got " + io::shape_string(t.shape);
    else if (!s) problem = what + " without its scales " + scale_name;
    else if (s->dtype != DType::f16 || s->shape != scale_shape)
      problem = "its scales " + scale_name + " must be F16 " + io::shape_string(scale_shape) + ", got " +
                std::string(dtype_name(s->dtype)) + " " + io::shape_string(s->shape);
    else if (s->data != t.data + t.nbytes) problem = "its scales " + scale_name + " must directly follow it in the same file";
    if (!problem.empty()) {
      problems_.push_back(t.name + ": " + problem);
      return {};
    }
    return MatRef{W::dtype, t.data, rows, cols};
  }

  // A float8_e4m3fn weight of the FP8 releases with its scales fp8_scale_name(name) [ceil(rows /
  // block_rows), ceil(cols / block_cols)]: bound as F8_E4M3 and recorded (model/fp8.hpp), to be
  // quantized from its BF16 widening row by row (--weights q8|q4) or widened whole (widen_fp8).
  MatRef bind_fp8(const io::TensorView& t, std::int64_t rows, std::int64_t cols) {
    const std::string scale_name = fp8_scale_name(t.name);
    bound_.insert(scale_name);
    const io::TensorView* s = ckpt_.find(scale_name);
    const Fp8Config blocks = fp8_.value_or(Fp8Config{});
    const std::int64_t br = blocks.block_rows, bc = blocks.block_cols, scale_cols = (cols + bc - 1) / bc;
    const std::vector<std::int64_t> scale_shape{(rows + br - 1) / br, scale_cols};
    std::string problem;
    if (!fp8_) problem = "F8_E4M3, but config.json has no quantization_config with quant_method \"fp8\"";
    else if (!s) problem = "F8_E4M3 without its scales " + scale_name;
    else if ((s->dtype != DType::f32 && s->dtype != DType::bf16) || s->shape != scale_shape)
      problem = "its scales " + scale_name + " must be F32 or BF16 " + io::shape_string(scale_shape) + ", got " +
                std::string(dtype_name(s->dtype)) + " " + io::shape_string(s->shape);
    if (!problem.empty()) {
      problems_.push_back(t.name + ": " + problem);
      return {};
    }
    if (mode_ == BindMode::check) return {};
    if (!fp8_weights_) fp8_weights_ = std::make_shared<Fp8Weights>();
    fp8_weights_->add({.q = reinterpret_cast<const std::uint8_t*>(t.data), .scale = s->data, .scale_dtype = s->dtype, .rows = rows,
                       .cols = cols, .block_rows = br, .block_cols = bc});
    return MatRef{DType::f8_e4m3, t.data, rows, cols};
  }
  std::shared_ptr<Fp8Weights> fp8_weights() const { return fp8_weights_; }

  std::vector<float> bind_f32(const std::string& name, std::int64_t n) { return bind_f32(name, std::vector<std::int64_t>{n}); }
  // A small tensor of any shape widened to f32, row-major.
  std::vector<float> bind_f32(const std::string& name, const std::vector<std::int64_t>& shape) {
    const io::TensorView* t = bind_view(name, shape);
    std::vector<float> out;
    if (!t) return out;
    const MatRef w{t->dtype, t->data, 1, t->numel()};
    for (std::int64_t i = 0; i < w.cols; ++i) out.push_back(kernels::weight_at(w, i));
    return out;
  }

  // An RMSNorm weight [n]: as stored, or for NormScale::one_plus_weight the f32 1 + w, which transformers'
  // Qwen3_5RMSNorm computes in float32 too (output * (1.0 + weight.float())), so the product is the same.
  MatRef bind_norm(const std::string& name, std::int64_t n, NormScale scale) {
    if (scale == NormScale::weight) return bind(name, {n});
    std::vector<float> w = bind_f32(name, n);
    if (w.empty()) return {};
    for (float& x : w) x = 1.0f + x;
    if (!owned_) owned_ = std::make_shared<std::deque<std::vector<float>>>();
    owned_->push_back(std::move(w));
    return MatRef{DType::f32, owned_->back().data(), 1, n};
  }
  // A small tensor [n] widened to f32 where the kernels read it as floats (the DeltaNet output norm).
  MatRef bind_widened(const std::string& name, std::int64_t n) {
    std::vector<float> w = bind_f32(name, n);
    if (w.empty()) return {};
    if (!owned_) owned_ = std::make_shared<std::deque<std::vector<float>>>();
    owned_->push_back(std::move(w));
    return MatRef{DType::f32, owned_->back().data(), 1, n};
  }
  std::shared_ptr<std::deque<std::vector<float>>> owned() const { return owned_; }

  // A tensor of `shape` in a dtype the kernels run (BF16, F16, F32), for slicing (fused experts).
  const io::TensorView* bind_view(const std::string& hf_name, const std::vector<std::int64_t>& shape) {
    const std::string name = resolve(hf_name);
    bound_.insert(name);
    const io::TensorView* t = ckpt_.find(name);
    if (!t) problems_.push_back(name + ": missing");
    else if (t->shape != shape) problems_.push_back(name + ": expected " + io::shape_string(shape) + ", got " + io::shape_string(t->shape));
    else if (!info(t->dtype).runnable)
      problems_.push_back(name + ": dtype " + std::string(dtype_name(t->dtype)) + " is not supported here (BF16, F16, F32 are)");
    else return t;
    return nullptr;
  }

  bool has(const std::string& name) const { return ckpt_.find(resolve(name)) != nullptr; }

  // Columns [half * cols, (half + 1) * cols) of the [rows, 2 cols] tensor `name`, copied (in its dtype) so
  // that a matmul reads them as a matrix of their own.
  MatRef bind_column_half(const std::string& name, std::int64_t rows, std::int64_t cols, int half) {
    const io::TensorView* t = bind_view(name, {rows, 2 * cols});
    if (!t || mode_ == BindMode::check) return {};
    const std::size_t esize = dtype_size(t->dtype), row_bytes = static_cast<std::size_t>(cols) * esize;
    if (!owned_) owned_ = std::make_shared<std::deque<std::vector<float>>>();
    std::vector<float>& out = owned_->emplace_back((static_cast<std::size_t>(rows) * row_bytes + sizeof(float) - 1) / sizeof(float));
    auto* dst = reinterpret_cast<std::byte*>(out.data());
    for (std::int64_t r = 0; r < rows; ++r)
      std::memcpy(dst + static_cast<std::size_t>(r) * row_bytes, t->data + (static_cast<std::size_t>(2 * r + half)) * row_bytes, row_bytes);
    return MatRef{t->dtype, dst, rows, cols};
  }

  // A tensor kylin would have to run but cannot: a problem when the checkpoint has it.
  void refuse(const std::string& name, const std::string& why) {
    bound_.insert(resolve(name));
    if (has(name)) problems_.push_back(name + ": " + why);
  }

  const std::vector<std::string>& problems() const { return problems_; }
  const io::Checkpoint& checkpoint() const { return ckpt_; }

  // Checkpoint tensors that no bind() asked for, in checkpoint order.
  std::vector<std::string> unbound() const {
    std::vector<std::string> out;
    for (const io::TensorView* t : ckpt_.tensors())
      if (!bound_.contains(t->name)) out.push_back(t->name);
    return out;
  }

  void throw_if_problems() const {
    if (problems_.empty()) return;
    std::string msg = std::to_string(problems_.size()) + " tensor problem(s):";
    for (const auto& p : problems_) msg += "\n  " + p;
    throw Error(ErrorCategory::load, ckpt_.dir().string(), msg);
  }

 private:
  // A checkpoint saved as the bare base model (Qwen3-Embedding's Qwen3Model) names its tensors
  // without the "model." prefix of the ForCausalLM checkpoints: "layers.0.mlp.up_proj.weight".
  static bool is_bare(const io::Checkpoint& ckpt) {
    for (const io::TensorView* t : ckpt.tensors())
      if (t->name.starts_with("model.")) return false;
    return !ckpt.tensors().empty();
  }
  std::string resolve(const std::string& hf_name) const {
    constexpr std::string_view prefix = "model.";
    return bare_ && hf_name.starts_with(prefix) ? hf_name.substr(prefix.size()) : hf_name;
  }

  const io::Checkpoint& ckpt_;
  bool bare_;  // names lack "model."
  std::optional<Fp8Config> fp8_;
  BindMode mode_;
  std::shared_ptr<Fp8Weights> fp8_weights_;  // the F8_E4M3 weights bound
  std::shared_ptr<std::deque<std::vector<float>>> owned_;  // f32 tensors made here (bind_norm)
  std::vector<std::string> problems_;
  std::unordered_set<std::string> bound_;  // every name bind() asked for, present or not
};

// One layer's attention (p: its "....layers.i." prefix): q/k/v/o (+ q/k norms or biases); gated attention's
// q_proj holds [query | gate] per head.
inline void bind_attention(Binder& b, const ModelConfig& c, const ArchInfo& arch, const std::string& p, LayerWeights& L) {
  const std::int64_t H = c.hidden_size, D = c.head_dim;
  L.q_proj = b.bind(p + "self_attn.q_proj.weight", {arch.attention_output_gate ? 2 * c.q_dim() : c.q_dim(), H});
  L.k_proj = b.bind(p + "self_attn.k_proj.weight", {c.kv_dim(), H});
  L.v_proj = b.bind(p + "self_attn.v_proj.weight", {c.kv_dim(), H});
  L.o_proj = b.bind(p + "self_attn.o_proj.weight", {H, c.q_dim()});
  if (arch.has_qk_norm()) {
    L.q_norm = b.bind_norm(p + "self_attn.q_norm.weight", D, arch.norm_scale);
    L.k_norm = b.bind_norm(p + "self_attn.k_norm.weight", D, arch.norm_scale);
  }
  if (arch.has_qkv_bias()) {
    L.q_bias = b.bind_f32(p + "self_attn.q_proj.bias", c.q_dim());
    L.k_bias = b.bind_f32(p + "self_attn.k_proj.bias", c.kv_dim());
    L.v_bias = b.bind_f32(p + "self_attn.v_proj.bias", c.kv_dim());
  } else if (c.attention_bias) {  // transformers would add these; absent, it zero-initialises them
    for (const char* proj : {"q", "k", "v", "o"})
      b.refuse(p + "self_attn." + proj + "_proj.bias", std::string(arch.name) + " attention with biases is not supported");
  }
}

// One Gated DeltaNet layer (p: its "....layers.i.linear_attn." prefix).
inline void bind_linear_attention(Binder& b, const ModelConfig& c, const ArchInfo& arch, const std::string& p, LinearAttentionWeights& L) {
  const LinearAttentionConfig& g = *c.linear;
  const std::int64_t H = c.hidden_size, nv = g.linear_num_value_heads, C = g.conv_dim();
  if (arch.linear_projections == LinearProjections::fused_per_key_head) {
    L.in_proj_qkvz = b.bind(p + "in_proj_qkvz.weight", {2 * g.key_dim() + 2 * g.value_dim(), H});
    L.in_proj_ba = b.bind(p + "in_proj_ba.weight", {2 * nv, H});
  } else {
    L.in_proj_qkv = b.bind(p + "in_proj_qkv.weight", {C, H});
    L.in_proj_z = b.bind(p + "in_proj_z.weight", {g.value_dim(), H});
    L.in_proj_b = b.bind(p + "in_proj_b.weight", {nv, H});
    L.in_proj_a = b.bind(p + "in_proj_a.weight", {nv, H});
  }
  const std::int64_t K = g.linear_conv_kernel_dim;
  const std::vector<float> conv = b.bind_f32(p + "conv1d.weight", {C, 1, K});  // [C, 1, K]
  if (!conv.empty()) {
    L.conv1d.resize(static_cast<std::size_t>(K * C));  // tap-major [K, C], so that a tap reads its channels contiguously
    for (std::int64_t c = 0; c < C; ++c)
      for (std::int64_t j = 0; j < K; ++j) L.conv1d[static_cast<std::size_t>(j * C + c)] = conv[static_cast<std::size_t>(c * K + j)];
  }
  L.neg_exp_a = b.bind_f32(p + "A_log", nv);
  for (float& a : L.neg_exp_a) a = static_cast<float>(-std::exp(static_cast<double>(a)));
  L.dt_bias = b.bind_f32(p + "dt_bias", nv);
  L.norm = b.bind_widened(p + "norm.weight", g.linear_value_head_dim);
  L.out_proj = b.bind(p + "out_proj.weight", {H, g.value_dim()});
  b.refuse(p + "conv1d.bias", "a Gated DeltaNet conv1d with a bias is not supported (transformers' has none)");
}

// A sparse layer's router, experts (per expert or fused) and shared expert (p: "....layers.i.mlp.").
inline void bind_experts(Binder& b, const ModelConfig& c, const ArchInfo& arch, const std::string& p, LayerWeights& L) {
  const std::int64_t H = c.hidden_size, E = c.moe->num_experts, M = c.moe->moe_intermediate_size;
  L.router = b.bind(p + "gate.weight", {E, H});
  // Qwen3.5-MoE checkpoints store the experts fused; quantized third-party exports of it keep them per expert.
  if (arch.expert_storage == ExpertStorage::fused && !b.has(p + "experts.0.gate_proj.weight")) {
    const io::TensorView* gu = b.bind_view(p + "experts.gate_up_proj", {E, 2 * M, H});
    const io::TensorView* dn = b.bind_view(p + "experts.down_proj", {E, H, M});
    if (gu && dn) {
      const std::size_t gsize = dtype_size(gu->dtype), dsize = dtype_size(dn->dtype);
      for (std::int64_t e = 0; e < E; ++e) {
        const std::byte* g0 = gu->data + static_cast<std::size_t>(e * 2 * M * H) * gsize;  // rows [0, M): gate, [M, 2M): up
        L.experts.push_back({MatRef{gu->dtype, g0, M, H}, MatRef{gu->dtype, g0 + static_cast<std::size_t>(M * H) * gsize, M, H},
                             MatRef{dn->dtype, dn->data + static_cast<std::size_t>(e * H * M) * dsize, H, M}});
      }
    }
  } else {
    for (std::int64_t e = 0; e < E; ++e) {
      const std::string x = p + "experts." + std::to_string(e) + ".";
      L.experts.push_back({b.bind(x + "gate_proj.weight", {M, H}), b.bind(x + "up_proj.weight", {M, H}), b.bind(x + "down_proj.weight", {H, M})});
    }
  }
  if (!arch.shared_expert) return;
  const std::int64_t S = c.moe->shared_expert_intermediate_size;
  L.shared_expert = {b.bind(p + "shared_expert.gate_proj.weight", {S, H}), b.bind(p + "shared_expert.up_proj.weight", {S, H}),
                     b.bind(p + "shared_expert.down_proj.weight", {H, S}), b.bind(p + "shared_expert_gate.weight", {1, H})};
}

// Every tensor of config `c`, by HF name; what the architecture adds comes from its ArchInfo.
// mtp.*: the fc halves and norms, and one decoder layer (gated attention, and routed experts where the checkpoint
// has mtp.layers.0.mlp.gate, else a dense SwiGLU: engines differ on Qwen3-Next's rule, the tensors do not).
inline void bind_mtp(Binder& b, const ModelConfig& c, const ArchInfo& arch, ModelWeights& w) {
  const std::int64_t H = c.hidden_size, I = c.intermediate_size;
  if (c.mtp_num_hidden_layers > 1)
    b.refuse("mtp.fc.weight", "kylin runs one MTP layer (config mtp_num_hidden_layers: " + std::to_string(c.mtp_num_hidden_layers) + ")");
  if (!b.has("mtp.fc.weight")) {
    b.bind("mtp.fc.weight", {H, 2 * H});  // reported missing
    return;
  }
  MtpWeights& m = w.mtp;
  m.fc_embedding = b.bind_column_half("mtp.fc.weight", H, H, 0);
  m.fc_hidden = b.bind_column_half("mtp.fc.weight", H, H, 1);
  m.pre_fc_norm_embedding = b.bind_norm("mtp.pre_fc_norm_embedding.weight", H, arch.norm_scale);
  m.pre_fc_norm_hidden = b.bind_norm("mtp.pre_fc_norm_hidden.weight", H, arch.norm_scale);
  m.norm = b.bind_norm("mtp.norm.weight", H, arch.norm_scale);
  const std::string p = "mtp.layers.0.";
  LayerWeights& L = w.layers.emplace_back();
  L.input_layernorm = b.bind_norm(p + "input_layernorm.weight", H, arch.norm_scale);
  bind_attention(b, c, arch, p, L);
  L.post_attention_layernorm = b.bind_norm(p + "post_attention_layernorm.weight", H, arch.norm_scale);
  if (c.moe && b.has(p + "mlp.gate.weight")) return bind_experts(b, c, arch, p + "mlp.", L);
  L.gate_proj = b.bind(p + "mlp.gate_proj.weight", {I, H});
  L.up_proj = b.bind(p + "mlp.up_proj.weight", {I, H});
  L.down_proj = b.bind(p + "mlp.down_proj.weight", {H, I});
}

inline ModelWeights bind_all(Binder& b, const ModelConfig& c, MtpHead mtp = MtpHead::skipped) {
  const ArchInfo& arch = arch_info(c.model_type);
  const std::int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const std::string P(arch.tensor_prefix);
  ModelWeights w;
  w.embed_tokens = b.bind(P + "embed_tokens.weight", {V, H});
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = P + "layers." + std::to_string(l) + ".";
    LayerWeights& L = w.layers.emplace_back();
    L.input_layernorm = b.bind_norm(p + "input_layernorm.weight", H, arch.norm_scale);
    if (c.is_linear_layer(l)) bind_linear_attention(b, c, arch, p + "linear_attn.", L.linear);
    else bind_attention(b, c, arch, p, L);
    L.post_attention_layernorm = b.bind_norm(p + "post_attention_layernorm.weight", H, arch.norm_scale);
    if (c.is_sparse_layer(l)) {
      bind_experts(b, c, arch, p + "mlp.", L);
      continue;
    }
    L.gate_proj = b.bind(p + "mlp.gate_proj.weight", {I, H});
    L.up_proj = b.bind(p + "mlp.up_proj.weight", {I, H});
    L.down_proj = b.bind(p + "mlp.down_proj.weight", {H, I});
  }
  w.norm = b.bind_norm(P + "norm.weight", H, arch.norm_scale);
  switch (lm_head_source(b.checkpoint(), c)) {
    case LmHead::own: w.lm_head = b.bind("lm_head.weight", {V, H}); break;
    case LmHead::tied: w.lm_head = w.embed_tokens; break;
    case LmHead::none: break;
  }
  if (mtp == MtpHead::loaded) bind_mtp(b, c, arch, w);
  w.fp8 = b.fp8_weights();
  w.owned = b.owned();
  return w;
}

}  // namespace detail

// One expert's matrix inside a fused expert tensor: its per-expert name, byte offset and shape.
struct TensorPart {
  std::string name;       // "....mlp.experts.<e>.gate_proj.weight", as a per-expert checkpoint names it
  std::size_t offset;     // bytes from the tensor's start
  std::int64_t rows, cols;
};

// The experts' matrices of a fused expert tensor (gate_up_proj [E, 2M, H]: gate rows then up rows per
// expert; down_proj [E, H, M]) in memory order, named as bind_experts binds the per-expert layout;
// empty for any other tensor. `kylin quantize` saves fused experts per expert, quantized one by one.
inline std::vector<TensorPart> fused_expert_parts(const io::TensorView& t) {
  std::vector<TensorPart> parts;
  if (t.shape.size() != 3) return parts;
  const std::int64_t E = t.shape[0], R = t.shape[1], C = t.shape[2];
  const std::size_t size = dtype_size(t.dtype);
  const auto base = [&](std::string_view fused) { return t.name.substr(0, t.name.size() - fused.size()) + "experts."; };
  if (t.name.ends_with("experts.gate_up_proj") && R % 2 == 0)
    for (std::int64_t e = 0; e < E; ++e)
      for (const auto& [half, which] : {std::pair{0, "gate_proj"}, std::pair{1, "up_proj"}})
        parts.push_back({base("experts.gate_up_proj") + std::to_string(e) + "." + which + ".weight",
                         static_cast<std::size_t>((e * R + half * R / 2) * C) * size, R / 2, C});
  else if (t.name.ends_with("experts.down_proj"))
    for (std::int64_t e = 0; e < E; ++e)
      parts.push_back({base("experts.down_proj") + std::to_string(e) + ".down_proj.weight", static_cast<std::size_t>(e * R * C) * size, R, C});
  return parts;
}

// Every weight matrix of w (embedding, LM head, projections, router, experts, DeltaNet and shared expert); fn(MatRef&).
template <class Fn>
void for_each_matrix(ModelWeights& w, Fn fn) {
  fn(w.embed_tokens);
  fn(w.lm_head);
  fn(w.mtp.fc_embedding);
  fn(w.mtp.fc_hidden);
  for (LayerWeights& L : w.layers) L.each_matrix(fn);
}

// Where an MoE model's routed experts are held. held: as the other weights (quantized, packed, paged in
// at load). mapped: read in place from the mapped checkpoint as the router picks them, the page cache
// keeping the recent ones: for checkpoints larger than memory (`kylin quantize` them first for q8/q4).
enum class ExpertMemory { held, mapped };

inline std::string_view expert_memory_name(ExpertMemory e) { return e == ExpertMemory::held ? "held" : "mapped"; }
inline std::optional<ExpertMemory> parse_expert_memory(std::string_view s) {
  for (ExpertMemory e : {ExpertMemory::held, ExpertMemory::mapped})
    if (expert_memory_name(e) == s) return e;
  return std::nullopt;
}

// Every layer's routed experts, taken out of `w` (ExpertMemory::mapped: the passes that quantize, pack or
// page in weights pass them by), and put back marked as mapped.
using LayerExperts = std::vector<std::vector<ExpertWeights>>;  // [layers][num_experts]
inline LayerExperts take_experts(ModelWeights& w) {
  LayerExperts out;
  for (LayerWeights& L : w.layers) out.push_back(std::exchange(L.experts, {}));
  return out;
}
inline ModelWeights put_experts(ModelWeights w, LayerExperts experts) {
  for (std::size_t l = 0; l < experts.size(); ++l) {
    w.layers[l].experts_mapped = !experts[l].empty();
    w.layers[l].experts = std::move(experts[l]);
  }
  return w;
}

// Bytes of a matrix as a matmul reads it: quantized blocks, 16-row panels (the last padded) or rows.
inline std::size_t held_bytes(const MatRef& m) {
  if (!m.data) return 0;
  if (kernels::is_quantized(m.dtype)) return kernels::quant_bytes(m.dtype, m.rows, m.cols);
  const std::int64_t elements = m.layout == kernels::Layout::panels ? kernels::panel_elements(m.rows, m.cols) : m.rows * m.cols;
  return static_cast<std::size_t>(elements) * dtype_size(m.dtype);
}

// Pages in what the forward reads of the checkpoint, every bound matrix and norm, and not the tensors it
// skips (a Qwen3.5 checkpoint's vision tower and MTP head are never read) nor mapped experts.
inline void populate_bound(ModelWeights w, const io::Checkpoint& ckpt) {
  for (LayerWeights& L : w.layers)
    if (L.experts_mapped) L.experts.clear();  // read as routed (ExpertMemory::mapped)
  auto page_in = [&](MatRef& m) {
    if (m.data) ckpt.advise(io::AccessHint::populate, m.data, held_bytes(m));
  };
  for_each_matrix(w, page_in);
  for (LayerWeights& L : w.layers) L.each_norm(page_in);
  page_in(w.norm);
  w.mtp.each_norm(page_in);
}

// Points every F8_E4M3 matrix still in w at its BF16 widening (made once per tensor); returns w.
inline ModelWeights widen_fp8(ModelWeights w) {
  if (w.fp8)
    for_each_matrix(w, [&](MatRef& m) {
      if (m.data && m.dtype == DType::f8_e4m3) m = w.fp8->widen(m);
    });
  return w;
}

// When bind_weights widens FP8 weights: at once, or later by widen_fp8 (after QuantizedWeights
// has quantized what it takes straight from the FP8 data).
enum class Fp8Widening { at_bind, deferred };

// Binds every tensor; throws one kylin::Error listing all missing or mismatched tensors.
// Tensors nothing binds are ignored, as transformers ignores unexpected keys (with a warning).
inline ModelWeights bind_weights(const io::Checkpoint& ckpt, const ModelConfig& c, Fp8Widening fp8 = Fp8Widening::at_bind,
                                 MtpHead mtp = MtpHead::skipped) {
  detail::Binder b(ckpt, c.fp8, detail::BindMode::load);
  ModelWeights w = detail::bind_all(b, c, mtp);
  b.throw_if_problems();
  return fp8 == Fp8Widening::at_bind ? widen_fp8(std::move(w)) : w;
}

// What loading would find, without throwing: `problems` make bind_weights fail; `unexpected`
// names tensors loading ignores (e.g. a stray rotary_emb.inv_freq or a tensor of another arch).
struct WeightCheck {
  std::vector<std::string> problems;    // "<name>: missing" | "<name>: expected [..], got [..]" | "<name>: dtype .."
  std::vector<std::string> unexpected;  // tensor names, checkpoint order
  std::vector<std::pair<std::string, std::size_t>> skipped;  // ArchInfo::skipped_tensors prefixes and how many tensors each has
  bool loads() const { return problems.empty(); }
};

inline WeightCheck check_weights(const io::Checkpoint& ckpt, const ModelConfig& c) {
  detail::Binder b(ckpt, c.fp8, detail::BindMode::check);
  detail::bind_all(b, c);
  WeightCheck check{b.problems(), {}, {}};
  const ArchInfo& arch = arch_info(c.model_type);
  for (std::string_view prefix : arch.skipped_tensors)
    if (!prefix.empty()) check.skipped.emplace_back(std::string(prefix), 0);
  for (std::string& name : b.unbound()) {
    auto skip = std::find_if(check.skipped.begin(), check.skipped.end(), [&](const auto& s) { return name.starts_with(s.first); });
    if (skip != check.skipped.end()) ++skip->second;
    else check.unexpected.push_back(std::move(name));
  }
  std::erase_if(check.skipped, [](const auto& s) { return s.second == 0; });
  return check;
}

}  // namespace kylin
