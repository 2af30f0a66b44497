// Server: kylin's HTTP/1.1 transport. One I/O thread (epoll, non-blocking sockets) accepts,
// reads and parses; only complete requests reach the worker pool, so a client that drips bytes
// holds a buffer, never a thread, and is cut off at the request deadline. Responses (SSE streams
// too) are queued on their Connection and written by the I/O thread as the socket accepts them.
#pragma once

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "kylin/core/error.hpp"
#include "kylin/server/http/connection.hpp"
#include "kylin/server/http/worker_pool.hpp"

namespace kylin::server::http {

class Server {
 public:
  Server(const Limits& limits, Handler handler, ErrorBody error_body)
      : limits_(limits), handler_(std::move(handler)), error_body_(std::move(error_body)),
        pool_(limits.workers, limits.max_pending) {
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epoll_ < 0 || wake_fd_ < 0) throw Error(ErrorCategory::io, "http", std::string("epoll: ") + std::strerror(errno));
    watch(wake_fd_, EPOLLIN, EPOLL_CTL_ADD);
  }
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  ~Server() {
    pool_.join();
    for (auto& [fd, c] : conns_) ::close(fd);
    for (int fd : {listen_fd_, wake_fd_, epoll_})
      if (fd >= 0) ::close(fd);
  }

  void bind(const std::string& host, int port) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* found = nullptr;
    const std::string where = host + ":" + std::to_string(port);
    if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || found == nullptr)
      throw Error(ErrorCategory::io, where, "cannot resolve the address");
    listen_fd_ = ::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const int one = 1;
    if (listen_fd_ >= 0) ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    const bool ok = listen_fd_ >= 0 && ::bind(listen_fd_, found->ai_addr, found->ai_addrlen) == 0 && ::listen(listen_fd_, 512) == 0;
    const int err = errno;
    ::freeaddrinfo(found);
    if (!ok) throw Error(ErrorCategory::io, where, std::string("cannot listen: ") + std::strerror(err));
    watch(listen_fd_, EPOLLIN, EPOLL_CTL_ADD);
  }

  // The I/O loop; returns once stop() was called and every connection is closed.
  void run() {
    std::vector<epoll_event> events(256);
    auto last_sweep = Clock::now();
    while (!finished()) {
      const int n = ::epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), 50);
      const auto now = Clock::now();
      for (int i = 0; i < n; ++i) {
        const int fd = events[static_cast<std::size_t>(i)].data.fd;
        const std::uint32_t ev = events[static_cast<std::size_t>(i)].events;
        if (fd == listen_fd_) accept_all(now);
        else if (fd == wake_fd_) take_ready(now);
        else if (auto it = conns_.find(fd); it != conns_.end()) on_event(it->second, ev, now);
      }
      if (now - last_sweep >= std::chrono::milliseconds(100)) sweep(now), last_sweep = now;
    }
  }

  // Any thread: stop accepting, close idle connections, give the responses under way `grace`
  // to be written, then close everything; run() returns.
  void stop(std::chrono::milliseconds grace) {
    stop_deadline_ns_.store((Clock::now() + grace).time_since_epoch().count());
    stopping_.store(true);
    wake();
  }
  bool stopping() const { return stopping_.load(); }
  // After run(): waits for the handlers still running (false if some outlived `timeout`).
  bool wait_workers(std::chrono::milliseconds timeout) { return pool_.wait_idle(timeout); }

 private:
  using ConnPtr = std::shared_ptr<Connection>;
  static constexpr std::size_t read_chunk = 64 << 10;
  static constexpr std::size_t stream_buffer = 1 << 20;  // unsent stream bytes before the worker waits
  static constexpr auto linger = std::chrono::seconds(2);

  void watch(int fd, std::uint32_t events, int op) {
    epoll_event e{};
    e.events = events;
    e.data.fd = fd;
    ::epoll_ctl(epoll_, op, fd, &e);
  }
  void wake() {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
  }

  bool finished() {
    if (!stopping_.load()) return false;
    if (listen_fd_ >= 0) ::epoll_ctl(epoll_, EPOLL_CTL_DEL, listen_fd_, nullptr), ::close(listen_fd_), listen_fd_ = -1;
    const bool late = Clock::now().time_since_epoch().count() > stop_deadline_ns_.load();
    std::vector<ConnPtr> done;
    for (auto& [fd, c] : conns_)
      if (late || c->phase != Connection::Phase::busy) done.push_back(c);
    for (auto& c : done) drop(c);
    return conns_.empty();
  }

  // Epoll interest follows the phase: stop reading a busy connection's pipelined bytes past a
  // cap, and stop watching for input after EOF (the socket would stay readable forever).
  void update_interest(const ConnPtr& c) {
    std::uint32_t ev = 0;
    const bool read_more = !c->peer_eof && (c->phase != Connection::Phase::busy || c->in.size() < limits_.max_header_bytes);
    if (read_more) ev |= EPOLLIN | EPOLLRDHUP;
    if (c->has_output()) ev |= EPOLLOUT;
    watch(c->fd, ev, EPOLL_CTL_MOD);
  }

  void accept_all(Clock::time_point now) {
    while (true) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN, or a transient error (EMFILE ...): try at the next event
      if (conns_.size() >= limits_.max_connections && !evict_one()) {
        ::close(fd);
        continue;
      }
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // SSE events go out at once
      auto c = std::make_shared<Connection>(fd, ++serial_, now);
      conns_.emplace(fd, c);
      watch(fd, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_ADD);
    }
  }

  // At the connection cap, the oldest connection without a complete request makes room, so
  // clients holding connections open cannot lock everyone else out.
  bool evict_one() {
    ConnPtr oldest;
    for (auto& [fd, c] : conns_)
      if (c->phase != Connection::Phase::busy && (!oldest || c->serial < oldest->serial)) oldest = c;
    if (oldest) drop(oldest);
    return oldest != nullptr;
  }

  void drop(const ConnPtr& c) {
    ::epoll_ctl(epoll_, EPOLL_CTL_DEL, c->fd, nullptr);
    ::close(c->fd);
    c->mark_closed();
    if (c->watch && c->phase == Connection::Phase::busy) c->watch->mark_gone();
    conns_.erase(c->fd);
  }

  void on_event(const ConnPtr& c, std::uint32_t ev, Clock::time_point now) {
    // Error or hang-up: a reset (the client is gone), or both sides shut after a lingering close.
    if ((ev & (EPOLLERR | EPOLLHUP)) != 0) return drop(c);
    if ((ev & (EPOLLIN | EPOLLRDHUP)) != 0 && !read_input(c, now)) return;
    if ((ev & EPOLLOUT) != 0 && !write_output(c, now)) return;
    if (conns_.contains(c->fd)) update_interest(c);
  }

  // Reads what is available; false if the connection was dropped.
  bool read_input(const ConnPtr& c, Clock::time_point now) {
    char buffer[read_chunk];
    while (!c->peer_eof) {
      if (c->phase == Connection::Phase::busy && c->in.size() >= limits_.max_header_bytes) break;
      const ssize_t n = ::recv(c->fd, buffer, sizeof buffer, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0) return drop(c), false;
      if (n == 0) c->peer_eof = true;
      else if (c->phase != Connection::Phase::lingering) c->in.append(buffer, static_cast<std::size_t>(n));
      if (c->phase == Connection::Phase::idle && !c->in.empty()) c->phase = Connection::Phase::reading, c->since = now;
      if (c->phase == Connection::Phase::reading && !try_request(c, now)) return false;
    }
    if (c->peer_eof) return on_peer_eof(c, now);
    return true;
  }

  // The client will send nothing more. A request being answered may still be wanted (the client
  // only half-closed) or not (it closed): probed at once, so a client that left stops its
  // generation within a round trip, as a stream's next write would (issue 75: a 200 ms wait let a
  // non-streamed generation run ~600 more tokens).
  bool on_peer_eof(const ConnPtr& c, Clock::time_point now) {
    if (c->phase != Connection::Phase::busy) return drop(c), false;  // nothing to answer, or the lingering close is over
    probe(c, now);  // again after an Expect: 100-continue one: a client may have left since
    return conns_.contains(c->fd);
  }

  // An interim 100 Continue tells a half-closed client from a closed one: a closed socket answers
  // it with a reset, which drops the connection and cancels the work through its ClientWatch.
  // Only HTTP/1.1 clients get it (RFC 9110 15.2: they must accept 1xx), and only before any byte
  // of the answer (a stream's own writes find a closed socket).
  void probe(const ConnPtr& c, Clock::time_point now) {
    c->probe_sent = true;
    if (!c->http11 || !c->append_interim("HTTP/1.1 100 Continue\r\n\r\n")) return;
    write_output(c, now);
  }

  // Parses the buffered bytes; dispatches a complete request. False if the connection was dropped.
  bool try_request(const ConnPtr& c, Clock::time_point now) {
    const auto state = c->parser.parse(c->in, limits_);
    if (state == RequestParser::State::error) return respond_error(c, c->parser.error().status, c->parser.error().message, now);
    if (state == RequestParser::State::incomplete) {
      if (c->parser.expects_continue() && !c->probe_sent && c->append_interim("HTTP/1.1 100 Continue\r\n\r\n"))
        c->probe_sent = true;
      return c->has_output() ? write_output(c, now) : true;
    }
    auto request = std::make_shared<Request>(c->parser.take(c->in));
    c->phase = Connection::Phase::busy;
    c->since = now;
    c->watch = request->watch;
    c->http11 = request->minor_version == 1;
    const bool accepted = pool_.submit([this, c, request] { answer(c, *request); });
    if (!accepted) return respond_error(c, 503, "the server is too busy; retry later", now);
    return true;
  }

  // An error the transport answers itself; the connection closes after it (the rest of its
  // input cannot be trusted to start a request).
  bool respond_error(const ConnPtr& c, int status, const std::string& message, Clock::time_point now) {
    Response r;
    r.status = status;
    r.body = error_body_(status, message);
    if (status == 503) r.set_header("Retry-After", "1");
    c->phase = Connection::Phase::busy;
    c->since = now;
    c->reset_response();
    c->append(response_head(r, static_cast<long long>(r.body.size()), false) + r.body);
    c->finish(true);
    return write_output(c, now);
  }

  // Writes queued output; at the end of a response, moves on to the next request or closes.
  bool write_output(const ConnPtr& c, Clock::time_point now) {
    bool close = false;
    const auto result = c->flush(close, now);
    if (result == Connection::Flush::error) return drop(c), false;
    if (result == Connection::Flush::pending || c->phase != Connection::Phase::busy) return true;
    if (close || stopping_.load()) {
      ::shutdown(c->fd, SHUT_WR);  // lingering close: the client reads the answer before we reset
      c->phase = Connection::Phase::lingering;
      c->since = now;
      c->in.clear();
      c->in.shrink_to_fit();
      return c->peer_eof ? (drop(c), false) : true;
    }
    c->phase = Connection::Phase::idle;
    c->since = now;
    c->probe_sent = false;
    c->watch.reset();
    c->reset_response();
    if (!c->in.empty()) {  // a pipelined request
      c->phase = Connection::Phase::reading;
      if (!try_request(c, now)) return false;
    }
    if (c->peer_eof && c->phase != Connection::Phase::busy) return drop(c), false;
    return true;
  }

  // Worker: runs the handler and queues its response on the connection.
  void answer(const ConnPtr& c, Request& request) {
    Response r;
    try {
      if (!c->closed()) r = handler_(request);
    } catch (const std::exception& e) {
      r = Response{};
      r.status = 500;
      r.body = error_body_(500, e.what());
    }
    const bool keep_alive = request.keep_alive && !r.close && !stopping_.load();
    const bool head_only = request.method == "HEAD";
    if (!r.next) {
      c->append(response_head(r, static_cast<long long>(r.body.size()), keep_alive) + (head_only ? std::string() : r.body));
    } else {
      stream(c, r, keep_alive);
    }
    c->finish(!keep_alive);
    ready(c);
  }

  void stream(const ConnPtr& c, Response& r, bool keep_alive) {
    if (!c->append(response_head(r, -1, keep_alive))) return;
    ready(c);
    std::string piece;
    for (bool more = true; more;) {
      piece.clear();
      more = r.next(piece);
      if (!piece.empty()) {
        char size[24];
        const int n = std::snprintf(size, sizeof size, "%zx\r\n", piece.size());
        if (!c->append(std::string(size, static_cast<std::size_t>(n)) + piece + "\r\n")) return;
        ready(c);
      }
      if (!c->wait_drained(stream_buffer)) return;  // gone (a stalled reader is closed at send_timeout)
    }
    c->append("0\r\n\r\n");
  }

  // Worker: `c` has output; the I/O thread picks it up.
  void ready(const ConnPtr& c) {
    {
      std::lock_guard lock(ready_mutex_);
      ready_.push_back(c);
    }
    wake();
  }

  void take_ready(Clock::time_point now) {
    std::uint64_t count = 0;
    [[maybe_unused]] const ssize_t n = ::read(wake_fd_, &count, sizeof count);
    std::vector<ConnPtr> list;
    {
      std::lock_guard lock(ready_mutex_);
      list.swap(ready_);
    }
    for (auto& c : list) {
      auto it = conns_.find(c->fd);
      if (it == conns_.end() || it->second != c) continue;  // closed meanwhile
      if (write_output(c, now) && conns_.contains(c->fd)) update_interest(c);
    }
  }

  // Deadlines: idle keep-alive, the request deadline, stalled output, lingering close.
  void sweep(Clock::time_point now) {
    std::vector<ConnPtr> expired, late;
    for (auto& [fd, c] : conns_) {
      const auto age = now - c->since;
      if ((c->phase == Connection::Phase::idle && age > limits_.idle_timeout) ||
          (c->phase == Connection::Phase::lingering && age > linger) ||
          (c->has_output() && now - c->last_write > limits_.send_timeout))
        expired.push_back(c);
      else if (c->phase == Connection::Phase::reading && age > limits_.request_timeout)
        late.push_back(c);
    }
    for (auto& c : expired) drop(c);
    for (auto& c : late)
      if (respond_error(c, 408, "the request did not arrive within " + std::to_string(limits_.request_timeout.count() / 1000) + " s", now))
        update_interest(c);
  }

  Limits limits_;
  Handler handler_;
  ErrorBody error_body_;
  WorkerPool pool_;
  int epoll_ = -1, wake_fd_ = -1, listen_fd_ = -1;
  std::unordered_map<int, ConnPtr> conns_;
  std::uint64_t serial_ = 0;
  std::mutex ready_mutex_;
  std::vector<ConnPtr> ready_;
  std::atomic<bool> stopping_{false};
  std::atomic<Clock::rep> stop_deadline_ns_{0};
};

}  // namespace kylin::server::http
