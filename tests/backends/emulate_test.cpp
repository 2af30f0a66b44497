// The host CUDA emulator (common/cuda_emulator/emulate.hpp): every thread runs once with its indices,
// __syncthreads and __shfl_xor_sync keep their GPU semantics, shared memory is per block and starts as
// garbage, and divergent barriers, kernel exceptions and invalid launches come out of launch() by name.
#include "common/cuda_emulator/emulate.hpp"

#include <doctest/doctest.h>

#include <cfenv>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace emulate_test {

using kylin::cuda::Dim3;
using kylin::cuda::LaunchShape;
using kylin::cuda::emulate::launch;

struct Seen {
  int runs = 0;
  Dim3 thread, block, block_dim, grid_dim;
};

struct RecordIndices {
  Seen* seen;  // one per thread of the grid, indexed by global linear id
  template <class Thread>
  void operator()(Thread& t) const {
    const Dim3 b = t.block_idx(), g = t.grid_dim(), d = t.block_dim(), i = t.thread_idx();
    const unsigned block = b.x + g.x * (b.y + g.y * b.z);
    const unsigned thread = i.x + d.x * (i.y + d.y * i.z);
    Seen& s = seen[block * d.x * d.y * d.z + thread];
    ++s.runs;
    s.thread = i;
    s.block = b;
    s.block_dim = d;
    s.grid_dim = g;
  }
};

bool same(Dim3 a, Dim3 b) { return a.x == b.x && a.y == b.y && a.z == b.z; }

// Each thread writes its slot, then reads its right neighbour's: correct only if the barrier waits for all.
struct NeighbourRead {
  int* out;
  bool barrier;
  template <class Thread>
  void operator()(Thread& t) const {
    int* sh = t.template shared<int>();
    const unsigned n = t.block_dim().x, i = t.thread_idx().x;
    sh[i] = static_cast<int>(i) + 1;
    if (barrier) t.sync();
    out[i] = sh[(i + 1) % n];
  }
};

// Shared-memory tree reduction of in[0..blockDim.x) into out[blockIdx.x].
struct TreeSum {
  const float* in;
  float* out;
  bool barrier;
  template <class Thread>
  void operator()(Thread& t) const {
    float* sh = t.template shared<float>();
    const unsigned i = t.thread_idx().x, n = t.block_dim().x;
    sh[i] = in[t.block_idx().x * n + i];
    if (barrier) t.sync();
    for (unsigned s = n / 2; s > 0; s /= 2) {
      if (i < s) sh[i] += sh[i + s];
      if (barrier) t.sync();
    }
    if (i == 0) out[t.block_idx().x] = sh[0];
  }
};

struct ShflExchange {
  int mask;
  float* out;
  template <class Thread>
  void operator()(Thread& t) const {
    const Dim3 i = t.thread_idx(), d = t.block_dim();
    const unsigned linear = i.x + d.x * (i.y + d.y * i.z);
    out[linear] = t.shfl_xor(static_cast<float>(linear), mask);
  }
};

// Butterfly within each warp, then warp 0 adds the per-warp sums through shared memory.
struct BlockShflSum {
  const float* in;
  float* warp_sums;  // per linear thread: its warp's butterfly result
  float* out;
  template <class Thread>
  void operator()(Thread& t) const {
    const Dim3 i = t.thread_idx(), d = t.block_dim();
    const unsigned linear = i.x + d.x * (i.y + d.y * i.z), warps = d.x * d.y * d.z / 32;
    float v = in[linear];
    for (int m = 16; m > 0; m /= 2) v += t.shfl_xor(v, m);
    warp_sums[linear] = v;
    float* sh = t.template shared<float>();
    if (linear % 32 == 0) sh[linear / 32] = v;
    t.sync();
    if (linear < 32) {
      float w = linear < warps ? sh[linear] : 0.0f;
      for (int m = 16; m > 0; m /= 2) w += t.shfl_xor(w, m);
      if (linear == 0) *out = w;
    }
  }
};

// Reads its slot before writing (fresh garbage expected), then fills the block's memory with its id.
struct SharedPerBlock {
  std::uint32_t* first_read;  // per global thread
  std::uint32_t* after;       // per global thread: what slot (i+1)%n holds after the block's writes
  template <class Thread>
  void operator()(Thread& t) const {
    auto* sh = t.template shared<std::uint32_t>();
    const unsigned i = t.thread_idx().x, n = t.block_dim().x, g = t.block_idx().x * n + i;
    first_read[g] = sh[i];
    t.sync();
    sh[i] = t.block_idx().x;
    t.sync();
    after[g] = sh[(i + 1) % n];
  }
};

struct SharedPointer {
  const void** out;
  template <class Thread>
  void operator()(Thread& t) const {
    out[t.thread_idx().x] = t.template shared<float>();
  }
};

// Counts live instances, to show abandoned threads unwind their frames.
struct Live {
  static inline int count = 0;
  Live() { ++count; }
  Live(const Live&) = delete;
  Live& operator=(const Live&) = delete;
  ~Live() { --count; }
};

struct DivergentSync {
  template <class Thread>
  void operator()(Thread& t) const {
    const Live live;
    if (t.block_idx().x == 1 && t.thread_idx().x % 2 == 1) return;
    t.sync();
  }
};

struct DivergentShfl {
  template <class Thread>
  void operator()(Thread& t) const {
    const Live live;
    if (t.thread_idx().x >= 40) return;  // lanes 8..31 of warp 1 leave
    t.shfl_xor(1.0f, 1);
  }
};

struct Throws {
  template <class Thread>
  void operator()(Thread& t) const {
    const Live live;
    if (t.block_idx().x == 2 && t.thread_idx().x == 3) throw std::runtime_error("kernel body failed");
    t.sync();
  }
};

struct Nested {
  template <class Thread>
  void operator()(Thread&) const {
    launch(Nested{}, LaunchShape{});
  }
};

// Thread 0 rounds upward across a barrier; the rest must keep rounding to nearest, as on separate GPU threads.
struct RoundingMode {
  int* seen;  // per thread: fegetround() after the barrier
  template <class Thread>
  void operator()(Thread& t) const {
    const unsigned i = t.thread_idx().x;
    if (i == 0) std::fesetround(FE_UPWARD);
    t.sync();
    seen[i] = std::fegetround();
    t.sync();  // thread 0 still rounds upward while the others read
    if (i == 0) std::fesetround(FE_TONEAREST);
  }
};

// A misaligned fiber stack would fault in aligned SSE spills; this sees it directly.
struct StackAlignment {
  int* misaligned;
  template <class Thread>
  void operator()(Thread& t) const {
    alignas(16) char local[16] = {};
    volatile std::uintptr_t at = reinterpret_cast<std::uintptr_t>(local);  // volatile: not folded to 0
    t.sync();
    misaligned[t.thread_idx().x] = static_cast<int>(at % 16) + local[0];
  }
};

std::string launch_error(auto kernel, LaunchShape s) {
  try {
    launch(kernel, s);
  } catch (const kylin::Error& e) {
    CHECK(e.category() == kylin::ErrorCategory::runtime);
    CHECK(e.context() == "cuda emulation");
    return e.what();
  }
  return "no error";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST_CASE("every thread of every block of a 3-D grid runs exactly once and sees its own indices") {
  const LaunchShape s{{3, 2, 2}, {4, 3, 2}, 0};
  std::vector<Seen> seen(12 * 24);
  launch(RecordIndices{seen.data()}, s);
  int wrong = 0;
  for (unsigned g = 0; g < seen.size(); ++g) {
    const unsigned block = g / 24, thread = g % 24;
    const Dim3 b{block % 3, block / 3 % 2, block / 6}, i{thread % 4, thread / 4 % 3, thread / 12};
    wrong += seen[g].runs != 1 || !same(seen[g].thread, i) || !same(seen[g].block, b) ||
             !same(seen[g].block_dim, s.block) || !same(seen[g].grid_dim, s.grid);
  }
  CHECK(wrong == 0);
}

TEST_CASE("sync() waits for every thread of the block: each reads the value its neighbour wrote before it") {
  for (unsigned n : {2u, 33u, 256u, 1024u}) {
    CAPTURE(n);
    std::vector<int> out(n, -1);
    launch(NeighbourRead{out.data(), true}, {{1, 1, 1}, {n, 1, 1}, n * sizeof(int)});
    int wrong = 0;
    for (unsigned i = 0; i < n; ++i) wrong += out[i] != static_cast<int>((i + 1) % n) + 1;
    CHECK(wrong == 0);
    // Without the barrier a neighbour has not written yet: the read is the garbage fill.
    launch(NeighbourRead{out.data(), false}, {{1, 1, 1}, {n, 1, 1}, n * sizeof(int)});
    CHECK(out[0] == static_cast<int>(0xCDCDCDCDu));
  }
}

TEST_CASE("a shared-memory tree reduction is exact with barriers and wrong without them") {
  const unsigned n = 256, blocks = 3;
  std::vector<float> in(n * blocks);
  for (unsigned i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 17);
  std::vector<float> out(blocks, 0.0f);
  launch(TreeSum{in.data(), out.data(), true}, {{blocks, 1, 1}, {n, 1, 1}, n * sizeof(float)});
  for (unsigned b = 0; b < blocks; ++b) {
    float expect = 0;
    for (unsigned i = 0; i < n; ++i) expect += in[b * n + i];
    CHECK(out[b] == expect);
    CHECK(out[b] > 0.0f);
  }
  std::vector<float> racy(blocks, 0.0f);
  launch(TreeSum{in.data(), racy.data(), false}, {{blocks, 1, 1}, {n, 1, 1}, n * sizeof(float)});
  for (unsigned b = 0; b < blocks; ++b) CHECK(racy[b] != out[b]);
}

TEST_CASE("shfl_xor returns the value of lane ^ mask within each warp of consecutive linear thread ids") {
  const Dim3 block{16, 4, 2};  // 128 threads: a warp spans two rows of x
  for (int mask = 0; mask < 32; ++mask) {
    CAPTURE(mask);
    std::vector<float> out(128, -1.0f);
    launch(ShflExchange{mask, out.data()}, {{2, 1, 1}, block, 0});
    int wrong = 0;
    for (unsigned l = 0; l < 128; ++l)
      wrong += out[l] != static_cast<float>((l & ~31u) | ((l % 32) ^ static_cast<unsigned>(mask)));
    CHECK(wrong == 0);
  }
}

TEST_CASE("a shfl_xor butterfly sums each warp, and a block of several warps sums through shared memory") {
  for (Dim3 block : {Dim3{32, 1, 1}, Dim3{64, 1, 1}, Dim3{32, 8, 1}, Dim3{8, 8, 16}}) {
    const unsigned n = block.x * block.y * block.z;
    CAPTURE(n);
    std::vector<float> in(n), warp_sums(n, -1.0f);
    for (unsigned i = 0; i < n; ++i) in[i] = static_cast<float>(i % 13) - 4.0f;
    float total = -1.0f;
    launch(BlockShflSum{in.data(), warp_sums.data(), &total}, {{1, 1, 1}, block, 32 * sizeof(float)});
    float expect = 0;
    int wrong = 0;
    for (unsigned w = 0; w < n / 32; ++w) {
      float warp = 0;
      for (unsigned l = 0; l < 32; ++l) warp += in[w * 32 + l];
      for (unsigned l = 0; l < 32; ++l) wrong += warp_sums[w * 32 + l] != warp;
      expect += warp;
    }
    CHECK(wrong == 0);
    CHECK(total == expect);
  }
}

TEST_CASE("shared memory is per block: each block starts from garbage and sees only its own writes") {
  const unsigned n = 64, blocks = 4;
  std::vector<std::uint32_t> first(n * blocks), after(n * blocks);
  launch(SharedPerBlock{first.data(), after.data()}, {{blocks, 1, 1}, {n, 1, 1}, n * sizeof(std::uint32_t)});
  int wrong = 0;
  for (unsigned g = 0; g < n * blocks; ++g) wrong += first[g] != 0xCDCDCDCDu || after[g] != g / n;
  CHECK(wrong == 0);

  std::vector<const void*> ptr(32, &wrong);
  launch(SharedPointer{ptr.data()}, {{1, 1, 1}, {32, 1, 1}, 0});
  for (const void* p : ptr) CHECK(p == nullptr);
}

TEST_CASE("each thread keeps its own floating-point rounding mode, and its stack is 16-byte aligned") {
  REQUIRE(std::fegetround() == FE_TONEAREST);
  std::vector<int> seen(64, -1);
  launch(RoundingMode{seen.data()}, {{2, 1, 1}, {64, 1, 1}, 0});
  CHECK(seen[0] == FE_UPWARD);
  int wrong = 0;
  for (unsigned i = 1; i < 64; ++i) wrong += seen[i] != FE_TONEAREST;
  CHECK(wrong == 0);
  CHECK(std::fegetround() == FE_TONEAREST);

  std::vector<int> misaligned(256, -1);
  launch(StackAlignment{misaligned.data()}, {{1, 1, 1}, {256, 1, 1}, 0});
  int off = 0;
  for (int m : misaligned) off += m != 0;
  CHECK(off == 0);
}

TEST_CASE("a divergent sync() throws the named error, unwinds the waiting threads and leaves the emulator usable") {
  const std::string e = launch_error(DivergentSync{}, {{3, 1, 1}, {32, 1, 1}, 0});
  CHECK(contains(e, "[kylin.runtime] cuda emulation: "));
  CHECK(contains(e, "DivergentSync: block (1,0,0): 16 threads wait at __syncthreads while 16 have returned"));
  CHECK(Live::count == 0);

  std::vector<int> out(64, -1);
  launch(NeighbourRead{out.data(), true}, {{1, 1, 1}, {64, 1, 1}, 64 * sizeof(int)});
  CHECK(out[63] == 1);
}

TEST_CASE("shfl_xor not reached by every lane of a warp, or in a partial warp, throws the named error") {
  const std::string e = launch_error(DivergentShfl{}, {{1, 1, 1}, {64, 1, 1}, 0});
  CHECK(contains(e, "DivergentShfl: block (0,0,0): warp 1: 8 lanes wait at shfl_xor while 24 have returned"));
  CHECK(Live::count == 0);

  std::vector<float> out(48);
  CHECK(contains(launch_error(ShflExchange{1, out.data()}, {{1, 1, 1}, {48, 1, 1}, 0}),
                 "ShflExchange: shfl_xor in a block of 48 threads, not a whole number of warps of 32"));
  CHECK(contains(launch_error(ShflExchange{32, out.data()}, {{1, 1, 1}, {32, 1, 1}, 0}),
                 "shfl_xor lane mask 32 outside [0,32)"));
}

TEST_CASE("an exception thrown by a kernel body propagates out of launch after the block unwinds") {
  bool thrown = false;
  try {
    launch(Throws{}, {{4, 1, 1}, {64, 1, 1}, 16});
  } catch (const std::runtime_error& e) {
    thrown = true;
    CHECK(std::string(e.what()) == "kernel body failed");
  }
  CHECK(thrown);
  CHECK(Live::count == 0);
  CHECK(contains(launch_error(Nested{}, {{1, 1, 1}, {2, 1, 1}, 0}), "Nested: launched from a kernel"));
}

TEST_CASE("invalid launches are refused naming the kernel: zero dimensions, more than 1024 threads") {
  std::vector<Seen> seen(2048);
  const RecordIndices k{seen.data()};
  CHECK(contains(launch_error(k, {{0, 1, 1}, {32, 1, 1}, 0}), "RecordIndices: grid (0,1,1) has a zero dimension"));
  CHECK(contains(launch_error(k, {{1, 1, 1}, {32, 0, 1}, 0}), "RecordIndices: block (32,0,1) has a zero dimension"));
  CHECK(contains(launch_error(k, {{1, 1, 1}, {32, 32, 2}, 0}),
                 "RecordIndices: block (32,32,2) has 2048 threads, more than 1024"));
  CHECK(contains(launch_error(k, {{1, 1, 1}, {1025, 1, 1}, 0}), "1025 threads, more than 1024"));
  int ran = 0;
  for (const Seen& s : seen) ran += s.runs;
  CHECK(ran == 0);
  launch(k, {{2, 1, 1}, {1024, 1, 1}, 0});  // the largest block
  int wrong = 0;
  for (const Seen& s : seen) wrong += s.runs != 1;
  CHECK(wrong == 0);
}

}  // namespace emulate_test
