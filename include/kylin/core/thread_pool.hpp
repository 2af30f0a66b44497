// ThreadPool: one set of std::jthread workers and a fork-join parallel_for, plus the two work
// schedulers the kernels use (parallel_chunks, parallel_shares). The decode step forks a few
// hundred times per token, so workers spin briefly before sleeping on an atomic wait.
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

// Calls fn(thread, begin, end) for chunks of `grain` units of [0, n), claimed through an atomic
// counter: a thread that starts late (descheduled on a busy machine) finds less work left
// instead of holding the others up, as a fixed split would.
template <class Fn>
void parallel_chunks(ThreadPool& pool, std::int64_t n, std::int64_t grain, Fn&& fn) {
  if (n <= 0) return;
  if (pool.size() == 1 || n <= grain) {
    fn(0, std::int64_t{0}, n);
    return;
  }
  std::atomic<std::int64_t> next{0};
  pool.run([&](int t, int) {
    for (std::int64_t b; (b = next.fetch_add(grain, std::memory_order_relaxed)) < n;) fn(t, b, std::min(n, b + grain));
  });
}

// Calls fn(thread, begin, end) over [0, n) in chunks of `grain`: thread t owns the t-th contiguous share
// and walks it front to back, so on a quiet machine every thread streams one contiguous range
// (faster over a decode step's matvecs than chunks handed round-robin through one counter, which
// break each thread's stream: docs/log/2026-11-header-comments.md); a thread that finishes its
// share then takes what is left of the others', so a
// descheduled thread on a busy machine holds nobody up.
template <class Fn>
void parallel_shares(ThreadPool& pool, std::int64_t n, std::int64_t grain, Fn&& fn) {
  constexpr int max_shares = 64;  // cursors live on the stack: no allocation per call
  const int nt = pool.size();
  if (n <= 0) return;
  if (nt == 1 || n <= grain || nt > max_shares) {
    parallel_chunks(pool, n, grain, fn);
    return;
  }
  struct alignas(64) Share {
    std::atomic<std::int64_t> next;
    std::int64_t end;
  };
  Share shares[max_shares];
  const std::int64_t blocks = (n + grain - 1) / grain;
  for (int t = 0; t < nt; ++t) {
    shares[t].next.store(blocks * t / nt * grain, std::memory_order_relaxed);
    shares[t].end = std::min(n, blocks * (t + 1) / nt * grain);
  }
  pool.run([&](int t, int) {
    for (int k = 0; k < nt; ++k) {
      Share& s = shares[(t + k) % nt];
      for (std::int64_t b; (b = s.next.fetch_add(grain, std::memory_order_relaxed)) < s.end;) fn(t, b, std::min(s.end, b + grain));
    }
  });
}

}  // namespace kylin
