// Binds checkpoint tensors to the model by their Hugging Face names, in this one place, with
// dtype and exact-shape checks. Every missing or mismatched tensor is collected and reported
// together in one kylin::Error. Weights stay zero-copy views in their stored dtype.
#pragma once

#include <string>
#include <vector>

#include "kylin/io/checkpoint.hpp"
#include "kylin/io/config.hpp"
#include "kylin/kernels/ops.hpp"

namespace kylin {

using kernels::MatRef;

struct LayerWeights {
  MatRef input_layernorm;           // [hidden]
  MatRef q_proj;                    // [n_heads*head_dim, hidden]
  MatRef k_proj;                    // [n_kv_heads*head_dim, hidden]
  MatRef v_proj;                    // [n_kv_heads*head_dim, hidden]
  MatRef o_proj;                    // [hidden, n_heads*head_dim]
  MatRef q_norm;                    // [head_dim]   (qwen3 only)
  MatRef k_norm;                    // [head_dim]   (qwen3 only)
  std::vector<float> q_bias;        // [n_heads*head_dim]     (attention_bias only; widened once, tiny)
  std::vector<float> k_bias;        // [n_kv_heads*head_dim]
  std::vector<float> v_bias;        // [n_kv_heads*head_dim]
  MatRef post_attention_layernorm;  // [hidden]
  MatRef gate_proj;                 // [intermediate, hidden]
  MatRef up_proj;                   // [intermediate, hidden]
  MatRef down_proj;                 // [hidden, intermediate]
};

struct ModelWeights {
  MatRef embed_tokens;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  MatRef norm;          // [hidden]
  MatRef lm_head;       // [vocab, hidden]: lm_head.weight, or embed_tokens when tied and absent
};

namespace detail {

class Binder {
 public:
  explicit Binder(const io::Checkpoint& ckpt) : ckpt_(ckpt) {}

  MatRef bind(const std::string& name, std::vector<std::int64_t> shape) {
    const io::TensorView* t = ckpt_.find(name);
    if (!t) {
      problems_.push_back(name + ": missing");
      return {};
    }
    if (t->shape != shape) {
      problems_.push_back(name + ": expected " + io::shape_string(shape) + ", got " + io::shape_string(t->shape));
      return {};
    }
    if (!info(t->dtype).runnable) {
      problems_.push_back(name + ": dtype " + std::string(dtype_name(t->dtype)) + " is not supported (BF16, F16, F32 are)");
      return {};
    }
    const std::int64_t cols = shape.back();
    const std::int64_t rows = shape.size() == 2 ? shape[0] : 1;
    return MatRef{t->dtype, t->data, rows, cols};
  }

  std::vector<float> bind_f32(const std::string& name, std::int64_t n) {
    const MatRef w = bind(name, {n});
    std::vector<float> out;
    if (!w.data) return out;
    for (std::int64_t i = 0; i < n; ++i) out.push_back(kernels::weight_at(w, i));
    return out;
  }

  bool has(const std::string& name) const { return ckpt_.find(name) != nullptr; }

  void throw_if_problems() const {
    if (problems_.empty()) return;
    std::string msg = std::to_string(problems_.size()) + " tensor problem(s):";
    for (const auto& p : problems_) msg += "\n  " + p;
    throw Error(ErrorCategory::load, ckpt_.dir().string(), msg);
  }

 private:
  const io::Checkpoint& ckpt_;
  std::vector<std::string> problems_;
};

}  // namespace detail

inline ModelWeights bind_weights(const io::Checkpoint& ckpt, const ModelConfig& c) {
  detail::Binder b(ckpt);
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
    if (c.has_qk_norm()) {
      L.q_norm = b.bind(p + "self_attn.q_norm.weight", {D});
      L.k_norm = b.bind(p + "self_attn.k_norm.weight", {D});
    }
    if (c.attention_bias) {
      L.q_bias = b.bind_f32(p + "self_attn.q_proj.bias", c.q_dim());
      L.k_bias = b.bind_f32(p + "self_attn.k_proj.bias", c.kv_dim());
      L.v_bias = b.bind_f32(p + "self_attn.v_proj.bias", c.kv_dim());
    }
    L.post_attention_layernorm = b.bind(p + "post_attention_layernorm.weight", {H});
    L.gate_proj = b.bind(p + "mlp.gate_proj.weight", {I, H});
    L.up_proj = b.bind(p + "mlp.up_proj.weight", {I, H});
    L.down_proj = b.bind(p + "mlp.down_proj.weight", {H, I});
  }
  w.norm = b.bind("model.norm.weight", {H});
  if (b.has("lm_head.weight") || !c.tie_word_embeddings)
    w.lm_head = b.bind("lm_head.weight", {V, H});
  else
    w.lm_head = w.embed_tokens;
  b.throw_if_problems();
  return w;
}

}  // namespace kylin
