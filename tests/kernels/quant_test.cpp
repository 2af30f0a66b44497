// Q8_0 and Q4_0 weights (kernels/quant.hpp): the block quantizers' rounding, the matmul's decode
// and GEMM rows against a double oracle of the same quantized values written here (Q4_0's nibble
// layout decoded here too, from its documentation), decode rows' batch invariance, and the
// distance from the unquantized product.
#include <doctest/doctest.h>

#include "helpers.hpp"
#include "quant_helpers.hpp"
#include "kylin/kernels/matmul.hpp"
#include "kylin/kernels/quant_rows.hpp"

#include <cstring>

using namespace kylin;

namespace quant_test {

using test::Q4Weights;
using test::Q8Weights;
using test::quant_oracle;
using test::quantize;
using test::scale_at;
using test::value_at;

TEST_CASE("Q8_0 weight blocks: the largest value maps to +-127, every value within half a step of q * scale, zero blocks stay zero") {
  auto w = test::random_floats(4 * 64, 3);
  std::fill(w.begin() + 64, w.begin() + 96, 0.f);  // row 1, block 0
  const Q8Weights q = quantize(w, 4, 64);
  const kernels::Q8View v = q.view();
  for (std::int64_t r = 0; r < 4; ++r)
    for (std::int64_t b = 0; b < 2; ++b) {
      const float d = f16_to_f32(v.scale[r * 2 + b]);
      int qmax = 0;
      for (int i = 0; i < 32; ++i) {
        const std::int64_t k = r * 64 + b * 32 + i;
        qmax = std::max(qmax, std::abs(int{v.q[k]}));
        CHECK(std::abs(w[static_cast<std::size_t>(k)] - v.q[k] * d) <= 0.5f * d + 1e-7f);
      }
      CHECK(qmax == (r == 1 && b == 0 ? 0 : 127));
    }
}

TEST_CASE("Q4_0 weight blocks: the largest magnitude maps to level -8, values round to the nearest level (the opposite extreme clamps to +7), zero blocks stay zero") {
  for (std::int64_t cols : {64, 96}) {  // paired blocks, and an unpaired last one
    CAPTURE(cols);
    auto w = test::random_floats(4 * cols, 3);
    std::fill(w.begin() + cols, w.begin() + cols + 32, 0.f);  // row 1, block 0
    w[2 * cols + 5] = 10.f, w[2 * cols + 7] = -10.f;            // row 2, block 0: both extremes
    const Q4Weights q = quantize<kernels::Q4View>(w, 4, cols);
    for (std::int64_t r = 0; r < 4; ++r)
      for (std::int64_t b = 0; b < cols / 32; ++b) {
        const float d = scale_at(q, r, b);
        float m = 0.f;
        for (int i = 0; i < 32; ++i) m = std::abs(w[static_cast<std::size_t>(r * cols + b * 32 + i)]) > std::abs(m) ? w[static_cast<std::size_t>(r * cols + b * 32 + i)] : m;
        CHECK(d == f16_to_f32(f32_to_f16(m / -8.f)));
        for (int i = 0; i < 32; ++i) {
          const std::int64_t c = b * 32 + i;
          const float x = w[static_cast<std::size_t>(r * cols + c)], got = static_cast<float>(value_at(q, r, c)) * d;
          const bool clamped = value_at(q, r, c) == 7 && std::abs(x / d) > 7.5f;
          CHECK(std::abs(x - got) <= (clamped ? 1.0f : 0.5f) * std::abs(d) + 1e-6f);
          if (x == m && m != 0.f) CHECK(value_at(q, r, c) == -8);
          if (r == 1 && b == 0) CHECK(got == 0.f);
        }
      }
    CHECK(value_at(q, 2, 5) == -8);  // +10, the first extreme, sets the scale (negative)
    CHECK(value_at(q, 2, 7) == 7);   // -10 clamps one step short
    std::vector<float> row(static_cast<std::size_t>(cols));
    kernels::dequantize_row(q.view(), 3, row.data());
    for (std::int64_t c = 0; c < cols; ++c) CHECK(row[static_cast<std::size_t>(c)] == value_at(q, 3, c) * scale_at(q, 3, c / 32));
  }
}

TEST_CASE_TEMPLATE("quantized matmul: decode rows (integer kernel) and GEMM rows (widened panels) both match the oracle of the quantized values",
                   W, kernels::Q8View, kernels::Q4View) {
  for (const auto& shape : {std::pair<std::int64_t, std::int64_t>{1, 32}, {7, 96}, {37, 160}, {129, 1024}, {20, 288}})
    for (std::int64_t T : {1, 2, 5, 13})
      for (std::int64_t dot : {std::int64_t{0}, std::int64_t{1}, T / 2, T})
        for (int threads : {1, 2}) {
          const std::int64_t rows = shape.first, cols = shape.second;  // named: clang 14 cannot capture structured bindings
          CAPTURE(rows);
          CAPTURE(cols);
          CAPTURE(T);
          CAPTURE(dot);
          CAPTURE(threads);
          const auto w = quantize<W>(test::random_floats(rows * cols, static_cast<unsigned>(rows + cols), 0.5f), rows, cols);
          const auto x = test::random_floats(T * cols, static_cast<unsigned>(T + 1));
          const auto bias = test::random_floats(rows, 9);
          const float* b = T % 2 ? bias.data() : nullptr;
          std::vector<float> y(static_cast<std::size_t>(T * rows), -1.f);
          ThreadPool pool(threads);
          kernels::MatmulScratch scratch(pool.size(), cols, T);
          kernels::matmul(x.data(), w.ref(), b, y.data(), {T, dot}, pool, scratch);
          CHECK(test::max_rel_error(y, quant_oracle(x.data(), w, b, T)) <= 1e-5);
          std::vector<float> ref(y.size());
          kernels::matmul_ref(x.data(), w.ref(), b, ref.data(), T);
          CHECK(test::max_rel_error(ref, quant_oracle(x.data(), w, b, T)) <= 1e-6);
        }
}

TEST_CASE_TEMPLATE("a quantized decode row gives bit-identical results alone and inside calls of other decode and prefill rows", W,
                   kernels::Q8View, kernels::Q4View) {
  const std::int64_t rows = 70, cols = 288, T = 13;  // 9 blocks: groups of 8 and a tail
  const auto w = quantize<W>(test::random_floats(rows * cols, 4, 0.5f), rows, cols);
  const auto x = test::random_floats(T * cols, 5);
  ThreadPool pool(2);
  kernels::MatmulScratch scratch(pool.size(), cols, T);
  for (std::int64_t dot : {std::int64_t{4}, std::int64_t{7}, T}) {  // tiles of 4, 2 and 1 tokens
    std::vector<float> all(static_cast<std::size_t>(T * rows));
    kernels::matmul(x.data(), w.ref(), nullptr, all.data(), {T, dot}, pool, scratch);
    for (std::int64_t t = 0; t < dot; ++t) {
      std::vector<float> one(static_cast<std::size_t>(rows));
      kernels::matmul(x.data() + t * cols, w.ref(), nullptr, one.data(), kernels::chunk_plan(1), pool, scratch);
      CAPTURE(dot);
      CAPTURE(t);
      CHECK(std::equal(one.begin(), one.end(), all.begin() + t * rows));
    }
  }
}

// Two roundings over 1024 products: measured (Zen 3) 0.74 % for Q8_0 (1/254 of a block's range
// per weight) and 7.9 % for Q4_0 (1/16 of it).
TEST_CASE_TEMPLATE("the quantized product stays within ~2x its measured distance (relative to the output's scale) of the unquantized float product",
                   W, kernels::Q8View, kernels::Q4View) {
  constexpr bool q8 = std::same_as<W, kernels::Q8View>;
  const std::int64_t rows = 64, cols = 1024, T = 4;
  const auto wf = test::random_floats(rows * cols, 6, 0.5f);
  const auto w = quantize<W>(wf, rows, cols);
  test::Weights exact{DType::f32, rows, cols, {}, wf, {}, {}};  // row-major only
  const auto x = test::random_floats(T * cols, 7);
  std::vector<float> y(static_cast<std::size_t>(T * rows));
  ThreadPool pool(1);
  kernels::MatmulScratch scratch(1, cols, T);
  kernels::matmul(x.data(), w.ref(), nullptr, y.data(), kernels::chunk_plan(T), pool, scratch);
  const double err = test::max_rel_error(y, test::matmul_oracle(x.data(), exact, nullptr, T));
  MESSAGE(std::string(q8 ? "Q8_0" : "Q4_0"), " vs float product: max error / output scale = ", err);
  CHECK(err <= (q8 ? 0.015 : 0.16));
  CHECK(err > (q8 ? 0.0 : 0.015));  // the weights really went through 8 (4) bits
}

TEST_CASE_TEMPLATE("matmul_each over quantized weights (an MoE layer's experts): each product equals its own decode-row matmul bit for bit, shared inputs or not",
                   W, kernels::Q8View, kernels::Q4View) {
  const std::int64_t cols = 96;
  const auto x0 = test::random_floats(2 * cols, 21), x1 = test::random_floats(3 * cols, 22);
  const auto gate = quantize<W>(test::random_floats(64 * cols, 23, 0.5f), 64, cols);
  const auto up = quantize<W>(test::random_floats(64 * cols, 24, 0.5f), 64, cols);
  const auto other = quantize<W>(test::random_floats(40 * cols, 25, 0.5f), 40, cols);
  std::vector<float> y_gate(2 * 64), y_up(2 * 64), y_other(3 * 40);
  const kernels::DotProduct products[] = {{x0.data(), 2, {gate.ref(), nullptr, y_gate.data()}},
                                          {x0.data(), 2, {up.ref(), nullptr, y_up.data()}},
                                          {x1.data(), 3, {other.ref(), nullptr, y_other.data()}}};
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    ThreadPool pool(threads);
    kernels::MatmulScratch scratch(pool.size(), cols, 8, 3);
    kernels::matmul_each(products, pool, scratch);
    for (const auto& p : products) {
      std::vector<float> alone(static_cast<std::size_t>(p.n * p.out.w.rows));
      kernels::matmul(p.x, p.out.w, nullptr, alone.data(), {p.n, p.n}, pool, scratch);
      CHECK(std::equal(alone.begin(), alone.end(), p.out.y));
      std::vector<float> ref(alone.size());
      kernels::matmul_ref(p.x, p.out.w, nullptr, ref.data(), p.n);
      CHECK(test::max_rel_error(alone, ref) <= 1e-5);
    }
  }
}

TEST_CASE("activation rows quantize the same in SIMD as in the scalar reference, bit for bit: random, zero, tied and clamped blocks") {
  const std::int64_t n = 5, cols = 4 * 32;
  auto x = test::random_floats(n * cols, 17, 3.f);
  std::fill_n(x.begin() + 32, 32, 0.f);  // row 0, block 1: zero
  x[64] = 127.f;                          // row 0, block 2: scale 1, every other value a tie
  for (int i = 1; i < 32; ++i) x[static_cast<std::size_t>(64 + i)] = static_cast<float>(i - 16) + 0.5f;
  for (int i = 0; i < 32; ++i) x[static_cast<std::size_t>(96 + i)] = i % 2 ? -1e-30f : 1e30f;  // row 0, block 3: extremes
  std::vector<std::int8_t> q(static_cast<std::size_t>(n * cols)), q_ref(q.size());
  std::vector<float> s(static_cast<std::size_t>(n * cols / 32)), s_ref(s.size());
  kernels::detail::quantize_rows_q8_simd(x.data(), n, cols, kernels::Q8Rows{q.data(), s.data(), cols});
  kernels::quantize_rows_q8(x.data(), n, cols, kernels::Q8Rows{q_ref.data(), s_ref.data(), cols});
  CHECK(q == q_ref);
  CHECK(std::memcmp(s.data(), s_ref.data(), s.size() * sizeof(float)) == 0);
  CHECK(q_ref[64 + 1] == -14);  // -14.5 rounds to the even -14
  CHECK(q_ref[64 + 2] == -14);  // -13.5 too
}

TEST_CASE("weight rows quantize the same in SIMD as in the scalar reference, bit for bit: Q8_0 and Q4_0, paired and unpaired blocks; zero, tied, sign-tied and clamped blocks") {
  for (std::int64_t cols : {4 * 32, 5 * 32}) {  // 5 blocks: Q4_0's last block is unpaired
    CAPTURE(cols);
    const std::int64_t rows = 3;
    auto x = test::random_floats(rows * cols, 23, 3.f);
    std::fill_n(x.begin() + 32, 32, 0.f);  // row 0, block 1: zero (its scale 0)
    for (int i = 0; i < 32; ++i) x[static_cast<std::size_t>(64 + i)] = static_cast<float>(i % 16) - 7.5f;  // block 2: ties
    x[64 + 3] = -8.f, x[64 + 9] = 8.f;  // the first of two values of largest magnitude sets Q4_0's sign
    for (int i = 0; i < 32; ++i) x[static_cast<std::size_t>(96 + i)] = i % 2 ? -1e-30f : 1e30f;  // block 3: extremes
    for (bool q4 : {false, true}) {
      CAPTURE(q4);
      const std::size_t bytes = q4 ? kernels::q4_bytes(rows, cols) : kernels::q8_bytes(rows, cols);
      std::vector<std::uint8_t> simd(bytes, 0xAA), ref(bytes, 0x55);  // every byte written, whatever was there
      for (std::int64_t r = 0; r < rows; ++r) {
        const float* row = x.data() + r * cols;
        if (q4) {
          kernels::detail::quantize_weight_row_q4_simd(row, simd.data(), rows, cols, r);
          kernels::quantize_weight_row_q4(row, ref.data(), rows, cols, r);
        } else {
          kernels::detail::quantize_weight_row_q8_simd(row, simd.data(), rows, cols, r);
          kernels::quantize_weight_row_q8(row, ref.data(), rows, cols, r);
        }
      }
      CHECK(simd == ref);
    }
  }
}

}  // namespace quant_test
