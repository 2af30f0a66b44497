// The decode hot path allocates nothing: every buffer (activations, kernel scratch, KV cache)
// is sized at load. Counts calls to the replaceable global operator new around forward().
#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "kylin/model/model.hpp"

namespace {
std::atomic<long> g_news{0};
}  // namespace

// GCC sees std::free in a replacement operator delete and, after inlining, pairs it with the
// new-expression of a library container: a false positive for replaced allocation functions.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

void* operator new(std::size_t size) {
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return ::operator new(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  g_news.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](std::size_t size, const std::nothrow_t& tag) noexcept { return ::operator new(size, tag); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

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
      const long before = g_news.load();
      for (int i = 0; i < 32; ++i) {
        model.forward(std::span<const int>(&token, 1), cache, logits);
        token = (token * 31 + 7) % 1000;
      }
      CHECK(g_news.load() == before);
      CHECK(cache.size() == 40);
    }
  }
}
