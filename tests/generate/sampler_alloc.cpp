// The sampler allocates nothing per token: every scratch buffer is sized at construction.
// Counts calls to the replaceable global operator new (malloc-backed) around sample().
#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <random>
#include <vector>

#include "common/alloc_counter.hpp"
#include "kylin/generate/sampler.hpp"


TEST_CASE("Sampler: no heap allocation per token on any path (greedy, top-k, top-p, min-p, penalties, sampleable ids)") {
  constexpr std::size_t kVocab = 20000;
  {  // the counter is live
    const long before = kylin::test::allocations();
    void* probe = ::operator new(64);
    ::operator delete(probe);
    CHECK(kylin::test::allocations() == before + 1);
  }
  std::mt19937 gen(5);  // test data only
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> row(kVocab), logits(kVocab);
  for (float& l : row) l = normal(gen);
  std::vector<int> prompt(2000), generated(500);
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int>(i * 7 % kVocab);
  for (std::size_t i = 0; i < generated.size(); ++i) generated[i] = static_cast<int>(i * 3 % 50);
  struct Case {
    bool greedy;
    int top_k;
    float top_p, min_p, repetition;
  };
  for (const Case c : {Case{true, 0, 1.0f, 0.0f, 1.0f}, Case{false, 20, 0.95f, 0.0f, 1.0f},
                       Case{false, 0, 0.9f, 0.05f, 1.0f}, Case{false, 0, 1.0f, 0.0f, 1.0f},
                       Case{false, 0, 1.0f, 0.1f, 1.2f}, Case{false, 5000, 0.5f, 0.0f, 1.1f}}) {
    kylin::SamplingParams p;
    p.greedy = c.greedy;
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    p.repetition_penalty = c.repetition;
    p.frequency_penalty = c.repetition != 1.0f ? 0.2f : 0.0f;
    p.seed = 3;
    // Every id, or a tokenizer's: a prefix of the row with holes (the row is cut and masked).
    for (const kylin::SampleableIds& ids : {kylin::SampleableIds{}, kylin::SampleableIds(kVocab - 300, {5, 77, 19000})}) {
      kylin::Sampler sampler(kVocab, p, ids);
      const long before = kylin::test::allocations();
      for (int step = 0; step < 20; ++step) {
        logits = row;  // same size: no allocation
        sampler.sample(logits, prompt, generated);
      }
      const long after = kylin::test::allocations();  // before INFO, whose context stack may allocate
      INFO("greedy " << c.greedy << " top_k " << c.top_k << " top_p " << c.top_p << " min_p " << c.min_p
                     << " holes " << ids.holes().size());
      CHECK(after == before);
    }
  }
}
