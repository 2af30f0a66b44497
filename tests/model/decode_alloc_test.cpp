// The decode hot path allocates nothing: every buffer (activations, kernel scratch, KV cache)
// is sized at load. Counts calls to the replaceable global operator new around forward().
#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "common/alloc_counter.hpp"
#include "kylin/model/model.hpp"


TEST_CASE("decoding a token allocates nothing (1 and 2 threads, every test architecture, stored, q8 and q4 weights, packed)") {
  for (const char* name : {"small-qwen3", "small-qwen2-f32", "odd-qwen3-f16-sharded"}) {
    for (int threads : {1, 2})
      for (kylin::WeightFormat weights : {kylin::WeightFormat::stored, kylin::WeightFormat::q8, kylin::WeightFormat::q4}) {
        CAPTURE(name);
        CAPTURE(threads);
        CAPTURE(kylin::weight_format_name(weights));
        kylin::Model model =
            kylin::Model::load(std::string(KYLIN_TEST_DATA) + "/models/" + name, {.threads = threads, .max_pass_rows = 64, .weights = weights});
        auto cache = model.new_cache(128);
        std::vector<float> logits(static_cast<std::size_t>(model.vocab_size()));
        const std::vector<int> prompt{1, 2, 3, 4, 5, 6, 7, 8};
        model.forward(prompt, cache, logits);
        int token = 9;
        const long before = kylin::test::allocations();
        for (int i = 0; i < 32; ++i) {
          model.forward(std::span<const int>(&token, 1), cache, logits);
          token = (token * 31 + 7) % 1000;
        }
        CHECK(kylin::test::allocations() == before);
        CHECK(cache.size() == 40);
      }
  }
}

TEST_CASE("decoding 1, 3 and 8 sequences together allocates nothing per step (batched passes reuse every buffer), packed and stored weights") {
  for (kylin::WeightLayout layout : {kylin::WeightLayout::packed, kylin::WeightLayout::stored}) {
    kylin::Model model =
        kylin::Model::load(std::string(KYLIN_TEST_DATA) + "/models/small-qwen3", {.threads = 2, .max_pass_rows = 64, .weight_layout = layout});
    const auto V = static_cast<std::size_t>(model.vocab_size());
    for (std::size_t B : {1, 3, 8}) {
      CAPTURE(kylin::weight_layout_name(layout));
      CAPTURE(B);
      std::vector<kylin::KVCache> caches;
      std::vector<std::vector<float>> logits(B, std::vector<float>(V));
      std::vector<int> tokens(B, 1);
      std::vector<kylin::SequenceInput> inputs;
      for (std::size_t i = 0; i < B; ++i) caches.push_back(model.new_cache(64));
      for (std::size_t i = 0; i < B; ++i) inputs.push_back({std::span<const int>(&tokens[i], 1), caches[i], {.logits = logits[i]}});
      model.forward(inputs);  // the first call may size the per-batch bookkeeping
      const long before = kylin::test::allocations();
      for (int step = 0; step < 16; ++step) {
        for (std::size_t i = 0; i < B; ++i) tokens[i] = (tokens[i] * 31 + 7 + static_cast<int>(i)) % 1000;
        model.forward(inputs);
      }
      CHECK(kylin::test::allocations() == before);
      CHECK(caches.back().size() == 17);
    }
  }
}
