// The Anthropic Messages API (/v1/messages, /v1/messages/count_tokens): request bodies mapped onto
// the chat request the Qwen3 template renders (tools as functions, tool_use/tool_result as Hermes
// tool calls, thinking as enable_thinking), the message response, and Anthropic's error shape.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/server/request.hpp"
#include "kylin/server/responses.hpp"
#include "kylin/server/tool_calls.hpp"

namespace kylin::server {

struct MessagesRequest {
  ChatRequest chat;             // messages normalized to the OpenAI shape the template renders
  bool tools_in_prompt = false;  // tools given and tool_choice is not "none": calls are parsed
};

// Which endpoint a body is for: count_tokens has no max_tokens and generates nothing.
enum class MessagesEndpoint { create, count_tokens };

namespace anthropic {

// Anthropic's ids: "msg_...", "toolu_..." (new_id's hex after an underscore).
inline std::string new_id(std::string_view prefix) {
  std::string id = server::new_id(prefix);
  id[prefix.size()] = '_';
  return id;
}

// Fields accepted. `metadata` (user_id) is accepted and unused: it changes nothing in the answer.
inline constexpr std::string_view create_fields[] = {"model", "messages", "system", "max_tokens", "stop_sequences",
                                                      "temperature", "top_p", "top_k", "stream", "tools",
                                                      "tool_choice", "thinking", "metadata"};
inline constexpr std::string_view count_fields[] = {"model", "messages", "system", "tools", "tool_choice", "thinking"};

// Anthropic's error "type" for each status.
inline std::string error_type(int http_status) {
  switch (http_status) {
    case status::unauthorized: return "authentication_error";
    case 403: return "permission_error";
    case status::not_found: return "not_found_error";
    case status::payload_too_large: return "request_too_large";
    case status::too_many_requests: return "rate_limit_error";
    case status::unavailable: return "overloaded_error";
    default: return http_status < 500 ? "invalid_request_error" : "api_error";
  }
}

inline json::Value error_json(int http_status, const std::string& message) {
  json::Value e = json::Object{};
  e.set("type", error_type(http_status));
  e.set("message", shown(message, 4096));  // bounded as error_body's
  json::Value body = json::Object{};
  body.set("type", "error");
  body.set("error", std::move(e));
  return body;
}

// A failure in Anthropic's shape; the offending parameter is named in the message.
inline std::string error_body(const Failure& f) {
  return json::dump(error_json(f.status, f.param.empty() ? f.message : f.param + ": " + f.message));
}
inline std::string error_body(const ApiError& e) { return anthropic::error_body(Failure{e.status(), e.message(), e.param(), e.code()}); }

// An OpenAI-shaped error body (what Service::failure makes) re-shaped for Anthropic clients.
inline json::Value error_from_openai(int http_status, const std::string& openai_body) {
  std::string message = "internal error";
  try {
    const json::Value v = json::parse(openai_body);
    const json::Value* m = v.find("error") ? v.find("error")->find("message") : nullptr;
    if (m != nullptr && m->is_string()) message = m->as_string();
  } catch (const Error&) {
  }
  return error_json(http_status, message);
}

inline void check_fields(const json::Value& body, MessagesEndpoint endpoint) {
  for (const auto& [key, value] : body.as_object()) {
    const auto& known = endpoint == MessagesEndpoint::create ? std::span<const std::string_view>(create_fields)
                                                             : std::span<const std::string_view>(count_fields);
    if (std::find(known.begin(), known.end(), key) == known.end())
      throw invalid(key, "'" + shown(key) + "' is not supported by this server (docs/SERVER.md lists the accepted fields)");
  }
}

inline const json::Value& required(const json::Value& obj, std::string_view key, const std::string& where) {
  const json::Value* v = detail::field(obj, key);
  if (v == nullptr) throw invalid(where + "." + std::string(key), "'" + std::string(key) + "' is required");
  return *v;
}

inline const std::string& required_string(const json::Value& obj, std::string_view key, const std::string& where) {
  const json::Value& v = required(obj, key, where);
  if (!v.is_string()) throw invalid(where + "." + std::string(key), "'" + std::string(key) + "' must be a string");
  return v.as_string();
}

// A string, or an array of {"type": "text", "text"} blocks (joined without separator).
inline std::string text_of(const json::Value& v, const std::string& where) {
  if (v.is_string()) return v.as_string();
  if (!v.is_array()) throw invalid(where, "must be a string or an array of text blocks");
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const json::Value& b = v.as_array()[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!b.is_object() || required_string(b, "type", at) != "text")
      throw invalid(at, "only text blocks are supported here");
    out += required_string(b, "text", at);
  }
  return out;
}

inline json::Value message(std::string_view role, std::string content) {
  json::Value m = json::Object{};
  m.set("role", role);
  m.set("content", std::move(content));
  return m;
}

// An image block's source: {type: "base64", media_type, data}; URL and file sources are refused (the server
// fetches nothing).
inline RequestImage image_block(const json::Value& b, const std::string& at) {
  const json::Value& source = required(b, "source", at);
  if (!source.is_object()) throw invalid(at + ".source", "'source' must be an object");
  const std::string& type = required_string(source, "type", at + ".source");
  if (type != "base64")
    throw invalid(at + ".source.type", "image source type '" + type + "' is not supported: send the image inline ({\"type\": \"base64\", ...})");
  if (const std::string& media = required_string(source, "media_type", at + ".source"); !media.starts_with("image/"))
    throw invalid(at + ".source.media_type", "'" + media + "' is not an image type");
  return {required_string(source, "data", at + ".source"), at + ".source.data"};
}

// A user turn: tool_result blocks become "tool" messages (the template wraps them in
// <tool_response>), in order; the text and image blocks become one user message after them (its content the
// template's list of text and image items when it has images, whose data goes to `images`).
inline void add_user_turn(const json::Value& content, const std::string& where, json::Value& out, std::vector<RequestImage>& images) {
  if (content.is_string()) return out.push_back(message("user", content.as_string()));
  if (!content.is_array()) throw invalid(where, "content must be a string or an array of content blocks");
  std::string text;
  bool has_text = false;
  json::Value parts = json::Array{};  // text and image items, once an image came
  for (std::size_t i = 0; i < content.size(); ++i) {
    const json::Value& b = content.as_array()[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!b.is_object()) throw invalid(at, "each content block must be an object");
    const std::string& type = required_string(b, "type", at);
    if (type == "text") {
      text += required_string(b, "text", at), has_text = true;
    } else if (type == "image") {
      images.push_back(image_block(b, at));
      if (!text.empty()) parts.push_back(text_item(std::move(text))), text.clear();
      parts.push_back(image_item());
    } else if (type == "tool_result") {
      json::Value m = message("tool", b.find("content") ? text_of(*b.find("content"), at + ".content") : std::string());
      m.set("tool_call_id", required_string(b, "tool_use_id", at));
      if (detail::bool_field(b, "is_error", at + ".is_error").value_or(false))
        m.set("content", "Error: " + m.find("content")->as_string());
      out.push_back(std::move(m));
    } else {
      throw invalid(at + ".type", "content block type '" + type + "' is not supported in user turns (text, image, tool_result)");
    }
  }
  if (parts.size() > 0) {
    if (!text.empty()) parts.push_back(text_item(std::move(text)));
    json::Value m = json::Object{};
    m.set("role", "user");
    m.set("content", std::move(parts));
    return out.push_back(std::move(m));
  }
  if (has_text) out.push_back(message("user", std::move(text)));
}

// An assistant turn: text, thinking (-> reasoning_content) and tool_use (-> tool_calls) blocks.
inline void add_assistant_turn(const json::Value& content, const std::string& where, json::Value& out) {
  if (content.is_string()) return out.push_back(message("assistant", content.as_string()));
  if (!content.is_array()) throw invalid(where, "content must be a string or an array of content blocks");
  std::string text, thinking;
  json::Value calls = json::Array{};
  for (std::size_t i = 0; i < content.size(); ++i) {
    const json::Value& b = content.as_array()[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!b.is_object()) throw invalid(at, "each content block must be an object");
    const std::string& type = required_string(b, "type", at);
    if (type == "text") {
      text += required_string(b, "text", at);
    } else if (type == "thinking") {
      thinking += required_string(b, "thinking", at);
    } else if (type == "tool_use") {
      const json::Value& input = required(b, "input", at);
      if (!input.is_object()) throw invalid(at + ".input", "'input' must be an object");
      json::Value fn = json::Object{};
      fn.set("name", required_string(b, "name", at));
      fn.set("arguments", input);
      json::Value call = json::Object{};
      call.set("id", required_string(b, "id", at));
      call.set("type", "function");
      call.set("function", std::move(fn));
      calls.push_back(std::move(call));
    } else {
      throw invalid(at + ".type", "content block type '" + type + "' is not supported in assistant turns (text, thinking, tool_use)");
    }
  }
  json::Value m = message("assistant", std::move(text));
  if (!thinking.empty()) m.set("reasoning_content", std::move(thinking));
  if (calls.size() > 0) m.set("tool_calls", std::move(calls));
  out.push_back(std::move(m));
}

inline json::Value normalize_messages(const json::Value& body, std::vector<RequestImage>& images) {
  json::Value out = json::Array{};
  if (const json::Value* system = detail::field(body, "system")) out.push_back(message("system", text_of(*system, "system")));
  const json::Value* messages = detail::field(body, "messages");
  if (messages == nullptr) throw invalid("messages", "'messages' is required");
  if (!messages->is_array() || messages->size() == 0) throw invalid("messages", "'messages' must be a non-empty array");
  for (std::size_t i = 0; i < messages->size(); ++i) {
    const json::Value& m = messages->as_array()[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw invalid(where, "each message must be an object");
    const std::string& role = required_string(m, "role", where);
    const json::Value& content = required(m, "content", where);
    if (content.is_array() && content.size() == 0)
      throw invalid(where + ".content", "content is an empty array; give at least one content block (or a string)");
    if (role == "user") add_user_turn(content, where + ".content", out, images);
    else if (role == "assistant") add_assistant_turn(content, where + ".content", out);
    else throw invalid(where + ".role", "role must be 'user' or 'assistant' (the system prompt goes in 'system')");
  }
  return out;
}

// Anthropic tools {name, description, input_schema} as the OpenAI functions the template renders.
inline json::Value tools(const json::Value& list) {
  if (!list.is_array()) throw invalid("tools", "'tools' must be an array");
  json::Value out = json::Array{};
  for (std::size_t i = 0; i < list.size(); ++i) {
    const json::Value& t = list.as_array()[i];
    const std::string at = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) throw invalid(at, "each tool must be an object");
    if (const json::Value* type = detail::field(t, "type"); type && !(type->is_string() && type->as_string() == "custom"))
      throw invalid(at + ".type", "only client tools ({name, description, input_schema}) are supported");
    const json::Value& schema = required(t, "input_schema", at);
    if (!schema.is_object()) throw invalid(at + ".input_schema", "'input_schema' must be an object");
    json::Value fn = json::Object{};
    fn.set("name", required_string(t, "name", at));
    if (const json::Value* d = detail::field(t, "description")) {
      if (!d->is_string()) throw invalid(at + ".description", "'description' must be a string");
      fn.set("description", *d);
    }
    fn.set("parameters", schema);
    json::Value tool = json::Object{};
    tool.set("type", "function");
    tool.set("function", std::move(fn));
    out.push_back(std::move(tool));
  }
  return out;
}

// auto: the model may call tools; none: tools are left out of the prompt and nothing is parsed;
// any: at least one call; tool: a call of the named tool. disable_parallel_tool_use: one call at most.
inline void tool_choice(const json::Value* choice, ChatRequest& r) {
  if (choice == nullptr) return;
  if (!choice->is_object()) throw invalid("tool_choice", "'tool_choice' must be an object {\"type\": ...}");
  const std::string& type = required_string(*choice, "type", "tool_choice");
  r.parallel_tool_calls =
      !detail::bool_field(*choice, "disable_parallel_tool_use", "tool_choice.disable_parallel_tool_use").value_or(false);
  if (type == "auto") return;
  if (type == "none") r.tool_choice.mode = ToolChoiceMode::none;
  else if (type == "any") r.tool_choice.mode = ToolChoiceMode::required;
  else if (type == "tool") {
    r.tool_choice.mode = ToolChoiceMode::named;
    r.tool_choice.name = required_string(*choice, "name", "tool_choice");
  } else {
    throw invalid("tool_choice.type", "'tool_choice.type' must be auto, none, any or tool");
  }
}

// {"type": "enabled", "budget_tokens": N} turns Qwen3's thinking on, {"type": "disabled"} off.
// The budget must be below max_tokens, as Anthropic asks; Anthropic's minimum of 1024 is not
// kept, so short test generations can think. Thinking counts against max_tokens, as Anthropic's does.
inline void thinking(const json::Value* t, ChatRequest& r, MessagesEndpoint endpoint) {
  if (t == nullptr) return;
  if (!t->is_object()) throw invalid("thinking", "'thinking' must be an object");
  const std::string& type = required_string(*t, "type", "thinking");
  r.thinking_chosen = true;
  if (type == "disabled") {
    r.chat.enable_thinking = false;
  } else if (type == "enabled") {
    const json::Value& budget = required(*t, "budget_tokens", "thinking");
    if (!budget.is_int() || budget.as_int() < 1) throw invalid("thinking.budget_tokens", "'budget_tokens' must be a positive integer");
    if (endpoint == MessagesEndpoint::create && budget.as_int() >= r.max_tokens.value_or(0))
      throw invalid("thinking.budget_tokens", "'budget_tokens' must be less than max_tokens");
    r.chat.enable_thinking = true;
  } else {
    throw invalid("thinking.type", "'thinking.type' must be enabled or disabled");
  }
}

// A final assistant turn is a prefill the answer continues (prefill.hpp), as Anthropic's API does;
// its text may not end in whitespace, which Anthropic refuses too (the cut would drop it).
inline void prefill(const json::Value& body, ChatRequest& r) {
  const json::Array& messages = detail::field(body, "messages")->as_array();
  if (messages.back().find("role")->as_string() != "assistant") return;
  const std::string where = "messages[" + std::to_string(messages.size() - 1) + "].content";
  const std::string& text = r.messages.as_array().back().find("content")->as_string();
  if (detail::ends_with_space(text))
    throw invalid(where, "final assistant content cannot end with trailing whitespace");
  r.prompt_end = continuation(r.messages, where);
}

inline void sampling(const json::Value& body, ChatRequest& r, const SamplingParams& defaults) {
  detail::parse_sampling(body, r, defaults);  // only temperature, top_p, top_k pass check_fields
  const json::Value* max = detail::field(body, "max_tokens");
  if (max == nullptr) throw invalid("max_tokens", "'max_tokens' is required");
  if (!max->is_int() || max->as_int() < 1) throw invalid("max_tokens", "'max_tokens' must be an integer >= 1");
  r.max_tokens = max->as_int();
  if (const json::Value* stop = detail::field(body, "stop_sequences")) {
    if (!stop->is_array() || stop->size() > detail::max_stop_strings)
      throw invalid("stop_sequences", "'stop_sequences' must be an array of at most 16 strings");
    for (const auto& s : stop->as_array()) {
      if (!s.is_string() || s.as_string().empty()) throw invalid("stop_sequences", "each stop sequence must be a non-empty string");
      r.stop.push_back(s.as_string());
    }
  }
  r.stream = detail::bool_field(body, "stream").value_or(false);
}

}  // namespace anthropic

inline MessagesRequest parse_messages_request(std::string_view text, const SamplingParams& defaults, MessagesEndpoint endpoint) {
  const json::Value body = detail::parse_body(text);
  anthropic::check_fields(body, endpoint);
  MessagesRequest r;
  const json::Value* model = detail::field(body, "model");
  if (model == nullptr || !model->is_string()) throw invalid("model", "'model' is required and must be a string");
  r.chat.model = model->as_string();
  r.chat.chat.enable_thinking = false;  // Anthropic's default: no thinking unless asked for
  if (const json::Value* meta = detail::field(body, "metadata"); meta && !meta->is_object())
    throw invalid("metadata", "'metadata' must be an object");
  r.chat.messages = anthropic::normalize_messages(body, r.chat.images);
  anthropic::prefill(body, r.chat);
  if (endpoint == MessagesEndpoint::create) anthropic::sampling(body, r.chat, defaults);
  anthropic::thinking(detail::field(body, "thinking"), r.chat, endpoint);
  anthropic::tool_choice(detail::field(body, "tool_choice"), r.chat);
  if (const json::Value* t = detail::field(body, "tools")) {
    json::Value list = anthropic::tools(*t);
    r.tools_in_prompt = r.chat.tool_choice.mode != ToolChoiceMode::none && list.size() > 0;
    if (r.tools_in_prompt) r.chat.chat.tools = std::move(list);
  }
  detail::check_tool_choice(r.chat.tool_choice, r.chat.chat.tools, "tool_choice");
  return r;
}

}  // namespace kylin::server
