// Compile-time descriptors of the published Qwen3 (dense and MoE) / Qwen2.5 shapes: field names as in
// config.json, derived sizes as constexpr members, every invariant a static_assert per preset.
// Decision (measured, docs/ARCHITECTURE.md): a descriptor identifies a checkpoint and never
// selects a compile-time-shaped instantiation or gates loading; `kylin inspect` reports the match
// or "no preset matched (closest: X; differs in: field=value (preset value), ...)".
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kylin/io/config.hpp"
#include "kylin/model/arch.hpp"

namespace kylin {

struct ModelDescriptor {
  std::string_view name;        // the Hugging Face repo name, e.g. "Qwen3-0.6B"
  std::string_view model_type;  // an Arch's name (model/arch.hpp), e.g. Qwen3Arch::name
  std::int64_t hidden_size;
  std::int64_t num_hidden_layers;
  std::int64_t num_attention_heads;
  std::int64_t num_key_value_heads;
  std::int64_t head_dim;
  std::int64_t intermediate_size;
  std::int64_t vocab_size;
  std::int64_t max_position_embeddings;  // recorded, not matched: base and instruct repos differ
  double rms_norm_eps;
  double rope_theta;
  bool tie_word_embeddings;
  bool attention_bias;
  double published_params_b;  // total parameters on the model card, in billions
  // qwen3_moe only (every layer sparse in the published models); 0 for dense models
  std::int64_t num_experts = 0;
  std::int64_t num_experts_per_tok = 0;
  std::int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  double published_active_params_b = 0;  // activated parameters per token on the model card

  constexpr std::int64_t q_dim() const { return num_attention_heads * head_dim; }    // q_proj rows
  constexpr std::int64_t kv_dim() const { return num_key_value_heads * head_dim; }  // k_proj/v_proj rows
  constexpr std::int64_t n_groups() const { return num_attention_heads / num_key_value_heads; }
  constexpr const ArchInfo& arch() const { return *find_arch(model_type); }  // check_descriptor: non-null
  constexpr bool has_qk_norm() const { return arch().has_qk_norm(); }

  // q/k/v/o projections, their biases (QKVBias::qkv) and the per-head q/k RMSNorm weights (QKNorm::per_head).
  constexpr std::int64_t params_attention() const {
    std::int64_t n = hidden_size * q_dim() + 2 * hidden_size * kv_dim() + q_dim() * hidden_size;
    if (attention_bias) n += q_dim() + 2 * kv_dim();
    if (has_qk_norm()) n += 2 * head_dim;
    return n;
  }
  constexpr bool has_experts() const { return arch().has_experts(); }
  // gate, up, down; a sparse layer: every expert's plus the router
  constexpr std::int64_t params_mlp() const {
    return has_experts() ? num_experts * (3 * hidden_size * moe_intermediate_size + hidden_size) : 3 * hidden_size * intermediate_size;
  }
  // What one token runs through: the router and k experts of a sparse layer.
  constexpr std::int64_t params_mlp_active() const {
    return has_experts() ? num_experts * hidden_size + num_experts_per_tok * 3 * hidden_size * moe_intermediate_size : params_mlp();
  }
  constexpr std::int64_t params_active() const {
    return num_hidden_layers * (params_attention() + params_mlp_active() + 2 * hidden_size) + hidden_size +
           params_embedding() * (tie_word_embeddings ? 1 : 2);
  }
  constexpr std::int64_t params_per_layer() const {
    return params_attention() + params_mlp() + 2 * hidden_size;  // + input/post-attention norms
  }
  constexpr std::int64_t params_embedding() const { return vocab_size * hidden_size; }
  constexpr std::int64_t params_non_embedding() const { return num_hidden_layers * params_per_layer() + hidden_size; }
  constexpr std::int64_t params_total() const {
    return params_non_embedding() + params_embedding() * (tie_word_embeddings ? 1 : 2);  // + lm_head if untied
  }
  constexpr std::int64_t bytes_bf16() const { return 2 * params_total(); }
};

namespace detail {
constexpr double relative_gap(double a, double b) { return (a > b ? a - b : b - a) / b; }
}  // namespace detail

// Instantiating check_descriptor<D>() fails compilation with the message of the broken invariant.
template <const ModelDescriptor& D>
consteval bool check_descriptor() {
  static_assert(find_arch(D.model_type) != nullptr, "model_type must name an Arch of model/arch.hpp");
  static_assert(D.hidden_size > 0 && D.num_hidden_layers > 0 && D.intermediate_size > 0 && D.vocab_size > 0,
                "sizes must be positive");
  static_assert(D.num_attention_heads > 0 && D.num_key_value_heads > 0 && D.head_dim > 0, "head counts must be positive");
  static_assert(D.num_attention_heads % D.num_key_value_heads == 0,
                "num_attention_heads must be a multiple of num_key_value_heads (whole GQA groups)");
  static_assert(D.head_dim % 2 == 0, "head_dim must be even: RoPE rotates pairs of dimensions");
  static_assert(D.arch().head_dim_in_config || D.q_dim() == D.hidden_size,
                "this arch's config.json has no head_dim field: head_dim must be hidden_size / num_attention_heads");
  static_assert(D.attention_bias == D.arch().has_qkv_bias(),
                "attention_bias must match the arch: Qwen2 checkpoints carry q/k/v biases, Qwen3 checkpoints have none");
  static_assert(D.rms_norm_eps > 0 && D.rope_theta > 0, "rms_norm_eps and rope_theta must be positive");
  static_assert(D.max_position_embeddings > 0, "max_position_embeddings must be positive");
  static_assert(detail::relative_gap(static_cast<double>(D.params_total()), D.published_params_b * 1e9) < 0.03,
                "derived parameter count is more than 3% off the model card's total");
  static_assert(D.has_experts() == (D.num_experts > 0), "num_experts is set exactly for an arch with experts");
  static_assert(!D.has_experts() || (D.num_experts_per_tok >= 1 && D.num_experts_per_tok <= D.num_experts && D.moe_intermediate_size > 0),
                "an MoE preset routes each token to 1..num_experts experts of positive width");
  static_assert(!D.has_experts() ||
                    detail::relative_gap(static_cast<double>(D.params_active()), D.published_active_params_b * 1e9) < 0.05,
                "derived activated parameter count is more than 5% off the model card's");
  return true;
}

namespace presets {
// The published sizes, written as in each official repo's config.json; where each value comes
// from (and which were not verified) is in docs/PRESETS.md. published_params_b: the model cards.
// Qwen2.5's max_position_embeddings is the Instruct repos' 32768 (some base repos say 131072).
inline constexpr ModelDescriptor qwen3_0_6b{
    .name = "Qwen3-0.6B", .model_type = Qwen3Arch::name,
    .hidden_size = 1024, .num_hidden_layers = 28, .num_attention_heads = 16, .num_key_value_heads = 8,
    .head_dim = 128, .intermediate_size = 3072, .vocab_size = 151936, .max_position_embeddings = 40960,
    .rms_norm_eps = 1e-6, .rope_theta = 1000000.0, .tie_word_embeddings = true, .attention_bias = false,
    .published_params_b = 0.6};
inline constexpr ModelDescriptor qwen3_1_7b{
    .name = "Qwen3-1.7B", .model_type = Qwen3Arch::name,
    .hidden_size = 2048, .num_hidden_layers = 28, .num_attention_heads = 16, .num_key_value_heads = 8,
    .head_dim = 128, .intermediate_size = 6144, .vocab_size = 151936, .max_position_embeddings = 40960,
    .rms_norm_eps = 1e-6, .rope_theta = 1000000.0, .tie_word_embeddings = true, .attention_bias = false,
    .published_params_b = 1.7};
inline constexpr ModelDescriptor qwen3_4b{
    .name = "Qwen3-4B", .model_type = Qwen3Arch::name,
    .hidden_size = 2560, .num_hidden_layers = 36, .num_attention_heads = 32, .num_key_value_heads = 8,
    .head_dim = 128, .intermediate_size = 9728, .vocab_size = 151936, .max_position_embeddings = 40960,
    .rms_norm_eps = 1e-6, .rope_theta = 1000000.0, .tie_word_embeddings = true, .attention_bias = false,
    .published_params_b = 4.0};
inline constexpr ModelDescriptor qwen3_8b{
    .name = "Qwen3-8B", .model_type = Qwen3Arch::name,
    .hidden_size = 4096, .num_hidden_layers = 36, .num_attention_heads = 32, .num_key_value_heads = 8,
    .head_dim = 128, .intermediate_size = 12288, .vocab_size = 151936, .max_position_embeddings = 40960,
    .rms_norm_eps = 1e-6, .rope_theta = 1000000.0, .tie_word_embeddings = false, .attention_bias = false,
    .published_params_b = 8.2};
inline constexpr ModelDescriptor qwen3_14b{
    .name = "Qwen3-14B", .model_type = Qwen3Arch::name,
    .hidden_size = 5120, .num_hidden_layers = 40, .num_attention_heads = 40, .num_key_value_heads = 8,
    .head_dim = 128, .intermediate_size = 17408, .vocab_size = 151936, .max_position_embeddings = 40960,
    .rms_norm_eps = 1e-6, .rope_theta = 1000000.0, .tie_word_embeddings = false, .attention_bias = false,
    .published_params_b = 14.8};
inline constexpr ModelDescriptor qwen3_32b{
    .name = "Qwen3-32B", .model_type = Qwen3Arch::name,
    .hidden_size = 5120, .num_hidden_layers = 64, .num_attention_heads = 64, .num_key_value_heads = 8,
    .head_dim = 128, .intermediate_size = 25600, .vocab_size = 151936, .max_position_embeddings = 40960,
    .rms_norm_eps = 1e-6, .rope_theta = 1000000.0, .tie_word_embeddings = false, .attention_bias = false,
    .published_params_b = 32.8};
inline constexpr ModelDescriptor qwen2_5_0_5b{
    .name = "Qwen2.5-0.5B", .model_type = Qwen2Arch::name,
    .hidden_size = 896, .num_hidden_layers = 24, .num_attention_heads = 14, .num_key_value_heads = 2,
    .head_dim = 64, .intermediate_size = 4864, .vocab_size = 151936, .max_position_embeddings = 32768,
    .rms_norm_eps = 1e-6, .rope_theta = 1000000.0, .tie_word_embeddings = true, .attention_bias = true,
    .published_params_b = 0.49};
inline constexpr ModelDescriptor qwen2_5_1_5b{
    .name = "Qwen2.5-1.5B", .model_type = Qwen2Arch::name,
    .hidden_size = 1536, .num_hidden_layers = 28, .num_attention_heads = 12, .num_key_value_heads = 2,
    .head_dim = 128, .intermediate_size = 8960, .vocab_size = 151936, .max_position_embeddings = 32768,
    .rms_norm_eps = 1e-6, .rope_theta = 1000000.0, .tie_word_embeddings = true, .attention_bias = true,
    .published_params_b = 1.54};
inline constexpr ModelDescriptor qwen2_5_3b{
    .name = "Qwen2.5-3B", .model_type = Qwen2Arch::name,
    .hidden_size = 2048, .num_hidden_layers = 36, .num_attention_heads = 16, .num_key_value_heads = 2,
    .head_dim = 128, .intermediate_size = 11008, .vocab_size = 151936, .max_position_embeddings = 32768,
    .rms_norm_eps = 1e-6, .rope_theta = 1000000.0, .tie_word_embeddings = true, .attention_bias = true,
    .published_params_b = 3.09};
inline constexpr ModelDescriptor qwen2_5_7b{
    .name = "Qwen2.5-7B", .model_type = Qwen2Arch::name,
    .hidden_size = 3584, .num_hidden_layers = 28, .num_attention_heads = 28, .num_key_value_heads = 4,
    .head_dim = 128, .intermediate_size = 18944, .vocab_size = 152064, .max_position_embeddings = 32768,
    .rms_norm_eps = 1e-6, .rope_theta = 1000000.0, .tie_word_embeddings = false, .attention_bias = true,
    .published_params_b = 7.61};
inline constexpr ModelDescriptor qwen3_30b_a3b{
    .name = "Qwen3-30B-A3B", .model_type = Qwen3MoeArch::name,
    .hidden_size = 2048, .num_hidden_layers = 48, .num_attention_heads = 32, .num_key_value_heads = 4,
    .head_dim = 128, .intermediate_size = 6144, .vocab_size = 151936, .max_position_embeddings = 40960,
    .rms_norm_eps = 1e-6, .rope_theta = 1000000.0, .tie_word_embeddings = false, .attention_bias = false,
    .published_params_b = 30.5, .num_experts = 128, .num_experts_per_tok = 8, .moe_intermediate_size = 768,
    .norm_topk_prob = true, .published_active_params_b = 3.3};
inline constexpr ModelDescriptor qwen3_235b_a22b{
    .name = "Qwen3-235B-A22B", .model_type = Qwen3MoeArch::name,
    .hidden_size = 4096, .num_hidden_layers = 94, .num_attention_heads = 64, .num_key_value_heads = 4,
    .head_dim = 128, .intermediate_size = 12288, .vocab_size = 151936, .max_position_embeddings = 40960,
    .rms_norm_eps = 1e-6, .rope_theta = 1000000.0, .tie_word_embeddings = false, .attention_bias = false,
    .published_params_b = 235.0, .num_experts = 128, .num_experts_per_tok = 8, .moe_intermediate_size = 1536,
    .norm_topk_prob = true, .published_active_params_b = 22.0};

inline constexpr std::array<const ModelDescriptor*, 12> all = {
    &qwen3_0_6b,   &qwen3_1_7b,   &qwen3_4b,   &qwen3_8b,   &qwen3_14b,     &qwen3_32b,      &qwen2_5_0_5b,
    &qwen2_5_1_5b, &qwen2_5_3b,   &qwen2_5_7b, &qwen3_30b_a3b, &qwen3_235b_a22b};

static_assert(check_descriptor<qwen3_0_6b>() && check_descriptor<qwen3_1_7b>() && check_descriptor<qwen3_4b>() &&
              check_descriptor<qwen3_8b>() && check_descriptor<qwen3_14b>() && check_descriptor<qwen3_32b>());
static_assert(check_descriptor<qwen2_5_0_5b>() && check_descriptor<qwen2_5_1_5b>() && check_descriptor<qwen2_5_3b>() &&
              check_descriptor<qwen2_5_7b>());
static_assert(check_descriptor<qwen3_30b_a3b>() && check_descriptor<qwen3_235b_a22b>());
}  // namespace presets

// The fields that identify a shape, each as "field=config value (preset value)". Not compared:
// max_position_embeddings (base and instruct repos of one model differ) and rope_scaling (a
// user's choice of context extension, not part of the trained shape).
inline std::vector<std::string> mismatched_fields(const ModelDescriptor& d, const ModelConfig& c) {
  std::vector<std::string> out;
  auto cmp = [&](const char* field, const auto& config_value, const auto& preset_value) {
    if (config_value == preset_value) return;
    auto str = [](const auto& v) {
      using V = std::decay_t<decltype(v)>;
      if constexpr (std::is_same_v<V, bool>) return std::string(v ? "true" : "false");
      else if constexpr (std::is_arithmetic_v<V>) return json::dump(json::Value(v));
      else return std::string(v);
    };
    out.push_back(std::string(field) + "=" + str(config_value) + " (preset " + str(preset_value) + ")");
  };
  cmp("model_type", c.model_type, std::string(d.model_type));
  cmp("hidden_size", c.hidden_size, d.hidden_size);
  cmp("num_hidden_layers", c.num_hidden_layers, d.num_hidden_layers);
  cmp("num_attention_heads", c.num_attention_heads, d.num_attention_heads);
  cmp("num_key_value_heads", c.num_key_value_heads, d.num_key_value_heads);
  cmp("head_dim", c.head_dim, d.head_dim);
  cmp("intermediate_size", c.intermediate_size, d.intermediate_size);
  cmp("vocab_size", c.vocab_size, d.vocab_size);
  cmp("rms_norm_eps", c.rms_norm_eps, d.rms_norm_eps);
  cmp("rope_theta", c.rope_theta, d.rope_theta);
  cmp("tie_word_embeddings", c.tie_word_embeddings, d.tie_word_embeddings);
  cmp("attention_bias", c.attention_bias, d.attention_bias);
  const MoeConfig moe = c.moe.value_or(MoeConfig{});
  cmp("num_experts", moe.num_experts, d.num_experts);
  cmp("num_experts_per_tok", moe.num_experts_per_tok, d.num_experts_per_tok);
  cmp("moe_intermediate_size", moe.moe_intermediate_size, d.moe_intermediate_size);
  cmp("norm_topk_prob", moe.norm_topk_prob, d.norm_topk_prob);
  return out;
}

inline bool matches(const ModelDescriptor& d, const ModelConfig& c) { return mismatched_fields(d, c).empty(); }

// The preset this config is, or nullptr for a shape kylin has no preset for.
inline const ModelDescriptor* find_descriptor(const ModelConfig& c) {
  for (const auto* d : presets::all)
    if (matches(*d, c)) return d;
  return nullptr;
}

// The preset with the fewest mismatched fields (the first on ties).
inline const ModelDescriptor& closest_descriptor(const ModelConfig& c) {
  const ModelDescriptor* best = presets::all.front();
  std::size_t best_n = SIZE_MAX;
  for (const auto* d : presets::all)
    if (auto n = mismatched_fields(*d, c).size(); n < best_n) best = d, best_n = n;
  return *best;
}

// "field=value (preset value), ..." for one preset; empty when it matches.
inline std::string describe_mismatch(const ModelDescriptor& d, const ModelConfig& c) {
  std::string s;
  for (const auto& f : mismatched_fields(d, c)) {
    if (!s.empty()) s += ", ";
    s += f;
  }
  return s;
}

// One line for `kylin inspect`: the matched preset's name, or why none matched.
inline std::string describe_preset_match(const ModelConfig& c) {
  std::string s;
  if (const auto* d = find_descriptor(c)) return s.append("preset ").append(d->name);
  const auto& closest = closest_descriptor(c);
  s.append("no preset matched (closest: ").append(closest.name).append("; differs in: ");
  return s.append(describe_mismatch(closest, c)).append(")");
}

}  // namespace kylin
