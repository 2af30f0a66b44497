// Service::chat, Service::complete and Service::infill: POST /v1/chat/completions,
// /v1/completions and llama.cpp's /infill, as adapters over the front (server/front.hpp). A
// streamed chunk carries its choice's `index` and the logprobs of the tokens whose text it brings;
// tokens whose text is held back (a tool call, a possible stop string) have theirs on a later
// chunk, at the latest on the one with the finish reason.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/server/front.hpp"

namespace kylin::server {

// How a chat answer is shaped: tool calls parsed (at most max_calls of them) in `dialect`.
struct ChatShape {
  bool tools = false;
  std::size_t max_calls = any_number_of_calls;
  ToolCallDialect dialect{};
};

using Recorders = std::vector<std::shared_ptr<LogprobRecorder>>;  // [choices] null: no logprobs

// chat.completion and chat.completion.chunk for every choice.
class ChatAnswer final : public Answer {
 public:
  ChatAnswer(bool stream, ResponseHead head, ChatShape shape, Recorders logprobs, bool usage, const Tokenizer& tokenizer)
      : Answer(stream), head_(std::move(head)), shape_(std::move(shape)), logprobs_(std::move(logprobs)), usage_(usage),
        tokenizer_(tokenizer), calls_(logprobs_.size(), ToolCallStream(shape_.dialect, shape_.max_calls)) {}

  std::string start() override {
    std::string out;
    for (std::size_t i = 0; i < calls_.size(); ++i) {
      json::Value role = json::Object{};
      role.set("role", "assistant");
      role.set("content", "");
      out += sse(chat_chunk(head_, std::move(role), std::nullopt, {}, index(i)));
    }
    return out;
  }

  std::string piece(std::size_t i, const Piece& p) override {
    if (!stream) return {};
    if (p.channel == Channel::reasoning || !shape_.tools) {
      const char* key = p.channel == Channel::reasoning ? "reasoning_content" : "content";
      return p.text.empty() ? std::string() : sse(chat_chunk(head_, delta(key, std::string(p.text)), std::nullopt, pending(i), index(i)));
    }
    return chunks(i, calls_[i].push(p.text));
  }

  std::string end(std::size_t i, const Generation& g) override {
    std::string out = shape_.tools ? chunks(i, calls_[i].finish()) : std::string();
    json::Value last = chat_chunk(head_, json::Object{}, finish_reason(g.stop_reason, calls_[i].calls() > 0), pending(i), index(i));
    last.set("timings", timings(g.stats));
    return out + sse(last);
  }

  std::string finish(std::span<const Generation> all) override {
    if (stream) return (usage_ ? sse(usage_chunk(head_, "chat.completion.chunk", combined_stats(all))) : "") + std::string(sse_done);
    json::Value choices = json::Array{};
    for (std::size_t i = 0; i < all.size(); ++i) {
      json::Value lp;
      if (logprobs_[i] && logprobs_[i]->logprobs()) lp = chat_logprobs(tokenizer_, logprobs_[i]->all());
      choices.push_back(chat_choice(index(i), all[i], shape_.tools, std::move(lp), shape_.max_calls, shape_.dialect));
    }
    return json::dump(chat_completion(head_, std::move(choices), combined_stats(all)));
  }

 private:
  static std::int64_t index(std::size_t i) { return static_cast<std::int64_t>(i); }
  // The logprobs of choice i's tokens not yet sent; null when none are asked for or waiting.
  json::Value pending(std::size_t i) {
    LogprobRecorder* r = logprobs_[i].get();
    if (r == nullptr || !r->logprobs()) return {};
    const auto entries = r->take();
    return entries.empty() ? json::Value() : chat_logprobs(tokenizer_, entries);
  }

  // A step of choice i's answer: a content chunk, then one tool_calls chunk per call it moves.
  std::string chunks(std::size_t i, const ToolCallStep& step) {
    std::string out;
    if (!step.content.empty()) out += sse(chat_chunk(head_, delta("content", step.content), std::nullopt, pending(i), index(i)));
    for (const ToolCallDelta& d : step.deltas)
      out += sse(chat_chunk(head_, delta("tool_calls", json::Array{tool_call_delta_json(d)}), std::nullopt, pending(i), index(i)));
    return out;
  }

  ResponseHead head_;
  ChatShape shape_;
  Recorders logprobs_;
  bool usage_;
  const Tokenizer& tokenizer_;
  std::vector<ToolCallStream> calls_;  // [choices]
};

// text_completion objects and chunks. Raw completions return all generated text, reasoning
// included, in the order it came.
class CompletionAnswer final : public Answer {
 public:
  CompletionAnswer(bool stream, ResponseHead head, Recorders logprobs, bool usage, const Tokenizer& tokenizer)
      : Answer(stream), head_(std::move(head)), logprobs_(std::move(logprobs)), usage_(usage), tokenizer_(tokenizer),
        texts_(logprobs_.size()), offsets_(logprobs_.size(), 0) {}

  std::string piece(std::size_t i, const Piece& p) override {
    if (!stream) {
      texts_[i] += p.text;
      return {};
    }
    return sse(text_chunk(head_, std::string(p.text), std::nullopt, pending(i), static_cast<std::int64_t>(i)));
  }

  std::string end(std::size_t i, const Generation& g) override {
    json::Value last = text_chunk(head_, "", finish_reason(g.stop_reason, false), pending(i), static_cast<std::int64_t>(i));
    last.set("timings", timings(g.stats));
    return sse(last);
  }

  std::string finish(std::span<const Generation> all) override {
    if (stream) return (usage_ ? sse(usage_chunk(head_, "text_completion", combined_stats(all))) : "") + std::string(sse_done);
    json::Value choices = json::Array{};
    for (std::size_t i = 0; i < all.size(); ++i) {
      json::Value lp;
      std::int64_t offset = 0;
      if (logprobs_[i] && logprobs_[i]->logprobs()) lp = completion_logprobs(tokenizer_, logprobs_[i]->all(), offset);
      choices.push_back(text_choice(texts_[i], finish_reason(all[i].stop_reason, false), std::move(lp), static_cast<std::int64_t>(i)));
    }
    return json::dump(text_completion(head_, std::move(choices), combined_stats(all)));
  }

 private:
  json::Value pending(std::size_t i) {
    LogprobRecorder* r = logprobs_[i].get();
    if (r == nullptr || !r->logprobs()) return {};
    const auto entries = r->take();
    return entries.empty() ? json::Value() : completion_logprobs(tokenizer_, entries, offsets_[i]);
  }

  ResponseHead head_;
  Recorders logprobs_;
  bool usage_;
  const Tokenizer& tokenizer_;
  std::vector<std::string> texts_;     // [choices] whole answers: the text so far
  std::vector<std::int64_t> offsets_;  // [choices] text_offset of the next streamed token
};

// llama.cpp's /completion shape, which /infill answers in: {"content", "stop", "stop_type",
// "tokens_predicted", "tokens_evaluated", "timings", ...}; streamed, one such object per piece
// (stop false) and a last one with stop true.
class InfillAnswer final : public Answer {
 public:
  InfillAnswer(bool stream, ResponseHead head) : Answer(stream), head_(std::move(head)) {}

  std::string piece(std::size_t, const Piece& p) override {
    if (!stream) {
      text_ += p.text;
      return {};
    }
    json::Value chunk = json::Object{};
    chunk.set("content", std::string(p.text));
    chunk.set("stop", false);
    return sse(chunk);
  }

  std::string finish(std::span<const Generation> all) override { return stream ? sse(result(all.front(), "")) : json::dump(result(all.front(), text_)); }

 private:
  json::Value result(const Generation& g, std::string content) const {
    json::Value out = json::Object{};
    out.set("content", std::move(content));
    out.set("model", head_.model);
    out.set("stop", true);
    out.set("stop_type", g.stop_reason == StopReason::stop_string ? "word"
                         : g.stop_reason == StopReason::max_tokens || g.stop_reason == StopReason::context_full ? "limit" : "eos");
    out.set("tokens_predicted", g.stats.generated_tokens);
    out.set("tokens_evaluated", g.stats.prompt_tokens);
    out.set("tokens_cached", g.stats.cached_tokens);
    out.set("timings", timings(g.stats));
    return out;
  }

  ResponseHead head_;
  std::string text_;
};

namespace detail {

// What a chat request demands of its answer, for ConstraintFactory; forced calls in `format`.
inline OutputRules chat_rules(const ChatRequest& r, ToolCallFormat format) {
  OutputRules rules{.format = r.response_format,
                    .tool_choice = r.tool_choice,
                    .tools = &r.chat.tools,
                    .max_calls = r.parallel_tool_calls ? any_number_of_calls : 1,
                    .thinking = r.chat.enable_thinking,
                    .tool_format = format};
  if (r.response_format.type == ResponseFormat::Type::gbnf) rules.schema_param = "grammar";
  if (r.response_format.schema_param) rules.schema_param = r.response_format.schema_param;
  return rules;
}

}  // namespace detail

inline Started Service::chat(std::string_view text, const std::shared_ptr<ClientWatch>& watch) {
  return guarded(error_body, [&]() -> Started {
    require_task(options_.task, ServerTask::generate, "/v1/chat/completions");
    ChatRequest r = parse_chat_request(text, engine_.default_sampling());
    check_model(r.model);
    apply_chat_defaults(r);
    detail::check_logit_bias(r.logprob, engine_.tokenizer().vocab_size());
    const ToolCallFormat format = template_tool_format(engine_);
    const OutputRules rules = detail::chat_rules(r, format);
    Prepared p = prepare(r, chat_prompt(r, rules, "messages"), rules, new_id("chatcmpl"), "messages");
    const ChatShape shape{.tools = !r.chat.tools.is_null(), .max_calls = rules.max_calls, .dialect = {format, r.chat.tools}};
    auto out = std::make_shared<ChatAnswer>(r.stream, p.head, shape, p.logprobs, r.include_usage, engine_.tokenizer());
    return answer(std::move(p), std::move(out), watch);
  });
}

inline Started Service::complete(std::string_view text, const std::shared_ptr<ClientWatch>& watch) {
  return guarded(error_body, [&]() -> Started {
    require_task(options_.task, ServerTask::generate, "/v1/completions");
    CompletionRequest r = parse_completion_request(text, engine_.default_sampling(), engine_.tokenizer().vocab_size());
    check_model(r.model);
    PromptIds prompt;
    if (r.prompt_tokens.empty()) prompt = text_prompt(r.prompt, "prompt");
    else prompt.ids = std::move(r.prompt_tokens);
    if (!r.suffix.empty()) {
      const auto fim = fim_tokens(engine_.tokenizer());
      if (!fim)
        throw invalid("suffix", "'suffix' (fill in the middle) needs a model whose tokenizer has <|fim_prefix|>, <|fim_suffix|> and "
                                "<|fim_middle|>; this one has not");
      check_prompt_bytes(r.prompt.size() + r.suffix.size(), "suffix");
      prompt.ids = fim_prompt(engine_.tokenizer(), *fim, prompt.ids, r.suffix, options_.content_tokens == ContentTokens::plain);
    }
    OutputRules rules;
    rules.format = r.format;
    rules.schema_param = "grammar";
    Prepared p = prepare(r, std::move(prompt), rules, new_id("cmpl"), "prompt");
    auto out = std::make_shared<CompletionAnswer>(r.stream, p.head, p.logprobs, r.include_usage, engine_.tokenizer());
    return answer(std::move(p), std::move(out), watch);
  });
}

// The field of the FIM part (what is not trimmed) that errors about its size name: the largest.
inline const char* largest_infill_field(const InfillRequest& r) {
  if (r.prompt.size() > std::max(r.input_prefix.size(), r.input_suffix.size())) return "prompt";
  return r.input_suffix.size() > r.input_prefix.size() ? "input_suffix" : "input_prefix";
}

// /infill's prompt: the FIM part whole (a 400 naming its largest field when it cannot fit), and
// input_extra trimmed to the context it leaves beside the answer's room: max_tokens (n_predict),
// or a quarter of the context when the request sets none (infill_context).
inline std::vector<int> Service::infill_ids(const InfillRequest& r, const FimTokens& fim) const {
  const char* field = largest_infill_field(r);
  check_prompt_bytes(r.input_prefix.size() + r.prompt.size() + r.input_suffix.size(), field);
  const bool plain = options_.content_tokens == ContentTokens::plain;
  const std::vector<int> middle = infill_fim(engine_.tokenizer(), fim, r.input_prefix, r.prompt, r.input_suffix, plain);
  const std::int64_t ctx = scheduler_.context_length(), n = static_cast<std::int64_t>(middle.size());
  if (n >= ctx)
    throw ApiError(status::bad_request, "input_prefix, prompt and input_suffix take " + std::to_string(n) + " tokens with the FIM tokens; this model's context is " +
                                            std::to_string(ctx) + " (input_extra is trimmed to fit, these are not)",
                   field, "context_length_exceeded");
  const std::int64_t room = r.max_tokens.value_or(ctx / 4);
  const std::size_t bytes_per_token = std::max<std::size_t>(1, max_prompt_bytes_ / static_cast<std::size_t>(ctx));  // see max_prompt_bytes
  std::vector<int> ids = infill_context(engine_.tokenizer(), fim, r.input_extra, plain, ContextBudget{ctx - n - room, bytes_per_token});
  ids.insert(ids.end(), middle.begin(), middle.end());
  return ids;
}

inline Started Service::infill(std::string_view text, const std::shared_ptr<ClientWatch>& watch) {
  return guarded(error_body, [&]() -> Started {
    require_task(options_.task, ServerTask::generate, "/infill");
    InfillRequest r = parse_infill_request(text, engine_.default_sampling());
    check_model(r.model);
    const auto fim = fim_tokens(engine_.tokenizer());
    if (!fim)
      throw invalid("input_suffix", "/infill needs a model whose tokenizer has <|fim_prefix|>, <|fim_suffix|> and <|fim_middle|>; this one has not");
    PromptIds prompt{infill_ids(r, *fim), Channel::answer, {}};
    Prepared p = prepare(r, std::move(prompt), {}, new_id("cmpl"), largest_infill_field(r));
    auto out = std::make_shared<InfillAnswer>(r.stream, p.head);
    return answer(std::move(p), std::move(out), watch);
  });
}

}  // namespace kylin::server
