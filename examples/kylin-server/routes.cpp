// Routes of kylin-server; every handler answers with a JSON body, errors in OpenAI's shape.
#include "kylin-server/routes.hpp"

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <functional>
#include <string_view>

namespace kylin_server {
namespace {

namespace srv = kylin::server;
namespace http = kylin::server::http;

constexpr auto poll_interval = std::chrono::milliseconds(100);  // how often an idle stream wakes up

// While a streamed request waits (queue, long prefill) an SSE comment is written this often: a
// write is the surest way to notice a client that left, whose job is then skipped or stopped.
constexpr auto heartbeat_interval = std::chrono::seconds(1);
constexpr std::string_view heartbeat = ": waiting\n\n";

http::Response error_response(int status, const std::string& message, const std::string& param = {},
                              const std::string& code = {}) {
  http::Response r;
  r.status = status;
  r.body = srv::error_body(status, message, param, code);
  if (status == srv::status::unavailable) r.set_header("Retry-After", "1");
  return r;
}

// Runs a handler body, turning every exception into an OpenAI error response.
http::Response guarded(const std::function<http::Response()>& body) {
  try {
    return body();
  } catch (...) {
    const srv::Failure f = srv::current_failure();
    return error_response(f.status, f.message, f.param, f.code);
  }
}

http::Response reply(const srv::Reply& r) {
  http::Response out;
  out.status = r.status;
  out.body = r.body;
  return out;
}

// Streams the events of `stream` as they come. When the client is gone the transport stops
// pulling and the Service's ClientWatch callback cancels the job.
http::Response event_stream(std::shared_ptr<srv::EventStream> stream) {
  http::Response r;
  r.content_type = "text/event-stream";
  r.set_header("Cache-Control", "no-cache");
  r.set_header("X-Accel-Buffering", "no");
  r.next = [stream, last_write = std::chrono::steady_clock::now()](std::string& out) mutable {
    if (!stream->pop(out, poll_interval)) return false;
    const auto now = std::chrono::steady_clock::now();
    if (out.empty() && now - last_write >= heartbeat_interval) out = heartbeat;
    if (!out.empty()) last_write = now;
    return true;
  };
  return r;
}

http::Response generation(const srv::Started& started) {
  return started.stream ? event_stream(started.stream) : reply(started.reply);
}

std::string bearer(const http::Request& req) {
  const std::string auth = req.header_value("authorization");
  constexpr std::string_view prefix = "Bearer ";
  if (auth.empty()) return req.header_value("x-api-key");  // how Anthropic clients send the key
  return auth.starts_with(prefix) ? auth.substr(prefix.size()) : std::string();
}

// Constant-time comparison, so a key cannot be guessed byte by byte from response times.
bool same_key(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// The value of `key` in the query of a request target ("/slots/0?action=save" -> "save"), or "".
std::string query_value(std::string_view target, std::string_view key) {
  const auto q = target.find('?');
  if (q == std::string_view::npos) return {};
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const auto amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    if (pair.size() > key.size() && pair.starts_with(key) && pair[key.size()] == '=') return std::string(pair.substr(key.size() + 1));
    if (amp == std::string_view::npos) break;
    rest.remove_prefix(amp + 1);
  }
  return {};
}

struct Route {
  std::string_view path;
  bool prefix;         // path + "{id}"
  std::string_view method;  // GET routes also answer HEAD
  std::function<http::Response(http::Request&, std::string_view tail)> handle;
};

http::Response metrics(const srv::Service& service) {
  http::Response r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = service.metrics_text();
  return r;
}

std::vector<Route> routes(srv::Service& service) {
  return {
      {"/health", false, "GET", [&service](http::Request&, std::string_view) { return reply(service.health()); }},
      {"/metrics", false, "GET", [&service](http::Request&, std::string_view) { return metrics(service); }},
      {"/v1/models", false, "GET", [&service](http::Request&, std::string_view) { return reply(service.models()); }},
      {"/v1/models/", true, "GET", [&service](http::Request&, std::string_view id) { return reply(service.model(id)); }},
      {"/v1/chat/completions", false, "POST",
       [&service](http::Request& q, std::string_view) { return generation(service.chat(q.body, q.watch)); }},
      {"/v1/completions", false, "POST",
       [&service](http::Request& q, std::string_view) { return generation(service.complete(q.body, q.watch)); }},
      {"/v1/messages", false, "POST",
       [&service](http::Request& q, std::string_view) { return generation(service.messages(q.body, q.watch)); }},
      {"/v1/messages/count_tokens", false, "POST",
       [&service](http::Request& q, std::string_view) { return reply(service.count_message_tokens(q.body)); }},
      {"/v1/embeddings", false, "POST",
       [&service](http::Request& q, std::string_view) { return reply(service.embeddings(q.body, q.watch)); }},
      {"/v1/rerank", false, "POST", [&service](http::Request& q, std::string_view) { return reply(service.rerank(q.body, q.watch)); }},
      {"/rerank", false, "POST", [&service](http::Request& q, std::string_view) { return reply(service.rerank(q.body, q.watch)); }},
      {"/tokenize", false, "POST", [&service](http::Request& q, std::string_view) { return reply(service.tokenize(q.body)); }},
      {"/detokenize", false, "POST", [&service](http::Request& q, std::string_view) { return reply(service.detokenize(q.body)); }},
      {"/slots/", true, "POST",
       [&service](http::Request& q, std::string_view id) { return reply(service.slot(id, query_value(q.target, "action"), q.body)); }},
  };
}

const Route* find_route(const std::vector<Route>& table, const std::string& path) {
  for (const auto& r : table)
    if (r.prefix ? path.size() > r.path.size() && path.starts_with(r.path) : path == r.path) return &r;
  return nullptr;
}

std::string allowed(const Route& r) { return r.method == "GET" ? "GET, HEAD, OPTIONS" : "POST, OPTIONS"; }

// A CORS preflight: answered without the API key (browsers never send it on a preflight).
http::Response preflight(const Route& route, const http::Request& req, const HttpOptions& o) {
  http::Response r;
  r.status = 204;
  r.set_header("Allow", allowed(route));
  if (!o.cors_origin.empty()) {
    r.set_header("Access-Control-Allow-Methods", allowed(route));
    const std::string asked = req.header_value("access-control-request-headers");
    r.set_header("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type" : asked);
    r.set_header("Access-Control-Max-Age", "600");
  }
  return r;
}

http::Response dispatch(const std::vector<Route>& table, http::Request& req, const HttpOptions& o) {
  const Route* route = find_route(table, req.path);
  if (req.method == "OPTIONS" && route != nullptr) return preflight(*route, req, o);
  if (!o.api_key.empty() && req.path != "/health" && !same_key(bearer(req), o.api_key)) {
    http::Response r = error_response(srv::status::unauthorized, "invalid or missing API key (Authorization: Bearer <key>)", {},
                                      "invalid_api_key");
    r.set_header("WWW-Authenticate", "Bearer");
    return r;
  }
  if (route == nullptr) return error_response(srv::status::not_found, "unknown route: " + req.method + " " + req.path, {}, "unknown_url");
  if (req.method != route->method && !(route->method == "GET" && req.method == "HEAD")) {
    http::Response r = error_response(srv::status::method_not_allowed, req.method + " is not allowed on " + req.path + " (use " +
                                                                             std::string(route->method) + ")");
    r.set_header("Allow", allowed(*route));
    return r;
  }
  const std::string_view tail = std::string_view(req.path).substr(route->prefix ? route->path.size() : req.path.size());
  return guarded([&] { return route->handle(req, tail); });
}

// What the access log and the metrics get of one request, written once its last byte is out or
// its client is gone (when the transport drops the response): method, endpoint, status, tokens
// and duration, never the prompt or the answer. A request with a body then has its memory
// returned to the system (memory.hpp).
class RequestRecord {
 public:
  RequestRecord(srv::Service& service, const http::Request& req, std::string endpoint, int status, const HttpOptions& o)
      : service_(service), method_(req.method), endpoint_(std::move(endpoint)), status_(status), watch_(req.watch),
        log_(o.access_log), memory_(req.body.empty() ? nullptr : o.memory) {}
  RequestRecord(const RequestRecord&) = delete;
  RequestRecord& operator=(const RequestRecord&) = delete;
  ~RequestRecord() {
    if (memory_) memory_->request_done();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    service_.metrics().request(endpoint_, status_, seconds);
    const std::optional<kylin::GenerationStats> stats = watch_ ? watch_->stats() : std::nullopt;
    if (stats) service_.metrics().generation(*stats);
    if (!log_) return;
    std::fprintf(stderr, "kylin-server: %s %s %d prompt_tokens=%lld cached_tokens=%lld completion_tokens=%lld %.1f ms\n",
                 method_.c_str(), endpoint_.c_str(), status_, static_cast<long long>(stats ? stats->prompt_tokens : 0),
                 static_cast<long long>(stats ? stats->cached_tokens : 0), static_cast<long long>(stats ? stats->generated_tokens : 0),
                 seconds * 1000.0);
  }
  void start(std::chrono::steady_clock::time_point t0) { t0_ = t0; }

 private:
  srv::Service& service_;
  std::string method_, endpoint_;
  int status_;
  std::shared_ptr<srv::ClientWatch> watch_;
  bool log_;
  MemoryReturn* memory_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

// The label of a request's route: its path pattern, so label values stay a fixed set.
std::string endpoint_of(const std::vector<Route>& table, const http::Request& req) {
  const Route* route = find_route(table, req.path);
  if (route == nullptr) return "other";
  return route->prefix ? std::string(route->path) + "{id}" : std::string(route->path);
}

}  // namespace

std::string transport_error(int status, const std::string& message) { return srv::error_body(status, message); }

http::Handler make_handler(srv::Service& service, const HttpOptions& options) {
  auto table = std::make_shared<std::vector<Route>>(routes(service));
  return [table, options, &service](http::Request& req) {
    const auto t0 = std::chrono::steady_clock::now();
    http::Response r = dispatch(*table, req, options);
    if (!options.cors_origin.empty()) {
      r.set_header("Access-Control-Allow-Origin", options.cors_origin);
      if (options.cors_origin != "*") r.set_header("Vary", "Origin");
    }
    auto record = std::make_shared<RequestRecord>(service, req, endpoint_of(*table, req), r.status, options);
    record->start(t0);
    if (r.next) r.next = [next = std::move(r.next), record](std::string& out) mutable { return next(out); };
    return r;  // a whole response's record is written here, as `record` goes; a stream's when it ends
  };
}

}  // namespace kylin_server
