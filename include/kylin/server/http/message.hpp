// HTTP/1.1 messages of kylin's own transport: the parsed request a handler sees, the response it
// returns (a whole body, or a stream the worker pulls from), and the limits the transport enforces.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/server/client_watch.hpp"

namespace kylin::server::http {

struct Header {
  std::string name;  // lower case
  std::string value;
};

struct Request {
  std::string method;  // as sent (methods are case-sensitive)
  std::string target;  // as sent: path and query
  std::string path;    // percent-decoded, without the query
  int minor_version = 1;  // HTTP/1.<minor>
  std::vector<Header> headers;
  std::string body;
  bool keep_alive = true;
  // Set by the transport: marked when the client is gone (closed or reset) before its answer.
  std::shared_ptr<ClientWatch> watch = std::make_shared<ClientWatch>();

  const std::string* header(std::string_view lower_name) const {
    for (const auto& h : headers)
      if (h.name == lower_name) return &h.value;
    return nullptr;
  }
  std::string header_value(std::string_view lower_name) const {
    const std::string* v = header(lower_name);
    return v ? *v : std::string();
  }
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<Header> headers;  // added as given (Allow, Retry-After, CORS ...)
  std::string body;
  // A streamed response (chunked): called on the worker until it returns false. It appends what is
  // ready to `out`, waiting briefly when nothing is; an empty `out` writes nothing.
  std::function<bool(std::string& out)> next;
  bool close = false;  // close the connection after this response

  void set_header(std::string name, std::string value) { headers.push_back({std::move(name), std::move(value)}); }
};

using Handler = std::function<Response(Request&)>;
// The body of an error the transport answers by itself (400, 408, 413, 414, 431, 503 ...).
using ErrorBody = std::function<std::string(int status, const std::string& message)>;

// Defaults sized for an API server on a trusted network edge; every one is a kylin-server option.
struct Limits {
  std::size_t max_uri = 8 << 10;            // request target bytes; longer: 414
  std::size_t max_header_bytes = 64 << 10;  // request line + header section; larger: 431
  std::size_t max_headers = 100;            // header fields; more: 431
  std::size_t max_body = 4 << 20;           // Content-Length; larger: 413
  std::chrono::milliseconds request_timeout{30'000};  // first byte to last body byte; then 408
  std::chrono::milliseconds idle_timeout{15'000};     // keep-alive connection with no request
  std::chrono::milliseconds send_timeout{30'000};     // pending output with no write progress
  std::size_t max_connections = 512;  // beyond: the oldest idle or unfinished request is closed
  std::size_t workers = 8;            // threads running handlers
  std::size_t max_pending = 64;       // complete requests waiting for a worker; beyond: 503
};

inline const char* reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 416: return "Range Not Satisfiable";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return status < 400 ? "OK" : status < 500 ? "Client Error" : "Server Error";
  }
}

// Status line and headers of `r`; `length` is the body size, or -1 for a chunked body.
inline std::string response_head(const Response& r, long long length, bool keep_alive) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + reason_phrase(r.status) + "\r\n";
  if (!r.content_type.empty() && r.status != 204) out += "Content-Type: " + r.content_type + "\r\n";
  for (const auto& h : r.headers) out += h.name + ": " + h.value + "\r\n";
  if (length >= 0 && r.status != 204) out += "Content-Length: " + std::to_string(length) + "\r\n";
  if (length < 0) out += "Transfer-Encoding: chunked\r\n";
  out += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return out;
}

}  // namespace kylin::server::http
