// The HTTP side of kylin-server: cpp-httplib routes over kylin::server::Service, bearer-key
// checks, OpenAI-shaped bodies for httplib's own errors (404, 405, 413) and SSE streaming.
#pragma once

#include <httplib.h>

#include <string>

#include "kylin/server/service.hpp"

namespace kylin_server {

struct HttpOptions {
  std::string api_key;  // empty: no authentication
  std::size_t max_body = std::size_t{4} << 20;
};

void install_routes(httplib::Server& server, kylin::server::Service& service, const HttpOptions& options);

}  // namespace kylin_server
