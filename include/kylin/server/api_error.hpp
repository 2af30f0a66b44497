// ApiError: a request the server answers with an HTTP error status and an OpenAI-shaped body
// {"error": {"message", "type", "param", "code"}}; `param` names the offending request field.
#pragma once

#include <cstdio>
#include <exception>
#include <string>
#include <string_view>

#include "kylin/core/error.hpp"
#include "kylin/core/json.hpp"

namespace kylin::server {

namespace status {
inline constexpr int ok = 200;
inline constexpr int bad_request = 400;
inline constexpr int unauthorized = 401;
inline constexpr int not_found = 404;
inline constexpr int method_not_allowed = 405;
inline constexpr int payload_too_large = 413;
inline constexpr int too_many_requests = 429;
inline constexpr int internal_error = 500;
inline constexpr int unavailable = 503;
inline constexpr int insufficient_storage = 507;  // RFC 4918: the server cannot store what the request asks it to
}  // namespace status

class ApiError : public Error {
 public:
  ApiError(int http_status, const std::string& message, std::string param = {}, std::string code = {})
      : Error(ErrorCategory::request, param, message), status_(http_status), param_(std::move(param)), code_(std::move(code)) {}

  int status() const noexcept { return status_; }
  const std::string& param() const noexcept { return param_; }
  const std::string& code() const noexcept { return code_; }

 private:
  int status_;
  std::string param_, code_;
};

// A 400 about one request field.
inline ApiError invalid(std::string param, std::string message) {
  return ApiError(status::bad_request, std::move(message), std::move(param));
}

// OpenAI's error "type" for each status.
inline std::string error_type(int http_status) {
  switch (http_status) {
    case status::bad_request: return "invalid_request_error";
    case status::unauthorized: return "authentication_error";
    case status::not_found: return "not_found_error";
    case status::method_not_allowed: return "invalid_request_error";
    case status::payload_too_large: return "invalid_request_error";
    case status::too_many_requests: return "rate_limit_error";
    case status::unavailable: return "server_overloaded";
    default: return http_status < 500 ? "invalid_request_error" : "server_error";  // 408, 411, 414, 416, 431 ...
  }
}

// Client text an error repeats (an id, a model name, a field name) at most `max` bytes: cut at a
// character boundary, its length said, so a 100 KB id is not sent back whole.
inline std::string shown(std::string_view text, std::size_t max = 64) {
  if (text.size() <= max) return std::string(text);
  std::size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 sequence
  return std::string(text.substr(0, cut)) + "... (" + std::to_string(text.size()) + " bytes)";
}

// Whatever an error quotes, its message and param stay bounded (shown() cuts what is longer).
inline std::string error_body(int http_status, const std::string& message, const std::string& param = {},
                              const std::string& code = {}) {
  json::Value e = json::Object{};
  e.set("message", shown(message, 4096));
  e.set("type", error_type(http_status));
  e.set("param", param.empty() ? json::Value() : json::Value(shown(param, 256)));
  e.set("code", code.empty() ? json::Value() : json::Value(code));
  json::Value body = json::Object{};
  body.set("error", std::move(e));
  return json::dump(body);
}

inline std::string error_body(const ApiError& e) { return error_body(e.status(), e.message(), e.param(), e.code()); }

// A failed job's error as a value, handed from the inference thread to the request's thread. The
// exception itself stays where it was caught: an exception_ptr's reference count lives in the C++
// runtime, where ThreadSanitizer cannot see it order one thread's read before another's free.
struct Failure {
  int status = status::internal_error;
  std::string message, param, code;
};

// A library error as a client may read it: its text, with a context that is an absolute path (a
// model file, the cache directory) cut to the file name. Errors to clients name request fields,
// never where the server keeps its files; the log has the whole text.
inline std::string client_text(const Error& e) {
  const std::string& c = e.context();
  if (c.empty() || c.front() != '/') return e.what();
  const std::size_t slash = c.rfind('/', c.find(' '));
  return std::string("[kylin.") + std::string(category_name(e.category())) + "] " + c.substr(slash + 1) + ": " + e.message();
}

// What the exception being handled means for the client; call it inside a catch block. Errors
// that are not the request's (500) are logged whole on stderr and answered without paths.
inline Failure current_failure() {
  try {
    throw;
  } catch (const ApiError& e) {
    return {e.status(), e.message(), e.param(), e.code()};
  } catch (const Error& e) {
    const ErrorCategory c = e.category();
    const bool request = c == ErrorCategory::request || c == ErrorCategory::tokenizer || c == ErrorCategory::chat_template;
    if (!request) std::fprintf(stderr, "kylin-server: internal error: %s\n", e.what());
    return {request ? status::bad_request : status::internal_error, client_text(e), {}, {}};
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kylin-server: internal error: %s\n", e.what());  // e.g. a filesystem_error holds paths
    return {status::internal_error, "internal server error (see the server's log)", {}, {}};
  } catch (...) {
    return {status::internal_error, "unknown error", {}, {}};
  }
}

inline std::string error_body(const Failure& f) { return error_body(f.status, f.message, f.param, f.code); }

}  // namespace kylin::server
