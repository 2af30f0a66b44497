// y[T, out] = x[T, in] · W[out, in]^T (+ bias) with W in its stored dtype (BF16/F16/F32).
// Decode rows go through a dot-product kernel that streams the weights once for all of them and
// widens them in registers; prefill chunks through a register-tiled GEMM over packed f32 panels.
#pragma once

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <memory>
#include <new>
#include <numeric>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "kylin/core/thread_pool.hpp"
#include "kylin/kernels/simd.hpp"

namespace kylin::kernels {

// A row-major matrix in its stored dtype; rows = output features, cols = input features.
struct MatRef {
  DType dtype = DType::f32;
  const void* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
};

// One product of a fused call: y[T, w.rows] = x · W^T + bias, x shared by every product.
struct MatmulOut {
  MatRef w;
  const float* bias = nullptr;  // [w.rows] or null
  float* y = nullptr;           // [T, w.rows]
};

// One product of a decode pass with its own input: y[n, w.rows] = x[n, w.cols] · W^T + bias
// (an MoE layer's experts, each over the decode rows routed to it).
struct DotProduct {
  const float* x = nullptr;  // [n, w.cols]
  std::int64_t n = 0;
  MatmulOut out;
};

// Which kernel each row of x goes through: rows [0, dot_rows) take the dot-product kernel (one
// token of each decoding sequence), rows [dot_rows, rows) the GEMM (prefill chunks). A row's sums
// depend only on its kernel, never on the other rows of the call, so a sequence gets the same
// numbers alone or in a batch as long as its rows keep their kind.
struct RowPlan {
  std::int64_t rows = 0;
  std::int64_t dot_rows = 0;
};

// The plan of one sequence's chunk of T tokens: a single token decodes, longer chunks prefill.
inline RowPlan chunk_plan(std::int64_t T) { return {T, T == 1 ? 1 : 0}; }

// Scalar reference (the test oracle): double accumulation, no blocking, no threads.
inline void matmul_ref(const float* x, const MatRef& w, const float* bias, float* y, std::int64_t T) {
  visit_dtype(w.dtype, [&]<class E>(std::type_identity<E>) {
    const E* wd = static_cast<const E*>(w.data);
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t r = 0; r < w.rows; ++r) {
        double acc = bias ? bias[r] : 0.0;
        for (std::int64_t c = 0; c < w.cols; ++c) acc += static_cast<double>(x[t * w.cols + c]) * to_float(wd[r * w.cols + c]);
        y[t * w.rows + r] = static_cast<float>(acc);
      }
  });
}

namespace detail {

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

// Prefill GEMM: a register-tiled micro-kernel computes a [gemm_mr tokens, gemm_nr outputs] tile
// of y from packed f32 panels: x as [K][gemm_mr] (packed once per call, shared by threads) and
// W as [K][gemm_nr] (widened from BF16/F16 once per panel, reused by every token panel).
// 2 x gemm_mr accumulators + 2 weight vectors + 1 broadcast fit the register file.
inline constexpr std::int64_t gemm_nr = 2 * static_cast<std::int64_t>(lanes);
inline constexpr std::int64_t gemm_mr = lanes >= 16 ? 12 : 6;

inline std::int64_t gemm_token_panels(std::int64_t T) { return (T + gemm_mr - 1) / gemm_mr; }

// a[K][gemm_mr] = rows p*gemm_mr.. of x[T, K], transposed; rows past T are zero.
inline void gemm_pack_x(const float* x, std::int64_t T, std::int64_t K, std::int64_t p, float* a) {
  for (std::int64_t i = 0; i < gemm_mr; ++i) {
    const std::int64_t t = p * gemm_mr + i;
    if (t < T)
      for (std::int64_t k = 0; k < K; ++k) a[k * gemm_mr + i] = x[t * K + k];
    else
      for (std::int64_t k = 0; k < K; ++k) a[k * gemm_mr + i] = 0.f;
  }
}

// b[K][gemm_nr] = rows n0..n0+nv of W[.., K] widened and transposed; missing rows are zero.
template <class T>
void gemm_pack_w(const T* w, std::int64_t n0, std::int64_t nv, std::int64_t K, float* b) {
  for (std::int64_t j = 0; j < gemm_nr; ++j) {
    if (j < nv) {
      const T* wr = w + (n0 + j) * K;
      for (std::int64_t k = 0; k < K; ++k) b[k * gemm_nr + j] = to_float(wr[k]);
    } else {
      for (std::int64_t k = 0; k < K; ++k) b[k * gemm_nr + j] = 0.f;
    }
  }
}

// y[mv, nv] (row stride ldy) = a-panel · b-panel + bias, for the valid part of one tile.
inline void gemm_tile(const float* a, const float* b, std::int64_t K, const float* bias, float* y, std::int64_t ldy,
                      std::int64_t mv, std::int64_t nv) {
  fbatch acc[gemm_mr][2];
  for (auto& row : acc) row[0] = row[1] = fbatch(0.f);
  for (std::int64_t k = 0; k < K; ++k) {
    const fbatch b0 = fbatch::load_aligned(b + k * gemm_nr), b1 = fbatch::load_aligned(b + k * gemm_nr + lanes);
    const float* ak = a + k * gemm_mr;
#pragma GCC unroll 16
    for (std::int64_t i = 0; i < gemm_mr; ++i) {
      const fbatch ai(ak[i]);
      acc[i][0] = xsimd::fma(ai, b0, acc[i][0]);
      acc[i][1] = xsimd::fma(ai, b1, acc[i][1]);
    }
  }
  alignas(64) float row[gemm_nr];
  for (std::int64_t i = 0; i < mv; ++i) {
    acc[i][0].store_aligned(row);
    acc[i][1].store_aligned(row + lanes);
    float* yi = y + i * ldy;
    for (std::int64_t j = 0; j < nv; ++j) yi[j] = row[j] + (bias ? bias[j] : 0.f);
  }
}

// Output panels [p0, p1) of y[T, w.rows]: widen each weight panel once, run it over every token panel.
template <class T>
void gemm_panels(const float* packed_x, const T* w, const float* bias, float* y, std::int64_t T_, std::int64_t rows,
                 std::int64_t K, std::int64_t p0, std::int64_t p1, float* packed_w) {
  for (std::int64_t p = p0; p < p1; ++p) {
    const std::int64_t n0 = p * gemm_nr, nv = std::min(gemm_nr, rows - n0);
    gemm_pack_w(w, n0, nv, K, packed_w);
    for (std::int64_t tp = 0; tp < gemm_token_panels(T_); ++tp) {
      const std::int64_t mv = std::min(gemm_mr, T_ - tp * gemm_mr);
      gemm_tile(packed_x + tp * K * gemm_mr, packed_w, K, bias ? bias + n0 : nullptr, y + tp * gemm_mr * rows + n0, rows, mv, nv);
    }
  }
}

// Calls fn(product index, begin, end) for the part of [u0, u1) that falls in each product,
// where product i owns `units(i)` consecutive units (rows for the matvec, panels for the GEMM).
template <class Units, class Fn>
void for_units(std::span<const MatmulOut> outs, std::int64_t u0, std::int64_t u1, Units units, Fn fn) {
  std::int64_t base = 0;
  for (std::size_t i = 0; i < outs.size() && base < u1; ++i) {
    const std::int64_t n = units(outs[i]);
    const std::int64_t b = std::max(u0, base), e = std::min(u1, base + n);
    if (b < e) fn(outs[i], b - base, e - base);
    base += n;
  }
}

// Decode rows: the weight rows of all products (product(i) -> DotProduct, i < count) form one
// range, split into one contiguous share per thread (stolen from in chunks of whole row blocks),
// so one fork-join streams every weight of e.g. q/k/v, or of an MoE layer's chosen experts, once.
template <class Product>
void dot_pass(std::size_t count, Product product, ThreadPool& pool) {
  std::int64_t rows = 0;
  for (std::size_t i = 0; i < count; ++i) rows += product(i).out.w.rows;
  const std::int64_t unit = std::lcm<std::int64_t>(16, dot_tile_rows);
  const std::int64_t grain = std::max<std::int64_t>(unit, rows / (16 * pool.size()) / unit * unit);
  parallel_shares(pool, rows, grain, [&](int, std::int64_t r0, std::int64_t r1) {
    std::int64_t base = 0;
    for (std::size_t i = 0; i < count && base < r1; ++i) {
      const DotProduct p = product(i);
      const MatmulOut& o = p.out;
      const std::int64_t b = std::max(r0, base) - base, e = std::min(r1, base + o.w.rows) - base;
      base += o.w.rows;
      if (b >= e) continue;
      visit_dtype(o.w.dtype, [&]<class T>(std::type_identity<T>) {
        const T* w = static_cast<const T*>(o.w.data);
        if (p.n == 1)
          dot_rows<1>(p.x, w, o.bias, o.y, o.w.rows, b, e, o.w.cols);
        else
          dot_rows_n(p.x, p.n, w, o.bias, o.y, o.w.rows, b, e, o.w.cols);
      });
    }
  });
}

inline void dot_fused(const float* x, std::span<const MatmulOut> outs, std::int64_t n, ThreadPool& pool) {
  dot_pass(outs.size(), [&](std::size_t i) { return DotProduct{x, n, outs[i]}; }, pool);
}

// Prefill: x is packed once, then the weight panels of all products are split between threads.
inline void gemm_fused(const float* x, std::span<const MatmulOut> outs, std::int64_t T_, ThreadPool& pool, float* packed_x,
                       std::vector<float*>& packed_w) {
  const std::int64_t K = outs[0].w.cols;
  parallel_chunks(pool, gemm_token_panels(T_), 1, [&](int, std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p) gemm_pack_x(x, T_, K, p, packed_x + p * K * gemm_mr);
  });
  auto panels = [](const MatmulOut& o) { return (o.w.rows + gemm_nr - 1) / gemm_nr; };
  std::int64_t total = 0;
  for (const auto& o : outs) total += panels(o);
  parallel_chunks(pool, total, 1, [&](int t, std::int64_t p0, std::int64_t p1) {
    for_units(outs, p0, p1, panels, [&](const MatmulOut& o, std::int64_t b, std::int64_t e) {
      visit_dtype(o.w.dtype, [&]<class T>(std::type_identity<T>) {
        gemm_panels(packed_x, static_cast<const T*>(o.w.data), o.bias, o.y, T_, o.w.rows, K, b, e,
                    packed_w[static_cast<std::size_t>(t)]);
      });
    });
  });
}

template <class T>
struct AlignedBuffer {
  struct Delete {
    void operator()(T* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  std::unique_ptr<T[], Delete> ptr;
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t n) : ptr(static_cast<T*>(::operator new[](n * sizeof(T), std::align_val_t{64}))) {}
  T* get() const { return ptr.get(); }
};

}  // namespace detail

// Buffers sized once: packed activations [panels(max_tokens) * gemm_mr, max_cols] shared by the
// threads, and one widened weight panel [max_cols, gemm_nr] per thread for the GEMM.
struct MatmulScratch {
  std::int64_t max_tokens = 0, max_cols = 0;
  detail::AlignedBuffer<float> packed_x;
  std::vector<detail::AlignedBuffer<float>> packed_w;
  std::vector<float*> packed_w_ptrs;
  MatmulScratch() = default;
  MatmulScratch(int threads, std::int64_t max_cols, std::int64_t max_tokens)
      : max_tokens(max_tokens), max_cols(max_cols),
        packed_x(static_cast<std::size_t>(detail::gemm_token_panels(max_tokens) * detail::gemm_mr * max_cols)) {
    for (int t = 0; t < threads; ++t) {
      packed_w.emplace_back(static_cast<std::size_t>(max_cols * detail::gemm_nr));
      packed_w_ptrs.push_back(packed_w.back().get());
    }
  }
};

// The largest number of products one fused call takes (q/k/v).
inline constexpr std::size_t max_fused_products = 4;

// Several products of the same input x[rows, cols] (e.g. q/k/v, gate/up) in one parallel pass per
// kernel kind; every w.cols must be equal. plan says which rows take which kernel (RowPlan).
inline void matmul_fused(const float* x, std::span<const MatmulOut> outs, const RowPlan& plan, ThreadPool& pool,
                         MatmulScratch& scratch) {
  const std::int64_t K = outs[0].w.cols, gemm_rows = plan.rows - plan.dot_rows;
  for ([[maybe_unused]] const auto& o : outs)
    assert(o.w.cols == K && gemm_rows <= scratch.max_tokens && K <= scratch.max_cols && "matmul shapes");
  assert(outs.size() <= max_fused_products && plan.dot_rows >= 0 && gemm_rows >= 0 && "matmul plan");
  if constexpr (!simd_enabled) {
    for (const auto& o : outs) matmul_ref(x, o.w, o.bias, o.y, plan.rows);
    return;
  }
  if (plan.dot_rows > 0) detail::dot_fused(x, outs, plan.dot_rows, pool);
  if (gemm_rows == 0) return;
  MatmulOut shifted[max_fused_products];  // the GEMM's rows start dot_rows rows into x and every y
  for (std::size_t i = 0; i < outs.size(); ++i) shifted[i] = {outs[i].w, outs[i].bias, outs[i].y + plan.dot_rows * outs[i].w.rows};
  detail::gemm_fused(x + plan.dot_rows * K, std::span<const MatmulOut>(shifted, outs.size()), gemm_rows, pool,
                     scratch.packed_x.get(), scratch.packed_w_ptrs);
}

// Products with inputs of their own, all rows through the dot-product kernel, in one parallel pass.
inline void matmul_each(std::span<const DotProduct> products, ThreadPool& pool) {
  if constexpr (!simd_enabled) {
    for (const auto& p : products) matmul_ref(p.x, p.out.w, p.out.bias, p.out.y, p.n);
  } else {
    detail::dot_pass(products.size(), [&](std::size_t i) { return products[i]; }, pool);
  }
}

// y[rows, w.rows] = x[rows, w.cols] · W^T + bias (bias may be null, [w.rows] f32).
inline void matmul(const float* x, const MatRef& w, const float* bias, float* y, const RowPlan& plan, ThreadPool& pool,
                   MatmulScratch& scratch) {
  const MatmulOut one{w, bias, y};
  matmul_fused(x, std::span<const MatmulOut>(&one, 1), plan, pool, scratch);
}

}  // namespace kylin::kernels
