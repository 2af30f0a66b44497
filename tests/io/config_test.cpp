// config.json parsing: required fields, impossible values and unsupported features are errors
// naming the field; optional fields take transformers' defaults.
#include "kylin/io/config.hpp"

#include <doctest/doctest.h>

#include "helpers.hpp"

using namespace kylin::test;
namespace json = kylin::json;

namespace {

// A complete, valid Qwen3 config as an editable JSON object.
json::Value base_config() {
  return json::parse(R"({
    "model_type": "qwen3", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
    "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 704, "vocab_size": 4096,
    "max_position_embeddings": 40960, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "hidden_act": "silu",
    "attention_bias": false, "bos_token_id": 151643, "eos_token_id": 151645, "rope_scaling": null})");
}

json::Value without(json::Value v, std::string_view key) {
  auto& obj = v.as_object();
  std::erase_if(obj, [&](const auto& kv) { return kv.first == key; });
  return v;
}

json::Value with(json::Value v, std::string key, json::Value value) {
  v.set(std::move(key), std::move(value));
  return v;
}

std::string config_error(const json::Value& v) {
  return error_text([&] { kylin::parse_model_config(v); });
}

}  // namespace

TEST_CASE("a complete config parses with every field as written") {
  const auto c = kylin::parse_model_config(base_config());
  CHECK(c.model_type == "qwen3");
  CHECK(c.hidden_size == 256);
  CHECK(c.num_hidden_layers == 4);
  CHECK(c.num_attention_heads == 8);
  CHECK(c.num_key_value_heads == 2);
  CHECK(c.head_dim == 64);
  CHECK(c.intermediate_size == 704);
  CHECK(c.vocab_size == 4096);
  CHECK(c.max_position_embeddings == 40960);
  CHECK(c.rms_norm_eps == doctest::Approx(1e-6));
  CHECK(c.rope_theta == 1e6);
  CHECK(c.tie_word_embeddings);
  CHECK_FALSE(c.attention_bias);
  CHECK(c.bos_token_id == 151643);
  CHECK(c.eos_token_id == std::vector<std::int64_t>{151645});
  CHECK(c.torch_dtype == "bfloat16");
  CHECK_FALSE(c.rope_scaling.has_value());
  CHECK(c.q_dim() == 512);
  CHECK(c.kv_dim() == 128);
  CHECK(c.n_groups() == 4);
  CHECK(c.has_qk_norm());
}

TEST_CASE("every required field, when missing, is an error that names it") {
  for (const char* field : {"model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
                            "intermediate_size", "vocab_size"}) {
    CAPTURE(field);
    const auto msg = config_error(without(base_config(), field));
    CHECK(contains(msg, std::string("[kylin.config] config.json: ") + field + ": missing required field"));
  }
}

TEST_CASE("attention heads not divisible by key/value heads is an error naming num_key_value_heads") {
  const auto msg = config_error(with(base_config(), "num_key_value_heads", 3));
  CHECK(contains(msg, "config.json: num_key_value_heads: 8 attention heads are not divisible by 3 key/value heads"));
  CHECK(contains(config_error(with(base_config(), "num_key_value_heads", 16)), "num_key_value_heads"));
}

TEST_CASE("zero, negative or absurd sizes are errors naming the field and the allowed range") {
  CHECK(contains(config_error(with(base_config(), "hidden_size", 0)), "hidden_size: value 0 outside [1, "));
  CHECK(contains(config_error(with(base_config(), "num_hidden_layers", -2)), "num_hidden_layers: value -2 outside"));
  CHECK(contains(config_error(with(base_config(), "vocab_size", std::int64_t{1} << 40)), "vocab_size: value"));
  CHECK(contains(config_error(with(base_config(), "head_dim", 0)), "head_dim: value 0 outside"));
  CHECK(contains(config_error(with(base_config(), "head_dim", 63)), "head_dim: must be even"));
  CHECK(contains(config_error(with(base_config(), "rms_norm_eps", 0.0)), "rms_norm_eps: must be a positive finite number"));
  CHECK(contains(config_error(with(base_config(), "rope_theta", -1.0)), "rope_theta: must be a positive"));
  CHECK(contains(config_error(with(base_config(), "bos_token_id", -1)), "bos_token_id: value -1 outside"));
}

TEST_CASE("fields of the wrong JSON type are errors naming the field") {
  CHECK(contains(config_error(with(base_config(), "hidden_size", "256")), "hidden_size: must be an integer"));
  CHECK(contains(config_error(with(base_config(), "hidden_size", 256.5)), "hidden_size: must be an integer"));
  CHECK(contains(config_error(with(base_config(), "tie_word_embeddings", 1)), "tie_word_embeddings: must be true or false"));
  CHECK(contains(config_error(with(base_config(), "model_type", 3)), "model_type: must be a string"));
  CHECK(contains(config_error(with(base_config(), "rope_theta", "big")), "rope_theta: must be a number"));
  CHECK(contains(config_error(with(base_config(), "rope_scaling", 4)), "rope_scaling: must be an object or null"));
  CHECK(contains(config_error(json::parse("[1,2]")), "config.json: config.json must be a JSON object"));
}

TEST_CASE("unsupported rope_scaling types are errors naming the type; default means none") {
  const auto linear = json::parse(R"({"rope_type": "linear", "factor": 2.0})");
  CHECK(contains(config_error(with(base_config(), "rope_scaling", linear)),
                 "config.json: rope_scaling.rope_type: unsupported rope scaling \"linear\""));
  const auto old_spelling = json::parse(R"({"type": "dynamic", "factor": 2.0})");
  CHECK(contains(config_error(with(base_config(), "rope_scaling", old_spelling)), "unsupported rope scaling \"dynamic\""));
  const auto untyped = json::parse(R"({"factor": 2.0})");
  CHECK(contains(config_error(with(base_config(), "rope_scaling", untyped)), "rope_scaling.rope_type: missing"));
  const auto def = json::parse(R"({"rope_type": "default"})");
  CHECK_FALSE(kylin::parse_model_config(with(base_config(), "rope_scaling", def)).rope_scaling.has_value());
}

TEST_CASE("yarn needs a factor; its optional fields take transformers' defaults") {
  const auto no_factor = json::parse(R"({"rope_type": "yarn", "original_max_position_embeddings": 32768})");
  CHECK(contains(config_error(with(base_config(), "rope_scaling", no_factor)),
                 "config.json: rope_scaling.factor: missing required field for yarn"));
  const auto bad_beta = json::parse(R"({"rope_type": "yarn", "factor": 4.0, "beta_fast": "x"})");
  CHECK(contains(config_error(with(base_config(), "rope_scaling", bad_beta)), "config.json: rope_scaling.beta_fast: must be a number"));
  const auto yarn = json::parse(R"({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})");
  const auto c = kylin::parse_model_config(with(base_config(), "rope_scaling", yarn));
  REQUIRE(c.rope_scaling.has_value());
  CHECK(c.rope_scaling->factor == 4.0);
  CHECK(c.rope_scaling->original_max_position_embeddings == 32768);
  CHECK(c.rope_scaling->beta_fast == 32.0);
  CHECK(c.rope_scaling->beta_slow == 1.0);
  CHECK_FALSE(c.rope_scaling->attention_factor.has_value());
  CHECK(c.rope_scaling->truncate);
}

TEST_CASE("unsupported model_type, hidden_act and sliding windows are errors naming the value") {
  CHECK(contains(config_error(with(base_config(), "model_type", "llama")),
                 "config.json: model_type: unsupported model_type \"llama\""));
  CHECK(contains(config_error(with(base_config(), "hidden_act", "gelu")),
                 "config.json: hidden_act: unsupported activation \"gelu\""));
  CHECK(contains(config_error(with(base_config(), "use_sliding_window", true)), "use_sliding_window"));
}

TEST_CASE("the unsupported model_type error names every supported one") {
  CHECK(contains(config_error(with(base_config(), "model_type", "llama")),
                 "unsupported model_type \"llama\" (kylin runs \"qwen3\", \"qwen3_moe\", \"qwen2\", \"qwen3_5\", \"qwen3_5_moe\" and "
                 "\"qwen3_next\")"));
}

TEST_CASE("attention_bias: Qwen2 must have q/k/v biases; a Qwen3 config may say true (bias tensors are checked with the weights)") {
  CHECK(kylin::parse_model_config(with(base_config(), "attention_bias", true)).attention_bias);
  const auto qwen2 = with(without(base_config(), "head_dim"), "model_type", "qwen2");
  CHECK(config_error(with(qwen2, "attention_bias", false)) ==
        "[kylin.config] config.json: attention_bias: qwen2 without q/k/v biases is not supported");
  CHECK(kylin::parse_model_config(with(qwen2, "attention_bias", true)).attention_bias);
  // The same rule on a hand-built config, without a file context.
  kylin::ModelConfig c = kylin::parse_model_config(with(qwen2, "attention_bias", true));
  c.attention_bias = false;
  CHECK(error_text([&] { kylin::arch_checks(c); }) == "[kylin.config] attention_bias: qwen2 without q/k/v biases is not supported");
}

TEST_CASE("an absent attention_bias takes the architecture's default and has_qk_norm follows model_type") {
  const auto qwen3 = kylin::parse_model_config(without(base_config(), "attention_bias"));
  CHECK_FALSE(qwen3.attention_bias);
  CHECK(qwen3.has_qk_norm());
  const auto qwen2 = kylin::parse_model_config(with(without(without(base_config(), "attention_bias"), "head_dim"), "model_type", "qwen2"));
  CHECK(qwen2.attention_bias);
  CHECK_FALSE(qwen2.has_qk_norm());
  kylin::ModelConfig unknown;  // hand-built, no architecture
  CHECK_FALSE(unknown.has_qk_norm());
}

TEST_CASE("num_key_value_heads defaults to num_attention_heads and head_dim to hidden/heads") {
  const auto c = kylin::parse_model_config(without(without(base_config(), "num_key_value_heads"), "head_dim"));
  CHECK(c.num_key_value_heads == 8);
  CHECK(c.head_dim == 32);
  CHECK(c.n_groups() == 1);
  const auto odd = with(without(base_config(), "head_dim"), "hidden_size", 260);
  CHECK(contains(config_error(odd), "head_dim: absent, and hidden_size is not divisible by num_attention_heads"));
}

TEST_CASE("optional fields absent take the documented defaults; qwen2 defaults to attention_bias") {
  auto minimal = json::parse(R"({"model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 1,
      "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100})");
  const auto c = kylin::parse_model_config(minimal);
  CHECK(c.max_position_embeddings == 32768);
  CHECK(c.rms_norm_eps == doctest::Approx(1e-6));
  CHECK(c.rope_theta == 10000.0);
  CHECK_FALSE(c.tie_word_embeddings);
  CHECK(c.attention_bias);
  CHECK_FALSE(c.has_qk_norm());
  CHECK(c.eos_token_id.empty());
  CHECK_FALSE(c.bos_token_id.has_value());
  CHECK(c.hidden_act == "silu");
  // Newer transformers write "dtype" instead of "torch_dtype".
  CHECK(kylin::parse_model_config(with(minimal, "dtype", "float16")).torch_dtype == "float16");
}

TEST_CASE("eos_token_id may be one integer or a list of integers; anything else is an error") {
  CHECK(kylin::parse_model_config(with(base_config(), "eos_token_id", json::parse("[151645, 151643]"))).eos_token_id ==
        std::vector<std::int64_t>{151645, 151643});
  CHECK(kylin::parse_model_config(with(base_config(), "eos_token_id", 7)).eos_token_id == std::vector<std::int64_t>{7});
  CHECK(kylin::parse_model_config(with(base_config(), "eos_token_id", nullptr)).eos_token_id.empty());
  CHECK(contains(config_error(with(base_config(), "eos_token_id", "2")), "eos_token_id: must be an integer or a list"));
  CHECK(contains(config_error(with(base_config(), "eos_token_id", json::parse("[1, \"x\"]"))), "eos_token_id"));
  CHECK(contains(config_error(with(base_config(), "eos_token_id", -3)), "eos_token_id"));
}

TEST_CASE("load_model_config names the file for a missing or malformed config.json") {
  TempDir dir;
  CHECK(contains(error_text([&] { kylin::load_model_config(dir.path()); }), (dir / "config.json").string() + ": missing"));
  write_file(dir / "config.json", std::string_view("{\"model_type\": "));
  const auto msg = error_text([&] { kylin::load_model_config(dir.path()); });
  CHECK(contains(msg, std::string("[kylin.config] ") + (dir / "config.json").string() + ": invalid JSON"));
  write_file(dir / "config.json", std::string_view("{\"model_type\": \"qwen3\"}"));
  CHECK(contains(error_text([&] { kylin::load_model_config(dir.path()); }),
                 (dir / "config.json").string() + ": hidden_size: missing required field"));
}

TEST_CASE("generation_config.json is read when present and null when absent") {
  TempDir dir;
  CHECK(kylin::load_generation_config(dir.path()).is_null());
  write_file(dir / "generation_config.json",
             std::string_view(R"({"eos_token_id": [151645, 151643], "temperature": 0.6, "top_k": 20})"));
  const auto g = kylin::load_generation_config(dir.path());
  REQUIRE(g.is_object());
  CHECK(g.find("eos_token_id")->as_array().size() == 2);
  CHECK(g.find("temperature")->as_double() == doctest::Approx(0.6));
  CHECK(g.find("top_k")->as_int() == 20);
  write_file(dir / "generation_config.json", std::string_view("{"));
  CHECK(contains(error_text([&] { kylin::load_generation_config(dir.path()); }), "generation_config.json: invalid JSON"));
}

TEST_CASE("the six test checkpoints' config.json files parse with their documented shapes") {
  const auto models = std::filesystem::path(KYLIN_TEST_DATA) / "models";
  const auto odd = kylin::load_model_config(models / "odd-qwen3-f16-sharded");
  CHECK(odd.hidden_size == 192);
  CHECK(odd.num_attention_heads == 6);
  CHECK(odd.num_key_value_heads == 3);
  CHECK(odd.head_dim == 48);
  CHECK(odd.intermediate_size == 520);
  CHECK(odd.vocab_size == 1531);
  CHECK_FALSE(odd.tie_word_embeddings);
  const auto qwen2 = kylin::load_model_config(models / "small-qwen2-f32");
  CHECK(qwen2.model_type == "qwen2");
  CHECK(qwen2.head_dim == 32);  // hidden 256 / 8 heads: no head_dim in the file
  CHECK(qwen2.attention_bias);
  const auto yarn = kylin::load_model_config(models / "tiny-qwen3-yarn");
  REQUIRE(yarn.rope_scaling.has_value());
  CHECK(yarn.rope_scaling->factor == 4.0);
  CHECK(yarn.rope_scaling->original_max_position_embeddings == 32768);
  const auto tiny = kylin::load_model_config(models / "tiny-qwen3-untied");
  CHECK(tiny.eos_token_id.empty());
  CHECK(tiny.max_position_embeddings == 2048);
  CHECK(kylin::load_model_config(models / "e2e-qwen3-fullvocab").vocab_size == 151936);
  CHECK(kylin::load_model_config(models / "small-qwen3").num_hidden_layers == 4);
}

TEST_CASE("qwen3_moe: expert fields by their HF names, the sparse-layer rule, and a named error for each bad field") {
  json::Value moe = with(base_config(), "model_type", "qwen3_moe");
  for (auto [k, v] : {std::pair<std::string, std::int64_t>{"num_experts", 8}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 64}})
    moe = with(moe, k, v);
  auto c = kylin::parse_model_config(moe);
  REQUIRE(c.moe);
  CHECK(c.moe->num_experts == 8);
  CHECK_FALSE(c.moe->norm_topk_prob);  // transformers' default
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) CHECK(c.is_sparse_layer(l));
  // decoder_sparse_step 2: layers 1, 3, ... sparse; mlp_only_layers takes layer 3 out
  c = kylin::parse_model_config(with(with(moe, "decoder_sparse_step", 2), "mlp_only_layers", json::parse("[3]")));
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) CHECK(c.is_sparse_layer(l) == (l == 1));
  CHECK_FALSE(kylin::parse_model_config(base_config()).moe);  // a dense Qwen3 reads no expert fields
  CHECK(config_error(without(moe, "num_experts")) == "[kylin.config] config.json: num_experts: missing required field");
  CHECK(config_error(with(moe, "num_experts_per_tok", 9)) ==
        "[kylin.config] config.json: num_experts_per_tok: value 9 outside [1, 8]");
  CHECK(config_error(with(moe, "mlp_only_layers", json::parse("[0, 99]"))) ==
        "[kylin.config] config.json: mlp_only_layers: entries must be layer indices in [0, " +
            std::to_string(c.num_hidden_layers) + ")");
  CHECK(config_error(with(moe, "decoder_sparse_step", 0)).starts_with("[kylin.config] config.json: decoder_sparse_step: value 0 outside"));
}
