// A logit row's top-k on the device, as kernels::top_k: a block ranks each slice of a row
// (TopKSliceKernel), then one block a row ranks the slices' picks (TopKMergeKernel), so top-k
// sampling needs k pairs a row from the GPU instead of the row.
#pragma once

#include <cstdint>

#include "kylin/backends/cuda/device_math.hpp"
#include "kylin/kernels/types.hpp"

namespace kylin::cuda {
namespace detail {

// A (logit, id) pair as one integer ordered as kernels::ranks_before orders pairs: the higher key
// ranks first. The logit's bits are mapped to an unsigned order (-0 as +0, which ranks_before
// ties), then the complemented id makes the lower id the higher key. 0 stands for no candidate
// (NaN, or past a row's end); no logit's key is that low: -inf's upper half is 0x007fffff.
KYLIN_HD inline std::uint64_t rank_key(float logit, std::int64_t id) {
  if (logit != logit) return 0;
  std::uint32_t u = bits_of(logit == 0.0f ? 0.0f : logit);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (std::uint64_t{u} << 32) | (0xffffffffu - static_cast<std::uint32_t>(id));
}
KYLIN_HD inline float key_logit(std::uint64_t key) {
  const auto u = static_cast<std::uint32_t>(key >> 32);
  return float_of((u & 0x80000000u) ? (u & 0x7fffffffu) : ~u);
}
KYLIN_HD inline int key_id(std::uint64_t key) { return static_cast<int>(0xffffffffu - static_cast<std::uint32_t>(key)); }

// A 64-bit integer through a shuffle that moves 32-bit floats: its two halves, bit for bit.
template <class Thread>
KYLIN_HD std::uint64_t shfl_xor_u64(Thread& t, std::uint64_t v, int mask) {
  const std::uint64_t hi = bits_of(t.shfl_xor(float_of(static_cast<std::uint32_t>(v >> 32)), mask));
  const std::uint64_t lo = bits_of(t.shfl_xor(float_of(static_cast<std::uint32_t>(v)), mask));
  return hi << 32 | lo;
}

// The highest `key` of the block's threads, returned to every thread. slots: [warps] shared,
// which the caller alternates between two sets from one call to the next: a thread may write the
// next call's slot before a slower one has read this call's.
template <class Thread>
KYLIN_HD std::uint64_t block_max_key(Thread& t, std::uint64_t key, std::uint64_t* slots) {
  for (int m = static_cast<int>(warp_size) / 2; m > 0; m >>= 1) {
    const std::uint64_t other = shfl_xor_u64(t, key, m);
    key = other > key ? other : key;
  }
  const unsigned tid = t.thread_idx().x, warps = t.block_dim().x / warp_size;
  if (tid % warp_size == 0) slots[tid / warp_size] = key;
  t.sync();
  std::uint64_t best = 0;
  for (unsigned w = 0; w < warps; ++w) best = slots[w] > best ? slots[w] : best;
  return best;
}

// out[0, k) (written by thread 0): the k highest keys among the block's candidates, highest first,
// 0 past the last. Each pick is the highest key below the one before, so nothing is marked;
// best_below(bound) is a thread's highest candidate key below bound (0: none).
// slots: [2 * warps] shared.
template <class Thread, class BestBelow>
KYLIN_HD void block_top_keys(Thread& t, std::int64_t k, const BestBelow& best_below, std::uint64_t* slots, std::uint64_t* out) {
  const unsigned warps = t.block_dim().x / warp_size;
  std::uint64_t bound = ~std::uint64_t{0};  // above every key
  for (std::int64_t j = 0; j < k; ++j) {
    // bound is the same in every thread: all skip the barrier together once the candidates run out
    bound = bound == 0 ? 0 : block_max_key(t, best_below(bound), slots + (j % 2) * warps);
    if (t.thread_idx().x == 0) out[j] = bound;
  }
}

}  // namespace detail

// keys[r, s, 0 .. k): the k best of x[r, s * slice .. (s + 1) * slice) cut at width, as rank keys,
// best first (0: fewer than k there). A block a slice (grid x) and row (grid y); each thread holds
// per_thread logits, read a block's width apart so that a warp's loads are coalesced.
struct TopKSliceKernel {
  const float* x;  // [rows, stride]
  std::int64_t rows, width, stride, k;
  std::uint64_t* keys;  // [rows, slices(), k]

  bool operator==(const TopKSliceKernel&) const = default;
  static constexpr unsigned threads = 256, per_thread = 8;
  static constexpr std::int64_t slice = std::int64_t{threads} * per_thread;
  KYLIN_HD std::int64_t slices() const { return (width + slice - 1) / slice; }
  LaunchShape shape() const {
    return {{static_cast<unsigned>(slices()), static_cast<unsigned>(rows)}, {threads}, 2 * (threads / warp_size) * sizeof(std::uint64_t)};
  }

  template <class Thread>
  KYLIN_HD void operator()(Thread& t) const {
    const std::int64_t r = t.block_idx().y, s = t.block_idx().x, n = slices();
    std::uint64_t mine[per_thread];  // [per_thread] this thread's candidates
    KYLIN_UNROLL for (unsigned u = 0; u < per_thread; ++u) {
      const std::int64_t i = s * slice + std::int64_t{u} * threads + t.thread_idx().x;
      mine[u] = i < width ? detail::rank_key(x[r * stride + i], i) : 0;
    }
    auto best_below = [&](std::uint64_t bound) {
      std::uint64_t best = 0;
      KYLIN_UNROLL for (unsigned u = 0; u < per_thread; ++u) if (mine[u] < bound && mine[u] > best) best = mine[u];
      return best;
    };
    detail::block_top_keys(t, k, best_below, t.template shared<std::uint64_t>(), keys + (r * n + s) * k);
  }
};

// top[r, 0 .. k) = kernels::top_k of row r from its slices' picks (TopKSliceKernel's keys): a
// block a row, every thread scanning its share of the candidates for each pick.
struct TopKMergeKernel {
  const std::uint64_t* keys;  // [rows, candidates]
  std::int64_t rows, candidates, k;
  kernels::RankedLogit* top;  // [rows, k]

  bool operator==(const TopKMergeKernel&) const = default;
  static constexpr unsigned threads = 256;
  LaunchShape shape() const {
    return {{static_cast<unsigned>(rows)}, {threads}, (2 * (threads / warp_size) + static_cast<std::size_t>(k)) * sizeof(std::uint64_t)};
  }

  template <class Thread>
  KYLIN_HD void operator()(Thread& t) const {
    const std::int64_t r = t.block_idx().x;
    const std::uint64_t* kr = keys + r * candidates;
    auto best_below = [&](std::uint64_t bound) {
      std::uint64_t best = 0;
      for (std::int64_t i = t.thread_idx().x; i < candidates; i += t.block_dim().x)
        if (kr[i] < bound && kr[i] > best) best = kr[i];
      return best;
    };
    std::uint64_t* slots = t.template shared<std::uint64_t>();  // [2 * warps]
    std::uint64_t* picked = slots + 2 * (t.block_dim().x / warp_size);  // [k]
    detail::block_top_keys(t, k, best_below, slots, picked);
    t.sync();
    for (std::int64_t j = t.thread_idx().x; j < k; j += t.block_dim().x) {
      kernels::RankedLogit& out = top[r * k + j];
      out.logit = picked[j] ? detail::key_logit(picked[j]) : 0.0f;
      out.id = picked[j] ? detail::key_id(picked[j]) : -1;
    }
  }
};

}  // namespace kylin::cuda
