// RequestParser, in process: the transport's limits and framing rules, byte by byte.
#include <doctest/doctest.h>

#include "kylin/server/http/parser.hpp"

using namespace kylin::server::http;

namespace {

struct Parsed {
  RequestParser::State state;
  ParseError error;
  Request request;
  std::string rest;  // what stays buffered (a pipelined request)
};

// Feeds `raw` in pieces of `step` bytes, as a slow client would send it.
Parsed feed(const std::string& raw, std::size_t step = 1 << 20, const Limits& limits = {}) {
  RequestParser p;
  std::string in;
  auto state = RequestParser::State::incomplete;
  std::size_t fed = 0;
  for (; fed < raw.size() && state == RequestParser::State::incomplete; fed += step) {
    in.append(raw, fed, step);
    state = p.parse(in, limits);
  }
  if (fed < raw.size()) in.append(raw, fed);  // the client kept sending: the next request
  Parsed out{state, p.error(), {}, {}};
  if (state == RequestParser::State::complete) out.request = p.take(in);
  out.rest = in;
  return out;
}

}  // namespace

TEST_CASE("a request parses the same whether it arrives whole or byte by byte; the next pipelined one stays buffered") {
  const std::string raw = "POST /v1/models/a%2Fb?x=1 HTTP/1.1\r\nHost: h\r\nX-Name:  v \r\nContent-Length: 4\r\n\r\nbodyGET / HTTP/1.1\r\n";
  for (std::size_t step : {std::size_t{1}, std::size_t{7}, raw.size()}) {
    CAPTURE(step);
    const Parsed p = feed(raw, step);
    REQUIRE(p.state == RequestParser::State::complete);
    CHECK(p.request.method == "POST");
    CHECK(p.request.path == "/v1/models/a/b");
    CHECK(p.request.header_value("x-name") == "v");
    CHECK(p.request.body == "body");
    CHECK(p.request.keep_alive);
    CHECK(p.rest == "GET / HTTP/1.1\r\n");
  }
}

TEST_CASE("framing that request smuggling relies on is refused with 400, encoded bodies with 411") {
  for (const std::string cl : {"abc", "-1", "1e3", "", "5, 5", "99999999999999999999"}) {
    CAPTURE(cl);
    const Parsed p = feed("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: " + cl + "\r\n\r\n");
    REQUIRE(p.state == RequestParser::State::error);
    CHECK(p.error.status == 400);
  }
  CHECK(feed("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx").error.status == 400);
  CHECK(feed("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\nx").error.status == 400);
  CHECK(feed("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n").error.status == 411);
  CHECK(feed("GET / HTTP/1.1\r\nHost: h\r\n folded\r\n\r\n").error.status == 400);
  CHECK(feed("GET / HTTP/1.1\r\n\r\n").error.status == 400);  // no Host
  CHECK(feed("GET / HTTP/2.0\r\nHost: h\r\n\r\n").error.status == 505);
  CHECK(feed("GET http://h/ HTTP/1.1\r\nHost: h\r\n\r\n").error.status == 400);
}

TEST_CASE("up to 4 bytes of blank lines before a request are skipped however they arrive; more, or an empty request line, is a 400") {
  // Found by fuzz_server: whole input skipped 4 bytes and then read an empty request line as the
  // end of the headers ("needs a Host header"), trickled input skipped any number of blank lines.
  for (std::size_t step : {std::size_t{1}, std::size_t{2}, std::size_t{1000}}) {
    CAPTURE(step);
    const Parsed ok = feed("\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n", step);
    REQUIRE(ok.state == RequestParser::State::complete);
    CHECK(ok.request.path == "/");
    for (const std::string lead : {"\r\n\r\n\r\n", "\n\n\n\n\n", "\r\r\n\r\nX HT\r\n"}) {
      const Parsed p = feed(lead + "GET / HTTP/1.1\r\nHost: h\r\n\r\n", step);
      REQUIRE(p.state == RequestParser::State::error);
      CHECK(p.error.status == 400);
      CHECK(p.error.message == "malformed request line");
    }
  }
}

TEST_CASE("the limits cut a request off while it arrives: 414, 431 by count and by bytes, 413 before the body") {
  Limits limits;
  limits.max_uri = 100;
  limits.max_headers = 3;
  limits.max_header_bytes = 1000;
  limits.max_body = 10;
  // An endless request line or header section is refused once past the limit, not at its end.
  CHECK(feed("GET /" + std::string(200, 'a'), 1, limits).error.status == 414);
  CHECK(feed("GET / HTTP/1.1\r\nHost: h\r\nX: " + std::string(2000, 'a'), 1, limits).error.status == 431);
  CHECK(feed("GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 1\r\nC: 1\r\n\r\n", 1, limits).error.status == 431);
  CHECK(feed("GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 1\r\n\r\n", 1, limits).state == RequestParser::State::complete);
  const Parsed big = feed("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\n", 1, limits);
  CHECK(big.error.status == 413);
}

TEST_CASE("Connection and Expect decide keep-alive and 100 Continue; HTTP/1.0 closes unless asked") {
  CHECK_FALSE(feed("GET / HTTP/1.1\r\nHost: h\r\nConnection: Close\r\n\r\n").request.keep_alive);
  CHECK_FALSE(feed("GET / HTTP/1.0\r\n\r\n").request.keep_alive);
  CHECK(feed("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").request.keep_alive);
  RequestParser p;
  std::string in = "POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n";
  CHECK(p.parse(in, {}) == RequestParser::State::incomplete);
  CHECK(p.expects_continue());
}
