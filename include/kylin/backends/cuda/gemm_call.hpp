// The one cuBLAS call the CUDA backend makes (cublasGemmEx, f32 compute), as a value: built by
// linear_call() for kylin's row-major y = x · W^T, run by cuBLAS on a GPU and by host_gemm() here,
// a host implementation of cuBLAS's column-major semantics that the tests check the layout with.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "kylin/core/dtype.hpp"
#include "kylin/core/error.hpp"

namespace kylin::cuda {

enum class GemmOp : std::uint8_t { n, t };           // CUBLAS_OP_N, CUBLAS_OP_T
enum class GemmType : std::uint8_t { bf16, f16, f32 };  // CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F

// C = alpha * op(A) · op(B) + beta * C, column-major: op(A) is [m, k], op(B) [k, n], C [m, n];
// element (i, j) of a matrix with leading dimension ld sits at i + j * ld.
struct GemmCall {
  GemmOp transa = GemmOp::n, transb = GemmOp::n;
  std::int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f;
  const void* a = nullptr;
  GemmType a_type = GemmType::f32;
  std::int64_t lda = 0;
  const void* b = nullptr;
  GemmType b_type = GemmType::f32;
  std::int64_t ldb = 0;
  float beta = 0.0f;
  float* c = nullptr;  // always f32 (CUDA_R_32F)
  std::int64_t ldc = 0;
};

// kylin's y[T, N] (row-major, += when beta is 1) = x[T, K] · W[N, K]^T. Row-major W is W^T in
// column-major terms ([K, N], ld K), so cuBLAS computes y^T [N, T] = op_T(W) · x^T with x^T
// column-major [K, T] (ld K) and y^T column-major [N, T] (ld N): row-major y with no copy.
struct LinearOperands {
  const void* w;      // [N, K] row-major
  GemmType w_type;
  const void* x;      // [T, K] row-major, the same type as w (cuBLAS wants matching inputs)
  float* y;           // [T, N] row-major, rows ldy apart
  std::int64_t T, N, K;
  float beta = 0.0f;  // 1: accumulate into y
  std::int64_t ldy = 0;  // 0: N; wider: y is a block of columns of a wider output
};

inline GemmCall linear_call(const LinearOperands& o) {
  return {.transa = GemmOp::t, .transb = GemmOp::n, .m = o.N, .n = o.T, .k = o.K, .alpha = 1.0f,
          .a = o.w, .a_type = o.w_type, .lda = o.K, .b = o.x, .b_type = o.w_type, .ldb = o.K,
          .beta = o.beta, .c = o.y, .ldc = o.ldy > 0 ? o.ldy : o.N};
}

namespace detail {

inline float gemm_elem(const void* p, GemmType t, std::int64_t i) {
  switch (t) {
    case GemmType::bf16: return bf16_to_f32(static_cast<const std::uint16_t*>(p)[i]);
    case GemmType::f16: return f16_to_f32(static_cast<const std::uint16_t*>(p)[i]);
    case GemmType::f32: return static_cast<const float*>(p)[i];
  }
  return 0.0f;
}

// cuBLAS refuses these with CUBLAS_STATUS_INVALID_VALUE / NOT_SUPPORTED; so does the host version.
inline void check_gemm(const GemmCall& c) {
  auto fail = [](const std::string& what) { throw Error(ErrorCategory::runtime, "cublasGemmEx", what); };
  if (c.m < 0 || c.n < 0 || c.k < 0) fail("negative m, n or k");
  const std::int64_t rows_a = c.transa == GemmOp::n ? c.m : c.k, rows_b = c.transb == GemmOp::n ? c.k : c.n;
  if (c.lda < std::max<std::int64_t>(1, rows_a)) fail("lda " + std::to_string(c.lda) + " < " + std::to_string(rows_a));
  if (c.ldb < std::max<std::int64_t>(1, rows_b)) fail("ldb " + std::to_string(c.ldb) + " < " + std::to_string(rows_b));
  if (c.ldc < std::max<std::int64_t>(1, c.m)) fail("ldc " + std::to_string(c.ldc) + " < " + std::to_string(c.m));
  if (c.a_type != c.b_type) fail("A and B have different types");
}

}  // namespace detail

// What cublasGemmEx(..., CUBLAS_COMPUTE_32F) computes, element by element, f32 accumulation.
inline void host_gemm(const GemmCall& c) {
  detail::check_gemm(c);
  for (std::int64_t j = 0; j < c.n; ++j)
    for (std::int64_t i = 0; i < c.m; ++i) {
      float acc = 0.0f;
      for (std::int64_t l = 0; l < c.k; ++l) {
        const std::int64_t ai = c.transa == GemmOp::n ? i + l * c.lda : l + i * c.lda;
        const std::int64_t bi = c.transb == GemmOp::n ? l + j * c.ldb : j + l * c.ldb;
        acc += detail::gemm_elem(c.a, c.a_type, ai) * detail::gemm_elem(c.b, c.b_type, bi);
      }
      float& out = c.c[i + j * c.ldc];
      out = c.alpha * acc + (c.beta == 0.0f ? 0.0f : c.beta * out);  // beta 0 ignores C, NaN included, as cuBLAS
    }
}

}  // namespace kylin::cuda
