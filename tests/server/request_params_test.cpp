// The OpenAI parameters beyond sampling: each is honoured (parsed into the request) or refused
// with a 400 naming it, never ignored; the harmless ones are accepted.
#include <doctest/doctest.h>

#include <string>

#include "kylin/server/request.hpp"
#include "kylin/server/responses.hpp"

using namespace kylin::server;

namespace request_params_test {

const kylin::SamplingParams defaults{};
constexpr int vocab = 1000;

std::string chat_with(const std::string& extra) {
  return R"({"messages": [{"role": "user", "content": "x"}], )" + extra + "}";
}
std::string completion_with(const std::string& extra) { return R"({"prompt": "x", )" + extra + "}"; }

// The param a refused body names ("" when the body is accepted).
template <class Parse>
std::string refused(Parse parse) {
  try {
    parse();
  } catch (const ApiError& e) {
    CHECK(e.status() == 400);
    return e.param();
  }
  return "";
}
std::string chat_refused(const std::string& extra) {
  return refused([&] { (void)parse_chat_request(chat_with(extra), defaults); });
}
std::string completion_refused(const std::string& extra) {
  return refused([&] { (void)parse_completion_request(completion_with(extra), defaults, vocab); });
}


TEST_CASE("chat logprobs and top_logprobs parse; top_logprobs above 20 or without logprobs is a 400 naming it") {
  const auto r = parse_chat_request(chat_with(R"("logprobs": true, "top_logprobs": 20)"), defaults);
  CHECK(r.logprob.logprobs);
  CHECK(r.logprob.top == 20);
  CHECK_FALSE(parse_chat_request(chat_with(R"("logprobs": false)"), defaults).logprob.active());
  CHECK(chat_refused(R"("logprobs": true, "top_logprobs": 21)") == "top_logprobs");
  CHECK(chat_refused(R"("logprobs": true, "top_logprobs": -1)") == "top_logprobs");
  CHECK(chat_refused(R"("top_logprobs": 3)") == "top_logprobs");
  CHECK(chat_refused(R"("logprobs": 5)") == "logprobs");  // chat's logprobs is a boolean
}

TEST_CASE("the integer logprobs of /v1/completions is 0..5, the number of alternatives") {
  const auto r = parse_completion_request(completion_with(R"("logprobs": 5)"), defaults, vocab);
  CHECK(r.logprob.logprobs);
  CHECK(r.logprob.top == 5);
  const auto zero = parse_completion_request(completion_with(R"("logprobs": 0)"), defaults, vocab);
  CHECK(zero.logprob.logprobs);
  CHECK(zero.logprob.top == 0);
  CHECK_FALSE(parse_completion_request(completion_with(R"("logprobs": null)"), defaults, vocab).logprob.logprobs);
  CHECK(completion_refused(R"("logprobs": 6)") == "logprobs");
  CHECK(completion_refused(R"("logprobs": true)") == "logprobs");
}

TEST_CASE("logit_bias maps token-id strings to biases in [-100, 100]; bad keys, values and ids are a 400 naming it") {
  const auto r = parse_chat_request(chat_with(R"("logit_bias": {"5": -100, "17": 2.5})"), defaults);
  REQUIRE(r.logprob.logit_bias.size() == 2);
  CHECK(r.logprob.logit_bias[0] == std::pair<int, float>{5, -100.0f});
  CHECK(r.logprob.logit_bias[1] == std::pair<int, float>{17, 2.5f});
  CHECK(r.logprob.active());
  CHECK(chat_refused(R"("logit_bias": {"abc": 1})") == "logit_bias");
  CHECK(chat_refused(R"("logit_bias": {"-3": 1})") == "logit_bias");
  CHECK(chat_refused(R"("logit_bias": {"3": 100.5})") == "logit_bias");
  CHECK(chat_refused(R"("logit_bias": {"3": "1"})") == "logit_bias");
  CHECK(chat_refused(R"("logit_bias": [1])") == "logit_bias");
  CHECK(completion_refused(R"("logit_bias": {"999": 1})").empty());
  CHECK(completion_refused(R"("logit_bias": {"1000": 1})") == "logit_bias");  // outside the vocabulary
  CHECK_THROWS_AS(kylin::server::detail::check_logit_bias(r.logprob, 17), ApiError);
  CHECK_NOTHROW(kylin::server::detail::check_logit_bias(r.logprob, 18));
}

TEST_CASE("tool_choice none drops the tools, auto keeps them; required and a named offered function force a call") {
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "f"}}])";
  const auto none = parse_chat_request(chat_with(tools + R"(, "tool_choice": "none")"), defaults);
  CHECK(none.chat.tools.is_null());
  CHECK(none.tool_choice.mode == ToolChoiceMode::none);
  const auto automatic = parse_chat_request(chat_with(tools + R"(, "tool_choice": "auto")"), defaults);
  CHECK(automatic.chat.tools.is_array());
  CHECK_FALSE(automatic.tool_choice.forces_call());
  CHECK(parse_chat_request(chat_with(tools + R"(, "tool_choice": "required")"), defaults).tool_choice.mode == ToolChoiceMode::required);
  const auto named = parse_chat_request(chat_with(tools + R"(, "tool_choice": {"type": "function", "function": {"name": "f"}})"), defaults);
  CHECK(named.tool_choice.mode == ToolChoiceMode::named);
  CHECK(named.tool_choice.name == "f");
  CHECK(chat_refused(tools + R"(, "tool_choice": {"type": "function", "function": {"name": "g"}})") == "tool_choice");  // not offered
  CHECK(chat_refused(R"("tool_choice": "required")") == "tool_choice");                                             // no tools
  CHECK(chat_refused(tools + R"(, "tool_choice": {"type": "function"})") == "tool_choice");
  CHECK(chat_refused(tools + R"(, "tool_choice": "sometimes")") == "tool_choice");
  CHECK_FALSE(parse_chat_request(chat_with(R"("parallel_tool_calls": false)"), defaults).parallel_tool_calls);
  CHECK(parse_chat_request(chat_with(R"("parallel_tool_calls": true)"), defaults).parallel_tool_calls);
  CHECK(chat_refused(R"("parallel_tool_calls": "no")") == "parallel_tool_calls");
}

TEST_CASE("response_format text, json_object and json_schema parse; malformed ones are a 400 naming the field") {
  using Type = ResponseFormat::Type;
  const auto format = [](const std::string& rf) { return parse_chat_request(chat_with(R"("response_format": )" + rf), defaults).response_format; };
  CHECK(format(R"({"type": "text"})").type == Type::text);
  CHECK(format(R"({"type": "json_object"})").type == Type::json_object);
  const auto schema = format(R"({"type": "json_schema", "json_schema": {"name": "a", "strict": true, "schema": {"type": "integer"}}})");
  CHECK(schema.type == Type::json_schema);
  CHECK(kylin::json::dump(schema.schema) == R"({"type":"integer"})");
  CHECK(format(R"({"type": "json_schema", "json_schema": {"name": "a"}})").schema.is_null());  // any JSON value
  CHECK(chat_refused(R"("response_format": {"type": "yaml"})") == "response_format");
  CHECK(chat_refused(R"("response_format": "json")") == "response_format");
  CHECK(chat_refused(R"("response_format": {"type": "json_schema"})") == "response_format.json_schema");
  CHECK(chat_refused(R"("response_format": {"type": "json_schema", "json_schema": {"name": 1}})") == "response_format.json_schema.name");
  CHECK(chat_refused(R"("response_format": {"type": "json_schema", "json_schema": {"strict": "yes"}})") ==
        "response_format.json_schema.strict");
  CHECK(chat_refused(R"("response_format": {"type": "json_schema", "json_schema": {"schema": [1]}})") ==
        "response_format.json_schema.schema");
}

TEST_CASE("parameters kylin cannot honour are a 400 naming them; harmless labels are accepted") {
  for (const char* p : {R"("n": 0)", R"("n": 129)", R"("store": true)", R"("service_tier": "flex")", R"("audio": {"voice": "x"})",
                        R"("prediction": {"type": "content", "content": "x"})", R"("web_search_options": {})",
                        R"("functions": [])", R"("function_call": "auto")", R"("modalities": ["text", "audio"])",
                        R"("verbosity": "low")", R"("guided_json": {})", R"("grammar": 5)",
                        R"("grammar": "root ::= x", "response_format": {"type": "json_object"})"}) {
    CAPTURE(p);
    const std::string name = std::string(p).substr(1, std::string(p).find('"', 1) - 1);
    CHECK(chat_refused(p) == name);
  }
  for (const char* p : {R"("n": 1)", R"("n": 2)", R"("grammar": "root ::= \"x\"")", R"("store": false)", R"("service_tier": "auto")", R"("user": "u1")",
                        R"("metadata": {"k": "v"})", R"("safety_identifier": "s")", R"("prompt_cache_key": "k")",
                        R"("modalities": ["text"])", R"("some_unknown_field": 1)"}) {
    CAPTURE(p);
    CHECK(chat_refused(p).empty());
  }
}

// suffix (fill in the middle) and n > 1 parse; whether the model can do FIM is the service's check.
TEST_CASE("/v1/completions refuses echo and best_of other than 1, a suffix that is no string, and accepts the rest") {
  CHECK(completion_refused(R"("echo": true)") == "echo");
  CHECK(completion_refused(R"("suffix": 3)") == "suffix");
  CHECK(completion_refused(R"("best_of": 3)") == "best_of");
  CHECK(completion_refused(R"("n": 0)") == "n");
  CHECK(completion_refused(R"("echo": false, "suffix": "tail", "best_of": 1, "n": 2)").empty());
}

TEST_CASE("parallel_tool_calls false returns only the first of several parsed calls, whole and streamed") {
  const std::string two = "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
                          "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>";
  kylin::Generation g;
  g.content = two;
  g.stop_reason = kylin::StopReason::eos;  // the answer ended; one cut by max_tokens is "length"
  const ResponseHead head{"chatcmpl-x", 0, "m", ""};
  const auto calls_of = [](const kylin::json::Value& r) {
    return r.find("choices")->as_array().at(0).find("message")->find("tool_calls")->size();
  };
  CHECK(calls_of(chat_completion(head, g, true)) == 2);
  const kylin::json::Value one = chat_completion(head, g, true, {}, 1);
  REQUIRE(calls_of(one) == 1);
  CHECK(one.find("choices")->as_array().at(0).find("message")->find("tool_calls")->as_array().at(0).find("function")->find("name")->as_string() == "a");
  CHECK(one.find("choices")->as_array().at(0).find("finish_reason")->as_string() == "tool_calls");
  ToolCallHold hold;
  (void)hold.push(two);
  bool calls = false;
  CHECK(tool_call_chunks(head, hold, calls, 1).size() == 1);
  CHECK(calls);
  CHECK(tool_call_chunks(head, hold, calls).size() == 2);
}

}  // namespace request_params_test
