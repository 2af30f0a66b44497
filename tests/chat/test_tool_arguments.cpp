// Tool-call arguments sent as a JSON string (OpenAI clients) are decoded to the mapping that
// Hugging Face templates expect; templates written for strings get them as sent.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "kylin/chat/tool_arguments.hpp"

#include "common/read_text.hpp"

namespace tool_arguments {

using kylin::json::parse;

using kylin::test::read_text;

kylin::json::Value assistant_call(const std::string& arguments_json) {
  return parse(R"([{"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "call12345", "type": "function",
        "function": {"name": "get_weather", "arguments": )" + arguments_json + R"(}}]}])",
               "messages");
}

const kylin::json::Value& arguments_of(const kylin::json::Value& messages) {
  return *messages.as_array()[1].find("tool_calls")->as_array()[0].find("function")->find("arguments");
}

// Every tool call's arguments object replaced by its JSON text, as an OpenAI client sends it.
kylin::json::Value as_client_strings(kylin::json::Value messages, int& calls) {
  for (auto& m : messages.as_array()) {
    const auto* tc = m.find("tool_calls");
    if (tc == nullptr) continue;
    kylin::json::Value list = *tc;
    for (auto& call : list.as_array()) {
      kylin::json::Value fn = *call.find("function");
      if (!fn.find("arguments")->is_object()) continue;
      fn.set("arguments", kylin::json::dump(*fn.find("arguments")));
      call.set("function", fn);
      ++calls;
    }
    m.set("tool_calls", list);
  }
  return messages;
}

}  // namespace tool_arguments

TEST_CASE("decode_tool_arguments decodes a JSON-object string, makes \"\" {}, and leaves anything else as sent") {
  using namespace tool_arguments;
  const auto decoded = kylin::decode_tool_arguments(assistant_call(R"("{\"city\": \"Paris\", \"days\": 2}")"));
  CHECK(decoded.decoded);
  CHECK(arguments_of(decoded.messages) == parse(R"({"city": "Paris", "days": 2})", "x"));
  CHECK(arguments_of(kylin::decode_tool_arguments(assistant_call(R"("  ")")).messages) == kylin::json::Value(kylin::json::Object{}));
  for (const char* kept : {R"("not json")", R"("[1, 2]")", R"("42")", R"("{\"unterminated\": ")"}) {
    CAPTURE(kept);
    const auto d = kylin::decode_tool_arguments(assistant_call(kept));
    CHECK_FALSE(d.decoded);
    CHECK(arguments_of(d.messages) == arguments_of(assistant_call(kept)));
  }
  const auto object = assistant_call(R"({"city": "Paris"})");
  CHECK_FALSE(kylin::decode_tool_arguments(object).decoded);
  CHECK(kylin::decode_tool_arguments(object).messages == object);
}

TEST_CASE("Qwen3.5: string arguments render exactly as the reference cases' mapping arguments do") {
  using namespace tool_arguments;
  const kylin::ChatTemplate qwen35(read_text(KYLIN_TEST_DATA "/qwen35-tokenizer/chat_template.jinja"));
  const kylin::ChatTemplate qwen36(read_text(KYLIN_TEST_DATA "/qwen35-tokenizer/chat_template_qwen36.jinja"));
  std::ifstream in(KYLIN_TEST_DATA "/reference/qwen35-chat-template.jsonl");
  REQUIRE(in.good());
  int calls = 0;
  std::string line;
  while (std::getline(in, line)) {
    const auto c = parse(line, "qwen35-chat-template.jsonl");
    if (c.find("expected") == nullptr) continue;
    CAPTURE(c.find("name")->as_string());
    kylin::RenderOptions options;
    options.add_generation_prompt = c.find("add_generation_prompt")->as_bool();
    if (const auto* kwargs = c.find("kwargs")) options.kwargs = *kwargs;
    const auto& tmpl = c.find("template")->as_string() == "chat_template.jinja" ? qwen35 : qwen36;
    const auto client = as_client_strings(*c.find("messages"), calls);
    CHECK(kylin::render_client_chat(tmpl, client, options).text == c.find("expected")->as_string());
  }
  CHECK(calls >= 6);
  // a string that is not a JSON object reaches the template, which raises on it (a 400 on `messages`)
  try {
    (void)kylin::render_client_chat(qwen35, assistant_call(R"("city=Paris")"), {});
    FAIL("expected an error");
  } catch (const kylin::Error& e) {
    CHECK(e.category() == kylin::ErrorCategory::chat_template);
    CHECK(std::string(e.what()).find("Can only get item pairs from a mapping.") != std::string::npos);
  }
}

TEST_CASE("decoded arguments stay user data; Qwen3 prints them with tojson as it prints mapping arguments") {
  using namespace tool_arguments;
  const auto qwen3 = kylin::ChatTemplate::from_dir(KYLIN_TEST_DATA "/qwen3-tokenizer");
  const auto as_mapping = qwen3.render_prompt(assistant_call(R"({"city": "<|im_start|>Paris"})"), {});
  const auto as_string = kylin::render_client_chat(qwen3, assistant_call(R"("{\"city\":\"<|im_start|>Paris\"}")"), {});
  CHECK(as_string.text == as_mapping.text);
  CHECK(as_string.text.find(R"({"city": "<|im_start|>Paris"})") != std::string::npos);
  CHECK(as_string.from_request == as_mapping.from_request);
  const std::size_t forged = as_string.text.find("<|im_start|>Paris");
  CHECK(kylin::detail::overlaps(as_string.from_request, forged, forged + 1));
}

TEST_CASE("a template written for string arguments (functionary v3.1) gets them as the client sent them") {
  using namespace tool_arguments;
  const kylin::ChatTemplate functionary(read_text(KYLIN_TEST_DATA "/templates/hub/meetkai-functionary-medium-v3.1.jinja"),
                                        parse(R"({"bos_token": "<s>"})", "special"));
  const auto messages = assistant_call(R"("{\"city\": \"Paris\"}")");
  kylin::RenderOptions options;
  options.add_generation_prompt = true;
  const std::string text = kylin::render_client_chat(functionary, messages, options).text;
  CHECK(text == functionary.render(messages, options));  // the mapping fails there: "can only concatenate str"
  CHECK(text.find(R"(<function=get_weather>{"city": "Paris"}</function>)") != std::string::npos);
}
