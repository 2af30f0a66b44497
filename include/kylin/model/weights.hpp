// Binds checkpoint tensors to the model by their Hugging Face names, in this one place, with
// dtype and exact-shape checks. Every missing or mismatched tensor is collected and reported
// together (one kylin::Error, or check_weights' list). Weights stay zero-copy views.
#pragma once

#include <array>
#include <concepts>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
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

struct LayerWeights {
  MatRef input_layernorm;           // [hidden]
  MatRef q_proj;                    // [n_heads*head_dim, hidden]
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
};

struct ModelWeights {
  MatRef embed_tokens;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  MatRef norm;          // [hidden]
  MatRef lm_head;       // [vocab, hidden]: lm_head.weight, or embed_tokens when tied and absent; empty: LmHead::none
  // FP8 checkpoints only: their F8_E4M3 weights and the BF16 widenings the MatRefs above point
  // into once widen_fp8 ran (shared, so copies of these weights stay valid).
  std::shared_ptr<Fp8Weights> fp8;
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

  std::vector<float> bind_f32(const std::string& name, std::int64_t n) {
    const MatRef w = bind(name, {n});
    std::vector<float> out;
    if (!w.data) return out;
    for (std::int64_t i = 0; i < n; ++i) out.push_back(kernels::weight_at(w, i));
    return out;
  }

  bool has(const std::string& name) const { return ckpt_.find(resolve(name)) != nullptr; }

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
  std::vector<std::string> problems_;
  std::unordered_set<std::string> bound_;  // every name bind() asked for, present or not
};

// Every tensor of config `c`, by HF name; what the architecture adds comes from its ArchInfo.
inline ModelWeights bind_all(Binder& b, const ModelConfig& c) {
  const ArchInfo& arch = arch_info(c.model_type);
  const std::int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, D = c.head_dim;
  ModelWeights w;
  w.embed_tokens = b.bind("model.embed_tokens.weight", {V, H});
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerWeights& L = w.layers.emplace_back();
    L.input_layernorm = b.bind(p + "input_layernorm.weight", {H});
    L.q_proj = b.bind(p + "self_attn.q_proj.weight", {c.q_dim(), H});
    L.k_proj = b.bind(p + "self_attn.k_proj.weight", {c.kv_dim(), H});
    L.v_proj = b.bind(p + "self_attn.v_proj.weight", {c.kv_dim(), H});
    L.o_proj = b.bind(p + "self_attn.o_proj.weight", {H, c.q_dim()});
    if (arch.has_qk_norm()) {
      L.q_norm = b.bind(p + "self_attn.q_norm.weight", {D});
      L.k_norm = b.bind(p + "self_attn.k_norm.weight", {D});
    }
    if (arch.has_qkv_bias()) {
      L.q_bias = b.bind_f32(p + "self_attn.q_proj.bias", c.q_dim());
      L.k_bias = b.bind_f32(p + "self_attn.k_proj.bias", c.kv_dim());
      L.v_bias = b.bind_f32(p + "self_attn.v_proj.bias", c.kv_dim());
    } else if (c.attention_bias) {  // transformers would add these; absent, it zero-initialises them
      for (const char* proj : {"q", "k", "v", "o"})
        b.refuse(p + "self_attn." + proj + "_proj.bias", std::string(arch.name) + " attention with biases is not supported");
    }
    L.post_attention_layernorm = b.bind(p + "post_attention_layernorm.weight", {H});
    if (c.is_sparse_layer(l)) {
      const std::int64_t E = c.moe->num_experts, M = c.moe->moe_intermediate_size;
      L.router = b.bind(p + "mlp.gate.weight", {E, H});
      for (std::int64_t e = 0; e < E; ++e) {
        const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        L.experts.push_back({b.bind(x + "gate_proj.weight", {M, H}), b.bind(x + "up_proj.weight", {M, H}),
                             b.bind(x + "down_proj.weight", {H, M})});
      }
      continue;
    }
    L.gate_proj = b.bind(p + "mlp.gate_proj.weight", {I, H});
    L.up_proj = b.bind(p + "mlp.up_proj.weight", {I, H});
    L.down_proj = b.bind(p + "mlp.down_proj.weight", {H, I});
  }
  w.norm = b.bind("model.norm.weight", {H});
  switch (lm_head_source(b.checkpoint(), c)) {
    case LmHead::own: w.lm_head = b.bind("lm_head.weight", {V, H}); break;
    case LmHead::tied: w.lm_head = w.embed_tokens; break;
    case LmHead::none: break;
  }
  w.fp8 = b.fp8_weights();
  return w;
}

}  // namespace detail

// Every weight matrix of w (embedding, LM head, projections, router, experts); fn(MatRef&).
template <class Fn>
void for_each_matrix(ModelWeights& w, Fn fn) {
  fn(w.embed_tokens);
  fn(w.lm_head);
  for (LayerWeights& L : w.layers) {
    for (MatRef* m : {&L.q_proj, &L.k_proj, &L.v_proj, &L.o_proj, &L.gate_proj, &L.up_proj, &L.down_proj, &L.router}) fn(*m);
    for (ExpertWeights& x : L.experts)
      for (MatRef* m : {&x.gate_proj, &x.up_proj, &x.down_proj}) fn(*m);
  }
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
inline ModelWeights bind_weights(const io::Checkpoint& ckpt, const ModelConfig& c, Fp8Widening fp8 = Fp8Widening::at_bind) {
  detail::Binder b(ckpt, c.fp8, detail::BindMode::load);
  ModelWeights w = detail::bind_all(b, c);
  b.throw_if_problems();
  return fp8 == Fp8Widening::at_bind ? widen_fp8(std::move(w)) : w;
}

// What loading would find, without throwing: `problems` make bind_weights fail; `unexpected`
// names tensors loading ignores (e.g. a stray rotary_emb.inv_freq or a tensor of another arch).
struct WeightCheck {
  std::vector<std::string> problems;    // "<name>: missing" | "<name>: expected [..], got [..]" | "<name>: dtype .."
  std::vector<std::string> unexpected;  // tensor names, checkpoint order
  bool loads() const { return problems.empty(); }
};

inline WeightCheck check_weights(const io::Checkpoint& ckpt, const ModelConfig& c) {
  detail::Binder b(ckpt, c.fp8, detail::BindMode::check);
  detail::bind_all(b, c);
  return {b.problems(), b.unbound()};
}

}  // namespace kylin
