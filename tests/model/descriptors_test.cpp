// Model descriptors and architectures: the presets' derived sizes agree with the published model
// cards, a real config.json text identifies its preset, an unknown shape names the closest preset
// and why, and each model_type's Arch carries what differs between Qwen3 and Qwen2.
#include "kylin/model/descriptors.hpp"

#include <doctest/doctest.h>

#include <type_traits>

#include "kylin/model/arch.hpp"
#include "kylin/model/hybrid_components.hpp"

namespace {

// Qwen/Qwen3-0.6B's config.json as published (transformers 4.51.0).
constexpr const char* qwen3_0_6b_config = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
  "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
  "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
  "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936})";

// Qwen/Qwen2.5-7B-Instruct's config.json (no head_dim: hidden_size / heads).
constexpr const char* qwen2_5_7b_config = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 3584, "initializer_range": 0.02,
  "intermediate_size": 18944, "max_position_embeddings": 32768, "max_window_layers": 28,
  "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 152064})";

kylin::ModelConfig parse(const char* text) { return kylin::parse_model_config(kylin::json::parse(text)); }

}  // namespace

TEST_CASE("derived sizes are constexpr and follow config.json's definitions") {
  using kylin::presets::qwen3_0_6b;
  static_assert(qwen3_0_6b.q_dim() == 2048, "16 heads x 128");
  static_assert(qwen3_0_6b.kv_dim() == 1024, "8 kv heads x 128");
  static_assert(qwen3_0_6b.n_groups() == 2);
  static_assert(qwen3_0_6b.has_qk_norm());
  static_assert(!kylin::presets::qwen2_5_7b.has_qk_norm());
  static_assert(qwen3_0_6b.bytes_bf16() == 2 * qwen3_0_6b.params_total());
  CHECK(qwen3_0_6b.params_mlp() == 3 * 1024 * 3072);
  CHECK(qwen3_0_6b.params_embedding() == 151936LL * 1024);
}

TEST_CASE("every preset's parameter count is within 3% of its model card's total (embedding counted once if tied; 10% where the card counts a vision tower)") {
  for (const auto* d : kylin::presets::all) {
    CAPTURE(d->name);
    const double total = static_cast<double>(d->params_total());
    CHECK(total == doctest::Approx(d->published_params_b * 1e9).epsilon(d->published_counts_vision ? 0.1 : 0.03));
  }
  // the hybrid presets' text models, counted by hand: Qwen3.5-0.8B (tied) 18 Gated DeltaNet layers of 10,518,720, 6
  // gated attention layers of 7,340,544, 24 MLPs of 11,010,048 and norms; Qwen3.5-9B's 8.95B is what llama.cpp
  // reports for its GGUF
  constexpr auto& q08 = kylin::presets::qwen3_5_0_8b;
  CHECK(q08.params_linear_attention() == 1024 * 6144 + 1024 * 2048 + 2 * 1024 * 16 + 6144 * 4 + 2 * 16 + 128 + 2048 * 1024);
  CHECK(q08.params_attention() == 1024 * 4096 + 2 * 1024 * 512 + 2048 * 1024 + 2 * 256);
  CHECK(q08.attention_layers() == 6);
  CHECK(static_cast<double>(kylin::presets::qwen3_5_9b.params_total()) == doctest::Approx(8.95e9).epsilon(0.005));
  CHECK(static_cast<double>(kylin::presets::qwen3_5_397b_a17b.params_active()) == doctest::Approx(17e9).epsilon(0.05));
  // Model-card non-embedding counts, a check independent of the embedding term.
  CHECK(static_cast<double>(kylin::presets::qwen3_0_6b.params_non_embedding()) == doctest::Approx(0.44e9).epsilon(0.02));
  CHECK(static_cast<double>(kylin::presets::qwen3_8b.params_non_embedding()) == doctest::Approx(6.95e9).epsilon(0.02));
  CHECK(static_cast<double>(kylin::presets::qwen3_32b.params_non_embedding()) == doctest::Approx(31.2e9).epsilon(0.02));
  CHECK(static_cast<double>(kylin::presets::qwen2_5_0_5b.params_non_embedding()) == doctest::Approx(0.36e9).epsilon(0.02));
  CHECK(static_cast<double>(kylin::presets::qwen2_5_7b.params_non_embedding()) == doctest::Approx(6.53e9).epsilon(0.02));
  // Qwen2.5-7B per-layer numel from a published per-layer table of its linear weights (biases not
  // included there): attention 29,360,128 and MLP 203,685,888.
  constexpr auto& q7 = kylin::presets::qwen2_5_7b;
  CHECK(q7.params_attention() - (q7.q_dim() + 2 * q7.kv_dim()) == 29360128);
  CHECK(kylin::presets::qwen2_5_7b.params_mlp() == 203685888);
}

TEST_CASE("Qwen3-0.6B's published config.json parses and matches its preset, and no other") {
  const auto c = parse(qwen3_0_6b_config);
  CHECK(kylin::matches(kylin::presets::qwen3_0_6b, c));
  CHECK(kylin::find_descriptor(c) == &kylin::presets::qwen3_0_6b);
  for (const auto* d : kylin::presets::all)
    if (d != &kylin::presets::qwen3_0_6b) CHECK_FALSE(kylin::matches(*d, c));
  CHECK(kylin::describe_preset_match(c) == "preset Qwen3-0.6B");
  CHECK(kylin::describe_mismatch(kylin::presets::qwen3_0_6b, c).empty());
}

TEST_CASE("Qwen2.5-7B-Instruct's config.json matches its preset despite a different max_position_embeddings") {
  auto c = parse(qwen2_5_7b_config);
  CHECK(kylin::find_descriptor(c) == &kylin::presets::qwen2_5_7b);
  c.max_position_embeddings = 131072;  // the base repo's value: same shape, same preset
  CHECK(kylin::find_descriptor(c) == &kylin::presets::qwen2_5_7b);
}

TEST_CASE("a changed field breaks the match and is listed with both values") {
  auto c = parse(qwen3_0_6b_config);
  c.num_hidden_layers = 20;
  c.tie_word_embeddings = false;
  const auto fields = kylin::mismatched_fields(kylin::presets::qwen3_0_6b, c);
  REQUIRE(fields.size() == 2);
  CHECK(fields[0] == "num_hidden_layers=20 (preset 28)");
  CHECK(fields[1] == "tie_word_embeddings=false (preset true)");
  CHECK_FALSE(kylin::matches(kylin::presets::qwen3_0_6b, c));
  CHECK(kylin::find_descriptor(c) == nullptr);
  CHECK(kylin::describe_preset_match(c) ==
        "no preset matched (closest: Qwen3-0.6B; differs in: num_hidden_layers=20 (preset 28), "
        "tie_word_embeddings=false (preset true))");
}

TEST_CASE("the test checkpoints match no preset and the closest one is named with the differing fields") {
  const auto dir = std::filesystem::path(KYLIN_TEST_DATA) / "models";
  for (const char* m : {"tiny-qwen3-untied", "small-qwen3", "odd-qwen3-f16-sharded", "small-qwen2-f32", "tiny-qwen3-moe"}) {
    CAPTURE(m);
    const auto c = kylin::load_model_config(dir / m);
    CHECK(kylin::find_descriptor(c) == nullptr);
    const auto line = kylin::describe_preset_match(c);
    CHECK(line.starts_with("no preset matched (closest: "));
    CHECK(line.find("hidden_size=" + std::to_string(c.hidden_size)) != std::string::npos);
  }
  // The Qwen2 checkpoint is closest to a Qwen2.5 preset: model_type counts as a differing field.
  const auto qwen2 = kylin::load_model_config(dir / "small-qwen2-f32");
  CHECK(kylin::closest_descriptor(qwen2).model_type == "qwen2");
  // The expert fields are compared too (this one's attention_bias makes a Qwen2.5 preset closest).
  const auto moe = kylin::load_model_config(dir / "odd-qwen3-moe-f32-sharded");
  CHECK(kylin::describe_preset_match(moe).find("num_experts=12 (preset ") != std::string::npos);
}

TEST_CASE("MoE presets: a config.json with the published 30B-A3B fields matches it; total and active parameters follow the model cards") {
  const auto& d = kylin::presets::qwen3_30b_a3b;
  CHECK(d.params_total() == 30'532'122'624);  // 48 x (attention + 128 experts + router + norms) + embeddings + lm_head
  CHECK(d.params_active() == 3'353'032'704);   // the router and 8 experts per layer
  kylin::ModelConfig c = kylin::parse_model_config(kylin::json::parse(R"({"model_type": "qwen3_moe", "hidden_size": 2048,
      "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144,
      "vocab_size": 151936, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": false, "attention_bias": false,
      "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768, "norm_topk_prob": true})"));
  CHECK(kylin::find_descriptor(c) == &d);
  c.moe->num_experts_per_tok = 4;
  CHECK(kylin::describe_preset_match(c) ==
        "no preset matched (closest: Qwen3-30B-A3B; differs in: num_experts_per_tok=4 (preset 8))");
}

TEST_CASE("each Arch names its component types and traits; presets take model_type from the Arch") {
  using kylin::QKNorm, kylin::QKVBias;
  static_assert(std::is_same_v<kylin::Qwen3Arch::Attention, kylin::GroupedQueryAttention<QKNorm::per_head, QKVBias::none>>);
  static_assert(std::is_same_v<kylin::Qwen2Arch::Attention, kylin::GroupedQueryAttention<QKNorm::none, QKVBias::qkv>>);
  static_assert(std::is_same_v<kylin::Qwen3Arch::Norm, kylin::RMSNorm> && std::is_same_v<kylin::Qwen2Arch::MLP, kylin::SwiGLU>);
  static_assert(std::is_same_v<kylin::Qwen3MoeArch::Attention, kylin::Qwen3Arch::Attention> &&
                std::is_same_v<kylin::Qwen3MoeArch::MLP, kylin::SparseMoE> && kylin::Qwen3MoeArch::info.has_experts());
  static_assert(kylin::find_arch("qwen3") == &kylin::all_archs[0] && kylin::find_arch("qwen3_moe") == &kylin::all_archs[1] && kylin::find_arch("qwen2") == &kylin::all_archs[2]);
  static_assert(kylin::find_arch("llama") == nullptr && kylin::find_arch("") == nullptr);
  // the hybrid stacks: gated attention or Gated DeltaNet per layer, zero-centred norms; Qwen3.5's text model nested
  static_assert(std::is_same_v<kylin::Qwen35Arch::Attention, kylin::HybridMixer> && std::is_same_v<kylin::Qwen35Arch::MLP, kylin::SwiGLU>);
  static_assert(std::is_same_v<kylin::Qwen35MoeArch::MLP, kylin::SparseMoE> && std::is_same_v<kylin::Qwen3NextArch::MLP, kylin::SparseMoE>);
  static_assert(kylin::Qwen35Arch::info.is_hybrid() && kylin::Qwen35MoeArch::info.is_hybrid() && kylin::Qwen3NextArch::info.is_hybrid() &&
                !kylin::Qwen3Arch::info.is_hybrid());
  static_assert(kylin::Qwen35Arch::info.text_config == "text_config" && kylin::Qwen3NextArch::info.text_config.empty());
  static_assert(kylin::Qwen35MoeArch::info.expert_storage == kylin::ExpertStorage::fused &&
                kylin::Qwen3NextArch::info.linear_projections == kylin::LinearProjections::fused_per_key_head);
  static_assert(!kylin::Qwen3Arch::info.default_attention_bias() && kylin::Qwen2Arch::info.default_attention_bias());
  static_assert(kylin::Qwen3Arch::info.head_dim_in_config && !kylin::Qwen2Arch::info.head_dim_in_config);
  for (const auto* d : kylin::presets::all) {
    CAPTURE(d->name);
    CHECK(&d->arch() == kylin::find_arch(d->model_type));
    CHECK(d->has_qk_norm() == d->arch().has_qk_norm());
    CHECK(d->attention_bias == d->arch().has_qkv_bias());
  }
  CHECK(kylin::presets::qwen3_8b.arch().architecture == "Qwen3ForCausalLM");
  CHECK(kylin::presets::qwen2_5_7b.arch().architecture == "Qwen2ForCausalLM");
  for (const auto& a : kylin::all_archs) CHECK(a.end_of_turn == std::array<std::string_view, 2>{"<|im_end|>", "<|endoftext|>"});
}

TEST_CASE("visit_arch calls the function with the Arch of model_type and refuses other types by name") {
  auto name_of = [](auto arch) { return std::string(decltype(arch)::name); };
  CHECK(kylin::visit_arch("qwen3", name_of) == "qwen3");
  CHECK(kylin::visit_arch("qwen2", name_of) == "qwen2");
  CHECK(kylin::visit_arch("qwen3_moe", name_of) == "qwen3_moe");
  CHECK(kylin::visit_arch("qwen3_5", name_of) == "qwen3_5");
  CHECK(kylin::visit_arch("qwen3_5_moe", name_of) == "qwen3_5_moe");
  CHECK(kylin::visit_arch("qwen3_next", name_of) == "qwen3_next");
  auto qk_norm = [](auto arch) -> bool { return decltype(arch)::info.has_qk_norm(); };
  CHECK(kylin::visit_arch("qwen3", qk_norm));
  CHECK_FALSE(kylin::visit_arch("qwen2", qk_norm));
  for (const char* bad : {"llama", "Qwen3", ""}) {
    CAPTURE(bad);
    try {
      kylin::visit_arch(bad, name_of);
      FAIL("no error for an unsupported model_type");
    } catch (const kylin::Error& e) {
      CHECK(e.category() == kylin::ErrorCategory::config);
      CHECK(std::string(e.what()) == std::string("[kylin.config] model_type: unsupported model_type \"") + bad +
                                         "\" (kylin runs \"qwen3\", \"qwen3_moe\", \"qwen2\", \"qwen3_5\", \"qwen3_5_moe\" and \"qwen3_next\")");
    }
    CHECK_THROWS_AS(kylin::arch_info(bad), kylin::Error);
  }
}
