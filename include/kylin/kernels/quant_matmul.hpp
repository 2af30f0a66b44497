// The matmul's passes over Q8_0/Q4_0 weights (kernels/quant.hpp): activation rows quantized once
// per call, then the decode kernel (quant_dot.hpp) or, with VNNI, the int8 GEMM (quant_gemm.hpp)
// over the weight rows of all products, split between threads.
#pragma once

#include <cassert>
#include <cstdint>
#include <span>

#include "kylin/core/thread_pool.hpp"
#include "kylin/kernels/matmul_pass.hpp"
#include "kylin/kernels/matmul_scratch.hpp"
#include "kylin/kernels/quant.hpp"
#include "kylin/kernels/quant_dot.hpp"
#include "kylin/kernels/quant_rows.hpp"
#include "kylin/kernels/quant_gemm.hpp"

namespace kylin::kernels::detail {

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
// Below these many rows the decode kernel outruns the int8 GEMM, whose panel packing then costs
// more than its arithmetic saves. An MoE expert's rows (one core, a 768 x 2048 matrix: Q8_0 even
// at 8-12 rows, Q4_0 at 12-16; at 1 row the GEMM took 2-5x the time; 16 instead of 12 cost the
// 30B-A3B shape's q4 pp512 1.6 %). A whole call's rows (2 threads, the 0.6B shape decoding a batch,
// Zen 5 VM, docs/log/2026-11-27-29-zen5-rounds.md): at 12 sequences the GEMM 0.83-0.92x the decode kernel, at 16
// 1.03-1.20x; with AVX-512, Q4_0's decode tile of 4 tokens (quant_dot.hpp) against the GEMM: 16
// sequences 1.15x, 24 level (0.97-0.99x), 32 0.87x.
inline constexpr std::int64_t qgemm_min_expert_rows = 12;
inline constexpr std::int64_t qgemm_min_tokens([[maybe_unused]] DType weights) {
#if defined(KYLIN_INT8_512)
  if (weights == DType::q4_0) return 24;
#endif
  return 16;
}

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
// product of qgemm_min_expert_rows rows or more (an MoE expert's prefill rows) takes the int8 GEMM
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
    if (p.n >= qgemm_min_expert_rows) scratch.gemm_starts_at[i] = own ? at / q8_block : scratch.gemm_starts_at[i - 1];
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

}  // namespace kylin::kernels::detail
