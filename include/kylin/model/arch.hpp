// One place per config.json model_type: what separates Qwen3, Qwen3-MoE and Qwen2 (q/k norm,
// q/k/v bias, sparse expert MLPs, the component types, config rules, end-of-turn tokens). Light on purpose: io/config.hpp reads
// it, so the component types are only declared here; model/components.hpp defines them.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <utility>

#include "kylin/core/error.hpp"

namespace kylin {

enum class QKNorm { none, per_head };  // Qwen3 normalises each head's q and k before RoPE
enum class QKVBias { none, qkv };      // Qwen2 adds biases to the q/k/v projections
enum class MLPKind { dense, experts };  // Qwen3-MoE: a routed mixture of SwiGLU experts in (most) layers

// Defined in model/components.hpp.
struct RMSNorm;
struct SwiGLU;
struct SparseMoE;
template <QKNorm qk_norm, QKVBias bias>
struct GroupedQueryAttention;

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

  constexpr bool has_qk_norm() const { return qk_norm == QKNorm::per_head; }
  constexpr bool has_qkv_bias() const { return qkv_bias == QKVBias::qkv; }
  constexpr bool has_experts() const { return mlp == MLPKind::experts; }
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

// Every supported architecture; visit_arch and the lookups below follow this order.
inline constexpr std::array<ArchInfo, 3> all_archs = {Qwen3Arch::info, Qwen3MoeArch::info, Qwen2Arch::info};

// The architecture of `model_type`, or nullptr when kylin does not run it.
constexpr const ArchInfo* find_arch(std::string_view model_type) {
  for (const ArchInfo& a : all_archs)
    if (a.name == model_type) return &a;
  return nullptr;
}

// "unsupported model_type "llama" (kylin runs "qwen3", "qwen3_moe" and "qwen2")"
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

// Calls fn(Qwen3Arch{}), fn(Qwen3MoeArch{}) or fn(Qwen2Arch{}) by model_type, so the caller instantiates its code
// for the one architecture; every call of fn must return the same type.
template <class Fn>
decltype(auto) visit_arch(std::string_view model_type, Fn&& fn) {
  if (model_type == Qwen3Arch::name) return std::forward<Fn>(fn)(Qwen3Arch{});
  if (model_type == Qwen3MoeArch::name) return std::forward<Fn>(fn)(Qwen3MoeArch{});
  if (model_type == Qwen2Arch::name) return std::forward<Fn>(fn)(Qwen2Arch{});
  throw Error(ErrorCategory::config, "model_type", unsupported_model_type_message(model_type));
}
static_assert(all_archs.size() == 3, "visit_arch must dispatch every entry of all_archs");

}  // namespace kylin
