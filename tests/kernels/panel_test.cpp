// Panel-major decode kernels: the packer's layout, the scalar reference against the double oracle,
// and the SIMD kernel against the reference bit for bit, one token or many (batch invariance).
#include <doctest/doctest.h>

#include "helpers.hpp"
#include "kylin/kernels/panel.hpp"

using namespace kylin;

namespace panel_test {

// Calls f with the weights' storage as its element type (bf16_t, f16_t or float).
template <class F>
void with_typed(const test::Weights& w, F&& f) {
  if (w.dtype == DType::bf16) f(reinterpret_cast<const bf16_t*>(w.half.data()));
  else if (w.dtype == DType::f16) f(reinterpret_cast<const f16_t*>(w.half.data()));
  else f(w.full.data());
}

// Runs `run(PanelRef, PanelIO)` over w packed into panels (x packed for n >= 2 tokens, the bias
// given or none) and returns y [n, rows].
template <class Run>
std::vector<float> run_packed(const test::Weights& w, const std::vector<float>& x, std::int64_t n, Run&& run,
                              const std::vector<float>& bias = {}) {
  std::vector<float> y(static_cast<std::size_t>(n * w.rows), -1.f), xk(x.size());
  kernels::pack_panel_tokens(x.data(), n, w.cols, xk.data());
  with_typed(w, [&]<class T>(const T* data) {
    std::vector<T> packed(static_cast<std::size_t>(kernels::panel_elements(w.rows, w.cols)));
    kernels::pack_panels(data, w.rows, w.cols, packed.data());
    run(kernels::PanelRef<T>{packed.data(), w.rows, w.cols},
        kernels::PanelIO{x.data(), xk.data(), n, bias.empty() ? nullptr : bias.data(), y.data(), w.rows});
  });
  return y;
}

std::vector<float> simd(const test::Weights& w, const std::vector<float>& x, std::int64_t n, const std::vector<float>& bias = {}) {
  return run_packed(w, x, n, [&](const auto& ref, const kernels::PanelIO& io) {
    kernels::panel_matmul(ref, io, 0, kernels::panel_count(w.rows));
  }, bias);
}

std::vector<float> reference(const test::Weights& w, const std::vector<float>& x, std::int64_t n, const std::vector<float>& bias = {}) {
  return run_packed(w, x, n, [&](const auto& ref, const kernels::PanelIO& io) {
    kernels::panel_matmul_ref(ref, io, 0, kernels::panel_count(w.rows));
  }, bias);
}

TEST_CASE("pack_panels puts row 16p + i, column k at (p, k, i) and zeros past the last row") {
  const std::int64_t rows = 37, cols = 5;
  std::vector<float> w(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i + 1);
  std::vector<float> packed(static_cast<std::size_t>(kernels::panel_count(rows) * cols * kernels::panel_width), -1.f);
  kernels::pack_panels(w.data(), rows, cols, packed.data());
  CHECK(kernels::panel_count(rows) == 3);
  for (std::int64_t p = 0; p < 3; ++p)
    for (std::int64_t k = 0; k < cols; ++k)
      for (std::int64_t i = 0; i < kernels::panel_width; ++i) {
        const std::int64_t r = p * kernels::panel_width + i;
        REQUIRE(packed[static_cast<std::size_t>((p * cols + k) * kernels::panel_width + i)] == (r < rows ? w[static_cast<std::size_t>(r * cols + k)] : 0.f));
      }
}

TEST_CASE("panel_matmul_ref matches the double oracle for BF16/F16/F32 weights, partial panels, several tokens") {
  for (DType dtype : {DType::bf16, DType::f16, DType::f32})
    for (const auto& shape : {std::pair<std::int64_t, std::int64_t>{1, 1}, {16, 64}, {37, 131}, {100, 1024}}) {
      const std::int64_t rows = shape.first, cols = shape.second;  // named: clang 14 cannot capture structured bindings
      CAPTURE(dtype_name(dtype));
      CAPTURE(rows);
      CAPTURE(cols);
      const auto w = test::random_weights(dtype, rows, cols, 3);
      const auto x = test::random_floats(3 * cols, 4);
      CHECK(test::max_rel_error(reference(w, x, 3), test::matmul_oracle(x.data(), w, nullptr, 3)) < 1e-5);
    }
}

TEST_CASE("panel_matmul gives panel_matmul_ref's sums bit for bit: BF16/F16/F32, 1-40 tokens, partial panels, panel ranges, column chunks") {
  // 1000 columns span several column chunks, 40 tokens more token blocks than run together
  for (DType dtype : {DType::bf16, DType::f16, DType::f32})
    for (const auto& shape : {std::pair<std::int64_t, std::int64_t>{1, 7}, {16, 64}, {37, 131}, {100, 33}, {300, 256}, {45, 1000}})
      for (std::int64_t n : {1, 2, 5, 8, 9, 16, 17, 40}) {
        const std::int64_t rows = shape.first, cols = shape.second;  // named: clang 14 cannot capture structured bindings
        CAPTURE(dtype_name(dtype));
        CAPTURE(rows);
        CAPTURE(cols);
        CAPTURE(n);
        const auto w = test::random_weights(dtype, rows, cols, 5);
        const auto x = test::random_floats(n * cols, 6);
        const auto bias = test::random_floats(rows, 9);
        const auto got = simd(w, x, n), want = reference(w, x, n);
        for (std::size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == want[i]);
        const auto got_b = simd(w, x, n, bias), want_b = reference(w, x, n, bias);
        for (std::size_t i = 0; i < got_b.size(); ++i) REQUIRE(got_b[i] == want_b[i]);
        // a range of panels writes its rows and no others
        const std::int64_t count = kernels::panel_count(rows);
        if (count < 3) continue;
        const auto part = run_packed(w, x, n, [&](const auto& ref, const kernels::PanelIO& io) {
          kernels::panel_matmul(ref, io, 1, count - 1);
        });
        for (std::int64_t t = 0; t < n; ++t)
          for (std::int64_t r = 0; r < rows; ++r) {
            const bool inside = r >= kernels::panel_width && r < (count - 1) * kernels::panel_width;
            const auto i = static_cast<std::size_t>(t * rows + r);
            REQUIRE(part[i] == (inside ? want[i] : -1.f));
          }
      }
}

TEST_CASE("a token gets the same bits from panel_matmul alone and inside a batch of 2-17 (batch invariance)") {
  const std::int64_t rows = 70, cols = 1024, T = 17;
  const auto w = test::random_weights(DType::bf16, rows, cols, 7);
  const auto x = test::random_floats(T * cols, 8);
  std::vector<float> alone(static_cast<std::size_t>(T * rows));
  for (std::int64_t t = 0; t < T; ++t) {
    const std::vector<float> xt(x.begin() + t * cols, x.begin() + (t + 1) * cols);
    const auto y = simd(w, xt, 1);
    std::copy(y.begin(), y.end(), alone.begin() + t * rows);
  }
  for (std::int64_t n = 2; n <= T; ++n) {
    CAPTURE(n);
    const std::vector<float> xn(x.begin(), x.begin() + n * cols);
    const auto y = simd(w, xn, n);
    for (std::size_t i = 0; i < y.size(); ++i) REQUIRE(y[i] == alone[i]);
  }
}

}  // namespace panel_test
