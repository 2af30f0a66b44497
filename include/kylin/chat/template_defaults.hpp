// What a deployment sets for every chat it renders: chat-template kwargs (`--chat-template-kwargs
// JSON`) and whether the model thinks (`--reasoning on|off|auto`, llama.cpp's spelling), on
// kylin-server, `kylin run` and `kylin chat`. A request's own kwargs and reasoning fields win.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "kylin/core/error.hpp"
#include "kylin/core/json.hpp"

namespace kylin {

struct TemplateDefaults {
  json::Value kwargs = json::Object{};  // extra template variables, enable_thinking taken out
  std::optional<bool> enable_thinking;  // nullopt: each API's own default (Qwen3 templates think)

  // These kwargs with `own`'s (an object, or null) laid over them: a key both give is `own`'s.
  json::Value under(const json::Value& own) const {
    json::Value out = kwargs;
    if (own.is_object())
      for (const auto& [k, v] : own.as_object()) out.set(k, v);
    return out;
  }

  // What /props shows: {"chat_template_kwargs": {...}, "reasoning": "on"|"off"|"auto"}, the
  // kwargs with enable_thinking back in where it is set.
  json::Value describe() const {
    json::Value kw = kwargs;
    if (enable_thinking) kw.set("enable_thinking", *enable_thinking);
    json::Value out = json::Object{};
    out.set("chat_template_kwargs", std::move(kw));
    out.set("reasoning", !enable_thinking ? "auto" : *enable_thinking ? "on" : "off");
    return out;
  }
};

// `kwargs_json`: a JSON object (empty text: none); `reasoning`: on, off or auto (empty: auto).
// enable_thinking in the kwargs must be a boolean and agree with `reasoning` when both are given;
// the names the renderer sets itself (messages, tools, add_generation_prompt, documents) are refused.
inline TemplateDefaults parse_template_defaults(std::string_view kwargs_json, std::string_view reasoning) {
  static constexpr const char* kwargs_option = "--chat-template-kwargs";
  TemplateDefaults d;
  if (!kwargs_json.empty()) {
    const json::Value kw = json::parse(kwargs_json, kwargs_option, ErrorCategory::config);
    if (!kw.is_object()) throw Error(ErrorCategory::config, kwargs_option, "must be a JSON object, e.g. '{\"enable_thinking\": false}'");
    for (const auto& [k, v] : kw.as_object()) {
      if (k == "messages" || k == "tools" || k == "add_generation_prompt" || k == "documents")
        throw Error(ErrorCategory::config, kwargs_option, "'" + k + "' is set by the renderer, not as a kwarg");
      if (k != "enable_thinking") {
        d.kwargs.set(k, v);
        continue;
      }
      if (!v.is_bool()) throw Error(ErrorCategory::config, kwargs_option, "enable_thinking must be true or false");
      d.enable_thinking = v.as_bool();
    }
  }
  if (reasoning.empty() || reasoning == "auto") return d;
  if (reasoning != "on" && reasoning != "off")
    throw Error(ErrorCategory::config, "--reasoning", "'" + std::string(reasoning) + "' is not on, off or auto");
  const bool on = reasoning == "on";
  if (d.enable_thinking && *d.enable_thinking != on)
    throw Error(ErrorCategory::config, "--reasoning",
                std::string(reasoning) + " contradicts " + kwargs_option + "'s enable_thinking " + (*d.enable_thinking ? "true" : "false"));
  d.enable_thinking = on;
  return d;
}

}  // namespace kylin
