// A deployment's chat defaults (--chat-template-kwargs, --reasoning): parsed and checked by name,
// laid under a request's own kwargs, and taken by `kylin run` (its prompt's length shows whether
// the Qwen3 template closed an empty think block). The built CLI must exist.
#include <doctest/doctest.h>

#include <array>
#include <cstdio>
#include <memory>
#include <string>

#include "kylin/chat/template_defaults.hpp"

namespace template_defaults_test {

using kylin::json::parse;
using kylin::parse_template_defaults;

TEST_CASE("template defaults: enable_thinking from the kwargs or --reasoning, the rest kept; a request's kwargs win") {
  const kylin::TemplateDefaults none = parse_template_defaults("", "auto");
  CHECK_FALSE(none.enable_thinking.has_value());
  CHECK(none.describe() == parse(R"({"chat_template_kwargs": {}, "reasoning": "auto"})"));
  const kylin::TemplateDefaults d = parse_template_defaults(R"({"enable_thinking": false, "style": "terse", "n": 2})", "");
  REQUIRE(d.enable_thinking.has_value());
  CHECK_FALSE(*d.enable_thinking);
  CHECK(d.kwargs == parse(R"({"style": "terse", "n": 2})"));
  CHECK(d.under(parse(R"({"n": 3, "extra": true})")) == parse(R"({"style": "terse", "n": 3, "extra": true})"));
  CHECK(d.under(kylin::json::Value()) == d.kwargs);
  CHECK(d.describe() == parse(R"({"chat_template_kwargs": {"style": "terse", "n": 2, "enable_thinking": false}, "reasoning": "off"})"));
  CHECK(*parse_template_defaults("", "on").enable_thinking);
  CHECK(*parse_template_defaults(R"({"enable_thinking": true})", "on").enable_thinking);  // agreeing is fine
}

TEST_CASE("template defaults: a bad value names its option") {
  const auto error = [](const char* kwargs, const char* reasoning) {
    try {
      (void)parse_template_defaults(kwargs, reasoning);
    } catch (const kylin::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error("[1]", "") .find("--chat-template-kwargs") != std::string::npos);
  CHECK(error("{", "").find("--chat-template-kwargs") != std::string::npos);
  CHECK(error(R"({"enable_thinking": "no"})", "").find("true or false") != std::string::npos);
  CHECK(error(R"({"add_generation_prompt": true})", "").find("set by the renderer") != std::string::npos);
  CHECK(error("", "maybe").find("--reasoning") != std::string::npos);
  CHECK(error(R"({"enable_thinking": true})", "off").find("contradicts") != std::string::npos);
}

struct Run {
  int status;
  std::string out;
};

Run run(const std::string& args) {
  const std::string cmd = "\"" KYLIN_BIN_DIR "/kylin\" run --model \"" KYLIN_TEST_DATA "/models/e2e-qwen3-chat\" -p Hi -n 1 --greedy " + args + " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(cmd.c_str(), "r"), ::pclose);
  REQUIRE(pipe);
  std::string out;
  std::array<char, 4096> buf{};
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe.get())) out.append(buf.data(), n);
  const int status = ::pclose(pipe.release());
  return {status, out};
}

// The "prompt N tok" of kylin run's stats line.
int prompt_tokens(const Run& r) {
  const std::size_t at = r.out.find("| prompt ");
  REQUIRE_MESSAGE(at != std::string::npos, r.out);
  return std::stoi(r.out.substr(at + 9));
}

TEST_CASE("kylin run: --reasoning off and --chat-template-kwargs enable_thinking false close the think block, as --no-think does") {
  const int on = prompt_tokens(run(""));
  // <think>, "\n\n", </think>, "\n\n": the Qwen3 template's empty think block
  CHECK(prompt_tokens(run("--reasoning off")) == on + 4);
  CHECK(prompt_tokens(run("--chat-template-kwargs '{\"enable_thinking\": false}'")) == on + 4);
  CHECK(prompt_tokens(run("--no-think")) == on + 4);
  CHECK(prompt_tokens(run("--reasoning on --chat-template-kwargs '{\"enable_thinking\": true}'")) == on);
  const Run bad = run("--reasoning on --no-think");
  CHECK(bad.status != 0);
  CHECK(bad.out.find("contradicts") != std::string::npos);
  CHECK(run("--chat-template-kwargs '[1]'").status != 0);
}

}  // namespace template_defaults_test
