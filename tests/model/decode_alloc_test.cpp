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


TEST_CASE("decoding a token allocates nothing (1 and 2 threads, every test architecture)") {
  for (const char* name : {"small-qwen3", "small-qwen2-f32", "odd-qwen3-f16-sharded"}) {
    for (int threads : {1, 2}) {
      CAPTURE(name);
      CAPTURE(threads);
      kylin::Model model = kylin::Model::load(std::string(KYLIN_TEST_DATA) + "/models/" + name, {.threads = threads, .max_chunk = 64});
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
