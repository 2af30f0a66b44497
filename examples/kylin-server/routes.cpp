// Routes of kylin-server; every handler answers with a JSON body, errors in OpenAI's shape.
#include "kylin-server/routes.hpp"

#include <algorithm>
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
  if (r.status == srv::status::unavailable) out.set_header("Retry-After", "1");
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

using Generate = srv::Started (srv::Service::*)(std::string_view, const std::shared_ptr<srv::ClientWatch>&);

// A generation endpoint at `path`.
Route generating(std::string_view path, srv::Service& service, Generate member) {
  return {path, false, "POST", [&service, member](http::Request& q, std::string_view) { return generation((service.*member)(q.body, q.watch)); }};
}

// Every /v1 route also answers without /v1 (/models, /responses/input_tokens, /responses/{id}
// ...), as llama.cpp's server does for the OpenAI routes, unless the table has that route itself.
// Appended in table order, so an exact path still comes before a prefix that would cover it.
void add_unversioned(std::vector<Route>& table) {
  for (std::size_t i = 0, n = table.size(); i < n; ++i) {
    const Route r = table[i];
    if (!r.path.starts_with("/v1/")) continue;
    const std::string_view bare = r.path.substr(3);
    const auto same = [&](const Route& t) { return t.path == bare && t.method == r.method && t.prefix == r.prefix; };
    if (std::none_of(table.begin(), table.end(), same)) table.push_back({bare, r.prefix, r.method, r.handle});
  }
}

// Paths are matched in order, so an exact path comes before a prefix that would cover it.
std::vector<Route> routes(srv::Service& service) {
  using S = srv::Service;
  std::vector<Route> table = {
      {"/health", false, "GET", [&service](http::Request&, std::string_view) { return reply(service.health()); }},
      {"/metrics", false, "GET", [&service](http::Request&, std::string_view) { return metrics(service); }},
      {"/v1/models", false, "GET", [&service](http::Request&, std::string_view) { return reply(service.models()); }},
      {"/v1/models/", true, "GET", [&service](http::Request&, std::string_view id) { return reply(service.model(id)); }},
      generating("/v1/chat/completions", service, &S::chat),
      generating("/chat/completions", service, &S::chat),
      generating("/v1/completions", service, &S::complete),
      generating("/completions", service, &S::complete),
      generating("/infill", service, &S::infill),
      generating("/completion", service, &S::llama_completion),  // llama.cpp's native shape
      {"/props", false, "GET", [&service](http::Request&, std::string_view) { return reply(service.props()); }},
      generating("/v1/messages", service, &S::messages),
      {"/v1/messages/count_tokens", false, "POST",
       [&service](http::Request& q, std::string_view) { return reply(service.count_message_tokens(q.body)); }},
      generating("/v1/responses", service, &S::create_response),
      generating("/responses", service, &S::create_response),
      {"/v1/responses/input_tokens", false, "POST",
       [&service](http::Request& q, std::string_view) { return reply(service.response_input_tokens(q.body)); }},
      {"/v1/responses/", true, "GET", [&service](http::Request&, std::string_view id) { return reply(service.response(id)); }},
      {"/v1/responses/", true, "DELETE", [&service](http::Request&, std::string_view id) { return reply(service.delete_response(id)); }},
      {"/v1/embeddings", false, "POST",
       [&service](http::Request& q, std::string_view) { return reply(service.embeddings(q.body, q.watch)); }},
      {"/embeddings", false, "POST", [&service](http::Request& q, std::string_view) { return reply(service.embeddings(q.body, q.watch)); }},
      {"/v1/rerank", false, "POST", [&service](http::Request& q, std::string_view) { return reply(service.rerank(q.body, q.watch)); }},
      {"/rerank", false, "POST", [&service](http::Request& q, std::string_view) { return reply(service.rerank(q.body, q.watch)); }},
      {"/tokenize", false, "POST", [&service](http::Request& q, std::string_view) { return reply(service.tokenize(q.body)); }},
      {"/detokenize", false, "POST", [&service](http::Request& q, std::string_view) { return reply(service.detokenize(q.body)); }},
      {"/apply-template", false, "POST", [&service](http::Request& q, std::string_view) { return reply(service.apply_template(q.body)); }},
      {"/slots/", true, "POST",
       [&service](http::Request& q, std::string_view id) { return reply(service.slot(id, query_value(q.target, "action"), q.body)); }},
  };
  add_unversioned(table);
  return table;
}

bool matches(const Route& r, const std::string& path) {
  return r.prefix ? path.size() > r.path.size() && path.starts_with(r.path) : path == r.path;
}

// The routes of `path` (one per method), in table order; empty when it is not a route.
std::vector<const Route*> find_routes(const std::vector<Route>& table, const std::string& path) {
  std::vector<const Route*> out;
  for (const auto& r : table)
    if (matches(r, path) && (out.empty() || out.front()->path == r.path)) out.push_back(&r);
  return out;
}

bool answers(const Route& r, const std::string& method) { return method == r.method || (r.method == "GET" && method == "HEAD"); }

std::string allowed(const std::vector<const Route*>& routes) {
  std::string out;
  for (const Route* r : routes) out += std::string(r->method) + (r->method == "GET" ? ", HEAD" : "") + ", ";
  return out + "OPTIONS";
}

// A CORS preflight: answered without the API key (browsers never send it on a preflight).
http::Response preflight(const std::vector<const Route*>& routes, const http::Request& req, const HttpOptions& o) {
  http::Response r;
  r.status = 204;
  r.set_header("Allow", allowed(routes));
  if (o.cors.enabled()) {
    r.set_header("Access-Control-Allow-Methods", allowed(routes));
    const std::string asked = req.header_value("access-control-request-headers");
    r.set_header("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type" : asked);
    r.set_header("Access-Control-Max-Age", "600");
  }
  return r;
}

http::Response dispatch(const std::vector<Route>& table, http::Request& req, const HttpOptions& o) {
  const std::vector<const Route*> routes = find_routes(table, req.path);
  if (req.method == "OPTIONS" && !routes.empty()) return preflight(routes, req, o);
  if (!o.api_key.empty() && req.path != "/health" && !same_key(bearer(req), o.api_key)) {
    http::Response r = error_response(srv::status::unauthorized, "invalid or missing API key (Authorization: Bearer <key>)", {},
                                      "invalid_api_key");
    r.set_header("WWW-Authenticate", "Bearer");
    return r;
  }
  if (routes.empty()) return error_response(srv::status::not_found, "unknown route: " + req.method + " " + req.path, {}, "unknown_url");
  const auto route = std::find_if(routes.begin(), routes.end(), [&](const Route* r) { return answers(*r, req.method); });
  if (route == routes.end()) {
    std::string methods;
    for (const Route* r : routes) methods += (methods.empty() ? "" : " or ") + std::string(r->method);
    http::Response r = error_response(srv::status::method_not_allowed, req.method + " is not allowed on " + req.path + " (use " + methods + ")");
    r.set_header("Allow", allowed(routes));
    return r;
  }
  const std::string_view tail = std::string_view(req.path).substr((*route)->prefix ? (*route)->path.size() : req.path.size());
  return guarded([&] { return (*route)->handle(req, tail); });
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
  const std::vector<const Route*> routes = find_routes(table, req.path);
  if (routes.empty()) return "other";
  return routes.front()->prefix ? std::string(routes.front()->path) + "{id}" : std::string(routes.front()->path);
}

}  // namespace

std::string transport_error(int status, const std::string& message) { return srv::error_body(status, message); }

http::Handler make_handler(srv::Service& service, const HttpOptions& options) {
  auto table = std::make_shared<std::vector<Route>>(routes(service));
  return [table, options, &service](http::Request& req) {
    const auto t0 = std::chrono::steady_clock::now();
    http::Response r = dispatch(*table, req, options);
    if (const std::string allow = options.cors.allow_origin(req.header_value("origin")); !allow.empty())
      r.set_header("Access-Control-Allow-Origin", allow);
    if (options.cors.varies()) r.set_header("Vary", "Origin");
    auto record = std::make_shared<RequestRecord>(service, req, endpoint_of(*table, req), r.status, options);
    record->start(t0);
    if (r.next) r.next = [next = std::move(r.next), record](std::string& out) mutable { return next(out); };
    return r;  // a whole response's record is written here, as `record` goes; a stream's when it ends
  };
}

}  // namespace kylin_server
