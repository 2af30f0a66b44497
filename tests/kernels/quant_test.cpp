// Q8_0 weights (kernels/quant.hpp): the block quantizer's rounding, the matmul's decode and GEMM
// rows against a double oracle of the same quantized values written here, decode rows' batch
// invariance, and the distance from the unquantized product.
#include <doctest/doctest.h>

#include "helpers.hpp"
#include "kylin/kernels/matmul.hpp"

using namespace kylin;

namespace {

// A Q8_0 matrix quantized from float weights by the kernel's quantizer.
struct Q8Weights {
  std::int64_t rows, cols;
  std::vector<std::int8_t> buffer;
  kernels::MatRef ref() const { return {DType::q8_0, buffer.data(), rows, cols}; }
  kernels::Q8View view() const { return kernels::q8_view(buffer.data(), rows, cols); }
};

Q8Weights quantize(const std::vector<float>& w, std::int64_t rows, std::int64_t cols) {
  Q8Weights q{rows, cols, std::vector<std::int8_t>(kernels::q8_bytes(rows, cols))};
  for (std::int64_t r = 0; r < rows; ++r) kernels::quantize_weight_row_q8(w.data() + r * cols, q.buffer.data(), rows, cols, r);
  return q;
}

// The oracle: each block of 32 activations quantized here (scale = max|x| / 127, values rounded
// to nearest), then sum over blocks of scale_w * scale_x * sum(q_w * q_x), all in double.
std::vector<float> q8_oracle(const float* x, const Q8Weights& w, const float* bias, std::int64_t T) {
  const kernels::Q8View v = w.view();
  std::vector<float> y(static_cast<std::size_t>(T * w.rows));
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t r = 0; r < w.rows; ++r) {
      double acc = bias ? bias[r] : 0.0;
      for (std::int64_t b = 0; b < v.blocks(); ++b) {
        const float* xb = x + t * w.cols + b * 32;
        float amax = 0.f;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::abs(xb[i]));
        const float dx = amax / 127.f;
        double s = 0;
        for (int i = 0; i < 32; ++i) {
          const double qx = dx > 0 ? std::nearbyint(xb[i] * (1.f / dx)) : 0.0;
          s += qx * v.q[r * w.cols + b * 32 + i];
        }
        acc += static_cast<double>(f16_to_f32(v.scale[r * v.blocks() + b])) * dx * s;
      }
      y[static_cast<std::size_t>(t * w.rows + r)] = static_cast<float>(acc);
    }
  return y;
}

}  // namespace

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

TEST_CASE("Q8_0 matmul: decode rows (integer kernel) and GEMM rows (widened panels) both match the oracle of the quantized values") {
  for (const auto& shape : {std::pair<std::int64_t, std::int64_t>{1, 32}, {7, 96}, {37, 160}, {129, 1024}})
    for (std::int64_t T : {1, 2, 5, 13})
      for (std::int64_t dot : {std::int64_t{0}, std::int64_t{1}, T / 2, T})
        for (int threads : {1, 2}) {
          const std::int64_t rows = shape.first, cols = shape.second;  // named: clang 14 cannot capture structured bindings
          CAPTURE(rows);
          CAPTURE(cols);
          CAPTURE(T);
          CAPTURE(dot);
          CAPTURE(threads);
          const Q8Weights w = quantize(test::random_floats(rows * cols, static_cast<unsigned>(rows + cols), 0.5f), rows, cols);
          const auto x = test::random_floats(T * cols, static_cast<unsigned>(T + 1));
          const auto bias = test::random_floats(rows, 9);
          const float* b = T % 2 ? bias.data() : nullptr;
          std::vector<float> y(static_cast<std::size_t>(T * rows), -1.f);
          ThreadPool pool(threads);
          kernels::MatmulScratch scratch(pool.size(), cols, T);
          kernels::matmul(x.data(), w.ref(), b, y.data(), {T, dot}, pool, scratch);
          CHECK(test::max_rel_error(y, q8_oracle(x.data(), w, b, T)) <= 1e-5);
        }
}

TEST_CASE("a Q8_0 decode row gives bit-identical results alone and inside calls of other decode and prefill rows") {
  const std::int64_t rows = 70, cols = 256, T = 13;
  const Q8Weights w = quantize(test::random_floats(rows * cols, 4, 0.5f), rows, cols);
  const auto x = test::random_floats(T * cols, 5);
  ThreadPool pool(2);
  kernels::MatmulScratch scratch(pool.size(), cols, T);
  for (std::int64_t dot : {std::int64_t{4}, T}) {
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

TEST_CASE("the Q8_0 product stays within 1.5% (relative to the output's scale) of the unquantized float product") {
  // Two roundings of 1/254 of a block's range each, over 1024 products: measured 0.74 % here.
  const std::int64_t rows = 64, cols = 1024, T = 4;
  const auto wf = test::random_floats(rows * cols, 6, 0.5f);
  const Q8Weights w = quantize(wf, rows, cols);
  test::Weights exact{DType::f32, rows, cols, {}, wf};
  const auto x = test::random_floats(T * cols, 7);
  std::vector<float> y(static_cast<std::size_t>(T * rows));
  ThreadPool pool(1);
  kernels::MatmulScratch scratch(1, cols, T);
  kernels::matmul(x.data(), w.ref(), nullptr, y.data(), kernels::chunk_plan(T), pool, scratch);
  const double err = test::max_rel_error(y, test::matmul_oracle(x.data(), exact, nullptr, T));
  MESSAGE("Q8_0 vs float product: max error / output scale = ", err);
  CHECK(err <= 0.015);
  CHECK(err > 0);  // the weights really went through 8 bits
}
