// RequestParser: reads one HTTP/1.1 request out of a connection's input buffer, enforcing the
// size limits while the bytes arrive (never buffering past them), and rejecting the framing
// ambiguities request smuggling relies on (repeated or malformed Content-Length, Transfer-Encoding).
#pragma once

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>
#include <string_view>

#include "kylin/server/http/message.hpp"

namespace kylin::server::http {

struct ParseError {
  int status = 400;
  std::string message;
};

namespace detail {

inline bool is_token_char(char c) {
  const auto u = static_cast<unsigned char>(c);
  return std::isalnum(u) != 0 || std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

inline bool is_token(std::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), is_token_char); }

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

inline std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// "%2F" -> "/"; a '%' not followed by two hex digits stays as it is.
inline std::string percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    unsigned v = 0;
    if (s[i] == '%' && i + 2 < s.size() &&
        std::from_chars(s.data() + i + 1, s.data() + i + 3, v, 16).ptr == s.data() + i + 3) {
      out += static_cast<char>(v);
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// Whether a comma-separated header value (Connection) lists `token`, case-insensitively.
inline bool lists_token(std::string_view value, std::string_view token) {
  std::size_t start = 0;
  while (start <= value.size()) {
    const std::size_t end = std::min(value.find(',', start), value.size());
    if (lower(trim(value.substr(start, end - start))) == token) return true;
    start = end + 1;
  }
  return false;
}

}  // namespace detail

class RequestParser {
 public:
  enum class State { incomplete, complete, error };

  // Looks at `in`, the bytes received so far starting at this request.
  State parse(std::string& in, const Limits& limits) {
    if (head_len_ == 0) {
      if (scanned_ == 0) skip_leading_newlines(in);
      const State s = find_head_end(in, limits);
      if (s != State::complete) return s;
      if (!parse_head(std::string_view(in).substr(0, head_len_), limits)) return State::error;
    }
    return in.size() >= head_len_ + body_len_ ? State::complete : State::incomplete;
  }

  // The complete request; its bytes are removed from `in` (what follows is the next request).
  Request take(std::string& in) {
    request_.body = in.substr(head_len_, body_len_);
    in.erase(0, head_len_ + body_len_);
    Request r = std::move(request_);
    *this = RequestParser();
    return r;
  }

  bool started() const { return head_len_ > 0 || scanned_ > 0; }
  bool head_done() const { return head_len_ > 0; }
  // "Expect: 100-continue" from an HTTP/1.1 client whose body has not fully arrived.
  bool expects_continue() const { return expect_continue_; }
  const ParseError& error() const { return error_; }
  const Request& head() const { return request_; }

 private:
  bool fail(int status, std::string message) {
    error_ = {status, std::move(message)};
    return false;
  }

  // At most 4 bytes in all, however they arrive (counted across calls), so a request means the
  // same whole or trickled in.
  void skip_leading_newlines(std::string& in) {
    std::size_t n = 0;
    while (n < in.size() && skipped_ + n < 4 && (in[n] == '\r' || in[n] == '\n')) ++n;
    in.erase(0, n);
    skipped_ += n;
  }

  // Finds the blank line that ends the header section without rescanning, checking the limits
  // on what has arrived so far, so an endless request line or header section is cut off early.
  State find_head_end(const std::string& in, const Limits& limits) {
    const std::size_t line_limit = limits.max_uri + 32;  // method, spaces, version
    const std::size_t first_nl = in.find('\n');
    if ((first_nl == std::string::npos && in.size() > line_limit) || (first_nl != std::string::npos && first_nl > line_limit)) {
      error_ = {414, "the request line exceeds " + std::to_string(limits.max_uri) + " bytes"};
      return State::error;
    }
    std::size_t i = in.find('\n', scanned_);
    for (; i != std::string::npos; i = in.find('\n', i + 1)) {
      if (i + 1 >= in.size() || (in[i + 1] == '\r' && i + 2 >= in.size())) break;  // wait for the next bytes
      if (in[i + 1] == '\n') head_len_ = i + 2;
      else if (in[i + 1] == '\r' && in[i + 2] == '\n') head_len_ = i + 3;
      if (head_len_ > 0) break;
    }
    scanned_ = i == std::string::npos ? in.size() : i;
    const std::size_t size = head_len_ > 0 ? head_len_ : in.size();
    if (size > limits.max_header_bytes) {
      error_ = {431, "the request header section exceeds " + std::to_string(limits.max_header_bytes) + " bytes"};
      return State::error;
    }
    return head_len_ > 0 ? State::complete : State::incomplete;
  }

  bool parse_request_line(std::string_view line, const Limits& limits) {
    const std::size_t sp1 = line.find(' ');
    const std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
      return fail(400, "malformed request line");
    const std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                           version = line.substr(sp2 + 1);
    if (!detail::is_token(method)) return fail(400, "malformed request method");
    if (target.size() > limits.max_uri) return fail(414, "the request target exceeds " + std::to_string(limits.max_uri) + " bytes");
    if (target.empty() || target.front() != '/' ||
        std::any_of(target.begin(), target.end(), [](char c) { return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f; }))
      return fail(400, "the request target must be a path starting with '/'");
    if (version == "HTTP/1.1") request_.minor_version = 1;
    else if (version == "HTTP/1.0") request_.minor_version = 0;
    else if (version.starts_with("HTTP/")) return fail(505, "only HTTP/1.0 and HTTP/1.1 are supported");
    else return fail(400, "malformed HTTP version");
    request_.method = std::string(method);
    request_.target = std::string(target);
    request_.path = detail::percent_decode(target.substr(0, target.find('?')));
    return true;
  }

  bool parse_header_line(std::string_view line) {
    if (line.front() == ' ' || line.front() == '\t') return fail(400, "obsolete header line folding is not accepted");
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos || !detail::is_token(line.substr(0, colon)))
      return fail(400, "malformed header line");
    const std::string_view value = detail::trim(line.substr(colon + 1));
    if (std::any_of(value.begin(), value.end(), [](char c) { return (static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f; }))
      return fail(400, "control character in a header value");
    request_.headers.push_back({detail::lower(line.substr(0, colon)), std::string(value)});
    return true;
  }

  bool parse_head(std::string_view head, const Limits& limits) {
    bool first = true;
    std::size_t pos = 0;
    while (pos < head.size()) {
      std::size_t end = head.find('\n', pos);
      std::string_view line = head.substr(pos, end - pos);
      pos = end + 1;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty() && first) return fail(400, "malformed request line");  // a blank line where it belongs
      if (line.empty()) break;
      if (first ? !parse_request_line(line, limits) : !parse_header_line(line)) return false;
      if (request_.headers.size() > limits.max_headers)
        return fail(431, "more than " + std::to_string(limits.max_headers) + " header fields");
      first = false;
    }
    return check_framing(limits);
  }

  // Body length, connection persistence and Expect, from the parsed headers.
  bool check_framing(const Limits& limits) {
    const std::string* length = nullptr;
    bool host = false, transfer_encoding = false, close = false, keep_alive = false;
    for (const auto& h : request_.headers) {
      if (h.name == "content-length") {
        if (length != nullptr) return fail(400, "repeated Content-Length header");
        length = &h.value;
      } else if (h.name == "transfer-encoding") {
        transfer_encoding = true;
      } else if (h.name == "host") {
        if (host) return fail(400, "repeated Host header");
        host = true;
      } else if (h.name == "connection") {
        close = close || detail::lists_token(h.value, "close");
        keep_alive = keep_alive || detail::lists_token(h.value, "keep-alive");
      } else if (h.name == "expect" && detail::lower(h.value) == "100-continue") {
        expect_continue_ = request_.minor_version == 1;
      }
    }
    request_.keep_alive = request_.minor_version == 1 ? !close : keep_alive && !close;
    if (request_.minor_version == 1 && !host) return fail(400, "HTTP/1.1 requests need a Host header");
    if (transfer_encoding && length != nullptr) return fail(400, "both Content-Length and Transfer-Encoding");
    if (transfer_encoding)
      return fail(411, "chunked or encoded request bodies are not supported; send the body with Content-Length");
    if (length == nullptr) return true;
    if (length->empty() || length->size() > 18 || !std::all_of(length->begin(), length->end(), [](char c) { return c >= '0' && c <= '9'; }))
      return fail(400, "Content-Length must be a non-negative decimal number");
    std::from_chars(length->data(), length->data() + length->size(), body_len_);
    if (body_len_ > limits.max_body)
      return fail(413, "the request body exceeds " + std::to_string(limits.max_body) + " bytes");
    return true;
  }

  std::size_t skipped_ = 0;   // blank-line bytes dropped before the request line
  std::size_t scanned_ = 0;   // bytes of the input already searched for the end of the headers
  std::size_t head_len_ = 0;  // request line + headers + blank line; 0 until complete
  std::size_t body_len_ = 0;  // from Content-Length
  bool expect_continue_ = false;
  Request request_;
  ParseError error_;
};

}  // namespace kylin::server::http
