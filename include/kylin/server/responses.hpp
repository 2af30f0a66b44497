// OpenAI chat and completions bodies: chat.completion, chat.completion.chunk, text_completion
// (and its chunks), usage, model lists, and the Server-Sent Events framing of streamed chunks.
// (The Responses API's objects are in openai_responses.hpp.)
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/core/json.hpp"
#include "kylin/generate/session.hpp"
#include "kylin/server/tool_call_stream.hpp"

namespace kylin::server {

// "chatcmpl-<24 hex>": unique per process run (random base plus a counter).
inline std::string new_id(std::string_view prefix) {
  static const std::uint64_t base = std::random_device{}() * 0x9E3779B97F4A7C15ull ^ std::random_device{}();
  static std::atomic<std::uint64_t> counter{0};
  const std::uint64_t n = base + 0x2545F4914F6CDD1Dull * ++counter;
  static constexpr char hex[] = "0123456789abcdef";
  std::string id(prefix);
  id += '-';
  for (int shift = 60; shift >= 0; shift -= 4) id += hex[(n >> shift) & 0xF];
  for (int shift = 28; shift >= 0; shift -= 4) id += hex[(counter.load() >> shift) & 0xF];
  return id;
}

inline std::int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// What every chunk and response of one request repeats. system_fingerprint (empty: left out)
// names the build, model and weight format that answered (Service::system_fingerprint).
struct ResponseHead {
  std::string id;
  std::int64_t created = 0;
  std::string model;
  std::string system_fingerprint;
};

// "length" for the token limit or a full context, whatever was parsed (the answer was cut);
// otherwise "tool_calls" when the answer was parsed into calls, else "stop" (EOS, a stop string,
// and a cancelled run, which nobody reads).
inline std::string finish_reason(StopReason r, bool tool_calls) {
  if (r == StopReason::max_tokens || r == StopReason::context_full) return "length";
  return tool_calls ? "tool_calls" : "stop";
}

inline json::Value usage(const GenerationStats& s) {
  json::Value u = json::Object{};
  u.set("prompt_tokens", s.prompt_tokens);
  u.set("completion_tokens", s.generated_tokens);
  u.set("total_tokens", s.prompt_tokens + s.generated_tokens);
  json::Value details = json::Object{};
  details.set("cached_tokens", s.cached_tokens);
  u.set("prompt_tokens_details", std::move(details));
  return u;
}

// llama.cpp's `timings` object: prompt tokens run (cached ones excluded) and their time, tokens
// generated and their time, per token and per second, the prompt tokens reused from a cache, and
// the tokens speculative decoding drafted and got accepted.
inline json::Value timings(const GenerationStats& s) {
  auto per_token = [](double ms, std::int64_t n) { return n > 0 ? ms / static_cast<double>(n) : 0.0; };
  auto per_second = [](double ms, std::int64_t n) { return ms > 0 ? 1000.0 * static_cast<double>(n) / ms : 0.0; };
  // Decode time covers the tokens after the first, which came out of the prefill.
  const std::int64_t decoded = s.generated_tokens > 1 ? s.generated_tokens - 1 : 0;
  json::Value t = json::Object{};
  t.set("cache_n", s.cached_tokens);
  t.set("prompt_n", s.prefill_tokens);
  t.set("prompt_ms", s.prefill_ms);
  t.set("prompt_per_token_ms", per_token(s.prefill_ms, s.prefill_tokens));
  t.set("prompt_per_second", per_second(s.prefill_ms, s.prefill_tokens));
  t.set("predicted_n", s.generated_tokens);
  t.set("predicted_ms", s.decode_ms);
  t.set("predicted_per_token_ms", per_token(s.decode_ms, decoded));
  t.set("predicted_per_second", per_second(s.decode_ms, decoded));
  t.set("ttft_ms", s.ttft_ms);
  // speculative decoding: tokens drafted and those accepted (llama.cpp's names)
  t.set("draft_n", s.draft_tokens);
  t.set("draft_n_accepted", s.draft_accepted);
  return t;
}

inline json::Value tool_call_json(const ToolCall& c, std::optional<std::size_t> index) {
  json::Value fn = json::Object{};
  fn.set("name", c.name);
  fn.set("arguments", c.arguments);
  json::Value call = json::Object{};
  if (index) call.set("index", static_cast<std::int64_t>(*index));
  call.set("id", new_id("call"));
  call.set("type", "function");
  call.set("function", std::move(fn));
  return call;
}

// One streamed step of a call as a chat.completion.chunk's tool_calls entry: the first carries
// the id, type and name, the others only the next piece of the arguments.
inline json::Value tool_call_delta_json(const ToolCallDelta& d) {
  json::Value fn = json::Object{};
  if (d.start) fn.set("name", d.name);
  fn.set("arguments", d.arguments);
  json::Value call = json::Object{};
  call.set("index", static_cast<std::int64_t>(d.index));
  if (d.start) {
    call.set("id", new_id("call"));
    call.set("type", "function");
  }
  call.set("function", std::move(fn));
  return call;
}

inline json::Value head_object(const ResponseHead& h, std::string_view object) {
  json::Value o = json::Object{};
  o.set("id", h.id);
  o.set("object", object);
  o.set("created", h.created);
  o.set("model", h.model);
  if (!h.system_fingerprint.empty()) o.set("system_fingerprint", h.system_fingerprint);
  return o;
}

// One choice of a chat answer. With `tools`, the calls of the answer (in the template's format,
// `dialect`) become tool_calls (the first `max_calls` of them: parallel_tool_calls false keeps
// one). `logprobs`: the choice's logprobs object (logprobs.hpp) or null.
inline json::Value chat_choice(std::int64_t index, const Generation& g, bool tools, json::Value logprobs = {},
                               std::size_t max_calls = any_number_of_calls, const ToolCallDialect& dialect = {}) {
  json::Value message = json::Object{};
  message.set("role", "assistant");
  ParsedToolCalls parsed;
  parsed.content = parsed.whole = g.content;
  if (tools) parsed = parse_tool_calls(g.content, dialect);
  if (parsed.calls.size() > max_calls) parsed.calls.resize(max_calls);
  const bool calls = !parsed.calls.empty();
  message.set("content", calls && parsed.content.empty() ? json::Value() : json::Value(parsed.content));
  if (!g.reasoning.empty()) message.set("reasoning_content", g.reasoning);
  if (calls) {
    json::Value list = json::Array{};
    for (const auto& c : parsed.calls) list.push_back(tool_call_json(c, std::nullopt));
    message.set("tool_calls", std::move(list));
  }
  json::Value choice = json::Object{};
  choice.set("index", index);
  choice.set("message", std::move(message));
  choice.set("logprobs", std::move(logprobs));
  choice.set("finish_reason", finish_reason(g.stop_reason, calls));
  return choice;
}

// A chat answer of `choices` (chat_choice each); `stats` counts the prompt once and every
// choice's tokens (Service's combined_stats).
inline json::Value chat_completion(const ResponseHead& h, json::Value choices, const GenerationStats& stats) {
  json::Value out = head_object(h, "chat.completion");
  out.set("choices", std::move(choices));
  out.set("usage", usage(stats));
  out.set("timings", timings(stats));
  return out;
}

// A chat answer of one choice.
inline json::Value chat_completion(const ResponseHead& h, const Generation& g, bool tools, json::Value logprobs = {},
                                   std::size_t max_calls = any_number_of_calls, const ToolCallDialect& dialect = {}) {
  return chat_completion(h, json::Array{chat_choice(0, g, tools, std::move(logprobs), max_calls, dialect)}, g.stats);
}

// One chat.completion.chunk of choice `index`; `delta` is {"role"}, {"content"},
// {"reasoning_content"}, {"tool_calls"} or {} with the finish reason.
inline json::Value chat_chunk(const ResponseHead& h, json::Value delta, std::optional<std::string> finish = std::nullopt,
                              json::Value logprobs = {}, std::int64_t index = 0) {
  json::Value choice = json::Object{};
  choice.set("index", index);
  choice.set("delta", std::move(delta));
  choice.set("logprobs", std::move(logprobs));
  choice.set("finish_reason", finish ? json::Value(*finish) : json::Value());
  json::Value out = head_object(h, "chat.completion.chunk");
  out.set("choices", json::Array{std::move(choice)});
  return out;
}

inline json::Value delta(std::string_view key, json::Value value) {
  json::Value d = json::Object{};
  d.set(std::string(key), std::move(value));
  return d;
}

// The last chunk of a stream with stream_options.include_usage: no choices, only usage.
inline json::Value usage_chunk(const ResponseHead& h, std::string_view object, const GenerationStats& s) {
  json::Value out = head_object(h, object);
  out.set("choices", json::Array{});
  out.set("usage", usage(s));
  return out;
}

// The end of a streamed answer with Hermes tools: the held text from the first <tool_call> on
// becomes a content chunk (text outside valid blocks, if any) and one tool_calls chunk per call.
// (ChatAnswer streams through ToolCallStream, which does the same at the end, and streams XML
// calls as they come.)
// Returns the chunks; `calls` tells whether any call was parsed (finish_reason "tool_calls").
inline std::vector<json::Value> tool_call_chunks(const ResponseHead& h, const ToolCallHold& hold, bool& calls,
                                                std::size_t max_calls = any_number_of_calls, std::int64_t index = 0) {
  std::vector<json::Value> out;
  calls = false;
  if (!hold.holding()) return out;
  ParsedToolCalls parsed = parse_tool_calls(std::string_view(hold.text()).substr(hold.released()));
  if (parsed.calls.size() > max_calls) parsed.calls.resize(max_calls);
  calls = !parsed.calls.empty();
  if (!parsed.content.empty()) out.push_back(chat_chunk(h, delta("content", parsed.content), std::nullopt, {}, index));
  for (std::size_t i = 0; i < parsed.calls.size(); ++i)
    out.push_back(chat_chunk(h, delta("tool_calls", json::Array{tool_call_json(parsed.calls[i], i)}), std::nullopt, {}, index));
  return out;
}

inline json::Value text_choice(std::string text, std::optional<std::string> finish, json::Value logprobs = {},
                               std::int64_t index = 0) {
  json::Value choice = json::Object{};
  choice.set("index", index);
  choice.set("text", std::move(text));
  choice.set("logprobs", std::move(logprobs));
  choice.set("finish_reason", finish ? json::Value(*finish) : json::Value());
  return choice;
}

// A legacy completion of `choices` (text_choice each); `stats` as for chat_completion.
inline json::Value text_completion(const ResponseHead& h, json::Value choices, const GenerationStats& stats) {
  json::Value out = head_object(h, "text_completion");
  out.set("choices", std::move(choices));
  out.set("usage", usage(stats));
  out.set("timings", timings(stats));
  return out;
}

inline json::Value text_completion(const ResponseHead& h, std::string text, const Generation& g, json::Value logprobs = {}) {
  return text_completion(h, json::Array{text_choice(std::move(text), finish_reason(g.stop_reason, false), std::move(logprobs))}, g.stats);
}

inline json::Value text_chunk(const ResponseHead& h, std::string text, std::optional<std::string> finish = std::nullopt,
                              json::Value logprobs = {}, std::int64_t index = 0) {
  json::Value out = head_object(h, "text_completion");
  out.set("choices", json::Array{text_choice(std::move(text), std::move(finish), std::move(logprobs), index)});
  return out;
}

inline json::Value model_card(const std::string& id, std::int64_t created, std::int64_t context_length) {
  json::Value m = json::Object{};
  m.set("id", id);
  m.set("object", "model");
  m.set("created", created);
  m.set("owned_by", "kylin");
  m.set("context_length", context_length);
  return m;
}

// One Server-Sent Event carrying a JSON payload.
inline std::string sse(const json::Value& payload) { return "data: " + json::dump(payload) + "\n\n"; }
inline constexpr std::string_view sse_done = "data: [DONE]\n\n";

}  // namespace kylin::server
