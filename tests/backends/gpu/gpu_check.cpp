// kylin-gpu-check (scripts/gpu-check.sh, KYLIN_CUDA builds): every reference checkpoint on
// --backend cuda against the float64 references, with the CPU's bars (<= 1e-3 relative L2 with an
// f32 KV cache, greedy tokens identical). Exit 0 only if all pass; needs an NVIDIA GPU.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "common/reference.hpp"
#include "kylin/model/model.hpp"

namespace {

constexpr double bar = 1e-3;
const char* const models[] = {"tiny-qwen3-untied", "small-qwen3",        "odd-qwen3-f16-sharded", "small-qwen2-f32",
                              "e2e-qwen3-fullvocab", "tiny-qwen3-yarn", "tiny-qwen3-moe",        "odd-qwen3-moe-f32-sharded"};

// Worst relative L2 over the checkpoint's reference rows; greedy_ok: every case's 12 greedy tokens.
bool check(const std::string& name, kylin::WeightFormat weights) {
  kylin::Model model = kylin::Model::load(kylin::test::data + "/models/" + name, {.backend = kylin::BackendKind::cuda, .weights = weights});
  const auto V = static_cast<std::size_t>(model.vocab_size());
  double worst = 0;
  bool greedy_ok = true;
  for (const kylin::test::Case& c : kylin::test::load_cases(name)) {
    auto cache = model.new_cache(256);
    std::vector<float> logits(c.logits.size() * V);
    model.forward(c.tokens, cache, logits, c.all_positions ? kylin::Positions::all : kylin::Positions::last);
    for (std::size_t r = 0; r < c.logits.size(); ++r) worst = kylin::test::worse(worst, kylin::test::relative_l2(logits.data() + r * V, c.logits[r]));
    greedy_ok = greedy_ok && kylin::test::greedy(model, cache, logits, 12) == c.greedy;
  }
  const bool exact = weights == kylin::WeightFormat::stored;
  const bool ok = !exact || (worst <= bar && greedy_ok);
  std::printf("%-28s %-6s worst relative L2 %.3g, greedy %s  %s\n", name.c_str(), std::string(kylin::weight_format_name(weights)).c_str(),
              worst, greedy_ok ? "identical" : "differs", exact ? (ok ? "ok" : "FAIL") : "(quantized: reported, no bar)");
  return ok;
}

}  // namespace

int main() {
  try {
    bool all = true;
    for (const char* name : models)
      for (auto weights : {kylin::WeightFormat::stored, kylin::WeightFormat::q8, kylin::WeightFormat::q4}) all = check(name, weights) && all;
    std::printf("gpu-check: %s\n", all ? "all checkpoints pass" : "FAILED");
    return all ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kylin-gpu-check: %s\n", e.what());
    return 1;
  }
}
