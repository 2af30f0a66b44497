// Rendering the real Qwen3 (and Qwen2.5) chat templates matches reference renderings byte for byte.
#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include "kylin/chat/chat_template.hpp"

namespace {

struct Case {
  kylin::json::Value messages;
  kylin::RenderOptions options;
  std::string expected;
  std::string template_name;  // chat-template-extra.jsonl: which template; empty: Qwen3
  std::size_t line;
};

std::vector<Case> load_cases(const std::string& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  std::vector<Case> cases;
  std::string line;
  for (std::size_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    const kylin::json::Value c = kylin::json::parse(line, path);
    Case k;
    k.messages = *c.find("messages");
    k.options.add_generation_prompt = true;
    if (const auto* agp = c.find("add_generation_prompt")) k.options.add_generation_prompt = agp->as_bool();
    if (const auto* kwargs = c.find("kwargs")) k.options.kwargs = *kwargs;
    if (const auto* tools = c.find("tools")) k.options.tools = *tools;
    if (const auto* t = c.find("template")) k.template_name = t->as_string();
    k.expected = c.find("expected")->as_string();
    k.line = n;
    cases.push_back(std::move(k));
  }
  return cases;
}

}  // namespace

TEST_CASE("Qwen3 tokenizer_config.json chat template renders every shared reference case byte for byte") {
  const auto tmpl = kylin::ChatTemplate::from_dir(KYLIN_TEST_DATA "/qwen3-tokenizer");
  const auto cases = load_cases(KYLIN_TEST_DATA "/reference/qwen3-chat-template.jsonl");
  REQUIRE(cases.size() == 8);
  for (const auto& c : cases) {
    CAPTURE(c.line);
    CHECK(tmpl.render(c.messages, c.options) == c.expected);
  }
}

TEST_CASE("Qwen3 and Qwen2.5 templates render the @huggingface/jinja-generated extra cases byte for byte") {
  const auto qwen3 = kylin::ChatTemplate::from_dir(KYLIN_TEST_DATA "/qwen3-tokenizer");
  std::ifstream in(KYLIN_TEST_DATA "/templates/qwen2.5.jinja");
  REQUIRE(in.good());
  const std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const kylin::ChatTemplate qwen25(source);
  const auto cases = load_cases(KYLIN_TEST_DATA "/reference/chat-template-extra.jsonl");
  REQUIRE(cases.size() >= 20);
  for (const auto& c : cases) {
    CAPTURE(c.line);
    REQUIRE((c.template_name == "qwen3" || c.template_name == "qwen2.5"));
    const auto& tmpl = c.template_name == "qwen3" ? qwen3 : qwen25;
    CHECK(tmpl.render(c.messages, c.options) == c.expected);
  }
}

TEST_CASE("from_dir exposes the config's eos token and a missing bos token as empty") {
  const auto tmpl = kylin::ChatTemplate::from_dir(KYLIN_TEST_DATA "/qwen3-tokenizer");
  CHECK(tmpl.eos_token() == "<|im_end|>");
  CHECK(tmpl.bos_token().empty());
}
