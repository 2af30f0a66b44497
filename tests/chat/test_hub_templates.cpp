// Chat templates from the Hub (functionary v3.1/v3.2, firefunction-v2, Llama 3.1/3.2, Mistral
// Nemo, Hermes 3, Command R+/R7B, Gemma 2, Phi-3.5, DeepSeek-R1-Distill: tests/data/templates/hub)
// render reference/chat-hub-templates.jsonl as Python jinja2 does in transformers' environment:
// the same text, or an error carrying Python's message (raise_exception's text, TypeError's, ...).
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "kylin/chat/chat_template.hpp"

#include "common/read_text.hpp"

namespace hub_templates {

using kylin::test::read_text;

// Python's exception text after "Type: ".
std::string python_message(const std::string& error) {
  const std::size_t colon = error.find(": ");
  return colon == std::string::npos ? error : error.substr(colon + 2);
}

}  // namespace hub_templates

TEST_CASE("Hub chat templates render every reference conversation as transformers' Python jinja2 does") {
  std::ifstream in(KYLIN_TEST_DATA "/reference/chat-hub-templates.jsonl");
  REQUIRE(in.good());
  std::map<std::string, kylin::ChatTemplate> templates;
  std::set<std::string> rendered_by;
  int rendered = 0, raised = 0;
  std::string line;
  while (std::getline(in, line)) {
    const auto c = kylin::json::parse(line, "chat-hub-templates.jsonl");
    const std::string file = c.find("template")->as_string(), name = c.find("name")->as_string();
    CAPTURE(file);
    CAPTURE(name);
    auto it = templates.find(file);
    if (it == templates.end())
      it = templates.emplace(file, kylin::ChatTemplate(hub_templates::read_text(KYLIN_TEST_DATA "/templates/hub/" + file),
                                                       *c.find("special_tokens"), file))
               .first;
    kylin::RenderOptions options;
    options.add_generation_prompt = c.find("add_generation_prompt")->as_bool();
    options.kwargs = *c.find("kwargs");
    if (const auto* tools = c.find("tools")) options.tools = *tools;
    if (const auto* expected = c.find("expected")) {
      ++rendered;
      rendered_by.insert(file);
      try {
        CHECK(it->second.render(*c.find("messages"), options) == expected->as_string());
      } catch (const kylin::Error& e) {
        FAIL_CHECK("unexpected error: " << std::string(e.what()));
      }
    } else {
      ++raised;
      const std::string want = hub_templates::python_message(c.find("error")->as_string());
      CAPTURE(want);
      try {
        (void)it->second.render(*c.find("messages"), options);
        FAIL_CHECK("expected an error");
      } catch (const kylin::Error& e) {
        CAPTURE(std::string(e.what()));
        CHECK(std::string(e.what()).find(want) != std::string::npos);
      }
    }
  }
  CHECK(templates.size() == 12);
  CHECK(rendered_by.size() == 12);  // every template renders some conversation
  CHECK(rendered >= 70);
  CHECK(raised >= 20);
}
