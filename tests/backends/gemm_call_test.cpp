// The cuBLAS call CudaBackend makes: host_gemm follows cublasGemmEx's column-major semantics
// (pinned by a hand-worked example), and linear_call lays kylin's row-major y = x · W^T out so
// that host_gemm of it equals the CPU matmul on every dtype the GEMM path takes.
#include <doctest/doctest.h>

#include <array>
#include <vector>

#include "kernels/helpers.hpp"
#include "kylin/backends/cuda/gemm_call.hpp"

namespace gemm_call_test {

using kylin::cuda::GemmCall;
using kylin::cuda::GemmOp;
using kylin::cuda::GemmType;

TEST_CASE("host_gemm: column-major A [2,3] times B [3,2] with OP_N, and OP_T reading the transpose") {
  // A = [[1,2,3],[4,5,6]] column-major (ld 2): 1,4,2,5,3,6. B = [[1,0],[0,1],[1,1]] column-major (ld 3): 1,0,1,0,1,1.
  const std::vector<float> a = {1, 4, 2, 5, 3, 6}, b = {1, 0, 1, 0, 1, 1};
  std::vector<float> c(4, -1.0f);
  kylin::cuda::host_gemm({.transa = GemmOp::n, .transb = GemmOp::n, .m = 2, .n = 2, .k = 3, .a = a.data(), .a_type = GemmType::f32, .lda = 2,
                          .b = b.data(), .b_type = GemmType::f32, .ldb = 3, .c = c.data(), .ldc = 2});
  CHECK(c == std::vector<float>{4, 10, 5, 11});  // A·B = [[4,5],[10,11]], column-major
  // The same A stored as its transpose [3,2] (row-major A = column-major A^T, ld 3) with OP_T.
  const std::vector<float> at = {1, 2, 3, 4, 5, 6};
  std::vector<float> c2(4, 7.0f);
  kylin::cuda::host_gemm({.transa = GemmOp::t, .transb = GemmOp::n, .m = 2, .n = 2, .k = 3, .a = at.data(), .a_type = GemmType::f32,
                          .lda = 3, .b = b.data(), .b_type = GemmType::f32, .ldb = 3, .beta = 1.0f, .c = c2.data(), .ldc = 2});
  CHECK(c2 == std::vector<float>{11, 17, 12, 18});  // beta 1 adds the 7s
}

TEST_CASE("host_gemm refuses leading dimensions and types cuBLAS refuses, naming them") {
  const std::vector<float> a(6), b(6);
  std::vector<float> c(4);
  GemmCall call{.transa = GemmOp::t, .transb = GemmOp::n, .m = 2, .n = 2, .k = 3, .a = a.data(), .a_type = GemmType::f32, .lda = 2,
                .b = b.data(), .b_type = GemmType::f32, .ldb = 3, .c = c.data(), .ldc = 2};
  CHECK_THROWS_WITH(kylin::cuda::host_gemm(call), doctest::Contains("lda 2 < 3"));  // OP_T: A is stored [k, m]
  call.lda = 3;
  call.ldc = 1;
  CHECK_THROWS_WITH(kylin::cuda::host_gemm(call), doctest::Contains("ldc 1 < 2"));
  call.ldc = 2;
  call.b_type = GemmType::bf16;
  CHECK_THROWS_WITH(kylin::cuda::host_gemm(call), doctest::Contains("different types"));
}

// y = x · W^T through linear_call + host_gemm against the CPU's reference matmul.
void check_linear(kylin::DType dtype, std::int64_t T, std::int64_t N, std::int64_t K) {
  const auto w = kylin::test::random_weights(dtype, N, K, 7);
  std::vector<float> x = kylin::test::random_floats(T * K, 8);
  if (dtype == kylin::DType::bf16)  // BF16 GEMM inputs: x rounded to BF16 on both sides, so the products agree
    for (float& v : x) v = kylin::bf16_to_f32(kylin::f32_to_bf16(v));
  std::vector<std::uint16_t> xb;
  for (float v : x) xb.push_back(kylin::f32_to_bf16(v));
  std::vector<float> expect(static_cast<std::size_t>(T * N)), got(expect.size(), 1e30f);
  kylin::kernels::matmul_ref(x.data(), w.ref(), nullptr, expect.data(), T);
  const GemmType type = dtype == kylin::DType::bf16 ? GemmType::bf16 : GemmType::f32;
  const void* xin = type == GemmType::bf16 ? static_cast<const void*>(xb.data()) : static_cast<const void*>(x.data());
  kylin::cuda::host_gemm(kylin::cuda::linear_call({.w = w.ref().data, .w_type = type, .x = xin, .y = got.data(), .T = T, .N = N, .K = K}));
  CHECK(kylin::test::max_rel_error(got, expect) < 1e-5);
}

TEST_CASE("linear_call: row-major y[T,N] = x[T,K] · W[N,K]^T on the checkpoints' odd and even shapes, BF16 and F32") {
  for (auto dtype : {kylin::DType::bf16, kylin::DType::f32})
    for (const auto& shape : std::vector<std::array<std::int64_t, 3>>{{1, 96, 96}, {5, 192, 96}, {7, 40, 192}, {3, 130, 48}, {16, 64, 256}}) {
      CAPTURE(shape[0]);  // T
      CAPTURE(shape[1]);  // N
      CAPTURE(shape[2]);  // K
      check_linear(dtype, shape[0], shape[1], shape[2]);
    }
}

}  // namespace gemm_call_test
