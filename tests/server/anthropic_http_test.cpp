// kylin-server's /v1/messages end to end (the built binary, the random-weight e2e checkpoint):
// streamed and whole answers agree, thinking and stop sequences come back as Anthropic's blocks
// and stop reasons, errors have Anthropic's shape. Each case states the property it checks.
#include <algorithm>

#include "server_process.hpp"

using namespace kylin::test;
using kylin::json::Value;

namespace anthropic_http_test {

ServerProcess& plain_server() {
  static ServerProcess server({"--ctx", "2048"});
  return server;
}

// "<think>" typed by the user is the token, so the answer starts in the reasoning channel.
ServerProcess& special_server() {
  static ServerProcess server({"--ctx", "2048", "--special-tokens-in-content"});
  return server;
}

std::string messages_body(const std::string& extra, const std::string& user = "Hello there") {
  return R"({"model": "e2e-qwen3", "messages": [{"role": "user", "content": ")" + user + "\"}]" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

Value post_message(httplib::Client& c, const std::string& body, const std::string& path = "/v1/messages") {
  auto r = post_json(c, path, body);
  REQUIRE(r);
  INFO(r->body);
  REQUIRE(r->status == 200);
  return parse_json(r->body);
}

// A streamed message rebuilt from its events, checking their order as it goes.
struct RebuiltMessage {
  std::vector<std::string> block_types;
  std::string text, thinking;
  std::vector<std::string> text_deltas;
  std::string stop_reason;
  Value stop_sequence;
  std::int64_t input_tokens = -1, output_tokens = -1;
  std::int64_t cache_read = -1, prompt_tokens = -1;  // prompt_tokens: input + cache read + cache creation
};

RebuiltMessage post_streamed_message(httplib::Client& c, const std::string& body) {
  auto r = post_json(c, "/v1/messages", body);
  REQUIRE(r);
  INFO(r->body);
  REQUIRE(r->status == 200);
  CHECK(r->get_header_value("Content-Type").rfind("text/event-stream", 0) == 0);
  RebuiltMessage m;
  std::vector<std::string> names;
  std::size_t pos = 0;
  bool open = false;
  while ((pos = r->body.find("event: ", pos)) != std::string::npos) {
    const std::size_t nl = r->body.find('\n', pos), end = r->body.find("\n\n", nl);
    const std::string name = r->body.substr(pos + 7, nl - pos - 7);
    REQUIRE(r->body.compare(nl + 1, 6, "data: ") == 0);
    const Value e = parse_json(r->body.substr(nl + 7, end - nl - 7));
    pos = end;
    CHECK(at(e, "type").as_string() == name);
    names.push_back(name);
    if (name == "message_start") {
      const Value& u = at(at(e, "message"), "usage");
      m.input_tokens = at(u, "input_tokens").as_int();
      m.cache_read = at(u, "cache_read_input_tokens").as_int();
      m.prompt_tokens = m.input_tokens + m.cache_read + at(u, "cache_creation_input_tokens").as_int();
    }
    if (name == "content_block_start") {
      CHECK_FALSE(open);
      CHECK(at(e, "index").as_int() == static_cast<std::int64_t>(m.block_types.size()));
      m.block_types.push_back(at(at(e, "content_block"), "type").as_string());
      open = true;
    }
    if (name == "content_block_delta") {
      CHECK(open);
      const Value& d = at(e, "delta");
      if (at(d, "type").as_string() == "text_delta") m.text += at(d, "text").as_string(), m.text_deltas.push_back(at(d, "text").as_string());
      if (at(d, "type").as_string() == "thinking_delta") m.thinking += at(d, "thinking").as_string();
    }
    if (name == "content_block_stop") CHECK(std::exchange(open, false));
    if (name == "message_delta") {
      m.stop_reason = at(at(e, "delta"), "stop_reason").as_string();
      m.stop_sequence = at(at(e, "delta"), "stop_sequence");
      m.output_tokens = at(at(e, "usage"), "output_tokens").as_int();
    }
  }
  REQUIRE(names.size() >= 2);
  CHECK(names.front() == "message_start");
  CHECK(names.back() == "message_stop");
  CHECK(names[names.size() - 2] == "message_delta");
  return m;
}

std::string text_of_message(const Value& m) {
  std::string text;
  for (const auto& b : at(m, "content").as_array())
    if (at(b, "type").as_string() == "text") text += at(b, "text").as_string();
  return text;
}

std::string trimmed_newlines(const std::string& s) {
  const auto first = s.find_first_not_of('\n');
  return first == std::string::npos ? "" : s.substr(first, s.find_last_not_of('\n') - first + 1);
}

// The cases stay in the namespace too, so a unity build of tests/server sees none of these names.

// Anthropic's input_tokens are the prompt tokens computed for this request; with the two cache
// counts they add up to count_tokens, and the second request on the same prompt reads its prefix.
TEST_CASE("/v1/messages: the streamed greedy answer equals the whole one; usage adds up to count_tokens; a repeat reads the cache") {
  auto c = plain_server().client();
  const Value m = post_message(c, messages_body(R"("max_tokens": 10, "temperature": 0)"));
  CHECK(at(m, "id").as_string().rfind("msg_", 0) == 0);
  CHECK(at(m, "type").as_string() == "message");
  CHECK(at(m, "stop_reason").as_string() == "max_tokens");
  CHECK(at(at(m, "usage"), "output_tokens").as_int() == 10);
  const RebuiltMessage s = post_streamed_message(c, messages_body(R"("max_tokens": 10, "temperature": 0, "stream": true)"));
  CHECK(s.block_types == std::vector<std::string>{"text"});
  CHECK(s.text == text_of_message(m));
  CHECK(s.stop_reason == "max_tokens");
  CHECK(s.output_tokens == 10);
  const Value& u = at(m, "usage");
  const std::int64_t whole_prompt =
      at(u, "input_tokens").as_int() + at(u, "cache_read_input_tokens").as_int() + at(u, "cache_creation_input_tokens").as_int();
  const Value counted = post_message(c, messages_body(""), "/v1/messages/count_tokens");
  CHECK(at(counted, "input_tokens").as_int() == whole_prompt);
  CHECK(s.prompt_tokens == whole_prompt);
  CHECK(s.cache_read > 0);  // the streamed request came second, on the same prompt
  CHECK(s.input_tokens == whole_prompt - s.cache_read);
}

TEST_CASE("/v1/messages: a stop sequence ends the answer before it, with stop_reason stop_sequence naming it") {
  auto c = plain_server().client();
  const RebuiltMessage full = post_streamed_message(c, messages_body(R"("max_tokens": 12, "temperature": 0, "stream": true)"));
  std::vector<std::string> pieces;
  std::copy_if(full.text_deltas.begin(), full.text_deltas.end(), std::back_inserter(pieces), [](const std::string& p) {
    return p.find_first_not_of(' ') != std::string::npos && p.find('"') == std::string::npos && p.find('\\') == std::string::npos;
  });
  REQUIRE(pieces.size() >= 6);
  const std::string stop = pieces[5];  // a whole token's text, so valid UTF-8
  const Value m = post_message(c, messages_body(R"("max_tokens": 12, "temperature": 0, "stop_sequences": [")" + stop + "\"]"));
  CHECK(at(m, "stop_reason").as_string() == "stop_sequence");
  CHECK(at(m, "stop_sequence").as_string() == stop);
  CHECK(text_of_message(m) == full.text.substr(0, full.text.find(stop)));
}

TEST_CASE("/v1/messages: with thinking enabled, reasoning comes back as a thinking block, streamed as thinking_delta") {
  auto c = special_server().client();
  const std::string thinking = R"("max_tokens": 6, "temperature": 0, "thinking": {"type": "enabled", "budget_tokens": 4})";
  const Value m = post_message(c, messages_body(thinking, "<think>"));
  const Value& first = at(m, "content").as_array().at(0);
  REQUIRE(at(first, "type").as_string() == "thinking");
  CHECK_FALSE(at(first, "thinking").as_string().empty());
  CHECK(at(first, "signature").as_string().empty());
  const RebuiltMessage s = post_streamed_message(c, messages_body(thinking + R"(, "stream": true)", "<think>"));
  REQUIRE_FALSE(s.block_types.empty());
  CHECK(s.block_types[0] == "thinking");
  CHECK(trimmed_newlines(s.thinking) == at(first, "thinking").as_string());
}

TEST_CASE("/v1/messages errors have Anthropic's shape and status: unknown field, a tool_choice naming no tool, unknown model") {
  auto c = plain_server().client();
  auto error_of = [&c](const std::string& path, const std::string& body, int want_status) {
    auto r = post_json(c, path, body);
    REQUIRE(r);
    INFO(r->body);
    CHECK(r->status == want_status);
    const Value e = parse_json(r->body);
    CHECK(at(e, "type").as_string() == "error");
    return at(e, "error");
  };
  Value e = error_of("/v1/messages", messages_body(R"("max_tokens": 4, "top_logprobs": 2)"), 400);
  CHECK(at(e, "type").as_string() == "invalid_request_error");
  CHECK(at(e, "message").as_string().find("top_logprobs") != std::string::npos);
  e = error_of("/v1/messages", messages_body(R"("max_tokens": 4, "tools": [{"name": "f", "input_schema": {}}], "tool_choice": {"type": "tool", "name": "g"})"), 400);
  CHECK(at(e, "message").as_string().find("tool_choice") != std::string::npos);
  e = error_of("/v1/messages", R"({"model": "claude-x", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})", 404);
  CHECK(at(e, "type").as_string() == "not_found_error");
  e = error_of("/v1/messages", messages_body(""), 400);
  CHECK(at(e, "message").as_string().find("max_tokens") != std::string::npos);
  e = error_of("/v1/messages/count_tokens", "{not json", 400);
  CHECK(at(e, "type").as_string() == "invalid_request_error");
}

TEST_CASE("with --api-key, Anthropic clients' x-api-key header is accepted and a wrong one is 401") {
  ServerProcess server({"--ctx", "512", "--api-key", "s3cret"});
  auto c = server.client();
  const std::string body = messages_body(R"("max_tokens": 1)");
  auto ok = post_json(c, "/v1/messages", body, {{"x-api-key", "s3cret"}});
  REQUIRE(ok);
  CHECK(ok->status == 200);
  auto wrong = post_json(c, "/v1/messages", body, {{"x-api-key", "nope"}});
  REQUIRE(wrong);
  CHECK(wrong->status == 401);
}

}  // namespace anthropic_http_test
