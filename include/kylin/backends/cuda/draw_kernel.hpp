// A draw over a whole logit row on the device, as kernels::draw_row draws it (temperature, min-p):
// a block sums each slice's weights (DrawSliceKernel), then one block a row walks the slices' sums
// and the chosen slice's sum tree down to the token (DrawPickKernel), so one int a row comes back.
// For top-p, DrawSliceKernel gives each slice's whole mass and lowest finite logit instead.
#pragma once

#include <cstdint>

#include "kylin/backends/cuda/device_math.hpp"
#include "kylin/kernels/types.hpp"

namespace kylin::cuda {
namespace detail {

// kernels::exp_nonpositive and scaled_weight (kernels/draw.hpp) line for line, each product and sum
// rounded on its own, as a host build without FMA contraction computes them: nvcc would otherwise
// fuse some into FMAs, and the two draw kernels must compute the same weights.
KYLIN_HD inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
KYLIN_HD inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
KYLIN_HD inline float exp_nonpositive(float s) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRoundMagic = 12582912.0f;
  const float n = add_rn(add_rn(mul_rn(s, kLog2e), kRoundMagic), -kRoundMagic);
  const float r = add_rn(add_rn(s, -mul_rn(n, kLn2Hi)), -mul_rn(n, kLn2Lo));
  float p = 1.9875691500e-4f;
  p = add_rn(mul_rn(p, r), 1.3981999507e-3f);
  p = add_rn(mul_rn(p, r), 8.3334519073e-3f);
  p = add_rn(mul_rn(p, r), 4.1665795894e-2f);
  p = add_rn(mul_rn(p, r), 1.6666665459e-1f);
  p = add_rn(mul_rn(p, r), 5.0000001201e-1f);
  const float er = add_rn(add_rn(mul_rn(mul_rn(p, r), r), r), 1.0f);
  return mul_rn(er, float_of(static_cast<std::uint32_t>(static_cast<int>(n) + 127) << 23));
}
// A token's weight in a draw: exp((logit - max) * inv_temperature), 0 below the floor, for NaN and
// below the draw's min_weight.
KYLIN_HD inline float draw_weight(float logit, float max_logit, const kernels::RowDraw& d) {
  constexpr float kMinScaledLogit = -87.0f;
  const float s = mul_rn(add_rn(logit, -max_logit), d.inv_temperature);
  const bool live = s >= kMinScaledLogit;  // false for NaN
  const float w = exp_nonpositive(live ? s : kMinScaledLogit);
  return live && w >= d.min_weight ? w : 0.0f;
}

// Slices of a row as both draw kernels see them: a block of `threads`, each summing `per_thread`
// consecutive tokens in id order into level 0 of a pairwise sum tree.
inline constexpr unsigned draw_threads = 256, draw_per_thread = 8;
inline constexpr std::int64_t draw_slice = std::int64_t{draw_threads} * draw_per_thread;

// levels: [2 T - 1] shared. Level 0 holds each thread's v; each level above, op of adjacent pairs
// of the one below (node j: children 2j and 2j + 1); the root is levels[2 T - 2].
template <class Thread, class Op>
KYLIN_HD void reduce_tree(Thread& t, double v, double* levels, const Op& op) {
  const unsigned tid = t.thread_idx().x;
  levels[tid] = v;
  t.sync();
  double* below = levels;
  for (unsigned n = t.block_dim().x / 2; n > 0; n >>= 1) {
    double* level = below + 2 * n;
    if (tid < n) level[tid] = op(below[2 * tid], below[2 * tid + 1]);
    t.sync();
    below = level;
  }
}
template <class Thread>
KYLIN_HD void sum_tree(Thread& t, double v, double* levels) {
  reduce_tree(t, v, levels, [](double a, double b) { return a + b; });
}

// This thread's per_thread tokens of slice s of row xr (width wide), as weights: their sum, in id order.
KYLIN_HD inline double thread_mass(const float* xr, std::int64_t width, std::int64_t s, unsigned tid, float max_logit, const kernels::RowDraw& d) {
  double sum = 0.0;
  const std::int64_t i0 = s * draw_slice + std::int64_t{tid} * draw_per_thread;
  for (unsigned u = 0; u < draw_per_thread; ++u)
    if (i0 + u < width) sum += draw_weight(xr[i0 + u], max_logit, d);
  return sum;
}

// This thread's per_thread tokens of slice s of row xr: their lowest finite logit, +inf if none.
KYLIN_HD inline float thread_low(const float* xr, std::int64_t width, std::int64_t s, unsigned tid) {
  float low = INFINITY;
  const std::int64_t i0 = s * draw_slice + std::int64_t{tid} * draw_per_thread;
  for (unsigned u = 0; u < draw_per_thread; ++u) {
    const float l = i0 + u < width ? xr[i0 + u] : INFINITY;
    low = l > -INFINITY && l < low ? l : low;  // NaN and -inf pass over
  }
  return low;
}

}  // namespace detail

// sums[r, s]: the mass of slice s of row r (x[r, s * slice, + slice) cut at width) under draws[r]
// and the row's max logit x[r, top[r]]; 0 for a row whose top is -1 or +inf (nothing to draw).
// With lows, top-p's row sums instead (kernels::keep_nucleus_of_ranked takes them with the row's
// top-k): the mass with min-p left out, and lows[r, s] the slice's lowest finite logit (+inf where
// it has none or the row nothing to draw).
struct DrawSliceKernel {
  const float* x;  // [rows, stride]
  std::int64_t rows, width, stride;
  const int* top;                  // [rows] each row's argmax (ArgmaxKernel)
  const kernels::RowDraw* draws;  // [rows]
  double* sums;                    // [rows, slices()]
  float* lows = nullptr;           // [rows, slices()] or none

  bool operator==(const DrawSliceKernel&) const = default;
  KYLIN_HD std::int64_t slices() const { return (width + detail::draw_slice - 1) / detail::draw_slice; }
  LaunchShape shape() const {
    return {{static_cast<unsigned>(slices()), static_cast<unsigned>(rows)}, {detail::draw_threads}, (2 * detail::draw_threads - 1) * sizeof(double)};
  }

  template <class Thread>
  KYLIN_HD void operator()(Thread& t) const {
    const std::int64_t r = t.block_idx().y, s = t.block_idx().x;
    const unsigned tid = t.thread_idx().x, T = t.block_dim().x;
    const int a = top[r];
    const float* xr = x + r * stride;
    const bool live = a >= 0 && xr[a] < INFINITY;
    kernels::RowDraw d = draws[r];
    if (lows) d.min_weight = 0x1p-149f;  // the least float above 0: every weight counts
    double* levels = t.template shared<double>();  // [2 T - 1]
    detail::sum_tree(t, live ? detail::thread_mass(xr, width, s, tid, xr[a], d) : 0.0, levels);
    if (tid == 0) sums[r * slices() + s] = levels[2 * T - 2];
    if (!lows) return;  // the same in every thread
    t.sync();           // thread 0 has read the root before the tree is refilled
    detail::reduce_tree(t, live ? detail::thread_low(xr, width, s, tid) : INFINITY, levels, [](double p, double q) { return q < p ? q : p; });
    if (tid == 0) lows[r * slices() + s] = static_cast<float>(levels[2 * T - 2]);
  }
};

// ids[r]: the token of row r where the running mass in id order first passes u * total (the draw's
// u, total the sum of the slices' sums in slice order); top[r] where that is -1 or its logit +inf.
// Thread 0 walks the slices' sums, the block rebuilds the chosen slice's sum tree (the same sums as
// DrawSliceKernel's) and thread 0 descends it to one thread's tokens, then walks those. A subtree
// is entered only with mass in it, so rounding at a node can only move the pick to a neighbour
// with weight, never to a token that weighs 0.
struct DrawPickKernel {
  const float* x;  // [rows, stride]
  std::int64_t rows, width, stride;
  const int* top;                  // [rows]
  const kernels::RowDraw* draws;  // [rows]
  const double* sums;              // [rows, slices] DrawSliceKernel's
  int* ids;                        // [rows]

  bool operator==(const DrawPickKernel&) const = default;
  KYLIN_HD std::int64_t slices() const { return (width + detail::draw_slice - 1) / detail::draw_slice; }
  LaunchShape shape() const {
    return {{static_cast<unsigned>(rows)}, {detail::draw_threads}, (2 * detail::draw_threads - 1) * sizeof(double) + 2 * sizeof(double)};
  }

  template <class Thread>
  KYLIN_HD void operator()(Thread& t) const;
};

template <class Thread>
KYLIN_HD void DrawPickKernel::operator()(Thread& t) const {
  const std::int64_t r = t.block_idx().x, n = slices();
  const unsigned tid = t.thread_idx().x, T = t.block_dim().x;
  const int a = top[r];
  const float* xr = x + r * stride;
  if (a < 0 || !(xr[a] < INFINITY)) {  // the same in every thread: all return together
    if (tid == 0) ids[r] = a;
    return;
  }
  double* levels = t.template shared<double>();  // [2 T - 1] the chosen slice's sum tree
  double* chosen = levels + 2 * T - 1;            // [2] its slice and the target within it
  if (tid == 0) {
    const double* sr = sums + r * n;
    double total = 0.0;
    for (std::int64_t s = 0; s < n; ++s) total += sr[s];
    const double target = draws[r].u * total;
    double before = 0.0;
    std::int64_t s = -1;
    for (std::int64_t c = 0; c < n; ++c) {
      if (sr[c] <= 0.0) continue;
      s = c;  // the last slice with mass so far: where rounding short of target ends
      if (before + sr[c] > target) break;
      before += sr[c];
    }
    chosen[0] = static_cast<double>(s);
    chosen[1] = target - before;
  }
  t.sync();
  const auto s = static_cast<std::int64_t>(chosen[0]);
  if (s < 0) {  // no slice with mass, which the max's own weight 1 rules out; the same in every thread
    if (tid == 0) ids[r] = a;
    return;
  }
  detail::sum_tree(t, detail::thread_mass(xr, width, s, tid, xr[a], draws[r]), levels);
  if (tid != 0) return;  // past the block's last barrier
  double rest = chosen[1];
  unsigned node = 0, level_size = 1;
  double* level = levels + 2 * T - 2;  // the root's level
  while (level_size < T) {             // down to level 0: a child with mass holding `rest`
    double* below = level - 2 * level_size;
    const double left = below[2 * node], right = below[2 * node + 1];
    if (rest < left || right <= 0.0) {
      node = 2 * node;
    } else {
      rest -= left;
      node = 2 * node + 1;
    }
    level = below;
    level_size *= 2;
  }
  const std::int64_t i0 = s * detail::draw_slice + std::int64_t{node} * detail::draw_per_thread;
  double inside = 0.0;
  int pick = -1;
  for (unsigned u = 0; u < detail::draw_per_thread && i0 + u < width; ++u) {
    const float w = detail::draw_weight(xr[i0 + u], xr[a], draws[r]);
    if (w <= 0.0f) continue;
    pick = static_cast<int>(i0 + u);  // the last with weight: where rounding short of rest ends
    inside += w;
    if (inside > rest) break;
  }
  ids[r] = pick;
}

}  // namespace kylin::cuda
