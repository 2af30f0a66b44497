// ThreadPool: one set of std::jthread workers and a fork-join parallel_for. The decode step
// calls it a few hundred times per token, so workers spin briefly before sleeping on an atomic
// wait: a condition-variable round trip per call would cost milliseconds per token.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace kylin {

class ThreadPool {
 public:
  // n_threads counts the calling thread; 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int n_threads = 0) {
    if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    n_threads_ = n_threads;
    for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t](std::stop_token st) { worker(st, t); });
  }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool() {
    for (auto& w : workers_) w.request_stop();
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
  }

  int size() const { return n_threads_; }

  // Calls fn(thread_index, n_threads) once on every thread and returns when all are done. An
  // exception from the calling thread's share propagates after the workers finish; workers must not throw.
  template <class Fn>
  void run(Fn&& fn) {
    if (n_threads_ == 1) {
      fn(0, 1);
      return;
    }
    job_ctx_ = &fn;
    job_ = [](void* ctx, int t, int n) { (*static_cast<std::remove_reference_t<Fn>*>(ctx))(t, n); };
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    try {
      fn(0, n_threads_);
    } catch (...) {  // workers still hold &fn: let them finish before the frame unwinds
      wait_until_zero(pending_);
      throw;
    }
    wait_until_zero(pending_);
  }

  // Splits [0, n) into one contiguous range per thread, each a multiple of `grain` except the
  // last, and calls fn(begin, end) for each non-empty range.
  template <class Fn>
  void parallel_for(std::int64_t n, std::int64_t grain, Fn&& fn) {
    if (n <= 0) return;
    grain = std::max<std::int64_t>(1, grain);
    const std::int64_t blocks = (n + grain - 1) / grain;
    if (n_threads_ == 1 || blocks == 1) {
      fn(std::int64_t{0}, n);
      return;
    }
    run([&](int t, int nt) {
      const std::int64_t b0 = blocks * t / nt, b1 = blocks * (t + 1) / nt;
      const std::int64_t begin = b0 * grain, end = std::min(n, b1 * grain);
      if (begin < end) fn(begin, end);
    });
  }

 private:
  static void wait_until_zero(std::atomic<int>& counter) {
    for (int spin = 0; counter.load(std::memory_order_acquire) != 0; ++spin) {
      if (spin > 4096) {
        int v = counter.load(std::memory_order_acquire);
        if (v != 0) counter.wait(v, std::memory_order_acquire);
      }
    }
  }

  void worker(std::stop_token st, int t) {
    std::uint64_t seen = 0;
    while (true) {
      std::uint64_t g;
      for (int spin = 0; (g = generation_.load(std::memory_order_acquire)) == seen; ++spin) {
        if (spin > 100000) generation_.wait(seen, std::memory_order_acquire);
      }
      seen = g;
      if (st.stop_requested()) return;
      job_(job_ctx_, t, n_threads_);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
    }
  }

  int n_threads_ = 1;
  void (*job_)(void*, int, int) = nullptr;
  void* job_ctx_ = nullptr;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::vector<std::jthread> workers_;  // last member: joined before the atomics go away
};

}  // namespace kylin
