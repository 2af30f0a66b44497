// OpenAI request bodies parsed and validated into typed requests: every wrong field is a 400
// naming it (ApiError::param), before any work is queued. OpenAI parameters kylin cannot honour
// are refused (request_params.hpp); fields OpenAI does not define are ignored, as OpenAI does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/core/json.hpp"
#include "kylin/generate/sampler_params.hpp"
#include "kylin/generate/session.hpp"
#include "kylin/server/api_error.hpp"
#include "kylin/server/fill_in_middle.hpp"
#include "kylin/server/prefill.hpp"
#include "kylin/server/request_fields.hpp"
#include "kylin/server/request_images.hpp"
#include "kylin/server/request_params.hpp"

namespace kylin::server {

// Fields every generation request has (chat, completions, messages, responses).
struct GenerationRequest {
  std::string model;                       // empty: the request named none (accepted)
  std::int64_t n = 1;                      // choices: n sequences on one prompt, choice i seeded seed + i
  SamplingOverrides sampling;
  std::optional<std::int64_t> max_tokens;  // absent: up to the end of the context
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;              // stream_options.include_usage
  LogprobRequest logprob;                  // logprobs, top_logprobs, logit_bias
  bool speculative = true;                 // false: no speculative decoding for this request (kylin's extension)
  bool ignore_eos = false;                 // EOS and end-of-turn tokens masked: exactly max_tokens (llama.cpp's, vLLM's)
};

struct ChatRequest : GenerationRequest {
  json::Value messages;  // normalized: roles checked; content a string, or text and image items where it has images
  std::vector<RequestImage> images;  // the image parts' data, in the order of the messages' image items
  ChatOptions chat;      // enable_thinking, tools, other chat_template_kwargs
  // The request chose enable_thinking (reasoning_effort, chat_template_kwargs, Anthropic's
  // thinking, the Responses API's reasoning): the server's --reasoning default leaves it.
  bool thinking_chosen = false;
  PromptEnd prompt_end = PromptEnd::generation_prompt;  // vLLM's add_generation_prompt, continue_final_message
  bool parallel_tool_calls = true;  // false: at most one call (enforced when a call is forced)
  ResponseFormat response_format;   // text, or JSON or a GBNF grammar enforced by a constraint
  ToolChoice tool_choice;
};

struct CompletionRequest : GenerationRequest {
  std::string prompt;
  std::vector<int> prompt_tokens;  // set instead of `prompt` when the request sent token ids
  std::string suffix;              // fill in the middle between the prompt and this
  ResponseFormat format;           // text, or a GBNF grammar (`grammar`)
};

// llama.cpp's POST /infill: the code before and after the gap, the text typed so far (`prompt`,
// appended to the prefix) and other files of the project.
struct InfillRequest : GenerationRequest {
  std::string input_prefix, input_suffix, prompt;
  std::vector<FimFile> input_extra;
};

// What a server answers (kylin-server --task): generations (chat, completions), embeddings or
// reranking. One model serves one task; a request for another is a 400 saying how to get it.
enum class ServerTask { generate, embed, rerank };

constexpr std::string_view to_string(ServerTask t) {
  return t == ServerTask::generate ? "generate" : t == ServerTask::embed ? "embed" : "rerank";
}

inline void require_task(ServerTask have, ServerTask need, std::string_view what) {
  if (have == need) return;
  const std::string hint = need == ServerTask::embed ? " and an embedding model"
                           : need == ServerTask::rerank ? " and a reranker model" : "";
  throw ApiError(status::bad_request, std::string(what) + ": this server runs task " + std::string(to_string(have)) +
                                          "; start kylin-server with --task " + std::string(to_string(need)) + hint,
                 "model", "wrong_task");
}

namespace detail {

constexpr std::size_t max_stop_strings = 16;
constexpr std::int64_t max_choices = 128;  // OpenAI's limit on n

inline std::int64_t parse_n(const json::Value& body) {
  const auto n = count_field(body, "n", 1).value_or(1);
  if (n > max_choices) throw invalid("n", "'n' must be between 1 and " + std::to_string(max_choices) + ", got " + std::to_string(n));
  return n;
}

// llama.cpp's `grammar`: a GBNF grammar the answer must follow (compiled in ConstraintFactory).
inline ResponseFormat parse_grammar(const json::Value& body) {
  ResponseFormat out;
  const json::Value* g = field(body, "grammar");
  if (g == nullptr) return out;
  if (!g->is_string()) throw invalid("grammar", "'grammar' must be a GBNF grammar (a string)");
  if (g->as_string().empty()) return out;
  out.type = ResponseFormat::Type::gbnf;
  out.gbnf = g->as_string();
  return out;
}

inline void parse_sampling(const json::Value& body, GenerationRequest& r, const SamplingParams& defaults) {
  auto& s = r.sampling;
  s.temperature = float_field(body, "temperature");
  s.top_p = float_field(body, "top_p");
  s.min_p = float_field(body, "min_p");
  s.presence_penalty = float_field(body, "presence_penalty");
  s.frequency_penalty = float_field(body, "frequency_penalty");
  s.repetition_penalty = float_field(body, "repetition_penalty");
  if (auto k = int_field(body, "top_k")) {
    if (*k < 0 || *k > INT32_MAX) throw invalid("top_k", "'top_k' must be between 0 (off) and " + std::to_string(INT32_MAX) + ", got " + std::to_string(*k));
    s.top_k = static_cast<int>(*k);
  }
  if (auto seed = int_field(body, "seed")) s.seed = static_cast<std::uint64_t>(*seed);
  try {
    (void)apply_overrides(defaults, s);  // range checks, naming the field
  } catch (const Error& e) {
    // The float the check saw may differ from the request's number (float_field): say both.
    const json::Value* given = field(body, e.context());
    const bool rounded = given && given->is_number() && given->as_double() != static_cast<double>(static_cast<float>(given->as_double()));
    throw invalid(e.context(), e.what() + (rounded ? " (the request's " + shortest_text(given->as_double()) + " as a 32-bit float)" : ""));
  }
}

inline void parse_common(const json::Value& body, GenerationRequest& r, const SamplingParams& defaults) {
  if (const json::Value* m = field(body, "model")) {
    if (!m->is_string()) throw invalid("model", "'model' must be a string");
    r.model = m->as_string();
  }
  parse_sampling(body, r, defaults);
  for (const char* name : {"max_completion_tokens", "max_tokens"})
    if (auto n = count_field(body, name, 1)) r.max_tokens = *n;
  if (const json::Value* stop = field(body, "stop")) {
    if (stop->is_string()) {
      r.stop.push_back(stop->as_string());
    } else if (stop->is_array() && stop->size() <= max_stop_strings) {
      for (const auto& s : stop->as_array()) {
        if (!s.is_string()) throw invalid("stop", "'stop' must be a string or an array of strings");
        r.stop.push_back(s.as_string());
      }
    } else {
      throw invalid("stop", "'stop' must be a string or an array of at most 16 strings");
    }
  }
  r.stream = bool_field(body, "stream").value_or(false);
  r.speculative = bool_field(body, "speculative").value_or(true);
  if (const json::Value* so = field(body, "stream_options")) {
    if (!so->is_object()) throw invalid("stream_options", "'stream_options' must be an object");
    r.include_usage = bool_field(*so, "include_usage", "stream_options.include_usage").value_or(false);
  }
  r.n = parse_n(body);
  r.ignore_eos = bool_field(body, "ignore_eos").value_or(false);
  if (r.ignore_eos && !r.max_tokens)
    throw invalid("max_tokens", "'ignore_eos' needs a token limit ('max_tokens'): without end-of-sequence tokens the answer "
                                "would only end with the context");
  refuse_common(body);
}

// OpenAI content: a string, null, or parts: {type: "text", text} joined without separator, and in user
// messages {type: "image_url", image_url: {url, detail} or url}, whose data goes to `images` and which make the
// content the template's list of text and image items. An empty array of parts is refused, as OpenAI and the
// Anthropic path do.
inline json::Value message_content(const json::Value& m, const std::string& where, bool user, std::vector<RequestImage>& images) {
  const json::Value* c = field(m, "content");
  if (c == nullptr) return std::string();
  if (c->is_string()) return c->as_string();
  if (!c->is_array()) throw invalid(where + ".content", "content must be a string or an array of content parts");
  if (c->size() == 0) throw invalid(where + ".content", "content is an empty array; give at least one text part (or a string)");
  json::Value parts = json::Array{};
  std::string text;
  for (std::size_t i = 0; i < c->size(); ++i) {
    const json::Value& part = c->as_array()[i];
    const std::string at = where + ".content[" + std::to_string(i) + "]";
    const json::Value* type = part.find("type");
    const std::string_view kind = type && type->is_string() ? std::string_view(type->as_string()) : std::string_view();
    if (kind == "image_url" && user) {
      const json::Value* iu = part.find("image_url");
      const json::Value* url = iu && iu->is_object() ? iu->find("url") : iu;
      if (url == nullptr || !url->is_string()) throw invalid(at + ".image_url", "expected {\"url\": \"data:image/...;base64,...\"}");
      if (const json::Value* d = iu->is_object() ? iu->find("detail") : nullptr; d && !d->is_null() && !d->is_string())
        throw invalid(at + ".image_url.detail", "'detail' must be a string (auto, low or high)");
      images.push_back(image_from_url(url->as_string(), at + ".image_url.url"));
      if (!text.empty()) parts.push_back(text_item(std::move(text))), text.clear();
      parts.push_back(image_item());
      continue;
    }
    const json::Value* t = part.find("text");
    if (kind != "text" || t == nullptr || !t->is_string())
      throw invalid(at, user ? "content parts must be {\"type\": \"text\", \"text\": ...} or {\"type\": \"image_url\", \"image_url\": ...}"
                             : "only {\"type\": \"text\", \"text\": ...} content parts are supported (images go in user messages)");
    text += t->as_string();
  }
  if (parts.size() == 0) return text;
  if (!text.empty()) parts.push_back(text_item(std::move(text)));
  return parts;
}

inline json::Value check_tool_calls(const json::Value& calls, const std::string& where) {
  if (!calls.is_array()) throw invalid(where, "tool_calls must be an array");
  for (const auto& c : calls.as_array()) {
    const json::Value* fn = c.find("function");
    const json::Value* name = fn ? fn->find("name") : nullptr;
    const json::Value* args = fn ? fn->find("arguments") : nullptr;
    if (name == nullptr || !name->is_string() || (args != nullptr && !args->is_string() && !args->is_object()))
      throw invalid(where, "each tool call needs function.name (a string) and function.arguments (a JSON string)");
  }
  return calls;
}

// `images`: the image parts' data, in order.
inline json::Value normalize_messages(const json::Value* messages, std::vector<RequestImage>& images) {
  if (messages == nullptr) throw invalid("messages", "'messages' is required");
  if (!messages->is_array() || messages->size() == 0) throw invalid("messages", "'messages' must be a non-empty array");
  json::Value out = json::Array{};
  for (std::size_t i = 0; i < messages->size(); ++i) {
    const json::Value& m = messages->as_array()[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw invalid(where, "each message must be an object");
    const json::Value* role = m.find("role");
    if (role == nullptr || !role->is_string()) throw invalid(where + ".role", "'role' is required and must be a string");
    std::string r = role->as_string();
    if (r == "developer") r = "system";  // newer OpenAI clients send system prompts as "developer"
    if (r != "system" && r != "user" && r != "assistant" && r != "tool")
      throw invalid(where + ".role", "unknown role '" + role->as_string() + "' (system, user, assistant, tool)");
    json::Value n = json::Object{};
    n.set("role", r);
    n.set("content", message_content(m, where, r == "user", images));
    if (r == "assistant") {
      if (const json::Value* calls = field(m, "tool_calls")) n.set("tool_calls", check_tool_calls(*calls, where + ".tool_calls"));
      if (const json::Value* rc = field(m, "reasoning_content"); rc && rc->is_string()) n.set("reasoning_content", *rc);
    }
    for (const char* key : {"name", "tool_call_id"})
      if (const json::Value* v = field(m, key); v && v->is_string()) n.set(key, *v);
    out.push_back(std::move(n));
  }
  return out;
}

// reasoning_effort: "none" and "minimal" turn Qwen3's thinking off, any other effort leaves it on;
// chat_template_kwargs.enable_thinking, when given, wins.
inline void parse_chat_options(const json::Value& body, ChatRequest& r) {
  ChatOptions& chat = r.chat;
  if (const json::Value* e = field(body, "reasoning_effort")) {
    if (!e->is_string()) throw invalid("reasoning_effort", "'reasoning_effort' must be a string");
    const std::string& s = e->as_string();
    if (s != "none" && s != "minimal" && s != "low" && s != "medium" && s != "high")
      throw invalid("reasoning_effort", "'reasoning_effort' must be none, minimal, low, medium or high");
    chat.enable_thinking = s != "none" && s != "minimal";
    r.thinking_chosen = true;
  }
  if (const json::Value* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) throw invalid("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    json::Value extra = json::Object{};
    for (const auto& [k, v] : kw->as_object()) {
      if (k == "enable_thinking") {
        if (!v.is_bool()) throw invalid("chat_template_kwargs.enable_thinking", "must be true or false");
        chat.enable_thinking = v.as_bool();
        r.thinking_chosen = true;
      } else if (k == "messages" || k == "tools" || k == "add_generation_prompt" || k == "documents") {
        throw invalid("chat_template_kwargs." + k, "'" + k + "' cannot be set through chat_template_kwargs");
      } else {
        extra.set(k, v);
      }
    }
    chat.extra_kwargs = std::move(extra);
  }
  if (const json::Value* tools = field(body, "tools")) {
    if (!tools->is_array()) throw invalid("tools", "'tools' must be an array");
    for (std::size_t i = 0; i < tools->size(); ++i) {
      const json::Value& t = tools->as_array()[i];
      const json::Value* fn = t.find("function");
      const json::Value* name = fn ? fn->find("name") : nullptr;
      if (!t.is_object() || name == nullptr || !name->is_string())
        throw invalid("tools[" + std::to_string(i) + "]", "each tool must be {\"type\": \"function\", \"function\": {\"name\", ...}}");
    }
    if (tools->size() > 0) chat.tools = *tools;
  }
}

// vLLM's add_generation_prompt (default true) and continue_final_message (default false; the
// final assistant message is continued, prefill.hpp). Both true is refused, as vLLM does.
inline void parse_prompt_end(const json::Value& body, ChatRequest& r) {
  const bool generation_prompt = bool_field(body, "add_generation_prompt").value_or(true);
  const bool continue_final = bool_field(body, "continue_final_message").value_or(false);
  if (continue_final && generation_prompt)
    throw invalid("continue_final_message", "'continue_final_message' continues the final message: it needs 'add_generation_prompt': false");
  r.prompt_end = continue_final ? continuation(r.messages, "messages") : generation_prompt ? PromptEnd::generation_prompt : PromptEnd::closed;
}

inline json::Value parse_body(std::string_view text) {
  json::Value body;
  try {
    body = json::parse(text, "request body", ErrorCategory::request);
  } catch (const Error& e) {
    throw ApiError(status::bad_request, std::string("could not parse the JSON body: ") + e.what());
  }
  if (!body.is_object()) throw ApiError(status::bad_request, "the request body must be a JSON object");
  return body;
}

}  // namespace detail

inline ChatRequest parse_chat_request(std::string_view text, const SamplingParams& defaults) {
  const json::Value body = detail::parse_body(text);
  ChatRequest r;
  r.messages = detail::normalize_messages(body.find("messages"), r.images);
  detail::parse_common(body, r, defaults);
  detail::parse_chat_options(body, r);
  detail::parse_prompt_end(body, r);
  detail::refuse_chat(body);
  detail::parse_chat_logprobs(body, r.logprob);
  r.response_format = detail::parse_response_format(body);
  if (const ResponseFormat g = detail::parse_grammar(body); g.type != ResponseFormat::Type::text) {
    if (r.response_format.type != ResponseFormat::Type::text)
      throw invalid("grammar", "'grammar' and 'response_format' both constrain the answer: give one of them");
    r.response_format = g;
  }
  r.tool_choice = detail::parse_tool_choice(body);
  if (r.tool_choice.mode == ToolChoiceMode::none) r.chat.tools = json::Value();
  detail::check_tool_choice(r.tool_choice, r.chat.tools, "tool_choice");
  r.parallel_tool_calls = detail::bool_field(body, "parallel_tool_calls").value_or(true);
  return r;
}

// prompt: a string or an array of token ids, alone or as the one item of an array. OpenAI's
// batches (several strings or id arrays) are refused: one prompt per request.
inline CompletionRequest parse_completion_request(std::string_view text, const SamplingParams& defaults, int vocab_size) {
  const json::Value body = detail::parse_body(text);
  CompletionRequest r;
  const json::Value* p = detail::field(body, "prompt");
  if (p == nullptr) throw invalid("prompt", "'prompt' is required");
  const bool batch = p->is_array() && p->size() > 0 && (p->as_array()[0].is_string() || p->as_array()[0].is_array());
  if (batch && p->size() > 1)
    throw invalid("prompt", "'prompt' holds " + std::to_string(p->size()) +
                                " prompts; kylin answers one prompt per request (send each in its own request)");
  if (batch) p = &p->as_array()[0];
  if (p->is_string()) {
    r.prompt = p->as_string();
  } else if (p->is_array() && p->size() > 0) {
    for (const auto& id : p->as_array()) {
      if (!id.is_int() || id.as_int() < 0 || id.as_int() >= vocab_size)
        throw invalid("prompt", "'prompt' token ids must be integers in [0, " + std::to_string(vocab_size) + ")");
      r.prompt_tokens.push_back(static_cast<int>(id.as_int()));
    }
  } else {
    throw invalid("prompt", "'prompt' must be a string, an array of one string, or an array of token ids");
  }
  detail::parse_common(body, r, defaults);
  detail::refuse_completion(body);
  if (const json::Value* s = detail::field(body, "suffix")) {
    if (!s->is_string()) throw invalid("suffix", "'suffix' must be a string");
    r.suffix = s->as_string();
  }
  r.format = detail::parse_grammar(body);
  detail::parse_completion_logprobs(body, r.logprob);
  detail::check_logit_bias(r.logprob, vocab_size);
  return r;
}

// llama.cpp's /infill body: input_prefix, input_suffix, input_extra ([{"filename", "text"}]),
// prompt, n_predict (or max_tokens), and the sampling and streaming fields of /v1/completions.
inline InfillRequest parse_infill_request(std::string_view text, const SamplingParams& defaults) {
  const json::Value body = detail::parse_body(text);
  InfillRequest r;
  for (auto [name, out] : {std::pair{"input_prefix", &r.input_prefix}, {"input_suffix", &r.input_suffix}, {"prompt", &r.prompt}})
    if (const json::Value* v = detail::field(body, name)) {
      if (!v->is_string()) throw invalid(name, std::string("'") + name + "' must be a string");
      *out = v->as_string();
    }
  if (const json::Value* extra = detail::field(body, "input_extra")) {
    if (!extra->is_array()) throw invalid("input_extra", "'input_extra' must be an array of {\"filename\", \"text\"}");
    for (std::size_t i = 0; i < extra->size(); ++i) {
      const json::Value& chunk = extra->as_array()[i];
      const std::string at = "input_extra[" + std::to_string(i) + "]";
      const json::Value* t = chunk.is_object() ? detail::field(chunk, "text") : nullptr;
      const json::Value* f = chunk.is_object() ? detail::field(chunk, "filename") : nullptr;
      if (t == nullptr || !t->is_string() || (f != nullptr && !f->is_string()))
        throw invalid(at, "each input_extra chunk must be {\"filename\": string, \"text\": string}");
      r.input_extra.push_back({f ? f->as_string() : "tmp", t->as_string()});
    }
  }
  if (auto n = detail::count_field(body, "n_predict", -1); n && *n >= 0) {
    if (*n < 1) throw invalid("n_predict", "'n_predict' must be at least 1 (or -1: no limit)");
    r.max_tokens = *n;
  }
  detail::parse_common(body, r, defaults);
  if (r.n != 1)  // else the choices' texts would run together into one `content`
    throw ApiError(status::bad_request, "'n' is not supported by /infill: like llama.cpp's, it answers one completion in one 'content' "
                                        "(send one request per completion)", "n", "unsupported_parameter");
  return r;
}

}  // namespace kylin::server
