// matmul (decode matvec and prefill GEMM) against the double-precision matmul_ref, for every
// weight dtype, sizes that leave tails in every blocking dimension, with and without bias.
#include <doctest/doctest.h>

#include "helpers.hpp"
#include "kylin/kernels/matmul.hpp"

#include <atomic>
#include <chrono>
#include <thread>

using namespace kylin;

namespace {

void check_matmul(DType dtype, std::int64_t T, std::int64_t rows, std::int64_t cols, bool with_bias, int threads) {
  CAPTURE(dtype_name(dtype));
  CAPTURE(T);
  CAPTURE(rows);
  CAPTURE(cols);
  CAPTURE(with_bias);
  CAPTURE(threads);
  const auto w = test::random_weights(dtype, rows, cols, static_cast<unsigned>(rows * 31 + cols));
  const auto x = test::random_floats(T * cols, static_cast<unsigned>(T + 7));
  const auto bias = test::random_floats(rows, 99);
  std::vector<float> y(static_cast<std::size_t>(T * rows), -1.f), ref(y.size());
  ThreadPool pool(threads);
  kernels::MatmulScratch scratch(pool.size(), cols, T);
  kernels::matmul(x.data(), w.ref(), with_bias ? bias.data() : nullptr, y.data(), T, pool, scratch);
  kernels::matmul_ref(x.data(), w.ref(), with_bias ? bias.data() : nullptr, ref.data(), T);
  // f32 accumulation over `cols` terms of size ~1 against a double oracle
  CHECK(test::max_rel_error(y, ref) < 1e-5);
}

}  // namespace

TEST_CASE("matmul matches matmul_ref for BF16/F16/F32 weights, T = 1 (matvec) and T > 1 (GEMM), odd sizes") {
  for (DType dtype : {DType::bf16, DType::f16, DType::f32})
    for (std::int64_t T : {1, 2, 5, 13, 29})
      for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {7, 33}, {37, 64}, {70, 131}, {129, 256}})
        check_matmul(dtype, T, rows, cols, T % 2 == 1, 1);
}

TEST_CASE("matmul gives the same answer on 2 threads as the reference (work split across output panels)") {
  for (DType dtype : {DType::bf16, DType::f32})
    for (std::int64_t T : {1, 4, 25})
      for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{3, 17}, {67, 96}, {200, 75}})
        check_matmul(dtype, T, rows, cols, true, 2);
}

TEST_CASE("matmul with a zero-padded token panel leaves rows beyond T untouched") {
  const std::int64_t T = 3, rows = 40, cols = 24;
  const auto w = test::random_weights(DType::bf16, rows, cols, 5);
  const auto x = test::random_floats(T * cols, 6);
  std::vector<float> y(static_cast<std::size_t>((T + 2) * rows), 7.f);
  ThreadPool pool(1);
  kernels::MatmulScratch scratch(1, cols, T);
  kernels::matmul(x.data(), w.ref(), nullptr, y.data(), T, pool, scratch);
  for (std::size_t i = static_cast<std::size_t>(T * rows); i < y.size(); ++i) CHECK(y[i] == 7.f);
}

TEST_CASE("matmul_fused (q/k/v-style products of one input) equals each product alone, mixed dtypes, bias, 1-2 threads") {
  const std::int64_t cols = 72;
  const auto wq = test::random_weights(DType::bf16, 70, cols, 1);
  const auto wk = test::random_weights(DType::f16, 19, cols, 2);
  const auto wv = test::random_weights(DType::f32, 33, cols, 3);
  const auto bias = test::random_floats(70, 4);
  for (int threads : {1, 2})
    for (std::int64_t T : {1, 14}) {
      CAPTURE(threads);
      CAPTURE(T);
      const auto x = test::random_floats(T * cols, 5);
      std::vector<float> yq(static_cast<std::size_t>(T * 70)), yk(static_cast<std::size_t>(T * 19)), yv(static_cast<std::size_t>(T * 33));
      ThreadPool pool(threads);
      kernels::MatmulScratch scratch(pool.size(), cols, T);
      const kernels::MatmulOut outs[] = {{wq.ref(), bias.data(), yq.data()}, {wk.ref(), nullptr, yk.data()}, {wv.ref(), nullptr, yv.data()}};
      kernels::matmul_fused(x.data(), outs, T, pool, scratch);
      std::vector<float> rq(yq.size()), rk(yk.size()), rv(yv.size());
      kernels::matmul_ref(x.data(), wq.ref(), bias.data(), rq.data(), T);
      kernels::matmul_ref(x.data(), wk.ref(), nullptr, rk.data(), T);
      kernels::matmul_ref(x.data(), wv.ref(), nullptr, rv.data(), T);
      CHECK(test::max_rel_error(yq, rq) < 1e-5);
      CHECK(test::max_rel_error(yk, rk) < 1e-5);
      CHECK(test::max_rel_error(yv, rv) < 1e-5);
    }
}

TEST_CASE("parallel_shares hands out every index of [0, n) exactly once, in chunks of at most grain, for many n / grain / threads") {
  for (int threads : {1, 2, 3, 4})
    for (std::int64_t n : {0, 1, 15, 16, 17, 100, 1000, 4099})
      for (std::int64_t grain : {1, 16, 64, 5000}) {
        CAPTURE(threads);
        CAPTURE(n);
        CAPTURE(grain);
        ThreadPool pool(threads);
        std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
        std::atomic<bool> oversized{false};
        kernels::detail::parallel_shares(pool, n, grain, [&](std::int64_t b, std::int64_t e) {
          if (e - b > std::max(grain, n / threads + grain)) oversized = true;
          for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)].fetch_add(1);
        });
        CHECK_FALSE(oversized.load());
        for (std::int64_t i = 0; i < n; ++i) REQUIRE(hits[static_cast<std::size_t>(i)].load() == 1);
      }
}

TEST_CASE("parallel_shares: while the calling thread stalls on its first chunk, the other thread takes the rest of its share") {
  ThreadPool pool(2);
  const std::int64_t n = 64, grain = 4;
  const auto caller = std::this_thread::get_id();
  std::atomic<int> caller_chunks{0}, worker_chunks{0};
  std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
  kernels::detail::parallel_shares(pool, n, grain, [&](std::int64_t b, std::int64_t e) {
    if (std::this_thread::get_id() == caller) {
      caller_chunks.fetch_add(1);
      while (worker_chunks.load() == 0) std::this_thread::yield();  // the worker is running
      std::this_thread::sleep_for(std::chrono::milliseconds(50));   // ... and this thread is "descheduled"
    } else {
      worker_chunks.fetch_add(1);
    }
    for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)].fetch_add(1);
  });
  for (std::int64_t i = 0; i < n; ++i) REQUIRE(hits[static_cast<std::size_t>(i)].load() == 1);
  // one chunk, or none if the worker emptied both shares before the caller claimed anything
  CHECK(caller_chunks.load() <= 1);
  CHECK(worker_chunks.load() == n / grain - caller_chunks.load());
}
