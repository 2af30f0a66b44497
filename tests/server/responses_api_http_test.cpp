// The OpenAI Responses API end to end (POST /v1/responses, GET/DELETE /v1/responses/{id},
// /v1/responses/input_tokens) on the random-weight e2e checkpoint: the response object, the typed
// SSE events and their sequence numbers, function calls forced by tool_choice and fed back,
// text.format, reasoning, store and previous_response_id (continued without resending, its KV
// prefix reused), the bounded store, and the 400s naming fields. Each case states its property.
#include <set>
#include <string>
#include <vector>

#include "server_process.hpp"

using namespace kylin::test;
using kylin::json::Value;

namespace responses_api_http_test {

ServerProcess& server() {
  static ServerProcess s({"--ctx", "1024", "--parallel", "1"});
  return s;
}

const std::string weather_tool =
    R"("tools": [{"type": "function", "name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "London"]}}, "required": ["city"],
                       "additionalProperties": false}}])";

Value create(const std::string& body) { return post_ok(server(), "/v1/responses", body); }

struct Event {
  std::string name;  // the SSE `event:` line
  Value data;
};

// A streamed response's events: each has an `event:` line equal to its data's type.
std::vector<Event> create_streamed(const std::string& body) {
  auto c = server().client();
  auto r = post_json(c, "/v1/responses", body);
  REQUIRE(r);
  INFO(r->body);
  REQUIRE(r->status == 200);
  std::vector<Event> out;
  std::size_t pos = 0;
  while (pos < r->body.size()) {
    std::size_t end = r->body.find("\n\n", pos);
    if (end == std::string::npos) end = r->body.size();
    const std::string block = r->body.substr(pos, end - pos);
    pos = end + 2;
    if (block.empty() || block.front() == ':') continue;  // an SSE comment: the keep-alive sent while a request waits
    REQUIRE(block.rfind("event: ", 0) == 0);
    const auto nl = block.find('\n');
    REQUIRE(block.compare(nl + 1, 6, "data: ") == 0);
    out.push_back({block.substr(7, nl - 7), parse_json(block.substr(nl + 7))});
    CHECK(at(out.back().data, "type").as_string() == out.back().name);
  }
  return out;
}

std::string output_text(const Value& response) {
  std::string text;
  for (const Value& item : at(response, "output").as_array())
    if (at(item, "type").as_string() == "message")
      for (const Value& part : at(item, "content").as_array()) text += at(part, "text").as_string();
  return text;
}

const Value* item_of_type(const Value& response, const std::string& type) {
  for (const Value& item : at(response, "output").as_array())
    if (at(item, "type").as_string() == type) return &item;
  return nullptr;
}

std::string error_param(const std::string& path, const std::string& body) {
  const Value e = post_400(server(), path, body);
  const Value& p = at(at(e, "error"), "param");
  return p.is_string() ? p.as_string() : "";
}

TEST_CASE("/v1/responses: the response object; max_output_tokens cuts it to incomplete; usage adds up") {
  const Value r = create(R"({"model": "e2e-qwen3", "input": "Hello there", "max_output_tokens": 6, "temperature": 0,
                             "reasoning": {"effort": "none"}, "metadata": {"k": "v"}})");
  CHECK(at(r, "id").as_string().rfind("resp_", 0) == 0);
  CHECK(at(r, "object").as_string() == "response");
  CHECK(at(r, "status").as_string() == "incomplete");
  CHECK(at(at(r, "incomplete_details"), "reason").as_string() == "max_output_tokens");
  CHECK(at(at(r, "metadata"), "k").as_string() == "v");
  const Value* message = item_of_type(r, "message");
  REQUIRE(message != nullptr);
  CHECK(at(*message, "role").as_string() == "assistant");
  CHECK(at(at(*message, "content").as_array().at(0), "type").as_string() == "output_text");
  const Value& u = at(r, "usage");
  CHECK(at(u, "output_tokens").as_int() == 6);
  CHECK(at(u, "total_tokens").as_int() == at(u, "input_tokens").as_int() + 6);
  CHECK(at(at(u, "input_tokens_details"), "cached_tokens").as_int() >= 0);
  CHECK(at(at(u, "output_tokens_details"), "reasoning_tokens").as_int() == 0);
  const Value counted = post_ok(server(), "/v1/responses/input_tokens",
                                R"({"model": "e2e-qwen3", "input": "Hello there", "reasoning": {"effort": "none"}})");
  CHECK(at(counted, "input_tokens").as_int() == at(u, "input_tokens").as_int());
}

// Qwen3's template closes an empty think block when thinking is off: effort none adds its tokens.
TEST_CASE("/v1/responses: reasoning.effort none or minimal turns Qwen3's thinking off, low to high leave it on") {
  const auto count = [](const std::string& effort) {
    return at(post_ok(server(), "/v1/responses/input_tokens", R"({"input": "Hi", "reasoning": {"effort": ")" + effort + R"("}})"),
              "input_tokens").as_int();
  };
  CHECK(count("none") == count("minimal"));
  CHECK(count("low") == count("high"));
  CHECK(count("none") > count("high"));
  CHECK(count("high") == at(post_ok(server(), "/v1/responses/input_tokens", R"({"input": "Hi"})"), "input_tokens").as_int());
}

TEST_CASE("/v1/responses stream: typed events in order, sequence numbers 0..n-1, deltas equal the whole answer") {
  const std::string body = R"({"input": "Tell me a story", "max_output_tokens": 12, "temperature": 0, "reasoning": {"effort": "none"})";
  const Value whole = create(body + "}");
  const std::vector<Event> events = create_streamed(body + R"(, "stream": true})");
  REQUIRE(events.size() >= 8);
  for (std::size_t i = 0; i < events.size(); ++i) CHECK(at(events[i].data, "sequence_number").as_int() == static_cast<std::int64_t>(i));
  std::vector<std::string> names;
  std::string deltas;
  for (const Event& e : events) {
    if (names.empty() || names.back() != e.name) names.push_back(e.name);
    if (e.name == "response.output_text.delta") deltas += at(e.data, "delta").as_string();
  }
  const std::vector<std::string> expected = {"response.created", "response.in_progress", "response.output_item.added",
                                             "response.content_part.added", "response.output_text.delta",
                                             "response.output_text.done", "response.content_part.done",
                                             "response.output_item.done", "response.incomplete"};
  CHECK(names == expected);
  CHECK(deltas == output_text(whole));
  const Value& last = at(events.back().data, "response");
  CHECK(output_text(last) == output_text(whole));
  CHECK(at(at(last, "usage"), "output_tokens").as_int() == 12);
}

TEST_CASE("/v1/responses: a forced function call has call_id, name and JSON arguments; its output fed back is answered") {
  const std::string forced = R"({"input": "Weather in Paris?", "temperature": 0, "max_output_tokens": 60, )" + weather_tool +
                             R"(, "tool_choice": {"type": "function", "name": "get_weather"}, "reasoning": {"effort": "none"})";
  const Value r = create(forced + "}");
  const Value* call = item_of_type(r, "function_call");
  REQUIRE(call != nullptr);
  CHECK(at(*call, "name").as_string() == "get_weather");
  CHECK(at(*call, "call_id").as_string().rfind("call_", 0) == 0);
  const Value args = parse_json(at(*call, "arguments").as_string());
  CHECK(at(args, "city").is_string());
  // streamed: the call's arguments as function_call_arguments events
  std::string streamed_args;
  bool done_seen = false;
  for (const Event& e : create_streamed(forced + R"(, "stream": true})")) {
    if (e.name == "response.function_call_arguments.delta") streamed_args += at(e.data, "delta").as_string();
    if (e.name == "response.function_call_arguments.done") done_seen = at(e.data, "arguments").as_string() == streamed_args;
  }
  CHECK(done_seen);
  CHECK(streamed_args == at(*call, "arguments").as_string());
  // the call and its output as input items: the model answers (a message), nothing is refused
  Value input = kylin::json::Array{};
  input.push_back(parse_json(R"({"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]})"));
  input.push_back(*call);
  Value output = kylin::json::Object{};
  output.set("type", "function_call_output");
  output.set("call_id", at(*call, "call_id"));
  output.set("output", "sunny");
  input.push_back(output);
  const Value fed = create(R"({"input": )" + kylin::json::dump(input) + R"(, "max_output_tokens": 4, "temperature": 0, )" +
                           weather_tool + R"(, "tool_choice": "none", "reasoning": {"effort": "none"}})");
  CHECK(item_of_type(fed, "message") != nullptr);
  // an item_reference to the stored call stands for the call itself
  Value by_reference = input;
  by_reference.as_array().at(1) = parse_json(R"({"type": "item_reference", "id": ")" + at(*call, "id").as_string() + "\"}");
  const auto count = [](const Value& in) {
    return at(post_ok(server(), "/v1/responses/input_tokens", R"({"input": )" + kylin::json::dump(in) + R"(, )" + weather_tool +
                                                                  R"(, "tool_choice": "none", "reasoning": {"effort": "none"}})"),
              "input_tokens").as_int();
  };
  CHECK(count(by_reference) == count(input));
  CHECK(count(by_reference) == at(at(fed, "usage"), "input_tokens").as_int());
  CHECK(error_param("/v1/responses", R"({"input": [{"type": "item_reference", "id": "fc_unknown"}]})") == "input[0].id");
  // the fed-back call was rendered: the prompt is longer than the question alone
  const Value alone = create(R"({"input": "Weather in Paris?", "max_output_tokens": 1, )" + weather_tool +
                             R"(, "tool_choice": "none", "reasoning": {"effort": "none"}})");
  CHECK(at(at(fed, "usage"), "input_tokens").as_int() > at(at(alone, "usage"), "input_tokens").as_int());
}

TEST_CASE("/v1/responses: text.format json_schema makes the answer valid JSON of the schema") {
  const Value r = create(R"({"input": "A person", "temperature": 0, "max_output_tokens": 80, "reasoning": {"effort": "none"},
      "text": {"format": {"type": "json_schema", "name": "person", "strict": true,
               "schema": {"type": "object", "properties": {"adult": {"type": "boolean"}}, "required": ["adult"],
                          "additionalProperties": false}}}})");
  CHECK(at(r, "status").as_string() == "completed");
  const Value v = parse_json(output_text(r));
  CHECK(at(v, "adult").is_bool());
  CHECK(at(at(at(r, "text"), "format"), "type").as_string() == "json_schema");
}

TEST_CASE("/v1/responses: previous_response_id continues a stored conversation as if resent, from its KV prefix") {
  const Value first = create(R"({"input": "My name is Ada.", "max_output_tokens": 5, "temperature": 0, "reasoning": {"effort": "none"}})");
  const std::string id = at(first, "id").as_string();
  const Value next = create(R"({"previous_response_id": ")" + id +
                            R"(", "input": "What is my name?", "max_output_tokens": 3, "temperature": 0, "reasoning": {"effort": "none"}})");
  CHECK(at(next, "previous_response_id").as_string() == id);
  const Value& u = at(next, "usage");
  // the slot still holds the first conversation: its prompt is reused, not recomputed
  CHECK(at(at(u, "input_tokens_details"), "cached_tokens").as_int() >= at(at(first, "usage"), "input_tokens").as_int() - 8);
  // the same conversation resent in full renders the same prompt
  Value input = kylin::json::Array{};
  input.push_back(parse_json(R"({"role": "user", "content": "My name is Ada."})"));
  Value assistant = kylin::json::Object{};
  assistant.set("role", "assistant");
  assistant.set("content", output_text(first));
  input.push_back(assistant);
  input.push_back(parse_json(R"({"role": "user", "content": "What is my name?"})"));
  const Value resent = post_ok(server(), "/v1/responses/input_tokens",
                               R"({"input": )" + kylin::json::dump(input) + R"(, "reasoning": {"effort": "none"}})");
  CHECK(at(resent, "input_tokens").as_int() == at(u, "input_tokens").as_int());
}

TEST_CASE("/v1/responses/{id}: GET returns the stored response, DELETE removes it; store false keeps nothing") {
  const Value r = create(R"({"input": "Hi", "max_output_tokens": 2, "reasoning": {"effort": "none"}})");
  const std::string id = at(r, "id").as_string();
  auto c = server().client();
  auto got = c.Get(("/v1/responses/" + id).c_str());
  REQUIRE(got);
  CHECK(got->status == 200);
  CHECK(parse_json(got->body) == r);
  auto deleted = c.Delete(("/v1/responses/" + id).c_str());
  REQUIRE(deleted);
  CHECK(deleted->status == 200);
  CHECK(at(parse_json(deleted->body), "deleted").as_bool());
  auto gone = c.Get(("/v1/responses/" + id).c_str());
  REQUIRE(gone);
  CHECK(gone->status == 404);
  CHECK(error_param("/v1/responses", R"({"previous_response_id": ")" + id + R"(", "input": "x"})") == "previous_response_id");
  const Value unstored = create(R"({"input": "Hi", "max_output_tokens": 1, "store": false})");
  auto none = c.Get(("/v1/responses/" + at(unstored, "id").as_string()).c_str());
  REQUIRE(none);
  CHECK(none->status == 404);
}

TEST_CASE("--response-store-count bounds the store: the oldest response is evicted first") {
  ServerProcess small({"--ctx", "512", "--response-store-count", "2"});
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i)
    ids.push_back(at(post_ok(small, "/v1/responses", R"({"input": "Hi", "max_output_tokens": 1})"), "id").as_string());
  auto c = small.client();
  std::vector<int> statuses;
  for (const auto& id : ids) statuses.push_back(c.Get(("/v1/responses/" + id).c_str())->status);
  CHECK(statuses == std::vector<int>{404, 200, 200});
}

TEST_CASE("/v1/responses: built-in tools, unknown fields and bad items are a 400 naming them") {
  CHECK(error_param("/v1/responses", R"({"input": "x", "tools": [{"type": "web_search"}]})") == "tools[0].type");
  CHECK(error_param("/v1/responses", R"({"input": "x", "frobnicate": 1})") == "frobnicate");
  CHECK(error_param("/v1/responses", R"({"input": [{"type": "image_generation_call"}]})") == "input[0].type");
  CHECK(error_param("/v1/responses", R"({"input": "x", "reasoning": {"effort": "extreme"}})") == "reasoning.effort");
  CHECK(error_param("/v1/responses", R"({"input": "x", "text": {"format": {"type": "xml"}}})").rfind("text.format", 0) == 0);
  CHECK(error_param("/v1/responses", R"({"input": "x", "max_output_tokens": 0})") == "max_output_tokens");
  CHECK(error_param("/v1/responses/input_tokens", R"({"input": "x", "temperature": 1})") == "temperature");
  auto c = server().client();
  auto r = post_json(c, "/v1/responses", R"({"model": "gpt-4o", "input": "x"})");
  REQUIRE(r);
  CHECK(r->status == 404);
}

}  // namespace responses_api_http_test
