// Connection: one client socket of the HTTP transport. The I/O thread owns the socket and the
// input side; the worker answering the current request only appends response bytes here (and
// waits when too many are unsent), so no worker ever blocks on a socket.
#pragma once

#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "kylin/server/http/parser.hpp"

namespace kylin::server::http {

using Clock = std::chrono::steady_clock;

class Connection {
 public:
  enum class Phase {
    idle,       // keep-alive, waiting for the first byte of a request
    reading,    // part of a request has arrived (the request deadline runs)
    busy,       // a complete request is being answered
    lingering,  // answered with Connection: close; discarding input until the client closes
  };

  Connection(int fd, std::uint64_t serial, Clock::time_point now) : fd(fd), serial(serial), since(now), last_write(now) {}

  // --- I/O thread only ---
  const int fd;
  const std::uint64_t serial;  // accept order: the oldest is evicted first
  std::string in;              // received, not yet parsed (pipelined requests wait here)
  RequestParser parser;
  Phase phase = Phase::idle;
  Clock::time_point since;       // when the phase began
  Clock::time_point last_write;  // last write progress
  bool peer_eof = false;         // the client shut down its sending side (or closed)
  bool probe_sent = false;       // an interim 100 Continue went out for this request
  bool http11 = true;            // the request being answered is HTTP/1.1 (1xx allowed)
  std::shared_ptr<ClientWatch> watch;

  // --- shared with the worker (under the mutex) ---
  // Worker: queues response bytes; false when the connection is gone (the bytes are dropped).
  bool append(std::string_view bytes) {
    std::lock_guard lock(mutex_);
    if (closed_) return false;
    out_.append(bytes);
    started_ = true;
    return true;
  }
  // Worker: the response is complete; `close`: close the connection once it is sent.
  void finish(bool close) {
    std::lock_guard lock(mutex_);
    done_ = true;
    close_after_ = close_after_ || close;
  }
  // Worker: waits until fewer than `limit` bytes are unsent. False when gone.
  bool wait_drained(std::size_t limit) {
    std::unique_lock lock(mutex_);
    drained_.wait(lock, [&] { return closed_ || out_.size() < limit; });
    return !closed_;
  }
  bool closed() const {
    std::lock_guard lock(mutex_);
    return closed_;
  }

  // I/O thread: an interim response, only while no byte of the real one was queued.
  bool append_interim(std::string_view bytes) {
    std::lock_guard lock(mutex_);
    if (started_ || closed_) return false;
    out_.append(bytes);
    return true;
  }
  void mark_closed() {
    {
      std::lock_guard lock(mutex_);
      closed_ = true;
      out_.clear();
      out_.shrink_to_fit();
    }
    drained_.notify_all();
  }
  // I/O thread: a new request begins on this connection.
  void reset_response() {
    std::lock_guard lock(mutex_);
    done_ = close_after_ = started_ = false;
  }

  enum class Flush { pending, complete, error };
  // I/O thread: writes what it can. `complete`: the whole response is out (`close` says whether
  // the connection should close now).
  Flush flush(bool& close, Clock::time_point now) {
    std::unique_lock lock(mutex_);
    while (!out_.empty()) {
      const ssize_t n = ::send(fd, out_.data(), out_.size(), MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Flush::error;
      out_.erase(0, static_cast<std::size_t>(n));
      last_write = now;
    }
    if (out_.capacity() > (std::size_t{1} << 20) && out_.empty()) out_.shrink_to_fit();
    const bool empty = out_.empty();
    close = close_after_;
    const bool complete = empty && done_;
    lock.unlock();
    drained_.notify_all();
    return complete ? Flush::complete : Flush::pending;
  }
  bool has_output() const {
    std::lock_guard lock(mutex_);
    return !out_.empty();
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable drained_;
  std::string out_;  // response bytes not yet written
  bool started_ = false, done_ = false, close_after_ = false, closed_ = false;
};

}  // namespace kylin::server::http
