// PassRecording and GraphCache (backends/cuda/pass_recording.hpp): which passes the CUDA runtime
// replays as a graph. Two decode steps must record equal operations; any difference in a kernel's
// arguments, a launch shape, a copy or the presence of a GEMM must not match.
#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "kylin/backends/cuda/kernels.hpp"
#include "kylin/backends/cuda/pass_recording.hpp"

namespace pass_recording_test {

using namespace kylin;
using cuda::PassRecording;

int entry_a, entry_b;  // stand-ins for two kernels' device entry points

// A decode step's operations: a staged copy of its token id, the embedding reading it, an add.
PassRecording step(const int* ids, std::int64_t n, const void* staged) {
  PassRecording r;
  r.copy(const_cast<int*>(ids), staged, sizeof(int));
  r.launch(&entry_a, cuda::EmbedKernel{.table = nullptr, .dtype = DType::bf16, .rows = 151936, .cols = 1024, .ids = ids, .n = 1, .out = nullptr});
  r.launch(&entry_b, cuda::AddKernel{.acc = nullptr, .x = nullptr, .n = n});
  return r;
}

TEST_CASE("two steps recording the same operations match, whatever the padding bytes of their kernel arguments") {
  int slot = 0;
  unsigned char staging[16];
  const PassRecording a = step(&slot, 1024, staging);
  // The same kernel arguments, built in memory whose padding holds other bytes.
  PassRecording b;
  b.copy(&slot, staging, sizeof(int));
  alignas(cuda::EmbedKernel) unsigned char raw[sizeof(cuda::EmbedKernel)];
  std::memset(raw, 0x5A, sizeof raw);
  auto* k = new (raw) cuda::EmbedKernel;
  k->table = nullptr, k->dtype = DType::bf16, k->rows = 151936, k->cols = 1024, k->ids = &slot, k->n = 1, k->out = nullptr;
  b.launch(&entry_a, *k);
  b.launch(&entry_b, cuda::AddKernel{.acc = nullptr, .x = nullptr, .n = 1024});
  CHECK(a == b);
  CHECK(a.graphable());
}

TEST_CASE("a different argument, kernel, copy or launch shape does not match") {
  int slot = 0, other = 0;
  unsigned char staging[32];
  const PassRecording a = step(&slot, 1024, staging);
  CHECK_FALSE(a == step(&slot, 1025, staging));      // an argument (and with it the grid)
  CHECK_FALSE(a == step(&other, 1024, staging));     // the device ids the kernel reads
  CHECK_FALSE(a == step(&slot, 1024, staging + 8));  // the staged source of a copy
  PassRecording shorter = step(&slot, 1024, staging);
  shorter.launch(&entry_a, cuda::AddKernel{.acc = nullptr, .x = nullptr, .n = 1024});
  CHECK_FALSE(a == shorter);
  PassRecording swapped;  // the same arguments under another kernel's entry point
  swapped.copy(&slot, staging, sizeof(int));
  swapped.launch(&entry_a, cuda::EmbedKernel{.table = nullptr, .dtype = DType::bf16, .rows = 151936, .cols = 1024, .ids = &slot, .n = 1, .out = nullptr});
  swapped.launch(&entry_a, cuda::AddKernel{.acc = nullptr, .x = nullptr, .n = 1024});
  CHECK_FALSE(a == swapped);
}

TEST_CASE("a pass with a GEMM is never graphable and never matches, not even itself") {
  int slot = 0;
  unsigned char staging[16];
  PassRecording a = step(&slot, 64, staging);
  a.gemm(cuda::GemmCall{});
  CHECK_FALSE(a.graphable());
  CHECK_FALSE(a == a);
  CHECK_FALSE(PassRecording{}.graphable());
}

TEST_CASE("GraphCache makes a graph of a recording seen twice in a row, finds it after, and keeps the most recent ones") {
  int slots[4] = {};
  unsigned char staging[16];
  cuda::GraphCache<std::string> cache(2);
  const PassRecording s0 = step(&slots[0], 64, staging), s1 = step(&slots[1], 64, staging), s2 = step(&slots[2], 64, staging);
  CHECK(cache.find(s0) == nullptr);
  CHECK_FALSE(cache.repeats(s0));  // first sight
  CHECK_FALSE(cache.repeats(s1));  // another pass in between: no graph for either
  CHECK(cache.repeats(s1));        // s1 again: make it
  cache.insert(s1, "g1");
  REQUIRE(cache.find(s1) != nullptr);
  CHECK(*cache.find(s1) == "g1");
  CHECK_FALSE(cache.repeats(s0));
  CHECK(cache.repeats(s0));
  cache.insert(s0, "g0");
  CHECK_FALSE(cache.repeats(s2));
  CHECK(cache.repeats(s2));
  cache.insert(s2, "g2");  // capacity 2: s1, used least recently, goes
  CHECK(cache.size() == 2);
  CHECK(cache.find(s1) == nullptr);
  CHECK(*cache.find(s0) == "g0");
  CHECK(*cache.find(s2) == "g2");
}

}  // namespace pass_recording_test
