// The Responses API's answers: the response object (output items message, function_call and
// reasoning; status completed or incomplete; usage with cached and reasoning tokens) and its
// typed SSE events, each with a sequence_number, in the order the model wrote the items:
// response.created, response.in_progress, then per item output_item.added, its content part and
// deltas (reasoning_text, output_text, function_call_arguments) and their .done events,
// output_item.done, and last response.completed (or response.incomplete).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kylin/server/front.hpp"
#include "kylin/server/responses_request.hpp"

namespace kylin::server::responses {

// "resp_<hex>", "msg_<hex>", "fc_<hex>", "rs_<hex>", "call_<hex>".
inline std::string new_id(std::string_view prefix) {
  std::string id = server::new_id(prefix);
  id[prefix.size()] = '_';
  return id;
}

// What a response object repeats beside its output: the request's settings and where it goes.
struct ResponseContext {
  ResponseHead head;
  const ResponsesRequest* request = nullptr;  // echo, instructions, previous_response_id, store
  double temperature = 1, top_p = 1;    // the effective sampling settings
  bool tools = false;                   // calls are parsed
  ToolCallDialect dialect{};            // in the template's format; the tools type XML values
  std::size_t max_calls = any_number_of_calls;
  bool starts_reasoning = false;        // the prompt opened <think>: the answer starts in it
  int think_open = -1, think_close = -1;
};

// Tokens of the reasoning channel: from the start (a prompt that opened <think>) or from <think>
// through </think>.
inline std::int64_t reasoning_tokens(const std::vector<int>& tokens, const ResponseContext& c) {
  std::int64_t n = 0;
  bool in = c.starts_reasoning;
  for (int id : tokens) {
    if (id == c.think_open) in = true;
    n += in ? 1 : 0;
    if (id == c.think_close) in = false;
  }
  return n;
}

inline json::Value usage(const GenerationStats& s, std::int64_t reasoning) {
  json::Value in = json::Object{}, out = json::Object{}, u = json::Object{};
  in.set("cached_tokens", s.cached_tokens);
  out.set("reasoning_tokens", reasoning);
  u.set("input_tokens", s.prompt_tokens);
  u.set("input_tokens_details", std::move(in));
  u.set("output_tokens", s.generated_tokens);
  u.set("output_tokens_details", std::move(out));
  u.set("total_tokens", s.prompt_tokens + s.generated_tokens);
  return u;
}

inline json::Value text_part(std::string_view type, std::string text) {
  json::Value p = json::Object{};
  p.set("type", type);
  p.set("text", std::move(text));
  if (type == "output_text") {
    p.set("annotations", json::Array{});
    p.set("logprobs", json::Array{});
  }
  return p;
}

inline json::Value message_item(const std::string& id, std::string_view status, json::Value content) {
  json::Value m = json::Object{};
  m.set("id", id);
  m.set("type", "message");
  m.set("status", status);
  m.set("role", "assistant");
  m.set("content", std::move(content));
  return m;
}

inline json::Value reasoning_item(const std::string& id, json::Value content, json::Value summary) {
  json::Value r = json::Object{};
  r.set("id", id);
  r.set("type", "reasoning");
  r.set("summary", std::move(summary));
  r.set("content", std::move(content));
  return r;
}

inline json::Value function_call_item(const std::string& id, const std::string& call_id, const ToolCall& c, std::string_view status,
                                      bool with_arguments) {
  json::Value f = json::Object{};
  f.set("id", id);
  f.set("type", "function_call");
  f.set("status", status);
  f.set("call_id", call_id);
  f.set("name", c.name);
  f.set("arguments", with_arguments ? c.arguments : std::string());
  return f;
}

// The response object. `g` null: in progress (no output yet, no usage).
inline json::Value response_object(const ResponseContext& c, json::Value output, const Generation* g) {
  const ResponsesRequest& r = *c.request;
  auto echoed = [&](std::string_view key, json::Value fallback) {
    const json::Value* v = r.echo.find(key);
    return v ? *v : fallback;
  };
  // Cut by the token limit, or by the client leaving (a stream closed mid-answer, a whole answer
  // whose connection closed): stored so, never as completed, so a continuation knows the turn is cut.
  const bool cut = g && (g->stop_reason == StopReason::max_tokens || g->stop_reason == StopReason::context_full);
  const bool left = g && g->stop_reason == StopReason::cancelled;
  json::Value o = json::Object{};
  o.set("id", c.head.id);
  o.set("object", "response");
  o.set("created_at", c.head.created);
  o.set("status", !g ? "in_progress" : cut || left ? "incomplete" : "completed");
  o.set("background", false);
  o.set("error", json::Value());
  json::Value details;
  if (cut || left) details = json::Object{}, details.set("reason", cut ? "max_output_tokens" : "client_disconnected");
  o.set("incomplete_details", std::move(details));
  o.set("instructions", r.instructions.empty() ? json::Value() : json::Value(r.instructions));
  o.set("max_output_tokens", echoed("max_output_tokens", {}));
  o.set("max_tool_calls", echoed("max_tool_calls", {}));
  o.set("model", c.head.model);
  if (left && output.size() > 0 && output.as_array().back().find("status"))  // the item the client left in
    output.as_array().back().set("status", "incomplete");
  o.set("output", std::move(output));
  o.set("parallel_tool_calls", echoed("parallel_tool_calls", true));
  o.set("previous_response_id", r.previous_response_id.empty() ? json::Value() : json::Value(r.previous_response_id));
  json::Value reasoning = json::Object{};
  const json::Value* asked = r.echo.find("reasoning");
  reasoning.set("effort", asked && asked->find("effort") ? *asked->find("effort") : json::Value());
  reasoning.set("summary", r.reasoning_summary ? json::Value(*r.reasoning_summary) : json::Value());
  o.set("reasoning", std::move(reasoning));
  o.set("service_tier", "default");
  o.set("store", r.store);
  // the request's numbers as sent; the model's defaults (also for a null) as the floats the sampler
  // holds, shortest
  const auto sent_number = [&](std::string_view key, double used) {
    const json::Value* v = r.echo.find(key);
    return v && v->is_number() ? *v : json::Value(detail::compact(static_cast<float>(used)));
  };
  o.set("temperature", sent_number("temperature", c.temperature));
  json::Value text = json::Object{}, format = json::Object{};
  format.set("type", "text");
  text.set("format", std::move(format));
  o.set("text", echoed("text", std::move(text)));
  o.set("tool_choice", echoed("tool_choice", "auto"));
  o.set("tools", echoed("tools", json::Array{}));
  o.set("top_p", sent_number("top_p", c.top_p));
  o.set("truncation", "disabled");
  o.set("usage", g ? usage(g->stats, reasoning_tokens(g->tokens, c)) : json::Value());
  o.set("user", echoed("user", {}));
  o.set("metadata", echoed("metadata", json::Object{}));
  return o;
}

// The calls of an answer (at most max_calls) and the text outside them.
inline ParsedToolCalls answer_calls(std::string_view text, const ResponseContext& c) {
  ParsedToolCalls parsed;
  parsed.content = parsed.whole = std::string(text);
  if (c.tools) parsed = parse_tool_calls(text, c.dialect);
  if (parsed.calls.size() > c.max_calls) parsed.calls.resize(c.max_calls);
  return parsed;
}

// The output items of a whole answer: its reasoning, its text (always, when there is no call),
// its calls.
inline json::Value output_items(const Generation& g, const ResponseContext& c) {
  json::Value out = json::Array{};
  if (!g.reasoning.empty()) {
    json::Value summary = json::Array{};
    if (c.request->reasoning_summary) summary.push_back(text_part("summary_text", g.reasoning));
    out.push_back(reasoning_item(new_id("rs"), json::Array{text_part("reasoning_text", g.reasoning)}, std::move(summary)));
  }
  const ParsedToolCalls parsed = answer_calls(g.content, c);
  if (!parsed.content.empty() || parsed.calls.empty())
    out.push_back(message_item(new_id("msg"), "completed", json::Array{text_part("output_text", parsed.content)}));
  for (const ToolCall& call : parsed.calls) out.push_back(function_call_item(new_id("fc"), new_id("call"), call, "completed", true));
  return out;
}

// The assistant turn of the output items, as the chat message a continuation renders.
inline json::Value assistant_message(const json::Value& items) {
  json::Value m = message("assistant", "");
  json::Value calls = json::Array{};
  for (const json::Value& item : items.as_array()) {
    const std::string& type = item.find("type")->as_string();
    if (type == "reasoning") m.set("reasoning_content", item.find("content")->as_array().at(0).find("text")->as_string());
    if (type == "message") m.set("content", item.find("content")->as_array().at(0).find("text")->as_string());
    if (type != "function_call") continue;
    json::Value fn = json::Object{}, call = json::Object{};
    fn.set("name", *item.find("name"));
    fn.set("arguments", *item.find("arguments"));
    call.set("id", *item.find("call_id"));
    call.set("type", "function");
    call.set("function", std::move(fn));
    calls.push_back(std::move(call));
  }
  if (calls.size() > 0) m.set("tool_calls", std::move(calls));
  return m;
}

}  // namespace kylin::server::responses
