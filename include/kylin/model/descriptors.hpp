// Compile-time descriptors of the published dense Qwen3 / Qwen2.5 shapes: field names as in
// config.json, derived sizes as constexpr members, every invariant a static_assert per preset.
// Decision: a descriptor identifies a checkpoint and is checked statically; it never gates
// loading. The model runs on the runtime sizes of ModelConfig, so an unknown shape still loads
// through that generic path and `kylin inspect` reports "no preset matched (closest: X; differs
// in: field=value (preset value), ...)".
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kylin/io/config.hpp"

namespace kylin {

struct ModelDescriptor {
  std::string_view name;        // the Hugging Face repo name, e.g. "Qwen3-0.6B"
  std::string_view model_type;  // "qwen3" | "qwen2"
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

  constexpr std::int64_t q_dim() const { return num_attention_heads * head_dim; }    // q_proj rows
  constexpr std::int64_t kv_dim() const { return num_key_value_heads * head_dim; }  // k_proj/v_proj rows
  constexpr std::int64_t n_groups() const { return num_attention_heads / num_key_value_heads; }
  constexpr bool has_qk_norm() const { return model_type == "qwen3"; }

  // q/k/v/o projections, their biases (Qwen2) and the per-head q/k RMSNorm weights (Qwen3).
  constexpr std::int64_t params_attention() const {
    std::int64_t n = hidden_size * q_dim() + 2 * hidden_size * kv_dim() + q_dim() * hidden_size;
    if (attention_bias) n += q_dim() + 2 * kv_dim();
    if (has_qk_norm()) n += 2 * head_dim;
    return n;
  }
  constexpr std::int64_t params_mlp() const { return 3 * hidden_size * intermediate_size; }  // gate, up, down
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
  static_assert(D.model_type == "qwen3" || D.model_type == "qwen2", "model_type must be \"qwen3\" or \"qwen2\"");
  static_assert(D.hidden_size > 0 && D.num_hidden_layers > 0 && D.intermediate_size > 0 && D.vocab_size > 0,
                "sizes must be positive");
  static_assert(D.num_attention_heads > 0 && D.num_key_value_heads > 0 && D.head_dim > 0, "head counts must be positive");
  static_assert(D.num_attention_heads % D.num_key_value_heads == 0,
                "num_attention_heads must be a multiple of num_key_value_heads (whole GQA groups)");
  static_assert(D.head_dim % 2 == 0, "head_dim must be even: RoPE rotates pairs of dimensions");
  static_assert(D.model_type != "qwen2" || D.q_dim() == D.hidden_size,
                "Qwen2 has no head_dim field: head_dim must be hidden_size / num_attention_heads");
  static_assert(D.model_type != "qwen2" || D.attention_bias, "Qwen2 checkpoints carry q/k/v biases");
  static_assert(D.model_type != "qwen3" || !D.attention_bias, "Qwen3 checkpoints have no attention bias");
  static_assert(D.rms_norm_eps > 0 && D.rope_theta > 0, "rms_norm_eps and rope_theta must be positive");
  static_assert(D.max_position_embeddings > 0, "max_position_embeddings must be positive");
  static_assert(detail::relative_gap(static_cast<double>(D.params_total()), D.published_params_b * 1e9) < 0.03,
                "derived parameter count is more than 3% off the model card's total");
  return true;
}

namespace presets {
// Sources: the config.json of each official repo, seen through copies indexed by the search tools
// (field values identical to the official file unless noted). published_params_b: model cards.

// Qwen/Qwen3-0.6B: TensorStack/TextEncoder Qwen-3-06B/config.json (verbatim copy, transformers 4.51.0),
// also quoted as "huggingface.co/Qwen/Qwen3-0.6B/raw/main/config.json" in a code comment. Card: 0.6B.
inline constexpr ModelDescriptor qwen3_0_6b{"Qwen3-0.6B", "qwen3", 1024, 28, 16, 8, 128, 3072, 151936, 40960,
                                            1e-6, 1000000.0, true, false, 0.6};
// Qwen/Qwen3-1.7B: a planner's table "Qwen/Qwen3-1.7B (config.json, fields the planner reads)" gives
// hidden 2048, inter 6144, 28 layers, 16/8 heads, head_dim 128, tied, 40960. rms_norm_eps and rope_theta
// were not in that excerpt: taken as the family's 1e-6 / 1e6 (unverified for this size). Card: 1.7B.
inline constexpr ModelDescriptor qwen3_1_7b{"Qwen3-1.7B", "qwen3", 2048, 28, 16, 8, 128, 6144, 151936, 40960,
                                            1e-6, 1000000.0, true, false, 1.7};
// Qwen/Qwen3-4B: MultiRL/qwen3_4b_instruct_sft/config.json (a fine-tune keeping the base config) and
// a keras_hub Qwen3Backbone export; 2560 / 36 / 32 / 8 / 9728, tied. Card: 4.0B.
inline constexpr ModelDescriptor qwen3_4b{"Qwen3-4B", "qwen3", 2560, 36, 32, 8, 128, 9728, 151936, 40960,
                                          1e-6, 1000000.0, true, false, 4.0};
// Qwen/Qwen3-8B: HF commit "Copy config.json from Qwen/Qwen3-8B" (thejaminator/qwen-hook-layer-9). Card: 8.2B.
inline constexpr ModelDescriptor qwen3_8b{"Qwen3-8B", "qwen3", 4096, 36, 32, 8, 128, 12288, 151936, 40960,
                                          1e-6, 1000000.0, false, false, 8.2};
// Qwen/Qwen3-14B: hidden 5120 / inter 17408 / head_dim 128 / untied from SF-Foundation/FlashTopic-14B-FP8
// config.json (a Qwen3-14B derivative); 40 layers, 40/8 heads, vocab 151936 from a "Qwen/Qwen3-14B" table
// in a roofline script. Not seen as one verbatim official file. Card: 14.8B.
inline constexpr ModelDescriptor qwen3_14b{"Qwen3-14B", "qwen3", 5120, 40, 40, 8, 128, 17408, 151936, 40960,
                                           1e-6, 1000000.0, false, false, 14.8};
// Qwen/Qwen3-32B: ronnywebdevs1/d-m-1/config.json (verbatim copy, transformers 4.51.0) and a verl doc
// quoting the official file with only num_hidden_layers edited. Card: 32.8B.
inline constexpr ModelDescriptor qwen3_32b{"Qwen3-32B", "qwen3", 5120, 64, 64, 8, 128, 25600, 151936, 40960,
                                           1e-6, 1000000.0, false, false, 32.8};

// Qwen2.5: max_position_embeddings is the Instruct repos' 32768 (some base repos say 131072).
// Qwen/Qwen2.5-0.5B: a "# Qwen/Qwen2.5-0.5B / model config" dump (896 / 4864 / 24 / 14 / 2, tied).
// Card (Qwen2.5-0.5B-Instruct): 0.49B.
inline constexpr ModelDescriptor qwen2_5_0_5b{"Qwen2.5-0.5B", "qwen2", 896, 24, 14, 2, 64, 4864, 151936, 32768,
                                              1e-6, 1000000.0, true, true, 0.49};
// Qwen/Qwen2.5-1.5B-Instruct: onnx-community/Qwen2.5-1.5B-Instruct/config.json (Xenova's copy). Card: 1.54B.
inline constexpr ModelDescriptor qwen2_5_1_5b{"Qwen2.5-1.5B", "qwen2", 1536, 28, 12, 2, 128, 8960, 151936, 32768,
                                              1e-6, 1000000.0, true, true, 1.54};
// Qwen/Qwen2.5-3B-Instruct: osllmai-community/Qwen2.5-3B-Instruct and hsuwill000/Qwen2.5-3B-Instruct-openvino
// config.json ("_name_or_path": "Qwen/Qwen2.5-3B-Instruct"). Card: 3.09B.
inline constexpr ModelDescriptor qwen2_5_3b{"Qwen2.5-3B", "qwen2", 2048, 36, 16, 2, 128, 11008, 151936, 32768,
                                            1e-6, 1000000.0, true, true, 3.09};
// Qwen/Qwen2.5-7B-Instruct: osllmai-community/Qwen2.5-7B-Instruct/config.json; vocab 152064, untied. Card: 7.61B.
inline constexpr ModelDescriptor qwen2_5_7b{"Qwen2.5-7B", "qwen2", 3584, 28, 28, 4, 128, 18944, 152064, 32768,
                                            1e-6, 1000000.0, false, true, 7.61};

inline constexpr std::array<const ModelDescriptor*, 10> all = {&qwen3_0_6b, &qwen3_1_7b, &qwen3_4b,    &qwen3_8b,
                                                               &qwen3_14b,  &qwen3_32b,  &qwen2_5_0_5b, &qwen2_5_1_5b,
                                                               &qwen2_5_3b, &qwen2_5_7b};

static_assert(check_descriptor<qwen3_0_6b>() && check_descriptor<qwen3_1_7b>() && check_descriptor<qwen3_4b>() &&
              check_descriptor<qwen3_8b>() && check_descriptor<qwen3_14b>() && check_descriptor<qwen3_32b>());
static_assert(check_descriptor<qwen2_5_0_5b>() && check_descriptor<qwen2_5_1_5b>() && check_descriptor<qwen2_5_3b>() &&
              check_descriptor<qwen2_5_7b>());
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
