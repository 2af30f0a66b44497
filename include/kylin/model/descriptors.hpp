// Compile-time descriptors of the published Qwen3 (dense and MoE) / Qwen2.5 / Qwen3.5 and Qwen3.6 (hybrid,
// dense and MoE) shapes: field names as in config.json, derived sizes as constexpr members, every invariant a
// static_assert per preset.
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
  // archs with experts only (every layer sparse in the published models); 0 for dense models
  std::int64_t num_experts = 0;
  std::int64_t num_experts_per_tok = 0;
  std::int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  double published_active_params_b = 0;  // activated parameters per token on the model card (0: not compared)
  // hybrid archs (Qwen3.5) only: layer i is gated attention iff (i + 1) % full_attention_interval == 0, the
  // others Gated DeltaNet; 0 for the attention-only archs
  std::int64_t full_attention_interval = 0;
  std::int64_t linear_num_key_heads = 0;
  std::int64_t linear_num_value_heads = 0;
  std::int64_t linear_key_head_dim = 0;
  std::int64_t linear_value_head_dim = 0;
  std::int64_t linear_conv_kernel_dim = 0;
  double partial_rotary_factor = 1.0;
  std::int64_t shared_expert_intermediate_size = 0;  // MoE with a gated shared expert
  // The card's total counts the vision tower and the MTP head too, which these text-model counts leave out.
  bool published_counts_vision = false;

  constexpr std::int64_t q_dim() const { return num_attention_heads * head_dim; }    // q_proj rows
  constexpr std::int64_t kv_dim() const { return num_key_value_heads * head_dim; }  // k_proj/v_proj rows
  constexpr std::int64_t n_groups() const { return num_attention_heads / num_key_value_heads; }
  constexpr const ArchInfo& arch() const { return *find_arch(model_type); }  // check_descriptor: non-null
  constexpr bool has_qk_norm() const { return arch().has_qk_norm(); }

  // q/k/v/o projections (gated attention's q_proj twice as wide: [query | gate] per head), their biases
  // (QKVBias::qkv) and the per-head q/k RMSNorm weights (QKNorm::per_head).
  constexpr std::int64_t params_attention() const {
    std::int64_t n = hidden_size * q_dim() * (arch().attention_output_gate ? 2 : 1) + 2 * hidden_size * kv_dim() + q_dim() * hidden_size;
    if (attention_bias) n += q_dim() + 2 * kv_dim();
    if (has_qk_norm()) n += 2 * head_dim;
    return n;
  }
  constexpr bool is_hybrid() const { return arch().is_hybrid(); }
  constexpr std::int64_t attention_layers() const { return is_hybrid() ? num_hidden_layers / full_attention_interval : num_hidden_layers; }
  constexpr std::int64_t linear_layers() const { return num_hidden_layers - attention_layers(); }
  // A Gated DeltaNet layer: in_proj_qkv, in_proj_z, in_proj_b/a, the conv taps, A_log and dt_bias, the output
  // norm and out_proj.
  constexpr std::int64_t params_linear_attention() const {
    const std::int64_t k = linear_num_key_heads * linear_key_head_dim, v = linear_num_value_heads * linear_value_head_dim;
    return hidden_size * (2 * k + v) + hidden_size * v + 2 * hidden_size * linear_num_value_heads +
           (2 * k + v) * linear_conv_kernel_dim + 2 * linear_num_value_heads + linear_value_head_dim + v * hidden_size;
  }
  constexpr bool has_experts() const { return arch().has_experts(); }
  // The gated shared expert of a sparse layer: gate, up, down and its one-row gate.
  constexpr std::int64_t params_shared_expert() const {
    return shared_expert_intermediate_size > 0 ? 3 * hidden_size * shared_expert_intermediate_size + hidden_size : 0;
  }
  // gate, up, down; a sparse layer: every expert's plus the router and the shared expert
  constexpr std::int64_t params_mlp() const {
    return has_experts() ? num_experts * (3 * hidden_size * moe_intermediate_size + hidden_size) + params_shared_expert()
                         : 3 * hidden_size * intermediate_size;
  }
  // What one token runs through: the router, k experts and the shared expert of a sparse layer.
  constexpr std::int64_t params_mlp_active() const {
    return has_experts() ? num_experts * hidden_size + num_experts_per_tok * 3 * hidden_size * moe_intermediate_size + params_shared_expert()
                         : params_mlp();
  }
  // The layers' mixers: attention in every layer, or gated attention in some and Gated DeltaNet in the rest.
  constexpr std::int64_t params_mixers() const {
    return attention_layers() * params_attention() + linear_layers() * (is_hybrid() ? params_linear_attention() : 0);
  }
  constexpr std::int64_t params_active() const {
    return params_mixers() + num_hidden_layers * (params_mlp_active() + 2 * hidden_size) + hidden_size +
           params_embedding() * (tie_word_embeddings ? 1 : 2);
  }
  constexpr std::int64_t params_embedding() const { return vocab_size * hidden_size; }
  // every layer's mixer, MLP and input/post-attention norms, and the final norm
  constexpr std::int64_t params_non_embedding() const { return params_mixers() + num_hidden_layers * (params_mlp() + 2 * hidden_size) + hidden_size; }
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
  static_assert(D.hidden_size > 0 && D.num_hidden_layers > 0 && D.vocab_size > 0 &&
                    (D.intermediate_size > 0 || D.arch().sparse_layers == SparseLayers::every_layer),
                "sizes must be positive (a dense width unless every layer is sparse)");
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
  static_assert(detail::relative_gap(static_cast<double>(D.params_total()), D.published_params_b * 1e9) < (D.published_counts_vision ? 0.1 : 0.03),
                "derived parameter count is more than 3% off the model card's total (10% where the card counts a vision tower)");
  static_assert(D.is_hybrid() == (D.full_attention_interval > 0), "full_attention_interval is set exactly for a hybrid arch");
  static_assert(!D.is_hybrid() || (D.linear_num_key_heads > 0 && D.linear_num_value_heads % D.linear_num_key_heads == 0 &&
                                   D.linear_key_head_dim > 0 && D.linear_value_head_dim > 0 && D.linear_conv_kernel_dim > 0),
                "a hybrid preset's Gated DeltaNet shapes are positive, value heads a multiple of key heads");
  static_assert(static_cast<std::int64_t>(D.head_dim * D.partial_rotary_factor) % 2 == 0, "RoPE rotates an even number of dims");
  static_assert(D.arch().shared_expert == (D.shared_expert_intermediate_size > 0), "a shared expert's width is set exactly for an arch with one");
  static_assert(D.has_experts() == (D.num_experts > 0), "num_experts is set exactly for an arch with experts");
  static_assert(!D.has_experts() || (D.num_experts_per_tok >= 1 && D.num_experts_per_tok <= D.num_experts && D.moe_intermediate_size > 0),
                "an MoE preset routes each token to 1..num_experts experts of positive width");
  static_assert(!D.has_experts() || D.published_active_params_b == 0 ||
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

// Qwen3.5 / Qwen3.6 (the text model of each checkpoint's text_config; docs/PRESETS.md gives the sources). Every
// size shares head_dim 256 with 25% of it rotated (theta 1e7), 16 linear key heads of 128, value heads of 128,
// conv kernel 4 and one gated attention layer in four. Qwen3.6-27B and -35B-A3B have the shapes of Qwen3.5's.
inline constexpr ModelDescriptor qwen3_5_0_8b{
    .name = "Qwen3.5-0.8B", .model_type = Qwen35Arch::name,
    .hidden_size = 1024, .num_hidden_layers = 24, .num_attention_heads = 8, .num_key_value_heads = 2,
    .head_dim = 256, .intermediate_size = 3584, .vocab_size = 248320, .max_position_embeddings = 262144,
    .rms_norm_eps = 1e-6, .rope_theta = 10000000.0, .tie_word_embeddings = true, .attention_bias = false,
    .published_params_b = 0.8, .full_attention_interval = 4, .linear_num_key_heads = 16, .linear_num_value_heads = 16,
    .linear_key_head_dim = 128, .linear_value_head_dim = 128, .linear_conv_kernel_dim = 4, .partial_rotary_factor = 0.25,
    .published_counts_vision = true};
inline constexpr ModelDescriptor qwen3_5_9b{
    .name = "Qwen3.5-9B", .model_type = Qwen35Arch::name,
    .hidden_size = 4096, .num_hidden_layers = 32, .num_attention_heads = 16, .num_key_value_heads = 4,
    .head_dim = 256, .intermediate_size = 12288, .vocab_size = 248320, .max_position_embeddings = 262144,
    .rms_norm_eps = 1e-6, .rope_theta = 10000000.0, .tie_word_embeddings = false, .attention_bias = false,
    .published_params_b = 9.0, .full_attention_interval = 4, .linear_num_key_heads = 16, .linear_num_value_heads = 32,
    .linear_key_head_dim = 128, .linear_value_head_dim = 128, .linear_conv_kernel_dim = 4, .partial_rotary_factor = 0.25,
    .published_counts_vision = true};
inline constexpr ModelDescriptor qwen3_5_27b{
    .name = "Qwen3.5-27B", .model_type = Qwen35Arch::name,
    .hidden_size = 5120, .num_hidden_layers = 64, .num_attention_heads = 24, .num_key_value_heads = 4,
    .head_dim = 256, .intermediate_size = 17408, .vocab_size = 248320, .max_position_embeddings = 262144,
    .rms_norm_eps = 1e-6, .rope_theta = 10000000.0, .tie_word_embeddings = false, .attention_bias = false,
    .published_params_b = 27.0, .full_attention_interval = 4, .linear_num_key_heads = 16, .linear_num_value_heads = 48,
    .linear_key_head_dim = 128, .linear_value_head_dim = 128, .linear_conv_kernel_dim = 4, .partial_rotary_factor = 0.25,
    .published_counts_vision = true};
// The card's "3B activated" is the name's rounding: these counts give 3.46B (2.95B without the input embedding).
inline constexpr ModelDescriptor qwen3_6_35b_a3b{
    .name = "Qwen3.6-35B-A3B", .model_type = Qwen35MoeArch::name,
    .hidden_size = 2048, .num_hidden_layers = 40, .num_attention_heads = 16, .num_key_value_heads = 2,
    .head_dim = 256, .intermediate_size = 0, .vocab_size = 248320, .max_position_embeddings = 262144,
    .rms_norm_eps = 1e-6, .rope_theta = 10000000.0, .tie_word_embeddings = false, .attention_bias = false,
    .published_params_b = 35.0, .num_experts = 256, .num_experts_per_tok = 8, .moe_intermediate_size = 512, .norm_topk_prob = true,
    .published_active_params_b = 0, .full_attention_interval = 4, .linear_num_key_heads = 16, .linear_num_value_heads = 32,
    .linear_key_head_dim = 128, .linear_value_head_dim = 128, .linear_conv_kernel_dim = 4, .partial_rotary_factor = 0.25,
    .shared_expert_intermediate_size = 512, .published_counts_vision = true};
inline constexpr ModelDescriptor qwen3_5_397b_a17b{
    .name = "Qwen3.5-397B-A17B", .model_type = Qwen35MoeArch::name,
    .hidden_size = 4096, .num_hidden_layers = 60, .num_attention_heads = 32, .num_key_value_heads = 2,
    .head_dim = 256, .intermediate_size = 0, .vocab_size = 248320, .max_position_embeddings = 262144,
    .rms_norm_eps = 1e-6, .rope_theta = 10000000.0, .tie_word_embeddings = false, .attention_bias = false,
    .published_params_b = 397.0, .num_experts = 512, .num_experts_per_tok = 10, .moe_intermediate_size = 1024, .norm_topk_prob = true,
    .published_active_params_b = 17.0, .full_attention_interval = 4, .linear_num_key_heads = 16, .linear_num_value_heads = 64,
    .linear_key_head_dim = 128, .linear_value_head_dim = 128, .linear_conv_kernel_dim = 4, .partial_rotary_factor = 0.25,
    .shared_expert_intermediate_size = 1024, .published_counts_vision = true};

inline constexpr std::array<const ModelDescriptor*, 17> all = {
    &qwen3_0_6b,   &qwen3_1_7b,   &qwen3_4b,    &qwen3_8b,      &qwen3_14b,       &qwen3_32b,    &qwen2_5_0_5b,
    &qwen2_5_1_5b, &qwen2_5_3b,   &qwen2_5_7b,  &qwen3_30b_a3b, &qwen3_235b_a22b, &qwen3_5_0_8b, &qwen3_5_9b,
    &qwen3_5_27b,  &qwen3_6_35b_a3b, &qwen3_5_397b_a17b};

static_assert(check_descriptor<qwen3_0_6b>() && check_descriptor<qwen3_1_7b>() && check_descriptor<qwen3_4b>() &&
              check_descriptor<qwen3_8b>() && check_descriptor<qwen3_14b>() && check_descriptor<qwen3_32b>());
static_assert(check_descriptor<qwen2_5_0_5b>() && check_descriptor<qwen2_5_1_5b>() && check_descriptor<qwen2_5_3b>() &&
              check_descriptor<qwen2_5_7b>());
static_assert(check_descriptor<qwen3_30b_a3b>() && check_descriptor<qwen3_235b_a22b>());
static_assert(check_descriptor<qwen3_5_0_8b>() && check_descriptor<qwen3_5_9b>() && check_descriptor<qwen3_5_27b>() &&
              check_descriptor<qwen3_6_35b_a3b>() && check_descriptor<qwen3_5_397b_a17b>());
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
  cmp("shared_expert_intermediate_size", moe.shared_expert_intermediate_size, d.shared_expert_intermediate_size);
  // the hybrid stack: its layer pattern, Gated DeltaNet shapes and rotated share
  const LinearAttentionConfig none{0, 0, 0, 0, 0};
  const LinearAttentionConfig g = c.linear.value_or(none);
  std::int64_t interval = 0;  // the config's layer pattern as an interval, when it is one
  if (c.linear) {
    for (std::int64_t i = 1; i <= c.num_hidden_layers && interval == 0; ++i) interval = c.is_linear_layer(i - 1) ? 0 : i;
    for (std::int64_t l = 0; l < c.num_hidden_layers && interval > 0; ++l)
      if (c.is_linear_layer(l) == ((l + 1) % interval == 0)) interval = -1;
  }
  cmp("full_attention_interval", interval, d.full_attention_interval);
  cmp("linear_num_key_heads", g.linear_num_key_heads, d.linear_num_key_heads);
  cmp("linear_num_value_heads", g.linear_num_value_heads, d.linear_num_value_heads);
  cmp("linear_key_head_dim", g.linear_key_head_dim, d.linear_key_head_dim);
  cmp("linear_value_head_dim", g.linear_value_head_dim, d.linear_value_head_dim);
  cmp("linear_conv_kernel_dim", g.linear_conv_kernel_dim, d.linear_conv_kernel_dim);
  cmp("rotary_dim", c.rotary_dim > 0 ? c.rotary_dim : c.head_dim, static_cast<std::int64_t>(static_cast<double>(d.head_dim) * d.partial_rotary_factor));
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
