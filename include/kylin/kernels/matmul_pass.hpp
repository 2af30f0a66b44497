// The matmul's vocabulary (MatRef, MatmulOut, DotProduct, RowPlan, the double oracle) and its
// passes over BF16/F16/F32 weights: how decode rows and GEMM panels are split between threads.
// The entry points are in matmul.hpp; the Q8_0/Q4_0 passes in quant_matmul.hpp.
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
#include "kylin/kernels/dot.hpp"
#include "kylin/kernels/gemm.hpp"
#include "kylin/kernels/matmul_scratch.hpp"
#include "kylin/kernels/panel.hpp"
#include "kylin/kernels/quant.hpp"
#include "kylin/kernels/quant_dot.hpp"
#include "kylin/kernels/quant_gemm.hpp"
#include "kylin/kernels/simd.hpp"
#include "kylin/kernels/types.hpp"

namespace kylin::kernels {

// Calls fn(PanelRef<T>) for a Layout::panels matrix of BF16/F16/F32 elements T.
template <class Fn>
decltype(auto) visit_panels(const MatRef& w, Fn&& fn) {
  return visit_dtype(w.dtype, [&]<class T>(std::type_identity<T>) { return fn(PanelRef<T>{static_cast<const T*>(w.data), w.rows, w.cols}); });
}

// Scalar reference (the test oracle): double accumulation, no blocking, no threads. For Q8_0/Q4_0
// weights, of the quantized product: x's rows quantized as the kernels quantize them.
inline void matmul_ref(const float* x, const MatRef& w, const float* bias, float* y, std::int64_t T) {
  if (is_quantized(w.dtype)) {  // each block of x quantized again per output: no buffer to allocate
    visit_quant(w.dtype, w.data, w.rows, w.cols, [&](const auto& wq) {
      std::int8_t q[q8_block], v[q8_block];
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t r = 0; r < w.rows; ++r) {
          double acc = bias ? bias[r] : 0.0;
          for (std::int64_t b = 0; b < wq.blocks(); ++b) {
            float scale = 0.f;
            quantize_rows_q8(x + t * w.cols + b * q8_block, 1, q8_block, Q8Rows{q, &scale, q8_block});
            block_values(wq, r, b, v);
            std::int32_t s = 0;
            for (std::int64_t i = 0; i < q8_block; ++i) s += std::int32_t{v[i]} * std::int32_t{q[i]};
            acc += static_cast<double>(block_scale(wq, r, b)) * scale * s;
          }
          y[t * w.rows + r] = static_cast<float>(acc);
        }
    });
    return;
  }
  visit_dtype(w.dtype, [&]<class E>(std::type_identity<E>) {
    const E* wd = static_cast<const E*>(w.data);
    const PanelRef<E> panels{wd, w.rows, w.cols};
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t r = 0; r < w.rows; ++r) {
        double acc = bias ? bias[r] : 0.0;
        for (std::int64_t c = 0; c < w.cols; ++c) {
          const E e = w.layout == Layout::panels ? panels.at(r, c) : wd[r * w.cols + c];
          acc += static_cast<double>(x[t * w.cols + c]) * to_float(e);
        }
        y[t * w.rows + r] = static_cast<float>(acc);
      }
  });
}

namespace detail {

// Calls fn(product, begin, end) for the part of [u0, u1) that falls in each product (a MatmulOut
// or a DotProduct), where product i owns `units(product i)` consecutive units (rows for the
// matvec, panels for the GEMM).
template <class Product, class Units, class Fn>
void for_units(std::span<const Product> products, std::int64_t u0, std::int64_t u1, Units units, Fn fn) {
  std::int64_t base = 0;
  for (std::size_t i = 0; i < products.size() && base < u1; ++i) {
    const std::int64_t n = units(products[i]);
    const std::int64_t b = std::max(u0, base), e = std::min(u1, base + n);
    if (b < e) fn(products[i], b - base, e - base);
    base += n;
  }
}

// The units a decode pass splits a product into: its weight rows, or its panels.
inline std::int64_t pass_units(const MatRef& w) { return w.layout == Layout::panels ? panel_count(w.rows) : w.rows; }

// Decode rows: the weight rows (or panels) of all products (product(i) -> DotProduct, i < count)
// form one range, split into one contiguous share per thread (stolen from in chunks of whole
// blocks of `unit`), so one fork-join streams every weight of e.g. q/k/v, or of an MoE layer's
// chosen experts, once. run(thread, i, product, b, e) computes units [b, e) of product i.
template <class Product, class Run>
void row_pass(std::size_t count, Product product, ThreadPool& pool, std::int64_t unit, Run run) {
  std::int64_t units = 0;
  for (std::size_t i = 0; i < count; ++i) units += pass_units(product(i).out.w);
  const std::int64_t grain = std::max<std::int64_t>(unit, units / (16 * pool.size()) / unit * unit);
  parallel_shares(pool, units, grain, [&](int t, std::int64_t u0, std::int64_t u1) {
    std::int64_t base = 0;
    for (std::size_t i = 0; i < count && base < u1; ++i) {
      const DotProduct p = product(i);
      const std::int64_t n = pass_units(p.out.w), b = std::max(u0, base) - base, e = std::min(u1, base + n) - base;
      base += n;
      if (b < e) run(t, i, p, b, e);
    }
  });
}

// Panels a decode pass keeps together: one register block's worth.
inline std::int64_t panel_pass_unit(std::int64_t n) { return n == 1 ? panel_tile_panels_one : panel_tile_panels; }

// The same for BF16/F16/F32 weights, every product of one layout; packed(i) is product i's rows
// packed by pack_decode_rows (unused for a single row).
template <class Product, class Packed>
void dot_pass(std::size_t count, Product product, Packed packed, ThreadPool& pool) {
  const DotProduct first = product(0);
  if (first.out.w.layout == Layout::panels) {
    return row_pass(count, product, pool, panel_pass_unit(first.n), [&](int, std::size_t i, const DotProduct& p, std::int64_t b, std::int64_t e) {
      assert(p.out.w.layout == Layout::panels && "a decode pass: every product in the same layout");
      const MatmulOut& o = p.out;
      visit_panels(o.w, [&](const auto& w) { panel_matmul(w, PanelIO{p.x, packed(i), p.n, o.bias, o.y, o.w.rows}, b, e); });
    });
  }
  row_pass(count, product, pool, std::lcm<std::int64_t>(16, dot_tile_rows), [&](int, std::size_t i, const DotProduct& p, std::int64_t b, std::int64_t e) {
    assert(p.out.w.layout == Layout::rows && "a decode pass: every product in the same layout");
    const MatmulOut& o = p.out;
    visit_dtype(o.w.dtype, [&]<class T>(std::type_identity<T>) {
      const T* w = static_cast<const T*>(o.w.data);
      if (p.n == 1)
        dot_rows<1>(p.x, w, o.bias, o.y, o.w.rows, b, e, o.w.cols);
      else
        dot_rows_n(p.x, packed(i), p.n, w, o.bias, o.y, o.w.rows, b, e, o.w.cols);
    });
  });
}

// The floats n >= 2 decode rows [n, K] take packed for the kernel of `layout`.
inline std::int64_t decode_rows_size(Layout layout, std::int64_t n, std::int64_t K) {
  return layout == Layout::panels ? panel_tokens_size(n, K) : n * dot_packed_cols(K);
}
// Packs n >= 2 decode rows x[n, K] for the kernel of `layout`; returns the floats written.
inline std::int64_t pack_decode_rows(Layout layout, const float* x, std::int64_t n, std::int64_t K, float* out) {
  if (layout == Layout::panels) pack_panel_tokens(x, n, K, out);
  else pack_dot_rows(x, n, K, out);
  return decode_rows_size(layout, n, K);
}

// Below this many rows a product over BF16/F16/F32 panels runs the decode kernel: it reads the
// panels as they are, where the GEMM first widens every one, and gives the same bits. Measured on
// a Xeon VM, 2 threads (docs/PERFORMANCE.md): 0.6B prefill of 32 rows 1.43-1.56x faster, 64 rows
// 1.01-1.10x, 128 rows 0.93-1.07x; a 30B-A3B-shaped MoE pp512 (~32 rows an expert) 1.09-1.13x.
// Not measured with AVX2, which keeps the GEMM.
inline constexpr std::int64_t panel_gemm_min_tokens = lanes >= 16 ? 96 : 0;

// Prefill: x is packed once, then the weight panels of all products are split between threads.
// X is the rows as given (const float*) or quantized (Q8Rows, for Q8_0/Q4_0 weights).
template <class X>
void gemm_fused(const X& x, std::span<const MatmulOut> outs, std::int64_t T_, ThreadPool& pool, float* packed_x,
                std::vector<float*>& packed_w) {
  const std::int64_t K = outs[0].w.cols;
  parallel_chunks(pool, gemm_token_panels(T_), 1, [&](int, std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p) gemm_pack_x(x, T_, K, p, packed_x + p * K * gemm_mr);
  });
  auto panels = [](const MatmulOut& o) { return (o.w.rows + gemm_nr - 1) / gemm_nr; };
  std::int64_t total = 0;
  for (const auto& o : outs) total += panels(o);
  parallel_shares(pool, total, 1, [&](int t, std::int64_t p0, std::int64_t p1) {  // shares: gemm_panels prefetches each next panel
    for_units(outs, p0, p1, panels, [&](const MatmulOut& o, std::int64_t b, std::int64_t e) {
      float* pw = packed_w[static_cast<std::size_t>(t)];
      if (is_quantized(o.w.dtype))
        return visit_quant(o.w.dtype, o.w.data, o.w.rows, K, [&](const auto& w) { gemm_panels(packed_x, w, o.bias, o.y, T_, o.w.rows, K, b, e, pw); });
      if (o.w.layout == Layout::panels)
        return visit_panels(o.w, [&](const auto& w) { gemm_panels(packed_x, w, o.bias, o.y, T_, o.w.rows, K, b, e, pw); });
      visit_dtype(o.w.dtype, [&]<class T>(std::type_identity<T>) {
        gemm_panels(packed_x, static_cast<const T*>(o.w.data), o.bias, o.y, T_, o.w.rows, K, b, e, pw);
      });
    });
  });
}

// Runs prepare(i) for products [0, count): on the calling thread for a few rows (decode), split
// between the threads for many (an MoE pass's prefill rows, whose packing or quantization would
// otherwise run on one core).
template <class Prepare>
void prepare_each(std::size_t count, std::int64_t rows, ThreadPool& pool, Prepare prepare) {
  constexpr std::int64_t parallel_rows = 64;
  if (rows < parallel_rows) {
    for (std::size_t i = 0; i < count; ++i) prepare(i);
    return;
  }
  parallel_chunks(pool, static_cast<std::int64_t>(count), 1, [&](int, std::int64_t b, std::int64_t e) {
    for (auto i = static_cast<std::size_t>(b); i < static_cast<std::size_t>(e); ++i) prepare(i);
  });
}

// Whether product i reads the same rows as product i - 1 (an MoE expert's gate and up), so the
// rows prepared for one serve both.
inline bool shares_input(std::span<const DotProduct> products, std::size_t i) {
  if (i == 0) return false;
  const DotProduct &p = products[i], &q = products[i - 1];
  return p.x == q.x && p.n == q.n && p.out.w.cols == q.out.w.cols;
}

// Decode rows of BF16/F16/F32 weights: x[n, K] is packed once for the batched kernel (into the
// GEMM's activation panels, which a call fills only after its decode rows are done), then one pass.
inline void dot_fused(const float* x, std::span<const MatmulOut> outs, std::int64_t n, ThreadPool& pool, MatmulScratch& scratch) {
  const std::int64_t K = outs[0].w.cols;
  assert(n <= scratch.max_rows && K <= scratch.max_cols && "packed decode rows fit the scratch");
  if (n > 1) pack_decode_rows(outs[0].w.layout, x, n, K, scratch.packed_x.get());
  dot_pass(outs.size(), [&](std::size_t i) { return DotProduct{x, n, outs[i]}; }, [&](std::size_t) { return scratch.packed_x.get(); }, pool);
}

// Products with inputs of their own over stored weights: each input of several rows packed once
// (an expert's gate and up share theirs), then one pass.
inline void dot_each(std::span<const DotProduct> products, ThreadPool& pool, MatmulScratch& scratch) {
  assert(products.size() <= scratch.dot_packed.size() && "matmul_each: more products than the scratch was made for");
  std::int64_t at = 0, rows = 0;  // where each input's packed rows go, then (in parallel for many) their packing
  for (std::size_t i = 0; i < products.size(); ++i) {
    const DotProduct& p = products[i];
    if (shares_input(products, i)) {
      scratch.dot_packed[i] = scratch.dot_packed[i - 1];
    } else if (p.n > 1) {
      scratch.dot_packed[i] = scratch.packed_x.get() + at;
      at += decode_rows_size(p.out.w.layout, p.n, p.out.w.cols);
      rows += p.n;
    }
  }
  assert(at <= gemm_token_panels(scratch.max_rows) * gemm_mr * scratch.max_cols && "packed decode rows fit the scratch");
  prepare_each(products.size(), rows, pool, [&](std::size_t i) {
    const DotProduct& p = products[i];
    if (p.n < 2 || shares_input(products, i)) return;  // (dot_packed[i] is unset for a single row)
    pack_decode_rows(p.out.w.layout, p.x, p.n, p.out.w.cols, scratch.packed_x.get() + (scratch.dot_packed[i] - scratch.packed_x.get()));
  });
  dot_pass(products.size(), [&](std::size_t i) { return products[i]; }, [&](std::size_t i) { return scratch.dot_packed[i]; }, pool);
}

}  // namespace detail
}  // namespace kylin::kernels
