// EventStream: the hand-off of one streamed response. The inference thread pushes finished SSE
// events; the HTTP thread drains and writes them, and cancels the jobs (a request's choices) when
// the client is gone, so a slow or vanished client never blocks the model.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kylin/server/scheduler.hpp"

namespace kylin::server {

class EventStream {
 public:
  EventStream(std::vector<std::shared_ptr<Job>> jobs, std::function<void()> on_release)
      : jobs_(std::move(jobs)), on_release_(std::move(on_release)) {}
  EventStream(const EventStream&) = delete;
  EventStream& operator=(const EventStream&) = delete;
  ~EventStream() {
    if (on_release_) on_release_();
  }

  void push(std::string event) {
    {
      std::lock_guard lock(mutex_);
      pending_ += event;
    }
    ready_.notify_one();
  }

  void close() {
    {
      std::lock_guard lock(mutex_);
      closed_ = true;
    }
    ready_.notify_one();
  }

  // Waits up to `wait` for events and moves them all into `out` (empty on a timeout). False
  // once the stream is closed and everything was handed out.
  bool pop(std::string& out, std::chrono::milliseconds wait) {
    std::unique_lock lock(mutex_);
    ready_.wait_for(lock, wait, [&] { return closed_ || !pending_.empty(); });
    out.clear();
    out.swap(pending_);
    return !(out.empty() && closed_);
  }

  // The client went away: the jobs stop at their next token (or are skipped if still queued).
  void cancel() {
    for (const auto& job : jobs_) job->cancelled.store(true);
  }

 private:
  std::vector<std::shared_ptr<Job>> jobs_;
  std::function<void()> on_release_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::string pending_;
  bool closed_ = false;
};

}  // namespace kylin::server
