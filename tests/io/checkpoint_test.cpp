// Checkpoint: single-file and sharded model directories load every tensor by HF name without
// copying weights; broken directories are errors naming the file and the tensor.
#include "kylin/io/checkpoint.hpp"

#include <doctest/doctest.h>

#include "helpers.hpp"
#include "kylin/io/config.hpp"

using kylin::io::Checkpoint;
using namespace kylin::test;

namespace {

const std::filesystem::path models = std::filesystem::path(KYLIN_TEST_DATA) / "models";

// A shard holding F32 [1] tensors with the given names.
std::vector<std::byte> shard_with(const std::vector<std::string>& names) {
  std::string header = "{";
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i) header += ',';
    header += tensor_entry(names[i], "F32", "[1]", 4 * i, 4 * i + 4);
  }
  header += "}";
  return safetensors_bytes(header, pattern_bytes(4 * names.size()));
}

void write_index(const TempDir& dir, const std::vector<std::pair<std::string, std::string>>& map) {
  std::string text = "{\"metadata\":{},\"weight_map\":{";
  for (std::size_t i = 0; i < map.size(); ++i) {
    if (i) text += ',';
    text.append("\"").append(map[i].first).append("\":\"").append(map[i].second).append("\"");
  }
  text += "}}";
  write_file(dir / "model.safetensors.index.json", text);
}

struct Expected {
  const char* dir;
  std::size_t n_tensors;
  kylin::DType dtype;
  std::size_t n_files;
};

}  // namespace

TEST_CASE("all six test checkpoints load with the expected tensor counts, dtypes and HF shapes") {
  const Expected cases[] = {
      {"tiny-qwen3-untied", 25, kylin::DType::bf16, 1},  {"small-qwen3", 46, kylin::DType::bf16, 1},
      {"odd-qwen3-f16-sharded", 36, kylin::DType::f16, 3}, {"small-qwen2-f32", 26, kylin::DType::f32, 1},
      {"e2e-qwen3-fullvocab", 24, kylin::DType::bf16, 1}, {"tiny-qwen3-yarn", 24, kylin::DType::bf16, 1},
  };
  for (const auto& e : cases) {
    CAPTURE(e.dir);
    const Checkpoint ckpt(models / e.dir);
    const auto cfg = kylin::load_model_config(models / e.dir);
    const auto tensors = ckpt.tensors();
    CHECK(tensors.size() == e.n_tensors);
    CHECK(ckpt.files().size() == e.n_files);
    // Qwen3 layers carry 11 tensors (q/k norms), Qwen2 layers 12 (q/k/v biases); plus embedding,
    // final norm and an untied lm_head.
    const std::size_t per_layer = cfg.model_type == "qwen3" ? 11 : 12;
    CHECK(e.n_tensors == cfg.num_hidden_layers * per_layer + 2 + (cfg.tie_word_embeddings ? 0 : 1));
    for (const auto* t : tensors) CHECK(t->dtype == e.dtype);

    using Shape = std::vector<std::int64_t>;
    auto shape_of = [&](const std::string& name) {
      const auto* t = ckpt.find(name);
      REQUIRE_MESSAGE(t != nullptr, name);
      return t->shape;
    };
    CHECK(shape_of("model.embed_tokens.weight") == Shape{cfg.vocab_size, cfg.hidden_size});
    CHECK(shape_of("model.norm.weight") == Shape{cfg.hidden_size});
    const std::string l = std::string("model.layers.") + std::to_string(cfg.num_hidden_layers - 1) + ".";
    CHECK(shape_of(l + "self_attn.q_proj.weight") == Shape{cfg.q_dim(), cfg.hidden_size});
    CHECK(shape_of(l + "self_attn.k_proj.weight") == Shape{cfg.kv_dim(), cfg.hidden_size});
    CHECK(shape_of(l + "self_attn.v_proj.weight") == Shape{cfg.kv_dim(), cfg.hidden_size});
    CHECK(shape_of(l + "self_attn.o_proj.weight") == Shape{cfg.hidden_size, cfg.q_dim()});
    CHECK(shape_of(l + "mlp.up_proj.weight") == Shape{cfg.intermediate_size, cfg.hidden_size});
    CHECK(shape_of(l + "mlp.down_proj.weight") == Shape{cfg.hidden_size, cfg.intermediate_size});
    if (cfg.has_qk_norm()) CHECK(shape_of(l + "self_attn.q_norm.weight") == Shape{cfg.head_dim});
    if (cfg.attention_bias) CHECK(shape_of(l + "self_attn.q_proj.bias") == Shape{cfg.q_dim()});
    CHECK((ckpt.find("lm_head.weight") != nullptr) == !cfg.tie_word_embeddings);
  }
}

TEST_CASE("the loader copies no weights: every tensor's data lies inside its file's mapping") {
  for (const char* dir : {"tiny-qwen3-untied", "odd-qwen3-f16-sharded", "small-qwen2-f32", "small-qwen3"}) {
    CAPTURE(dir);
    const Checkpoint ckpt(models / dir);
    std::size_t checked = 0;
    for (const auto& file : ckpt.files()) {
      const std::byte* begin = file->mapping().data();
      const std::byte* end = begin + file->mapping().size();
      REQUIRE(begin != nullptr);
      for (const auto& t : file->tensors()) {
        CHECK(t.data >= begin);
        CHECK(t.data + t.nbytes <= end);
        ++checked;
      }
    }
    CHECK(checked == ckpt.tensors().size());
  }
}

TEST_CASE("tiny-qwen3-untied stores tensors out of offset order and still loads them at their offsets") {
  const Checkpoint ckpt(models / "tiny-qwen3-untied");
  const auto& tensors = ckpt.files().front()->tensors();
  bool out_of_order = false;
  for (std::size_t i = 1; i < tensors.size(); ++i) out_of_order |= tensors[i].offset < tensors[i - 1].offset;
  CHECK(out_of_order);
  // Each view starts at data-section start + its own offset.
  const std::byte* section = tensors.front().data - tensors.front().offset;
  for (const auto& t : tensors) CHECK(t.data == section + t.offset);
}

TEST_CASE("the sharded F16 checkpoint resolves every weight_map entry to its shard") {
  const Checkpoint ckpt(models / "odd-qwen3-f16-sharded");
  const auto index = kylin::json::parse(kylin::io::read_text_file(models / "odd-qwen3-f16-sharded/model.safetensors.index.json"));
  for (const auto& [name, shard] : index.find("weight_map")->as_object()) {
    const auto* t = ckpt.find(name);
    REQUIRE(t != nullptr);
    CHECK(std::filesystem::path(*t->file).filename() == shard.as_string());
  }
}

TEST_CASE("a directory that does not exist or holds no safetensors is an error naming it") {
  TempDir dir;
  CHECK(contains(error_text([&] { Checkpoint c(dir / "nope"); }), (dir / "nope").string() + ": not a directory"));
  CHECK(contains(error_text([&] { Checkpoint c(dir.path()); }), "no model.safetensors or model.safetensors.index.json"));
}

TEST_CASE("the same tensor name in two shards is refused, naming both files") {
  TempDir dir;
  write_file(dir / "a.safetensors", shard_with({"x", "dup"}));
  write_file(dir / "b.safetensors", shard_with({"dup", "y"}));
  write_index(dir, {{"x", "a.safetensors"}, {"dup", "a.safetensors"}, {"y", "b.safetensors"}});
  const auto msg = error_text([&] { Checkpoint c(dir.path()); });
  CHECK(contains(msg, (dir / "b.safetensors").string() + ": dup: duplicate tensor name"));
  CHECK(contains(msg, std::string("also in ") + (dir / "a.safetensors").string()));
}

TEST_CASE("a shard listed in the index but missing from the directory is refused, naming it") {
  TempDir dir;
  write_file(dir / "a.safetensors", shard_with({"x"}));
  write_index(dir, {{"x", "a.safetensors"}, {"y", "gone.safetensors"}});
  const auto msg = error_text([&] { Checkpoint c(dir.path()); });
  CHECK(contains(msg, "model.safetensors.index.json"));
  CHECK(contains(msg, "shard \"gone.safetensors\" is listed in weight_map but missing"));
}

TEST_CASE("a tensor the index names but its shard lacks is refused, naming the tensor and shard") {
  TempDir dir;
  write_file(dir / "a.safetensors", shard_with({"x"}));
  write_index(dir, {{"x", "a.safetensors"}, {"model.norm.weight", "a.safetensors"}});
  const auto msg = error_text([&] { Checkpoint c(dir.path()); });
  CHECK(contains(msg, "model.safetensors.index.json: model.norm.weight"));
  CHECK(contains(msg, "weight_map names shard \"a.safetensors\" but the shard lacks this tensor"));
}

TEST_CASE("a weight_map that escapes the directory or is not an object is refused") {
  TempDir dir;
  write_index(dir, {{"x", "../a.safetensors"}});
  CHECK(contains(error_text([&] { Checkpoint c(dir.path()); }), "must be a plain file name"));
  write_file(dir / "model.safetensors.index.json", std::string_view("{\"weight_map\": []}"));
  CHECK(contains(error_text([&] { Checkpoint c(dir.path()); }), "missing object \"weight_map\""));
  write_file(dir / "model.safetensors.index.json", std::string_view("{\"weight_map\": {"));
  CHECK(contains(error_text([&] { Checkpoint c(dir.path()); }), "invalid JSON"));
}

TEST_CASE("a broken shard inside a checkpoint is reported with the shard's path and the tensor") {
  TempDir dir;
  write_file(dir / "model.safetensors",
             safetensors_bytes(std::string("{") + tensor_entry("model.norm.weight", "F32", "[4]", 0, 12) + "}", pattern_bytes(12)));
  const auto msg = error_text([&] { Checkpoint c(dir.path()); });
  CHECK(contains(msg, (dir / "model.safetensors").string() + ": model.norm.weight: shape [4] x F32 needs 16 bytes"));
}
