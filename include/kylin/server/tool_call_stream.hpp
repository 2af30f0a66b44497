// An answer's tool calls in the dialect of the served template: parse_tool_calls(text, dialect)
// for a whole answer, ToolCallStream for a streamed one. In the XML format a streamed call comes
// out as it is written: its name once `<function=NAME>` is complete, each argument once its
// `</parameter>` is; in the Hermes format each call at the end, whole. No call text ever leaks
// into the content.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kylin/server/tool_calls_xml.hpp"

namespace kylin::server {

inline ParsedToolCalls parse_tool_calls(std::string_view text, const ToolCallDialect& dialect) {
  return dialect.format == ToolCallFormat::xml ? parse_xml_tool_calls(text, dialect.tools) : parse_tool_calls(text);
}

// What one step of a streamed answer sends: content first, then call deltas.
struct ToolCallStep {
  std::string content;
  std::vector<ToolCallDelta> deltas;
};

// One streamed answer's text split into content and calls. At most `max_calls` calls come out
// (later ones are dropped, as in a whole answer). `objects_only` (Anthropic, whose tool_use input
// is an object): a Hermes call whose arguments are not a JSON object turns the answer back into
// text. The deltas of a step are merged per call, so a step sends one delta per call it touches.
class ToolCallStream {
 public:
  explicit ToolCallStream(ToolCallDialect dialect = {}, std::size_t max_calls = any_number_of_calls, bool objects_only = false)
      : dialect_(std::move(dialect)), max_calls_(max_calls), objects_only_(objects_only),
        hold_(xml() ? ToolCallHold({tool_call_open, xml_function_open}) : ToolCallHold()) {}

  ToolCallStep push(std::string_view piece) {
    ToolCallStep step{hold_.push(piece), {}};
    if (xml() && hold_.holding()) {
      std::vector<ToolCallDelta> deltas;
      scanner_.scan(hold_.held(), false, dialect_.tools, deltas);
      take(deltas, step);
    }
    return step;
  }

  // The answer ended: the rest. Without any call the held text is content, but a last unclosed
  // <tool_call> block, a call cut short.
  ToolCallStep finish() {
    ToolCallStep step;
    if (!hold_.holding()) {
      step.content = std::string(hold_.held());  // a partial tag that turned out to be text
      return step;
    }
    if (!xml()) return finish_json();
    std::vector<ToolCallDelta> deltas;
    scanner_.scan(hold_.held(), true, dialect_.tools, deltas);
    take(deltas, step);
    if (calls_.empty()) {
      const std::size_t cut = scanner_.unfinished_block();
      step.content = cut == std::string_view::npos ? std::string(hold_.held()) : std::string(detail::trim_space(hold_.held().substr(0, cut)));
    }
    return step;
  }

  std::size_t calls() const { return calls_.size(); }
  const ToolCall& call(std::size_t i) const { return calls_.at(i); }  // its arguments as far as streamed

 private:
  bool xml() const { return dialect_.format == ToolCallFormat::xml; }

  // The scanner's deltas within max_calls into `step`; the first call's start brings the held
  // text before its block (blocks that were no call) as content.
  void take(const std::vector<ToolCallDelta>& deltas, ToolCallStep& step) {
    for (const ToolCallDelta& d : deltas) {
      if (d.index >= max_calls_) continue;
      if (d.start) {
        if (d.index == 0) step.content += std::string(detail::trim_space(hold_.held().substr(0, scanner_.first_block())));
        calls_.push_back({d.name, ""});
      }
      calls_[d.index].arguments += d.arguments;
      if (!step.deltas.empty() && step.deltas.back().index == d.index && !d.start) {
        step.deltas.back().arguments += d.arguments;
        step.deltas.back().end |= d.end;
      } else {
        step.deltas.push_back(d);
      }
    }
  }

  // Hermes: the held text parsed whole, each call one delta.
  ToolCallStep finish_json() {
    ParsedToolCalls parsed = parse_tool_calls(hold_.held());
    if (parsed.calls.size() > max_calls_) parsed.calls.resize(max_calls_);
    if (objects_only_)
      for (const ToolCall& c : parsed.calls) {
        json::Value input;
        try {
          input = json::parse(c.arguments, "tool arguments", ErrorCategory::request);
        } catch (const Error&) {
        }
        if (!input.is_object()) {
          parsed.calls.clear();
          parsed.content = parsed.whole;
          break;
        }
      }
    ToolCallStep step{parsed.content, {}};
    for (const ToolCall& c : parsed.calls) {
      step.deltas.push_back({.index = calls_.size(), .start = true, .end = true, .name = c.name, .arguments = c.arguments});
      calls_.push_back(c);
    }
    return step;
  }

  ToolCallDialect dialect_;
  std::size_t max_calls_;
  bool objects_only_;
  ToolCallHold hold_;
  XmlCallScanner scanner_;
  std::vector<ToolCall> calls_;  // started so far, at most max_calls_
};

}  // namespace kylin::server
