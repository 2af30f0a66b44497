// Routes of kylin-server; every handler answers with a JSON body, errors in OpenAI's shape.
#include "kylin-server/routes.hpp"

#include <chrono>
#include <functional>
#include <string_view>

namespace kylin_server {
namespace {

namespace srv = kylin::server;

constexpr const char* json_type = "application/json";
constexpr auto poll_interval = std::chrono::milliseconds(100);  // how often an idle stream wakes up
// While a streamed request waits (queue, long prefill) an SSE comment is written this often: a
// write is the only way to notice a client that left, whose job is then skipped or stopped.
constexpr auto heartbeat_interval = std::chrono::seconds(1);
constexpr std::string_view heartbeat = ": waiting\n\n";

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param = {},
                const std::string& code = {}) {
  res.status = status;
  res.set_content(srv::error_body(status, message, param, code), json_type);
}

// Runs a handler body, turning every exception into an OpenAI error response.
void guarded(httplib::Response& res, const std::function<void()>& body) {
  try {
    body();
  } catch (const srv::ApiError& e) {
    if (e.status() == srv::status::unavailable) res.set_header("Retry-After", "1");
    send_error(res, e.status(), e.message(), e.param(), e.code());
  } catch (const kylin::Error& e) {
    const bool request = e.category() == kylin::ErrorCategory::request || e.category() == kylin::ErrorCategory::tokenizer ||
                         e.category() == kylin::ErrorCategory::chat_template;
    send_error(res, request ? srv::status::bad_request : srv::status::internal_error, e.what());
  } catch (const std::exception& e) {
    send_error(res, srv::status::internal_error, e.what());
  }
}

void send(httplib::Response& res, const srv::Reply& reply) {
  res.status = reply.status;
  res.set_content(reply.body, json_type);
}

// Streams the events of `stream` as they come. A failed write means the client left: the job
// is cancelled and the connection dropped.
void send_stream(httplib::Response& res, std::shared_ptr<srv::EventStream> stream) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [stream, last_write = std::chrono::steady_clock::now()](std::size_t, httplib::DataSink& sink) mutable {
        std::string data;
        if (!stream->pop(data, poll_interval)) {
          sink.done();
          return true;
        }
        const auto now = std::chrono::steady_clock::now();
        if (data.empty() && now - last_write >= heartbeat_interval) data = heartbeat;
        if (data.empty()) return true;
        last_write = now;
        const bool ok = sink.write(data.data(), data.size());
        if (!ok) stream->cancel();
        return ok;
      },
      [stream](bool success) {
        if (!success) stream->cancel();
      });
}

void generation_route(httplib::Response& res, const srv::Started& started) {
  if (started.stream) send_stream(res, started.stream);
  else send(res, started.reply);
}

std::string bearer(const httplib::Request& req) {
  const std::string auth = req.get_header_value("Authorization");
  constexpr std::string_view prefix = "Bearer ";
  return auth.starts_with(prefix) ? auth.substr(prefix.size()) : std::string();
}

// Constant-time comparison, so a key cannot be guessed byte by byte from response times.
bool same_key(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

void method_not_allowed(httplib::Server& server, const std::string& path, bool post_route) {
  auto reject = [post_route](const httplib::Request& req, httplib::Response& res) {
    res.set_header("Allow", post_route ? "POST" : "GET");
    send_error(res, srv::status::method_not_allowed, req.method + " is not allowed on " + req.path + " (use " +
                                                         (post_route ? "POST" : "GET") + ")");
  };
  if (post_route) server.Get(path, reject);
  else server.Post(path, reject);
  server.Put(path, reject);
  server.Patch(path, reject);
  server.Delete(path, reject);
}

}  // namespace

void install_routes(httplib::Server& server, srv::Service& service, const HttpOptions& options) {
  server.set_payload_max_length(options.max_body);

  server.set_pre_routing_handler([key = options.api_key](const httplib::Request& req, httplib::Response& res) {
    if (key.empty() || req.path == "/health" || same_key(bearer(req), key)) return httplib::Server::HandlerResponse::Unhandled;
    res.set_header("WWW-Authenticate", "Bearer");
    send_error(res, srv::status::unauthorized, "invalid or missing API key (Authorization: Bearer <key>)", {},
               "invalid_api_key");
    return httplib::Server::HandlerResponse::Handled;
  });

  // httplib's own errors (no route, body too large, unreadable request) get an OpenAI body too.
  // httplib parses form bodies itself and caps them at 8 KiB (curl -d sends that type by default).
  server.set_error_handler([max = options.max_body](const httplib::Request& req, httplib::Response& res) {
    constexpr std::string_view form = "application/x-www-form-urlencoded";
    if (!res.body.empty()) return;
    if (res.status == srv::status::not_found)
      send_error(res, res.status, "unknown route: " + req.method + " " + req.path, {}, "unknown_url");
    else if (res.status == srv::status::payload_too_large && req.get_header_value("Content-Type").starts_with(form))
      send_error(res, res.status, "form-encoded bodies are limited to 8 KiB; send Content-Type: application/json", {},
                 "payload_too_large");
    else if (res.status == srv::status::payload_too_large)
      send_error(res, res.status, "the request body exceeds " + std::to_string(max) + " bytes", {}, "payload_too_large");
    else
      send_error(res, res.status, "HTTP error " + std::to_string(res.status));
  });
  server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr e) {
    guarded(res, [&] { std::rethrow_exception(e); });
  });

  server.Get("/health", [&service](const httplib::Request&, httplib::Response& res) { send(res, service.health()); });
  server.Get("/v1/models", [&service](const httplib::Request&, httplib::Response& res) { send(res, service.models()); });
  server.Get(R"(/v1/models/(.+))", [&service](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { send(res, service.model(req.matches[1].str())); });
  });
  server.Post("/v1/chat/completions", [&service](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { generation_route(res, service.chat(req.body)); });
  });
  server.Post("/v1/completions", [&service](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { generation_route(res, service.complete(req.body)); });
  });
  server.Post("/tokenize", [&service](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { send(res, service.tokenize(req.body)); });
  });
  server.Post("/detokenize", [&service](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { send(res, service.detokenize(req.body)); });
  });
  for (const char* path : {"/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"})
    method_not_allowed(server, path, true);
  for (const char* path : {"/health", "/v1/models"}) method_not_allowed(server, path, false);
}

}  // namespace kylin_server
