// The OpenAI Responses API's request (POST /v1/responses) mapped onto the chat request the Qwen3
// template renders: `input` items become chat messages (function_call items the assistant's
// tool_calls, function_call_output items tool messages, reasoning items its reasoning_content),
// `instructions` the system message, function tools the template's tools, `text.format` the
// answer's format. Every field not listed here, and every built-in tool, is a 400 naming it.
#pragma once

#include <algorithm>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kylin/server/request.hpp"

namespace kylin::server {

struct ResponsesRequest {
  ChatRequest chat;                 // messages filled by the service (instructions + previous conversation + input)
  json::Value input;                // `input` as chat messages (what this request adds to the conversation)
  std::string instructions;         // empty: none
  std::string previous_response_id;
  bool store = true;                // OpenAI's default
  bool tools_in_prompt = false;     // function tools offered and tool_choice is not "none": calls are parsed
  std::optional<std::string> reasoning_summary;  // reasoning.summary: the reasoning item carries it as its summary
  json::Value echo = json::Object{};  // what the response object repeats: tools, tool_choice, text, reasoning, metadata, ...
};

// Which endpoint a body is for: input_tokens generates nothing and takes no sampling fields.
enum class ResponsesEndpoint { create, input_tokens };

namespace responses {

inline constexpr std::string_view create_fields[] = {
    "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "text", "max_output_tokens",
    "max_tool_calls", "temperature", "top_p", "stream", "stream_options", "reasoning", "store", "previous_response_id",
    "metadata", "user", "safety_identifier", "prompt_cache_key", "prompt_cache_retention", "service_tier", "truncation",
    "include", "background", "top_logprobs"};
inline constexpr std::string_view count_fields[] = {"model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls",
                                                    "text", "reasoning", "previous_response_id", "truncation"};

inline const std::string& string_at(const json::Value& v, std::string_view key, const std::string& where, bool required = true) {
  static const std::string none;
  const json::Value* f = detail::field(v, key);
  if (f == nullptr && !required) return none;
  const std::string param = where.empty() ? std::string(key) : where + "." + std::string(key);
  if (f == nullptr || !f->is_string()) throw invalid(param, "'" + std::string(key) + "' must be a string");
  return f->as_string();
}

inline json::Value message(std::string_view role, std::string content) {
  json::Value m = json::Object{};
  m.set("role", role);
  m.set("content", std::move(content));
  return m;
}

// A message's content: a string, or parts of the types a role may send (input_text for user,
// system and developer; output_text and refusal for assistant), joined without separator.
inline std::string content_text(const json::Value& content, bool assistant, const std::string& where) {
  if (content.is_string()) return content.as_string();
  if (!content.is_array()) throw invalid(where, "content must be a string or an array of content parts");
  if (content.size() == 0) throw invalid(where, "content is an empty array; give at least one part (or a string)");
  std::string text;
  for (std::size_t i = 0; i < content.size(); ++i) {
    const json::Value& part = content.as_array()[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!part.is_object()) throw invalid(at, "each content part must be an object");
    const std::string& type = string_at(part, "type", at);
    const bool ok = assistant ? type == "output_text" || type == "refusal" : type == "input_text";
    if (!ok)
      throw invalid(at + ".type", "content part type '" + type + "' is not supported here (" +
                                      (assistant ? "output_text, refusal" : "input_text, and input_image in user messages") + ")");
    text += string_at(part, type == "refusal" ? "refusal" : "text", at);
  }
  return text;
}

// A user message's content: its text, or with input_image parts ({image_url: a data URL, detail}) the
// template's list of text and image items, the images' data going to `images`.
inline json::Value user_content(const json::Value& content, const std::string& where, std::vector<RequestImage>& images) {
  if (!content.is_array()) return content_text(content, false, where);
  json::Value parts = json::Array{};
  std::string text;
  for (std::size_t i = 0; i < content.size(); ++i) {
    const json::Value& part = content.as_array()[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    const json::Value* type = part.is_object() ? detail::field(part, "type") : nullptr;
    if (!type || !type->is_string() || type->as_string() != "input_image") {
      text += content_text(json::Value(json::Array{part}), false, at);  // names the part's own field
      continue;
    }
    if (detail::field(part, "file_id")) throw invalid(at + ".file_id", "file ids are not supported: send the image inline as a data URL");
    if (const json::Value* d = detail::field(part, "detail"); d && !d->is_string()) throw invalid(at + ".detail", "'detail' must be a string");
    images.push_back(image_from_url(string_at(part, "image_url", at), at + ".image_url"));
    if (!text.empty()) parts.push_back(text_item(std::move(text))), text.clear();
    parts.push_back(image_item());
  }
  if (parts.size() == 0) return text;
  if (!text.empty()) parts.push_back(text_item(std::move(text)));
  return parts;
}

// `find_item`: a stored response's output item by id, for the item_reference items clients send
// instead of resending what a stored response said (null: none are stored).
using ItemLookup = std::function<std::optional<json::Value>(const std::string&)>;

// The stored output item an item_reference names; nullopt when `item` is no reference.
inline std::optional<json::Value> referenced_item(const json::Value& item, const std::string& at, const ItemLookup& find_item) {
  if (!item.is_object()) throw invalid(at, "each input item must be an object");
  const json::Value* type = detail::field(item, "type");
  if (!type || !type->is_string() || type->as_string() != "item_reference") return std::nullopt;
  const std::string& id = string_at(item, "id", at);
  std::optional<json::Value> found = find_item ? find_item(id) : std::nullopt;
  if (!found)
    throw invalid(at + ".id", "item '" + shown(id) + "' is not an output item of a stored response (never made, made with store false, "
                              "deleted or evicted from the bounded store)");
  return found;
}

// A reasoning item's text: its content parts, or else its summary parts, joined.
inline std::string reasoning_text(const json::Value& item, const std::string& at) {
  std::string thinking;
  for (const char* list : {"content", "summary"}) {
    const json::Value* parts = detail::field(item, list);
    if (parts != nullptr && !parts->is_array()) throw invalid(at + "." + list, std::string("'") + list + "' must be an array");
    if (parts != nullptr && thinking.empty())
      for (std::size_t k = 0; k < parts->size(); ++k) thinking += string_at(parts->as_array()[k], "text", at + "." + list + "[" + std::to_string(k) + "]");
  }
  return thinking;
}

// A function_call item as a chat tool call {id, type: "function", function: {name, arguments}}.
inline json::Value tool_call(const json::Value& item, const std::string& at) {
  json::Value fn = json::Object{};
  fn.set("name", string_at(item, "name", at));
  fn.set("arguments", string_at(item, "arguments", at));
  json::Value call = json::Object{};
  call.set("id", string_at(item, "call_id", at));
  call.set("type", "function");
  call.set("function", std::move(fn));
  return call;
}

// The input items as chat messages. Consecutive assistant items (a reasoning item, an assistant
// message, function calls) make one assistant turn, as the model wrote them.
inline json::Value input_messages(const json::Value& input, std::vector<RequestImage>& images, const ItemLookup& find_item = nullptr) {
  json::Value out = json::Array{};
  if (input.is_string()) {
    out.push_back(message("user", input.as_string()));
    return out;
  }
  if (!input.is_array()) throw invalid("input", "'input' must be a string or an array of items");
  bool assistant_open = false;  // out's last message is an assistant turn items may extend
  auto assistant = [&]() -> json::Value& {
    if (!assistant_open) out.push_back(message("assistant", "")), assistant_open = true;
    return out.as_array().back();
  };
  for (std::size_t i = 0; i < input.size(); ++i) {
    const std::string at = "input[" + std::to_string(i) + "]";
    const std::optional<json::Value> referenced = referenced_item(input.as_array()[i], at, find_item);
    const json::Value& item = referenced ? *referenced : input.as_array()[i];
    const json::Value* type_field = detail::field(item, "type");
    const std::string type = type_field && type_field->is_string() ? type_field->as_string() : type_field ? "" : "message";
    if (type == "message") {
      std::string role = string_at(item, "role", at);
      if (role == "developer") role = "system";
      if (role != "user" && role != "system" && role != "assistant")
        throw invalid(at + ".role", "role must be user, system, developer or assistant");
      const json::Value* content = detail::field(item, "content");
      if (content == nullptr) throw invalid(at + ".content", "'content' is required");
      if (role == "assistant") {
        json::Value& m = assistant();
        m.set("content", m.find("content")->as_string() + content_text(*content, true, at + ".content"));
      } else {
        json::Value m = json::Object{};
        m.set("role", role);
        m.set("content", role == "user" ? user_content(*content, at + ".content", images) : json::Value(content_text(*content, false, at + ".content")));
        out.push_back(std::move(m)), assistant_open = false;
      }
    } else if (type == "reasoning") {
      json::Value& m = assistant();
      m.set("reasoning_content", (m.find("reasoning_content") ? m.find("reasoning_content")->as_string() : "") + reasoning_text(item, at));
    } else if (type == "function_call") {
      json::Value& m = assistant();
      json::Value calls = m.find("tool_calls") ? *m.find("tool_calls") : json::Value(json::Array{});
      calls.push_back(tool_call(item, at));
      m.set("tool_calls", std::move(calls));
    } else if (type == "function_call_output") {
      const json::Value* output = detail::field(item, "output");
      if (output == nullptr) throw invalid(at + ".output", "'output' is required");
      json::Value m = message("tool", content_text(*output, false, at + ".output"));
      m.set("tool_call_id", string_at(item, "call_id", at));
      out.push_back(std::move(m)), assistant_open = false;
    } else {
      throw invalid(at + ".type", "input item type '" + type +
                                      "' is not supported (message, function_call, function_call_output, reasoning, item_reference)");
    }
  }
  return out;
}

// Function tools {type: "function", name, description, parameters, strict} as the OpenAI chat
// functions the template renders; built-in tools (web_search, file_search, ...) are refused.
inline json::Value function_tools(const json::Value& list) {
  if (!list.is_array()) throw invalid("tools", "'tools' must be an array");
  json::Value out = json::Array{};
  for (std::size_t i = 0; i < list.size(); ++i) {
    const json::Value& t = list.as_array()[i];
    const std::string at = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) throw invalid(at, "each tool must be an object");
    const std::string& type = string_at(t, "type", at);
    if (type != "function")
      throw invalid(at + ".type", "'" + type + "' tools are not supported: kylin-server offers the model function tools only");
    json::Value fn = json::Object{};
    fn.set("name", string_at(t, "name", at));
    if (const json::Value* d = detail::field(t, "description")) {
      if (!d->is_string()) throw invalid(at + ".description", "'description' must be a string");
      fn.set("description", *d);
    }
    if (const json::Value* p = detail::field(t, "parameters")) {
      if (!p->is_object()) throw invalid(at + ".parameters", "'parameters' must be a JSON schema object");
      fn.set("parameters", *p);
    }
    (void)detail::bool_field(t, "strict", at + ".strict");  // enforced whether strict or not, when a call is forced
    json::Value tool = json::Object{};
    tool.set("type", "function");
    tool.set("function", std::move(fn));
    out.push_back(std::move(tool));
  }
  return out;
}

// "auto" (the default), "none", "required", or {"type": "function", "name"}.
inline ToolChoice tool_choice(const json::Value* tc) {
  ToolChoice out;
  if (tc == nullptr || (tc->is_string() && tc->as_string() == "auto")) return out;
  if (tc->is_string() && tc->as_string() == "none") out.mode = ToolChoiceMode::none;
  else if (tc->is_string() && tc->as_string() == "required") out.mode = ToolChoiceMode::required;
  else if (tc->is_object() && tc->find("type") && tc->find("type")->is_string() && tc->find("type")->as_string() == "function") {
    out.mode = ToolChoiceMode::named;
    out.name = string_at(*tc, "name", "tool_choice");
  } else {
    throw invalid("tool_choice", "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"name\": ...}");
  }
  return out;
}

// text: {"format": {"type": "text" | "json_object" | "json_schema", "name", "schema", "strict"},
// "verbosity": "medium"}.
inline ResponseFormat text_format(const json::Value* text) {
  ResponseFormat out;
  if (text == nullptr) return out;
  if (!text->is_object()) throw invalid("text", "'text' must be an object {\"format\": ...}");
  for (const auto& [key, value] : text->as_object())
    if (key != "format" && key != "verbosity") throw invalid("text." + key, "'text." + key + "' is not supported");
  if (const json::Value* v = detail::field(*text, "verbosity"); v && !(v->is_string() && v->as_string() == "medium"))
    throw invalid("text.verbosity", "'text.verbosity' must be medium: kylin cannot steer an answer's length otherwise");
  const json::Value* f = detail::field(*text, "format");
  if (f == nullptr) return out;
  const std::string& type = string_at(*f, "type", "text.format");
  if (type == "text") return out;
  if (type == "json_object") {
    out.type = ResponseFormat::Type::json_object;
    return out;
  }
  if (type != "json_schema") throw invalid("text.format.type", "'text.format.type' must be text, json_object or json_schema");
  (void)string_at(*f, "name", "text.format");
  (void)detail::bool_field(*f, "strict", "text.format.strict");
  const json::Value* schema = detail::field(*f, "schema");
  if (schema == nullptr || (!schema->is_object() && !schema->is_bool()))
    throw invalid("text.format.schema", "'text.format.schema' (a JSON schema object) is required with json_schema");
  out.type = ResponseFormat::Type::json_schema;
  out.schema = *schema;
  return out;
}

// reasoning: {"effort": none|minimal|low|medium|high, "summary": auto|concise|detailed}; effort
// none or minimal turns Qwen3's thinking off, as reasoning_effort does on chat.
inline void reasoning(const json::Value* r, ResponsesRequest& out) {
  if (r == nullptr) return;
  if (!r->is_object()) throw invalid("reasoning", "'reasoning' must be an object");
  for (const auto& [key, value] : r->as_object())
    if (key != "effort" && key != "summary" && key != "generate_summary") throw invalid("reasoning." + key, "'reasoning." + key + "' is not supported");
  if (const json::Value* e = detail::field(*r, "effort")) {
    const std::string s = e->is_string() ? e->as_string() : "";
    if (s != "none" && s != "minimal" && s != "low" && s != "medium" && s != "high")
      throw invalid("reasoning.effort", "'reasoning.effort' must be none, minimal, low, medium or high");
    out.chat.chat.enable_thinking = s != "none" && s != "minimal";
    out.chat.thinking_chosen = true;
  }
  for (const char* key : {"summary", "generate_summary"})
    if (const json::Value* s = detail::field(*r, key)) {
      if (!s->is_string() || (s->as_string() != "auto" && s->as_string() != "concise" && s->as_string() != "detailed"))
        throw invalid(std::string("reasoning.") + key, "'reasoning.summary' must be auto, concise or detailed");
      out.reasoning_summary = s->as_string();
    }
}

inline void check_fields(const json::Value& body, ResponsesEndpoint endpoint) {
  const auto known = endpoint == ResponsesEndpoint::create ? std::span<const std::string_view>(create_fields)
                                                           : std::span<const std::string_view>(count_fields);
  for (const auto& [key, value] : body.as_object())
    if (std::find(known.begin(), known.end(), key) == known.end())
      throw ApiError(status::bad_request, "'" + shown(key) + "' is not supported by kylin-server's Responses API (docs/SERVER.md lists the fields)",
                     key, "unsupported_parameter");
}

// Accepted fields whose only honest values are the ones kylin has: the rest are refused by name.
inline void refuse_unsupported(const json::Value& body) {
  auto refuse = [](const std::string& param, const std::string& why) {
    throw ApiError(status::bad_request, "'" + param + "' " + why, param, "unsupported_parameter");
  };
  if (const json::Value* t = detail::field(body, "truncation"); t && !(t->is_string() && t->as_string() == "disabled"))
    refuse("truncation", "must be disabled: kylin does not drop earlier input to fit the context");
  if (const json::Value* b = detail::field(body, "background"); b && !(b->is_bool() && !b->as_bool()))
    refuse("background", "must be false: responses run in the foreground");
  if (const json::Value* inc = detail::field(body, "include"); inc && !(inc->is_array() && inc->size() == 0))
    refuse("include", "must be empty: kylin adds no optional output data (encrypted reasoning, logprobs, ...)");
  if (auto top = detail::int_field(body, "top_logprobs"); top && *top != 0) refuse("top_logprobs", "must be 0: the Responses API of kylin has no logprobs");
  if (const json::Value* t = detail::field(body, "service_tier");
      t && !(t->is_string() && (t->as_string() == "auto" || t->as_string() == "default")))
    refuse("service_tier", "must be auto or default: kylin has one tier");
  if (const json::Value* m = detail::field(body, "metadata"); m && !m->is_object()) throw invalid("metadata", "'metadata' must be an object");
  if (const json::Value* so = detail::field(body, "stream_options")) {
    if (!so->is_object()) throw invalid("stream_options", "'stream_options' must be an object");
    for (const auto& [key, value] : so->as_object())
      if (key != "include_obfuscation") refuse("stream_options." + key, "is not supported");
  }
}

}  // namespace responses

inline ResponsesRequest parse_responses_request(std::string_view text, const SamplingParams& defaults, ResponsesEndpoint endpoint,
                                                const responses::ItemLookup& find_item = nullptr) {
  const json::Value body = detail::parse_body(text);
  responses::check_fields(body, endpoint);
  responses::refuse_unsupported(body);
  ResponsesRequest r;
  if (const json::Value* m = detail::field(body, "model")) {
    if (!m->is_string()) throw invalid("model", "'model' must be a string");
    r.chat.model = m->as_string();
  }
  r.instructions = responses::string_at(body, "instructions", "", false);
  r.previous_response_id = responses::string_at(body, "previous_response_id", "", false);
  if (detail::field(body, "previous_response_id") && r.previous_response_id.empty())  // not taken for "none": a client bug
    throw invalid("previous_response_id", "'previous_response_id' is empty: give the id of a stored response, or leave the field out");
  const json::Value* input = detail::field(body, "input");
  if (input == nullptr && r.previous_response_id.empty()) throw invalid("input", "'input' is required");
  r.input = input ? responses::input_messages(*input, r.chat.images, find_item) : json::Value(json::Array{});
  if (endpoint == ResponsesEndpoint::create) {
    detail::parse_sampling(body, r.chat, defaults);  // only temperature and top_p pass check_fields
    if (auto n = detail::count_field(body, "max_output_tokens", 1)) r.chat.max_tokens = *n;
    r.chat.stream = detail::bool_field(body, "stream").value_or(false);
    r.store = detail::bool_field(body, "store").value_or(true);
  }
  responses::reasoning(detail::field(body, "reasoning"), r);
  r.chat.response_format = responses::text_format(detail::field(body, "text"));
  r.chat.tool_choice = responses::tool_choice(detail::field(body, "tool_choice"));
  r.chat.parallel_tool_calls = detail::bool_field(body, "parallel_tool_calls").value_or(true);
  if (const json::Value* t = detail::field(body, "tools")) {
    json::Value list = responses::function_tools(*t);
    r.tools_in_prompt = r.chat.tool_choice.mode != ToolChoiceMode::none && list.size() > 0;
    if (r.tools_in_prompt) r.chat.chat.tools = std::move(list);
  }
  detail::check_tool_choice(r.chat.tool_choice, r.chat.chat.tools, "tool_choice");
  for (const char* key : {"tools", "tool_choice", "text", "reasoning", "metadata", "parallel_tool_calls", "max_output_tokens",
                          "temperature", "top_p", "user", "safety_identifier", "prompt_cache_key", "service_tier", "truncation"})
    if (const json::Value* v = detail::field(body, key)) r.echo.set(key, *v);
  if (auto m = detail::count_field(body, "max_tool_calls", 1)) r.echo.set("max_tool_calls", *m);
  return r;
}

}  // namespace kylin::server
