// XML tool calls through the three APIs. Without a model: a Qwen3.5-style answer fed in pieces to
// OpenAI's ChatAnswer, Anthropic's MessageStream and the Responses API's ResponseAnswer streams
// the call's name once <function=NAME> is complete and each argument once its </parameter> is,
// adding up to the whole answer's arguments, with no call text as content. With one: Qwen3's
// random-weight e2e-qwen3-chat under the Qwen3.5 chat template (the format follows the template)
// forced to call a tool writes valid XML calls, parsed to valid arguments, streamed alike.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/json_schema_check.hpp"
#include "kylin/server/anthropic_service.hpp"
#include "kylin/server/openai_service.hpp"
#include "kylin/server/responses_service.hpp"

namespace tool_calls_service_test {

using namespace kylin::server;
using kylin::Channel;
using kylin::Generation;
using kylin::Piece;
using kylin::StopReason;
using kylin::json::Value;

const char* weather_tools = R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}])";

// The answer, in the pieces a stream brings it in; what each piece completes is in its comment.
const std::vector<std::string> pieces = {
    "Checking.",                                            // content
    "\n\n<tool_call>\n<function=get_",                      // content "\n\n", then held
    "weather>\n<parameter=city>\nParis",                    // the name
    "\n</parameter>\n<parameter=days>\n3\n</param",        // city
    "eter>\n</function>\n</tool_call>"};                    // days, the end
const std::string whole_answer = [] {
  std::string s;
  for (const auto& p : pieces) s += p;
  return s;
}();

Generation generation(std::string content) {
  Generation g;
  g.content = std::move(content);
  g.stop_reason = StopReason::eos;
  g.stats.prompt_tokens = 5;
  g.stats.generated_tokens = 9;
  return g;
}

// The JSON payloads of SSE text (data lines), with their event names ("" for OpenAI's).
std::vector<std::pair<std::string, Value>> events_of(const std::string& sse) {
  std::vector<std::pair<std::string, Value>> out;
  std::string name;
  std::size_t pos = 0;
  while (pos < sse.size()) {
    const std::size_t end = sse.find('\n', pos);
    const std::string line = sse.substr(pos, end - pos);
    pos = end + 1;
    if (line.starts_with("event: ")) name = line.substr(7);
    if (line.starts_with("data: ") && line != "data: [DONE]") out.push_back({name, kylin::json::parse(line.substr(6))}), name.clear();
  }
  return out;
}

kylin::Engine& engine();  // below: e2e-qwen3-chat with the Qwen3.5 template

const ToolCallDialect xml_weather{ToolCallFormat::xml, kylin::json::parse(weather_tools)};

TEST_CASE("OpenAI chat stream: the name when <function=NAME> is complete, each argument at its </parameter>, as the whole answer's") {
  const ResponseHead head{"chatcmpl-1", 0, "m", ""};
  ChatAnswer a(true, head, ChatShape{.tools = true, .max_calls = any_number_of_calls, .dialect = xml_weather}, Recorders(1), false,
               engine().tokenizer());
  (void)a.start();
  std::vector<std::vector<Value>> deltas;  // per piece: the deltas of its chunks
  for (const std::string& p : pieces) {
    deltas.emplace_back();
    for (const auto& [name, chunk] : events_of(a.piece(0, Piece{p, Channel::answer})))
      deltas.back().push_back(*chunk.find("choices")->as_array().at(0).find("delta"));
  }
  const auto last = events_of(a.end(0, generation(whole_answer)));
  REQUIRE(last.size() == 1);
  CHECK(last[0].second.find("choices")->as_array().at(0).find("finish_reason")->as_string() == "tool_calls");
  auto only = [&](std::size_t piece) -> const Value& {
    REQUIRE(deltas[piece].size() == 1);
    return deltas[piece][0];
  };
  CHECK(only(0).find("content")->as_string() == "Checking.");
  CHECK(only(1).find("content")->as_string() == "\n\n");
  const Value& start = only(2).find("tool_calls")->as_array().at(0);
  CHECK(start.find("index")->as_int() == 0);
  CHECK(start.find("type")->as_string() == "function");
  CHECK(start.find("id")->as_string().starts_with("call"));
  CHECK(start.find("function")->find("name")->as_string() == "get_weather");
  CHECK(start.find("function")->find("arguments")->as_string() == "");
  auto arguments = [&](std::size_t piece) { return only(piece).find("tool_calls")->as_array().at(0).find("function")->find("arguments")->as_string(); };
  CHECK(arguments(3) == R"({"city": "Paris")");
  CHECK(arguments(4) == R"(, "days": 3})");
  CHECK(only(4).find("tool_calls")->as_array().at(0).find("id") == nullptr);
  // the whole answer: the same call
  const Value whole = chat_completion(head, generation(whole_answer), true, {}, any_number_of_calls, xml_weather);
  const Value& message = *whole.find("choices")->as_array().at(0).find("message");
  CHECK(message.find("content")->as_string() == "Checking.");
  CHECK(message.find("tool_calls")->as_array().at(0).find("function")->find("arguments")->as_string() == arguments(3) + arguments(4));
  // Hermes calls in an XML dialect are text: content, no call
  const Value hermes = chat_completion(head, generation("<tool_call>\n{\"name\": \"get_weather\"}\n</tool_call>"), true, {}, any_number_of_calls,
                                       xml_weather);
  CHECK(hermes.find("choices")->as_array().at(0).find("message")->find("tool_calls") == nullptr);
}

TEST_CASE("Anthropic stream: a tool_use block opens with the name, one input_json_delta per argument, the input of the whole answer") {
  const ResponseHead head{"msg_1", 0, "m", ""};
  anthropic::MessageStream s(head, true, 5, any_number_of_calls, 0, xml_weather);
  std::vector<std::vector<std::pair<std::string, Value>>> per_piece;
  for (const std::string& p : pieces) {
    s.push(Piece{p, Channel::answer});
    per_piece.push_back(events_of(s.take()));
  }
  s.finish(generation(whole_answer), "", {});
  const auto tail = events_of(s.take());
  REQUIRE(per_piece[2].size() == 2);  // the text block's stop, tool_use's start (no input yet)
  CHECK(per_piece[2][0].first == "content_block_stop");
  CHECK(per_piece[2][1].second.find("content_block")->find("name")->as_string() == "get_weather");
  for (std::size_t piece : {3, 4}) {  // each argument's input_json_delta
    REQUIRE(!per_piece[piece].empty());
    CHECK(per_piece[piece][0].second.find("delta")->find("type")->as_string() == "input_json_delta");
  }
  std::string partial;
  for (const auto& events : per_piece)
    for (const auto& [name, e] : events)
      if (const Value* d = e.find("delta"); d && d->find("type") && d->find("type")->as_string() == "input_json_delta")
        partial += d->find("partial_json")->as_string();
  const Value whole = anthropic::message_response(head, generation(whole_answer), true, "", {}, any_number_of_calls, xml_weather);
  const auto& blocks = whole.find("content")->as_array();
  REQUIRE(blocks.size() == 2);
  CHECK(blocks[0].find("text")->as_string() == "Checking.");
  CHECK(kylin::json::dump(kylin::json::parse(partial)) == kylin::json::dump(*blocks[1].find("input")));
  std::vector<std::string> names;
  for (const auto& [name, e] : tail) names.push_back(name);
  CHECK(per_piece[4].back().first == "content_block_stop");  // the block ends with its </function>
  REQUIRE(names == std::vector<std::string>{"message_delta", "message_stop"});
  CHECK(tail[0].second.find("delta")->find("stop_reason")->as_string() == "tool_use");
}

TEST_CASE("Responses stream: function_call item added with the name, an arguments delta per argument, done with the whole arguments") {
  auto request = std::make_shared<ResponsesRequest>(parse_responses_request(
      R"({"input": "x", "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object",
          "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}]})", {}, ResponsesEndpoint::create));
  ResponseStore store;
  auto answer = [&](bool stream) {
    responses::ResponseContext c{.head = {"resp_1", 1700000000, "m", "fp"}, .tools = true,
                                 .dialect = {ToolCallFormat::xml, request->chat.chat.tools}};
    return responses::ResponseAnswer(stream, c, request, &store, Value(kylin::json::Array{}));
  };
  const Generation g = generation(whole_answer);
  auto a = answer(true);
  std::string sse = a.start();
  std::vector<std::size_t> added_at, delta_at;  // the pieces that brought a function_call's output_item.added, its deltas
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const std::string out = a.piece(0, Piece{pieces[i], Channel::answer});
    for (const auto& [name, e] : events_of(out)) {
      if (name == "response.output_item.added" && e.find("item")->find("type")->as_string() == "function_call") added_at.push_back(i);
      if (name == "response.function_call_arguments.delta") delta_at.push_back(i);
    }
    sse += out;
  }
  sse += a.end(0, g);
  sse += a.finish(std::span(&g, 1));
  std::string deltas, done;
  std::int64_t seq = 0;
  for (const auto& [name, e] : events_of(sse)) {
    CHECK(e.find("sequence_number")->as_int() == seq++);
    if (name == "response.function_call_arguments.delta") deltas += e.find("delta")->as_string();
    if (name == "response.function_call_arguments.done") done = e.find("arguments")->as_string();
  }
  CHECK(added_at == std::vector<std::size_t>{2});
  CHECK(delta_at == std::vector<std::size_t>{3, 4});
  CHECK(deltas == done);
  auto whole = answer(false);
  const Value r = kylin::json::parse(whole.finish(std::span(&g, 1)));
  const auto& output = r.find("output")->as_array();
  REQUIRE(output.size() == 2);
  CHECK(output[1].find("arguments")->as_string() == done);
  CHECK(kylin::json::parse(done).find("days")->as_int() == 3);
}

// ---- with a model: the Qwen3.5 template on a random-weight Qwen3 ----

// e2e-qwen3-chat's files beside the Qwen3.5 chat_template.jinja (which Engine::load prefers).
struct Qwen35Template {
  std::filesystem::path dir;
  Qwen35Template() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kylin-xml-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    dir = pattern;
    const std::filesystem::path data = KYLIN_TEST_DATA;
    for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
      std::filesystem::create_symlink(data / "models" / "e2e-qwen3-chat" / f, dir / f);
    std::filesystem::copy_file(data / "qwen35-tokenizer" / "chat_template.jinja", dir / "chat_template.jinja");
  }
  ~Qwen35Template() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

kylin::Engine& engine() {
  static Qwen35Template files;
  static auto e = kylin::Engine::load(files.dir, {.threads = 1, .max_pass_rows = 512, .context_length = 2048});
  return *e;
}

Service& service() {
  static Scheduler scheduler = [] {
    SchedulerOptions o;
    o.max_queued = 4;
    return Scheduler(engine(), o);
  }();
  static Service s(engine(), scheduler, "m");
  return s;
}

// Parameters the random model can finish: bounded integers, booleans, enums (a text value ends
// only at "\n</parameter>", which random weights hardly ever write).
const char* alarm_tools = R"([{"type": "function", "function": {"name": "set_alarm", "parameters": {"type": "object", "properties": {
    "hour": {"type": "integer", "minimum": 0, "maximum": 23}, "loud": {"type": "boolean"},
    "tone": {"type": "string", "enum": ["beep", "soft chime"]}, "snooze": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
    "days": {"type": "array", "items": {"enum": ["mon", "tue"]}, "maxItems": 2}}, "required": ["hour", "tone"]}}},
  {"type": "function", "function": {"name": "stop_alarm", "parameters": {"type": "object", "properties": {}}}}])";

std::string body(int seed, const std::string& extra) {
  return R"({"messages": [{"role": "user", "content": "Wake me up."}], "chat_template_kwargs": {"enable_thinking": false},
             "max_tokens": 300, "temperature": 1, "seed": )" +
         std::to_string(seed) + R"(, "tools": )" + alarm_tools + ", " + extra + "}";
}

std::string streamed_events(const Started& s) {
  REQUIRE(s.stream != nullptr);
  std::string all;
  for (std::string part; s.stream->pop(part, std::chrono::seconds(60));) all += part;
  return all;
}

TEST_CASE("forced calls under the Qwen3.5 template are XML calls of the offered tools with valid arguments, streamed alike") {
  CHECK(template_tool_format(engine()) == ToolCallFormat::xml);
  const Value tools = kylin::json::parse(alarm_tools);
  for (int seed = 1; seed <= 3; ++seed) {
    CAPTURE(seed);
    const std::string required = body(seed, R"("tool_choice": "required")");
    const Started whole = service().chat(required);
    REQUIRE(whole.reply.status == 200);
    if (std::getenv("KYLIN_SHOW_ANSWERS")) MESSAGE(whole.reply.body);
    const Value r = kylin::json::parse(whole.reply.body);
    const Value& choice = r.find("choices")->as_array().at(0);
    CHECK(choice.find("finish_reason")->as_string() == "tool_calls");
    const auto& calls = choice.find("message")->find("tool_calls")->as_array();
    REQUIRE(!calls.empty());
    std::string all_arguments;
    for (const Value& call : calls) {
      const std::string name = call.find("function")->find("name")->as_string();
      const Value args = kylin::json::parse(call.find("function")->find("arguments")->as_string());
      const Value& schema = *tools.as_array()[name == "set_alarm" ? 0 : 1].find("function")->find("parameters");
      CHECK(test_schema::check(args, schema, schema) == "");
      all_arguments += call.find("function")->find("arguments")->as_string();
    }
    // streamed: the same seed, the same calls, the name before the arguments
    std::string streamed_arguments;
    std::size_t names = 0;
    for (const auto& [event, chunk] : events_of(streamed_events(service().chat(required.substr(0, required.size() - 1) + R"(, "stream": true})"))))
      for (const Value& c : chunk.find("choices")->as_array())
        if (const Value* tc = c.find("delta")->find("tool_calls"))
          for (const Value& d : tc->as_array()) {
            if (const Value* n = d.find("function")->find("name")) names += n->is_string() ? 1 : 0;
            CHECK(names == static_cast<std::size_t>(d.find("index")->as_int()) + 1);
            streamed_arguments += d.find("function")->find("arguments")->as_string();
          }
    CHECK(names == calls.size());
    CHECK(streamed_arguments == all_arguments);
  }
  // a named tool, over Anthropic's API (no seed there: greedy, one call): a tool_use block of that tool, its input valid
  const Started m = service().messages(R"({"model": "m", "max_tokens": 300, "temperature": 0, "messages": [{"role": "user", "content": "x"}],
      "tool_choice": {"type": "tool", "name": "set_alarm", "disable_parallel_tool_use": true},
      "tools": [{"name": "set_alarm", "input_schema": )" +
                                       kylin::json::dump(*tools.as_array()[0].find("function")->find("parameters")) + "}]}");
  REQUIRE(m.reply.status == 200);
  const Value message = kylin::json::parse(m.reply.body);
  if (std::getenv("KYLIN_SHOW_ANSWERS")) MESSAGE(m.reply.body);
  CHECK(message.find("stop_reason")->as_string() == "tool_use");
  int uses = 0;
  for (const Value& b : message.find("content")->as_array())
    if (b.find("type")->as_string() == "tool_use") {
      ++uses;
      CHECK(b.find("name")->as_string() == "set_alarm");
      const Value& schema = *tools.as_array()[0].find("function")->find("parameters");
      CHECK(test_schema::check(*b.find("input"), schema, schema) == "");
    }
  CHECK(uses == 1);
}

TEST_CASE("the same requests under tool_choice auto make no call: the model is random, so the checks above can fail") {
  int calls = 0;
  for (int seed = 1; seed <= 3; ++seed) {
    const Value r = kylin::json::parse(service().chat(body(seed, R"("tool_choice": "auto")")).reply.body);
    calls += r.find("choices")->as_array().at(0).find("message")->find("tool_calls") != nullptr ? 1 : 0;
  }
  CHECK(calls == 0);
}

TEST_CASE("under the XML template, a parameter schema raw text cannot enforce is a 400 naming the tool's parameters") {
  const Started r = service().chat(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required", "tools": [{"type": "function",
      "function": {"name": "f", "parameters": {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]+$"}}}}}]})");
  CHECK(r.reply.status == 400);
  const Value e = kylin::json::parse(r.reply.body);
  CHECK(e.find("error")->find("param")->as_string() == "tools[0].function.parameters");
  CHECK(e.find("error")->find("message")->as_string().find("pattern") != std::string::npos);
}

}  // namespace tool_calls_service_test
