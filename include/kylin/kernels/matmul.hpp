// y[T, out] = x[T, in] · W[out, in]^T (+ bias) with W in its stored dtype (BF16/F16/F32, row-major
// as stored or in 16-row panels: kernels/panel.hpp) or quantized (Q8_0/Q4_0). Decode rows go
// through the dot-product or panel kernels, prefill chunks through the GEMM (kernels/gemm.hpp);
// these entry points plan which rows take which (the passes: matmul_pass.hpp, quant_matmul.hpp).
#pragma once

#include <cassert>
#include <cstdint>
#include <span>

#include "kylin/core/thread_pool.hpp"
#include "kylin/kernels/gemm_bf16.hpp"
#include "kylin/kernels/matmul_pass.hpp"
#include "kylin/kernels/matmul_scratch.hpp"
#include "kylin/kernels/quant_matmul.hpp"
#include "kylin/kernels/simd.hpp"

namespace kylin::kernels {

// Several products of the same input x[rows, cols] (e.g. q/k/v, gate/up) in one parallel pass per
// kernel kind; every w.cols must be equal. plan says which rows take which kernel (RowPlan);
// `prefill` what the GEMM rows of BF16 weights multiply (bf16 only where bf16_gemm_supported(),
// and from gemm_mr GEMM rows on: fewer take the exact decode kernel).
inline void matmul_fused(const float* x, std::span<const MatmulOut> outs, const RowPlan& plan, ThreadPool& pool,
                         MatmulScratch& scratch, [[maybe_unused]] PrefillActivations prefill = PrefillActivations::f32) {
  const std::int64_t K = outs[0].w.cols, gemm_rows = plan.rows - plan.decode_rows;
  for ([[maybe_unused]] const auto& o : outs)
    assert(o.w.cols == K && o.w.layout == outs[0].w.layout && o.w.dtype == outs[0].w.dtype && gemm_rows <= scratch.max_rows &&
           K <= scratch.max_cols && "matmul shapes");
  assert(outs.size() <= max_fused_products && plan.decode_rows >= 0 && gemm_rows >= 0 && "matmul plan");
  if constexpr (!simd_enabled) {
    for (const auto& o : outs) matmul_ref(x, o.w, o.bias, o.y, plan.rows);
    return;
  }
#if defined(KYLIN_VNNI_256)
  // The int8 GEMM and the decode kernel give the same bits: every row, decode or prefill, through
  // the one that is faster for their number (a decode step of 16 sequences as a 16-row prefill).
  if (is_quantized(outs[0].w.dtype)) {
    if (plan.rows < detail::qgemm_min_tokens(outs[0].w.dtype)) return detail::quant_fused(x, outs, plan.rows, pool, scratch);
    return detail::qgemm_fused(x, outs, plan.rows, pool, scratch);
  }
#endif
#if defined(KYLIN_BF16_DOT)  // asked for, and a token panel's worth of GEMM rows
  const bool bf16_gemm = prefill == PrefillActivations::bf16 && outs[0].w.dtype == DType::bf16 && gemm_rows >= detail::gemm_mr;
  assert((!bf16_gemm || bf16_gemm_supported()) && "the backend checked the CPU at load");
#else
  constexpr bool bf16_gemm = false;
#endif
  // Few GEMM rows over panels: every row through the decode kernel in one pass (the same bits).
  if (!bf16_gemm && gemm_rows > 0 && gemm_rows < detail::panel_gemm_min_tokens && outs[0].w.layout == Layout::panels &&
      !is_quantized(outs[0].w.dtype))
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
    const Q8Rows xq = detail::quantize_rows(x + plan.decode_rows * K, gemm_rows, K, pool, scratch);
    return detail::gemm_fused(xq, gemm_outs, gemm_rows, pool, scratch.packed_x.get(), scratch.packed_w_ptrs);
  }
#if defined(KYLIN_BF16_DOT)
  if (bf16_gemm)
    return detail::gemm_bf16_fused(x + plan.decode_rows * K, gemm_outs, gemm_rows, pool, scratch.packed_x.get(), scratch.packed_w_ptrs);
#endif
  detail::gemm_fused(x + plan.decode_rows * K, gemm_outs, gemm_rows, pool, scratch.packed_x.get(), scratch.packed_w_ptrs);
}

// Products with inputs of their own, all rows through the dot-product kernel, in one parallel pass
// (an MoE layer's experts over their decode rows). Either every weight is quantized or none is.
// `prefill` bf16: BF16 products of gemm_mr rows or more take the BF16 GEMM (gemm_bf16_each).
inline void matmul_each(std::span<const DotProduct> products, ThreadPool& pool, MatmulScratch& scratch,
                        [[maybe_unused]] PrefillActivations prefill = PrefillActivations::f32) {
  if constexpr (!simd_enabled) {
    for (const auto& p : products) matmul_ref(p.x, p.out.w, p.out.bias, p.out.y, p.n);
  } else if (!products.empty() && is_quantized(products[0].out.w.dtype)) {
    detail::quant_each(products, pool, scratch);
#if defined(KYLIN_BF16_DOT)
  } else if (!products.empty() && prefill == PrefillActivations::bf16 && products[0].out.w.dtype == DType::bf16) {
    detail::gemm_bf16_each(products, pool, scratch);
#endif
  } else {
    detail::dot_each(products, pool, scratch);
  }
}

// y[rows, w.rows] = x[rows, w.cols] · W^T + bias (bias may be null, [w.rows] f32).
inline void matmul(const float* x, const MatRef& w, const float* bias, float* y, const RowPlan& plan, ThreadPool& pool,
                   MatmulScratch& scratch, PrefillActivations prefill = PrefillActivations::f32) {
  const MatmulOut one{w, bias, y};
  matmul_fused(x, std::span<const MatmulOut>(&one, 1), plan, pool, scratch, prefill);
}

}  // namespace kylin::kernels
