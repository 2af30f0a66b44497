// Decode kernels: y[t, r] = x[t, :] · w[r, :] for a few token rows, streaming each weight row once
// and widening it in registers. Every token row is summed in the one-row matvec's order, so a
// sequence's numbers do not depend on how many others share the pass. Oracle: matmul_ref (matmul.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "kylin/kernels/simd.hpp"

namespace kylin::kernels::detail {

// An explicit fma: left to -ffp-contract, whether the multiply-add is fused would depend on how
// each instantiation is inlined, and a BF16 row would not sum like the same row widened.
template <class T>
inline float dot_tail(const float* x, const T* w, std::int64_t from, std::int64_t n) {
  float acc = 0.f;
  for (std::int64_t i = from; i < n; ++i) acc = std::fma(x[i], to_float(w[i]), acc);
  return acc;
}

// How far ahead of its reads the matvec prefetches. On the Zen 4 (AVX-512) VM of PERFORMANCE.md,
// 4 KiB gave +5-7 % (2 threads: 56 -> 60 GB/s), 8 KiB and more lost; on the Zen 3 (AVX2) VM any
// software prefetch lost 8-20 % of decode speed to the hardware prefetcher alone, so AVX2 builds
// leave it to the hardware.
inline constexpr std::int64_t matvec_prefetch_bytes = lanes >= 16 ? 4096 : 0;

// y[t, r] = x[t, :] · w[r, :] + bias[r] for NB token rows and weight rows [r0, r1), y with row
// stride ldy. One weight row at a time, so the weights stream through memory strictly in order
// (measured ~1.6x faster than interleaving 4 rows, which splits the stream the hardware prefetcher
// follows); each weight vector, widened once, feeds all NB rows. Every token row is summed in the
// order of the NB = 1 matvec (4 accumulators, lane tail, hadd): batching never changes a result.
template <int NB, class T>
void dot_rows(const float* x, const T* w, const float* bias, float* y, std::int64_t ldy, std::int64_t r0, std::int64_t r1,
              std::int64_t cols) {
  const auto L = static_cast<std::int64_t>(lanes);
  const std::int64_t end4 = cols / (4 * L) * (4 * L), end1 = cols / L * L;
  for (std::int64_t r = r0; r < r1; ++r) {
    const T* wr = w + r * cols;
    fbatch a[NB][4];
    for (auto& row : a) row[0] = row[1] = row[2] = row[3] = fbatch(0.f);
    std::int64_t c = 0;
    for (; c < end4; c += 4 * L) {
      if constexpr (matvec_prefetch_bytes > 0) prefetch_lines(wr + c, matvec_prefetch_bytes, 4 * L * static_cast<std::int64_t>(sizeof(T)));
      const fbatch w0 = load_as_float(wr + c), w1 = load_as_float(wr + c + L), w2 = load_as_float(wr + c + 2 * L),
                   w3 = load_as_float(wr + c + 3 * L);
      for (int t = 0; t < NB; ++t) {
        const float* xt = x + t * cols + c;
        a[t][0] = xsimd::fma(fbatch::load_unaligned(xt), w0, a[t][0]);
        a[t][1] = xsimd::fma(fbatch::load_unaligned(xt + L), w1, a[t][1]);
        a[t][2] = xsimd::fma(fbatch::load_unaligned(xt + 2 * L), w2, a[t][2]);
        a[t][3] = xsimd::fma(fbatch::load_unaligned(xt + 3 * L), w3, a[t][3]);
      }
    }
    for (; c < end1; c += L) {
      const fbatch wc = load_as_float(wr + c);
      for (int t = 0; t < NB; ++t) a[t][0] = xsimd::fma(fbatch::load_unaligned(x + t * cols + c), wc, a[t][0]);
    }
    for (int t = 0; t < NB; ++t)
      y[t * ldy + r] = xsimd::hadd((a[t][0] + a[t][1]) + (a[t][2] + a[t][3])) + dot_tail(x + t * cols, wr, end1, cols) +
                       (bias ? bias[r] : 0.f);
  }
}

// Register block of the batched dot-product kernel: dot_tile_rows x dot_tile_tokens accumulators
// plus dot_tile_rows weight vectors and one activation vector. On AVX2 a 3 x 4 block fills all 16
// registers and GCC spills an accumulator through the stack in every iteration (measured 21 GMAC/s
// on one Zen 3 core against 34 for 2 x 6, both in L1); AVX-512's 32 registers take 3 x 6.
inline constexpr int dot_tile_rows = lanes >= 16 ? 3 : 2;
inline constexpr int dot_tile_tokens = 6;

// Columns per k-block of dot_tile: a block of 6 token rows of activations (24 KiB) and its weight
// rows stay in L1 across the 4 passes. A multiple of 4 * lanes.
inline constexpr std::int64_t dot_k_block = 1024;

// Prefetches the next row block one line per `every` steps of the current one, so the weights
// stream from memory at the kernel's average pace. Fetching each block ahead in its own first pass
// instead put all memory traffic in 1/12 of the time (B = 16) and left ~30 % of the profile
// stalled on weight loads.
struct SpreadPrefetch {
  const char* next = nullptr;
  const char* end = nullptr;
  std::int64_t every = 1, count = 0;
  void step() {
    if (++count < every) return;
    count = 0;
    if (next < end) {
      prefetch(next);
      next += cache_line_bytes;
    }
  }
};

// acc[R][NB] += x[t, c] * w[i, c] over columns c = c0, c0 + stride, ... < c1, in that order.
template <int R, int NB, class T>
void dot_tile_pass(const float* x, const T* wr, std::int64_t cols, std::int64_t c0, std::int64_t c1, std::int64_t stride,
                   fbatch (&acc)[R][NB], SpreadPrefetch& pf) {
  fbatch a[R][NB];
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < NB; ++t) a[i][t] = acc[i][t];
  for (std::int64_t c = c0; c < c1; c += stride) {
    pf.step();
    fbatch wv[R];
    for (int i = 0; i < R; ++i) wv[i] = load_as_float(wr + i * cols + c);
    for (int t = 0; t < NB; ++t) {
      fbatch xv = fbatch::load_unaligned(x + t * cols + c);
      keep_in_register(xv);
      for (int i = 0; i < R; ++i) a[i][t] = xsimd::fma(xv, wv[i], a[i][t]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < NB; ++t) acc[i][t] = a[i][t];
}

// y[t, r] for NB token rows and the R weight rows from r0, each summed in exactly the order of
// dot_rows<1> (accumulator j takes the chunks c = j*L mod 4L in increasing c, then accumulator 0
// the lane tail; hadd, scalar tail, bias). Four accumulators per (row, token) do not fit the
// registers for a block, so each k-block takes 4 passes, pass j running accumulator j; the rows
// and activations of the k-block stay in L1 between passes. Each widened weight vector feeds NB
// FMAs and each activation vector R, instead of one activation load per FMA.
template <int R, int NB, class T>
void dot_tile(const float* x, const T* w, const float* bias, float* y, std::int64_t ldy, std::int64_t r0, std::int64_t cols,
              SpreadPrefetch& pf) {
  const auto L = static_cast<std::int64_t>(lanes);
  const std::int64_t end4 = cols / (4 * L) * (4 * L), end1 = cols / L * L;
  const T* wr = w + r0 * cols;
  fbatch part[4][R][NB];
  for (auto& pass : part)
    for (auto& row : pass)
      for (auto& v : row) v = fbatch(0.f);
  for (std::int64_t k0 = 0; k0 < end4; k0 += dot_k_block) {
    const std::int64_t k1 = std::min(end4, k0 + dot_k_block);
    for (int j = 0; j < 4; ++j) dot_tile_pass<R, NB>(x, wr, cols, k0 + j * L, k1, 4 * L, part[j], pf);
  }
  dot_tile_pass<R, NB>(x, wr, cols, end4, end1, L, part[0], pf);
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < NB; ++t)
      y[t * ldy + r0 + i] = xsimd::hadd((part[0][i][t] + part[1][i][t]) + (part[2][i][t] + part[3][i][t])) +
                            dot_tail(x + t * cols, wr + i * cols, end1, cols) + (bias ? bias[r0 + i] : 0.f);
}

// dot_tile over all n token rows for R rows, in the fewest blocks of at most dot_tile_tokens,
// sized evenly (8 tokens as 4 + 4, not 6 + 2), prefetching the next R rows meanwhile.
template <int R, class T>
void dot_tile_tokens_n(const float* x, std::int64_t n, const T* w, const float* bias, float* y, std::int64_t ldy,
                       std::int64_t r0, std::int64_t cols) {
  const std::int64_t blocks = (n + dot_tile_tokens - 1) / dot_tile_tokens;
  const std::int64_t bytes = R * cols * static_cast<std::int64_t>(sizeof(T));
  const std::int64_t steps = blocks * (cols / static_cast<std::int64_t>(lanes)), lines = bytes / cache_line_bytes + 1;
  const char* next = reinterpret_cast<const char*>(w + (r0 + R) * cols);
  SpreadPrefetch pf{next, next + bytes, std::max<std::int64_t>(1, steps / lines)};
  for (std::int64_t b = 0, t = 0; b < blocks; ++b) {
    const std::int64_t nb = n / blocks + (b < n % blocks ? 1 : 0);
    const float* xt = x + t * cols;
    float* yt = y + t * ldy;
    [&]<int... I>(std::integer_sequence<int, I...>) {
      ((nb == I + 1 ? dot_tile<R, I + 1>(xt, w, bias, yt, ldy, r0, cols, pf) : void()), ...);
    }(std::make_integer_sequence<int, dot_tile_tokens>{});
    t += nb;
  }
}

// y[t, r] for n >= 2 token rows and weight rows [r0, r1): blocks of dot_tile_rows rows, then single rows.
template <class T>
void dot_rows_n(const float* x, std::int64_t n, const T* w, const float* bias, float* y, std::int64_t ldy, std::int64_t r0,
                std::int64_t r1, std::int64_t cols) {
  std::int64_t r = r0;
  for (; r + dot_tile_rows <= r1; r += dot_tile_rows) dot_tile_tokens_n<dot_tile_rows>(x, n, w, bias, y, ldy, r, cols);
  for (; r < r1; ++r) dot_tile_tokens_n<1>(x, n, w, bias, y, ldy, r, cols);
}

}  // namespace kylin::kernels::detail
