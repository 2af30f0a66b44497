// The buffers a matmul call works in, sized once at load (no allocation on the decode path):
// packed activations and widened weight panels for the GEMM, the quantized activation rows and
// what the int8 kernels read beside them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

#include "kylin/kernels/gemm.hpp"
#include "kylin/kernels/quant.hpp"
#include "kylin/kernels/quant_dot.hpp"
#include "kylin/kernels/simd.hpp"
#include "kylin/kernels/types.hpp"

namespace kylin::kernels {

namespace detail {

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

// The largest number of products one fused call takes (q/k/v).
inline constexpr std::size_t max_fused_products = 4;

// Buffers sized once: packed activations [panels(max_rows) * gemm_mr, max_cols] shared by the
// threads, one widened weight panel [max_cols, gemm_nr] per thread for the GEMM, and the
// activations quantized for Q8_0/Q4_0 weights, with one operand per product of a matmul_each
// call (up to max_products, e.g. 2 per MoE expert).
struct MatmulScratch {
  std::int64_t max_rows = 0, max_cols = 0;
  detail::AlignedBuffer<float> packed_x;
  std::vector<detail::AlignedBuffer<float>> packed_w;
  std::vector<float*> packed_w_ptrs;
  detail::AlignedBuffer<std::int8_t> q8_x;    // [max_rows, max_cols]
  detail::AlignedBuffer<float> q8_scale;      // [max_rows, max_cols / q8_block]
  detail::AlignedBuffer<std::uint8_t> q8_abs;  // [max_rows, max_cols] |q8_x|
  detail::AlignedBuffer<std::int32_t> q8_sum8;  // [max_rows, max_cols / q8_block] 8 * sum(q8_x) per block
  detail::AlignedBuffer<std::int32_t> q8_starts;  // [2, max_rows, max_cols / q8_block] the int8 GEMM's block starts, Q8_0 then Q4_0 (with VNNI)
  std::vector<detail::Q8Operand> operands;    // [max_products] where each product's rows are in the above
  std::vector<std::int64_t> gemm_starts_at;   // [max_products] where in q8_starts its int8 GEMM block starts are (-1: decode kernel)
  std::vector<const float*> dot_packed;       // [max_products] each product's decode rows packed in packed_x
  std::vector<DotProduct> few_rows, many_rows;  // [<= max_products] a BF16 matmul_each call split by row count (gemm_bf16.hpp)
  std::vector<std::int64_t> bf16_at;          // [max_products] where each of many_rows' inputs is packed in packed_x (u32s)
  MatmulScratch() = default;
  MatmulScratch(int threads, std::int64_t max_cols, std::int64_t max_rows, std::size_t max_products = max_fused_products)
      : max_rows(max_rows), max_cols(max_cols),
        packed_x(static_cast<std::size_t>(detail::gemm_token_panels(max_rows) * detail::gemm_mr * max_cols)),
        q8_x(static_cast<std::size_t>(max_rows * max_cols)),
        q8_scale(static_cast<std::size_t>(max_rows * std::max<std::int64_t>(1, max_cols / q8_block))),
        q8_abs(static_cast<std::size_t>(max_rows * max_cols)),
        q8_sum8(static_cast<std::size_t>(max_rows * std::max<std::int64_t>(1, max_cols / q8_block))),
        q8_starts(int8_vnni ? static_cast<std::size_t>(2 * max_rows * std::max<std::int64_t>(1, max_cols / q8_block)) : 0),
        operands(max_products), gemm_starts_at(max_products, -1), dot_packed(max_products), bf16_at(max_products) {
    few_rows.reserve(max_products);  // filled per call without allocating
    many_rows.reserve(max_products);
    for (int t = 0; t < threads; ++t) {
      packed_w.emplace_back(static_cast<std::size_t>(max_cols * detail::gemm_nr));
      packed_w_ptrs.push_back(packed_w.back().get());
    }
  }
};


}  // namespace kylin::kernels
