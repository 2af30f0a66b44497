// Anthropic Messages API without a server: request bodies map onto the chat request the Qwen3
// template renders (or are refused naming the field), and answers (whole or as SSE events) have
// Anthropic's shapes, stop reasons and tool_use blocks.
#include <doctest/doctest.h>

#include "kylin/server/anthropic_stream.hpp"

using namespace kylin::server;
using kylin::Generation;
using kylin::Piece;
using kylin::StopReason;
using kylin::json::Value;

namespace anthropic_test {

const ResponseHead msg_head{"msg_test", 0, "e2e", ""};

MessagesRequest parse(const std::string& body, MessagesEndpoint e = MessagesEndpoint::create) {
  return parse_messages_request(body, kylin::SamplingParams{}, e);
}

// The param an invalid body is refused with ("" when it is accepted).
std::string refused_param(const std::string& body, MessagesEndpoint e = MessagesEndpoint::create) {
  try {
    (void)parse(body, e);
  } catch (const ApiError& err) {
    CHECK(err.status() == status::bad_request);
    return err.param();
  }
  return "";
}

std::string with(const std::string& extra) {
  return R"({"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}])" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

Generation generation(std::string content, StopReason r = StopReason::eos) {
  Generation g;
  g.content = std::move(content);
  g.stop_reason = r;
  g.stats.prompt_tokens = 7;
  g.stats.generated_tokens = 5;
  return g;
}

// Splits "event: X\ndata: {...}\n\n" events into (name, payload) pairs.
std::vector<std::pair<std::string, Value>> events_of(const std::string& sse) {
  std::vector<std::pair<std::string, Value>> out;
  std::size_t pos = 0;
  while ((pos = sse.find("event: ", pos)) != std::string::npos) {
    const std::size_t nl = sse.find('\n', pos);
    const std::size_t end = sse.find("\n\n", nl);
    REQUIRE(sse.compare(nl + 1, 6, "data: ") == 0);
    out.emplace_back(sse.substr(pos + 7, nl - pos - 7), kylin::json::parse(sse.substr(nl + 7, end - nl - 7)));
    pos = end;
  }
  return out;
}

// The cases stay in the namespace too, so a unity build of tests/server sees none of these names.

TEST_CASE("system, text blocks, thinking, tool_use and tool_result map onto the OpenAI messages the template renders") {
  const MessagesRequest r = parse(R"({"model": "m", "max_tokens": 8,
    "system": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}],
    "tools": [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}}],
    "messages": [
      {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
      {"role": "assistant", "content": [{"type": "thinking", "thinking": "Use the tool.", "signature": ""},
                                         {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                                    {"type": "text", "text": "Thanks"}]}]})");
  const auto& m = r.chat.messages.as_array();
  REQUIRE(m.size() == 5);
  CHECK(m[0].find("role")->as_string() == "system");
  CHECK(m[0].find("content")->as_string() == "Be brief.");
  CHECK(m[1].find("content")->as_string() == "Weather in Paris?");
  CHECK(m[2].find("reasoning_content")->as_string() == "Use the tool.");
  const Value& call = m[2].find("tool_calls")->as_array().at(0);
  CHECK(call.find("id")->as_string() == "toolu_1");
  CHECK(call.find("function")->find("name")->as_string() == "get_weather");
  CHECK(call.find("function")->find("arguments")->find("city")->as_string() == "Paris");
  CHECK(m[3].find("role")->as_string() == "tool");
  CHECK(m[3].find("tool_call_id")->as_string() == "toolu_1");
  CHECK(m[3].find("content")->as_string() == "sunny");
  CHECK(m[4].find("role")->as_string() == "user");
  REQUIRE(r.tools_in_prompt);
  const Value& fn = *r.chat.chat.tools.as_array().at(0).find("function");
  CHECK(fn.find("name")->as_string() == "get_weather");
  CHECK(fn.find("parameters")->find("type")->as_string() == "object");
  CHECK(r.chat.max_tokens == 8);
}

TEST_CASE("thinking maps to enable_thinking (off unless enabled, as Anthropic); tool_choice none keeps tools out") {
  CHECK_FALSE(parse(with("")).chat.chat.enable_thinking);
  CHECK(parse(R"({"model": "m", "max_tokens": 2048, "messages": [{"role": "user", "content": "x"}],
                  "thinking": {"type": "enabled", "budget_tokens": 1024}})").chat.chat.enable_thinking);
  CHECK_FALSE(parse(with(R"("thinking": {"type": "disabled"})")).chat.chat.enable_thinking);
  const MessagesRequest none = parse(with(R"("tools": [{"name": "f", "input_schema": {}}], "tool_choice": {"type": "none"})"));
  CHECK_FALSE(none.tools_in_prompt);
  CHECK(none.chat.chat.tools.is_null());
  CHECK(parse(with(R"("stop_sequences": ["END", "STOP"], "top_k": 5, "stream": true)")).chat.stop.size() == 2);
}

TEST_CASE("tool_choice any and tool force a call (tool: that one); disable_parallel_tool_use allows one call") {
  const std::string tools = R"("tools": [{"name": "f", "input_schema": {}}, {"name": "g", "input_schema": {}}])";
  const MessagesRequest any = parse(with(tools + R"(, "tool_choice": {"type": "any"})"));
  CHECK(any.tools_in_prompt);
  CHECK(any.chat.tool_choice.mode == ToolChoiceMode::required);
  CHECK(any.chat.parallel_tool_calls);
  const MessagesRequest one = parse(with(tools + R"(, "tool_choice": {"type": "tool", "name": "g", "disable_parallel_tool_use": true})"));
  CHECK(one.chat.tool_choice.mode == ToolChoiceMode::named);
  CHECK(one.chat.tool_choice.name == "g");
  CHECK_FALSE(one.chat.parallel_tool_calls);
  CHECK_FALSE(parse(with(tools + R"(, "tool_choice": {"type": "auto", "disable_parallel_tool_use": true})")).chat.parallel_tool_calls);
}

TEST_CASE("bad or unsupported fields are refused with a 400 naming the field, never ignored") {
  CHECK(refused_param(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}]})") == "max_tokens");
  CHECK(refused_param(with(R"("service_tier": "auto")")) == "service_tier");
  CHECK(refused_param(with(R"("tool_choice": {"type": "any"})")) == "tool_choice");  // no tools to call
  CHECK(refused_param(with(R"("tools": [{"name": "f", "input_schema": {}}], "tool_choice": {"type": "tool", "name": "g"})")) ==
        "tool_choice");
  CHECK(refused_param(with(R"("tools": [{"name": "f", "input_schema": {}}], "tool_choice": {"type": "tool"})")) == "tool_choice.name");
  CHECK(refused_param(with(R"("tool_choice": {"type": "maybe"})")) == "tool_choice.type");
  CHECK(refused_param(with(R"("thinking": {"type": "enabled", "budget_tokens": 1024})")) == "thinking.budget_tokens");
  CHECK(refused_param(with(R"("tools": [{"type": "web_search_20250305", "name": "web_search"}])")) == "tools[0].type");
  CHECK(refused_param(R"({"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]})") ==
        "messages[0].content[0].source.type");
  CHECK(refused_param(R"({"model": "m", "max_tokens": 4, "messages": [{"role": "system", "content": "x"}]})") == "messages[0].role");
  CHECK(refused_param(with(R"("temperature": "hot")")) == "temperature");
  CHECK(refused_param(with(R"("metadata": {"user_id": "u"})")).empty());  // accepted, changes nothing
  // count_tokens takes no max_tokens and refuses it
  CHECK(refused_param(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}]})", MessagesEndpoint::count_tokens).empty());
  CHECK(refused_param(with(""), MessagesEndpoint::count_tokens) == "max_tokens");
}

TEST_CASE("a non-streamed answer is a message: thinking, text and tool_use blocks, stop_reason and usage") {
  Generation g = generation("Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>");
  g.reasoning = "hmm";
  const Value m = anthropic::message_response(msg_head, g, true, "", {});
  CHECK(m.find("type")->as_string() == "message");
  CHECK(m.find("role")->as_string() == "assistant");
  const auto& c = m.find("content")->as_array();
  REQUIRE(c.size() == 3);
  CHECK(c[0].find("type")->as_string() == "thinking");
  CHECK(c[0].find("thinking")->as_string() == "hmm");
  CHECK(c[1].find("text")->as_string() == "Let me check.");
  CHECK(c[2].find("type")->as_string() == "tool_use");
  CHECK(c[2].find("id")->as_string().rfind("toolu_", 0) == 0);
  CHECK(c[2].find("input")->find("city")->as_string() == "Paris");
  CHECK(m.find("stop_reason")->as_string() == "tool_use");
  CHECK(m.find("usage")->find("input_tokens")->as_int() == 7);
  CHECK(m.find("usage")->find("output_tokens")->as_int() == 5);
  // without tools in the prompt the same text is text, and the stop reason is end_turn
  const Value plain = anthropic::message_response(msg_head, generation(g.content), false, "", {});
  CHECK(plain.find("content")->as_array().at(0).find("text")->as_string() == g.content);
  CHECK(plain.find("stop_reason")->as_string() == "end_turn");
}

TEST_CASE("stop reasons: max_tokens, and stop_sequence naming the earliest matching sequence") {
  CHECK(anthropic::message_response(msg_head, generation("a", StopReason::max_tokens), false, "", {}).find("stop_reason")->as_string() ==
        "max_tokens");
  const Value m = anthropic::message_response(msg_head, generation("ab", StopReason::stop_string), false, "abXYcdEND", {"END", "XY"});
  CHECK(m.find("stop_reason")->as_string() == "stop_sequence");
  CHECK(m.find("stop_sequence")->as_string() == "XY");
  // an empty answer still has one (empty) text block
  const Value empty = anthropic::message_response(msg_head, generation(""), false, "", {});
  CHECK(empty.find("content")->size() == 1);
}

TEST_CASE("a tool_use answer cut by max_tokens stops with max_tokens; the unfinished call is neither text nor tool_use (issue 39)") {
  const std::string cut = "Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\":";
  const Value m = anthropic::message_response(msg_head, generation(cut, StopReason::max_tokens), true, "", {});
  CHECK(m.find("stop_reason")->as_string() == "max_tokens");
  const auto& c = m.find("content")->as_array();
  REQUIRE(c.size() == 2);
  CHECK(c[0].find("text")->as_string() == "Sure.");
  CHECK(c[1].find("type")->as_string() == "tool_use");
  anthropic::MessageStream s(msg_head, true, 7);
  s.push({.text = cut, .channel = kylin::Channel::answer});
  s.finish(generation(cut, StopReason::max_tokens), "", {});
  const std::string events = s.take();
  CHECK(events.find("{\\\"name\\\":") == std::string::npos);
  CHECK(events.find("<tool_call>") == std::string::npos);
  CHECK(events.find("\"stop_reason\":\"max_tokens\"") != std::string::npos);
}

TEST_CASE("streamed events: message_start, blocks in order with their deltas, tool_use as input_json_delta, message_delta, message_stop") {
  anthropic::MessageStream s(msg_head, true, 7);
  std::string sse = s.take();
  for (const char* t : {"thin", "king"}) s.push(Piece{t, kylin::Channel::reasoning});
  for (const char* t : {"Hi ", "<tool_", "call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>"})
    s.push(Piece{t, kylin::Channel::answer});
  s.finish(generation("", StopReason::eos), "", {});
  sse += s.take();
  const auto ev = events_of(sse);
  std::vector<std::string> names;
  for (const auto& [name, payload] : ev) {
    names.push_back(name);
    CHECK(payload.find("type")->as_string() == name);  // Anthropic repeats the event name as "type"
  }
  const std::vector<std::string> want = {"message_start", "content_block_start", "content_block_delta", "content_block_delta",
                                         "content_block_stop", "content_block_start", "content_block_delta", "content_block_stop",
                                         "content_block_start", "content_block_delta", "content_block_stop", "message_delta",
                                         "message_stop"};
  CHECK(names == want);
  CHECK(ev[0].second.find("message")->find("usage")->find("input_tokens")->as_int() == 7);
  CHECK(ev[1].second.find("content_block")->find("type")->as_string() == "thinking");
  CHECK(ev[3].second.find("delta")->find("thinking")->as_string() == "king");
  CHECK(ev[6].second.find("delta")->find("text")->as_string() == "Hi ");
  CHECK(ev[8].second.find("index")->as_int() == 2);
  CHECK(ev[8].second.find("content_block")->find("name")->as_string() == "f");
  CHECK(ev[9].second.find("delta")->find("type")->as_string() == "input_json_delta");
  CHECK(kylin::json::parse(ev[9].second.find("delta")->find("partial_json")->as_string()).find("x")->as_int() == 1);
  CHECK(ev[11].second.find("delta")->find("stop_reason")->as_string() == "tool_use");
  CHECK(ev[11].second.find("usage")->find("output_tokens")->as_int() == 5);
}

TEST_CASE("Anthropic error bodies: type error, the error type for each status, the parameter named in the message") {
  const Value e = kylin::json::parse(anthropic::error_body(invalid("tool_choice", "not supported")));
  CHECK(e.find("type")->as_string() == "error");
  CHECK(e.find("error")->find("type")->as_string() == "invalid_request_error");
  CHECK(e.find("error")->find("message")->as_string() == "tool_choice: not supported");
  CHECK(anthropic::error_type(404) == "not_found_error");
  CHECK(anthropic::error_type(503) == "overloaded_error");
  CHECK(anthropic::error_type(500) == "api_error");
  const Value from = anthropic::error_from_openai(503, error_body(503, "queue full"));
  CHECK(from.find("error")->find("message")->as_string() == "queue full");
}

}  // namespace anthropic_test
