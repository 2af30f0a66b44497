// `kylin inspect` prints a model directory's config, preset match and tensor table from the built
// binary; a bad directory exits non-zero with the one-line error. A missing binary fails the test.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "common/process.hpp"
#include "helpers.hpp"
#include "kylin/io/checkpoint.hpp"

using namespace kylin::test;

namespace {

using kylin::test::kylin_bin;
const std::filesystem::path models = std::filesystem::path(KYLIN_TEST_DATA) / "models";

using Run = kylin::test::ProcessResult;

Run run_kylin(const std::string& args) { return kylin::test::run_shell("'" + kylin_bin + "' " + args + " 2>&1"); }

std::string inspect(const std::filesystem::path& dir) { return std::string("inspect --model '") + dir.string() + "'"; }

}  // namespace

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
