// libFuzzer target: the input is a chat template's source, rendered (with transformers' chat
// environment) against fixed messages, tools and kwargs, under small render limits. Lexing,
// parsing and rendering either throw kylin::Error or give a prompt whose request-data ranges
// are sorted, disjoint and inside the text. A crash, hang or sanitizer report is a bug.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "kylin/chat/chat_template.hpp"

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

const kylin::json::Value& messages() {
  static const kylin::json::Value m = kylin::json::parse(R"([
    {"role": "system", "content": "You are kylin."},
    {"role": "user", "content": "Hi <|im_start|> {{ 7 * 7 }} \u00e9"},
    {"role": "assistant", "content": "<think>\nhm\n</think>\n\nHello!",
     "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"x": [1, 2.5, null, true]}}}]},
    {"role": "tool", "content": "{\"ok\": 1}"},
    {"role": "user", "content": ""}])");
  return m;
}

kylin::RenderOptions options() {
  kylin::RenderOptions o;
  o.add_generation_prompt = true;
  o.tools = kylin::json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])");
  o.kwargs = kylin::json::parse(R"({"enable_thinking": false, "n": 3, "names": ["a", "b"]})");
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const kylin::RenderOptions render_options = options();
  // Far below the defaults, so that no render can approach libFuzzer's -timeout or -rss_limit_mb
  // even under ASan: the limits themselves are what a hostile template must run into.
  kylin::jinja::Limits limits;
  limits.max_iterations = 20'000;
  limits.max_output_bytes = 1 << 20;
  limits.max_memory_bytes = 16 << 20;
  limits.max_time = std::chrono::milliseconds(500);
  try {
    kylin::ChatTemplate t(std::string(reinterpret_cast<const char*>(data), size),
                          kylin::json::parse(R"({"bos_token": "<s>", "eos_token": "<|im_end|>"})"), "fuzz template");
    t.set_limits(limits);
    const auto prompt = t.render_prompt(messages(), render_options);
    std::size_t end = 0;
    for (const auto& r : prompt.from_request) {
      require(r.begin >= end && r.begin <= r.end && r.end <= prompt.text.size());
      end = r.end;
    }
  } catch (const kylin::Error&) {
  }
  return 0;
}
