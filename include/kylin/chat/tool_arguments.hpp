// Tool-call arguments as OpenAI clients send them: an assistant turn's
// tool_calls[].function.arguments is a JSON *string*, while transformers users, and the templates
// written for them, pass a mapping (Qwen3.5 iterates `tool_call.arguments|items`, Llama 3.1 prints
// `arguments|tojson`). vLLM json.loads the string before rendering (entrypoints/chat_utils.py,
// _postprocess_messages); render_client_chat does the same for a string that is a JSON object.
#pragma once

#include <exception>
#include <string>

#include "kylin/chat/chat_template.hpp"
#include "kylin/core/json.hpp"

namespace kylin {

struct DecodedToolArguments {
  json::Value messages;
  bool decoded = false;  // some arguments string became an object
};

// A copy of `messages` whose string arguments that parse as a JSON object are that object ("" and
// whitespace: {}, as vLLM makes them). Any other string (not JSON, or a JSON array or number) is
// left as the client sent it: a template that prints strings (Qwen3's) shows it verbatim, and one
// that needs a mapping raises, which the server answers as a 400 naming `messages`.
inline DecodedToolArguments decode_tool_arguments(const json::Value& messages) {
  DecodedToolArguments out{messages};
  if (!messages.is_array()) return out;
  for (json::Value& m : out.messages.as_array()) {
    const json::Value* calls = m.find("tool_calls");
    if (calls == nullptr || !calls->is_array()) continue;
    json::Value decoded_calls = *calls;
    bool changed = false;
    for (json::Value& call : decoded_calls.as_array()) {
      const json::Value* fn = call.find("function");
      const json::Value* args = fn ? fn->find("arguments") : nullptr;
      if (args == nullptr || !args->is_string()) continue;
      const std::string& text = args->as_string();
      json::Value object = json::Object{};
      if (text.find_first_not_of(" \t\n\r") != std::string::npos) {
        try {
          object = json::parse(text, "tool-call arguments", ErrorCategory::request);
        } catch (const Error&) {
          continue;
        }
        if (!object.is_object()) continue;
      }
      json::Value new_fn = *fn;
      new_fn.set("arguments", std::move(object));
      call.set("function", std::move(new_fn));
      changed = true;
    }
    if (changed) {
      m.set("tool_calls", std::move(decoded_calls));
      out.decoded = true;
    }
  }
  return out;
}

// Renders messages from an API client: with their tool-call arguments decoded
// (decode_tool_arguments), and, when the template fails on that, once more with the arguments as
// the client sent them, for templates written for strings (functionary's and firefunction's
// concatenate `arguments`). When both fail, the error of the decoded render is thrown.
inline RenderedPrompt render_client_chat(const ChatTemplate& tmpl, const json::Value& messages, const RenderOptions& options) {
  DecodedToolArguments d = decode_tool_arguments(messages);
  if (!d.decoded) return tmpl.render_prompt(messages, options);
  std::exception_ptr decoded_error;
  try {
    return tmpl.render_prompt(d.messages, options);
  } catch (const Error&) {
    decoded_error = std::current_exception();
  }
  try {
    return tmpl.render_prompt(messages, options);
  } catch (const Error&) {
    std::rethrow_exception(decoded_error);
  }
}

}  // namespace kylin
