// ClientWatch: how the transport tells a request's handler that the client went away, so the
// queued or running generation it started is cancelled instead of running for nobody.
#pragma once

#include <functional>
#include <mutex>
#include <utility>

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

 private:
  mutable std::mutex mutex_;
  bool gone_ = false;
  std::function<void()> callback_;
};

}  // namespace kylin::server
