// One place per config.json model_type: what separates Qwen3, Qwen3-MoE, Qwen2, Qwen3.5 (dense, MoE) and
// Qwen3-Next (q/k norm, q/k/v bias, expert MLPs, hybrid Gated DeltaNet stacks, the component types, config and
// tensor layout rules, end-of-turn tokens). Light on purpose: io/config.hpp reads it, so the component types are
// only declared here; model/components.hpp and model/hybrid_components.hpp define them.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "kylin/core/error.hpp"

namespace kylin {

enum class QKNorm { none, per_head };  // Qwen3 normalises each head's q and k before RoPE
enum class QKVBias { none, qkv };      // Qwen2 adds biases to the q/k/v projections
enum class MLPKind { dense, experts };  // Qwen3-MoE: a routed mixture of SwiGLU experts in (most) layers
// attention: every layer is grouped-query attention. hybrid (Qwen3.5, Qwen3-Next): config.json's layer_types
// (else every full_attention_interval-th layer) says which layers are gated attention; the others are Gated
// DeltaNet linear attention, which carries a recurrent state per sequence instead of keys and values.
enum class MixerKind { attention, hybrid };
// How an RMSNorm scales: by its weight, or by 1 + weight (Qwen3.5 and Qwen3-Next store zero-centred norm
// weights; the Gated DeltaNet's output norm is the exception, a plain weight).
enum class NormScale { weight, one_plus_weight };
// How a Gated DeltaNet layer stores its input projections: separate in_proj_qkv / in_proj_z / in_proj_b /
// in_proj_a (Qwen3.5), or fused in_proj_qkvz / in_proj_ba grouped per key head (Qwen3-Next).
enum class LinearProjections { none, separate, fused_per_key_head };
// How a sparse layer stores its experts: mlp.experts.{e}.{gate,up,down}_proj.weight, or fused
// mlp.experts.gate_up_proj [E, 2I, H] and mlp.experts.down_proj [E, H, I] (Qwen3.5-MoE).
enum class ExpertStorage { per_expert, fused };
// Which layers are sparse: by mlp_only_layers / decoder_sparse_step (norm_topk_prob read), or every layer
// with the top-k weights always renormalised (Qwen3.5-MoE's code reads neither field).
enum class SparseLayers { by_config, every_layer };

// Defined in model/components.hpp.
struct RMSNorm;
struct SwiGLU;
struct SparseMoE;
template <QKNorm qk_norm, QKVBias bias>
struct GroupedQueryAttention;
struct HybridMixer;

// The data of one architecture, usable at compile time (descriptors) and at run time (configs).
struct ArchInfo {
  std::string_view name;          // config.json "model_type"
  std::string_view architecture;  // config.json "architectures"[0], the transformers class
  QKNorm qk_norm;
  QKVBias qkv_bias;
  MLPKind mlp = MLPKind::dense;  // experts: config.json's num_experts etc. are read and required
  bool head_dim_in_config;  // false: config.json has no head_dim; it is hidden_size / num_attention_heads
  // Chat end-of-turn tokens: generation stops at either when the tokenizer defines it.
  std::array<std::string_view, 2> end_of_turn;
  // The token that opens a chat turn: where a hybrid model's prompt keeps recurrent-state snapshots, since the
  // next request of a conversation shares the prompt up to its last turns (generate/generation_run.hpp).
  std::string_view turn_start = "<|im_start|>";
  MixerKind mixer = MixerKind::attention;
  NormScale norm_scale = NormScale::weight;
  bool attention_output_gate = false;  // q_proj's rows hold [query hd | gate hd] per head; output *= sigmoid(gate)
  LinearProjections linear_projections = LinearProjections::none;
  ExpertStorage expert_storage = ExpertStorage::per_expert;
  SparseLayers sparse_layers = SparseLayers::by_config;
  bool shared_expert = false;            // sparse layers add mlp.shared_expert scaled by sigmoid(mlp.shared_expert_gate x)
  std::string_view text_config = "";     // the config.json object holding the text model's fields ("": the top level)
  std::string_view tensor_prefix = "model.";  // of every text-model tensor but lm_head.weight
  std::int64_t default_head_dim = 0;     // head_dim when config.json has none (0: hidden_size / num_attention_heads)
  double default_partial_rotary_factor = 1.0;  // share of head_dim RoPE rotates when config.json does not say
  // Prefixes of checkpoint tensors the text forward does not read (Qwen3.5's vision tower and MTP head): never
  // bound, never paged in, reported apart from unexpected tensors.
  std::array<std::string_view, 2> skipped_tensors = {};
  std::string_view vision_config = "";  // the config.json object of the vision tower (vision/tower.hpp), "": none

  constexpr bool has_qk_norm() const { return qk_norm == QKNorm::per_head; }
  constexpr bool has_qkv_bias() const { return qkv_bias == QKVBias::qkv; }
  constexpr bool has_experts() const { return mlp == MLPKind::experts; }
  constexpr bool is_hybrid() const { return mixer == MixerKind::hybrid; }
  // config.json's attention_bias when absent (Qwen2's config class has no such field).
  constexpr bool default_attention_bias() const { return has_qkv_bias(); }
};

// An Arch: its ArchInfo plus the component types its Transformer<Norm, Attention, MLP> is made of.
struct Qwen3Arch {
  static constexpr ArchInfo info{.name = "qwen3",
                                 .architecture = "Qwen3ForCausalLM",
                                 .qk_norm = QKNorm::per_head,
                                 .qkv_bias = QKVBias::none,
                                 .head_dim_in_config = true,
                                 .end_of_turn = {"<|im_end|>", "<|endoftext|>"}};
  static constexpr std::string_view name = info.name;
  using Norm = RMSNorm;
  using Attention = GroupedQueryAttention<info.qk_norm, info.qkv_bias>;
  using MLP = SwiGLU;
};

// Qwen3 attention; the MLP of a layer is either sparse (router + experts) or a dense SwiGLU, as
// mlp_only_layers and decoder_sparse_step say (ModelConfig::is_sparse_layer).
struct Qwen3MoeArch {
  static constexpr ArchInfo info{.name = "qwen3_moe",
                                 .architecture = "Qwen3MoeForCausalLM",
                                 .qk_norm = QKNorm::per_head,
                                 .qkv_bias = QKVBias::none,
                                 .mlp = MLPKind::experts,
                                 .head_dim_in_config = true,
                                 .end_of_turn = {"<|im_end|>", "<|endoftext|>"}};
  static constexpr std::string_view name = info.name;
  using Norm = RMSNorm;
  using Attention = GroupedQueryAttention<info.qk_norm, info.qkv_bias>;
  using MLP = SparseMoE;
};

struct Qwen2Arch {
  static constexpr ArchInfo info{.name = "qwen2",
                                 .architecture = "Qwen2ForCausalLM",
                                 .qk_norm = QKNorm::none,
                                 .qkv_bias = QKVBias::qkv,
                                 .head_dim_in_config = false,
                                 .end_of_turn = {"<|im_end|>", "<|endoftext|>"}};
  static constexpr std::string_view name = info.name;
  using Norm = RMSNorm;
  using Attention = GroupedQueryAttention<info.qk_norm, info.qkv_bias>;
  using MLP = SwiGLU;
};

// Qwen3.5 / Qwen3.6 dense (Qwen3_5ForConditionalGeneration): a hybrid stack of gated attention (partial RoPE,
// q/k norms) and Gated DeltaNet layers, zero-centred norms, a SwiGLU MLP; the text model nested in text_config
// and under model.language_model. beside a vision tower and an MTP head (transformers models/qwen3_5/).
struct Qwen35Arch {
  static constexpr ArchInfo info{.name = "qwen3_5",
                                 .architecture = "Qwen3_5ForConditionalGeneration",
                                 .qk_norm = QKNorm::per_head,
                                 .qkv_bias = QKVBias::none,
                                 .head_dim_in_config = true,
                                 .end_of_turn = {"<|im_end|>", "<|endoftext|>"},
                                 .mixer = MixerKind::hybrid,
                                 .norm_scale = NormScale::one_plus_weight,
                                 .attention_output_gate = true,
                                 .linear_projections = LinearProjections::separate,
                                 .text_config = "text_config",
                                 .tensor_prefix = "model.language_model.",
                                 .default_head_dim = 256,
                                 .default_partial_rotary_factor = 0.25,
                                 .skipped_tensors = {"model.visual.", "mtp."},
                                 .vision_config = "vision_config"};
  static constexpr std::string_view name = info.name;
  using Norm = RMSNorm;
  using Attention = HybridMixer;
  using MLP = SwiGLU;
};

// Qwen3.5 / Qwen3.6 MoE (Qwen3_5MoeForConditionalGeneration): as Qwen3.5, every MLP a routed mixture of fused
// experts plus a gated shared expert (transformers models/qwen3_5_moe/).
struct Qwen35MoeArch {
  static constexpr ArchInfo info{.name = "qwen3_5_moe",
                                 .architecture = "Qwen3_5MoeForConditionalGeneration",
                                 .qk_norm = QKNorm::per_head,
                                 .qkv_bias = QKVBias::none,
                                 .mlp = MLPKind::experts,
                                 .head_dim_in_config = true,
                                 .end_of_turn = {"<|im_end|>", "<|endoftext|>"},
                                 .mixer = MixerKind::hybrid,
                                 .norm_scale = NormScale::one_plus_weight,
                                 .attention_output_gate = true,
                                 .linear_projections = LinearProjections::separate,
                                 .expert_storage = ExpertStorage::fused,
                                 .sparse_layers = SparseLayers::every_layer,
                                 .shared_expert = true,
                                 .text_config = "text_config",
                                 .tensor_prefix = "model.language_model.",
                                 .default_head_dim = 256,
                                 .default_partial_rotary_factor = 0.25,
                                 .skipped_tensors = {"model.visual.", "mtp."},
                                 .vision_config = "vision_config"};
  static constexpr std::string_view name = info.name;
  using Norm = RMSNorm;
  using Attention = HybridMixer;
  using MLP = SparseMoE;
};

// Qwen3-Next (Qwen3NextForCausalLM): the hybrid stack with a flat config, fused per-key-head DeltaNet
// projections, and Qwen3-MoE's layer rule with a gated shared expert (transformers models/qwen3_next/).
struct Qwen3NextArch {
  static constexpr ArchInfo info{.name = "qwen3_next",
                                 .architecture = "Qwen3NextForCausalLM",
                                 .qk_norm = QKNorm::per_head,
                                 .qkv_bias = QKVBias::none,
                                 .mlp = MLPKind::experts,
                                 .head_dim_in_config = true,
                                 .end_of_turn = {"<|im_end|>", "<|endoftext|>"},
                                 .mixer = MixerKind::hybrid,
                                 .norm_scale = NormScale::one_plus_weight,
                                 .attention_output_gate = true,
                                 .linear_projections = LinearProjections::fused_per_key_head,
                                 .shared_expert = true,
                                 .default_head_dim = 256,
                                 .default_partial_rotary_factor = 0.25,
                                 .skipped_tensors = {"mtp.", ""}};
  static constexpr std::string_view name = info.name;
  using Norm = RMSNorm;
  using Attention = HybridMixer;
  using MLP = SparseMoE;
};

// Every supported architecture, in the order all_archs, visit_arch and BasicModel's alternatives follow: a new
// Arch is its struct above and one entry here.
template <class... A>
struct ArchList {};
using AllArchs = ArchList<Qwen3Arch, Qwen3MoeArch, Qwen2Arch, Qwen35Arch, Qwen35MoeArch, Qwen3NextArch>;

inline constexpr auto all_archs = []<class... A>(ArchList<A...>) { return std::array<ArchInfo, sizeof...(A)>{A::info...}; }(AllArchs{});

// The architecture of `model_type`, or nullptr when kylin does not run it.
constexpr const ArchInfo* find_arch(std::string_view model_type) {
  for (const ArchInfo& a : all_archs)
    if (a.name == model_type) return &a;
  return nullptr;
}

// "unsupported model_type "llama" (kylin runs "qwen3", "qwen3_moe", ... and "qwen3_next")"
inline std::string unsupported_model_type_message(std::string_view model_type) {
  std::string names;
  for (std::size_t i = 0; i < all_archs.size(); ++i) {
    if (i > 0) names += i + 1 == all_archs.size() ? " and " : ", ";
    names.append("\"").append(all_archs[i].name).append("\"");
  }
  return std::string("unsupported model_type \"").append(model_type).append("\" (kylin runs ").append(names).append(")");
}

// The architecture of `model_type`; a config error naming the supported types otherwise.
inline const ArchInfo& arch_info(std::string_view model_type) {
  if (const ArchInfo* a = find_arch(model_type)) return *a;
  throw Error(ErrorCategory::config, "model_type", unsupported_model_type_message(model_type));
}

namespace detail {
template <class Fn, class First, class... Rest>
decltype(auto) visit_arch_in(std::string_view model_type, Fn&& fn, ArchList<First, Rest...>) {
  if (model_type == First::name) return std::forward<Fn>(fn)(First{});
  if constexpr (sizeof...(Rest) > 0) return visit_arch_in(model_type, std::forward<Fn>(fn), ArchList<Rest...>{});
  else throw Error(ErrorCategory::config, "model_type", unsupported_model_type_message(model_type));
}
}  // namespace detail

// Calls fn(Arch{}) for the Arch of model_type (Qwen3Arch, ..., Qwen3NextArch), so the caller instantiates its
// code for the one architecture; every call of fn must return the same type.
template <class Fn>
decltype(auto) visit_arch(std::string_view model_type, Fn&& fn) {
  return detail::visit_arch_in(model_type, std::forward<Fn>(fn), AllArchs{});
}

}  // namespace kylin
