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

// How far ahead of its reads the matvec prefetches. With AVX-512, 4 KiB beat none and longer
// distances; with AVX2, 2 KiB and more were no better than none or lost to the hardware prefetcher
// alone, while 1 KiB beat none, most on short matrices such as MoE experts, where each thread's
// share starts a fresh stream (docs/log/2026-11-header-comments.md).
inline constexpr std::int64_t matvec_prefetch_bytes = lanes >= 16 ? 4096 : 1024;

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
      KYLIN_CPU_UNROLL for (int t = 0; t < NB; ++t) {
        const float* xt = x + t * cols + c;
        a[t][0] = fma(fbatch::load_unaligned(xt), w0, a[t][0]);
        a[t][1] = fma(fbatch::load_unaligned(xt + L), w1, a[t][1]);
        a[t][2] = fma(fbatch::load_unaligned(xt + 2 * L), w2, a[t][2]);
        a[t][3] = fma(fbatch::load_unaligned(xt + 3 * L), w3, a[t][3]);
      }
    }
    for (; c < end1; c += L) {
      const fbatch wc = load_as_float(wr + c);
      KYLIN_CPU_UNROLL for (int t = 0; t < NB; ++t) a[t][0] = fma(fbatch::load_unaligned(x + t * cols + c), wc, a[t][0]);
    }
    KYLIN_CPU_UNROLL for (int t = 0; t < NB; ++t)
      y[t * ldy + r] = xsimd::hadd((a[t][0] + a[t][1]) + (a[t][2] + a[t][3])) + dot_tail(x + t * cols, wr, end1, cols) +
                       (bias ? bias[r] : 0.f);
  }
}

// Register block of the batched dot-product kernel: dot_tile_rows x (up to) dot_tile_tokens
// accumulators plus dot_tile_rows weight vectors and one activation vector. On AVX2 a 3 x 4 block
// fills all 16 registers and GCC spills an accumulator through the stack in every iteration, which
// ran slower than 2 x 6 (docs/log/2026-11-header-comments.md); AVX-512's 32 registers take 3 x 6.
inline constexpr int dot_tile_rows = lanes >= 16 ? 3 : 2;
inline constexpr int dot_tile_tokens = 6;

// Columns per k-block of dot_tile: the block's weight rows (16 KiB for 2 BF16 rows) stay in L1
// across its 4 passes. Blocks shorter than 1024 columns measured slower (pass overhead).
inline constexpr std::int64_t dot_k_block = 4096;

// The token blocks dot_tile takes n >= 2 token rows in: the fewest of at most dot_tile_tokens,
// sized evenly (8 tokens as 4 + 4, not 6 + 2). Block b has block_size(b) tokens.
struct DotTokenBlocks {
  std::int64_t n, count;
  explicit DotTokenBlocks(std::int64_t n) : n(n), count((n + dot_tile_tokens - 1) / dot_tile_tokens) {}
  std::int64_t block_size(std::int64_t b) const { return n / count + (b < n % count ? 1 : 0); }
};

// Columns of a row the packed layout holds: whole groups of 4 vectors (the rest is read from x).
inline std::int64_t dot_packed_cols(std::int64_t cols) { return cols / (4 * lanes) * (4 * lanes); }

// Packs the activations of n >= 2 token rows for dot_tile. The token block starting at row t with
// nb rows goes to xp + t * K (K = dot_packed_cols(cols)) as [4][K / (4 L)][nb][L]: element
// (j, i, u, l) = x[t + u, 4L i + L j + l]. Pass j of dot_tile then reads one contiguous stream;
// reading x's rows in place instead (rows 4 KiB apart, four strided passes) ran far slower, because
// the token rows' lines fight over the same L1 sets (docs/log/2026-11-header-comments.md).
inline void pack_dot_rows(const float* x, std::int64_t n, std::int64_t cols, float* xp) {
  const auto L = static_cast<std::int64_t>(lanes);
  const std::int64_t K = dot_packed_cols(cols), I = K / (4 * L);
  const DotTokenBlocks blocks(n);
  for (std::int64_t b = 0, t = 0; b < blocks.count; t += blocks.block_size(b), ++b) {
    const std::int64_t nb = blocks.block_size(b);
    float* out = xp + t * K;
    for (std::int64_t j = 0; j < 4; ++j)
      for (std::int64_t i = 0; i < I; ++i)
        for (std::int64_t u = 0; u < nb; ++u, out += L) fbatch::load_unaligned(x + (t + u) * cols + 4 * L * i + L * j).store_unaligned(out);
  }
}

// Prefetches the next row block at a fixed pace, one prefetch per pair of steps of the current
// block, so the weights stream from memory at the kernel's average pace. Fetching each block ahead
// in its own first pass instead put all memory traffic in 1/12 of the time (B = 16) and left ~30 %
// of the profile stalled on weight loads. A pointer bumped by a fixed stride (a line may be asked
// for twice) costs two instructions a pair; the per-step line counter it replaced cost an increment,
// a compare and a branch in every step of a ~20-instruction step
// (docs/log/2026-11-23-25-batched-decode-zen3.md).
struct SpreadPrefetch {
  const char* next = nullptr;
  std::int64_t stride = cache_line_bytes;
  void pair() {
    prefetch(next);
    next += stride;
  }
};

// Where a pass reads its activations: packed by pack_dot_rows (token t's vector of a column step
// at x + t * lanes, the next step NB * lanes on), or the token rows in place, `cols` apart (the
// lane tail).
enum class TileX { packed, rows };

// acc[R][NB] += x[t, c] * w[i, c] over the columns c = c0, c0 + stride, ... < c1 in that order.
template <int R, int NB, TileX Layout, class T>
void dot_tile_pass(const float* x, const T* wr, std::int64_t cols, std::int64_t c0, std::int64_t c1, std::int64_t stride,
                   fbatch (&acc)[R][NB], SpreadPrefetch& pf) {
  constexpr auto L = static_cast<std::int64_t>(lanes);
  const std::int64_t x_row = Layout == TileX::packed ? L : cols, x_step = Layout == TileX::packed ? NB * L : L;
  fbatch a[R][NB];
  KYLIN_CPU_UNROLL for (int i = 0; i < R; ++i)
    KYLIN_CPU_UNROLL for (int t = 0; t < NB; ++t) a[i][t] = acc[i][t];
  SpreadPrefetch p = pf;  // a local copy stays in registers; through the reference, GCC kept the
                          // prefetch state in memory and every step waited on its store (-12 %)
  const auto step = [&](std::int64_t c, const float* xs) {
    fbatch wv[R];
    KYLIN_CPU_UNROLL for (int i = 0; i < R; ++i) wv[i] = load_as_float(wr + i * cols + c);
    KYLIN_CPU_UNROLL for (int t = 0; t < NB; ++t) {
      fbatch xv = fbatch::load_unaligned(xs + t * x_row);
      keep_in_register(xv);
      KYLIN_CPU_UNROLL for (int i = 0; i < R; ++i) a[i][t] = fma(xv, wv[i], a[i][t]);
    }
  };
  std::int64_t c = c0;
  for (; c + stride < c1; c += 2 * stride, x += 2 * x_step) {  // two steps a trip: less loop overhead
    p.pair();
    step(c, x);
    step(c + stride, x + x_step);
  }
  if (c < c1) step(c, x);
  pf = p;
  KYLIN_CPU_UNROLL for (int i = 0; i < R; ++i)
    KYLIN_CPU_UNROLL for (int t = 0; t < NB; ++t) acc[i][t] = a[i][t];
}

// y[t, r] for NB token rows (x, and xp their block packed by pack_dot_rows) and the R weight rows
// from r0, each summed in exactly the order of dot_rows<1> (accumulator j takes the chunks
// c = j*L mod 4L in increasing c, then accumulator 0 the lane tail; hadd, scalar tail, bias).
// Four accumulators per (row, token) do not fit the registers for a block, so each k-block takes
// 4 passes, pass j running accumulator j; the k-block's weight rows stay in L1 between passes.
// Each widened weight vector feeds NB FMAs and each activation vector R.
template <int R, int NB, class T>
void dot_tile(const float* x, const float* xp, const T* w, const float* bias, float* y, std::int64_t ldy, std::int64_t r0,
              std::int64_t cols, SpreadPrefetch& pf) {
  const auto L = static_cast<std::int64_t>(lanes);
  const std::int64_t end4 = dot_packed_cols(cols), end1 = cols / L * L, I = end4 / (4 * L);
  const T* wr = w + r0 * cols;
  fbatch part[4][R][NB];
  for (auto& pass : part)
    for (auto& row : pass)
      for (auto& v : row) v = fbatch(0.f);
  for (std::int64_t k0 = 0; k0 < end4; k0 += dot_k_block) {
    const std::int64_t k1 = std::min(end4, k0 + dot_k_block);
    KYLIN_CPU_UNROLL for (int j = 0; j < 4; ++j)
      dot_tile_pass<R, NB, TileX::packed>(xp + (j * I + k0 / (4 * L)) * NB * L, wr, cols, k0 + j * L, k1, 4 * L, part[j], pf);
  }
  if (end1 > end4) dot_tile_pass<R, NB, TileX::rows>(x + end4, wr, cols, end4, end1, L, part[0], pf);
  KYLIN_CPU_UNROLL for (int i = 0; i < R; ++i)
    KYLIN_CPU_UNROLL for (int t = 0; t < NB; ++t)
      y[t * ldy + r0 + i] = xsimd::hadd((part[0][i][t] + part[1][i][t]) + (part[2][i][t] + part[3][i][t])) +
                            dot_tail(x + t * cols, wr + i * cols, end1, cols) + (bias ? bias[r0 + i] : 0.f);
}

// dot_tile over all n token rows for R rows, block by block (DotTokenBlocks), prefetching the
// next R rows meanwhile.
template <int R, class T>
void dot_tile_tokens_n(const float* x, const float* xp, std::int64_t n, const T* w, const float* bias, float* y,
                       std::int64_t ldy, std::int64_t r0, std::int64_t cols) {
  const DotTokenBlocks blocks(n);
  const std::int64_t bytes = R * cols * static_cast<std::int64_t>(sizeof(T));
  const std::int64_t pairs = std::max<std::int64_t>(1, blocks.count * (cols / static_cast<std::int64_t>(lanes)) / 2);
  SpreadPrefetch pf{reinterpret_cast<const char*>(w + (r0 + R) * cols), (bytes + pairs - 1) / pairs};
  const std::int64_t K = dot_packed_cols(cols);
  for (std::int64_t b = 0, t = 0; b < blocks.count; t += blocks.block_size(b), ++b) {
    const std::int64_t nb = blocks.block_size(b);
    [&]<int... I>(std::integer_sequence<int, I...>) {
      ((nb == I + 1 ? dot_tile<R, I + 1>(x + t * cols, xp + t * K, w, bias, y + t * ldy, ldy, r0, cols, pf) : void()), ...);
    }(std::make_integer_sequence<int, dot_tile_tokens>{});
  }
}

// y[t, r] for n >= 2 token rows x (packed into xp by pack_dot_rows) and weight rows [r0, r1):
// blocks of dot_tile_rows rows, then single rows.
template <class T>
void dot_rows_n(const float* x, const float* xp, std::int64_t n, const T* w, const float* bias, float* y, std::int64_t ldy,
                std::int64_t r0, std::int64_t r1, std::int64_t cols) {
  std::int64_t r = r0;
  for (; r + dot_tile_rows <= r1; r += dot_tile_rows) dot_tile_tokens_n<dot_tile_rows>(x, xp, n, w, bias, y, ldy, r, cols);
  for (; r < r1; ++r) dot_tile_tokens_n<1>(x, xp, n, w, bias, y, ldy, r, cols);
}

}  // namespace kylin::kernels::detail
