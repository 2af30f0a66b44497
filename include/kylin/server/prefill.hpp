// Assistant prefill: a final assistant message the model continues instead of answering after it
// (Anthropic's /v1/messages; vLLM's continue_final_message on chat completions). The prompt is
// transformers' apply_chat_template(continue_final_message=True): the chat rendered without a
// generation prompt and cut right after the final message's content, stripped as Python's
// str.strip() does (transformers/utils/chat_template_utils.py, render_jinja_template).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kylin/chat/chat_template.hpp"
#include "kylin/chat/text.hpp"
#include "kylin/core/json.hpp"
#include "kylin/server/api_error.hpp"

namespace kylin::server {

// How a chat prompt ends: the generation prompt of a new assistant turn (the APIs' default), the
// last message closed and nothing after it (vLLM's add_generation_prompt: false), or inside the
// final assistant message, which the answer continues.
enum class PromptEnd { generation_prompt, closed, continue_final };

namespace detail {

inline std::string python_strip(std::string_view s) {
  const std::u32string cps = jinja::detail::decode_utf8(s);
  std::size_t b = 0, e = cps.size();
  while (b < e && jinja::detail::is_space(cps[b])) ++b;
  while (e > b && jinja::detail::is_space(cps[e - 1])) --e;
  return jinja::detail::encode_utf8(std::u32string_view(cps).substr(b, e - b));
}

inline bool ends_with_space(std::string_view s) {
  const std::u32string cps = jinja::detail::decode_utf8(s);
  return !cps.empty() && jinja::detail::is_space(cps.back());
}

}  // namespace detail

// Checks that `messages` (normalized, OpenAI's shape) can end in a continued assistant message and
// returns how the prompt ends. An empty final assistant message asks only for the assistant's
// turn: it is dropped and the generation prompt added (transformers would keep its end-of-turn).
// One with tool calls or with reasoning and no text has nothing a template renders last to cut at.
inline PromptEnd continuation(json::Value& messages, const std::string& where) {
  json::Array& list = messages.as_array();
  const json::Value& last = list.back();
  const json::Value* role = last.find("role");
  if (role == nullptr || role->as_string() != "assistant")
    throw invalid(where, "the final message must be an assistant message to be continued");
  const json::Value* content = last.find("content");
  const bool text = content != nullptr && content->is_string() && !detail::python_strip(content->as_string()).empty();
  if (last.find("tool_calls") != nullptr)
    throw ApiError(status::bad_request, "the final assistant message has tool calls; it cannot be continued (send their results)", where,
                   "cannot_continue");
  if (!text && last.find("reasoning_content") != nullptr)
    throw ApiError(status::bad_request, "the final assistant message has reasoning and no text; only text can be continued", where,
                   "cannot_continue");
  if (text) return PromptEnd::continue_final;
  list.pop_back();
  return PromptEnd::generation_prompt;
}

// The rendered chat (no generation prompt) cut after the final message's stripped content, with
// the request's byte ranges cut with it. A template that does not render that content as sent
// (it rewrites or drops it) cannot express the continuation: a 400 naming `param`.
inline RenderedPrompt cut_after_final_message(RenderedPrompt p, const json::Value& messages, const std::string& param) {
  const std::string wanted = detail::python_strip(messages.as_array().back().find("content")->as_string());
  const std::size_t at = p.text.rfind(wanted);
  if (at == std::string::npos)
    throw ApiError(status::bad_request,
                   "the chat template does not render the final assistant message's content as sent, so the answer cannot "
                   "continue it",
                   param, "cannot_continue");
  const std::size_t end = at + wanted.size();
  p.text.resize(end);
  std::vector<TextRange> kept;
  for (TextRange r : p.from_request) {
    if (r.begin >= end) break;
    r.end = std::min(r.end, end);
    kept.push_back(r);
  }
  p.from_request = std::move(kept);
  return p;
}

}  // namespace kylin::server
