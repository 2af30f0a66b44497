// ExpertMemory::mapped (--experts mapped): the routed experts are read in place from the mapped
// checkpoint, as stored, while the other weights are quantized or packed as asked; the logits are
// those of the same kernels over held weights, and what cannot read mapped experts is refused.
#include <doctest/doctest.h>

#include <span>
#include <string>
#include <vector>

#include "common/process.hpp"
#include "common/reference.hpp"
#include "common/temp_dir.hpp"
#include "kylin/model/model.hpp"

namespace mapped_experts_test {

const std::string data = KYLIN_TEST_DATA;
const char* const moe_models[] = {"tiny-qwen3-moe", "tiny-qwen35-moe", "tiny-qwen3-next"};

std::vector<float> all_logits(kylin::Model& m) {
  const std::vector<int> tokens{3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
  auto cache = m.new_cache(32);
  std::vector<float> out(tokens.size() * static_cast<std::size_t>(m.vocab_size()));
  m.forward(tokens, cache, out, kylin::Positions::all);
  return out;
}

// Whether `m` reads its bytes from inside one of the checkpoint's tensors (the mapped file).
bool in_checkpoint(const kylin::Model& model, const kylin::MatRef& m) {
  for (const auto* t : model.checkpoint().tensors())
    if (static_cast<const std::byte*>(m.data) >= t->data && static_cast<const std::byte*>(m.data) < t->data + t->nbytes) return true;
  return false;
}

// Every routed expert matrix of `model`, and whether all of them are row-major views of the checkpoint.
bool experts_in_place(const kylin::Model& model) {
  int seen = 0;
  for (const kylin::LayerWeights& L : model.weights().layers)
    for (const kylin::ExpertWeights& x : L.experts)
      for (const kylin::MatRef* m : {&x.gate_proj, &x.up_proj, &x.down_proj}) {
        if (m->layout != kylin::kernels::Layout::rows || !in_checkpoint(model, *m)) return false;
        ++seen;
      }
  return seen > 0;
}

TEST_CASE("mapped experts stay in the checkpoint while the rest is packed; logits as with the same layouts held") {
  for (const char* name : moe_models) {
    CAPTURE(name);
    const std::string dir = data + "/models/" + name;
    constexpr auto stored = kylin::WeightLayout::stored;
    kylin::Model mapped = kylin::Model::load(dir, {.threads = 2, .experts = kylin::ExpertMemory::mapped});
    kylin::Model mapped_stored = kylin::Model::load(dir, {.threads = 2, .weight_layout = stored, .experts = kylin::ExpertMemory::mapped});
    kylin::Model held = kylin::Model::load(dir, {.threads = 2});
    kylin::Model held_stored = kylin::Model::load(dir, {.threads = 2, .weight_layout = stored});
    CHECK(mapped.expert_memory() == kylin::ExpertMemory::mapped);
    CHECK(held.expert_memory() == kylin::ExpertMemory::held);
    CHECK(experts_in_place(mapped));
    CHECK(!experts_in_place(held));
    CHECK(mapped.weight_layout() == kylin::WeightLayout::packed);  // attention, DeltaNet, router and shared expert packed
    CHECK(mapped.weights().layers.back().router.layout != kylin::kernels::Layout::rows);
    // row-major everywhere: the same kernels over the same bytes
    CHECK(all_logits(mapped_stored) == all_logits(held_stored));
    // experts row-major beside packed weights: the sums of the packed kernels in another order (forward_test.cpp)
    const auto V = static_cast<std::size_t>(held.vocab_size());
    const std::vector<float> a = all_logits(mapped), b = all_logits(held);
    for (std::size_t r = 0; r < a.size() / V; ++r) CHECK(kylin::test::relative_l2(std::span(a).subspan(r * V, V), std::span(b).subspan(r * V, V)) < 1e-5);
  }
}

TEST_CASE("mapped experts of a `kylin quantize`d checkpoint are its Q8_0/Q4_0 tensors in place: logits bit for bit those held") {
  for (const char* format : {"q8", "q4"})
    for (const char* name : moe_models) {
      CAPTURE(format);
      CAPTURE(name);
      kylin::test::TempDir tmp;
      const std::string out = (tmp.path() / format).string();
      const auto run = kylin::test::run_shell(kylin::test::kylin_bin + " quantize --model " + data + "/models/" + name + " --weights " + format +
                                              " --out " + out + " -t 2 2>&1");
      REQUIRE_MESSAGE(run.exit_code == 0, run.out);
      kylin::Model mapped = kylin::Model::load(out, {.threads = 2, .experts = kylin::ExpertMemory::mapped});
      kylin::Model held = kylin::Model::load(out, {.threads = 2});
      CHECK(experts_in_place(mapped));
      CHECK(kylin::kernels::is_quantized(mapped.weights().layers.back().experts.front().gate_proj.dtype));
      CHECK(all_logits(mapped) == all_logits(held));
      // quantizing at load leaves mapped experts as stored: only the other projections are quantized
      kylin::Model at_load = kylin::Model::load(data + "/models/" + name, {.threads = 2, .weights = *kylin::parse_weight_format(format),
                                                                          .experts = kylin::ExpertMemory::mapped});
      CHECK(experts_in_place(at_load));
      CHECK(!kylin::kernels::is_quantized(at_load.weights().layers.back().experts.front().gate_proj.dtype));
      CHECK(at_load.quantized().bytes() > 0);
    }
}

TEST_CASE("mapped experts from a copied checkpoint (--no-mmap) are a request error naming both options") {
  try {
    kylin::Model::load(data + "/models/tiny-qwen3-moe", {.threads = 2, .weight_layout = kylin::WeightLayout::stored,
                                                         .checkpoint_memory = kylin::io::FileMemory::copied, .experts = kylin::ExpertMemory::mapped});
    FAIL("loaded");
  } catch (const kylin::Error& e) {
    const std::string what = e.what();
    CHECK(what.find("[kylin.request]") != std::string::npos);
    CHECK(what.find("--experts mapped") != std::string::npos);
    CHECK(what.find("--no-mmap") != std::string::npos);
  }
}

TEST_CASE("a dense model loads with mapped experts as it does without: nothing to map") {
  kylin::Model m = kylin::Model::load(data + "/models/small-qwen3", {.threads = 2, .experts = kylin::ExpertMemory::mapped});
  kylin::Model held = kylin::Model::load(data + "/models/small-qwen3", {.threads = 2});
  CHECK(m.expert_memory() == kylin::ExpertMemory::held);
  CHECK(all_logits(m) == all_logits(held));
}

}  // namespace mapped_experts_test
