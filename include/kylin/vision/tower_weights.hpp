// The Qwen3.5 vision tower's weights (model.visual.*, transformers Qwen3_5VisionModel), bound from the mapped
// checkpoint: matrices read in place as stored (BF16/F16/F32 rows), biases and norms widened to f32.
#pragma once

#include <string>
#include <vector>

#include "kylin/core/dtype.hpp"
#include "kylin/core/error.hpp"
#include "kylin/io/checkpoint.hpp"
#include "kylin/io/vision_config.hpp"
#include "kylin/kernels/types.hpp"

namespace kylin::vision {

struct Linear {
  kernels::MatRef w;        // [out, in]
  std::vector<float> bias;  // [out]
};
struct LayerNormWeights {
  std::vector<float> weight, bias;  // [width] each
};
struct VisionBlockWeights {
  LayerNormWeights norm1, norm2;
  Linear q, k, v;  // the rows of attn.qkv: q, then k, then v
  Linear proj, fc1, fc2;
};
struct VisionWeights {
  Linear patch_embed;               // [D, C * T * P * P]: the Conv3d over one patch as a product
  std::vector<float> pos_embed;     // [side * side, D] the learned table
  std::vector<VisionBlockWeights> blocks;
  LayerNormWeights merger_norm;     // [D]
  Linear merger_fc1, merger_fc2;    // [4D, 4D], [out_hidden, 4D]
};

namespace detail {

class VisionBinder {
 public:
  explicit VisionBinder(const io::Checkpoint& ckpt) : ckpt_(ckpt) {}

  const io::TensorView& tensor(const std::string& name, const std::vector<std::int64_t>& shape) const {
    const io::TensorView* t = ckpt_.find(name);
    if (!t) throw Error(ErrorCategory::load, name, "missing (the vision tower of vision_config)");
    if (t->shape != shape) throw Error(ErrorCategory::load, name, "expected " + io::shape_string(shape) + ", got " + io::shape_string(t->shape));
    if (t->dtype != DType::bf16 && t->dtype != DType::f16 && t->dtype != DType::f32)
      throw Error(ErrorCategory::load, name, "dtype " + std::string(dtype_name(t->dtype)) + " is not supported in the vision tower (BF16, F16, F32 are)");
    return *t;
  }
  // [rows, cols] of a tensor of `shape` (rows its first dim, the rest flattened).
  kernels::MatRef matrix(const std::string& name, const std::vector<std::int64_t>& shape) const {
    const io::TensorView& t = tensor(name, shape);
    return {t.dtype, t.data, shape[0], t.numel() / shape[0]};
  }
  std::vector<float> floats(const std::string& name, const std::vector<std::int64_t>& shape) const {
    const io::TensorView& t = tensor(name, shape);
    std::vector<float> out(static_cast<std::size_t>(t.numel()));
    for (std::size_t i = 0; i < out.size(); ++i) {
      std::uint16_t h = 0;
      float f = 0;
      if (t.dtype == DType::f32) std::memcpy(&f, t.data + i * 4, 4);
      else std::memcpy(&h, t.data + i * 2, 2);
      out[i] = t.dtype == DType::f32 ? f : t.dtype == DType::bf16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
    return out;
  }
  Linear linear(const std::string& name, std::int64_t out, std::int64_t in) const {
    return {matrix(name + ".weight", {out, in}), floats(name + ".bias", {out})};
  }
  LayerNormWeights norm(const std::string& name, std::int64_t width) const {
    return {floats(name + ".weight", {width}), floats(name + ".bias", {width})};
  }
  // Rows [r0, r0 + n) of a bound linear layer (attn.qkv's q, k and v).
  static Linear rows(const Linear& l, std::int64_t r0, std::int64_t n) {
    const std::size_t row_bytes = static_cast<std::size_t>(l.w.cols) * dtype_size(l.w.dtype);
    kernels::MatRef w = l.w;
    w.data = static_cast<const std::byte*>(l.w.data) + static_cast<std::size_t>(r0) * row_bytes;
    w.rows = n;
    return {w, std::vector<float>(l.bias.begin() + r0, l.bias.begin() + r0 + n)};
  }

 private:
  const io::Checkpoint& ckpt_;
};

}  // namespace detail

// Every model.visual.* tensor vision_config calls for, with its shape checked; errors name the tensor.
inline VisionWeights bind_vision_weights(const io::Checkpoint& ckpt, const VisionConfig& c) {
  const detail::VisionBinder b(ckpt);
  const std::string p = "model.visual.";
  const std::int64_t D = c.hidden_size, I = c.intermediate_size, M = D * c.merge_rows();
  VisionWeights w;
  w.patch_embed = {b.matrix(p + "patch_embed.proj.weight", {D, c.in_channels, c.temporal_patch_size, c.patch_size, c.patch_size}),
                   b.floats(p + "patch_embed.proj.bias", {D})};
  w.pos_embed = b.floats(p + "pos_embed.weight", {c.num_position_embeddings, D});
  for (std::int64_t l = 0; l < c.depth; ++l) {
    const std::string q = p + "blocks." + std::to_string(l) + ".";
    const Linear qkv = b.linear(q + "attn.qkv", 3 * D, D);
    w.blocks.push_back({b.norm(q + "norm1", D), b.norm(q + "norm2", D), detail::VisionBinder::rows(qkv, 0, D),
                        detail::VisionBinder::rows(qkv, D, D), detail::VisionBinder::rows(qkv, 2 * D, D),
                        b.linear(q + "attn.proj", D, D), b.linear(q + "mlp.linear_fc1", I, D), b.linear(q + "mlp.linear_fc2", D, I)});
  }
  w.merger_norm = b.norm(p + "merger.norm", D);
  w.merger_fc1 = b.linear(p + "merger.linear_fc1", M, M);
  w.merger_fc2 = b.linear(p + "merger.linear_fc2", c.out_hidden_size, M);
  return w;
}

}  // namespace kylin::vision
