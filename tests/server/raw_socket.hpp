// RawSocket: a blocking loopback TCP client for the attack tests, which need to send what no
// HTTP client library would (dripped bytes, broken framing, half-closes, pipelining).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kylin::test {

class RawSocket {
 public:
  explicit RawSocket(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      throw std::runtime_error("cannot connect to 127.0.0.1:" + std::to_string(port));
  }
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;
  RawSocket(RawSocket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  ~RawSocket() { close(); }

  // False once the peer stopped accepting bytes (reset or closed).
  bool send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // Whether the peer closes (or resets) the connection within `timeout`, reading nothing.
  bool closed_by_peer(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
    char c;
    return ::recv(fd_, &c, 1, 0) <= 0;
  }

  // Everything received until the peer closes, a reset, or `timeout` passes.
  std::string read_all(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    char buffer[65536];
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
      if (n <= 0) break;
      out.append(buffer, static_cast<std::size_t>(n));
    }
    return out;
  }

 private:
  int fd_ = -1;
};

// The status codes of the final (non-1xx) responses in `raw`, in order.
inline std::vector<int> statuses(const std::string& raw) {
  std::vector<int> out;
  for (std::size_t pos = raw.find("HTTP/1.1 "); pos != std::string::npos; pos = raw.find("HTTP/1.1 ", pos + 1)) {
    const int s = std::stoi(raw.substr(pos + 9, 3));
    if (s >= 200) out.push_back(s);
  }
  return out;
}

// The body after the last header section of `raw`.
inline std::string last_body(const std::string& raw) {
  const std::size_t pos = raw.rfind("\r\n\r\n");
  return pos == std::string::npos ? std::string() : raw.substr(pos + 4);
}

}  // namespace kylin::test
