// y[T, out] = x[T, in] · W[out, in]^T (+ bias) with W in its stored dtype (BF16/F16/F32), row-major
// as stored or in 16-row panels (kernels/panel.hpp). Decode rows go through the dot-product or panel
// kernels, prefill chunks through the GEMM (kernels/gemm.hpp); this header plans which rows take
// which and splits the work between threads.
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

namespace kylin::kernels {

// How a matrix's elements are laid out: row-major as a checkpoint stores them, or in panels of 16
// rows, column by column (kernels/panel.hpp: what the CPU backend packs BF16/F16/F32 weights into).
enum class Layout : std::uint8_t { rows, panels };

// A matrix in its stored dtype; rows = output features, cols = input features.
struct MatRef {
  DType dtype = DType::f32;
  const void* data = nullptr;  // [rows, cols], or [panel_count(rows)][cols][16] for Layout::panels
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  Layout layout = Layout::rows;
};

// Calls fn(PanelRef<T>) for a Layout::panels matrix of BF16/F16/F32 elements T.
template <class Fn>
decltype(auto) visit_panels(const MatRef& w, Fn&& fn) {
  return visit_dtype(w.dtype, [&]<class T>(std::type_identity<T>) { return fn(PanelRef<T>{static_cast<const T*>(w.data), w.rows, w.cols}); });
}

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

// Which kernel each row of x goes through: rows [0, decode_rows) take the dot-product kernel (one
// token of each decoding sequence), rows [decode_rows, rows) the GEMM (prefill chunks). A row's sums
// depend only on its kernel, never on the other rows of the call, so a sequence gets the same
// numbers alone or in a batch as long as its rows keep their kind.
struct RowPlan {
  std::int64_t rows = 0;
  std::int64_t decode_rows = 0;
};

// The plan of one sequence's chunk of T tokens: a single token decodes, longer chunks prefill.
inline RowPlan chunk_plan(std::int64_t T) { return {T, T == 1 ? 1 : 0}; }

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
  parallel_chunks(pool, total, 1, [&](int t, std::int64_t p0, std::int64_t p1) {
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
    float* to = scratch.packed_x.get() + (scratch.dot_packed[i] - scratch.packed_x.get());
    if (p.n > 1 && !shares_input(products, i)) pack_decode_rows(p.out.w.layout, p.x, p.n, p.out.w.cols, to);
  });
  dot_pass(products.size(), [&](std::size_t i) { return products[i]; }, [&](std::size_t i) { return scratch.dot_packed[i]; }, pool);
}

// x[n, K] quantized into the scratch's Q8_0 rows.
inline Q8Rows quantize_rows(const float* x, std::int64_t n, std::int64_t K, ThreadPool& pool, MatmulScratch& scratch) {
  assert(n <= scratch.max_rows && K % q8_block == 0 && "q8 matmul shapes");
  const Q8Rows xq{scratch.q8_x.get(), scratch.q8_scale.get(), K};
  parallel_chunks(pool, n, 16, [&](int, std::int64_t t0, std::int64_t t1) {  // a few decode rows: no fork
    quantize_rows_q8_simd(x + t0 * K, t1 - t0, K, Q8Rows{xq.q + t0 * K, xq.scale + t0 * (K / q8_block), K});
  });
  return xq;
}

// Where rows [n, K] quantized into the scratch `at` values in (a multiple of the block) go, with
// what the decode kernel reads beside them.
inline Q8Operand operand_at([[maybe_unused]] std::int64_t n, std::int64_t K, std::int64_t at, MatmulScratch& scratch) {
  assert(at + n * K <= scratch.max_rows * scratch.max_cols && K % q8_block == 0 && "quantized decode rows fit the scratch");
  return {{scratch.q8_x.get() + at, scratch.q8_scale.get() + at / q8_block, K}, scratch.q8_abs.get() + at, scratch.q8_sum8.get() + at / q8_block};
}
// x[n, K] quantized into operand_at(n, K, at), on the calling thread.
inline void fill_operand(const float* x, std::int64_t n, std::int64_t K, std::int64_t at, MatmulScratch& scratch) {
  const Q8Rows xq{scratch.q8_x.get() + at, scratch.q8_scale.get() + at / q8_block, K};
  quantize_rows_q8_simd(x, n, K, xq);
  prepare_operand(xq, n, scratch.q8_abs.get() + at, scratch.q8_sum8.get() + at / q8_block);
}
inline Q8Operand quantize_operand(const float* x, std::int64_t n, std::int64_t K, std::int64_t at, MatmulScratch& scratch) {
  fill_operand(x, n, K, at, scratch);
  return operand_at(n, K, at, scratch);
}


inline void quant_run(const Q8Operand& x, const DotProduct& p, std::int64_t b, std::int64_t e) {
  const MatmulOut& o = p.out;
  visit_quant(o.w.dtype, o.w.data, o.w.rows, o.w.cols, [&](const auto& w) { quant_rows(w, b, e, x, p.n, o.bias, o.y, o.w.rows); });
}

// Decode rows of Q8_0/Q4_0 weights: the rows of x are quantized once, then the weight rows of
// all products are split between threads. (Prefill rows take the GEMM over the same quantized
// values, widened: quantized weight panels and quantized activation rows.)
inline void quant_fused(const float* x, std::span<const MatmulOut> outs, std::int64_t n, ThreadPool& pool,
                        MatmulScratch& scratch) {
  for ([[maybe_unused]] const auto& o : outs) assert(is_quantized(o.w.dtype) && "quantized matmul: every product quantized");
  const Q8Operand operand = quantize_operand(x, n, outs[0].w.cols, 0, scratch);
  row_pass(outs.size(), [&](std::size_t i) { return DotProduct{x, n, outs[i]}; }, pool, 16,
           [&](int, std::size_t, const DotProduct& p, std::int64_t b, std::int64_t e) { quant_run(operand, p, b, e); });
}

#if defined(KYLIN_VNNI_256)
// Below this many rows the decode kernel outruns the int8 GEMM, whose panel packing then costs
// more than its arithmetic saves (one core, a 768 x 2048 expert matrix: Q8_0 even at 8-12 rows,
// Q4_0 at 12-16; at 1 row the GEMM took 2-5x the time).
inline constexpr std::int64_t qgemm_min_tokens = 12;

// Weight rows [b, e) of one product with the int8 GEMM over the whole panels among them and the
// decode kernel over the rows at either edge (the same bits); buf: the thread's panel buffer.
template <QuantView W>
void quant_gemm_rows(const W& w, const Q8Operand& x, const Q8GemmRows& gx, const DotProduct& p, std::int64_t b, std::int64_t e, float* buf,
                     std::int64_t buf_floats) {
  const MatmulOut& o = p.out;
  const std::int64_t p0 = (b + QV::rows - 1) / QV::rows, p1 = e == w.rows ? (e + QV::rows - 1) / QV::rows : e / QV::rows;
  if (p0 >= p1) return quant_rows(w, b, e, x, p.n, o.bias, o.y, o.w.rows);
  quant_rows(w, b, p0 * QV::rows, x, p.n, o.bias, o.y, o.w.rows);
  qgemm_panels(w, gx, p.n, o.bias, o.y, p0, p1, buf, buf_floats);
  if (p1 * QV::rows < e) quant_rows(w, p1 * QV::rows, e, x, p.n, o.bias, o.y, o.w.rows);
}
#endif

// Products with inputs of their own over Q8_0/Q4_0 weights: each input quantized once (products
// in a row with the same input, an expert's gate and up, share it), then one pass. With VNNI a
// product of qgemm_min_tokens rows or more (an MoE expert's prefill rows) takes the int8 GEMM
// within that pass: every output the same bits either way.
inline void quant_each(std::span<const DotProduct> products, ThreadPool& pool, MatmulScratch& scratch) {
  assert(products.size() <= scratch.operands.size() && "matmul_each: more products than the scratch was made for");
  std::int64_t at = 0;  // where each input's rows go, then (in parallel for many) their quantization
  for (std::size_t i = 0; i < products.size(); ++i) {
    const DotProduct& p = products[i];
    assert(is_quantized(p.out.w.dtype) && "quantized matmul_each: every product quantized");
    const bool own = !shares_input(products, i);
    scratch.operands[i] = own ? operand_at(p.n, p.out.w.cols, at, scratch) : scratch.operands[i - 1];
    scratch.gemm_starts_at[i] = -1;
#if defined(KYLIN_VNNI_256)
    if (p.n >= qgemm_min_tokens) scratch.gemm_starts_at[i] = own ? at / q8_block : scratch.gemm_starts_at[i - 1];
#endif
    if (own) at += p.n * p.out.w.cols;
  }
  prepare_each(products.size(), at / products[0].out.w.cols, pool, [&](std::size_t i) {
    const DotProduct& p = products[i];
    if (shares_input(products, i)) return;
    fill_operand(p.x, p.n, p.out.w.cols, scratch.operands[i].rows.q - scratch.q8_x.get(), scratch);
#if defined(KYLIN_VNNI_256)
    if (const std::int64_t s = scratch.gemm_starts_at[i]; s >= 0) {  // both formats' block starts
      std::int32_t* q8_start = scratch.q8_starts.get() + s;
      prepare_gemm_rows(scratch.operands[i].rows, p.n, q8_start, q8_start + scratch.max_rows * (scratch.max_cols / q8_block));
    }
#endif
  });
  row_pass(products.size(), [&](std::size_t i) { return products[i]; }, pool, 16,
           [&]([[maybe_unused]] int t, std::size_t i, const DotProduct& p, std::int64_t b, std::int64_t e) {
#if defined(KYLIN_VNNI_256)
             if (const std::int64_t s = scratch.gemm_starts_at[i]; s >= 0) {
               const Q8Operand& x = scratch.operands[i];
               const std::int32_t* q8_start = scratch.q8_starts.get() + s;
               const Q8GemmRows gx{x.rows, q8_start, q8_start + scratch.max_rows * (scratch.max_cols / q8_block)};
               const MatmulOut& o = p.out;
               return visit_quant(o.w.dtype, o.w.data, o.w.rows, o.w.cols, [&](const auto& w) {
                 quant_gemm_rows(w, x, gx, p, b, e, scratch.packed_w_ptrs[static_cast<std::size_t>(t)], scratch.max_cols * gemm_nr);
               });
             }
#endif
             quant_run(scratch.operands[i], p, b, e);
           });
}

#if defined(KYLIN_VNNI_256)
// Prefill rows of Q8_0/Q4_0 weights with VNNI: x[T, K] quantized as for the decode rows, then the
// int8 GEMM's weight panels of all products split between threads; every output the decode
// kernel's bit for bit.
inline void qgemm_fused(const float* x, std::span<const MatmulOut> outs, std::int64_t T_, ThreadPool& pool, MatmulScratch& scratch) {
  const std::int64_t K = outs[0].w.cols;
  assert(qpanel_floats(K) <= scratch.max_cols * gemm_nr && "an int8 GEMM panel fits a thread's widened-panel buffer");
  const Q8Rows xq = quantize_rows(x, T_, K, pool, scratch);
  bool q8 = false, q4 = false;
  for (const auto& o : outs) (o.w.dtype == DType::q4_0 ? q4 : q8) = true;
  std::int32_t* q8_start = scratch.q8_starts.get();  // [T_, K / q8_block]
  std::int32_t* q4_start = q8_start + scratch.max_rows * (scratch.max_cols / q8_block);  // [T_, K / q8_block]
  const Q8GemmRows rows{xq, q8 ? q8_start : nullptr, q4 ? q4_start : nullptr};
  parallel_chunks(pool, T_, 16, [&](int, std::int64_t t0, std::int64_t t1) {
    const Q8Rows part{xq.q + t0 * K, xq.scale + t0 * (K / q8_block), K};
    const std::int64_t at = t0 * (K / q8_block);
    prepare_gemm_rows(part, t1 - t0, q8 ? q8_start + at : nullptr, q4 ? q4_start + at : nullptr);
  });
  auto panels = [](const MatmulOut& o) { return (o.w.rows + QV::rows - 1) / QV::rows; };
  std::int64_t total = 0;
  for (const auto& o : outs) total += panels(o);
  parallel_chunks(pool, total, QV::panels, [&](int t, std::int64_t p0, std::int64_t p1) {  // whole tiles of panels
    for_units(outs, p0, p1, panels, [&](const MatmulOut& o, std::int64_t b, std::int64_t e) {
      visit_quant(o.w.dtype, o.w.data, o.w.rows, K, [&](const auto& w) {
        qgemm_panels(w, rows, T_, o.bias, o.y, b, e, scratch.packed_w_ptrs[static_cast<std::size_t>(t)], scratch.max_cols * gemm_nr);
      });
    });
  });
}
#endif

}  // namespace detail

// Several products of the same input x[rows, cols] (e.g. q/k/v, gate/up) in one parallel pass per
// kernel kind; every w.cols must be equal. plan says which rows take which kernel (RowPlan).
inline void matmul_fused(const float* x, std::span<const MatmulOut> outs, const RowPlan& plan, ThreadPool& pool,
                         MatmulScratch& scratch) {
  const std::int64_t K = outs[0].w.cols, gemm_rows = plan.rows - plan.decode_rows;
  for ([[maybe_unused]] const auto& o : outs)
    assert(o.w.cols == K && o.w.layout == outs[0].w.layout && gemm_rows <= scratch.max_rows && K <= scratch.max_cols && "matmul shapes");
  assert(outs.size() <= max_fused_products && plan.decode_rows >= 0 && gemm_rows >= 0 && "matmul plan");
  if constexpr (!simd_enabled) {
    for (const auto& o : outs) matmul_ref(x, o.w, o.bias, o.y, plan.rows);
    return;
  }
  // Few GEMM rows over panels: every row through the decode kernel in one pass (the same bits).
  if (gemm_rows > 0 && gemm_rows < detail::panel_gemm_min_tokens && outs[0].w.layout == Layout::panels && !is_quantized(outs[0].w.dtype))
    return detail::dot_fused(x, outs, plan.rows, pool, scratch);
  if (plan.decode_rows > 0) {
    if (is_quantized(outs[0].w.dtype)) detail::quant_fused(x, outs, plan.decode_rows, pool, scratch);
    else detail::dot_fused(x, outs, plan.decode_rows, pool, scratch);
  }
  if (gemm_rows == 0) return;
  MatmulOut shifted[max_fused_products];  // the GEMM's rows start decode_rows rows into x and every y
  for (std::size_t i = 0; i < outs.size(); ++i) shifted[i] = {outs[i].w, outs[i].bias, outs[i].y + plan.decode_rows * outs[i].w.rows};
  const std::span<const MatmulOut> gemm_outs(shifted, outs.size());
  if (is_quantized(outs[0].w.dtype)) {  // the activations quantized as for the decode rows
#if defined(KYLIN_VNNI_256)  // the int8 GEMM and the decode kernel give the same bits: the faster one runs
    if (gemm_rows < detail::qgemm_min_tokens) return detail::quant_fused(x + plan.decode_rows * K, gemm_outs, gemm_rows, pool, scratch);
    return detail::qgemm_fused(x + plan.decode_rows * K, gemm_outs, gemm_rows, pool, scratch);
#endif
    const Q8Rows xq = detail::quantize_rows(x + plan.decode_rows * K, gemm_rows, K, pool, scratch);
    return detail::gemm_fused(xq, gemm_outs, gemm_rows, pool, scratch.packed_x.get(), scratch.packed_w_ptrs);
  }
  detail::gemm_fused(x + plan.decode_rows * K, gemm_outs, gemm_rows, pool, scratch.packed_x.get(), scratch.packed_w_ptrs);
}

// Products with inputs of their own, all rows through the dot-product kernel, in one parallel pass
// (an MoE layer's experts over their decode rows). Either every weight is quantized or none is.
inline void matmul_each(std::span<const DotProduct> products, ThreadPool& pool, MatmulScratch& scratch) {
  if constexpr (!simd_enabled) {
    for (const auto& p : products) matmul_ref(p.x, p.out.w, p.out.bias, p.out.y, p.n);
  } else if (!products.empty() && is_quantized(products[0].out.w.dtype)) {
    detail::quant_each(products, pool, scratch);
  } else {
    detail::dot_each(products, pool, scratch);
  }
}

// y[rows, w.rows] = x[rows, w.cols] · W^T + bias (bias may be null, [w.rows] f32).
inline void matmul(const float* x, const MatRef& w, const float* bias, float* y, const RowPlan& plan, ThreadPool& pool,
                   MatmulScratch& scratch) {
  const MatmulOut one{w, bias, y};
  matmul_fused(x, std::span<const MatmulOut>(&one, 1), plan, pool, scratch);
}

}  // namespace kylin::kernels
