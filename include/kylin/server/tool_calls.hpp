// Tool calls in the answer: which format the chat template teaches (tool_call_format), the Qwen3
// (Hermes) one, `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>` blocks, parsed here
// (a block whose JSON is not a {name, arguments} object stays in the content as text), and
// ToolCallHold, which keeps a streamed answer from leaking a call as content. The XML format of
// Qwen3.5 and Qwen3-Coder is tool_calls_xml.hpp; tool_call_stream.hpp reads either.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/constrain/tool_call_grammar.hpp"
#include "kylin/core/json.hpp"

namespace kylin::server {

using constrain::any_number_of_calls;

inline constexpr std::string_view tool_call_open = "<tool_call>";
inline constexpr std::string_view tool_call_close = "</tool_call>";
inline constexpr std::string_view xml_function_open = "<function=";

// How the model writes a call. json: Qwen3's Hermes blocks; xml: Qwen3.5/3.6's and Qwen3-Coder's
// `<tool_call>\n<function=NAME>\n<parameter=K>\nV\n</parameter>\n</function>\n</tool_call>`.
enum class ToolCallFormat { json, xml };

// The format a chat template teaches, read from its text: the one that renders calls (or shows
// them in its instructions) with <function= and <parameter= is xml, any other json. The model
// follows its template, not its model_type, so a fine-tune's template decides.
inline ToolCallFormat tool_call_format(std::string_view template_source) {
  const bool xml = template_source.find("<function=") != std::string_view::npos &&
                   template_source.find("<parameter=") != std::string_view::npos;
  return xml ? ToolCallFormat::xml : ToolCallFormat::json;
}

// What reading an answer's calls needs: the format, and the request's tools (the OpenAI-shaped
// list, [{type, function: {name, parameters}}], null when none), whose schemas type XML values.
struct ToolCallDialect {
  ToolCallFormat format = ToolCallFormat::json;
  json::Value tools;
};

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON text, as OpenAI's function.arguments
};

struct ParsedToolCalls {
  std::string content;          // the answer without the parsed blocks, whitespace at its edges trimmed
  std::vector<ToolCall> calls;  // in order of appearance
  // A last block without its closing tag whose JSON does not parse: a call cut short (max_tokens).
  // It is in neither `content` nor `whole`: unfinished call text is never shown as text.
  bool unfinished = false;
  std::string whole;            // the answer without that unfinished block: the text when no call is used
};

namespace detail {

inline std::string_view trim_space(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}

// One block's JSON body; false when it is not {"name": string, "arguments": object|string}.
inline bool parse_tool_call_body(std::string_view body, ToolCall& out) {
  json::Value v;
  try {
    v = json::parse(trim_space(body), "tool call", ErrorCategory::request);
  } catch (const Error&) {
    return false;
  }
  const json::Value* name = v.find("name");
  if (name == nullptr || !name->is_string() || name->as_string().empty()) return false;
  const json::Value* args = v.find("arguments");
  if (args == nullptr) args = v.find("parameters");  // some fine-tunes write "parameters"
  out.name = name->as_string();
  if (args == nullptr || args->is_null()) out.arguments = "{}";
  else if (args->is_string()) out.arguments = args->as_string();
  else if (args->is_object()) out.arguments = json::dump(*args);
  else return false;
  return true;
}

}  // namespace detail

// Parses every <tool_call> block of `text`. A block lacking its closing tag runs to the end of
// the text (generation may stop right after the JSON); it is still parsed, and dropped when it
// does not parse (`unfinished`). A closed block that does not parse stays in the content.
inline ParsedToolCalls parse_tool_calls(std::string_view text) {
  ParsedToolCalls out;
  std::string content;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t open = text.find(tool_call_open, pos);
    if (open == std::string_view::npos) break;
    const std::size_t body_begin = open + tool_call_open.size();
    const std::size_t close = text.find(tool_call_close, body_begin);
    const std::size_t body_end = close == std::string_view::npos ? text.size() : close;
    const std::size_t block_end = close == std::string_view::npos ? text.size() : close + tool_call_close.size();
    ToolCall call;
    content += text.substr(pos, open - pos);
    if (detail::parse_tool_call_body(text.substr(body_begin, body_end - body_begin), call)) {
      out.calls.push_back(std::move(call));
    } else if (close == std::string_view::npos) {
      out.unfinished = true;
      out.whole = std::string(detail::trim_space(text.substr(0, open)));
    } else {
      content += text.substr(open, block_end - open);  // malformed: the model's text stays visible
    }
    pos = block_end;
  }
  if (pos < text.size()) content += text.substr(pos);
  out.content = std::string(detail::trim_space(content));
  if (!out.unfinished) out.whole = std::string(text);
  if (out.calls.empty()) out.content = out.whole;  // nothing parsed: the text untouched (but a cut call)
  return out;
}

// One step of a streamed call, in order: `start` opens call `index` (its `name`), `arguments` is
// the next piece of its arguments JSON (the pieces of a call joined are its arguments), `end`
// closes it. A call parsed whole at the end is one delta with all three.
struct ToolCallDelta {
  std::size_t index = 0;
  bool start = false, end = false;
  std::string name;       // start only
  std::string arguments;  // this step's piece; may be empty
};

// Streaming side: passes answer text through until one of `opens` ("<tool_call>"; the XML format
// also a bare "<function=") starts, holding back a suffix that may be the start of one; from the
// tag on everything is held for the parser.
class ToolCallHold {
 public:
  ToolCallHold() = default;
  explicit ToolCallHold(std::vector<std::string_view> opens) : opens_(std::move(opens)) {}

  // Returns the text that may be streamed as content now.
  std::string push(std::string_view piece) {
    all_ += piece;
    if (holding_) return {};
    std::size_t until = std::string::npos;
    for (std::string_view tag : opens_) until = std::min(until, all_.find(tag, released_));
    if (until != std::string::npos) holding_ = true;
    else until = all_.size() - partial_tag_suffix();
    std::string out = all_.substr(released_, until - released_);
    released_ = until;
    return out;
  }

  bool holding() const { return holding_; }
  const std::string& text() const { return all_; }  // everything pushed
  std::size_t released() const { return released_; }
  std::string_view held() const { return std::string_view(all_).substr(released_); }  // from the tag on, or a partial tag

 private:
  std::size_t partial_tag_suffix() const {
    std::size_t longest = 0;
    for (std::string_view tag : opens_)
      for (std::size_t k = std::min(tag.size() - 1, all_.size() - released_); k > longest; --k)
        if (std::string_view(all_).substr(all_.size() - k) == tag.substr(0, k)) {
          longest = k;
          break;
        }
    return longest;
  }

  std::vector<std::string_view> opens_{tool_call_open};
  std::string all_;
  std::size_t released_ = 0;
  bool holding_ = false;
};

}  // namespace kylin::server
