// y[T, out] = x[T, in] · W[out, in]^T (+ bias) with W in its stored dtype (BF16/F16/F32).
// Decode (T = 1) is a memory-bound matvec that widens weights in registers; prefill (T > 1) is a
// register-tiled GEMM over packed f32 panels. Work is split by output rows between threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <type_traits>
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

// Scalar reference (the test oracle): double accumulation, no blocking, no threads.
inline void matmul_ref(const float* x, const MatRef& w, const float* bias, float* y, std::int64_t T) {
  auto weight = [&](std::int64_t r, std::int64_t c) -> double {
    const std::int64_t i = r * w.cols + c;
    switch (w.dtype) {
      case DType::bf16: return to_float(static_cast<const bf16_t*>(w.data)[i]);
      case DType::f16: return to_float(static_cast<const f16_t*>(w.data)[i]);
      default: return static_cast<const float*>(w.data)[i];
    }
  };
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t r = 0; r < w.rows; ++r) {
      double acc = bias ? bias[r] : 0.0;
      for (std::int64_t c = 0; c < w.cols; ++c) acc += static_cast<double>(x[t * w.cols + c]) * weight(r, c);
      y[t * w.rows + r] = static_cast<float>(acc);
    }
}

namespace detail {

template <class T>
inline float dot_tail(const float* x, const T* w, std::int64_t from, std::int64_t n) {
  float acc = 0.f;
  for (std::int64_t i = from; i < n; ++i) acc += x[i] * to_float(w[i]);
  return acc;
}

// How far ahead of its reads the matvec prefetches: measured on the Zen 4 VM of PERFORMANCE.md
// over the mapped checkpoint, 4 KiB gave +5-7 % (2 threads: 56 -> 60 GB/s), 8 KiB and more lost.
inline constexpr std::int64_t matvec_prefetch_bytes = 4096;

// y[r] = x · w[r, :] + bias[r] for rows [r0, r1). One row at a time, so the weights stream
// through memory strictly in order (measured ~1.6x faster than interleaving 4 rows, which splits
// the stream the hardware prefetcher follows); 4 accumulators hide the FMA latency.
template <class T>
void matvec_rows_simd(const float* x, const T* w, const float* bias, float* y, std::int64_t r0, std::int64_t r1,
                      std::int64_t cols) {
  const auto L = static_cast<std::int64_t>(lanes);
  const std::int64_t end4 = cols / (4 * L) * (4 * L), end1 = cols / L * L;
  for (std::int64_t r = r0; r < r1; ++r) {
    const T* wr = w + r * cols;
    fbatch a0(0.f), a1(0.f), a2(0.f), a3(0.f);
    std::int64_t c = 0;
    for (; c < end4; c += 4 * L) {
      prefetch_lines(wr + c, matvec_prefetch_bytes, 4 * L * static_cast<std::int64_t>(sizeof(T)));
      a0 = xsimd::fma(fbatch::load_unaligned(x + c), load_as_float(wr + c), a0);
      a1 = xsimd::fma(fbatch::load_unaligned(x + c + L), load_as_float(wr + c + L), a1);
      a2 = xsimd::fma(fbatch::load_unaligned(x + c + 2 * L), load_as_float(wr + c + 2 * L), a2);
      a3 = xsimd::fma(fbatch::load_unaligned(x + c + 3 * L), load_as_float(wr + c + 3 * L), a3);
    }
    for (; c < end1; c += L) a0 = xsimd::fma(fbatch::load_unaligned(x + c), load_as_float(wr + c), a0);
    y[r] = xsimd::hadd((a0 + a1) + (a2 + a3)) + dot_tail(x, wr, end1, cols) + (bias ? bias[r] : 0.f);
  }
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

// Calls fn(thread, begin, end) for chunks of `grain` units of [0, n), claimed through an atomic
// counter: a thread that starts late (descheduled on a busy machine) finds less work left
// instead of holding the others up, as a fixed split would.
template <class Fn>
void parallel_chunks(ThreadPool& pool, std::int64_t n, std::int64_t grain, Fn&& fn) {
  if (n <= 0) return;
  if (pool.size() == 1 || n <= grain) {
    fn(0, std::int64_t{0}, n);
    return;
  }
  std::atomic<std::int64_t> next{0};
  pool.run([&](int t, int) {
    for (std::int64_t b; (b = next.fetch_add(grain, std::memory_order_relaxed)) < n;) fn(t, b, std::min(n, b + grain));
  });
}

// Calls fn(begin, end) over [0, n) in chunks of `grain`: thread t owns the t-th contiguous share
// and walks it front to back, so on a quiet machine every thread streams one contiguous range
// (measured over a decode step's matvecs: 52 GB/s, against 47 when chunks go round-robin through
// one counter); a thread that finishes its share then takes what is left of the others', so a
// descheduled thread on a busy machine holds nobody up.
template <class Fn>
void parallel_shares(ThreadPool& pool, std::int64_t n, std::int64_t grain, Fn&& fn) {
  constexpr int max_shares = 64;  // cursors live on the stack: no allocation per call
  const int nt = pool.size();
  if (n <= 0) return;
  if (nt == 1 || n <= grain || nt > max_shares) {
    parallel_chunks(pool, n, grain, [&](int, std::int64_t b, std::int64_t e) { fn(b, e); });
    return;
  }
  struct alignas(64) Share {
    std::atomic<std::int64_t> next;
    std::int64_t end;
  };
  Share shares[max_shares];
  const std::int64_t blocks = (n + grain - 1) / grain;
  for (int t = 0; t < nt; ++t) {
    shares[t].next.store(blocks * t / nt * grain, std::memory_order_relaxed);
    shares[t].end = std::min(n, blocks * (t + 1) / nt * grain);
  }
  pool.run([&](int t, int) {
    for (int k = 0; k < nt; ++k) {
      Share& s = shares[(t + k) % nt];
      for (std::int64_t b; (b = s.next.fetch_add(grain, std::memory_order_relaxed)) < s.end;) fn(b, std::min(s.end, b + grain));
    }
  });
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

template <class Fn>
void with_dtype(DType dtype, Fn fn) {
  switch (dtype) {
    case DType::bf16: fn(static_cast<const bf16_t*>(nullptr)); break;
    case DType::f16: fn(static_cast<const f16_t*>(nullptr)); break;
    default: fn(static_cast<const float*>(nullptr)); break;
  }
}

// Decode: the rows of all products form one range, split into one contiguous share per thread
// (stolen from in chunks of a multiple of 16 rows), so one fork-join streams every weight of e.g.
// q/k/v once.
inline void matvec_fused(const float* x, std::span<const MatmulOut> outs, ThreadPool& pool) {
  std::int64_t rows = 0;
  for (const auto& o : outs) rows += o.w.rows;
  const std::int64_t grain = std::max<std::int64_t>(16, rows / (16 * pool.size()) / 16 * 16);
  parallel_shares(pool, rows, grain, [&](std::int64_t r0, std::int64_t r1) {
    for_units(outs, r0, r1, [](const MatmulOut& o) { return o.w.rows; }, [&](const MatmulOut& o, std::int64_t b, std::int64_t e) {
      with_dtype(o.w.dtype, [&](auto tag) {
        using T = std::remove_cv_t<std::remove_pointer_t<decltype(tag)>>;
        matvec_rows_simd(x, static_cast<const T*>(o.w.data), o.bias, o.y, b, e, o.w.cols);
      });
    });
  });
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
      with_dtype(o.w.dtype, [&](auto tag) {
        using T = std::remove_cv_t<std::remove_pointer_t<decltype(tag)>>;
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

// Buffers of the GEMM path, sized once: packed activations [panels(max_tokens) * gemm_mr, max_cols]
// shared by the threads, and one widened weight panel [max_cols, gemm_nr] per thread.
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

// Several products of the same input x[T, cols] (e.g. q/k/v, gate/up) in one parallel pass;
// every w.cols must be equal.
inline void matmul_fused(const float* x, std::span<const MatmulOut> outs, std::int64_t T, ThreadPool& pool,
                         MatmulScratch& scratch) {
  for ([[maybe_unused]] const auto& o : outs)
    assert(o.w.cols == outs[0].w.cols && T <= scratch.max_tokens && o.w.cols <= scratch.max_cols && "matmul shapes");
  if constexpr (!simd_enabled) {
    for (const auto& o : outs) matmul_ref(x, o.w, o.bias, o.y, T);
  } else if (T == 1) {
    detail::matvec_fused(x, outs, pool);
  } else {
    detail::gemm_fused(x, outs, T, pool, scratch.packed_x.get(), scratch.packed_w_ptrs);
  }
}

// y[T, w.rows] = x[T, w.cols] · W^T + bias (bias may be null, [w.rows] f32).
inline void matmul(const float* x, const MatRef& w, const float* bias, float* y, std::int64_t T, ThreadPool& pool,
                   MatmulScratch& scratch) {
  const MatmulOut one{w, bias, y};
  matmul_fused(x, std::span<const MatmulOut>(&one, 1), T, pool, scratch);
}

}  // namespace kylin::kernels
