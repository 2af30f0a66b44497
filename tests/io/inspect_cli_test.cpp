// `kylin inspect` prints a model directory's config, preset match and tensor table from the built
// binary, then the binder's verdict on the weights (check_weights): exit 1 when loading would fail,
// 0 with a warning for tensors nothing binds. A bad directory exits 1 with the one-line error.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "common/process.hpp"
#include "helpers.hpp"
#include "kylin/io/checkpoint.hpp"
#include "kylin/io/safetensors_writer.hpp"
#include "kylin/model/weights.hpp"

using namespace kylin::test;

namespace inspect_cli_test {

using kylin::test::kylin_bin;
const std::filesystem::path models = std::filesystem::path(KYLIN_TEST_DATA) / "models";

using Run = kylin::test::ProcessResult;

Run run_kylin(const std::string& args) { return kylin::test::run_shell("'" + kylin_bin + "' " + args + " 2>&1"); }

std::string inspect(const std::filesystem::path& dir) { return std::string("inspect --model '") + dir.string() + "'"; }

using Specs = std::vector<kylin::io::TensorSpec>;

// Writes `src`'s config.json and its tensors, as `edit` changed their list, into `dst` as one
// model.safetensors: a tensor keeps its source bytes when its byte size is unchanged (so a
// transposed shape reuses them), an added one is zeros.
void copy_checkpoint(const std::filesystem::path& src, const std::filesystem::path& dst, const std::function<void(Specs&)>& edit) {
  std::filesystem::copy_file(src / "config.json", dst / "config.json");
  const kylin::io::Checkpoint ckpt(src);
  Specs specs;
  for (const auto* t : ckpt.tensors()) specs.push_back({t->name, t->dtype, t->shape});
  edit(specs);
  kylin::io::SafetensorsWriter writer(dst / "model.safetensors", specs);
  for (const auto& spec : specs) {
    const auto* t = ckpt.find(spec.name);
    if (t && t->nbytes == spec.nbytes()) {
      writer.write(spec.name, std::span<const std::byte>(t->data, t->nbytes));
    } else {
      const std::vector<std::byte> zeros(spec.nbytes());
      writer.write(spec.name, std::span<const std::byte>(zeros));
    }
  }
  writer.close();
}

kylin::io::TensorSpec& spec_named(Specs& specs, const std::string& name) {
  for (auto& s : specs)
    if (s.name == name) return s;
  FAIL("no tensor " << name);
  return specs.front();
}

// The text after the tensor table ("total: ..." line), where inspect reports the weight check.
std::string after_table(const std::string& out) {
  const auto total = out.find("\ntotal: ");
  REQUIRE(total != std::string::npos);
  return out.substr(out.find('\n', total + 1) + 1);
}

const auto tiny = models / "tiny-qwen3-untied";  // hidden 64, intermediate 128, 2 layers, untied


TEST_CASE("kylin inspect lists config fields, the preset line and one row per tensor with dtype, shape and bytes") {
  const auto dir = models / "odd-qwen3-f16-sharded";
  const Run r = run_kylin(inspect(dir));
  CHECK(r.exit_code == 0);
  CHECK(contains(r.out, "model_type                qwen3\n"));
  CHECK(contains(r.out, "hidden_size               192\n"));
  CHECK(contains(r.out, "num_key_value_heads       3\n"));
  CHECK(contains(r.out, "head_dim                  48\n"));
  CHECK(contains(r.out, "rope_theta                1000000.0\n"));
  CHECK(contains(r.out, "eos_token_id              [151645]\n"));
  // Untied like Qwen3-8B, so that preset differs in the fewest fields.
  CHECK(contains(r.out, "descriptor: no preset matched (closest: Qwen3-8B; differs in: hidden_size=192 (preset 4096)"));
  // Every tensor of the checkpoint appears with its dtype, shape and byte count.
  const kylin::io::Checkpoint ckpt(dir);
  for (const auto* t : ckpt.tensors()) {
    CAPTURE(t->name);
    const auto line_start = r.out.find(std::string("  ") + t->name + " ");
    REQUIRE(line_start != std::string::npos);
    const auto line = r.out.substr(line_start, r.out.find('\n', line_start) - line_start);
    CHECK(contains(line, " F16 "));
    CHECK(contains(line, std::string(" ") + kylin::io::shape_string(t->shape) + " "));
    CHECK(line.ends_with(std::string(" ") + std::to_string(t->nbytes)));
  }
  CHECK(contains(r.out, "total: 36 tensors in 3 file(s), 1985760 parameters, 3971520 bytes of tensor data"));
  CHECK(contains(r.out, "dtypes: F16 x36"));
  CHECK(after_table(r.out) == "weights: ok, every tensor the model binds is present with its shape and a supported dtype\n");
}

TEST_CASE("kylin inspect shows rope_scaling, Qwen2 biases and generation_config.json when present") {
  const Run yarn = run_kylin(inspect(models / "tiny-qwen3-yarn"));
  CHECK(yarn.exit_code == 0);
  CHECK(contains(yarn.out, "rope_scaling              yarn factor=4.0 original_max_position_embeddings=32768\n"));
  CHECK(contains(yarn.out, "generation_config.json: (absent)"));
  const Run qwen2 = run_kylin(inspect(models / "small-qwen2-f32"));
  CHECK(qwen2.exit_code == 0);
  CHECK(contains(qwen2.out, "attention_bias            true\n"));
  CHECK(contains(qwen2.out, "model.layers.0.self_attn.q_proj.bias"));
  CHECK(contains(qwen2.out, "(closest: Qwen2.5-"));

  TempDir dir;  // a copy of the tiny model plus a generation_config.json
  for (const char* f : {"config.json", "model.safetensors"})
    std::filesystem::copy_file(models / "tiny-qwen3-untied" / f, dir / f);
  write_file(dir / "generation_config.json", std::string_view(R"({"temperature": 0.6, "top_k": 20})"));
  const Run gen = run_kylin(inspect(dir.path()));
  CHECK(gen.exit_code == 0);
  CHECK(contains(gen.out, R"(generation_config.json: {"temperature":0.6,"top_k":20})"));
  CHECK(contains(gen.out, "lm_head.weight"));
}

TEST_CASE("kylin inspect on a bad directory exits 1 with the one-line error text") {
  TempDir dir;
  const Run missing = run_kylin(inspect(dir / "nope"));
  CHECK(missing.exit_code == 1);
  CHECK(missing.out == std::string("kylin: error: [kylin.load] ") + (dir / "nope").string() + ": not a directory\n");

  const Run empty = run_kylin(inspect(dir.path()));
  CHECK(empty.exit_code == 1);
  CHECK(contains(empty.out, "no model.safetensors or model.safetensors.index.json"));

  write_file(dir / "model.safetensors", safetensors_bytes(std::string("{") + tensor_entry("w", "F32", "[3]", 0, 8) + "}",
                                                          pattern_bytes(8)));
  const Run broken = run_kylin(inspect(dir.path()));
  CHECK(broken.exit_code == 1);
  CHECK(broken.out == std::string("kylin: error: [kylin.load] ") + (dir / "model.safetensors").string() +
                          ": w: shape [3] x F32 needs 12 bytes, data_offsets span 8\n");

  write_file(dir / "model.safetensors", safetensors_bytes("{}"));
  const Run no_config = run_kylin(inspect(dir.path()));
  CHECK(no_config.exit_code == 1);
  CHECK(no_config.out == std::string("kylin: error: [kylin.config] ") + (dir / "config.json").string() + ": missing\n");
}

TEST_CASE("kylin inspect exits 1 on a transposed mlp.up_proj and names it with the expected and actual shape") {
  TempDir dir;
  copy_checkpoint(tiny, dir.path(), [](Specs& specs) {
    spec_named(specs, "model.layers.1.mlp.up_proj.weight").shape = {64, 128};  // stored [hidden, intermediate]
  });
  const Run r = run_kylin(inspect(dir.path()));
  CHECK(r.exit_code == 1);
  // The table still lists it as stored.
  const auto row = r.out.find("  model.layers.1.mlp.up_proj.weight ");
  REQUIRE(row != std::string::npos);
  CHECK(contains(r.out.substr(row, r.out.find('\n', row) - row), " BF16    [64,128] "));
  CHECK(after_table(r.out) ==
        "weights: 1 problem(s), loading would fail:\n"
        "  model.layers.1.mlp.up_proj.weight: expected [128,64], got [64,128]\n");
  // Loading fails on the same line: inspect and bind_weights share one binder.
  const kylin::io::Checkpoint ckpt(dir.path());
  const auto config = kylin::load_model_config(dir.path());
  CHECK(contains(error_text([&] { kylin::bind_weights(ckpt, config); }),
                 "1 tensor problem(s):\n  model.layers.1.mlp.up_proj.weight: expected [128,64], got [64,128]"));
}

TEST_CASE("kylin inspect reports every problem at once: missing tensors, wrong shapes and unsupported dtypes") {
  TempDir dir;
  copy_checkpoint(tiny, dir.path(), [](Specs& specs) {
    std::erase_if(specs, [](const auto& s) { return s.name == "model.norm.weight" || s.name == "lm_head.weight"; });
    spec_named(specs, "model.layers.0.self_attn.k_norm.weight").shape = {8};
    spec_named(specs, "model.layers.0.input_layernorm.weight").dtype = kylin::DType::i16;  // same bytes, not runnable
  });
  const Run r = run_kylin(inspect(dir.path()));
  CHECK(r.exit_code == 1);
  CHECK(after_table(r.out) ==
        "weights: 4 problem(s), loading would fail:\n"
        "  model.layers.0.input_layernorm.weight: dtype I16 is not supported (BF16, F16, F32 are)\n"
        "  model.layers.0.self_attn.k_norm.weight: expected [16], got [8]\n"
        "  model.norm.weight: missing\n"
        "  lm_head.weight: missing\n");  // untied: the embedding does not stand in for it
}

TEST_CASE("a tensor nothing binds is reported as unexpected but does not fail: loading ignores it, as transformers does") {
  TempDir dir;
  copy_checkpoint(tiny, dir.path(), [](Specs& specs) {
    specs.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", kylin::DType::f32, {8}});
    specs.push_back({"model.layers.0.self_attn.q_proj.bias", kylin::DType::bf16, {64}});  // a Qwen2 tensor in a Qwen3
  });
  const Run r = run_kylin(inspect(dir.path()));
  CHECK(r.exit_code == 0);
  CHECK(after_table(r.out) ==
        "weights: ok, every tensor the model binds is present with its shape and a supported dtype\n"
        "weights: 2 unexpected tensor(s), ignored by loading:\n"
        "  model.layers.0.self_attn.rotary_emb.inv_freq: unexpected (nothing binds it)\n"
        "  model.layers.0.self_attn.q_proj.bias: unexpected (nothing binds it)\n");
  const kylin::io::Checkpoint ckpt(dir.path());
  const auto config = kylin::load_model_config(dir.path());
  CHECK_NOTHROW(kylin::bind_weights(ckpt, config));
}

TEST_CASE("check_weights binds by the architecture: Qwen2 needs q/k/v biases and no q/k norms, Qwen3 the reverse") {
  for (const char* m : {"small-qwen2-f32", "small-qwen3", "odd-qwen3-f16-sharded", "tiny-qwen3-untied"}) {
    CAPTURE(m);
    const kylin::io::Checkpoint ckpt(models / m);
    const auto check = kylin::check_weights(ckpt, kylin::load_model_config(models / m));
    CHECK(check.loads());
    CHECK(check.problems.empty());
    CHECK(check.unexpected.empty());  // every tensor of a good checkpoint is bound
  }
  // A Qwen2 checkpoint read as Qwen3 lacks the q/k norms and has three unbound biases per layer.
  const kylin::io::Checkpoint qwen2(models / "small-qwen2-f32");
  auto as_qwen3 = kylin::load_model_config(models / "small-qwen2-f32");
  as_qwen3.model_type = "qwen3";
  as_qwen3.attention_bias = false;
  const auto check = kylin::check_weights(qwen2, as_qwen3);
  CHECK_FALSE(check.loads());
  CHECK(check.problems.size() == static_cast<std::size_t>(2 * as_qwen3.num_hidden_layers));
  CHECK(check.problems.front() == "model.layers.0.self_attn.q_norm.weight: missing");
  CHECK(check.unexpected.size() == static_cast<std::size_t>(3 * as_qwen3.num_hidden_layers));
  CHECK(contains(check.unexpected.front(), "self_attn."));
  CHECK(contains(check.unexpected.front(), "_proj.bias"));
}

TEST_CASE("a Qwen3 config with attention_bias true loads without bias tensors and refuses any it has, naming it") {
  TempDir dir;
  copy_checkpoint(tiny, dir.path(), [](Specs& specs) { specs.push_back({"model.layers.1.self_attn.o_proj.bias", kylin::DType::bf16, {64}}); });
  auto config = kylin::load_model_config(dir.path());
  config.attention_bias = true;
  const kylin::io::Checkpoint ckpt(dir.path());
  const auto check = kylin::check_weights(ckpt, config);
  CHECK(check.problems == std::vector<std::string>{"model.layers.1.self_attn.o_proj.bias: qwen3 attention with biases is not supported"});
  CHECK(check.unexpected.empty());
  const kylin::io::Checkpoint plain(models / "tiny-qwen3-untied");
  CHECK(kylin::check_weights(plain, config).loads());  // absent biases are zero, as transformers initialises them
}

}  // namespace inspect_cli_test
