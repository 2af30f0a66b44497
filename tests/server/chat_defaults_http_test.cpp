// Server-wide chat defaults (--chat-template-kwargs, --reasoning) under each request's own, shown
// by /props; assistant prefill (Anthropic's final assistant message, vLLM's continue_final_message)
// against the Qwen3 template's own text; ignore_eos; response_format json_object with a schema;
// the Responses API's numbers as sent. End to end on the random-weight e2e checkpoint.
#include <string>
#include <vector>

#include "common/json_schema_check.hpp"
#include "kylin/server/prefill.hpp"
#include "server_process.hpp"

using namespace kylin::test;
using kylin::json::Value;

namespace chat_defaults_http_test {

ServerProcess& plain_server() {
  static ServerProcess s({"--ctx", "1024"});
  return s;
}

std::string dump_string(const std::string& s) { return kylin::json::dump(Value(s)); }

// The prompt /apply-template renders for `body` (messages and chat fields).
std::string rendered(const ServerProcess& s, const std::string& body) { return at(post_ok(s, "/apply-template", body), "prompt").as_string(); }

std::int64_t token_count(const ServerProcess& s, const std::string& text) {
  return static_cast<std::int64_t>(at(post_ok(s, "/tokenize", R"({"content": )" + dump_string(text) + "}"), "tokens").size());
}

const std::string hi = R"("messages": [{"role": "user", "content": "Hi"}])";
// The Qwen3 template's generation prompt without and with thinking (its tokenizer_config.json).
const std::string thinking_end = "<|im_start|>assistant\n";
const std::string no_thinking_end = "<|im_start|>assistant\n<think>\n\n</think>\n\n";

TEST_CASE("--chat-template-kwargs and --reasoning: the server's defaults where a request says nothing, the request's own where it does") {
  CHECK(rendered(plain_server(), "{" + hi + "}").ends_with(thinking_end));  // the template's default: thinking on
  ServerProcess off({"--ctx", "512", "--chat-template-kwargs", R"({"enable_thinking": false, "house_style": "terse"})"});
  CHECK(rendered(off, "{" + hi + "}").ends_with(no_thinking_end));
  CHECK(rendered(off, "{" + hi + R"(, "chat_template_kwargs": {"enable_thinking": true}})").ends_with(thinking_end));
  CHECK(rendered(off, "{" + hi + R"(, "reasoning_effort": "high"})").ends_with(thinking_end));
  const Value props = parse_json(off.client().Get("/props")->body);
  CHECK(at(props, "chat_template_kwargs") == parse_json(R"({"house_style": "terse", "enable_thinking": false})"));
  CHECK(at(props, "reasoning").as_string() == "off");
  // the prompt a chat request runs is the one shown: its usage counts the defaulted prompt
  const Value r = post_ok(off, "/v1/chat/completions", "{" + hi + R"(, "max_tokens": 1})");
  CHECK(at(at(r, "usage"), "prompt_tokens").as_int() == token_count(off, "<|im_start|>user\nHi<|im_end|>\n" + no_thinking_end));

  ServerProcess on({"--ctx", "512", "--reasoning", "on"});
  // Anthropic's own default is no thinking; the server's --reasoning on replaces it, `thinking` wins
  const std::string msg = R"({"model": "e2e-qwen3", "messages": [{"role": "user", "content": "Hi"}])";
  const std::int64_t defaulted = at(post_ok(on, "/v1/messages/count_tokens", msg + "}"), "input_tokens").as_int();
  const std::int64_t disabled = at(post_ok(on, "/v1/messages/count_tokens", msg + R"(, "thinking": {"type": "disabled"}})"), "input_tokens").as_int();
  CHECK(defaulted == token_count(on, "<|im_start|>user\nHi<|im_end|>\n" + thinking_end));
  CHECK(disabled == token_count(on, "<|im_start|>user\nHi<|im_end|>\n" + no_thinking_end));
  CHECK(rendered(on, "{" + hi + R"(, "reasoning_effort": "none"})").ends_with(no_thinking_end));
  CHECK(at(parse_json(on.client().Get("/props")->body), "reasoning").as_string() == "on");
  CHECK(at(parse_json(plain_server().client().Get("/props")->body), "reasoning").as_string() == "auto");
}

TEST_CASE("--reasoning and --chat-template-kwargs that contradict, or kwargs that are not an object, stop the server at startup") {
  CHECK_THROWS_WITH_AS(ServerProcess({"--reasoning", "on", "--chat-template-kwargs", R"({"enable_thinking": false})"}),
                       doctest::Contains("contradicts"), std::runtime_error);
  CHECK_THROWS_WITH_AS(ServerProcess({"--chat-template-kwargs", "[1]"}), doctest::Contains("--chat-template-kwargs"), std::runtime_error);
  CHECK_THROWS_WITH_AS(ServerProcess({"--chat-template-kwargs", R"({"messages": 1})"}), doctest::Contains("set by the renderer"),
                       std::runtime_error);
}

// transformers' continue_final_message on the Qwen3 template: the final assistant turn rendered
// (its empty think block, then the text) and cut after the text.
const std::string prefilled = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nWhill";
const std::string prefill_messages = R"("messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Whill"}])";

// The greedy raw continuation of `prompt`: what a continued message must answer.
std::string greedy_continuation(const std::string& prompt, int n) {
  const Value r = post_ok(plain_server(), "/v1/completions",
                          R"({"prompt": )" + dump_string(prompt) + R"(, "max_tokens": )" + std::to_string(n) + R"(, "temperature": 0})");
  return at(at(r, "choices").as_array().at(0), "text").as_string();
}

TEST_CASE("prefill: Anthropic's final assistant message is continued; count_tokens counts the continued prompt") {
  ServerProcess& s = plain_server();
  const std::string body = R"({"model": "e2e-qwen3", )" + prefill_messages;
  const std::int64_t counted = at(post_ok(s, "/v1/messages/count_tokens", body + "}"), "input_tokens").as_int();
  CHECK(counted == token_count(s, prefilled));
  CHECK(counted < token_count(s, prefilled + "<|im_end|>\n<|im_start|>assistant\n"));  // not a closed turn and a new one
  const Value m = post_ok(s, "/v1/messages", body + R"(, "max_tokens": 6, "temperature": 0})");
  CHECK(at(at(m, "usage"), "input_tokens").as_int() == counted);
  std::string text;
  for (const Value& block : at(m, "content").as_array())
    if (at(block, "type").as_string() == "text") text += at(block, "text").as_string();
  CHECK(text == greedy_continuation(prefilled, 6));
  // Anthropic refuses trailing whitespace in the prefill (the cut would drop it); an empty final
  // assistant message only asks for the assistant's turn
  const Value e = post_400(s, "/v1/messages", R"({"model": "e2e-qwen3", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Whill "}]})");
  CHECK(at(at(e, "error"), "message").as_string().find("trailing whitespace") != std::string::npos);
  const std::int64_t empty = at(post_ok(s, "/v1/messages/count_tokens", R"({"model": "e2e-qwen3", "messages": [{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": ""}]})"), "input_tokens").as_int();
  CHECK(empty == at(post_ok(s, "/v1/messages/count_tokens", R"({"model": "e2e-qwen3", "messages": [{"role": "user", "content": "Hi"}]})"),
                    "input_tokens").as_int());
}

TEST_CASE("prefill: chat completions with continue_final_message and add_generation_prompt false continue the final message") {
  ServerProcess& s = plain_server();
  const std::string flags = R"(, "continue_final_message": true, "add_generation_prompt": false)";
  CHECK(rendered(s, "{" + prefill_messages + flags + "}") == prefilled);
  const Value r = post_ok(s, "/v1/chat/completions", "{" + prefill_messages + flags + R"(, "max_tokens": 6, "temperature": 0})");
  CHECK(at(at(r, "usage"), "prompt_tokens").as_int() == token_count(s, prefilled));
  CHECK(at(at(at(r, "choices").as_array().at(0), "message"), "content").as_string() == greedy_continuation(prefilled, 6));
  // add_generation_prompt false alone closes the last turn and adds nothing
  CHECK(rendered(s, "{" + prefill_messages + R"(, "add_generation_prompt": false})") == prefilled + "<|im_end|>\n");
}

TEST_CASE("prefill: what cannot be continued is a 400 naming the field") {
  ServerProcess& s = plain_server();
  const auto param = [&](const std::string& body) {
    const Value e = post_400(s, "/v1/chat/completions", body);
    return at(at(e, "error"), "param").as_string();
  };
  CHECK(param("{" + prefill_messages + R"(, "continue_final_message": true})") == "continue_final_message");  // generation prompt too
  CHECK(param("{" + hi + R"(, "continue_final_message": true, "add_generation_prompt": false})") == "messages");  // no assistant last
  // the Qwen3 template moves text before </think> into the think block: the content is not rendered as sent
  const Value e = post_400(s, "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "plan</think>Whill"}], "continue_final_message": true, "add_generation_prompt": false})");
  CHECK(at(at(e, "error"), "code").as_string() == "cannot_continue");
  const Value calls = post_400(s, "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}],
      "continue_final_message": true, "add_generation_prompt": false})");
  CHECK(at(at(calls, "error"), "code").as_string() == "cannot_continue");
}

TEST_CASE("prefill cut: the text ends after the final content, stripped as Python strips it, the request's ranges cut with it") {
  kylin::RenderedPrompt p{"<a>x Whill <e>", {{3, 11}}};
  const Value messages = parse_json(R"([{"role": "assistant", "content": " \u00a0Whill \n"}])");
  const kylin::RenderedPrompt cut = kylin::server::cut_after_final_message(p, messages, "messages");
  CHECK(cut.text == "<a>x Whill");
  REQUIRE(cut.from_request.size() == 1);
  CHECK(cut.from_request[0].end == 10);
  CHECK_THROWS_AS(kylin::server::cut_after_final_message(p, parse_json(R"([{"role": "assistant", "content": "Will"}])"), "messages"),
                  kylin::server::ApiError);
}

// Both end-of-sequence ids of the e2e model (config.json's eos_token_id, <|im_end|>) pushed to the
// top: without ignore_eos the answer ends at once, with it they are never drawn.
const std::string eos_first = R"("logit_bias": {"151643": 100, "151645": 100}, "temperature": 0)";

TEST_CASE("ignore_eos: EOS and end-of-turn tokens are never drawn, so the answer runs to max_tokens; it needs max_tokens") {
  ServerProcess& s = plain_server();
  const Value stops = post_ok(s, "/v1/completions", R"({"prompt": "Once", "max_tokens": 5, )" + eos_first + "}");
  CHECK(at(at(stops, "usage"), "completion_tokens").as_int() == 0);
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    CAPTURE(path);
    const std::string prompt = std::string(path) == "/v1/completions" ? R"("prompt": "Once")" : hi;
    const Value r = post_ok(s, path, "{" + prompt + R"(, "max_tokens": 5, "ignore_eos": true, )" + eos_first + "}");
    CHECK(at(at(r, "usage"), "completion_tokens").as_int() == 5);
    CHECK(at(at(r, "choices").as_array().at(0), "finish_reason").as_string() == "length");
  }
  CHECK(at(at(post_400(s, "/v1/completions", R"({"prompt": "Once", "ignore_eos": true})"), "error"), "param").as_string() == "max_tokens");
  CHECK(at(at(post_400(s, "/v1/chat/completions", "{" + hi + R"(, "max_tokens": 5, "ignore_eos": true, "response_format": {"type": "json_object"}})"),
              "error"), "param").as_string() == "ignore_eos");
}

TEST_CASE("response_format json_object with a schema (llama.cpp's and vLLM's form) is that schema: the json_schema form's answer") {
  ServerProcess& s = plain_server();
  const std::string schema = R"({"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}, "n": {"type": "integer", "maximum": 99}},
                                 "required": ["answer", "n"], "additionalProperties": false})";
  const std::string head = "{" + hi + R"(, "chat_template_kwargs": {"enable_thinking": false}, "max_tokens": 200, "temperature": 1, "seed": )";
  for (int seed = 1; seed <= 2; ++seed) {
    CAPTURE(seed);
    const Value a = post_ok(s, "/v1/chat/completions", head + std::to_string(seed) + R"(, "response_format": {"type": "json_object", "schema": )" + schema + "}}");
    const Value b = post_ok(s, "/v1/chat/completions", head + std::to_string(seed) +
                                                           R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": )" + schema + "}}}");
    const std::string text = at(at(at(a, "choices").as_array().at(0), "message"), "content").as_string();
    CHECK(text == at(at(at(b, "choices").as_array().at(0), "message"), "content").as_string());
    const Value parsed = parse_json(text);
    CHECK(test_schema::check(parsed, parse_json(schema), parse_json(schema)).empty());
  }
  const Value e = post_400(s, "/v1/chat/completions", "{" + hi + R"(, "response_format": {"type": "json_object", "schema": 3}})");
  CHECK(at(at(e, "error"), "param").as_string() == "response_format.schema");
}

TEST_CASE("the Responses API echoes numbers as sent (0.8, not 0.800000011920929)") {
  auto c = plain_server().client();
  auto r = post_json(c, "/v1/responses", R"({"input": "Hi", "max_output_tokens": 1, "temperature": 0.8, "top_p": 0.123456789})");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  const Value v = parse_json(r->body);
  CHECK(at(v, "temperature").as_double() == 0.8);
  CHECK(at(v, "top_p").as_double() == 0.123456789);  // not even the float the sampler holds (0.12345679)
  CHECK(r->body.find("\"temperature\":0.8,") != std::string::npos);
}

}  // namespace chat_defaults_http_test
