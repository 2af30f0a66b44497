// The XML tool calls of Qwen3.5/3.6 and Qwen3-Coder, `<tool_call>\n<function=NAME>\n<parameter=K>\n
// V\n</parameter>\n...</function>\n</tool_call>`, read into the ParsedToolCalls of the Hermes format,
// each value typed by the tool's schema as vLLM's qwen3_coder parser types it
// (tests/data/qwen35-tokenizer/TOOL_CALLS.md). One incremental scanner reads both a whole answer
// and a streamed one, so the deltas of a stream join into the arguments of the whole.
#pragma once

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kylin/constrain/tool_call_xml_grammar.hpp"
#include "kylin/server/python_literal.hpp"
#include "kylin/server/tool_calls.hpp"

namespace kylin::server {

namespace detail {

// json.dumps' separators, which the arguments of vLLM's calls have.
inline const json::DumpOptions python_json{.item_separator = ", ", .key_separator = ": "};

inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The property schema of parameter `param` of function `fn` in the request's tools: its
// parameters.properties entry (or, as vLLM reads a schema without properties, parameters' own
// entry); null when the tool or the parameter is not there.
inline const json::Value* xml_property(const json::Value& tools, std::string_view fn, std::string_view param) {
  if (!tools.is_array()) return nullptr;
  for (const json::Value& t : tools.as_array()) {
    const json::Value* f = t.is_object() ? t.find("function") : nullptr;
    const json::Value* name = f && f->is_object() ? f->find("name") : nullptr;
    if (name == nullptr || !name->is_string() || name->as_string() != fn) continue;
    const json::Value* params = f->find("parameters");
    if (params == nullptr || !params->is_object()) return nullptr;
    const json::Value* props = params->find("properties");
    return (props && props->is_object() ? *props : *params).find(param);
  }
  return nullptr;
}

// The JSON text of a parameter's value (rule 5 of TOOL_CALLS.md, vLLM's _convert_param_value):
// a value that does not read as its type stays the string it is.
inline std::string xml_typed_value(std::string_view raw, const constrain::XmlValueType& t) {
  using constrain::XmlValueKind;
  const std::string text = json::dump(json::Value(std::string(raw)));
  const std::string lower = ascii_lower(raw);
  const bool null = lower == "null" || lower == "none";
  if (t.nullable && null) return "null";
  if (t.kind == XmlValueKind::text) return text;
  if (null) return "null";
  if (t.kind == XmlValueKind::integer) return python_int(raw).value_or(text);
  if (t.kind == XmlValueKind::number) return python_float(raw).value_or(text);
  if (t.kind == XmlValueKind::boolean) return lower == "true" ? "true" : "false";
  const bool container = t.kind == XmlValueKind::json;
  if (container) {
    try {
      json::Value v = json::parse(raw, "tool call argument", ErrorCategory::request);
      if (v.is_string())  // a JSON-encoded Python repr ("{'k': 'v'}"): decoded once more
        if (auto again = python_literal(v.as_string())) v = std::move(*again);
      return json::dump(v, python_json);
    } catch (const Error&) {
    }
  }
  auto v = python_literal(raw);
  if (!v) return text;
  if (container && v->is_string())
    if (auto again = python_literal(v->as_string())) v = std::move(again);
  return json::dump(*v, python_json);
}

inline bool xml_function_name_ok(std::string_view name) {
  return !name.empty() && name.find_first_of("{}<>\"' \t\r\n\f\v") == std::string_view::npos;
}

}  // namespace detail

// One call as the scanner has read it.
struct XmlCall {
  std::string name;
  std::vector<std::pair<std::string, std::string>> arguments;  // (name, JSON text); a repeated name keeps its place, takes the new value
  std::string streamed;  // the arguments as the deltas wrote them (a repeated name twice)
  // The arguments object: keys in order of first appearance, json.dumps' separators.
  std::string json() const {
    std::string out = "{";
    for (const auto& [k, v] : arguments) out += (out.size() > 1 ? ", " : "") + json::dump(json::Value(k)) + ": " + v;
    return out + "}";
  }
};

// Reads XML calls out of an answer as it grows. Blocks: `<tool_call>` to `</tool_call>`, one
// function each; before any block, a bare `<function=` opens a call too. Inside a function,
// `<parameter=NAME>` starts a value that ends at the first `</parameter>`, or at a line that opens
// the next parameter or closes the function or the call (the model forgot `</parameter>`); one
// leading and one trailing "\n" are removed. An object or array value skips what is inside its
// JSON strings, so a string may hold `</parameter>`. A text may end anywhere: the last call is
// closed where it stops. Decisions wait for the bytes that settle them, so feeding an answer in
// pieces decides exactly what feeding it whole does.
class XmlCallScanner {
 public:
  // Reads `text` (the answer so far: each call passes a longer text that starts with the last) as
  // far as it is settled, appending the deltas; `final`: nothing follows. `tools`: the request's.
  void scan(std::string_view text, bool final, const json::Value& tools, std::vector<ToolCallDelta>& out) {
    while (state_ != State::done && step(text, final, tools, out)) {
    }
    if (final && state_ != State::done) {
      if (state_ == State::block || state_ == State::skip_block || (state_ == State::function && in_block_)) unfinished_ = block_;
      end_call(out);
      state_ = State::done;
    }
  }

  const std::vector<XmlCall>& calls() const { return calls_; }
  std::size_t first_block() const { return first_block_; }  // where the first call's block begins; npos: no call
  // Once final: where a last <tool_call> block that holds no call and is not closed begins (a
  // call cut short, never shown as text); npos: none.
  std::size_t unfinished_block() const { return unfinished_; }

 private:
  enum class State { outside, block, function, body, parameter, skip_block, done };
  static constexpr std::string_view param_open = "<parameter=", param_close = "</parameter>", function_close = "</function>";
  static constexpr std::size_t npos = std::string_view::npos;

  bool step(std::string_view text, bool final, const json::Value& tools, std::vector<ToolCallDelta>& out) {
    switch (state_) {
      case State::outside: return outside(text);
      case State::block: return block(text);
      case State::skip_block: return skip_block(text);
      case State::function: return function(text, out);
      case State::body: return body(text, final, out);
      case State::parameter: return parameter(text, final, tools, out);
      case State::done: return false;
    }
    return false;
  }

  bool outside(std::string_view text) {
    const std::size_t a = text.find(tool_call_open, pos_);
    const std::size_t f = calls_.empty() && !seen_block_ ? text.find(xml_function_open, pos_) : npos;
    if (a == npos && f == npos) {
      pos_ = std::max(pos_, text.size() > tool_call_open.size() ? text.size() - tool_call_open.size() : 0);  // a tag may still begin there
      return false;
    }
    block_ = std::min(a, f);
    in_block_ = a < f;
    seen_block_ |= in_block_;
    pos_ = in_block_ ? a + tool_call_open.size() : f;
    state_ = in_block_ ? State::block : State::function;
    return true;
  }

  bool block(std::string_view text) {
    const std::size_t fn = text.find(xml_function_open, pos_), close = text.find(tool_call_close, pos_);
    if (fn != npos && (close == npos || fn < close)) return pos_ = fn, state_ = State::function, true;
    if (close == npos) return false;
    pos_ = close + tool_call_close.size();  // a block without a function is text
    state_ = State::outside;
    return true;
  }

  bool skip_block(std::string_view text) {
    const std::size_t close = text.find(tool_call_close, pos_);
    if (close == npos) return false;
    pos_ = close + tool_call_close.size();
    state_ = State::outside;
    return true;
  }

  bool function(std::string_view text, std::vector<ToolCallDelta>& out) {
    const std::size_t gt = text.find('>', pos_ + xml_function_open.size());
    if (gt == npos) return false;
    const std::string_view name = text.substr(pos_ + xml_function_open.size(), gt - pos_ - xml_function_open.size());
    pos_ = gt + 1;
    if (!detail::xml_function_name_ok(name)) {  // vLLM: no call
      state_ = in_block_ ? State::skip_block : State::outside;
      return true;
    }
    if (first_block_ == npos) first_block_ = block_;
    calls_.push_back({std::string(name), {}, {}});
    out.push_back({.index = calls_.size() - 1, .start = true, .end = false, .name = std::string(name), .arguments = ""});
    open_ = true;
    state_ = State::body;
    return true;
  }

  bool body(std::string_view text, bool final, std::vector<ToolCallDelta>& out) {
    const std::size_t p = text.find_first_not_of(" \t\r\n", pos_);
    if (p == npos) return false;
    const std::string_view rest = text.substr(p);
    for (std::string_view tag : {param_open, function_close, tool_call_close}) {
      if (rest.starts_with(tag)) {
        pos_ = p + (tag == param_open ? 0 : tag.size());
        if (tag == param_open) {
          state_ = State::parameter;
        } else {
          end_call(out);
          state_ = State::outside;
        }
        return true;
      }
      if (tag.starts_with(rest) && !final) return pos_ = p, false;  // the tag may still come
    }
    std::size_t next = npos;  // stray text: skipped up to the next tag
    for (std::string_view tag : {param_open, function_close, tool_call_close}) next = std::min(next, text.find(tag, p + 1));
    if (next == npos) return pos_ = p, false;
    pos_ = next;
    return true;
  }

  bool parameter(std::string_view text, bool final, const json::Value& tools, std::vector<ToolCallDelta>& out) {
    if (!in_value_) {
      const std::size_t gt = text.find('>', pos_ + param_open.size());
      if (gt == npos) return false;
      name_ = std::string(text.substr(pos_ + param_open.size(), gt - pos_ - param_open.size()));
      type_ = constrain::xml_value_type(detail::xml_property(tools, calls_.back().name, name_));
      value_ = search_ = gt + 1;
      in_string_ = escaped_ = false;
      in_value_ = true;
    }
    std::size_t end = value_end(text, type_.kind == constrain::XmlValueKind::json);
    if (end == npos && !final) return false;
    if (end == npos) {  // the text ends first (or a JSON string never closed): the plain rule, else all of it
      search_ = value_;
      in_string_ = escaped_ = false;
      end = value_end(text, false);
      if (end == npos) end = text.size();
    }
    std::string_view raw = text.substr(value_, end - value_);
    if (raw.starts_with('\n')) raw.remove_prefix(1);
    if (raw.ends_with('\n')) raw.remove_suffix(1);
    add_argument(detail::xml_typed_value(raw, type_), out);
    in_value_ = false;
    pos_ = text.substr(end).starts_with(param_close) ? end + param_close.size() : end;
    state_ = State::body;
    return true;
  }

  // Where the value that began at value_ ends (the first byte of its end marker), continuing the
  // search from search_; npos: not settled yet (the last bytes may begin a marker). `json`: bytes
  // inside JSON strings are skipped.
  std::size_t value_end(std::string_view text, bool json) {
    for (std::size_t q = search_; q < text.size(); ++q) {
      const char c = text[q];
      if (json && in_string_) {
        if (escaped_) escaped_ = false;
        else if (c == '\\') escaped_ = true;
        else if (c == '"') in_string_ = false;
        continue;
      }
      if (json && c == '"') {
        in_string_ = true;
        continue;
      }
      if (c != '<' && c != '\n') continue;
      const std::string_view rest = text.substr(q);
      for (std::string_view m : constrain::detail::xml_value_ends) {
        if (rest.starts_with(m)) return q;
        if (m.starts_with(rest)) return search_ = q, npos;
      }
    }
    search_ = text.size();
    return npos;
  }

  void add_argument(std::string value, std::vector<ToolCallDelta>& out) {
    XmlCall& call = calls_.back();
    const std::string piece = (call.streamed.empty() ? "{" : ", ") + json::dump(json::Value(name_)) + ": " + value;
    call.streamed += piece;
    out.push_back({.index = calls_.size() - 1, .start = false, .end = false, .name = "", .arguments = piece});
    for (auto& [k, v] : call.arguments)
      if (k == name_) return void(v = std::move(value));
    call.arguments.emplace_back(name_, std::move(value));
  }

  void end_call(std::vector<ToolCallDelta>& out) {
    if (!open_) return;
    XmlCall& call = calls_.back();
    const std::string piece = call.streamed.empty() ? "{}" : "}";
    call.streamed += piece;
    out.push_back({.index = calls_.size() - 1, .start = false, .end = true, .name = "", .arguments = piece});
    open_ = false;
  }

  State state_ = State::outside;
  std::size_t pos_ = 0;                // where the next step reads
  std::size_t block_ = npos;           // where the current block (or bare function) begins
  bool in_block_ = false, seen_block_ = false, open_ = false;
  std::size_t first_block_ = npos, unfinished_ = npos;
  std::vector<XmlCall> calls_;
  // the parameter being read
  bool in_value_ = false, in_string_ = false, escaped_ = false;
  std::string name_;
  constrain::XmlValueType type_;
  std::size_t value_ = 0, search_ = 0;  // where its value begins; where the search for its end goes on
};

// Every XML call of `text`, typed by `tools` (the request's). `content` is the text before the
// first call's block, whitespace at its edges trimmed (text after a call is dropped, as vLLM
// does); without calls it is the whole text but a last unclosed <tool_call> block (`unfinished`).
inline ParsedToolCalls parse_xml_tool_calls(std::string_view text, const json::Value& tools) {
  XmlCallScanner scanner;
  std::vector<ToolCallDelta> deltas;
  scanner.scan(text, true, tools, deltas);
  ParsedToolCalls out;
  for (const XmlCall& c : scanner.calls()) out.calls.push_back({c.name, c.json()});
  out.unfinished = scanner.unfinished_block() != std::string_view::npos;
  out.whole = out.unfinished ? std::string(detail::trim_space(text.substr(0, scanner.unfinished_block()))) : std::string(text);
  out.content = out.calls.empty() ? out.whole : std::string(detail::trim_space(text.substr(0, scanner.first_block())));
  return out;
}

}  // namespace kylin::server
