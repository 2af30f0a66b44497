// Returning request memory to the system (docs/SERVER.md, Memory). glibc keeps what a thread frees
// in that thread's arena, and a worker that parsed a 4 MB body or compiled a schema left its pages
// there after the answer, refused or not: RSS grew from 273 MB to 1.8 GB after 26 rejected 4 MB
// schemas, one arena per worker. Two measures, both needed (measured; each alone left hundreds of MB):
//  - fixed mmap and trim thresholds of 128 KiB: glibc raises both (up to 32/64 MB) after a large
//    block is freed, and then keeps large blocks and the tops of the workers' heaps;
//  - malloc_trim(0) after requests with a body, on a thread of its own so that no answer waits for
//    it (a trim after a 3 MB body took up to 0.3 s), at most one at a time and 100 ms apart, so a
//    flood of requests costs one trim per interval.
#pragma once

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace kylin_server {

class MemoryReturn {
 public:
  static constexpr int threshold_bytes = 128 << 10;  // glibc's own default before it adapts
  static constexpr auto min_interval = std::chrono::milliseconds(100);

  MemoryReturn() {
#ifdef __GLIBC__
    ::mallopt(M_MMAP_THRESHOLD, threshold_bytes);
    ::mallopt(M_TRIM_THRESHOLD, threshold_bytes);
#endif
    thread_ = std::thread([this] { run(); });
  }
  MemoryReturn(const MemoryReturn&) = delete;
  MemoryReturn& operator=(const MemoryReturn&) = delete;
  ~MemoryReturn() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }

  // A request with a body was answered: its memory is free now; return it soon.
  void request_done() {
    {
      std::lock_guard lock(mutex_);
      pending_ = true;
    }
    wake_.notify_one();
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    while (true) {
      wake_.wait(lock, [&] { return stopping_ || pending_; });
      if (stopping_) return;
      pending_ = false;
      lock.unlock();
#ifdef __GLIBC__
      ::malloc_trim(0);
#endif
      lock.lock();
      if (wake_.wait_for(lock, min_interval, [&] { return stopping_; })) return;
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  bool pending_ = false, stopping_ = false;
  std::thread thread_;
};

}  // namespace kylin_server
