// A chat template's own errors and OpenAI-style tool-call arguments, end to end, on a model
// directory whose chat_template.jinja is the official Qwen3.5 template
// (tests/data/models/e2e-qwen3-qwen35-template: the e2e Qwen3 checkpoint and tokenizer).
#include <string>

#include "server_process.hpp"

using namespace kylin::test;
using kylin::json::Value;

namespace chat_template_http_test {

ServerProcess& server() {
  static ServerProcess s({"--ctx", "1024"}, {}, ServedModel{"e2e-qwen3-qwen35-template", "qwen35-template"});
  return s;
}

const std::string tool_history_with(const std::string& arguments) {
  return R"({"messages": [{"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": )" + arguments + R"(}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"}]})";
}

}  // namespace chat_template_http_test

TEST_CASE("raise_exception in the chat template is a 400 naming messages, with the template's message") {
  using namespace chat_template_http_test;
  for (const char* path : {"/v1/chat/completions", "/apply-template"}) {
    CAPTURE(path);
    const Value e = post_400(server(), path, R"({"messages": [{"role": "system", "content": "Only a system prompt."}], "max_tokens": 1})");
    CHECK(at(at(e, "error"), "param").as_string() == "messages");
    CHECK(at(at(e, "error"), "message").as_string().find("No user query found in messages.") != std::string::npos);
  }
}

TEST_CASE("tool-call arguments sent as a JSON string reach the Qwen3.5 template as the mapping it iterates") {
  using namespace chat_template_http_test;
  const Value p = post_ok(server(), "/apply-template", tool_history_with(R"("{\"city\": \"Paris\", \"days\": 2}")"));
  CHECK(at(p, "prompt").as_string().find("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                                         "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>") != std::string::npos);
  // the same history with the arguments as an object renders the same prompt
  CHECK(at(post_ok(server(), "/apply-template", tool_history_with(R"({"city": "Paris", "days": 2})")), "prompt").as_string() ==
        at(p, "prompt").as_string());
  // a string that is not a JSON object is left as sent; this template needs a mapping and says so
  const Value e = post_400(server(), "/v1/chat/completions", tool_history_with(R"("city=Paris")"));
  CHECK(at(at(e, "error"), "param").as_string() == "messages");
  CHECK(at(at(e, "error"), "message").as_string().find("Can only get item pairs from a mapping.") != std::string::npos);
}
