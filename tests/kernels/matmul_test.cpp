// matmul (decode matvec and prefill GEMM) against a double-precision oracle written in the test
// (helpers.hpp, not the kernel's own matmul_ref), for every weight dtype and both layouts (row-major
// and panels), sizes that leave tails in every blocking dimension, with and without bias.
#include <doctest/doctest.h>

#include "helpers.hpp"
#include "kylin/kernels/matmul.hpp"

#include <atomic>
#include <chrono>
#include <thread>

using namespace kylin;

namespace {

// plan: which rows take the dot-product kernel and which the GEMM (every split is checked).
void check_matmul(DType dtype, const kernels::RowPlan& plan, std::int64_t rows, std::int64_t cols, bool with_bias, int threads,
                  kernels::Layout layout) {
  const std::int64_t T = plan.rows;
  CAPTURE(static_cast<int>(layout));
  CAPTURE(plan.decode_rows);
  CAPTURE(dtype_name(dtype));
  CAPTURE(T);
  CAPTURE(rows);
  CAPTURE(cols);
  CAPTURE(with_bias);
  CAPTURE(threads);
  const auto w = test::random_weights(dtype, rows, cols, static_cast<unsigned>(rows * 31 + cols));
  const auto x = test::random_floats(T * cols, static_cast<unsigned>(T + 7));
  const auto bias = test::random_floats(rows, 99);
  std::vector<float> y(static_cast<std::size_t>(T * rows), -1.f);
  ThreadPool pool(threads);
  kernels::MatmulScratch scratch(pool.size(), cols, T);
  kernels::matmul(x.data(), w.ref(layout), with_bias ? bias.data() : nullptr, y.data(), plan, pool, scratch);
  const auto ref = test::matmul_oracle(x.data(), w, with_bias ? bias.data() : nullptr, T);
  // f32 accumulation over `cols` terms of size ~1 against a double oracle
  CHECK(test::max_rel_error(y, ref) < 1e-5);
}

}  // namespace

TEST_CASE("matmul matches the double oracle for BF16/F16/F32 weights, both layouts: dot-product rows, GEMM rows and both in one call, odd sizes") {
  for (kernels::Layout layout : test::both_layouts)
    for (DType dtype : {DType::bf16, DType::f16, DType::f32})
      for (std::int64_t T : {1, 2, 5, 13, 29})
        for (std::int64_t dot : {std::int64_t{0}, std::int64_t{1}, T / 2, T})
          for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {7, 33}, {37, 64}, {70, 131}, {129, 256}})
            check_matmul(dtype, {T, dot}, rows, cols, T % 2 == 1, 1, layout);
}

TEST_CASE("a dot-product row gives bit-identical results whatever the other rows of the call (batch invariance)") {
  // Each row alone (one-row dot product, what a single decoding sequence runs) against the same
  // row inside calls of 2..17 dot rows (up to 3 token blocks of the batched kernel) followed by GEMM
  // rows: the sums must not move by one ulp. 4197 columns span two k-blocks plus both tails.
  for (kernels::Layout layout : test::both_layouts)
    for (DType dtype : {DType::bf16, DType::f16, DType::f32})
      for (const auto& shape : {std::pair<std::int64_t, std::int64_t>{37, 64}, {70, 131}, {129, 1024}, {11, 4197}}) {
        const std::int64_t rows = shape.first, cols = shape.second;  // named: clang 14 cannot capture structured bindings
        CAPTURE(static_cast<int>(layout));
        CAPTURE(dtype_name(dtype));
        CAPTURE(cols);
        const auto w = test::random_weights(dtype, rows, cols, 11);
        const std::int64_t T = 19;
        const auto x = test::random_floats(T * cols, 12);
        ThreadPool pool(2);
        kernels::MatmulScratch scratch(pool.size(), cols, T);
        std::vector<float> alone(static_cast<std::size_t>(T * rows));
        for (std::int64_t t = 0; t < T; ++t)
          kernels::matmul(x.data() + t * cols, w.ref(layout), nullptr, alone.data() + t * rows, {1, 1}, pool, scratch);
        for (std::int64_t dot = 2; dot <= 17; ++dot) {
          std::vector<float> y(alone.size());
          kernels::matmul(x.data(), w.ref(layout), nullptr, y.data(), {T, dot}, pool, scratch);
          for (std::int64_t i = 0; i < dot * rows; ++i) REQUIRE(y[static_cast<std::size_t>(i)] == alone[static_cast<std::size_t>(i)]);
        }
      }
}

TEST_CASE("matmul gives the same answer on 2 threads as the oracle (work split across output panels)") {
  for (kernels::Layout layout : test::both_layouts)
    for (DType dtype : {DType::bf16, DType::f32})
      for (std::int64_t T : {1, 4, 25})
        for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{3, 17}, {67, 96}, {200, 75}, {1000, 64}})
          check_matmul(dtype, kylin::kernels::chunk_plan(T), rows, cols, true, 2, layout);
}

TEST_CASE("over panels, a token's outputs are the same bits through the GEMM (prefill) as through the decode kernel") {
  // Both sum each output as one FMA chain over the columns in order, then add the bias. The GEMM
  // reads most weight panels as stored and widens the rest first (gemm_panels): 50 rows make
  // AVX-512's second GEMM panel a stored one with 18 rows and zero padding.
  for (DType dtype : {DType::bf16, DType::f16, DType::f32})
    for (const auto& shape : {std::pair<std::int64_t, std::int64_t>{37, 64}, {50, 40}, {70, 131}, {129, 1024}}) {
      const std::int64_t rows = shape.first, cols = shape.second;  // named: clang 14 cannot capture structured bindings
      CAPTURE(dtype_name(dtype));
      CAPTURE(rows);
      const auto w = test::random_weights(dtype, rows, cols, 31);
      const std::int64_t T = 13 + kernels::detail::panel_gemm_min_tokens;  // enough rows that the GEMM runs them
      const auto x = test::random_floats(T * cols, 32);
      const auto bias = test::random_floats(rows, 33);
      ThreadPool pool(2);
      kernels::MatmulScratch scratch(pool.size(), cols, T);
      std::vector<float> decoded(static_cast<std::size_t>(T * rows)), prefilled(decoded.size());
      kernels::matmul(x.data(), w.ref(kernels::Layout::panels), bias.data(), decoded.data(), {T, T}, pool, scratch);
      kernels::matmul(x.data(), w.ref(kernels::Layout::panels), bias.data(), prefilled.data(), {T, 0}, pool, scratch);
      CHECK(decoded == prefilled);
    }
}

TEST_CASE("matmul with a zero-padded token panel leaves rows beyond T untouched") {
  const std::int64_t T = 3, rows = 40, cols = 24;
  const auto w = test::random_weights(DType::bf16, rows, cols, 5);
  const auto x = test::random_floats(T * cols, 6);
  std::vector<float> y(static_cast<std::size_t>((T + 2) * rows), 7.f);
  ThreadPool pool(1);
  kernels::MatmulScratch scratch(1, cols, T);
  kernels::matmul(x.data(), w.ref(), nullptr, y.data(), kernels::chunk_plan(T), pool, scratch);
  for (std::size_t i = static_cast<std::size_t>(T * rows); i < y.size(); ++i) CHECK(y[i] == 7.f);
}

// One dtype a call: the kernels pick their path by the first product's (CpuBackend::matmul_fused splits a
// fused product held differently into runs of like products).
TEST_CASE("matmul_fused (q/k/v-style products of one input) matches each product's double oracle, each dtype, both layouts, bias, 1-2 threads") {
  const std::int64_t cols = 72;
  const auto bias = test::random_floats(70, 4);
  for (DType dtype : {DType::bf16, DType::f16, DType::f32})
    for (kernels::Layout layout : test::both_layouts)
      for (int threads : {1, 2})
        for (std::int64_t T : {1, 14}) {
          CAPTURE(dtype_name(dtype));
          CAPTURE(static_cast<int>(layout));
          CAPTURE(threads);
          CAPTURE(T);
          const auto wq = test::random_weights(dtype, 70, cols, 1), wk = test::random_weights(dtype, 19, cols, 2), wv = test::random_weights(dtype, 33, cols, 3);
          const auto x = test::random_floats(T * cols, 5);
          std::vector<float> yq(static_cast<std::size_t>(T * 70)), yk(static_cast<std::size_t>(T * 19)), yv(static_cast<std::size_t>(T * 33));
          ThreadPool pool(threads);
          kernels::MatmulScratch scratch(pool.size(), cols, T);
          const kernels::MatmulOut outs[] = {{wq.ref(layout), bias.data(), yq.data()}, {wk.ref(layout), nullptr, yk.data()},
                                             {wv.ref(layout), nullptr, yv.data()}};
          kernels::matmul_fused(x.data(), outs, kernels::chunk_plan(T), pool, scratch);
          const auto rq = test::matmul_oracle(x.data(), wq, bias.data(), T);
          const auto rk = test::matmul_oracle(x.data(), wk, nullptr, T);
          const auto rv = test::matmul_oracle(x.data(), wv, nullptr, T);
          CHECK(test::max_rel_error(yq, rq) < 1e-5);
          CHECK(test::max_rel_error(yk, rk) < 1e-5);
          CHECK(test::max_rel_error(yv, rv) < 1e-5);
        }
}

TEST_CASE("matmul_each over stored weights (an MoE layer's experts): each product equals its own decode-row matmul bit for bit, shared inputs or not, both layouts") {
  const std::int64_t cols = 131;
  const auto x0 = test::random_floats(7 * cols, 21), x1 = test::random_floats(3 * cols, 22), x2 = test::random_floats(cols, 26);
  for (kernels::Layout layout : test::both_layouts)
    for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
      CAPTURE(static_cast<int>(layout));
      CAPTURE(dtype_name(dtype));
      const auto gate = test::random_weights(dtype, 64, cols, 23), up = test::random_weights(dtype, 64, cols, 24);
      const auto other = test::random_weights(dtype, 40, cols, 25), single = test::random_weights(dtype, 9, cols, 27);
      std::vector<float> y_gate(7 * 64), y_up(7 * 64), y_other(3 * 40), y_single(9);
      const kernels::DotProduct products[] = {{x0.data(), 7, {gate.ref(layout), nullptr, y_gate.data()}},
                                              {x0.data(), 7, {up.ref(layout), nullptr, y_up.data()}},
                                              {x1.data(), 3, {other.ref(layout), nullptr, y_other.data()}},
                                              {x2.data(), 1, {single.ref(layout), nullptr, y_single.data()}}};
      for (int threads : {1, 2}) {
        CAPTURE(threads);
        ThreadPool pool(threads);
        kernels::MatmulScratch scratch(pool.size(), cols, 16, 4);
        kernels::matmul_each(products, pool, scratch);
        for (const auto& p : products) {
          std::vector<float> alone(static_cast<std::size_t>(p.n * p.out.w.rows));
          for (std::int64_t t = 0; t < p.n; ++t)
            kernels::matmul(p.x + t * cols, p.out.w, nullptr, alone.data() + t * p.out.w.rows, {1, 1}, pool, scratch);
          CHECK(std::equal(alone.begin(), alone.end(), p.out.y));
        }
      }
    }
}
