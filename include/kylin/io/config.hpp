// ModelConfig: config.json as a runtime struct whose fields keep their Hugging Face names.
// Missing required fields and impossible values are load errors naming the field.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kylin/core/json.hpp"
#include "kylin/io/checkpoint.hpp"
#include "kylin/io/vision_config.hpp"
#include "kylin/model/arch.hpp"

namespace kylin {

// rope_scaling of type "yarn", with transformers' defaults for the optional fields.
struct RopeScaling {
  std::string rope_type = "yarn";
  double factor = 1.0;
  std::int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  std::optional<double> attention_factor;  // default: 0.1 * ln(factor) + 1
  bool truncate = true;
};

// Which mixer a layer of a hybrid stack runs (config.json's layer_types).
enum class LayerType : std::uint8_t { full_attention, linear_attention };

// The Gated DeltaNet fields of a hybrid config (ArchInfo::is_hybrid), by their HF names, with the defaults of
// transformers' Qwen3_5TextConfig / Qwen3NextConfig.
struct LinearAttentionConfig {
  std::int64_t linear_conv_kernel_dim = 4;   // K: taps of the causal depthwise conv over time
  std::int64_t linear_key_head_dim = 128;    // dk
  std::int64_t linear_value_head_dim = 128;  // dv
  std::int64_t linear_num_key_heads = 16;    // nk: q and k heads
  std::int64_t linear_num_value_heads = 32;  // nv: value heads (and recurrent states); a multiple of nk

  std::int64_t key_dim() const { return linear_num_key_heads * linear_key_head_dim; }        // nk * dk
  std::int64_t value_dim() const { return linear_num_value_heads * linear_value_head_dim; }  // nv * dv
  std::int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }                       // C: q | k | v channels
  std::int64_t value_heads_per_key() const { return linear_num_value_heads / linear_num_key_heads; }  // r
  // Floats of one layer's recurrent state: the last K-1 conv inputs [K-1, C], then S [nv, dk, dv].
  std::int64_t conv_state_floats() const { return (linear_conv_kernel_dim - 1) * conv_dim(); }
  std::int64_t delta_state_floats() const { return linear_num_value_heads * linear_key_head_dim * linear_value_head_dim; }
  std::int64_t state_floats() const { return conv_state_floats() + delta_state_floats(); }
};

// The sparse-MLP fields of a config.json with experts (ArchInfo::has_experts), by their HF names.
struct MoeConfig {
  std::int64_t num_experts = 0;
  std::int64_t num_experts_per_tok = 0;    // k: experts each token is routed to
  std::int64_t moe_intermediate_size = 0;  // width of one expert's SwiGLU
  bool norm_topk_prob = false;             // renormalise the k routing weights to sum to 1
  std::int64_t decoder_sparse_step = 1;    // layer l is sparse when (l + 1) % step == 0 ...
  std::vector<std::int64_t> mlp_only_layers;  // ... and l is not listed here
  std::int64_t shared_expert_intermediate_size = 0;  // width of the gated shared expert (ArchInfo::shared_expert), else 0
};

// quantization_config of the FP8 releases (Qwen/Qwen3-*-FP8): float8_e4m3fn linear weights, each
// with a weight_scale_inv per block of weight_block_size, activations quantized at run time.
struct Fp8Config {
  std::int64_t block_rows = 128;  // weight_block_size[0]: output features per scale
  std::int64_t block_cols = 128;  // weight_block_size[1]: input features per scale
};

struct ModelConfig {
  std::string model_type;  // an ArchInfo::name of model/arch.hpp
  std::int64_t hidden_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;  // default: num_attention_heads
  std::int64_t head_dim = 0;             // default: hidden_size / num_attention_heads
  std::int64_t intermediate_size = 0;
  std::int64_t vocab_size = 0;
  std::int64_t max_position_embeddings = 32768;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::optional<RopeScaling> rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // absent: the architecture's default (ArchInfo::default_attention_bias)
  std::optional<std::int64_t> bos_token_id;
  std::vector<std::int64_t> eos_token_id;  // config.json has an int or a list
  std::string torch_dtype;
  std::string hidden_act = "silu";
  std::optional<MoeConfig> moe;  // set exactly for archs with experts
  std::optional<Fp8Config> fp8;  // quantization_config with quant_method "fp8"
  std::int64_t rotary_dim = 0;   // leading dims of each head RoPE rotates: head_dim * partial_rotary_factor
  std::vector<LayerType> layer_types;          // [num_hidden_layers] (hybrid archs; empty: all full attention)
  std::optional<LinearAttentionConfig> linear;  // set exactly for hybrid archs
  std::int64_t mtp_num_hidden_layers = 0;      // MTP layers the checkpoint ships (mtp.*; not part of the forward)
  MRopeConfig mrope;                   // the three position rows of image tokens (rope_parameters.mrope_section)
  std::optional<VisionConfig> vision;  // vision_config, where the architecture has a tower and config.json one

  std::int64_t q_dim() const { return num_attention_heads * head_dim; }    // width of q_proj output
  std::int64_t kv_dim() const { return num_key_value_heads * head_dim; }  // width of k_proj/v_proj output
  std::int64_t n_groups() const { return num_attention_heads / num_key_value_heads; }
  bool has_qk_norm() const { return find_arch(model_type) && find_arch(model_type)->has_qk_norm(); }
  // Whether layer l is Gated DeltaNet linear attention (else attention, which keeps keys and values).
  bool is_linear_layer(std::int64_t l) const {
    return !layer_types.empty() && layer_types[static_cast<std::size_t>(l)] == LayerType::linear_attention;
  }
  std::int64_t linear_layers() const {
    return static_cast<std::int64_t>(std::count(layer_types.begin(), layer_types.end(), LayerType::linear_attention));
  }
  // Layers with keys and values in the KV cache (every layer but the linear ones).
  std::int64_t attention_layers() const { return num_hidden_layers - linear_layers(); }
  // Layer l's index among the layers of its kind: its KV slot (attention) or recurrent state (linear).
  std::int64_t index_in_kind(std::int64_t l) const {
    std::int64_t n = 0;
    for (std::int64_t i = 0; i < l; ++i) n += is_linear_layer(i) == is_linear_layer(l);
    return n;
  }
  // Whether layer l's MLP is the routed experts (transformers' Qwen3MoeDecoderLayer rule).
  bool is_sparse_layer(std::int64_t l) const {
    if (!moe || moe->num_experts == 0 || (l + 1) % moe->decoder_sparse_step != 0) return false;
    return std::find(moe->mlp_only_layers.begin(), moe->mlp_only_layers.end(), l) == moe->mlp_only_layers.end();
  }
};

// The rules the architecture puts on the other fields: an architecture with q/k/v biases needs
// attention_bias (a Qwen2 without them would lack weights kylin runs). The other way round is a
// weight check (detail::bind_all): Qwen3 configs may say attention_bias true as long as the
// checkpoint holds no bias tensors, which transformers then initialises to zero. `where`
// prefixes the error context, e.g. the config.json path.
inline void arch_checks(const ModelConfig& c, const std::string& where = "") {
  const ArchInfo& arch = arch_info(c.model_type);
  if (c.attention_bias || !arch.has_qkv_bias()) return;
  const std::string context = where.empty() ? "attention_bias" : where + ": attention_bias";
  throw Error(ErrorCategory::config, context, std::string(arch.name) + " without q/k/v biases is not supported");
}

namespace detail {

// Upper bounds that no real Qwen model approaches; they keep a hostile config from asking for
// absurd allocations before tensor shapes are checked.
inline constexpr std::int64_t max_dim = 1 << 20;
inline constexpr std::int64_t max_layers = 4096;
inline constexpr std::int64_t max_vocab = 1 << 24;

class ConfigReader {
 public:
  // `prefix` names a nested object ("rope_scaling."), so its errors still name the file and field.
  ConfigReader(const json::Value& root, std::string where, std::string prefix = "")
      : root_(root), where_(std::move(where)), prefix_(std::move(prefix)) {
    if (!root_.is_object()) fail("", "config.json must be a JSON object");
  }

  [[noreturn]] void fail(const std::string& field, const std::string& message) const {
    throw Error(ErrorCategory::config, field.empty() ? where_ : where_ + ": " + prefix_ + field, message);
  }

  std::optional<std::int64_t> get_int(const std::string& field, std::int64_t lo, std::int64_t hi) const {
    const json::Value* v = root_.find(field);
    if (!v || v->is_null()) return std::nullopt;
    if (!v->is_int()) fail(field, "must be an integer");
    if (v->as_int() < lo || v->as_int() > hi)
      fail(field, "value " + std::to_string(v->as_int()) + " outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return v->as_int();
  }
  std::int64_t require_int(const std::string& field, std::int64_t lo, std::int64_t hi) const {
    auto v = get_int(field, lo, hi);
    if (!v) fail(field, "missing required field");
    return *v;
  }
  std::optional<double> get_positive(const std::string& field) const {
    const json::Value* v = root_.find(field);
    if (!v || v->is_null()) return std::nullopt;
    if (!v->is_number()) fail(field, "must be a number");
    if (!(v->as_double() > 0) || !std::isfinite(v->as_double())) fail(field, "must be a positive finite number");
    return v->as_double();
  }
  std::optional<bool> get_bool(const std::string& field) const {
    const json::Value* v = root_.find(field);
    if (!v || v->is_null()) return std::nullopt;
    if (!v->is_bool()) fail(field, "must be true or false");
    return v->as_bool();
  }
  std::optional<std::string> get_string(const std::string& field) const {
    const json::Value* v = root_.find(field);
    if (!v || v->is_null()) return std::nullopt;
    if (!v->is_string()) fail(field, "must be a string");
    return v->as_string();
  }
  const json::Value* get(const std::string& field) const { return root_.find(field); }
  const std::string& where() const { return where_; }

 private:
  const json::Value& root_;
  std::string where_;
  std::string prefix_;
};

inline std::optional<RopeScaling> read_rope_scaling(const ConfigReader& r) {
  const json::Value* v = r.get("rope_scaling");
  if (!v || v->is_null()) return std::nullopt;
  if (!v->is_object()) r.fail("rope_scaling", "must be an object or null");
  const ConfigReader s(*v, r.where(), "rope_scaling.");
  auto type = s.get_string("rope_type");
  if (!type) type = s.get_string("type");  // older configs spell it "type"
  if (!type) r.fail("rope_scaling.rope_type", "missing required field");
  if (*type == "default") return std::nullopt;
  if (*type != "yarn") r.fail("rope_scaling.rope_type", "unsupported rope scaling \"" + *type + "\" (kylin supports none and \"yarn\")");
  RopeScaling y;
  auto factor = s.get_positive("factor");
  if (!factor) r.fail("rope_scaling.factor", "missing required field for yarn");
  y.factor = *factor;
  if (auto o = s.get_int("original_max_position_embeddings", 1, max_dim * 64)) y.original_max_position_embeddings = *o;
  if (auto b = s.get_positive("beta_fast")) y.beta_fast = *b;
  if (auto b = s.get_positive("beta_slow")) y.beta_slow = *b;
  if (auto a = s.get_positive("attention_factor")) y.attention_factor = *a;
  if (auto t = s.get_bool("truncate")) y.truncate = *t;
  return y;
}

// num_experts and friends of an arch with experts: the three sizes are required (no published
// checkpoint leaves them to transformers' defaults), the layer pattern defaults as there.
// SparseLayers::every_layer archs (Qwen3.5-MoE) read neither layer rule nor norm_topk_prob: every layer is
// sparse and the top-k weights are renormalised. A shared expert's width is required where the arch has one.
inline MoeConfig read_moe(const ConfigReader& r, std::int64_t layers, const ArchInfo& arch) {
  MoeConfig m;
  m.num_experts = r.require_int("num_experts", 1, 1 << 16);
  m.num_experts_per_tok = r.require_int("num_experts_per_tok", 1, m.num_experts);
  m.moe_intermediate_size = r.require_int("moe_intermediate_size", 1, max_dim);
  if (arch.shared_expert) m.shared_expert_intermediate_size = r.require_int("shared_expert_intermediate_size", 1, max_dim);
  if (arch.sparse_layers == SparseLayers::every_layer) {
    m.norm_topk_prob = true;
    return m;
  }
  m.norm_topk_prob = r.get_bool("norm_topk_prob").value_or(false);
  m.decoder_sparse_step = r.get_int("decoder_sparse_step", 1, layers).value_or(1);
  if (const json::Value* v = r.get("mlp_only_layers"); v && !v->is_null()) {
    if (!v->is_array()) r.fail("mlp_only_layers", "must be a list of layer indices");
    for (const auto& e : v->as_array()) {
      if (!e.is_int() || e.as_int() < 0 || e.as_int() >= layers)
        r.fail("mlp_only_layers", "entries must be layer indices in [0, " + std::to_string(layers) + ")");
      m.mlp_only_layers.push_back(e.as_int());
    }
  }
  return m;
}

// quantization_config: only the FP8 block format is read (its weights are widened at load,
// model/weights.hpp); any other method is refused here, before its tensors confuse the binding.
inline std::optional<Fp8Config> read_quantization(const ConfigReader& r) {
  const json::Value* v = r.get("quantization_config");
  if (!v || v->is_null()) return std::nullopt;
  if (!v->is_object()) r.fail("quantization_config", "must be an object or null");
  const ConfigReader q(*v, r.where(), "quantization_config.");
  const auto method = q.get_string("quant_method");
  if (method != "fp8")
    q.fail("quant_method", "\"" + method.value_or("") + "\" is not supported (kylin reads \"fp8\" checkpoints; --weights q8 quantizes BF16 ones)");
  if (auto fmt = q.get_string("fmt"); fmt && *fmt != "e4m3") q.fail("fmt", "\"" + *fmt + "\" is not supported (e4m3 is)");
  if (auto act = q.get_string("activation_scheme"); act && *act != "dynamic")
    q.fail("activation_scheme", "\"" + *act + "\" is not supported (dynamic is)");
  Fp8Config f;
  if (const json::Value* b = q.get("weight_block_size"); b && !b->is_null()) {
    if (!b->is_array() || b->as_array().size() != 2 || !b->as_array()[0].is_int() || !b->as_array()[1].is_int() ||
        b->as_array()[0].as_int() < 1 || b->as_array()[1].as_int() < 1)
      q.fail("weight_block_size", "must be two positive integers [rows, cols]");
    f.block_rows = b->as_array()[0].as_int();
    f.block_cols = b->as_array()[1].as_int();
  }
  return f;
}

// layer_types (legacy "attention"/"mamba" = full/linear), else layer i is full attention iff
// (i + 1) % full_attention_interval == 0 (transformers' Qwen3_5TextConfig / Qwen3NextConfig).
inline std::vector<LayerType> read_layer_types(const ConfigReader& r, std::int64_t layers) {
  std::vector<LayerType> types;
  const json::Value* v = r.get("layer_types");
  if (!v || v->is_null()) {
    const std::int64_t interval = r.get_int("full_attention_interval", 1, max_layers).value_or(4);
    for (std::int64_t i = 0; i < layers; ++i) types.push_back((i + 1) % interval == 0 ? LayerType::full_attention : LayerType::linear_attention);
    return types;
  }
  if (!v->is_array() || static_cast<std::int64_t>(v->as_array().size()) != layers)
    r.fail("layer_types", "must be a list of num_hidden_layers (" + std::to_string(layers) + ") layer types");
  for (const auto& e : v->as_array()) {
    const std::string t = e.is_string() ? e.as_string() : "";
    if (t == "full_attention" || t == "attention") types.push_back(LayerType::full_attention);
    else if (t == "linear_attention" || t == "mamba") types.push_back(LayerType::linear_attention);
    else r.fail("layer_types", "entries must be \"full_attention\" or \"linear_attention\", got " + json::dump(e));
  }
  return types;
}

inline LinearAttentionConfig read_linear_attention(const ConfigReader& r) {
  LinearAttentionConfig g;
  g.linear_conv_kernel_dim = r.get_int("linear_conv_kernel_dim", 1, 64).value_or(g.linear_conv_kernel_dim);
  g.linear_key_head_dim = r.get_int("linear_key_head_dim", 1, max_dim).value_or(g.linear_key_head_dim);
  g.linear_value_head_dim = r.get_int("linear_value_head_dim", 1, max_dim).value_or(g.linear_value_head_dim);
  g.linear_num_key_heads = r.get_int("linear_num_key_heads", 1, max_dim).value_or(g.linear_num_key_heads);
  g.linear_num_value_heads = r.get_int("linear_num_value_heads", 1, max_dim).value_or(g.linear_num_value_heads);
  if (g.linear_num_value_heads % g.linear_num_key_heads != 0)
    r.fail("linear_num_value_heads", std::to_string(g.linear_num_value_heads) + " value heads are not a multiple of " +
                                         std::to_string(g.linear_num_key_heads) + " key heads (linear_num_key_heads)");
  return g;
}

// rope_parameters {rope_type, rope_theta, partial_rotary_factor} (Qwen3.5), else the legacy top-level keys
// (Qwen3-Next): theta and the rotated share of head_dim. Only the default rotation (M-RoPE's interleaved
// sections rotate text positions as plain RoPE: all three position rows are the token's index).
inline void read_rope_parameters(const ConfigReader& r, double default_factor, double& theta, double& factor, MRopeConfig& mrope) {
  theta = r.get_positive("rope_theta").value_or(theta);
  factor = r.get_positive("partial_rotary_factor").value_or(default_factor);
  const json::Value* v = r.get("rope_parameters");
  if (!v || v->is_null()) return;
  if (!v->is_object()) r.fail("rope_parameters", "must be an object or null");
  const ConfigReader p(*v, r.where(), "rope_parameters.");
  if (auto type = p.get_string("rope_type"); type && *type != "default")
    p.fail("rope_type", "unsupported rope type \"" + *type + "\" (kylin runs \"default\" for this architecture)");
  theta = p.get_positive("rope_theta").value_or(theta);
  factor = p.get_positive("partial_rotary_factor").value_or(factor);
  if (const json::Value* s = p.get("mrope_section"); s && !s->is_null()) {
    if (!s->is_array() || s->as_array().size() != 3) p.fail("mrope_section", "must be a list of three integers (temporal, height, width)");
    for (std::size_t i = 0; i < 3; ++i) {
      const json::Value& e = s->as_array()[i];
      if (!e.is_int() || e.as_int() < 0 || e.as_int() > max_dim) p.fail("mrope_section", "must be a list of three non-negative integers");
      mrope.section[i] = e.as_int();
    }
    mrope.interleaved = p.get_bool("mrope_interleaved").value_or(false);
  }
}

// vision_config and the top-level image token ids (ArchInfo::vision_config), when config.json has them.
inline std::optional<VisionConfig> read_vision(const ConfigReader& top, std::string_view key, std::int64_t text_hidden) {
  const json::Value* v = key.empty() ? nullptr : top.get(std::string(key));
  if (!v || v->is_null()) return std::nullopt;
  if (!v->is_object()) top.fail(std::string(key), "must be an object");
  const ConfigReader r(*v, top.where(), std::string(key) + ".");
  VisionConfig g;
  g.depth = r.get_int("depth", 1, max_layers).value_or(g.depth);
  g.hidden_size = r.get_int("hidden_size", 1, max_dim).value_or(g.hidden_size);
  g.num_heads = r.get_int("num_heads", 1, max_dim).value_or(g.num_heads);
  g.intermediate_size = r.get_int("intermediate_size", 1, max_dim).value_or(g.intermediate_size);
  g.in_channels = r.get_int("in_channels", 3, 3).value_or(3);
  g.patch_size = r.get_int("patch_size", 1, 1024).value_or(g.patch_size);
  g.temporal_patch_size = r.get_int("temporal_patch_size", 1, 16).value_or(g.temporal_patch_size);
  g.spatial_merge_size = r.get_int("spatial_merge_size", 1, 16).value_or(g.spatial_merge_size);
  g.num_position_embeddings = r.get_int("num_position_embeddings", 1, max_dim).value_or(g.num_position_embeddings);
  g.out_hidden_size = r.get_int("out_hidden_size", 1, max_dim).value_or(text_hidden);
  g.hidden_act = r.get_string("hidden_act").value_or(g.hidden_act);
  if (g.hidden_size % g.num_heads != 0 || g.head_dim() % 4 != 0)
    r.fail("num_heads", "hidden_size " + std::to_string(g.hidden_size) + " over " + std::to_string(g.num_heads) +
                            " heads must give a head dim divisible by 4 (its 2D rotary halves)");
  if (g.position_side() * g.position_side() != g.num_position_embeddings)
    r.fail("num_position_embeddings", std::to_string(g.num_position_embeddings) + " is not a square (the table is side x side)");
  if (g.out_hidden_size != text_hidden)
    r.fail("out_hidden_size", std::to_string(g.out_hidden_size) + " is not the text model's hidden_size " + std::to_string(text_hidden));
  if (g.hidden_act != "gelu_pytorch_tanh" && g.hidden_act != "gelu")
    r.fail("hidden_act", "unsupported activation \"" + g.hidden_act + "\" (gelu_pytorch_tanh and gelu are)");
  if (const json::Value* d = r.get("deepstack_visual_indexes"); d && d->is_array() && !d->as_array().empty())
    r.fail("deepstack_visual_indexes", "DeepStack features are not supported (Qwen3.5's towers have none)");
  g.image_token_id = top.get_int("image_token_id", 0, max_vocab).value_or(-1);
  g.vision_start_token_id = top.get_int("vision_start_token_id", 0, max_vocab).value_or(-1);
  g.vision_end_token_id = top.get_int("vision_end_token_id", 0, max_vocab).value_or(-1);
  if (g.image_token_id < 0) top.fail("image_token_id", "missing: the vision tower's tokens replace this token's embeddings");
  return g;
}

// The hybrid fields of config `t` (the text model's object) into `c`: layer pattern, DeltaNet shapes, the rotated dims.
inline void read_hybrid(const ConfigReader& t, const ArchInfo& arch, ModelConfig& c) {
  c.layer_types = read_layer_types(t, c.num_hidden_layers);
  c.linear = read_linear_attention(t);
  double factor = arch.default_partial_rotary_factor;
  read_rope_parameters(t, arch.default_partial_rotary_factor, c.rope_theta, factor, c.mrope);
  if (!(factor <= 1.0)) t.fail("partial_rotary_factor", "must be in (0, 1], got " + std::to_string(factor));
  c.rotary_dim = static_cast<std::int64_t>(static_cast<double>(c.head_dim) * factor);  // transformers: int(head_dim * factor)
  if (c.rotary_dim < 2 || c.rotary_dim % 2 != 0)
    t.fail("partial_rotary_factor", "rotates " + std::to_string(c.rotary_dim) + " of head_dim " + std::to_string(c.head_dim) +
                                        " dims; RoPE needs an even number of at least 2");
  c.mtp_num_hidden_layers = t.get_int("mtp_num_hidden_layers", 0, max_layers).value_or(0);
}

}  // namespace detail

// `root` is config.json; an architecture whose text model is nested (ArchInfo::text_config, Qwen3.5) has its
// fields read from that object, errors naming them "text_config.<field>".
inline ModelConfig parse_model_config(const json::Value& root, const std::string& where = "config.json") {
  const detail::ConfigReader top(root, where);
  ModelConfig c;
  auto type = top.get_string("model_type");
  if (!type) top.fail("model_type", "missing required field");
  const ArchInfo* arch = find_arch(*type);
  if (!arch) top.fail("model_type", unsupported_model_type_message(*type));
  c.model_type = *type;
  const std::string nest(arch->text_config);
  const json::Value* text = nest.empty() ? &root : top.get(nest);
  if (!text || !text->is_object()) top.fail(nest, "missing required object (the text model's fields)");
  const detail::ConfigReader r(*text, where, nest.empty() ? "" : nest + ".");
  c.hidden_size = r.require_int("hidden_size", 1, detail::max_dim);
  c.num_hidden_layers = r.require_int("num_hidden_layers", 1, detail::max_layers);
  c.num_attention_heads = r.require_int("num_attention_heads", 1, detail::max_dim);
  c.num_key_value_heads = r.get_int("num_key_value_heads", 1, detail::max_dim).value_or(c.num_attention_heads);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    r.fail("num_key_value_heads", std::to_string(c.num_attention_heads) + " attention heads are not divisible by " +
                                      std::to_string(c.num_key_value_heads) + " key/value heads");
  if (auto hd = r.get_int("head_dim", 1, detail::max_dim)) {
    c.head_dim = *hd;
  } else if (arch->default_head_dim > 0) {
    c.head_dim = arch->default_head_dim;
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      r.fail("head_dim", "absent, and hidden_size is not divisible by num_attention_heads");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0) r.fail("head_dim", "must be even for rotary embeddings, got " + std::to_string(c.head_dim));
  c.rotary_dim = c.head_dim;
  // Every layer of an every_layer MoE (Qwen3.5-MoE) is sparse: its config has no dense width.
  const bool all_sparse = arch->has_experts() && arch->sparse_layers == SparseLayers::every_layer;
  c.intermediate_size = all_sparse ? r.get_int("intermediate_size", 1, detail::max_dim).value_or(0)
                                   : r.require_int("intermediate_size", 1, detail::max_dim);
  c.vocab_size = r.require_int("vocab_size", 1, detail::max_vocab);
  c.max_position_embeddings = r.get_int("max_position_embeddings", 1, detail::max_dim * 64).value_or(32768);
  c.rms_norm_eps = r.get_positive("rms_norm_eps").value_or(1e-6);
  c.rope_theta = r.get_positive("rope_theta").value_or(10000.0);
  if (!arch->is_hybrid()) c.rope_scaling = detail::read_rope_scaling(r);
  else if (const json::Value* rs = r.get("rope_scaling"); rs && !rs->is_null())
    r.fail("rope_scaling", "is not supported for " + std::string(arch->name) + " (rope_parameters is read)");
  // A composite config (Qwen3.5) keeps tie_word_embeddings at the top level too, which its class reads.
  c.tie_word_embeddings = top.get_bool("tie_word_embeddings").value_or(r.get_bool("tie_word_embeddings").value_or(false));
  c.attention_bias = r.get_bool("attention_bias").value_or(arch->default_attention_bias());
  c.bos_token_id = r.get_int("bos_token_id", 0, detail::max_vocab);
  if (const json::Value* eos = r.get("eos_token_id"); eos && !eos->is_null()) {
    if (eos->is_int()) {
      if (eos->as_int() < 0) r.fail("eos_token_id", "must be an integer or a list of integers");
      c.eos_token_id.push_back(eos->as_int());
    } else if (eos->is_array()) {
      for (const auto& e : eos->as_array()) {
        if (!e.is_int() || e.as_int() < 0) r.fail("eos_token_id", "must be an integer or a list of integers");
        c.eos_token_id.push_back(e.as_int());
      }
    } else {
      r.fail("eos_token_id", "must be an integer or a list of integers");
    }
  }
  // transformers >= 4.56 writes "dtype"; older files "torch_dtype".
  c.torch_dtype = r.get_string("torch_dtype").value_or(r.get_string("dtype").value_or(""));
  c.hidden_act = r.get_string("hidden_act").value_or("silu");
  if (c.hidden_act != "silu") r.fail("hidden_act", "unsupported activation \"" + c.hidden_act + "\" (Qwen uses \"silu\")");
  if (arch->is_hybrid()) detail::read_hybrid(r, *arch, c);
  if (arch->has_experts()) c.moe = detail::read_moe(r, c.num_hidden_layers, *arch);
  c.fp8 = detail::read_quantization(top.get("quantization_config") ? top : r);
  if (r.get_bool("use_sliding_window").value_or(false))
    r.fail("use_sliding_window", "sliding-window attention is not supported");
  c.vision = detail::read_vision(top, arch->vision_config, c.hidden_size);
  // The sections matter only for image tokens (text positions fill all three rows alike), so only a tower checks them.
  const std::int64_t sections = c.mrope.section[0] + c.mrope.section[1] + c.mrope.section[2];
  if (c.vision && sections != c.rotary_dim / 2)
    top.fail(nest + ".rope_parameters.mrope_section", (c.mrope.enabled() ? "sums to " + std::to_string(sections) : std::string("missing")) +
                                                          ": image tokens need M-RoPE sections over the " + std::to_string(c.rotary_dim / 2) +
                                                          " rotary frequencies");
  arch_checks(c, where);
  return c;
}

inline ModelConfig load_model_config(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir)) throw Error(ErrorCategory::load, dir.string(), "no such model directory");
  const auto path = dir / "config.json";
  if (!std::filesystem::exists(path)) throw Error(ErrorCategory::config, path.string(), "missing");
  return parse_model_config(json::parse(io::read_text_file(path), path.string(), ErrorCategory::config), path.string());
}

// generation_config.json when the directory has one, else null.
inline json::Value load_generation_config(const std::filesystem::path& dir) {
  const auto path = dir / "generation_config.json";
  if (!std::filesystem::exists(path)) return {};
  return json::parse(io::read_text_file(path), path.string(), ErrorCategory::config);
}

}  // namespace kylin
