// OpenAI response builders: a Qwen3 tool call in the answer becomes message.tool_calls with
// finish_reason "tool_calls" (streamed: tool_calls deltas), malformed calls stay content, and
// usage and finish reasons follow OpenAI's rules.
#include <doctest/doctest.h>

#include "kylin/server/responses.hpp"

using namespace kylin::server;
using kylin::Generation;
using kylin::StopReason;
using kylin::json::Value;

namespace {

const ResponseHead head{"chatcmpl-test", 1700000000, "e2e", "fp_test"};

Generation answer(std::string content, StopReason r = StopReason::eos) {
  Generation g;
  g.content = std::move(content);
  g.stop_reason = r;
  g.stats.prompt_tokens = 10;
  g.stats.cached_tokens = 4;
  g.stats.generated_tokens = 3;
  return g;
}

const Value& message_of(const Value& r) { return *r.find("choices")->as_array().at(0).find("message"); }
std::string finish_of(const Value& r) { return r.find("choices")->as_array().at(0).find("finish_reason")->as_string(); }

}  // namespace

TEST_CASE("a tool call in a non-streamed answer becomes message.tool_calls, content null, finish_reason tool_calls") {
  const Value r = chat_completion(
      head, answer("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"), true);
  const Value& m = message_of(r);
  CHECK(m.find("content")->is_null());
  const Value& calls = *m.find("tool_calls");
  REQUIRE(calls.size() == 1);
  const Value& call = calls.as_array()[0];
  CHECK(call.find("id")->as_string().rfind("call-", 0) == 0);
  CHECK(call.find("type")->as_string() == "function");
  CHECK(call.find("function")->find("name")->as_string() == "get_weather");
  CHECK(call.find("function")->find("arguments")->as_string() == "{\"city\":\"Paris\"}");
  CHECK(finish_of(r) == "tool_calls");
}

TEST_CASE("without tools in the request, or with a malformed call, the text stays content") {
  const std::string text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
  const Value no_tools = chat_completion(head, answer(text), false);
  CHECK(message_of(no_tools).find("content")->as_string() == text);
  CHECK(message_of(no_tools).find("tool_calls") == nullptr);
  CHECK(finish_of(no_tools) == "stop");
  const std::string bad = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\n</tool_call>";
  const Value malformed = chat_completion(head, answer(bad), true);
  CHECK(message_of(malformed).find("content")->as_string() == bad);
  CHECK(finish_of(malformed) == "stop");
}

TEST_CASE("finish_reason: eos and stop strings are stop, the token limit and a full context are length") {
  CHECK(finish_of(chat_completion(head, answer("a", StopReason::eos), false)) == "stop");
  CHECK(finish_of(chat_completion(head, answer("a", StopReason::stop_string), false)) == "stop");
  CHECK(finish_of(chat_completion(head, answer("a", StopReason::max_tokens), false)) == "length");
  CHECK(finish_of(chat_completion(head, answer("a", StopReason::context_full), false)) == "length");
}

TEST_CASE("usage reports prompt, completion, total and cached tokens; reasoning goes to reasoning_content") {
  Generation g = answer("hi");
  g.reasoning = "thinking";
  const Value r = chat_completion(head, g, false);
  const Value& u = *r.find("usage");
  CHECK(u.find("prompt_tokens")->as_int() == 10);
  CHECK(u.find("completion_tokens")->as_int() == 3);
  CHECK(u.find("total_tokens")->as_int() == 13);
  CHECK(u.find("prompt_tokens_details")->find("cached_tokens")->as_int() == 4);
  CHECK(message_of(r).find("reasoning_content")->as_string() == "thinking");
  CHECK(r.find("object")->as_string() == "chat.completion");
}

TEST_CASE("a streamed tool call: content before the tag streams, then one tool_calls delta per call with its index") {
  ToolCallHold hold;
  std::string streamed;
  for (const char* piece : {"Checking.", " <tool", "_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n",
                            "<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": 1}}\n</tool_call>"})
    streamed += hold.push(piece);
  CHECK(streamed == "Checking. ");
  bool calls = false;
  const auto chunks = tool_call_chunks(head, hold, calls);
  CHECK(calls);
  REQUIRE(chunks.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(chunks[i].find("object")->as_string() == "chat.completion.chunk");
    const Value& delta = *chunks[i].find("choices")->as_array().at(0).find("delta");
    const Value& call = delta.find("tool_calls")->as_array().at(0);
    CHECK(call.find("index")->as_int() == static_cast<std::int64_t>(i));
    CHECK(call.find("function")->find("name")->as_string() == (i == 0 ? "a" : "b"));
  }
}

TEST_CASE("a streamed malformed tool call comes out as content at the end, with no tool_calls") {
  ToolCallHold hold;
  CHECK(hold.push("<tool_call>\nnot json\n</tool_call>") == "");
  bool calls = true;
  const auto chunks = tool_call_chunks(head, hold, calls);
  CHECK_FALSE(calls);
  REQUIRE(chunks.size() == 1);
  CHECK(chunks[0].find("choices")->as_array().at(0).find("delta")->find("content")->as_string() ==
        "<tool_call>\nnot json\n</tool_call>");
}

TEST_CASE("SSE framing: one data line per event, blank line after, and the [DONE] sentinel") {
  Value v = kylin::json::Object{};
  v.set("a", 1);
  CHECK(sse(v) == "data: {\"a\":1}\n\n");
  CHECK(sse_done == "data: [DONE]\n\n");
}

TEST_CASE("an answer cut by max_tokens is length even with parsed calls; the unfinished call is not content (issue 39)") {
  const std::string cut = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\":";
  for (const StopReason r : {StopReason::max_tokens, StopReason::context_full}) {
    const Value v = chat_completion(head, answer(cut, r), true);
    CHECK(finish_of(v) == "length");
    CHECK(message_of(v).find("content")->is_null());
    CHECK(message_of(v).find("tool_calls")->size() == 1);
  }
  const Value only_start = chat_completion(head, answer("Sure.\n<tool_call>\n{\"name\":", StopReason::max_tokens), true);
  CHECK(finish_of(only_start) == "length");
  CHECK(message_of(only_start).find("content")->as_string() == "Sure.");
  CHECK(message_of(only_start).find("tool_calls") == nullptr);
  // streamed: the held text is parsed the same way; the finish reason comes from finish_reason()
  ToolCallHold hold;
  CHECK(hold.push("Sure.\n") == "Sure.\n");
  CHECK(hold.push("<tool_call>\n{\"name\":").empty());
  bool calls = true;
  const auto chunks = tool_call_chunks(head, hold, calls);
  CHECK_FALSE(calls);
  CHECK(chunks.empty());
  CHECK(finish_reason(StopReason::max_tokens, true) == "length");
  CHECK(finish_reason(StopReason::eos, true) == "tool_calls");
}
