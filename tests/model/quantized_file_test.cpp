// `kylin quantize` and loading what it wrote: the saved Q8_0 or Q4_0 checkpoint gives bit for bit
// the logits of quantizing at load, is smaller, and a damaged one is refused naming the tensor.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/process.hpp"
#include "common/temp_dir.hpp"
#include "kylin/io/safetensors_writer.hpp"
#include "kylin/model/model.hpp"

namespace quantized_file_test {

const std::string data = KYLIN_TEST_DATA;
namespace fs = std::filesystem;

std::vector<float> logits(kylin::Model& m, const std::vector<int>& tokens) {
  auto cache = m.new_cache(64);
  std::vector<float> out(tokens.size() * static_cast<std::size_t>(m.vocab_size()));
  m.forward(tokens, cache, out, kylin::Positions::all);
  return out;
}

std::size_t safetensors_bytes(const fs::path& dir) {
  std::size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") n += fs::file_size(e.path());
  return n;
}

TEST_CASE("kylin quantize saves what --weights q8|q4 makes at load: same logits bit for bit, smaller file, config and tokenizer copied") {
  // tied (LM head and embedding one quantized tensor), untied, a sharded F32 MoE whose experts stay stored,
  // and the hybrids: Qwen3.5 dense, Qwen3.5-MoE's fused experts (saved per expert), Qwen3-Next's fused projections
  for (const char* format : {"q8", "q4"})
    for (const char* name : {"small-qwen3", "tiny-qwen3-untied", "odd-qwen3-moe-f32-sharded", "tiny-qwen35", "tiny-qwen35-moe", "tiny-qwen3-next"}) {
      CAPTURE(format);
      CAPTURE(name);
      kylin::test::TempDir dir;
      const fs::path in = data + "/models/" + name, out = dir.path() / format;
      const auto run = kylin::test::run_shell(kylin::test::kylin_bin + " quantize --model " + in.string() + " --weights " + format +
                                              " --out " + out.string() + " -t 2 2>&1");
      REQUIRE_MESSAGE(run.exit_code == 0, run.out);
      CHECK(fs::exists(out / "config.json"));
      CHECK(safetensors_bytes(out) < safetensors_bytes(in) * (format == std::string("q8") ? 0.75 : 0.72));  // MoE experts stay as stored
      kylin::Model at_load = kylin::Model::load(in, {.threads = 2, .weights = *kylin::parse_weight_format(format)});
      kylin::Model saved = kylin::Model::load(out, {.threads = 2});
      CHECK(saved.quantized().bytes() == 0);  // mapped as saved, nothing quantized again
      const std::vector<int> tokens{3, 1, 4, 1, 5, 9, 2, 6};
      CHECK(logits(saved, tokens) == logits(at_load, tokens));
    }
}

TEST_CASE("a saved Q8_0 or Q4_0 tensor without its scales, or with scales of the wrong shape, is refused naming the tensor") {
  for (const char* format : {"q8", "q4"}) {
    CAPTURE(format);
    kylin::test::TempDir dir;
    const fs::path saved = dir.path() / format;
    REQUIRE(kylin::test::run_shell(kylin::test::kylin_bin + " quantize --model " + data + "/models/tiny-qwen3-untied --weights " + format +
                                   " --out " + saved.string() + " 2>&1")
                .exit_code == 0);
    const std::string victim = "model.layers.1.mlp.up_proj.weight";
    const std::string scales = format == std::string("q8") ? kylin::q8_scale_name(victim) : kylin::q4_scale_name(victim);
    for (const bool drop : {true, false}) {
      CAPTURE(drop);
      const fs::path bad = dir.path() / (drop ? "dropped" : "reshaped");
      fs::create_directories(bad);
      fs::copy_file(saved / "config.json", bad / "config.json");
      {
        const kylin::io::Checkpoint ckpt(saved);
        std::vector<kylin::io::TensorSpec> specs;
        for (const auto* t : ckpt.tensors()) {
          if (t->name == scales && drop) continue;
          kylin::io::TensorSpec s{t->name, t->dtype, t->shape};
          if (t->name == scales) s.shape = {t->shape[0] * t->shape[1]};  // same bytes, flat
          specs.push_back(s);
        }
        kylin::io::SafetensorsWriter w(bad / "model.safetensors", specs);
        for (const auto* t : ckpt.tensors())
          if (!(t->name == scales && drop)) w.write(t->name, std::span<const std::byte>(t->data, t->nbytes));
        w.close();
      }
      try {
        (void)kylin::Model::load(bad, {.threads = 1});
        FAIL("loaded a damaged quantized checkpoint");
      } catch (const kylin::Error& e) {
        const std::string what = e.what();
        CHECK(what.find(victim) != std::string::npos);
        CHECK(what.find(drop ? "without its scales" : "must be F16 [128,2], got F16 [256]") != std::string::npos);
      }
      const auto inspected = kylin::test::run_shell(kylin::test::kylin_bin + " inspect --model " + bad.string() + " 2>&1");
      CHECK(inspected.exit_code == 1);
      CHECK(inspected.out.find(victim) != std::string::npos);
    }
  }
}

}  // namespace quantized_file_test
