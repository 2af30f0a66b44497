// The OpenAI parameters beyond sampling: logprobs, logit_bias, tool_choice, response_format, and
// the refusal (400 naming the parameter) of every OpenAI parameter kylin cannot honour.
// docs/SERVER.md keeps the table of accepted, honoured and refused parameters.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/core/json.hpp"
#include "kylin/server/api_error.hpp"
#include "kylin/server/logprobs.hpp"
#include "kylin/server/output_constraint.hpp"
#include "kylin/server/request_fields.hpp"

namespace kylin::server::detail {

constexpr std::size_t max_logit_bias_entries = 1024;  // each costs an add per generated token
constexpr int max_completion_logprobs = 5;           // the legacy API's limit

[[noreturn]] inline void refuse(const std::string& param, const std::string& why) {
  throw ApiError(status::bad_request, "'" + param + "' " + why, param, "unsupported_parameter");
}


// {"<token id>": bias}: ids as decimal strings, biases in [-100, 100] (checked against the
// vocabulary by check_logit_bias once the tokenizer is at hand).
inline void parse_logit_bias(const json::Value& body, LogprobRequest& out) {
  const json::Value* lb = field(body, "logit_bias");
  if (lb == nullptr) return;
  if (!lb->is_object()) throw invalid("logit_bias", "'logit_bias' must be an object mapping token ids to biases");
  if (lb->size() > max_logit_bias_entries)
    throw invalid("logit_bias", "'logit_bias' may hold at most " + std::to_string(max_logit_bias_entries) + " entries");
  for (const auto& [key, value] : lb->as_object()) {
    const bool digits = !key.empty() && key.size() <= 9 && key.find_first_not_of("0123456789") == std::string::npos;
    if (!digits) throw invalid("logit_bias", "'logit_bias' keys must be token ids (decimal strings), got '" + shown(key) + "'");
    if (!value.is_number() || !(value.as_double() >= -100.0 && value.as_double() <= 100.0))
      throw invalid("logit_bias", "'logit_bias' values must be numbers in [-100, 100] (token " + key + ")");
    out.logit_bias.emplace_back(std::stoi(key), static_cast<float>(value.as_double()));
  }
}

// Chat: logprobs true|false, top_logprobs 0..20 (only with logprobs).
inline void parse_chat_logprobs(const json::Value& body, LogprobRequest& out) {
  out.logprobs = bool_field(body, "logprobs").value_or(false);
  if (auto top = int_field(body, "top_logprobs")) {
    if (*top < 0 || *top > max_top_logprobs)
      throw invalid("top_logprobs", "'top_logprobs' must be between 0 and " + std::to_string(max_top_logprobs) + ", got " + std::to_string(*top));
    if (!out.logprobs && *top > 0) throw invalid("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    out.top = static_cast<int>(*top);
  }
  parse_logit_bias(body, out);
}

// Completions: logprobs is the number of alternatives, 0..5 (0: the chosen tokens' only).
inline void parse_completion_logprobs(const json::Value& body, LogprobRequest& out) {
  if (const json::Value* lp = field(body, "logprobs")) {
    if (!lp->is_int() || lp->as_int() < 0 || lp->as_int() > max_completion_logprobs)
      throw invalid("logprobs", "'logprobs' of /v1/completions must be an integer from 0 to 5 (the alternatives per token)");
    out.logprobs = true;
    out.top = static_cast<int>(lp->as_int());
  }
  parse_logit_bias(body, out);
}

inline void check_logit_bias(const LogprobRequest& r, int vocab_size) {
  for (const auto& [id, bias] : r.logit_bias)
    if (id >= vocab_size)
      throw invalid("logit_bias", "'logit_bias' token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                      std::to_string(vocab_size) + ")");
}

// Parameters both endpoints refuse, and the few harmless ones they accept: user, metadata,
// safety_identifier, prompt_cache_key (labels, no effect), store false, service_tier auto/default.
inline void refuse_common(const json::Value& body) {
  if (const json::Value* s = field(body, "store"); s && !(s->is_bool() && !s->as_bool()))
    refuse("store", "must be false: kylin stores no completions");
  if (const json::Value* t = field(body, "service_tier");
      t && !(t->is_string() && (t->as_string() == "auto" || t->as_string() == "default")))
    refuse("service_tier", "must be auto or default: kylin has one tier");
  // Other servers' constrained-decoding extensions: a client sending them expects them enforced.
  for (const char* name : {"guided_json", "guided_regex", "guided_choice", "guided_grammar", "json_schema", "structured_outputs"})
    if (field(body, name) != nullptr)
      refuse(name, "is another server's extension, not supported by kylin-server: use response_format (json_schema) or grammar (GBNF)");
}

// Chat parameters with no meaning for a text-only local model, refused when set.
inline void refuse_chat(const json::Value& body) {
  for (const char* name : {"audio", "prediction", "web_search_options", "functions", "function_call", "verbosity"})
    if (field(body, name) != nullptr) refuse(name, "is not supported by kylin-server");
  if (const json::Value* m = field(body, "modalities")) {
    const bool text_only = m->is_array() && m->size() == 1 && m->as_array()[0].is_string() && m->as_array()[0].as_string() == "text";
    if (!text_only) refuse("modalities", "must be [\"text\"]: kylin generates text only");
  }
}

// /v1/completions parameters kylin cannot honour: echo (of the prompt), best_of other than 1.
// (`suffix` is refused by the service when the tokenizer has no fill-in-the-middle tokens.)
inline void refuse_completion(const json::Value& body) {
  if (const json::Value* e = field(body, "echo"); e && !(e->is_bool() && !e->as_bool()))
    refuse("echo", "is not supported: only the completion is returned");
  if (auto b = int_field(body, "best_of"); b && *b != 1) refuse("best_of", "must be 1: kylin does not generate candidates to rank (n gives several choices)");
}

// response_format: {"type": "text"}, {"type": "json_object"} (any JSON object; with "schema",
// llama.cpp's and vLLM's form, that schema), or {"type": "json_schema", "json_schema": {"name",
// "schema", "strict", "description"}} (the schema enforced whether strict or not; no schema: any
// JSON value). Compiled in ConstraintFactory.
inline ResponseFormat parse_response_format(const json::Value& body) {
  ResponseFormat out;
  const json::Value* rf = field(body, "response_format");
  if (rf == nullptr) return out;
  const json::Value* type = rf->is_object() ? rf->find("type") : nullptr;
  if (type == nullptr || !type->is_string()) throw invalid("response_format", "'response_format' must be {\"type\": ...}");
  const std::string& t = type->as_string();
  if (t == "text") return out;
  if (t == "json_object") {
    out.type = ResponseFormat::Type::json_object;
    if (const json::Value* schema = field(*rf, "schema")) {
      if (!schema->is_object() && !schema->is_bool())
        throw invalid("response_format.schema", "'response_format.schema' must be a JSON schema object");
      out.type = ResponseFormat::Type::json_schema;
      out.schema = *schema;
      out.schema_param = "response_format.schema";
    }
    return out;
  }
  if (t != "json_schema") throw invalid("response_format", "'response_format.type' must be text, json_object or json_schema");
  const json::Value* js = field(*rf, "json_schema");
  if (js == nullptr || !js->is_object())
    throw invalid("response_format.json_schema", "'response_format.json_schema' must be an object {\"name\", \"schema\"}");
  if (const json::Value* name = field(*js, "name"); name && !name->is_string())
    throw invalid("response_format.json_schema.name", "'response_format.json_schema.name' must be a string");
  (void)bool_field(*js, "strict", "response_format.json_schema.strict");
  out.type = ResponseFormat::Type::json_schema;
  if (const json::Value* schema = field(*js, "schema")) {
    if (!schema->is_object() && !schema->is_bool())
      throw invalid("response_format.json_schema.schema", "'response_format.json_schema.schema' must be a JSON schema object");
    out.schema = *schema;
  }
  return out;
}

// The names of the functions in an OpenAI tools list (null: none).
inline std::vector<std::string> tool_names(const json::Value& tools) {
  std::vector<std::string> names;
  if (tools.is_array())
    for (const auto& t : tools.as_array()) names.push_back(t.find("function")->find("name")->as_string());
  return names;
}

// A forced call needs tools, and a named one must be among them.
inline void check_tool_choice(const ToolChoice& choice, const json::Value& tools, const std::string& param) {
  if (!choice.forces_call()) return;
  const std::vector<std::string> names = tool_names(tools);
  if (names.empty()) throw invalid(param, "'" + param + "' forces a tool call, but the request offers no tools");
  if (choice.mode == ToolChoiceMode::named && std::find(names.begin(), names.end(), choice.name) == names.end())
    throw invalid(param, "'" + param + "' names the function '" + choice.name + "', which is not in 'tools'");
}

// tool_choice: "auto" (the default), "none" (tools left out of the prompt, the answer unparsed),
// "required" (one or more calls) or {"type": "function", "function": {"name"}} (that one).
inline ToolChoice parse_tool_choice(const json::Value& body) {
  ToolChoice out;
  const json::Value* tc = field(body, "tool_choice");
  if (tc == nullptr) return out;
  if (tc->is_string() && tc->as_string() == "auto") return out;
  if (tc->is_string() && tc->as_string() == "none") out.mode = ToolChoiceMode::none;
  else if (tc->is_string() && tc->as_string() == "required") out.mode = ToolChoiceMode::required;
  else if (tc->is_object()) {
    const json::Value* type = tc->find("type");
    const json::Value* fn = tc->find("function");
    const json::Value* name = fn != nullptr && fn->is_object() ? fn->find("name") : nullptr;
    if (type == nullptr || !type->is_string() || type->as_string() != "function" || name == nullptr || !name->is_string())
      throw invalid("tool_choice", "a named 'tool_choice' must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
    out.mode = ToolChoiceMode::named;
    out.name = name->as_string();
  } else {
    throw invalid("tool_choice", "'tool_choice' must be none, auto, required or {\"type\": \"function\", ...}");
  }
  return out;
}

}  // namespace kylin::server::detail
