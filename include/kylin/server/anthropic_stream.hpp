// Anthropic Messages API answers: the message object, and the named SSE events of a streamed one
// (message_start, content_block_start/delta/stop, message_delta, message_stop), built as the
// pieces arrive so the thinking, text and tool_use blocks stream in the order the model wrote them.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/server/anthropic.hpp"

namespace kylin::server::anthropic {

// How a generation ended, in Anthropic's words: the matched stop sequence (if any) is found in
// the decoded output, where the earliest match is the one that stopped it.
struct Ending {
  std::string stop_reason;
  std::optional<std::string> stop_sequence;
};

inline Ending ending(StopReason reason, bool tool_use, std::string_view output, const std::vector<std::string>& stops) {
  if (reason == StopReason::max_tokens || reason == StopReason::context_full) return {"max_tokens", std::nullopt};  // cut: even with calls
  if (tool_use) return {"tool_use", std::nullopt};
  if (reason != StopReason::stop_string) return {"end_turn", std::nullopt};
  std::optional<std::string> first;
  std::size_t at = std::string_view::npos;
  for (const auto& s : stops)
    if (const std::size_t p = output.find(s); p != std::string_view::npos && (at == std::string_view::npos || p < at)) at = p, first = s;
  return {"stop_sequence", first};
}

// Calls whose arguments are a JSON object become tool_use blocks; any other call stays text.
struct ToolUse {
  std::string id, name;
  json::Value input;
};

inline std::vector<ToolUse> tool_uses(const std::vector<ToolCall>& calls, bool& all_objects) {
  std::vector<ToolUse> out;
  all_objects = true;
  for (const auto& c : calls) {
    json::Value input;
    try {
      input = json::parse(c.arguments, "tool arguments", ErrorCategory::request);
    } catch (const Error&) {
    }
    if (!input.is_object()) all_objects = false;
    out.push_back({new_id("toolu"), c.name, std::move(input)});
  }
  return out;
}

inline json::Value block(std::string_view type) {
  json::Value b = json::Object{};
  b.set("type", type);
  return b;
}

inline json::Value text_block(std::string text) {
  json::Value b = block("text");
  b.set("text", std::move(text));
  return b;
}

inline json::Value thinking_block(std::string thinking) {
  json::Value b = block("thinking");
  b.set("thinking", std::move(thinking));
  b.set("signature", "");  // kylin signs nothing; clients send the block back as it came
  return b;
}

inline json::Value tool_use_block(const ToolUse& t, bool with_input) {
  json::Value b = block("tool_use");
  b.set("id", t.id);
  b.set("name", t.name);
  b.set("input", with_input ? t.input : json::Value(json::Object{}));
  return b;
}

// Anthropic's usage: the prompt tokens split as its prompt caching counts them, input_tokens
// being those computed for this request (the three add up to the prompt): cache_read_input_tokens
// the prompt tokens reused from a slot's KV cache or the disk prompt cache, and
// cache_creation_input_tokens 0 (kylin keeps every prompt's KV at no extra cost, so no token is a
// cache write).
inline json::Value usage_json(std::int64_t prompt_tokens, std::int64_t cached_tokens, std::int64_t output) {
  json::Value u = json::Object{};
  u.set("input_tokens", prompt_tokens - cached_tokens);
  u.set("cache_creation_input_tokens", 0);
  u.set("cache_read_input_tokens", cached_tokens);
  u.set("output_tokens", output);
  return u;
}
inline json::Value usage_json(const GenerationStats& s) { return usage_json(s.prompt_tokens, s.cached_tokens, s.generated_tokens); }

// The message object; `content` is filled by the caller (empty for message_start).
inline json::Value message_object(const ResponseHead& h, json::Value content, const std::optional<Ending>& end, json::Value usage) {
  json::Value m = json::Object{};
  m.set("id", h.id);
  m.set("type", "message");
  m.set("role", "assistant");
  m.set("model", h.model);
  m.set("content", std::move(content));
  m.set("stop_reason", end ? json::Value(end->stop_reason) : json::Value());
  m.set("stop_sequence", end && end->stop_sequence ? json::Value(*end->stop_sequence) : json::Value());
  m.set("usage", std::move(usage));
  return m;
}

// The non-streamed answer. `output` is the decoded generated text (for the stop sequence).
// `max_calls`: disable_parallel_tool_use keeps the first call only; calls in the template's
// format, `dialect`.
inline json::Value message_response(const ResponseHead& h, const Generation& g, bool tools, std::string_view output,
                                    const std::vector<std::string>& stops, std::size_t max_calls = any_number_of_calls,
                                    const ToolCallDialect& dialect = {}) {
  ParsedToolCalls parsed;
  parsed.content = parsed.whole = g.content;
  if (tools) parsed = parse_tool_calls(g.content, dialect);
  if (parsed.calls.size() > max_calls) parsed.calls.resize(max_calls);
  bool objects = true;
  std::vector<ToolUse> uses = tool_uses(parsed.calls, objects);
  if (!objects) uses.clear(), parsed.content = parsed.whole;
  json::Value content = json::Array{};
  if (!g.reasoning.empty()) content.push_back(thinking_block(g.reasoning));
  if (!parsed.content.empty() || (uses.empty() && content.size() == 0)) content.push_back(text_block(parsed.content));
  for (const auto& u : uses) content.push_back(tool_use_block(u, true));
  return message_object(h, std::move(content), ending(g.stop_reason, !uses.empty(), output, stops), usage_json(g.stats));
}

inline std::string event(std::string_view name, const json::Value& payload) {
  return "event: " + std::string(name) + "\ndata: " + json::dump(payload) + "\n\n";
}

// The events of one streamed message, from message_start (made once the prompt ran, so its usage
// counts the cached tokens). push() takes the pieces as they come; finish() the end. A tool_use
// block opens when its call's name is known and gets an input_json_delta per piece of its input
// (XML calls as they are written; Hermes ones whole at the end).
class MessageStream {
 public:
  MessageStream(ResponseHead head, bool tools, std::int64_t prompt_tokens, std::size_t max_calls = any_number_of_calls,
                std::int64_t cached_tokens = 0, ToolCallDialect dialect = {})
      : head_(std::move(head)), tools_(tools), prompt_tokens_(prompt_tokens), cached_tokens_(cached_tokens),
        calls_(std::move(dialect), max_calls, true) {
    json::Value start = block("message_start");
    start.set("message", message_object(head_, json::Array{}, std::nullopt, usage_json(prompt_tokens, cached_tokens, 0)));
    out_.push_back(event("message_start", start));
  }

  void push(const Piece& piece) {
    if (piece.channel == Channel::reasoning) return delta(Kind::thinking, piece.text);
    if (tools_) return apply(calls_.push(piece.text));
    if (!piece.text.empty()) delta(Kind::text, piece.text);
  }

  // The held tool calls (if any), the last block's stop, message_delta and message_stop.
  void finish(const Generation& g, std::string_view output, const std::vector<std::string>& stops) {
    if (tools_) apply(calls_.finish());
    const bool tool_use = calls_.calls() > 0;
    if (open_ == Kind::none && !tool_use && blocks_ == 0) delta(Kind::text, "");
    close();
    const Ending end = ending(g.stop_reason, tool_use, output, stops);
    json::Value d = json::Object{};
    d.set("stop_reason", end.stop_reason);
    d.set("stop_sequence", end.stop_sequence ? json::Value(*end.stop_sequence) : json::Value());
    json::Value md = block("message_delta");
    md.set("delta", std::move(d));
    md.set("usage", usage_json(prompt_tokens_, cached_tokens_, g.stats.generated_tokens));
    out_.push_back(event("message_delta", md));
    out_.push_back(event("message_stop", block("message_stop")));
  }

  // The events made since the last take(), concatenated.
  std::string take() {
    std::string all;
    for (auto& e : out_) all += e;
    out_.clear();
    return all;
  }

 private:
  enum class Kind { none, thinking, text, tool_use };

  // Text, then calls: a tool_use block per call, its input as it comes.
  void apply(const ToolCallStep& step) {
    if (!step.content.empty()) delta(Kind::text, step.content);
    for (const ToolCallDelta& d : step.deltas) {
      if (d.start) open(Kind::tool_use, tool_use_block({new_id("toolu"), d.name, json::Object{}}, false));
      if (!d.arguments.empty()) {
        json::Value j = block("input_json_delta");
        j.set("partial_json", d.arguments);
        block_delta(std::move(j));
      }
      if (d.end) close();
    }
  }

  void delta(Kind kind, std::string_view text) {
    if (open_ != kind) open(kind, kind == Kind::thinking ? thinking_block("") : text_block(""));
    json::Value d = block(kind == Kind::thinking ? "thinking_delta" : "text_delta");
    d.set(kind == Kind::thinking ? "thinking" : "text", std::string(text));
    block_delta(std::move(d));
  }

  void open(Kind kind, json::Value content_block) {
    close();
    json::Value e = block("content_block_start");
    e.set("index", blocks_);
    e.set("content_block", std::move(content_block));
    out_.push_back(event("content_block_start", e));
    open_ = kind;
  }

  void block_delta(json::Value d) {
    json::Value e = block("content_block_delta");
    e.set("index", blocks_);
    e.set("delta", std::move(d));
    out_.push_back(event("content_block_delta", e));
  }

  void close() {
    if (open_ == Kind::none) return;
    json::Value e = block("content_block_stop");
    e.set("index", blocks_++);
    out_.push_back(event("content_block_stop", e));
    open_ = Kind::none;
  }

  ResponseHead head_;
  bool tools_;
  std::int64_t prompt_tokens_, cached_tokens_;
  ToolCallStream calls_;
  Kind open_ = Kind::none;
  std::int64_t blocks_ = 0;
  std::vector<std::string> out_;
};

}  // namespace kylin::server::anthropic
