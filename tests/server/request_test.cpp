// Request validation: OpenAI bodies parse into typed requests, and each wrong field is a 400
// whose `param` names it.
#include <doctest/doctest.h>

#include <string>

#include "kylin/server/request.hpp"

using namespace kylin::server;

namespace {

const kylin::SamplingParams defaults{};

int status_of(const std::string& body, std::string* param = nullptr) {
  try {
    (void)parse_chat_request(body, defaults);
  } catch (const ApiError& e) {
    if (param) *param = e.param();
    return e.status();
  }
  return 200;
}

}  // namespace

TEST_CASE("a full chat request parses into typed fields") {
  const auto r = parse_chat_request(R"({"model": "m", "messages": [{"role": "developer", "content": "sys"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "f", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "42"}],
    "max_completion_tokens": 5, "temperature": 0.5, "top_p": 0.9, "top_k": 4, "min_p": 0.1, "seed": 3,
    "stop": ["x", "y"], "presence_penalty": 0.5, "frequency_penalty": 0.25, "repetition_penalty": 1.1,
    "stream": true, "stream_options": {"include_usage": true}, "reasoning_effort": "minimal",
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]})",
                                    defaults);
  CHECK(r.model == "m");
  REQUIRE(r.messages.size() == 4);
  CHECK(r.messages.as_array()[0].find("role")->as_string() == "system");
  CHECK(r.messages.as_array()[1].find("content")->as_string() == "ab");
  CHECK(r.messages.as_array()[2].find("content")->as_string().empty());
  CHECK(r.messages.as_array()[2].find("tool_calls")->size() == 1);
  CHECK(r.messages.as_array()[3].find("tool_call_id")->as_string() == "c1");
  CHECK(*r.max_tokens == 5);
  CHECK(*r.sampling.temperature == doctest::Approx(0.5));
  CHECK(*r.sampling.top_k == 4);
  CHECK(*r.sampling.seed == 3);
  CHECK(r.stop == std::vector<std::string>{"x", "y"});
  CHECK(r.stream);
  CHECK(r.include_usage);
  CHECK_FALSE(r.chat.enable_thinking);
  CHECK(r.chat.tools.is_array());
}

TEST_CASE("chat_template_kwargs.enable_thinking wins over reasoning_effort; other effort levels think") {
  CHECK(parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "none",
      "chat_template_kwargs": {"enable_thinking": true}})", defaults).chat.enable_thinking);
  CHECK(parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "high"})", defaults)
            .chat.enable_thinking);
  CHECK_FALSE(parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}],
      "chat_template_kwargs": {"enable_thinking": false}})", defaults).chat.enable_thinking);
}

TEST_CASE("each invalid field is a 400 naming it") {
  std::string param;
  CHECK(status_of("{not json", &param) == 400);
  CHECK(status_of("[1, 2]") == 400);
  CHECK(status_of("{}", &param) == 400);
  CHECK(param == "messages");
  CHECK(status_of(R"({"messages": []})", &param) == 400);
  CHECK(status_of(R"({"messages": [{"role": "robot", "content": "x"}]})", &param) == 400);
  CHECK(param == "messages[0].role");
  CHECK(status_of(R"({"messages": [{"role": "user", "content": 5}]})", &param) == 400);
  CHECK(param == "messages[0].content");
  CHECK(status_of(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", &param) == 400);
  CHECK(param == "messages[0].content");
  const std::string ok = R"("messages": [{"role": "user", "content": "x"}])";
  for (const auto& [field, value] : std::vector<std::pair<std::string, std::string>>{
           {"temperature", "\"hot\""}, {"temperature", "-1"}, {"top_p", "0"}, {"top_k", "1.5"}, {"min_p", "2"},
           {"max_tokens", "0"}, {"max_tokens", "\"5\""}, {"stop", "3"}, {"stream", "1"}, {"seed", "\"s\""},
           {"n", "2"}, {"tools", "{}"}, {"reasoning_effort", "\"extreme\""}, {"chat_template_kwargs", "[]"},
           {"repetition_penalty", "0"}, {"model", "7"}}) {
    const std::string& f = field;  // CAPTURE cannot take a structured binding in clang 14
    const std::string& v = value;
    CAPTURE(f);
    CAPTURE(v);
    CHECK(status_of("{" + ok + ", \"" + field + "\": " + value + "}", &param) == 400);
    CHECK(param.rfind(field, 0) == 0);
  }
}

TEST_CASE("a top_k outside [0, 2^31-1] is a 400 whose message names both limits") {
  for (const char* k : {"-1", "2147483648"}) {
    CAPTURE(k);
    try {
      (void)parse_chat_request(std::string(R"({"messages": [{"role": "user", "content": "x"}], "top_k": )") + k + "}", defaults);
      FAIL("accepted");
    } catch (const kylin::server::ApiError& e) {
      CHECK(e.param() == "top_k");
      CHECK(e.message().find("between 0") != std::string::npos);
      CHECK(e.message().find("2147483647") != std::string::npos);
    }
  }
}

TEST_CASE("every 4xx the transport can send (408, 411, 414, 416, 431) is typed invalid_request_error, 5xx server_error") {
  for (int status : {400, 405, 408, 411, 413, 414, 416, 431})
    CHECK(kylin::server::error_type(status) == "invalid_request_error");
  for (int status : {500, 501, 505}) CHECK(kylin::server::error_type(status) == "server_error");
}

TEST_CASE("100k nested arrays are rejected as invalid JSON, not recursed into") {
  const std::string nested = std::string(100000, '[') + std::string(100000, ']');
  CHECK(status_of(nested) == 400);
  CHECK(status_of(R"({"messages": )" + nested + "}") == 400);
}

TEST_CASE("completion prompts: a string, one string in an array, or token ids in range") {
  CHECK(parse_completion_request(R"({"prompt": "hi"})", defaults, 10).prompt == "hi");
  CHECK(parse_completion_request(R"({"prompt": ["hi"]})", defaults, 10).prompt == "hi");
  CHECK(parse_completion_request(R"({"prompt": [1, 2, 3]})", defaults, 10).prompt_tokens == std::vector<int>{1, 2, 3});
  CHECK_THROWS_AS(parse_completion_request(R"({"prompt": [1, 20]})", defaults, 10), ApiError);
  CHECK_THROWS_AS(parse_completion_request(R"({"prompt": 5})", defaults, 10), ApiError);
  CHECK_THROWS_AS(parse_completion_request(R"({})", defaults, 10), ApiError);
}
