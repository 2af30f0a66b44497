// llama.cpp's native POST /completion body (tools/server/README.md, "POST /completion"): its
// field names mapped onto kylin's request, each field honoured or refused by name; fields
// llama.cpp does not define are ignored, as llama.cpp does. docs/SERVER.md lists what is honoured.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kylin/server/request.hpp"

namespace kylin::server {

inline constexpr std::uint64_t llama_random_seed = 0xFFFFFFFF;  // llama.cpp's LLAMA_DEFAULT_SEED: a random seed

struct LlamaCompletionRequest : GenerationRequest {
  std::vector<std::variant<int, std::string>> prompt;  // token ids and texts, in order
  std::int64_t n_predict = -1;                         // as asked; -1: up to the end of the context
  ResponseFormat format;                               // `grammar` (GBNF) or `json_schema`
  bool return_tokens = false;
  std::vector<std::string> response_fields;  // the whole answer's fields kept ("a/b": a's b, as "a/b")
};

namespace detail {

// llama.cpp's sampling options kylin does not run, accepted only at the value that turns them off.
struct NeutralField {
  std::string_view name;
  double off;
};
inline constexpr NeutralField llama_neutral_fields[] = {
    {"mirostat", 0},        {"typical_p", 1},      {"dynatemp_range", 0}, {"xtc_probability", 0}, {"dry_multiplier", 0},
    {"t_max_predict_ms", 0}, {"n_indent", 0},      {"min_keep", 0},       {"n_cmpl", 1},
    // OpenAI's penalties count the generated tokens; llama.cpp's count a window of the context
    {"presence_penalty", 0}, {"frequency_penalty", 0}};

inline void refuse_llama_unsupported(const json::Value& body) {
  for (const NeutralField& f : llama_neutral_fields)
    if (const std::optional<double> v = number_field(body, f.name); v && *v != f.off)
      refuse(std::string(f.name), "is not supported by kylin-server's /completion (only " + shortest_text(f.off) + ", off)");
  if (const std::optional<double> sigma = number_field(body, "top_n_sigma"); sigma && *sigma > 0)
    refuse("top_n_sigma", "is not supported by kylin-server's /completion (only <= 0, off)");
  for (const char* name : {"post_sampling_probs", "timings_per_token", "return_progress"})
    if (bool_field(body, name).value_or(false)) refuse(name, "is not supported by kylin-server's /completion (only false)");
  if (const json::Value* l = field(body, "lora"); l && !(l->is_array() && l->size() == 0)) refuse("lora", "is not supported: kylin has no LoRA adapters");
  if (field(body, "samplers") != nullptr) refuse("samplers", "is not supported: kylin applies its samplers in one fixed order");
  if (auto slot = int_field(body, "id_slot"); slot && *slot != -1) refuse("id_slot", "must be -1: kylin chooses the slot (the longest cached prefix)");
}

// A prompt as llama.cpp reads one (tokenize_input_prompts): a string; token ids, or ids and
// strings mixed, in one sequence; or an array of prompts (strings alone are several prompts),
// of which kylin takes one.
inline std::vector<std::variant<int, std::string>> llama_prompt(const json::Value* p, int vocab_size) {
  if (p == nullptr) throw invalid("prompt", "'prompt' is required");
  const auto sequence = [](const json::Value& v) {
    if (!v.is_array() || v.size() == 0) return false;
    bool ids = false;
    for (const auto& x : v.as_array()) {
      if (!x.is_int() && !x.is_string()) return false;
      ids = ids || x.is_int();
    }
    return ids;
  };
  if (p->is_array() && p->size() == 0) throw invalid("prompt", "'prompt' is an empty array");
  if (p->is_array() && !sequence(*p)) {
    if (p->size() != 1)
      throw invalid("prompt", "'prompt' holds " + std::to_string(p->size()) +
                                  " prompts; kylin answers one prompt per request (send each in its own request)");
    p = &p->as_array()[0];
  }
  if (p->is_object()) throw invalid("prompt", "'prompt' objects (multimodal_data) are not supported: kylin reads text only");
  std::vector<std::variant<int, std::string>> out;
  if (p->is_string()) {
    out.emplace_back(p->as_string());
    return out;
  }
  if (!sequence(*p)) throw invalid("prompt", "'prompt' must be a string or a non-empty array of token ids (and strings)");
  for (const auto& part : p->as_array()) {
    if (part.is_string()) out.emplace_back(part.as_string());
    else if (part.as_int() >= 0 && part.as_int() < vocab_size) out.emplace_back(static_cast<int>(part.as_int()));
    else throw invalid("prompt", "'prompt' token ids must be in [0, " + std::to_string(vocab_size) + ")");
  }
  return out;
}

// logit_bias: OpenAI's object, or llama.cpp's [[id, bias], ...] where a bias of false bans the token.
inline void llama_logit_bias(const json::Value& body, LogprobRequest& out, int vocab_size) {
  const json::Value* lb = field(body, "logit_bias");
  if (lb == nullptr || lb->is_object()) return parse_logit_bias(body, out);
  if (!lb->is_array() || lb->size() > max_logit_bias_entries)
    throw invalid("logit_bias", "'logit_bias' must be an object or an array of at most " + std::to_string(max_logit_bias_entries) + " [id, bias] pairs");
  for (const auto& pair : lb->as_array()) {
    const json::Value* id = pair.is_array() && pair.size() == 2 ? &pair.as_array()[0] : nullptr;
    const json::Value* bias = id ? &pair.as_array()[1] : nullptr;
    if (id && id->is_string()) throw invalid("logit_bias", "'logit_bias' entries name tokens by id; strings are not supported");
    if (!id || !id->is_int() || id->as_int() < 0 || id->as_int() >= vocab_size)
      throw invalid("logit_bias", "'logit_bias' entries must be [token id in [0, " + std::to_string(vocab_size) + "), bias]");
    if (bias->is_bool() && !bias->as_bool()) out.masked.push_back(static_cast<int>(id->as_int()));
    else if (bias->is_number() && bias->as_double() >= -100.0 && bias->as_double() <= 100.0)
      out.logit_bias.emplace_back(static_cast<int>(id->as_int()), static_cast<float>(bias->as_double()));
    else throw invalid("logit_bias", "'logit_bias' biases must be numbers in [-100, 100] or false (never sample)");
  }
}

// The sampling fields under OpenAI's names for parse_sampling: repeat_penalty over the whole
// context (repeat_last_n -1) is transformers' repetition_penalty; a temperature <= 0 is greedy and
// seed -1 random, as in llama.cpp.
inline json::Value llama_sampling_body(const json::Value& body) {
  json::Value b = json::Object{};
  for (const char* name : {"temperature", "top_k", "top_p", "min_p", "seed"})
    if (const json::Value* v = field(body, name)) b.set(name, *v);
  if (const std::optional<double> t = number_field(body, "temperature"); t && *t < 0) b.set("temperature", 0.0);
  if (auto seed = int_field(body, "seed"); seed && (*seed == -1 || static_cast<std::uint64_t>(*seed) == llama_random_seed))
    b.set("seed", json::Value());
  if (const std::optional<double> rp = number_field(body, "repeat_penalty"); rp && *rp != 1) {
    if (int_field(body, "repeat_last_n").value_or(64) != -1)
      refuse("repeat_penalty", "over the last repeat_last_n tokens is not supported: kylin's repetition penalty counts the whole "
                               "context (send \"repeat_last_n\": -1)");
    b.set("repetition_penalty", *rp);
  }
  return b;
}

}  // namespace detail

inline LlamaCompletionRequest parse_llama_completion_request(std::string_view text, const SamplingParams& defaults, int vocab_size) {
  const json::Value body = detail::parse_body(text);
  LlamaCompletionRequest r;
  r.prompt = detail::llama_prompt(detail::field(body, "prompt"), vocab_size);
  detail::refuse_llama_unsupported(body);
  if (const json::Value* m = detail::field(body, "model")) {
    if (!m->is_string()) throw invalid("model", "'model' must be a string");
    r.model = m->as_string();
  }
  detail::parse_sampling(detail::llama_sampling_body(body), r, defaults);
  for (const char* name : {"n_predict", "max_tokens"})  // n_predict first, as llama.cpp reads them
    if (auto n = detail::int_field(body, name)) {
      if (*n == 0 || *n < -1)
        throw invalid(name, std::string("'") + name + "' must be -1 (no limit) or at least 1 (0, evaluating the prompt only, is not supported)");
      r.n_predict = *n;
      if (*n > 0) r.max_tokens = *n;
      break;
    }
  if (const json::Value* stop = detail::field(body, "stop")) {
    if (!stop->is_array() || stop->size() > detail::max_stop_strings) throw invalid("stop", "'stop' must be an array of at most 16 strings");
    for (const auto& s : stop->as_array()) {
      if (!s.is_string()) throw invalid("stop", "'stop' must be an array of strings");
      if (!s.as_string().empty()) r.stop.push_back(s.as_string());
    }
  }
  r.stream = detail::bool_field(body, "stream").value_or(false);
  (void)detail::bool_field(body, "cache_prompt");  // kylin always reuses cached prefixes: the same answers, bit for bit
  r.ignore_eos = detail::bool_field(body, "ignore_eos").value_or(false);
  if (r.ignore_eos && !r.max_tokens) throw invalid("n_predict", "'ignore_eos' needs a token limit ('n_predict')");
  r.return_tokens = detail::bool_field(body, "return_tokens").value_or(false);
  if (auto n = detail::int_field(body, "n_probs"); n && *n != 0) {
    if (*n < 0 || *n > max_top_logprobs) throw invalid("n_probs", "'n_probs' must be between 0 and " + std::to_string(max_top_logprobs));
    r.logprob.logprobs = true;
    r.logprob.top = static_cast<int>(*n);
  }
  detail::llama_logit_bias(body, r.logprob, vocab_size);
  detail::check_logit_bias(r.logprob, vocab_size);
  r.format = detail::parse_grammar(body);
  if (const json::Value* schema = detail::field(body, "json_schema")) {
    if (r.format.type != ResponseFormat::Type::text) throw invalid("json_schema", "'grammar' and 'json_schema' both constrain the answer: give one");
    if (!schema->is_object() && !schema->is_bool()) throw invalid("json_schema", "'json_schema' must be a JSON schema object");
    r.format.type = ResponseFormat::Type::json_schema;
    r.format.schema = *schema;
    r.format.schema_param = "json_schema";
  }
  if (const json::Value* f = detail::field(body, "response_fields")) {
    if (!f->is_array()) throw invalid("response_fields", "'response_fields' must be an array of field names");
    for (const auto& name : f->as_array()) {
      if (!name.is_string()) throw invalid("response_fields", "'response_fields' must be an array of field names");
      r.response_fields.push_back(name.as_string());
    }
  }
  return r;
}

}  // namespace kylin::server
