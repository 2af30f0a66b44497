// ClientWatch: how the transport tells a request's handler that the client went away, so the
// queued or running generation it started is cancelled instead of running for nobody; and how the
// handler hands the transport the generation's statistics (tokens, times) for logs and metrics.
#pragma once

#include <functional>
#include <mutex>
#include <optional>
#include <utility>

#include "kylin/generate/generation_stats.hpp"

namespace kylin::server {

class ClientWatch {
 public:
  // Runs `f` once when the client is gone (at once if it already is). One callback at a time.
  void on_gone(std::function<void()> f) {
    std::unique_lock lock(mutex_);
    if (!gone_) {
      callback_ = std::move(f);
      return;
    }
    lock.unlock();
    if (f) f();
  }

  // Called by the transport (any thread); runs the registered callback once.
  void mark_gone() {
    std::function<void()> f;
    {
      std::lock_guard lock(mutex_);
      if (gone_) return;
      gone_ = true;
      f = std::move(callback_);
    }
    if (f) f();
  }

  bool gone() const {
    std::lock_guard lock(mutex_);
    return gone_;
  }

  // The statistics of the generation the request ran (set when it ends), for the access log and
  // the metrics; nullopt when it ran none (an error, a skip, another endpoint).
  void record(const GenerationStats& stats) {
    std::lock_guard lock(mutex_);
    stats_ = stats;
  }
  std::optional<GenerationStats> stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
  }

 private:
  mutable std::mutex mutex_;
  bool gone_ = false;
  std::function<void()> callback_;
  std::optional<GenerationStats> stats_;
};

}  // namespace kylin::server
