// `kylin make-test-model`: write a full-size checkpoint in Hugging Face layout with random
// weights scaled like a trained model (linear ~ N(0, 0.02), norms ~ 1), for benchmarks and
// load tests without downloading. Tensors are generated and streamed in chunks.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kylin/cli.hpp"
#include "kylin/core/json.hpp"
#include "kylin/io/safetensors_writer.hpp"
#include "kylin/model/descriptors.hpp"
#include "kylin/model/weights.hpp"

namespace cmd_make_test_model {

namespace fs = std::filesystem;

// Small shapes for quick runs, beside the published presets of descriptors.hpp.
constexpr kylin::ModelDescriptor tiny_qwen3{
    .name = "tiny-qwen3", .model_type = kylin::Qwen3Arch::name,
    .hidden_size = 256, .num_hidden_layers = 4, .num_attention_heads = 8, .num_key_value_heads = 2,
    .head_dim = 64, .intermediate_size = 704, .vocab_size = 4096, .max_position_embeddings = 40960,
    .rms_norm_eps = 1e-6, .rope_theta = 1000000.0, .tie_word_embeddings = true, .attention_bias = false,
    .published_params_b = 0.0};
constexpr kylin::ModelDescriptor tiny_qwen2{
    .name = "tiny-qwen2", .model_type = kylin::Qwen2Arch::name,
    .hidden_size = 256, .num_hidden_layers = 2, .num_attention_heads = 8, .num_key_value_heads = 2,
    .head_dim = 32, .intermediate_size = 704, .vocab_size = 4096, .max_position_embeddings = 32768,
    .rms_norm_eps = 1e-6, .rope_theta = 1000000.0, .tie_word_embeddings = true, .attention_bias = true,
    .published_params_b = 0.0};

constexpr kylin::ModelDescriptor tiny_qwen3_moe{
    .name = "tiny-qwen3-moe", .model_type = kylin::Qwen3MoeArch::name,
    .hidden_size = 128, .num_hidden_layers = 2, .num_attention_heads = 4, .num_key_value_heads = 2,
    .head_dim = 32, .intermediate_size = 256, .vocab_size = 4096, .max_position_embeddings = 40960,
    .rms_norm_eps = 1e-6, .rope_theta = 1000000.0, .tie_word_embeddings = false, .attention_bias = false,
    .published_params_b = 0.0, .num_experts = 8, .num_experts_per_tok = 2, .moe_intermediate_size = 64,
    .norm_topk_prob = true};

// Small hybrid shapes (Qwen3.5 layout) for quick runs: gated attention every 4th layer, Gated DeltaNet between.
constexpr kylin::ModelDescriptor tiny_qwen3_5{
    .name = "tiny-qwen3.5", .model_type = kylin::Qwen35Arch::name,
    .hidden_size = 128, .num_hidden_layers = 4, .num_attention_heads = 4, .num_key_value_heads = 2,
    .head_dim = 64, .intermediate_size = 256, .vocab_size = 4096, .max_position_embeddings = 262144,
    .rms_norm_eps = 1e-6, .rope_theta = 10000000.0, .tie_word_embeddings = true, .attention_bias = false,
    .published_params_b = 0.0, .full_attention_interval = 4, .linear_num_key_heads = 2, .linear_num_value_heads = 4,
    .linear_key_head_dim = 32, .linear_value_head_dim = 32, .linear_conv_kernel_dim = 4, .partial_rotary_factor = 0.25};
constexpr kylin::ModelDescriptor tiny_qwen3_5_moe{
    .name = "tiny-qwen3.5-moe", .model_type = kylin::Qwen35MoeArch::name,
    .hidden_size = 128, .num_hidden_layers = 4, .num_attention_heads = 4, .num_key_value_heads = 2,
    .head_dim = 64, .intermediate_size = 0, .vocab_size = 4096, .max_position_embeddings = 262144,
    .rms_norm_eps = 1e-6, .rope_theta = 10000000.0, .tie_word_embeddings = false, .attention_bias = false,
    .published_params_b = 0.0, .num_experts = 8, .num_experts_per_tok = 2, .moe_intermediate_size = 64, .norm_topk_prob = true,
    .full_attention_interval = 4, .linear_num_key_heads = 2, .linear_num_value_heads = 4, .linear_key_head_dim = 32,
    .linear_value_head_dim = 32, .linear_conv_kernel_dim = 4, .partial_rotary_factor = 0.25, .shared_expert_intermediate_size = 64};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::vector<const kylin::ModelDescriptor*> presets() {
  std::vector<const kylin::ModelDescriptor*> all(kylin::presets::all.begin(), kylin::presets::all.end());
  all.push_back(&tiny_qwen3);
  all.push_back(&tiny_qwen2);
  all.push_back(&tiny_qwen3_moe);
  all.push_back(&tiny_qwen3_5);
  all.push_back(&tiny_qwen3_5_moe);
  return all;
}

// splitmix64: fast and good enough for weights that only need the right scale.
struct Rng {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Approximately N(0, 1): the sum of four uniform 16-bit draws (Irwin-Hall), rescaled.
  float normal() {
    const std::uint64_t r = next();
    const double sum = static_cast<double>((r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48)) / 65536.0;
    return static_cast<float>((sum - 2.0) * std::sqrt(3.0));  // variance of the sum is 4/12
  }
};

struct Init {
  float mean, stddev;
  bool fp8 = false;  // written as F8_E4M3 with a weight_scale_inv per block (--dtype fp8)
};

// FP8 checkpoints (--dtype fp8), as the Qwen3-*-FP8 releases store them: every projection in
// F8_E4M3, one F32 scale (weight_scale_inv) per 128 x 128 block; embeddings, norms and the MoE
// router stay BF16. The stored values are N(0, 16^2) rounded to the nearest E4M3 value, the
// scale 0.02 / 16: the BF16 checkpoint's N(0, 0.02^2) after widening.
constexpr std::int64_t fp8_block = 128;
constexpr float fp8_spread = 16.f;

// 4096 draws of N(0, fp8_spread^2) as their nearest E4M3 codes: each weight is one lookup.
std::vector<std::uint8_t> fp8_normal_codes(Rng& rng) {
  std::vector<std::pair<float, std::uint8_t>> finite;
  for (int v = 0; v < 256; ++v)
    if ((v & 0x7F) != 0x7F) finite.push_back({kylin::f8_e4m3_to_f32(static_cast<std::uint8_t>(v)), static_cast<std::uint8_t>(v)});
  std::vector<std::uint8_t> codes(4096);
  for (auto& c : codes) {
    const float x = fp8_spread * rng.normal();
    c = std::min_element(finite.begin(), finite.end(), [&](const auto& a, const auto& b) { return std::abs(a.first - x) < std::abs(b.first - x); })->second;
  }
  return codes;
}

// A hybrid preset's layer l (Qwen3.5 layout, prefix p = "model.language_model.layers.l."): gated attention or
// Gated DeltaNet (A_log ~ log U(1, 16) as transformers initialises it, dt_bias ~ 1, the conv taps), then the
// dense MLP or the fused experts with the gated shared expert.
template <class Add>
void hybrid_layer(const kylin::ModelDescriptor& d, std::int64_t l, const std::string& p, Add&& add) {
  const std::int64_t H = d.hidden_size, D = d.head_dim, nv = d.linear_num_value_heads;
  const std::int64_t K = d.linear_num_key_heads * d.linear_key_head_dim, V = nv * d.linear_value_head_dim, C = 2 * K + V;
  const Init linear{0.f, 0.02f}, zero_centred{0.f, 0.05f}, one{1.f, 0.05f}, conv{0.f, 0.3f}, a_log{2.f, 0.5f};
  add(p + "input_layernorm.weight", {H}, zero_centred);
  if ((l + 1) % d.full_attention_interval == 0) {
    add(p + "self_attn.q_proj.weight", {2 * d.q_dim(), H}, linear);
    add(p + "self_attn.k_proj.weight", {d.kv_dim(), H}, linear);
    add(p + "self_attn.v_proj.weight", {d.kv_dim(), H}, linear);
    add(p + "self_attn.o_proj.weight", {H, d.q_dim()}, linear);
    add(p + "self_attn.q_norm.weight", {D}, zero_centred);
    add(p + "self_attn.k_norm.weight", {D}, zero_centred);
  } else {
    const std::string a = p + "linear_attn.";
    add(a + "in_proj_qkv.weight", {C, H}, linear);
    add(a + "in_proj_z.weight", {V, H}, linear);
    add(a + "in_proj_b.weight", {nv, H}, linear);
    add(a + "in_proj_a.weight", {nv, H}, linear);
    add(a + "conv1d.weight", {C, 1, d.linear_conv_kernel_dim}, conv);
    add(a + "A_log", {nv}, a_log);
    add(a + "dt_bias", {nv}, one);
    add(a + "norm.weight", {d.linear_value_head_dim}, one);
    add(a + "out_proj.weight", {H, V}, linear);
  }
  add(p + "post_attention_layernorm.weight", {H}, zero_centred);
  if (!d.has_experts()) {
    add(p + "mlp.gate_proj.weight", {d.intermediate_size, H}, linear);
    add(p + "mlp.up_proj.weight", {d.intermediate_size, H}, linear);
    add(p + "mlp.down_proj.weight", {H, d.intermediate_size}, linear);
    return;
  }
  const std::int64_t M = d.moe_intermediate_size, S = d.shared_expert_intermediate_size;
  add(p + "mlp.gate.weight", {d.num_experts, H}, linear);
  add(p + "mlp.experts.gate_up_proj", {d.num_experts, 2 * M, H}, linear);
  add(p + "mlp.experts.down_proj", {d.num_experts, H, M}, linear);
  add(p + "mlp.shared_expert.gate_proj.weight", {S, H}, linear);
  add(p + "mlp.shared_expert.up_proj.weight", {S, H}, linear);
  add(p + "mlp.shared_expert.down_proj.weight", {H, S}, linear);
  add(p + "mlp.shared_expert_gate.weight", {1, H}, linear);
}

// The vision tower the releases ship beside the text model (--vision): Qwen3.5-0.8B's 12 blocks of 768 (12 heads,
// MLP 3072), the larger ones' 27 of 1152 (16 heads, MLP 4304), the tiny presets' 2 of 64 for tests; 16-pixel
// patches, 2x2 merge, a 48x48 position table.
struct VisionShape {
  std::int64_t depth = 0, hidden = 0, heads = 0, intermediate = 0;
};
VisionShape vision_shape(const kylin::ModelDescriptor& d) {
  if (lower(d.name).starts_with("tiny")) return {2, 72, 2, 128};  // head dim 36: the padded attention path
  return lower(d.name) == "qwen3.5-0.8b" ? VisionShape{12, 768, 12, 3072} : VisionShape{27, 1152, 16, 4304};
}

kylin::json::Value vision_config_json(const VisionShape& v, std::int64_t out_hidden) {
  using kylin::json::Value, kylin::json::Array, kylin::json::Object;
  return Value(Object{{"model_type", Value("qwen3_5")}, {"depth", Value(v.depth)}, {"hidden_size", Value(v.hidden)},
                      {"hidden_act", Value("gelu_pytorch_tanh")}, {"intermediate_size", Value(v.intermediate)}, {"num_heads", Value(v.heads)},
                      {"in_channels", Value(3)}, {"patch_size", Value(16)}, {"spatial_merge_size", Value(2)}, {"temporal_patch_size", Value(2)},
                      {"out_hidden_size", Value(out_hidden)}, {"num_position_embeddings", Value(2304)},
                      {"deepstack_visual_indexes", Value(Array{})}});
}

// model.visual.*: the tensors of transformers' Qwen3_5VisionModel for that shape.
template <class Add>
void vision_tensors(const VisionShape& v, std::int64_t out_hidden, Add&& add) {
  const std::int64_t D = v.hidden, I = v.intermediate, M = 4 * D;
  const Init linear{0.f, 0.02f}, norm{1.f, 0.05f}, bias{0.f, 0.02f};
  add("model.visual.patch_embed.proj.weight", {D, 3, 2, 16, 16}, linear);
  add("model.visual.patch_embed.proj.bias", {D}, bias);
  add("model.visual.pos_embed.weight", {2304, D}, linear);
  for (std::int64_t b = 0; b < v.depth; ++b) {
    const std::string p = "model.visual.blocks." + std::to_string(b) + ".";
    for (const char* n : {"norm1", "norm2"}) add(p + n + ".weight", {D}, norm), add(p + n + ".bias", {D}, bias);
    for (const auto& [name, rows, cols] : {std::tuple{"attn.qkv", 3 * D, D}, {"attn.proj", D, D}, {"mlp.linear_fc1", I, D}, {"mlp.linear_fc2", D, I}})
      add(p + name + ".weight", {rows, cols}, linear), add(p + name + ".bias", {rows}, bias);
  }
  add("model.visual.merger.norm.weight", {D}, norm);
  add("model.visual.merger.norm.bias", {D}, bias);
  add("model.visual.merger.linear_fc1.weight", {M, M}, linear);
  add("model.visual.merger.linear_fc1.bias", {M}, bias);
  add("model.visual.merger.linear_fc2.weight", {out_hidden, M}, linear);
  add("model.visual.merger.linear_fc2.bias", {out_hidden}, bias);
}

// Every tensor of a descriptor with its initialisation, in checkpoint order (with `vision`, a hybrid's tower).
std::vector<std::pair<kylin::io::TensorSpec, Init>> tensor_list(const kylin::ModelDescriptor& d, bool fp8, bool vision = false) {
  using kylin::DType;
  const std::int64_t H = d.hidden_size, I = d.intermediate_size, V = d.vocab_size, D = d.head_dim;
  const Init linear{0.f, 0.02f}, norm{1.f, 0.05f};
  std::vector<std::pair<kylin::io::TensorSpec, Init>> t;
  auto add = [&](std::string name, std::vector<std::int64_t> shape, Init init) {
    const bool projection = fp8 && name.ends_with("_proj.weight");
    if (!projection) return t.push_back({{std::move(name), DType::bf16, std::move(shape)}, init});
    const std::vector<std::int64_t> blocks{(shape[0] + fp8_block - 1) / fp8_block, (shape[1] + fp8_block - 1) / fp8_block};
    t.push_back({{name, DType::f8_e4m3, std::move(shape)}, {0.f, 0.f, true}});
    t.push_back({{kylin::fp8_scale_name(name), DType::f32, blocks}, {0.02f / fp8_spread, 0.f}});
  };
  if (d.is_hybrid()) {
    const std::string P(d.arch().tensor_prefix);
    add(P + "embed_tokens.weight", {V, H}, linear);
    for (std::int64_t l = 0; l < d.num_hidden_layers; ++l) hybrid_layer(d, l, P + "layers." + std::to_string(l) + ".", add);
    add(P + "norm.weight", {H}, Init{0.f, 0.05f});
    if (!d.tie_word_embeddings) add("lm_head.weight", {V, H}, linear);
    // the MTP head the releases ship (--mtp): fc over [embedding | hidden], its norms, one full-attention layer
    add("mtp.fc.weight", {H, 2 * H}, linear);
    add("mtp.pre_fc_norm_embedding.weight", {H}, Init{0.f, 0.05f});
    add("mtp.pre_fc_norm_hidden.weight", {H}, Init{0.f, 0.05f});
    hybrid_layer(d, d.full_attention_interval - 1, "mtp.layers.0.", add);
    add("mtp.norm.weight", {H}, Init{0.f, 0.05f});
    if (vision) vision_tensors(vision_shape(d), H, add);
    return t;
  }
  add("model.embed_tokens.weight", {V, H}, linear);
  for (std::int64_t l = 0; l < d.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {H}, norm);
    add(p + "self_attn.q_proj.weight", {d.q_dim(), H}, linear);
    add(p + "self_attn.k_proj.weight", {d.kv_dim(), H}, linear);
    add(p + "self_attn.v_proj.weight", {d.kv_dim(), H}, linear);
    add(p + "self_attn.o_proj.weight", {H, d.q_dim()}, linear);
    if (d.has_qk_norm()) {
      add(p + "self_attn.q_norm.weight", {D}, norm);
      add(p + "self_attn.k_norm.weight", {D}, norm);
    }
    if (d.attention_bias) {
      add(p + "self_attn.q_proj.bias", {d.q_dim()}, linear);
      add(p + "self_attn.k_proj.bias", {d.kv_dim()}, linear);
      add(p + "self_attn.v_proj.bias", {d.kv_dim()}, linear);
    }
    add(p + "post_attention_layernorm.weight", {H}, norm);
    if (d.has_experts()) {  // every layer sparse, as in the published MoE models
      add(p + "mlp.gate.weight", {d.num_experts, H}, linear);
      for (std::int64_t e = 0; e < d.num_experts; ++e) {
        const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        add(x + "gate_proj.weight", {d.moe_intermediate_size, H}, linear);
        add(x + "up_proj.weight", {d.moe_intermediate_size, H}, linear);
        add(x + "down_proj.weight", {H, d.moe_intermediate_size}, linear);
      }
      continue;
    }
    add(p + "mlp.gate_proj.weight", {I, H}, linear);
    add(p + "mlp.up_proj.weight", {I, H}, linear);
    add(p + "mlp.down_proj.weight", {H, I}, linear);
  }
  add("model.norm.weight", {H}, norm);
  if (!d.tie_word_embeddings) add("lm_head.weight", {V, H}, linear);
  return t;
}

// M-RoPE's split of the rotary frequencies over (t, h, w) in the releases' proportions: [11, 11, 10] of 32.
kylin::json::Value mrope_section(const kylin::ModelDescriptor& d) {
  const auto half = static_cast<std::int64_t>(static_cast<double>(d.head_dim) * d.partial_rotary_factor) / 2, t = (half * 11 + 31) / 32;
  return kylin::json::Value(kylin::json::Array{kylin::json::Value(t), kylin::json::Value(t), kylin::json::Value(half - 2 * t)});
}

// A hybrid preset's config: Qwen3.5's text_config nested in the composite config (kylin::Qwen35Arch::info.text_config),
// with rope_parameters and the Gated DeltaNet fields by their HF names; the vision fields are the releases' ids.
kylin::json::Value hybrid_config_json(const kylin::ModelDescriptor& d) {
  using kylin::json::Value, kylin::json::Array, kylin::json::Object;
  const kylin::ArchInfo& arch = d.arch();
  Object text{{"model_type", Value(std::string(d.model_type) + "_text")},
              {"vocab_size", Value(d.vocab_size)},
              {"hidden_size", Value(d.hidden_size)},
              {"num_hidden_layers", Value(d.num_hidden_layers)},
              {"num_attention_heads", Value(d.num_attention_heads)},
              {"num_key_value_heads", Value(d.num_key_value_heads)},
              {"head_dim", Value(d.head_dim)},
              {"max_position_embeddings", Value(d.max_position_embeddings)},
              {"rms_norm_eps", Value(d.rms_norm_eps)},
              {"tie_word_embeddings", Value(d.tie_word_embeddings)},
              {"hidden_act", Value("silu")},
              {"attention_bias", Value(false)},
              {"attn_output_gate", Value(true)},
              {"full_attention_interval", Value(d.full_attention_interval)},
              {"linear_conv_kernel_dim", Value(d.linear_conv_kernel_dim)},
              {"linear_key_head_dim", Value(d.linear_key_head_dim)},
              {"linear_value_head_dim", Value(d.linear_value_head_dim)},
              {"linear_num_key_heads", Value(d.linear_num_key_heads)},
              {"linear_num_value_heads", Value(d.linear_num_value_heads)},
              {"mamba_ssm_dtype", Value("float32")},
              {"mtp_num_hidden_layers", Value(1)},
              {"mtp_use_dedicated_embeddings", Value(false)},
              {"dtype", Value("bfloat16")},
              {"eos_token_id", Value(248044)},
              {"rope_parameters", Value(Object{{"rope_type", Value("default")}, {"rope_theta", Value(d.rope_theta)},
                                               {"partial_rotary_factor", Value(d.partial_rotary_factor)},
                                               {"mrope_interleaved", Value(true)},
                                               {"mrope_section", mrope_section(d)}})}};
  if (d.intermediate_size > 0) text.push_back({"intermediate_size", Value(d.intermediate_size)});
  if (arch.has_experts())
    for (auto& field : Object{{"num_experts", Value(d.num_experts)}, {"num_experts_per_tok", Value(d.num_experts_per_tok)},
                              {"moe_intermediate_size", Value(d.moe_intermediate_size)},
                              {"shared_expert_intermediate_size", Value(d.shared_expert_intermediate_size)}})
      text.push_back(std::move(field));
  return Value(Object{{"architectures", Value(Array{Value(arch.architecture)})},
                      {"model_type", Value(d.model_type)},
                      {std::string(arch.text_config), Value(std::move(text))},
                      {"tie_word_embeddings", Value(d.tie_word_embeddings)},
                      {"image_token_id", Value(248056)},
                      {"video_token_id", Value(248057)},
                      {"vision_start_token_id", Value(248053)},
                      {"vision_end_token_id", Value(248054)}});
}

kylin::json::Value config_json(const kylin::ModelDescriptor& d, bool fp8) {
  if (d.is_hybrid()) return hybrid_config_json(d);
  using kylin::json::Value, kylin::json::Array;
  const kylin::ArchInfo& arch = d.arch();
  kylin::json::Object o{
      {"architectures", Value(Array{Value(arch.architecture)})},
      {"model_type", Value(d.model_type)},
      {"vocab_size", Value(d.vocab_size)},
      {"hidden_size", Value(d.hidden_size)},
      {"num_hidden_layers", Value(d.num_hidden_layers)},
      {"num_attention_heads", Value(d.num_attention_heads)},
      {"num_key_value_heads", Value(d.num_key_value_heads)},
      {"intermediate_size", Value(d.intermediate_size)},
      {"max_position_embeddings", Value(d.max_position_embeddings)},
      {"rms_norm_eps", Value(d.rms_norm_eps)},
      {"rope_theta", Value(d.rope_theta)},
      {"tie_word_embeddings", Value(d.tie_word_embeddings)},
      {"torch_dtype", Value("bfloat16")},
      {"hidden_act", Value("silu")},
      {"attention_bias", Value(d.attention_bias)},
      {"bos_token_id", Value(151643)},
      {"eos_token_id", Value(151645)},
      {"rope_scaling", Value(nullptr)},
      {"sliding_window", Value(nullptr)},
      {"use_sliding_window", Value(false)}};
  if (arch.head_dim_in_config) o.insert(o.begin() + 7, {"head_dim", Value(d.head_dim)});
  if (arch.has_experts())
    for (auto& field : kylin::json::Object{{"num_experts", Value(d.num_experts)},
                                           {"num_experts_per_tok", Value(d.num_experts_per_tok)},
                                           {"moe_intermediate_size", Value(d.moe_intermediate_size)},
                                           {"norm_topk_prob", Value(d.norm_topk_prob)},
                                           {"decoder_sparse_step", Value(1)},
                                           {"mlp_only_layers", Value(Array{})}})
      o.push_back(std::move(field));
  if (fp8)
    o.push_back({"quantization_config", Value(kylin::json::Object{{"quant_method", Value("fp8")},
                                                                 {"activation_scheme", Value("dynamic")},
                                                                 {"fmt", Value("e4m3")},
                                                                 {"weight_block_size", Value(Array{Value(fp8_block), Value(fp8_block)})}})});
  return Value(std::move(o));
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
  if (!f) throw kylin::Error(kylin::ErrorCategory::io, p.string(), "write failed");
}

struct Options {
  std::string preset = "qwen3-0.6b";
  std::uint64_t seed = 0;
  std::string out;
  std::int64_t layers = 0;    // 0: the preset's; fewer keep the per-layer shape in a smaller file
  std::string tokenizer_dir;  // copied into the checkpoint when given (e.g. tests/data/qwen3-tokenizer)
  std::string dtype = "bf16";  // fp8: projections as F8_E4M3 with block scales (half the bytes)
  bool config_only = false;    // config.json and generation_config.json, no tensors (the shape alone)
  bool vision = false;         // a hybrid preset: also the vision tower the release ships (model.visual.*)
};

int run(const Options& o) {
  const kylin::ModelDescriptor* d = nullptr;
  std::string names;
  for (const auto* p : presets()) {
    names += (names.empty() ? "" : ", ") + lower(p->name);
    if (lower(p->name) == lower(o.preset)) d = p;
  }
  if (!d) throw kylin::Error(kylin::ErrorCategory::request, "--preset", "unknown preset '" + o.preset + "' (known: " + names + ")");
  kylin::ModelDescriptor shape = *d;
  if (o.layers < 0) throw kylin::Error(kylin::ErrorCategory::request, "--layers", "must be positive");
  if (o.layers > 0) shape.num_hidden_layers = o.layers;
  d = &shape;
  const bool fp8 = o.dtype == "fp8";
  if (fp8 && d->is_hybrid())
    throw kylin::Error(kylin::ErrorCategory::request, "--dtype", "fp8 checkpoints are written for the Qwen3 presets only, not " + std::string(d->name));
  const fs::path dir(o.out);
  fs::create_directories(dir);
  if (o.vision && !d->is_hybrid())
    throw kylin::Error(kylin::ErrorCategory::request, "--vision", "the Qwen3.5 presets carry a vision tower; " + std::string(d->name) + " has none");
  kylin::json::Value config = config_json(*d, fp8);
  if (o.vision) config.set("vision_config", vision_config_json(vision_shape(*d), d->hidden_size));
  write_text(dir / "config.json", kylin::json::dump(config) + "\n");
  write_text(dir / "generation_config.json", d->is_hybrid() ? "{\"bos_token_id\": 248044, \"eos_token_id\": [248046, 248044], \"do_sample\": true, "
                                                              "\"temperature\": 0.6, \"top_k\": 20, \"top_p\": 0.95}\n"
                                                            : "{\"bos_token_id\": 151643, \"eos_token_id\": [151645, 151643], \"do_sample\": true, "
                                                              "\"temperature\": 0.6, \"top_k\": 20, \"top_p\": 0.95}\n");
  const fs::path tok_dir(o.tokenizer_dir);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    if (!o.tokenizer_dir.empty() && fs::exists(tok_dir / f)) fs::copy_file(tok_dir / f, dir / f, fs::copy_options::overwrite_existing);

  if (o.config_only) {
    std::printf("wrote %s: %s, config only\n", dir.string().c_str(), std::string(d->name).c_str());
    return 0;
  }
  const auto tensors = tensor_list(*d, fp8, o.vision);
  std::vector<kylin::io::TensorSpec> specs;
  for (const auto& [spec, init] : tensors) specs.push_back(spec);
  kylin::io::SafetensorsWriter writer(dir / "model.safetensors", specs);
  Rng rng{o.seed * 0x2545F4914F6CDD1Dull + 1};
  const std::vector<std::uint8_t> codes = fp8 ? fp8_normal_codes(rng) : std::vector<std::uint8_t>{};
  std::vector<std::uint16_t> chunk(std::size_t{1} << 20);
  std::vector<std::uint8_t> bytes(std::size_t{1} << 20);
  std::vector<float> floats(std::size_t{1} << 20);
  std::size_t total = 0;
  for (const auto& [spec, init] : tensors) {
    std::size_t left = spec.nbytes() / kylin::dtype_size(spec.dtype);
    while (left > 0) {
      const std::size_t n = std::min(left, chunk.size());
      if (init.fp8) {
        for (std::size_t i = 0; i < n; i += 4)  // 12 of each 16 random bits pick a code
          for (std::uint64_t r = rng.next(), j = 0; j < 4 && i + j < n; ++j) bytes[i + j] = codes[(r >> (16 * j)) & 4095];
        writer.write(spec.name, std::span<const std::uint8_t>(bytes.data(), n));
      } else if (spec.dtype == kylin::DType::f32) {
        std::fill_n(floats.begin(), n, init.mean);
        writer.write(spec.name, std::span<const float>(floats.data(), n));
      } else {
        for (std::size_t i = 0; i < n; ++i) chunk[i] = kylin::f32_to_bf16(init.mean + init.stddev * rng.normal());
        writer.write(spec.name, std::span<const std::uint16_t>(chunk.data(), n));
      }
      left -= n;
    }
    total += spec.nbytes();
  }
  writer.close();
  std::printf("wrote %s: %s, %zu tensors, %.1f MB of %s weights\n", dir.string().c_str(), std::string(d->name).c_str(), tensors.size(),
              static_cast<double>(total) / 1e6, fp8 ? "FP8 (and BF16)" : "BF16");
  return 0;
}

const kylin::cli::Registrar registrar{"make-test-model", [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("make-test-model", "Write a random-weight checkpoint of a preset shape (HF layout, BF16 or FP8)");
  cmd->add_option("--preset", o->preset, "Shape preset, e.g. qwen3-0.6b, qwen3-30b-a3b, qwen3.5-0.8b, qwen3.5-27b, qwen3.6-35b-a3b, tiny-qwen3, tiny-qwen3.5-moe");
  cmd->add_option("--seed", o->seed, "Random seed");
  cmd->add_option("--layers", o->layers, "Number of layers (default: the preset's), e.g. 4 of Qwen3-30B-A3B's shape");
  cmd->add_option("--out", o->out, "Output directory")->required();
  cmd->add_option("--tokenizer-from", o->tokenizer_dir, "Directory whose tokenizer.json / tokenizer_config.json to copy");
  cmd->add_option("--dtype", o->dtype, "bf16, or fp8: projections in F8_E4M3 with 128 x 128 block scales, as the Qwen3-*-FP8 releases")
      ->check(CLI::IsMember({"bf16", "fp8"}));
  cmd->add_flag("--vision", o->vision, "A Qwen3.5 / Qwen3.6 preset: also write the vision tower of the release's shape (model.visual.*, vision_config)");
  cmd->add_flag("--config-only", o->config_only, "Write config.json and generation_config.json only (the preset's shape, no tensors)");
  cmd->callback([o] { kylin::cli::exit_code() = run(*o); });
}};

}  // namespace cmd_make_test_model
