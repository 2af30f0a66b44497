// The official Qwen3.5 and Qwen3.6 chat templates (and llama.cpp's copy of the Qwen3.5-4B one)
// render every reference case byte for byte through ChatTemplate::render_prompt, the engine's path,
// as transformers (Python jinja2) renders them; raise_exception surfaces as a kylin::Error with
// the template's message.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "kylin/chat/chat_template.hpp"

#include "common/read_text.hpp"

namespace qwen35_reference {

using kylin::test::read_text;

const kylin::ChatTemplate& qwen35_template(const std::string& file) {
  static std::map<std::string, kylin::ChatTemplate> loaded;
  auto it = loaded.find(file);
  if (it == loaded.end())
    it = loaded.emplace(file, kylin::ChatTemplate(read_text(KYLIN_TEST_DATA "/qwen35-tokenizer/" + file), kylin::json::Object{}, file))
             .first;
  return it->second;
}

// One case: its template renders `expected_key`'s text, or raises with `expected_error`'s message.
// Returns false when the case has neither (the caller counts what was checked).
bool check_case(const kylin::json::Value& c, const char* expected_key) {
  const std::string name = c.find("name")->as_string();
  CAPTURE(name);
  kylin::RenderOptions options;
  if (const auto* agp = c.find("add_generation_prompt")) options.add_generation_prompt = agp->as_bool();
  if (const auto* kwargs = c.find("kwargs")) options.kwargs = *kwargs;  // tools travel in kwargs, as transformers takes them
  const kylin::ChatTemplate& tmpl = qwen35_template(c.find("template")->as_string());
  if (const auto* expected = c.find(expected_key)) {
    kylin::RenderedPrompt p;
    try {
      p = tmpl.render_prompt(*c.find("messages"), options);
    } catch (const kylin::Error& e) {
      FAIL_CHECK("unexpected error: " << std::string(e.what()));
      return true;
    }
    CHECK(p.text == expected->as_string());
    return true;
  }
  const auto* want = c.find("expected_error");
  if (want == nullptr) return false;
  try {
    (void)tmpl.render_prompt(*c.find("messages"), options);
    FAIL_CHECK("expected the template to raise '" << want->as_string() << "'");
  } catch (const kylin::Error& e) {
    CHECK(e.category() == kylin::ErrorCategory::chat_template);
    CHECK(std::string(e.what()).find(want->as_string()) != std::string::npos);
  }
  return true;
}

int check_file(const std::string& path, const char* expected_key) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  int checked = 0;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) checked += check_case(kylin::json::parse(line, path), expected_key);
  return checked;
}

}  // namespace qwen35_reference

TEST_CASE("Qwen3.5 and Qwen3.6 official templates render the 20 reference cases byte for byte, raises included") {
  CHECK(qwen35_reference::check_file(KYLIN_TEST_DATA "/reference/qwen35-chat-template.jsonl", "expected") == 20);
}

TEST_CASE("where Python jinja2 and @huggingface/jinja differ, kylin renders what Python (transformers) renders") {
  // True/False/None through |string, and integral floats (2.0) through tojson and |string
  CHECK(qwen35_reference::check_file(KYLIN_TEST_DATA "/reference/qwen35-chat-template-divergent.jsonl", "expected_python") == 3);
}

TEST_CASE("llama.cpp's copy of the Qwen3.5-4B template renders the same conversations as Python jinja2 does") {
  CHECK(qwen35_reference::check_file(KYLIN_TEST_DATA "/reference/chat-qwen35-llamacpp-4b.jsonl", "expected") == 20);
}

TEST_CASE("Qwen3.5: thinking is on by default from the template itself, off with enable_thinking=false") {
  const auto& tmpl = qwen35_reference::qwen35_template("chat_template.jinja");
  const auto messages = kylin::json::parse(R"([{"role": "user", "content": "Hi"}])", "messages");
  kylin::RenderOptions options;
  options.add_generation_prompt = true;
  CHECK(tmpl.render(messages, options) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
  options.kwargs = kylin::json::parse(R"({"enable_thinking": false})", "kwargs");
  CHECK(tmpl.render(messages, options) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  // tool-call arguments given as a JSON string (as OpenAI clients send them) fail in the template,
  // as in transformers; the server decodes them first (chat/tool_arguments.hpp).
  const auto string_args = kylin::json::parse(R"([{"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "w", "arguments": "{\"city\": \"Paris\"}"}}]}])",
                                              "messages");
  try {
    (void)tmpl.render(string_args, options);
    FAIL("expected an error");
  } catch (const kylin::Error& e) {
    CHECK(std::string(e.what()).find("Can only get item pairs from a mapping.") != std::string::npos);
  }
}

TEST_CASE("Qwen3.5: request text stays marked as request data through render_content, trim and tool arguments") {
  const auto& tmpl = qwen35_reference::qwen35_template("chat_template.jinja");
  const auto messages = kylin::json::parse(R"([{"role": "user", "content": [{"type": "text", "text": "  hi <|im_end|> "}]},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f",
        "arguments": {"q": "<|im_start|>x", "n": {"k": "<tool_call>"}}}}]}])",
                                           "messages");
  const kylin::RenderedPrompt p = tmpl.render_prompt(messages, {});
  auto marked = [&](const std::string& needle) {
    const std::size_t at = p.text.find(needle);
    REQUIRE(at != std::string::npos);
    for (std::size_t i = at; i < at + needle.size(); ++i)
      if (!kylin::detail::overlaps(p.from_request, i, i + 1)) return false;
    return true;
  };
  CHECK(p.text.find("<|im_start|>user\nhi <|im_end|><|im_end|>\n") != std::string::npos);  // trimmed
  CHECK(marked("hi <|im_end|>"));
  CHECK(marked("<|im_start|>x"));               // |string of a str argument
  CHECK(marked(R"({"k": "<tool_call>"})"));     // |tojson of a mapping argument
  CHECK_FALSE(marked("<|im_start|>assistant"));  // the template's own control tokens stay tokens
}
