// Service::chat and Service::complete: POST /v1/chat/completions and /v1/completions, whole or
// streamed, with tool calls, logprobs and logit_bias. A streamed chunk carries the logprobs of the
// tokens whose text it brings; tokens whose text is held back (a tool call, a possible stop
// string) have theirs on a later chunk, at the latest on the one with the finish reason.
#pragma once

#include <future>
#include <memory>
#include <string>
#include <string_view>

#include "kylin/server/logprobs.hpp"
#include "kylin/server/service.hpp"

namespace kylin::server {

namespace detail {

// The logprobs of the tokens not yet sent, for a streamed chunk; null when none are asked for or
// none are waiting.
inline json::Value pending_chat_logprobs(LogprobRecorder* r, const Tokenizer& tokenizer) {
  if (r == nullptr || !r->logprobs()) return {};
  const auto entries = r->take();
  return entries.empty() ? json::Value() : chat_logprobs(tokenizer, entries);
}

inline json::Value pending_completion_logprobs(LogprobRecorder* r, const Tokenizer& tokenizer, std::int64_t& offset) {
  if (r == nullptr || !r->logprobs()) return {};
  const auto entries = r->take();
  return entries.empty() ? json::Value() : completion_logprobs(tokenizer, entries, offset);
}

}  // namespace detail

inline Started Service::chat(std::string_view text, const std::shared_ptr<ClientWatch>& watch) {
  require_task(options_.task, ServerTask::generate, "/v1/chat/completions");
  ChatRequest r = parse_chat_request(text, engine_.default_sampling());
  check_model(r.model);
  detail::check_logit_bias(r.logprob, engine_.tokenizer().vocab_size());
  std::size_t bytes = 0;
  for (const auto& m : r.messages.as_array()) bytes += m.find("content")->as_string().size();
  check_prompt_bytes(bytes, "messages");
  if (!engine_.has_chat_template()) throw ApiError(status::bad_request, "this model has no chat template; use /v1/completions");
  const OutputRules rules{.format = r.response_format,
                          .tool_choice = r.tool_choice,
                          .tools = &r.chat.tools,
                          .max_calls = r.parallel_tool_calls ? std::size_t{0} : std::size_t{1},
                          .thinking = r.chat.enable_thinking};
  ConstraintFactory::check_cost(rules);  // schemas too large to compile: refused before any rendering
  RenderedPrompt prompt;
  try {
    prompt = render(r);
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    throw ApiError(status::bad_request, client_text(e), "messages");
  }
  auto [ids, channel] = tokenize(prompt);
  Prepared p = prepare(r, std::move(ids), channel, "messages");
  p.head.id = new_id("chatcmpl");
  ChatShape shape;
  shape.tools = !r.chat.tools.is_null();
  shape.max_calls = r.parallel_tool_calls ? any_number_of_calls : 1;
  shape.logprobs = attach_logprobs(p.job->options, r.logprob, engine_.sampleable_ids());
  constrain(*p.job, rules);
  return r.stream ? chat_stream(p, shape, r.include_usage, watch) : chat_reply(p, shape, watch);
}

inline Started Service::chat_reply(Prepared& p, const ChatShape& shape, const std::shared_ptr<ClientWatch>& watch) {
  auto promise = std::make_shared<std::promise<Reply>>();
  auto future = promise->get_future();
  p.job->on_done = [this, promise, head = p.head, shape](Generation&& g, std::optional<Failure> error) {
    promise->set_value(result(std::move(g), error, [&](Generation& done) {
      json::Value logprobs;
      if (shape.logprobs && shape.logprobs->logprobs()) logprobs = chat_logprobs(engine_.tokenizer(), shape.logprobs->all());
      return json::dump(chat_completion(head, done, shape.tools, std::move(logprobs), shape.max_calls));
    }));
  };
  watch_client(watch, p.job);
  return {submit_and_wait(p.job, std::move(future)), nullptr};
}

inline Started Service::chat_stream(Prepared& p, const ChatShape& shape, bool usage, const std::shared_ptr<ClientWatch>& watch) {
  auto stream = open_stream(p.job);
  std::weak_ptr<EventStream> weak = stream;
  auto hold = std::make_shared<ToolCallHold>();
  const Tokenizer* tokenizer = &engine_.tokenizer();
  p.job->on_piece = [weak, head = p.head, shape, hold, tokenizer](const Piece& piece) {
    auto s = weak.lock();
    if (!s) return false;
    const bool reasoning = piece.channel == Channel::reasoning;
    std::string out = reasoning || !shape.tools ? std::string(piece.text) : hold->push(piece.text);
    if (!out.empty()) {
      json::Value logprobs = detail::pending_chat_logprobs(shape.logprobs.get(), *tokenizer);
      s->push(sse(chat_chunk(head, delta(reasoning ? "reasoning_content" : "content", std::move(out)), std::nullopt, std::move(logprobs))));
    }
    return true;
  };
  p.job->on_done = [this, weak, head = p.head, shape, hold, usage, tokenizer](Generation&& g, std::optional<Failure> error) {
    auto s = weak.lock();
    if (!s) return;
    if (error || aborted(g)) {
      s->push(sse(json::parse(error ? failure(*error).body : shutdown_reply().body)));
    } else {
      bool calls = false;
      if (shape.tools)
        for (const auto& chunk : tool_call_chunks(head, *hold, calls, shape.max_calls)) s->push(sse(chunk));
      json::Value logprobs = detail::pending_chat_logprobs(shape.logprobs.get(), *tokenizer);
      json::Value last = chat_chunk(head, json::Object{}, finish_reason(g.stop_reason, calls), std::move(logprobs));
      last.set("timings", timings(g.stats));
      s->push(sse(last));
      if (usage) s->push(sse(usage_chunk(head, "chat.completion.chunk", g.stats)));
    }
    s->push(std::string(sse_done));
    s->close();
  };
  json::Value role = json::Object{};
  role.set("role", "assistant");
  role.set("content", "");
  stream->push(sse(chat_chunk(p.head, std::move(role))));
  watch_client(watch, p.job);
  submit(p.job);
  return {{}, stream};
}

inline Started Service::complete(std::string_view text, const std::shared_ptr<ClientWatch>& watch) {
  require_task(options_.task, ServerTask::generate, "/v1/completions");
  CompletionRequest r = parse_completion_request(text, engine_.default_sampling(), engine_.tokenizer().vocab_size());
  check_model(r.model);
  check_prompt_bytes(r.prompt.size(), "prompt");
  std::vector<int> tokens = r.prompt_tokens;
  if (tokens.empty()) {
    try {
      tokens = engine_.tokenizer().encode(r.prompt);
    } catch (const Error& e) {
      throw invalid("prompt", client_text(e));
    }
  }
  Prepared p = prepare(r, std::move(tokens), Channel::answer, "prompt");
  p.head.id = new_id("cmpl");
  auto logprobs = attach_logprobs(p.job->options, r.logprob, engine_.sampleable_ids());
  return r.stream ? completion_stream(p, std::move(logprobs), r.include_usage, watch)
                  : completion_reply(p, std::move(logprobs), watch);
}

inline Started Service::completion_reply(Prepared& p, std::shared_ptr<LogprobRecorder> logprobs,
                                         const std::shared_ptr<ClientWatch>& watch) {
  // Raw completions return all generated text, reasoning included, in the order it came.
  auto text_so_far = std::make_shared<std::string>();
  p.job->on_piece = [text_so_far](const Piece& piece) {
    *text_so_far += piece.text;
    return true;
  };
  auto promise = std::make_shared<std::promise<Reply>>();
  auto future = promise->get_future();
  p.job->on_done = [this, promise, text_so_far, head = p.head, logprobs](Generation&& g, std::optional<Failure> error) {
    promise->set_value(result(std::move(g), error, [&](Generation& done) {
      json::Value lp;
      std::int64_t offset = 0;
      if (logprobs && logprobs->logprobs()) lp = completion_logprobs(engine_.tokenizer(), logprobs->all(), offset);
      return json::dump(text_completion(head, *text_so_far, done, std::move(lp)));
    }));
  };
  watch_client(watch, p.job);
  return {submit_and_wait(p.job, std::move(future)), nullptr};
}

inline Started Service::completion_stream(Prepared& p, std::shared_ptr<LogprobRecorder> logprobs, bool usage,
                                          const std::shared_ptr<ClientWatch>& watch) {
  auto stream = open_stream(p.job);
  std::weak_ptr<EventStream> weak = stream;
  const Tokenizer* tokenizer = &engine_.tokenizer();
  auto offset = std::make_shared<std::int64_t>(0);  // text_offset of the next token
  p.job->on_piece = [weak, head = p.head, logprobs, tokenizer, offset](const Piece& piece) {
    auto s = weak.lock();
    if (!s) return false;
    json::Value lp = detail::pending_completion_logprobs(logprobs.get(), *tokenizer, *offset);
    s->push(sse(text_chunk(head, std::string(piece.text), std::nullopt, std::move(lp))));
    return true;
  };
  p.job->on_done = [this, weak, head = p.head, usage, logprobs, tokenizer, offset](Generation&& g, std::optional<Failure> error) {
    auto s = weak.lock();
    if (!s) return;
    if (error || aborted(g)) {
      s->push(sse(json::parse(error ? failure(*error).body : shutdown_reply().body)));
    } else {
      json::Value lp = detail::pending_completion_logprobs(logprobs.get(), *tokenizer, *offset);
      json::Value last = text_chunk(head, "", finish_reason(g.stop_reason, false), std::move(lp));
      last.set("timings", timings(g.stats));
      s->push(sse(last));
      if (usage) s->push(sse(usage_chunk(head, "text_completion", g.stats)));
    }
    s->push(std::string(sse_done));
    s->close();
  };
  watch_client(watch, p.job);
  submit(p.job);
  return {{}, stream};
}

}  // namespace kylin::server
