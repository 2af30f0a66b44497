// Decode kernels over panel-major weights: rows taken 16 at a time and stored column by column, so
// one load gives column k of 16 rows and every output is one FMA chain over k in order, for one
// token or many alike (and as the prefill GEMM sums it). Oracle: panel_matmul_ref.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "kylin/kernels/simd.hpp"

namespace kylin::kernels {

inline constexpr std::int64_t panel_width = 16;

inline std::int64_t panel_count(std::int64_t rows) { return (rows + panel_width - 1) / panel_width; }

// Elements a matrix of `rows` x `cols` takes in panels (the last panel padded with zero rows).
inline std::int64_t panel_elements(std::int64_t rows, std::int64_t cols) { return panel_count(rows) * panel_width * cols; }

// Weights of `rows` x `cols` in panels: element (p, k, i) at data[(p * cols + k) * 16 + i] is row
// 16 p + i, column k; the last panel is zero past `rows`.
template <class T>
struct PanelRef {
  const T* data;  // [panel_count(rows)][cols][16]
  std::int64_t rows, cols;
  const T* panel(std::int64_t p) const { return data + p * cols * panel_width; }
  T at(std::int64_t r, std::int64_t k) const { return panel(r / panel_width)[k * panel_width + r % panel_width]; }
};

// The token rows of one product and where its outputs go: y[t * ldy + r] = x[t, :] · w[r, :] + bias[r].
struct PanelIO {
  const float* x = nullptr;   // [n, cols] row-major (what a single token reads)
  const float* xk = nullptr;  // x packed by pack_panel_tokens (what n >= 2 tokens read)
  std::int64_t n = 0;
  const float* bias = nullptr;  // [rows] or null
  float* y = nullptr;           // [n, ldy]
  std::int64_t ldy = 0;
};

// Packs rows [r0, r1) of row-major w [rows, cols] into their panels of out (r0 a multiple of 16;
// zeros past `rows` when r1 reaches it). Whole matrices: r0 = 0, r1 = rows.
template <class T>
void pack_panels(const T* w, std::int64_t rows, std::int64_t cols, T* out, std::int64_t r0 = 0, std::int64_t r1 = -1) {
  if (r1 < 0) r1 = rows;
  for (std::int64_t p = r0 / panel_width; p < panel_count(r1); ++p)
    for (std::int64_t k = 0; k < cols; ++k)
      for (std::int64_t i = 0; i < panel_width; ++i) {
        const std::int64_t r = p * panel_width + i;
        out[(p * cols + k) * panel_width + i] = r < rows ? w[r * cols + k] : T{};
      }
}

// y[t, r] = (x[t, 0] w[r, 0] + ... + x[t, cols-1] w[r, cols-1]) + bias[r], one fma at a time from
// 0, for the rows of panels [p0, p1).
template <class T>
void panel_matmul_ref(const PanelRef<T>& w, const PanelIO& io, std::int64_t p0, std::int64_t p1) {
  for (std::int64_t t = 0; t < io.n; ++t)
    for (std::int64_t r = p0 * panel_width; r < std::min(w.rows, p1 * panel_width); ++r) {
      float acc = 0.f;
      for (std::int64_t k = 0; k < w.cols; ++k) acc = std::fma(io.x[t * w.cols + k], to_float(w.at(r, k)), acc);
      io.y[t * io.ldy + r] = acc + (io.bias ? io.bias[r] : 0.f);
    }
}

namespace detail {

inline constexpr int panel_vectors = static_cast<int>(panel_width / static_cast<std::int64_t>(lanes));  // per panel column
// Register block: P panels x NB tokens of accumulators, P * panel_vectors weight vectors and one
// broadcast. AVX-512: 3 x 8 (24 + 3 + 1 of 32 registers); AVX2: 1 x 6 (12 + 2 + 1 of 16).
inline constexpr int panel_tile_tokens = lanes >= 16 ? 8 : std::max(1, (16 - panel_vectors - 1) / panel_vectors);
inline constexpr int panel_tile_panels = lanes >= 16 ? 3 : 1;
// One token: enough panels for 6 independent FMA chains, so the chain latency never bounds it.
inline constexpr int panel_tile_panels_one = std::max(1, 6 / panel_vectors);

// The token blocks n >= 2 rows are taken in: the fewest of at most panel_tile_tokens, sized
// evenly (8 tokens on AVX2 as 4 + 4, not 6 + 2). Block b has size(b) tokens.
struct PanelTokenBlocks {
  std::int64_t n, count;
  explicit PanelTokenBlocks(std::int64_t n) : n(n), count((n + panel_tile_tokens - 1) / panel_tile_tokens) {}
  std::int64_t size(std::int64_t b) const { return n / count + (b < n % count ? 1 : 0); }
};

// How a tile prefetches. Several token blocks: the panels after the tile, spread evenly over the
// tile's column steps (one line per pair), so they arrive while it computes and the weights stream
// at the kernel's average pace. One token, or one block of a few (a speculative verification:
// bound by bandwidth, each weight read once): each panel's own stream this far ahead, the distance
// that measured best for one token (docs/log/2026-11-25-26-packed-panels.md; docs/SPECULATIVE.md).
inline constexpr std::int64_t panel_stream_prefetch_bytes = 1024;
struct PanelPrefetch {
  const char* next = nullptr;  // null: each panel's own stream
  std::int64_t stride = cache_line_bytes;
};

// Accumulators of a register block, P panels x panel_vectors x up to panel_tile_tokens tokens
// (a block of NB tokens uses the first NB), kept in memory between column chunks.
template <int P>
using PanelAcc = fbatch[P][panel_vectors][panel_tile_tokens];

// acc += the products of columns [k0, k1) (k0 even) for NB tokens (xk: their activations as
// [cols][NB]; NB = 1: the row itself) and panels [p0, p0 + P): accumulator (i, v, t) is one FMA
// chain over k in order, however the columns are cut into chunks.
template <int P, int NB, class T>
void panel_tile(const PanelRef<T>& w, std::int64_t p0, const float* xk, std::int64_t k0, std::int64_t k1, PanelAcc<P>& acc_io,
                PanelPrefetch& pf) {
  constexpr int V = panel_vectors;
  constexpr auto L = static_cast<std::int64_t>(lanes);
  const std::int64_t pstride = w.cols * panel_width;
  fbatch acc[P][V][NB];
  KYLIN_CPU_UNROLL for (int i = 0; i < P; ++i)
    KYLIN_CPU_UNROLL for (int v = 0; v < V; ++v)
      KYLIN_CPU_UNROLL for (int t = 0; t < NB; ++t) acc[i][v][t] = acc_io[i][v][t];
  const char* next = pf.next;  // a local copy stays in a register
  const T* wp = w.panel(p0) + k0 * panel_width;
  xk += k0 * NB;
  const auto step = [&](const T* wk, const float* xs) {
    fbatch wv[P][V];
    KYLIN_CPU_UNROLL for (int i = 0; i < P; ++i)
      KYLIN_CPU_UNROLL for (int v = 0; v < V; ++v) wv[i][v] = load_as_float(wk + i * pstride + v * L);
    KYLIN_CPU_UNROLL for (int t = 0; t < NB; ++t) {
      fbatch xb(xs[t]);
      keep_in_register(xb);
      KYLIN_CPU_UNROLL for (int i = 0; i < P; ++i)
        KYLIN_CPU_UNROLL for (int v = 0; v < V; ++v) acc[i][v][t] = fma(xb, wv[i][v], acc[i][v][t]);
    }
  };
  std::int64_t k = k0;
  for (; k + 1 < k1; k += 2, wp += 2 * panel_width, xk += 2 * NB) {
    if (NB == 1 || next == nullptr) {
      KYLIN_CPU_UNROLL for (int i = 0; i < P; ++i) prefetch(wp + i * pstride, panel_stream_prefetch_bytes);
    } else {
      prefetch(next);
      next += pf.stride;
    }
    step(wp, xk);
    step(wp + panel_width, xk + NB);
  }
  if (k < k1) step(wp, xk);
  pf.next = next;
  KYLIN_CPU_UNROLL for (int i = 0; i < P; ++i)
    KYLIN_CPU_UNROLL for (int v = 0; v < V; ++v)
      KYLIN_CPU_UNROLL for (int t = 0; t < NB; ++t) acc_io[i][v][t] = acc[i][v][t];
}

// y[t, rows of panels p0..] = acc + bias for NB tokens.
template <int P, class T>
void panel_store(const PanelRef<T>& w, std::int64_t p0, int nb, const PanelAcc<P>& acc, const float* bias, float* y, std::int64_t ldy) {
  constexpr auto L = static_cast<std::int64_t>(lanes);
  KYLIN_CPU_UNROLL for (int i = 0; i < P; ++i) {
    const std::int64_t r0 = (p0 + i) * panel_width, valid = std::min(panel_width, w.rows - r0);
    for (int t = 0; t < nb; ++t) {
      alignas(64) float out[panel_width];
      for (int v = 0; v < panel_vectors; ++v) acc[i][v][t].store_aligned(out + v * L);
      for (std::int64_t j = 0; j < valid; ++j) y[t * ldy + r0 + j] = out[j] + (bias ? bias[r0 + j] : 0.f);
    }
  }
}

// Token blocks run together column chunk by column chunk, so a chunk of the panels is read from
// memory by the first block and from L1 by the others: at most this many blocks at a time (their
// accumulators wait in memory), chunks of about 8 KiB of weights.
inline constexpr std::int64_t panel_chunk_blocks = 4;
template <int P, class T>
constexpr std::int64_t panel_chunk_cols = std::max<std::int64_t>(2, 8192 / (P * panel_width * static_cast<std::int64_t>(sizeof(T))) / 2 * 2);

// P panels from p0 for the one token of io.
template <int P, class T>
void panel_one(const PanelRef<T>& w, const PanelIO& io, std::int64_t p0) {
  PanelPrefetch own_streams;
  PanelAcc<P> acc{};
  panel_tile<P, 1>(w, p0, io.x, 0, w.cols, acc, own_streams);
  panel_store<P>(w, p0, 1, acc, io.bias, io.y, io.ldy);
}

// P panels from p0 over the io.n >= 2 tokens of io, with the next P panels prefetched across all of it.
template <int P, class T>
void panel_group(const PanelRef<T>& w, const PanelIO& io, std::int64_t p0) {
  const PanelTokenBlocks blocks(io.n);
  const std::int64_t bytes = P * w.cols * panel_width * static_cast<std::int64_t>(sizeof(T));
  const std::int64_t pairs = std::max<std::int64_t>(1, blocks.count * (w.cols / 2));
  PanelPrefetch pf{blocks.count == 1 ? nullptr : reinterpret_cast<const char*>(w.panel(p0 + P)), (bytes + pairs - 1) / pairs};
  PanelAcc<P> acc[panel_chunk_blocks];
  for (std::int64_t b0 = 0, t0 = 0; b0 < blocks.count; b0 += panel_chunk_blocks) {
    const std::int64_t b1 = std::min(blocks.count, b0 + panel_chunk_blocks);
    for (auto& a : acc) std::fill_n(&a[0][0][0], P * panel_vectors * panel_tile_tokens, fbatch(0.f));
    for (std::int64_t k0 = 0; k0 < w.cols; k0 += panel_chunk_cols<P, T>) {
      const std::int64_t k1 = std::min(w.cols, k0 + panel_chunk_cols<P, T>);
      for (std::int64_t b = b0, t = t0; b < b1; t += blocks.size(b), ++b) {
        const std::int64_t nb = blocks.size(b);
        [&]<int... I>(std::integer_sequence<int, I...>) {
          ((nb == I + 1 ? panel_tile<P, I + 1>(w, p0, io.xk + t * w.cols, k0, k1, acc[b - b0], pf) : void()), ...);
        }(std::make_integer_sequence<int, panel_tile_tokens>{});
      }
    }
    for (std::int64_t b = b0; b < b1; t0 += blocks.size(b), ++b)
      panel_store<P>(w, p0, static_cast<int>(blocks.size(b)), acc[b - b0], io.bias, io.y + t0 * io.ldy, io.ldy);
  }
}

}  // namespace detail

// Floats pack_panel_tokens writes for n token rows of `cols` columns.
inline std::int64_t panel_tokens_size(std::int64_t n, std::int64_t cols) { return n * cols; }

// Transposes the token rows x [n, cols] for panel_matmul (n >= 2): token block b (PanelTokenBlocks)
// of nb rows from row t goes to xk + t * cols as [cols][nb]. Done once per call, shared by threads.
inline void pack_panel_tokens(const float* x, std::int64_t n, std::int64_t cols, float* xk) {
  const detail::PanelTokenBlocks blocks(n);
  for (std::int64_t b = 0, t0 = 0; b < blocks.count; t0 += blocks.size(b), ++b) {
    const std::int64_t nb = blocks.size(b);
    for (std::int64_t k = 0; k < cols; ++k)
      for (std::int64_t t = 0; t < nb; ++t) xk[t0 * cols + k * nb + t] = x[(t0 + t) * cols + k];
  }
}

// panel_matmul_ref's outputs, bit for bit, for the panels [p0, p1); io.xk: io.x packed by
// pack_panel_tokens when io.n >= 2. Each group of panels is read from memory once and from cache
// for the further token blocks.
template <class T>
void panel_matmul(const PanelRef<T>& w, const PanelIO& io, std::int64_t p0, std::int64_t p1) {
  if constexpr (!simd_enabled) {
    panel_matmul_ref(w, io, p0, p1);
  } else {
    using namespace detail;
    std::int64_t p = p0;
    if (io.n == 1) {
      for (; p + panel_tile_panels_one <= p1; p += panel_tile_panels_one) panel_one<panel_tile_panels_one>(w, io, p);
      for (; p < p1; ++p) panel_one<1>(w, io, p);
      return;
    }
    for (; p + panel_tile_panels <= p1; p += panel_tile_panels) panel_group<panel_tile_panels>(w, io, p);
    for (; p < p1; ++p) panel_group<1>(w, io, p);
  }
}

}  // namespace kylin::kernels
