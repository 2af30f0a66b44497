// The HTTP side of kylin-server: routes over kylin::server::Service on kylin's own HTTP/1.1
// transport (kylin/server/http), bearer-key checks, CORS, 405/404, and SSE streaming.
#pragma once

#include <string>

#include "kylin-server/memory.hpp"
#include "kylin/server/anthropic_service.hpp"
#include "kylin/server/cors.hpp"
#include "kylin/server/http/server.hpp"
#include "kylin/server/llama_endpoints.hpp"
#include "kylin/server/openai_service.hpp"
#include "kylin/server/responses_service.hpp"
#include "kylin/server/retrieval.hpp"
#include "kylin/server/service.hpp"
#include "kylin/server/text_endpoints.hpp"

namespace kylin_server {

struct HttpOptions {
  std::string api_key;      // empty: no authentication
  kylin::server::CorsPolicy cors;  // none: no Access-Control-* headers
  bool access_log = true;   // one line per request on stderr
  MemoryReturn* memory = nullptr;  // told when a request with a body has been answered (null: never)
};

kylin::server::http::Handler make_handler(kylin::server::Service& service, const HttpOptions& options);

// OpenAI-shaped body for the errors the transport answers itself (400, 408, 413, 414, 431, 503).
std::string transport_error(int status, const std::string& message);

}  // namespace kylin_server
