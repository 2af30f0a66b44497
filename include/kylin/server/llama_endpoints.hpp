// llama.cpp's native endpoints beside the OpenAI ones (its tools/server/README.md): POST /completion
// (`prompt`, `n_predict`, ... -> {"content", "tokens", "stop", "stop_type", "stopping_word",
// "timings", "generation_settings", "completion_probabilities", ...}; streamed: one such object per
// piece with stop false, then the whole one with stop true, no [DONE]) and GET /props (the
// defaults in force: sampling, context, slots, template and --chat-template-kwargs/--reasoning).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/server/anthropic_stream.hpp"
#include "kylin/server/front.hpp"
#include "kylin/server/llama_request.hpp"
#include "kylin/version.hpp"

namespace kylin::server {

namespace llama {

// The ids a job emitted, handed out with the chunks that bring their text (on_token and on_piece
// run on the inference thread).
struct EmittedTokens {
  std::vector<int> ids;
  std::size_t taken = 0;
  json::Value take() {
    json::Value out = json::Array{};
    for (; taken < ids.size(); ++taken) out.push_back(ids[taken]);
    return out;
  }
};

// llama.cpp's sampling settings object (its `generation_settings` and /props' params), floats as
// the shortest decimals of the floats the sampler holds.
inline json::Value sampling_settings(const SamplingParams& s, std::optional<std::uint64_t> seed) {
  json::Value p = json::Object{};
  p.set("seed", static_cast<std::int64_t>(seed.value_or(llama_random_seed)));
  p.set("temperature", detail::compact(s.temperature));
  p.set("top_k", s.top_k);
  p.set("top_p", detail::compact(s.top_p));
  p.set("min_p", detail::compact(s.min_p));
  p.set("repeat_penalty", detail::compact(s.repetition_penalty));
  p.set("repeat_last_n", -1);  // kylin's repetition penalty counts the whole context
  p.set("presence_penalty", 0.0);
  p.set("frequency_penalty", 0.0);
  return p;
}

// completion_probabilities: [{id, token, logprob, bytes, top_logprobs: [{id, token, logprob, bytes}]}].
inline json::Value probabilities(const Tokenizer& t, std::span<const TokenLogprob> entries) {
  const auto one = [&t](int id, float logprob) {
    json::Value o = json::Object{};
    o.set("id", id);
    o.set("token", logprob_token_text(t, id));
    o.set("logprob", static_cast<double>(logprob));
    o.set("bytes", detail::token_bytes_json(t, id));
    return o;
  };
  json::Value out = json::Array{};
  for (const TokenLogprob& e : entries) {
    json::Value o = one(e.id, e.logprob), top = json::Array{};
    for (int j = 0; j < e.n_top; ++j) top.push_back(one(e.top[static_cast<std::size_t>(j)].first, e.top[static_cast<std::size_t>(j)].second));
    o.set("top_logprobs", std::move(top));
    out.push_back(std::move(o));
  }
  return out;
}

// What the answer repeats of its request and prompt.
struct CompletionContext {
  ResponseHead head;
  std::shared_ptr<const LlamaCompletionRequest> request;
  json::Value settings;  // generation_settings
  std::string prompt;    // the prompt's ids decoded
  std::shared_ptr<LogprobRecorder> logprobs;  // null: no n_probs
  std::shared_ptr<EmittedTokens> tokens;
};

// /completion's objects; raw text, reasoning included, in the order it came (as /v1/completions).
class CompletionAnswer final : public Answer {
 public:
  CompletionAnswer(bool stream, CompletionContext c, const Tokenizer& tokenizer)
      : Answer(stream), c_(std::move(c)), tokenizer_(tokenizer) {}

  std::string piece(std::size_t, const Piece& p) override {
    text_ += p.text;
    if (!stream) return {};
    json::Value chunk = json::Object{};
    chunk.set("index", 0);
    chunk.set("content", std::string(p.text));
    chunk.set("tokens", c_.tokens->take());
    chunk.set("stop", false);
    if (c_.logprobs && c_.logprobs->logprobs()) chunk.set("completion_probabilities", probabilities(tokenizer_, c_.logprobs->take()));
    return sse(chunk);
  }

  std::string finish(std::span<const Generation> all) override {
    json::Value r = result(all.front());
    if (stream) return sse(r);
    return json::dump(c_.request->response_fields.empty() ? r : only(r, c_.request->response_fields));
  }

 private:
  // Streamed, the last object carries the ids (and probabilities) whose text never came out: the
  // tail of a stop string, or an incomplete character at the end.
  json::Value result(const Generation& g) {
    const StopReason why = g.stop_reason;
    json::Value out = json::Object{};
    out.set("index", 0);
    out.set("content", stream ? std::string() : text_);
    json::Value ids = json::Array{};
    if (stream) ids = c_.tokens->take();
    else if (c_.request->return_tokens)
      for (int id : g.tokens) ids.push_back(id);
    out.set("tokens", std::move(ids));
    out.set("stop", true);
    out.set("model", c_.head.model);
    out.set("tokens_predicted", g.stats.generated_tokens);
    out.set("tokens_evaluated", g.stats.prompt_tokens);
    out.set("generation_settings", c_.settings);
    out.set("prompt", c_.prompt);
    out.set("has_new_line", text_.find('\n') != std::string::npos);
    out.set("truncated", why == StopReason::context_full);
    out.set("stop_type", why == StopReason::stop_string                                      ? "word"
                         : why == StopReason::max_tokens || why == StopReason::context_full ? "limit"
                         : why == StopReason::eos                                           ? "eos"
                                                                                            : "none");
    const auto word = why == StopReason::stop_string ? anthropic::ending(why, false, tokenizer_.decode(g.tokens), c_.request->stop).stop_sequence
                                                     : std::nullopt;
    out.set("stopping_word", word.value_or(""));
    out.set("tokens_cached", g.stats.cached_tokens);
    out.set("timings", timings(g.stats));
    if (c_.logprobs && c_.logprobs->logprobs())
      out.set("completion_probabilities", probabilities(tokenizer_, stream ? c_.logprobs->take() : c_.logprobs->all()));
    return out;
  }

  // response_fields: the listed fields only; "a/b" takes a's field b, under the name "a/b".
  static json::Value only(const json::Value& r, const std::vector<std::string>& fields) {
    json::Value out = json::Object{};
    for (const std::string& f : fields) {
      const json::Value* v = &r;
      for (std::size_t from = 0; v != nullptr && from <= f.size();) {
        const std::size_t slash = std::min(f.find('/', from), f.size());
        v = v->find(std::string_view(f).substr(from, slash - from));
        from = slash + 1;
      }
      if (v != nullptr) out.set(f, *v);
    }
    return out;
  }

  CompletionContext c_;
  const Tokenizer& tokenizer_;
  std::string text_;  // the answer so far
};

}  // namespace llama

inline Reply Service::props() const {
  json::Value settings = json::Object{};
  settings.set("n_ctx", scheduler_.context_length());
  json::Value params = llama::sampling_settings(engine_.default_sampling(), engine_.default_sampling().seed);
  params.set("n_predict", -1);
  settings.set("params", std::move(params));
  json::Value out = json::Object{};
  out.set("default_generation_settings", std::move(settings));
  out.set("total_slots", scheduler_.slots());
  out.set("model_alias", model_id());
  out.set("model_path", engine_.dir().string());
  out.set("chat_template", engine_.has_chat_template() ? engine_.chat_template().source() : std::string());
  const json::Value defaults = options_.template_defaults.describe();
  for (const auto& [k, v] : defaults.as_object()) out.set(k, v);
  json::Value modalities = json::Object{};
  modalities.set("vision", false);
  modalities.set("audio", false);
  out.set("modalities", std::move(modalities));
  out.set("build_info", "kylin " + std::string(version));
  return {status::ok, json::dump(out)};
}

inline Started Service::llama_completion(std::string_view text, const std::shared_ptr<ClientWatch>& watch) {
  return guarded(error_body, [&]() -> Started {
    require_task(options_.task, ServerTask::generate, "/completion");
    const Tokenizer& t = engine_.tokenizer();
    auto r = std::make_shared<LlamaCompletionRequest>(parse_llama_completion_request(text, engine_.default_sampling(), t.vocab_size()));
    check_model(r->model);
    std::size_t bytes = 0;
    for (const auto& part : r->prompt) bytes += std::holds_alternative<std::string>(part) ? std::get<std::string>(part).size() : 0;
    check_prompt_bytes(bytes, "prompt");
    PromptIds prompt;
    for (const auto& part : r->prompt) {
      if (std::holds_alternative<int>(part)) {
        prompt.ids.push_back(std::get<int>(part));
        continue;
      }
      const PromptIds ids = text_prompt(std::get<std::string>(part), "prompt");
      prompt.ids.insert(prompt.ids.end(), ids.ids.begin(), ids.ids.end());
    }
    OutputRules rules;
    rules.format = r->format;
    rules.schema_param = r->format.schema_param ? r->format.schema_param : "grammar";
    json::Value settings = llama::sampling_settings(apply_overrides(engine_.default_sampling(), r->sampling), r->sampling.seed);
    const std::string prompt_text = t.decode(prompt.ids);
    Prepared p = prepare(*r, std::move(prompt), rules, new_id("cmpl"), "prompt");
    settings.set("n_ctx", scheduler_.context_length());
    settings.set("n_predict", r->n_predict);
    settings.set("n_probs", r->logprob.top);
    json::Value stops = json::Array{};
    for (const auto& s : r->stop) stops.push_back(s);
    settings.set("stop", std::move(stops));
    settings.set("ignore_eos", r->ignore_eos);
    settings.set("stream", r->stream);
    settings.set("grammar", r->format.type == ResponseFormat::Type::gbnf ? r->format.gbnf : std::string());
    settings.set("model", p.head.model);
    // the ids of each streamed chunk, beside what on_token already does (logprobs)
    auto tokens = std::make_shared<llama::EmittedTokens>();
    Job& job = *p.jobs.front();
    job.options.on_token = [tokens, before = std::move(job.options.on_token)](int id) {
      if (before) before(id);
      tokens->ids.push_back(id);
    };
    llama::CompletionContext c{.head = p.head, .request = r, .settings = std::move(settings), .prompt = prompt_text,
                               .logprobs = p.logprobs.front(), .tokens = tokens};
    auto out = std::make_shared<llama::CompletionAnswer>(r->stream, std::move(c), t);
    return answer(std::move(p), std::move(out), watch);
  });
}

}  // namespace kylin::server
