// ThreadPool: parallel_for visits every index exactly once in contiguous, grain-aligned ranges,
// run() calls every thread once, and parallel_shares hands out every index once, stealing from a
// stalled thread, across many sizes and thread counts.
#include "kylin/core/thread_pool.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <mutex>
#include <stdexcept>
#include <vector>

TEST_CASE("parallel_for covers every index exactly once for many n / grain / thread combinations") {
  for (int threads : {1, 2, 3, 4, 7}) {
    kylin::ThreadPool pool(threads);
    CHECK(pool.size() == threads);
    for (std::int64_t n : {0, 1, 2, 5, 63, 64, 65, 1000, 4097}) {
      for (std::int64_t grain : {0, 1, 3, 16, 64, 5000}) {
        CAPTURE(threads);
        CAPTURE(n);
        CAPTURE(grain);
        std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
        std::atomic<int> bad_range{0};
        pool.parallel_for(n, grain, [&](std::int64_t begin, std::int64_t end) {
          const std::int64_t g = std::max<std::int64_t>(1, grain);
          if (begin >= end || begin < 0 || end > n || begin % g != 0 || (end != n && end % g != 0)) ++bad_range;
          for (std::int64_t i = begin; i < end; ++i) hits[static_cast<std::size_t>(i)].fetch_add(1);
        });
        CHECK(bad_range.load() == 0);
        int wrong = 0;
        for (auto& h : hits) wrong += h.load() != 1;
        CHECK(wrong == 0);
      }
    }
  }
}

TEST_CASE("run calls fn once per thread index with the pool size, many times in a row") {
  kylin::ThreadPool pool(4);
  for (int round = 0; round < 2000; ++round) {
    std::atomic<int> mask{0}, wrong_n{0};
    pool.run([&](int t, int n) {
      if (n != 4) ++wrong_n;
      mask.fetch_or(1 << t);
    });
    if (mask.load() != 0xF || wrong_n.load() != 0) {
      FAIL_CHECK("round " << round << " mask " << mask.load());
      break;
    }
  }
}

TEST_CASE("results written by workers are visible to the caller after parallel_for returns") {
  kylin::ThreadPool pool(3);
  std::vector<std::int64_t> out(10000, -1);
  for (int round = 0; round < 50; ++round) {
    pool.parallel_for(static_cast<std::int64_t>(out.size()), 7, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) out[static_cast<std::size_t>(i)] = i * round;
    });
    std::int64_t wrong = 0;
    for (std::size_t i = 0; i < out.size(); ++i) wrong += out[i] != static_cast<std::int64_t>(i) * round;
    CHECK(wrong == 0);
  }
}

TEST_CASE("a pool of 0 threads means hardware concurrency, and pools destroy cleanly while idle") {
  kylin::ThreadPool pool(0);
  CHECK(pool.size() >= 1);
  for (int i = 0; i < 20; ++i) {
    kylin::ThreadPool p(3);  // created and destroyed without ever running a job
  }
}

TEST_CASE("an exception from the caller's share propagates only after every worker finished, and the pool stays usable") {
  kylin::ThreadPool pool(4);
  std::atomic<int> finished{0};
  CHECK_THROWS_AS(pool.run([&](int t, int) {
    if (t == 0) throw std::runtime_error("boom");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ++finished;
  }),
                  std::runtime_error);
  CHECK(finished.load() == 3);  // all three workers ran to completion before the throw escaped
  std::atomic<int> calls{0};
  pool.run([&](int, int) { ++calls; });
  CHECK(calls.load() == 4);
}
TEST_CASE("parallel_shares hands out every index of [0, n) exactly once, in chunks of at most grain, for many n / grain / threads") {
  for (int threads : {1, 2, 3, 4})
    for (std::int64_t n : {0, 1, 15, 16, 17, 100, 1000, 4099})
      for (std::int64_t grain : {1, 16, 64, 5000}) {
        CAPTURE(threads);
        CAPTURE(n);
        CAPTURE(grain);
        kylin::ThreadPool pool(threads);
        std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
        std::atomic<bool> oversized{false};
        kylin::parallel_shares(pool, n, grain, [&](int, std::int64_t b, std::int64_t e) {
          if (e - b > std::max(grain, n / threads + grain)) oversized = true;
          for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)].fetch_add(1);
        });
        CHECK_FALSE(oversized.load());
        for (std::int64_t i = 0; i < n; ++i) REQUIRE(hits[static_cast<std::size_t>(i)].load() == 1);
      }
}

TEST_CASE("parallel_shares: while the calling thread stalls on its first chunk, the other thread takes the rest of its share") {
  kylin::ThreadPool pool(2);
  const std::int64_t n = 64, grain = 4;
  const auto caller = std::this_thread::get_id();
  std::atomic<int> caller_chunks{0}, worker_chunks{0};
  std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
  kylin::parallel_shares(pool, n, grain, [&](int, std::int64_t b, std::int64_t e) {
    if (std::this_thread::get_id() == caller) {
      // This thread stalls inside its first chunk until the worker has taken every other chunk
      // (an event, bounded at a minute so a pool that never steals fails instead of hanging).
      caller_chunks.fetch_add(1);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
      while (worker_chunks.load() < n / grain - 1 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
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
