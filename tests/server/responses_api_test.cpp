// The Responses API's answer without a server (server/responses_service.hpp): a generation that
// thinks, answers and calls a function becomes a reasoning item, a message and a function_call
// item, whole and as typed events numbered 0..n-1 in order; reasoning tokens are those inside
// <think>; item_reference inputs resolve through the store. Each case states its property.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "kylin/server/responses_service.hpp"

using namespace kylin::server;
using kylin::Channel;
using kylin::Generation;
using kylin::Piece;
using kylin::StopReason;
using kylin::json::Value;

namespace responses_api_test {

constexpr int think_open = 1000, think_close = 1001;

// A generation of 2 thinking tokens between <think> and </think>, an answer and a call.
Generation thought_and_called() {
  Generation g;
  g.reasoning = "hmm";
  g.content = "Sure.<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>";
  g.tokens = {think_open, 5, 6, think_close, 7, 8, 9};
  g.stop_reason = StopReason::eos;
  g.stats.prompt_tokens = 10;
  g.stats.cached_tokens = 4;
  g.stats.generated_tokens = 7;
  return g;
}

struct Fixture {
  std::shared_ptr<ResponsesRequest> request = std::make_shared<ResponsesRequest>(
      parse_responses_request(R"({"input": "x", "tools": [{"type": "function", "name": "f"}]})", {}, ResponsesEndpoint::create));
  ResponseStore store;

  responses::ResponseAnswer answer(bool stream) {
    responses::ResponseContext c{.head = {"resp_1", 1700000000, "m", "fp"},
                                 .tools = true,
                                 .think_open = think_open,
                                 .think_close = think_close};
    return responses::ResponseAnswer(stream, c, request, &store, Value(kylin::json::Array{}));
  }
};

std::vector<Value> events_of(const std::string& sse) {
  std::vector<Value> out;
  std::size_t pos = 0;
  while ((pos = sse.find("data: ", pos)) != std::string::npos) {
    const std::size_t end = sse.find("\n\n", pos);
    out.push_back(kylin::json::parse(sse.substr(pos + 6, end - pos - 6), "event"));
    pos = end;
  }
  return out;
}

std::vector<std::string> item_types(const Value& response) {
  std::vector<std::string> types;
  for (const Value& item : response.find("output")->as_array()) types.push_back(item.find("type")->as_string());
  return types;
}

TEST_CASE("a whole response: reasoning, message and function_call items; reasoning tokens counted between the think tags") {
  Fixture f;
  const Generation g = thought_and_called();
  auto a = f.answer(false);
  const Value r = kylin::json::parse(a.finish(std::span(&g, 1)), "response");
  CHECK(item_types(r) == std::vector<std::string>{"reasoning", "message", "function_call"});
  const Value& output = *r.find("output");
  CHECK(output.as_array()[0].find("content")->as_array().at(0).find("text")->as_string() == "hmm");
  CHECK(output.as_array()[1].find("content")->as_array().at(0).find("text")->as_string() == "Sure.");
  CHECK(kylin::json::parse(output.as_array()[2].find("arguments")->as_string(), "arguments").find("x")->as_int() == 1);
  CHECK(r.find("status")->as_string() == "completed");
  const Value& u = *r.find("usage");
  CHECK(u.find("output_tokens_details")->find("reasoning_tokens")->as_int() == 4);
  CHECK(u.find("input_tokens_details")->find("cached_tokens")->as_int() == 4);
  // stored: GET's object, and item_reference finds its items
  REQUIRE(f.store.get("resp_1").has_value());
  const std::string call_id = output.as_array()[2].find("id")->as_string();
  CHECK(f.store.find_item(call_id)->find("name")->as_string() == "f");
  const ResponsesRequest next = parse_responses_request(R"({"input": [{"type": "item_reference", "id": ")" + call_id + "\"}]}", {},
                                                        ResponsesEndpoint::create, [&](const std::string& id) { return f.store.find_item(id); });
  CHECK(next.input.as_array().at(0).find("tool_calls")->as_array().size() == 1);
}

TEST_CASE("a streamed response: typed events in the items' order, sequence numbers 0..n-1, the same items as whole") {
  Fixture f;
  const Generation g = thought_and_called();
  auto a = f.answer(true);
  std::string sse = a.start();
  sse += a.prefilled(0, 4);
  sse += a.piece(0, Piece{"hmm", Channel::reasoning});
  sse += a.piece(0, Piece{"Sure.", Channel::answer});
  sse += a.piece(0, Piece{"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>", Channel::answer});
  sse += a.end(0, g);
  sse += a.finish(std::span(&g, 1));
  const std::vector<Value> events = events_of(sse);
  std::vector<std::string> types;
  for (std::size_t i = 0; i < events.size(); ++i) {
    CHECK(events[i].find("sequence_number")->as_int() == static_cast<std::int64_t>(i));
    types.push_back(events[i].find("type")->as_string());
  }
  const std::vector<std::string> expected = {
      "response.created", "response.in_progress",
      "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
      "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
      "response.output_item.added", "response.content_part.added", "response.output_text.delta",
      "response.output_text.done", "response.content_part.done", "response.output_item.done",
      "response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done",
      "response.output_item.done", "response.completed"};
  CHECK(types == expected);
  CHECK(item_types(*events.back().find("response")) == std::vector<std::string>{"reasoning", "message", "function_call"});
}

}  // namespace responses_api_test

namespace responses_api_test {

StoredResponse stored_of(std::size_t text_bytes) {
  Value response = kylin::json::Object{};
  response.set("output", kylin::json::Array{});
  Value messages = kylin::json::Array{};
  messages.push_back(std::string(text_bytes, 'x'));
  return {response, messages};
}

TEST_CASE("the response store is bounded in count and in bytes, the oldest evicted first; one over the byte bound is not kept") {
  ResponseStore by_count({.max_responses = 2, .max_bytes = 1 << 20});
  for (const char* id : {"a", "b", "c"}) by_count.put(id, stored_of(10));
  CHECK_FALSE(by_count.get("a").has_value());
  CHECK(by_count.get("b").has_value());
  CHECK(by_count.get("c").has_value());
  ResponseStore by_bytes({.max_responses = 100, .max_bytes = 2500});
  for (const char* id : {"a", "b", "c"}) by_bytes.put(id, stored_of(1000));  // ~1020 bytes each: two fit
  CHECK_FALSE(by_bytes.get("a").has_value());
  CHECK(by_bytes.get("b").has_value());
  CHECK(by_bytes.get("c").has_value());
  CHECK(by_bytes.bytes() <= 2500);
  by_bytes.put("big", stored_of(3000));
  CHECK_FALSE(by_bytes.get("big").has_value());
  CHECK(by_bytes.size() == 2);
  CHECK(by_bytes.erase("b"));
  CHECK_FALSE(by_bytes.erase("b"));
  CHECK(by_bytes.size() == 1);
}

}  // namespace responses_api_test
