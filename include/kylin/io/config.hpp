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

// The sparse-MLP fields of a qwen3_moe config.json (ArchInfo::has_experts), by their HF names.
struct MoeConfig {
  std::int64_t num_experts = 0;
  std::int64_t num_experts_per_tok = 0;    // k: experts each token is routed to
  std::int64_t moe_intermediate_size = 0;  // width of one expert's SwiGLU
  bool norm_topk_prob = false;             // renormalise the k routing weights to sum to 1
  std::int64_t decoder_sparse_step = 1;    // layer l is sparse when (l + 1) % step == 0 ...
  std::vector<std::int64_t> mlp_only_layers;  // ... and l is not listed here
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

  std::int64_t q_dim() const { return num_attention_heads * head_dim; }    // width of q_proj output
  std::int64_t kv_dim() const { return num_key_value_heads * head_dim; }  // width of k_proj/v_proj output
  std::int64_t n_groups() const { return num_attention_heads / num_key_value_heads; }
  bool has_qk_norm() const { return find_arch(model_type) && find_arch(model_type)->has_qk_norm(); }
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
inline MoeConfig read_moe(const ConfigReader& r, std::int64_t layers) {
  MoeConfig m;
  m.num_experts = r.require_int("num_experts", 1, 1 << 16);
  m.num_experts_per_tok = r.require_int("num_experts_per_tok", 1, m.num_experts);
  m.moe_intermediate_size = r.require_int("moe_intermediate_size", 1, max_dim);
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

}  // namespace detail

inline ModelConfig parse_model_config(const json::Value& root, const std::string& where = "config.json") {
  const detail::ConfigReader r(root, where);
  ModelConfig c;
  auto type = r.get_string("model_type");
  if (!type) r.fail("model_type", "missing required field");
  const ArchInfo* arch = find_arch(*type);
  if (!arch) r.fail("model_type", unsupported_model_type_message(*type));
  c.model_type = *type;
  c.hidden_size = r.require_int("hidden_size", 1, detail::max_dim);
  c.num_hidden_layers = r.require_int("num_hidden_layers", 1, detail::max_layers);
  c.num_attention_heads = r.require_int("num_attention_heads", 1, detail::max_dim);
  c.num_key_value_heads = r.get_int("num_key_value_heads", 1, detail::max_dim).value_or(c.num_attention_heads);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    r.fail("num_key_value_heads", std::to_string(c.num_attention_heads) + " attention heads are not divisible by " +
                                      std::to_string(c.num_key_value_heads) + " key/value heads");
  if (auto hd = r.get_int("head_dim", 1, detail::max_dim)) {
    c.head_dim = *hd;
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      r.fail("head_dim", "absent, and hidden_size is not divisible by num_attention_heads");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0) r.fail("head_dim", "must be even for rotary embeddings, got " + std::to_string(c.head_dim));
  c.intermediate_size = r.require_int("intermediate_size", 1, detail::max_dim);
  c.vocab_size = r.require_int("vocab_size", 1, detail::max_vocab);
  c.max_position_embeddings = r.get_int("max_position_embeddings", 1, detail::max_dim * 64).value_or(32768);
  c.rms_norm_eps = r.get_positive("rms_norm_eps").value_or(1e-6);
  c.rope_theta = r.get_positive("rope_theta").value_or(10000.0);
  c.rope_scaling = detail::read_rope_scaling(r);
  c.tie_word_embeddings = r.get_bool("tie_word_embeddings").value_or(false);
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
  if (arch->has_experts()) c.moe = detail::read_moe(r, c.num_hidden_layers);
  c.fp8 = detail::read_quantization(r);
  if (r.get_bool("use_sliding_window").value_or(false))
    r.fail("use_sliding_window", "sliding-window attention is not supported");
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
