// The interpreter agrees with Python Jinja2 in transformers' chat-template environment on every
// case of reference/chat-jinja-unit.jsonl (output byte for byte, or an error where Python raises).
#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include "kylin/chat/template.hpp"

namespace {

// The text of Python's exception after "Type: ", which kylin's message must contain. Jinja's
// compile-time "No filter named 'x'." reads "unsupported filter 'x'" in kylin.
std::string python_message(const std::string& error) {
  const std::string no_filter = "TemplateAssertionError: No filter named ";
  if (error.rfind(no_filter, 0) == 0) return "unsupported filter " + error.substr(no_filter.size(), error.size() - no_filter.size() - 1);
  const std::size_t colon = error.find(": ");
  return colon == std::string::npos ? error : error.substr(colon + 2);
}

}  // namespace

TEST_CASE("interpreter output and errors match Python Jinja2 (transformers' environment) case by case") {
  std::ifstream in(KYLIN_TEST_DATA "/reference/chat-jinja-unit.jsonl");
  REQUIRE(in.good());
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    const auto c = kylin::json::parse(line, "chat-jinja-unit.jsonl");
    const std::string source = c.find("template")->as_string();
    CAPTURE(n);
    CAPTURE(source);
    kylin::jinja::DictData vars;
    for (const auto& [k, v] : c.find("vars")->as_object()) vars.set(k, kylin::jinja::from_json(v));
    if (const auto* expected = c.find("expected")) {
      std::string got;
      try {
        got = kylin::jinja::Template(source).render(vars);
      } catch (const kylin::Error& e) {
        FAIL_CHECK("unexpected error: " << e.what());
        continue;
      }
      CHECK(got == expected->as_string());
    } else {
      const std::string want = python_message(c.find("error")->as_string());
      CAPTURE(want);
      try {
        (void)kylin::jinja::Template(source).render(vars);
        FAIL_CHECK("expected an error");
      } catch (const kylin::Error& e) {
        CHECK(e.category() == kylin::ErrorCategory::chat_template);
        CHECK(std::string(e.what()).find(want) != std::string::npos);
      }
    }
  }
  CHECK(n >= 80);
}
