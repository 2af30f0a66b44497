// kylin-server's observability end to end: GET /metrics passes Prometheus' own `promtool check
// metrics` and counts what was served; every answer carries a `timings` object that agrees with
// its usage; the access log has one line per request and never the prompt text. Each case states
// its property.
#include <fstream>
#include <string>

#include "common/process.hpp"
#include "common/temp_dir.hpp"
#include "server_process.hpp"

using namespace kylin::test;
using kylin::json::Value;

namespace metrics_http_test {

ServerProcess& server() {
  static ServerProcess s({"--ctx", "1024"});
  return s;
}

const std::string secret = "zanzibar-marmalade-4417";  // a prompt the log must never show

Value post_ok(const std::string& path, const std::string& body) { return kylin::test::post_ok(server(), path, body); }

std::string get_metrics() {
  auto c = server().client();
  auto r = c.Get("/metrics");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  CHECK(r->get_header_value("Content-Type").rfind("text/plain; version=0.0.4", 0) == 0);
  return r->body;
}

// The value of the sample line that starts with `series` (name and labels), or -1.
double sample(const std::string& text, const std::string& series) {
  const auto at_line = text.find("\n" + series + " ");
  if (at_line == std::string::npos) return -1;
  return std::stod(text.substr(at_line + series.size() + 2));
}

TEST_CASE("/metrics passes promtool check metrics and counts requests by endpoint and status, tokens and latencies") {
  const Value a = post_ok("/v1/chat/completions", R"({"messages": [{"role": "user", "content": ")" + secret +
                                                      R"("}], "max_tokens": 6, "temperature": 0})");
  const Value b = post_ok("/v1/completions", R"({"prompt": "Hello", "max_tokens": 4, "temperature": 0, "stream": false})");
  auto c = server().client();
  auto bad = post_json(c, "/v1/completions", R"({"prompt": 5})");
  REQUIRE(bad);
  CHECK(bad->status == 400);
  const std::string text = get_metrics();
  TempDir dir;
  const std::string file = (dir.path() / "metrics.txt").string();
  std::ofstream(file) << text;
  const auto check = run_shell("promtool check metrics < " + file + " 2>&1", "/usr/bin/promtool");
  INFO(check.out);
  CHECK(check.exit_code == 0);
  CHECK(sample(text, R"(kylin_requests_total{endpoint="/v1/chat/completions",status="200"})") == 1);
  CHECK(sample(text, R"(kylin_requests_total{endpoint="/v1/completions",status="200"})") == 1);
  CHECK(sample(text, R"(kylin_requests_total{endpoint="/v1/completions",status="400"})") == 1);
  const auto usage = [](const Value& r, const char* key) { return at(at(r, "usage"), key).as_int(); };
  CHECK(sample(text, "kylin_generated_tokens_total") == usage(a, "completion_tokens") + usage(b, "completion_tokens"));
  CHECK(sample(text, "kylin_prompt_tokens_total") == usage(a, "prompt_tokens") + usage(b, "prompt_tokens"));
  CHECK(sample(text, "kylin_time_to_first_token_seconds_count") == 2);
  CHECK(sample(text, "kylin_time_per_output_token_seconds_count") == 2);
  // Every answered request is timed (the start-up /health polls too; /metrics itself once answered).
  double requests = 0;
  for (std::size_t at_line = text.find("\nkylin_requests_total{"); at_line != std::string::npos;
       at_line = text.find("\nkylin_requests_total{", at_line + 1))
    requests += std::stod(text.substr(text.find("} ", at_line) + 2));
  CHECK(requests >= 3);
  CHECK(sample(text, "kylin_request_duration_seconds_count") == requests);
  CHECK(sample(text, "kylin_slots") == 1);
  CHECK(sample(text, "kylin_active_slots") == 0);
  CHECK(sample(text, "kylin_kv_cache_capacity_tokens") == 1024);
  CHECK(sample(text, "kylin_kv_cache_tokens") > 0);
}

TEST_CASE("answers carry timings that agree with their usage, whole and on the last streamed chunk") {
  const Value r = post_ok("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "temperature": 0})");
  const Value& t = at(r, "timings");
  CHECK(at(t, "predicted_n").as_int() == at(at(r, "usage"), "completion_tokens").as_int());
  CHECK(at(t, "prompt_n").as_int() + at(t, "cache_n").as_int() == at(at(r, "usage"), "prompt_tokens").as_int());
  CHECK(at(t, "cache_n").as_int() == at(at(at(r, "usage"), "prompt_tokens_details"), "cached_tokens").as_int());
  CHECK(at(t, "prompt_ms").as_double() >= 0);
  CHECK(at(t, "predicted_per_second").as_double() > 0);
  auto c = server().client();
  auto s = post_json(c, "/v1/completions", R"({"prompt": "Once", "max_tokens": 4, "temperature": 0, "stream": true})");
  REQUIRE(s);
  const auto payloads = sse_payloads(s->body);
  REQUIRE(payloads.size() >= 2);
  const Value last = parse_json(payloads[payloads.size() - 2]);  // the one with finish_reason, before [DONE]
  CHECK(at(at(last, "choices").as_array().at(0), "finish_reason").is_string());
  CHECK(at(at(last, "timings"), "predicted_n").as_int() == 4);
}

TEST_CASE("the access log has one line per request with method, endpoint, status and tokens, never the prompt") {
  (void)post_ok("/v1/chat/completions", R"({"messages": [{"role": "user", "content": ")" + secret + R"( again"}], "max_tokens": 3, "temperature": 0})");
  auto c = server().client();
  (void)c.Get("/v1/models");
  const std::string log = server().log();
  INFO(log);
  CHECK(log.find(secret) == std::string::npos);
  CHECK(log.find("POST /v1/chat/completions 200 prompt_tokens=") != std::string::npos);
  CHECK(log.find("completion_tokens=3 ") != std::string::npos);
  CHECK(log.find("GET /v1/models 200") != std::string::npos);
}

}  // namespace metrics_http_test
