// y[T, out] = x[T, in] · W[out, in]^T (+ bias) with W in its stored dtype (BF16/F16/F32).
// Decode (T = 1) is a memory-bound matvec that widens weights in registers; prefill widens a
// block of W to f32 once and runs Eigen's GEMM over all T tokens. Work is split by output rows.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <cstdint>
#include <memory>
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

// Rows processed together so each load of x is reused across several weight rows.
inline constexpr std::int64_t matvec_rows = 4;

template <class T>
inline float dot_tail(const float* x, const T* w, std::int64_t from, std::int64_t n) {
  float acc = 0.f;
  for (std::int64_t i = from; i < n; ++i) acc += x[i] * to_float(w[i]);
  return acc;
}

template <class T>
void matvec_rows_simd(const float* x, const T* w, const float* bias, float* y, std::int64_t r0, std::int64_t r1,
                      std::int64_t cols) {
  const std::int64_t vec_end = cols / static_cast<std::int64_t>(lanes) * static_cast<std::int64_t>(lanes);
  std::int64_t r = r0;
  for (; r + matvec_rows <= r1; r += matvec_rows) {
    const T* w0 = w + r * cols;
    const T* w1 = w0 + cols;
    const T* w2 = w1 + cols;
    const T* w3 = w2 + cols;
    fbatch a0(0.f), a1(0.f), a2(0.f), a3(0.f);
    for (std::int64_t c = 0; c < vec_end; c += lanes) {
      const fbatch xv = fbatch::load_unaligned(x + c);
      a0 = xsimd::fma(xv, load_as_float(w0 + c), a0);
      a1 = xsimd::fma(xv, load_as_float(w1 + c), a1);
      a2 = xsimd::fma(xv, load_as_float(w2 + c), a2);
      a3 = xsimd::fma(xv, load_as_float(w3 + c), a3);
    }
    y[r + 0] = xsimd::hadd(a0) + dot_tail(x, w0, vec_end, cols) + (bias ? bias[r + 0] : 0.f);
    y[r + 1] = xsimd::hadd(a1) + dot_tail(x, w1, vec_end, cols) + (bias ? bias[r + 1] : 0.f);
    y[r + 2] = xsimd::hadd(a2) + dot_tail(x, w2, vec_end, cols) + (bias ? bias[r + 2] : 0.f);
    y[r + 3] = xsimd::hadd(a3) + dot_tail(x, w3, vec_end, cols) + (bias ? bias[r + 3] : 0.f);
  }
  for (; r < r1; ++r) {
    const T* wr = w + r * cols;
    fbatch a(0.f);
    for (std::int64_t c = 0; c < vec_end; c += lanes) a = xsimd::fma(fbatch::load_unaligned(x + c), load_as_float(wr + c), a);
    y[r] = xsimd::hadd(a) + dot_tail(x, wr, vec_end, cols) + (bias ? bias[r] : 0.f);
  }
}

// Output rows per widened block in the GEMM path: 64 rows x up to ~10k inputs stays in L2.
inline constexpr std::int64_t gemm_block_rows = 64;

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class T>
void gemm_rows(const float* x, const T* w, const float* bias, float* y, std::int64_t T_, std::int64_t r0,
               std::int64_t r1, std::int64_t rows, std::int64_t cols, float* block /* [gemm_block_rows, cols] */) {
  using Eigen::Map, Eigen::OuterStride, Eigen::Dynamic, Eigen::Unaligned;
  const Map<const RowMatrix> X(x, T_, cols);  // [T, in]
  for (std::int64_t b = r0; b < r1; b += gemm_block_rows) {
    const std::int64_t nb = std::min(gemm_block_rows, r1 - b);
    const float* wb;
    if constexpr (std::is_same_v<T, float>) {
      wb = w + b * cols;
    } else {
      for (std::int64_t i = 0; i < nb * cols; ++i) block[i] = to_float(w[b * cols + i]);
      wb = block;
    }
    const Map<const RowMatrix> W(wb, nb, cols);                                   // [nb, in]
    Map<RowMatrix, Unaligned, OuterStride<Dynamic>> Y(y + b, T_, nb, OuterStride<Dynamic>(rows));  // [T, nb]
    Y.noalias() = X * W.transpose();
    if (bias)
      for (std::int64_t t = 0; t < T_; ++t)
        for (std::int64_t j = 0; j < nb; ++j) Y(t, j) += bias[b + j];
  }
}

template <class T>
void matmul_typed(const float* x, const MatRef& w, const float* bias, float* y, std::int64_t T_, ThreadPool& pool,
                  std::vector<std::vector<float>>& gemm_scratch) {
  const T* wd = static_cast<const T*>(w.data);
  if constexpr (!simd_enabled) {
    matmul_ref(x, w, bias, y, T_);
    return;
  }
  if (T_ == 1) {
    pool.parallel_for(w.rows, 16, [&](std::int64_t r0, std::int64_t r1) { matvec_rows_simd(x, wd, bias, y, r0, r1, w.cols); });
    return;
  }
  pool.run([&](int t, int nt) {
    const std::int64_t blocks = (w.rows + gemm_block_rows - 1) / gemm_block_rows;
    const std::int64_t r0 = std::min(w.rows, blocks * t / nt * gemm_block_rows);
    const std::int64_t r1 = std::min(w.rows, blocks * (t + 1) / nt * gemm_block_rows);
    if (r0 < r1) gemm_rows(x, wd, bias, y, T_, r0, r1, w.rows, w.cols, gemm_scratch[static_cast<std::size_t>(t)].data());
  });
}

}  // namespace detail

// Per-thread buffers of the GEMM path, sized once for the widest matrix.
struct MatmulScratch {
  std::vector<std::vector<float>> blocks;  // [threads][gemm_block_rows * max_cols]
  MatmulScratch() = default;
  MatmulScratch(int threads, std::int64_t max_cols)
      : blocks(static_cast<std::size_t>(threads), std::vector<float>(static_cast<std::size_t>(detail::gemm_block_rows * max_cols))) {}
};

// y[T, w.rows] = x[T, w.cols] · W^T + bias (bias may be null, [w.rows] f32).
inline void matmul(const float* x, const MatRef& w, const float* bias, float* y, std::int64_t T, ThreadPool& pool,
                   MatmulScratch& scratch) {
  switch (w.dtype) {
    case DType::bf16: detail::matmul_typed<bf16_t>(x, w, bias, y, T, pool, scratch.blocks); break;
    case DType::f16: detail::matmul_typed<f16_t>(x, w, bias, y, T, pool, scratch.blocks); break;
    default: detail::matmul_typed<float>(x, w, bias, y, T, pool, scratch.blocks); break;
  }
}

}  // namespace kylin::kernels
