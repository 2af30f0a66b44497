// Request validation: OpenAI bodies parse into typed requests, and each wrong field is a 400
// whose `param` names it.
#include <doctest/doctest.h>

#include <filesystem>
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
  CHECK(param == "messages[0].content[0].image_url");
  const std::string ok = R"("messages": [{"role": "user", "content": "x"}])";
  for (const auto& [field, value] : std::vector<std::pair<std::string, std::string>>{
           {"temperature", "\"hot\""}, {"temperature", "-1"}, {"top_p", "0"}, {"top_k", "1.5"}, {"min_p", "2"},
           {"max_tokens", "0"}, {"max_tokens", "\"5\""}, {"stop", "3"}, {"stream", "1"}, {"seed", "\"s\""},
           {"n", "0"}, {"n", "129"}, {"grammar", "1"}, {"tools", "{}"}, {"reasoning_effort", "\"extreme\""}, {"chat_template_kwargs", "[]"},
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

// The 400 a chat request with `extra` fields gets (or fails the test when it is accepted).
static ApiError refusal(const std::string& extra) {
  try {
    (void)parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], )" + extra + "}", defaults);
  } catch (const ApiError& e) {
    return e;
  }
  FAIL("accepted: ", extra);
  return ApiError(200, "");
}

TEST_CASE("numbers a float cannot hold: a positive one never becomes 0, one beyond float's range is refused with its value (issue 39)") {
  const auto tiny = parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "top_p": 5e-324})", defaults);
  REQUIRE(tiny.sampling.top_p.has_value());
  CHECK(*tiny.sampling.top_p > 0.0f);
  const ApiError big = refusal(R"("temperature": 1e300)");
  CHECK(big.param() == "temperature");
  CHECK(big.message().find("1e+300") != std::string::npos);
  CHECK(big.message().find("inf") == std::string::npos);
  const ApiError negative = refusal(R"("top_p": -5e-324)");
  CHECK(negative.param() == "top_p");
  CHECK(negative.message().find("-5e-324") != std::string::npos);
}

TEST_CASE("a seed or count beyond 64 bits is valid JSON: a 400 saying the field is out of range (issue 39)") {
  for (const std::string& seed : {std::string("18446744073709551621"), std::string("9223372036854775808"), std::string("-9223372036854775809")}) {
    CAPTURE(seed);
    const ApiError e = refusal(R"("seed": )" + seed);
    CHECK(e.param() == "seed");
    CHECK(e.message().find("out of range") != std::string::npos);
  }
  CHECK(refusal(R"("max_tokens": 100000000000000000000)").param() == "max_tokens");
  CHECK(parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "seed": 9223372036854775807})", defaults).sampling.seed ==
        9223372036854775807ull);
}

TEST_CASE("several completion prompts in one request are refused as such; one token-id array in an array is one prompt (issue 39)") {
  for (const char* body : {R"({"prompt": [[1], [2]]})", R"({"prompt": ["a", "b"]})"}) {
    CAPTURE(body);
    try {
      (void)parse_completion_request(body, defaults, 10);
      FAIL("accepted");
    } catch (const ApiError& e) {
      CHECK(e.param() == "prompt");
      CHECK(e.message().find("one prompt per request") != std::string::npos);
    }
  }
  CHECK(parse_completion_request(R"({"prompt": [[1, 2]]})", defaults, 10).prompt_tokens == std::vector<int>{1, 2});
}

TEST_CASE("a key given twice in a body: the last value wins, as in Python's and JavaScript's JSON parsers (issue 39)") {
  const auto r = parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1, "model": "a", "max_tokens": 7})", defaults);
  CHECK(r.max_tokens == 7);
  CHECK(r.model == "a");
}

TEST_CASE("a library error reaches clients without the server's paths: an absolute context is cut to the file name (issue 39)") {
  const kylin::Error template_error(kylin::ErrorCategory::chat_template, "/srv/models/qwen3/tokenizer_config.json chat_template line 40",
                                    "list index out of range");
  CHECK(client_text(template_error) == "[kylin.template] tokenizer_config.json chat_template line 40: list index out of range");
  const kylin::Error file_error(kylin::ErrorCategory::io, "/var/cache/kylin/slot.bin", "no such file");
  CHECK(client_text(file_error) == "[kylin.io] slot.bin: no such file");
  const kylin::Error field_error(kylin::ErrorCategory::request, "top_p", "must be in (0, 1]");
  CHECK(client_text(field_error) == field_error.what());
  // An exception of the standard library (a filesystem_error names its paths) becomes a plain 500.
  Failure f;
  try {
    throw std::filesystem::filesystem_error("cannot stat", std::filesystem::path("/var/secret/x"), std::make_error_code(std::errc::io_error));
  } catch (...) {
    f = current_failure();
  }
  CHECK(f.status == 500);
  CHECK(f.message.find("/var/secret") == std::string::npos);
  try {
    throw file_error;
  } catch (...) {
    f = current_failure();
  }
  CHECK(f.status == 500);
  CHECK(f.message == "[kylin.io] slot.bin: no such file");
}
