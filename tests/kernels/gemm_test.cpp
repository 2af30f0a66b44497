// The prefill GEMM's packers (kernels/gemm.hpp): the SIMD tile transposers give their scalar
// references' panels bit for bit: weights of every dtype, full and partial panels, column tails;
// token rows, full and partial panels, column tails.
#include <doctest/doctest.h>

#include "helpers.hpp"
#include "kylin/kernels/gemm.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

using namespace kylin;

namespace gemm_test {

using kernels::detail::gemm_nr;

// Packs panel p of w with the kernel and with the reference into buffers pre-filled with NaN (so a
// slot either one leaves unwritten fails), and compares them bit for bit.
template <class W>
void check_panel(const W& w, std::int64_t rows, std::int64_t cols, std::int64_t p) {
  const std::int64_t n0 = p * gemm_nr, nv = std::min(gemm_nr, rows - n0);
  CAPTURE(rows);
  CAPTURE(cols);
  CAPTURE(nv);
  const std::size_t n = static_cast<std::size_t>(cols * gemm_nr);
  kernels::detail::AlignedBuffer<float> got(n), want(n);
  std::fill_n(got.get(), n, std::nanf(""));
  std::fill_n(want.get(), n, std::nanf(""));
  kernels::detail::gemm_pack_w(w, n0, nv, cols, got.get());
  kernels::detail::gemm_pack_w_ref(w, n0, nv, cols, want.get());
  CHECK(std::memcmp(got.get(), want.get(), n * sizeof(float)) == 0);
  CHECK(std::none_of(got.get(), got.get() + n, [](float v) { return std::isnan(v); }));
}

}  // namespace gemm_test

TEST_CASE("the GEMM's weight panels equal the scalar packer's bit for bit: BF16/F16/F32, full and partial panels, column tails") {
  for (DType dtype : {DType::bf16, DType::f16, DType::f32})
    for (std::int64_t cols : {8, 64, 101, 1024}) {
      const std::int64_t rows = 2 * gemm_test::gemm_nr + 5;  // two full panels, one partial
      const auto w = test::random_weights(dtype, rows, cols, static_cast<unsigned>(cols));
      CAPTURE(dtype_name(dtype));
      for (std::int64_t p = 0; p < 3; ++p) {
        if (dtype == DType::f32) gemm_test::check_panel(w.full.data(), rows, cols, p);
        else if (dtype == DType::bf16) gemm_test::check_panel(reinterpret_cast<const bf16_t*>(w.half.data()), rows, cols, p);
        else gemm_test::check_panel(reinterpret_cast<const f16_t*>(w.half.data()), rows, cols, p);
      }
    }
}

TEST_CASE_TEMPLATE("the GEMM's panels of Q8_0/Q4_0 weights equal the scalar packer's bit for bit, paired and unpaired Q4 blocks",
                   W, kernels::Q8View, kernels::Q4View) {
  for (std::int64_t cols : {32, 96, 1024}) {  // 96: Q4_0's last block unpaired
    const std::int64_t rows = gemm_test::gemm_nr + 3;
    const auto x = test::random_floats(rows * cols, static_cast<unsigned>(cols), 0.5f);
    std::vector<std::int8_t> buffer(kernels::quant_bytes<W>(rows, cols));
    for (std::int64_t r = 0; r < rows; ++r) kernels::quantize_weight_row<W>(x.data() + r * cols, buffer.data(), rows, cols, r);
    const W w = kernels::quant_view<W>(buffer.data(), rows, cols);
    for (std::int64_t p = 0; p < 2; ++p) gemm_test::check_panel(w, rows, cols, p);
  }
}

TEST_CASE("the GEMM's token panels equal the scalar packer's bit for bit: full and partial panels, column tails") {
  using kernels::detail::gemm_mr;
  for (std::int64_t cols : {8, 13, 64, 1027})
    for (std::int64_t T : {std::int64_t{1}, gemm_mr - 1, gemm_mr, 2 * gemm_mr + 5}) {
      const auto x = test::random_floats(T * cols, static_cast<unsigned>(cols + T), 1.f);
      CAPTURE(cols);
      CAPTURE(T);
      for (std::int64_t p = 0; p < kernels::detail::gemm_token_panels(T); ++p) {
        const std::size_t n = static_cast<std::size_t>(cols * gemm_mr);
        std::vector<float> got(n, std::nanf("")), want(n, std::nanf(""));
        kernels::detail::gemm_pack_x(x.data(), T, cols, p, got.data());
        kernels::detail::gemm_pack_x_ref(x.data(), T, cols, p, want.data());
        CHECK(std::memcmp(got.data(), want.data(), n * sizeof(float)) == 0);
        CHECK(std::none_of(got.begin(), got.end(), [](float v) { return std::isnan(v); }));
      }
    }
}

TEST_CASE("the GEMM's panels widened from panel-major BF16/F16 weights equal the row-major packer's bit for bit") {
  for (DType dtype : {DType::bf16, DType::f16}) {
    const std::int64_t rows = 2 * gemm_test::gemm_nr + 5, cols = 67;  // two full GEMM panels, one partial
    const auto w = test::random_weights(dtype, rows, cols, 11);
    CAPTURE(dtype_name(dtype));
    auto check = [&]<class T>(const T* rowmajor) {
      std::vector<T> panels(static_cast<std::size_t>(kernels::panel_elements(rows, cols)));
      kernels::pack_panels(rowmajor, rows, cols, panels.data());
      const kernels::PanelRef<T> ref{panels.data(), rows, cols};
      const std::size_t n = static_cast<std::size_t>(cols * gemm_test::gemm_nr);
      for (std::int64_t p = 0; p < 3; ++p) {
        const std::int64_t n0 = p * gemm_test::gemm_nr, nv = std::min(gemm_test::gemm_nr, rows - n0);
        kernels::detail::AlignedBuffer<float> got(n), want(n);
        kernels::detail::gemm_pack_w(ref, n0, nv, cols, got.get());
        kernels::detail::gemm_pack_w_ref(rowmajor, n0, nv, cols, want.get());
        CHECK(std::memcmp(got.get(), want.get(), n * sizeof(float)) == 0);
      }
    };
    if (dtype == DType::bf16) check(reinterpret_cast<const bf16_t*>(w.half.data()));
    else check(reinterpret_cast<const f16_t*>(w.half.data()));
  }
}
