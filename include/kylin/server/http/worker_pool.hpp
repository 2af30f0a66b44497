// WorkerPool: a fixed set of threads running complete requests' handlers, with a bounded queue;
// when it is full the I/O thread answers 503 itself instead of buffering more work.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kylin::server::http {

class WorkerPool {
 public:
  WorkerPool(std::size_t threads, std::size_t max_pending) : max_pending_(max_pending) {
    for (std::size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
  }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  ~WorkerPool() { join(); }

  // False when `max_pending` tasks already wait (or the pool stopped).
  bool submit(std::function<void()> task) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_ || tasks_.size() >= max_pending_) return false;
      tasks_.push_back(std::move(task));
    }
    wake_.notify_one();
    return true;
  }

  // Waits up to `timeout` for every task (queued or running) to finish; false if some did not.
  bool wait_idle(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    return idle_.wait_for(lock, timeout, [&] { return tasks_.empty() && running_ == 0; });
  }

  void join() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

 private:
  void run() {
    while (true) {
      std::function<void()> task;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
        ++running_;
      }
      task();
      task = nullptr;  // its captures (connection, request) are released before counting it done
      {
        std::lock_guard lock(mutex_);
        --running_;
      }
      idle_.notify_all();
    }
  }

  std::size_t max_pending_;
  std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::deque<std::function<void()>> tasks_;
  std::size_t running_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace kylin::server::http
