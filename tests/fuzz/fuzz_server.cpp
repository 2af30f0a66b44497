// libFuzzer target for what a client controls, without sockets. The first byte picks the mode:
// 0: the rest is raw HTTP bytes for http::RequestParser (small limits), fed whole and in pieces
//    of a size taken from the second byte: both give the same requests, errors and leftovers.
// 1: the rest is a /v1/chat/completions body; 2: a /v1/completions body. Parsing gives a typed
//    request or an ApiError (400 naming the field). A crash, hang or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kylin/server/http/parser.hpp"
#include "kylin/server/request.hpp"

namespace {

namespace http = kylin::server::http;

void require(bool ok) {
  if (!ok) __builtin_trap();
}

// Every request the bytes hold, each summarized (or the error that ended the stream), then the
// unconsumed bytes: what the transport would act on.
std::string parse_stream(std::string_view raw, std::size_t step) {
  http::Limits limits;
  limits.max_uri = 256;
  limits.max_header_bytes = 1024;
  limits.max_headers = 8;
  limits.max_body = 4096;
  std::string in, summary;
  http::RequestParser parser;
  std::size_t fed = 0;
  for (int requests = 0; requests < 64;) {
    const auto state = parser.parse(in, limits);
    if (state == http::RequestParser::State::error) {
      require(parser.error().status >= 400 && parser.error().status < 600 && !parser.error().message.empty());
      return summary + "error " + std::to_string(parser.error().status) + " " + parser.error().message;
    }
    if (state == http::RequestParser::State::complete) {
      const http::Request r = parser.take(in);
      require(!r.method.empty() && !r.target.empty() && r.target.front() == '/' && r.body.size() <= limits.max_body);
      summary += r.method + " " + r.target + " " + r.path + " " + std::to_string(r.headers.size()) + " " +
                 std::to_string(r.keep_alive) + " " + r.body + "\n";
      ++requests;
      continue;
    }
    if (fed == raw.size()) break;
    const std::size_t n = std::min(step, raw.size() - fed);
    in.append(raw.substr(fed, n));
    fed += n;
  }
  // After the request cap, the bytes not fed yet are unconsumed too: without them, whole and
  // piecewise feeding would report different leftovers for the same stream.
  return summary + "rest " + std::to_string(parser.started()) + " " + in + std::string(raw.substr(fed));
}

void parse_http(std::string_view rest) {
  if (rest.empty()) return;
  const std::size_t step = static_cast<unsigned char>(rest[0]) % 16 + 1;
  const std::string_view raw = rest.substr(1);
  require(parse_stream(raw, raw.size() + 1) == parse_stream(raw, step));
}

void parse_body(int mode, std::string_view body) {
  const kylin::SamplingParams defaults;
  try {
    if (mode == 1) {
      const auto r = kylin::server::parse_chat_request(body, defaults);
      require(r.messages.is_array());
      for (const auto& m : r.messages.as_array()) require(m.is_object() && m.find("content")->is_string());
    } else {
      const auto r = kylin::server::parse_completion_request(body, defaults, 4096);
      for (int id : r.prompt_tokens) require(id >= 0 && id < 4096);
    }
  } catch (const kylin::server::ApiError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const int mode = data[0] % 3;
  if (mode == 0) parse_http(rest);
  else parse_body(mode, rest);
  return 0;
}
