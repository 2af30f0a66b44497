// The one path of every generation API (OpenAI chat and completions, /infill, Anthropic
// messages, the Responses API). Preparation: the prompt (a rendered chat or a text) measured,
// tokenized and checked against the context, then one job per choice on it. Reply: each API's
// Answer is handed the pieces and endings of its choices, on the inference thread, and writes its
// own body or SSE events; whole answers wait on the request's thread, streams return at once.
// An adapter is a parser, an Answer and a dozen lines that call these.
#pragma once

#include <algorithm>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kylin/server/service.hpp"

namespace kylin::server {

// How one API writes what its choices generate. The reply path calls it on the inference thread
// only: start (streams) before anything runs, then per choice prefilled, its pieces and its end,
// then finish once every choice has ended. A streamed Answer returns SSE events from each call;
// a whole one collects and returns its body from finish.
class Answer {
 public:
  explicit Answer(bool stream) : stream(stream) {}
  virtual ~Answer() = default;
  const bool stream;

  virtual std::string start() { return {}; }
  // The prompt is in choice's cache; `cached_tokens` of it were reused, not computed.
  virtual std::string prefilled(std::size_t /*choice*/, std::int64_t /*cached_tokens*/) { return {}; }
  virtual std::string piece(std::size_t choice, const Piece& piece) = 0;
  virtual std::string end(std::size_t /*choice*/, const Generation& /*g*/) { return {}; }
  virtual std::string finish(std::span<const Generation> choices) = 0;
  // A failure in this API's shape: the body of a whole answer, the last events of a stream.
  virtual std::string error_body(const Failure& f) const { return server::error_body(f); }
  virtual std::string error_events(const Failure& f) const { return sse(json::parse(error_body(f))) + std::string(sse_done); }
};

// How the served model writes tool calls: its chat template's format (Hermes JSON without one).
inline ToolCallFormat template_tool_format(const Engine& engine) {
  return engine.has_chat_template() ? tool_call_format(engine.chat_template().source()) : ToolCallFormat::json;
}

// A request's usage over its choices: the prompt once, every choice's generated tokens.
inline GenerationStats combined_stats(std::span<const Generation> choices) {
  GenerationStats s = choices.front().stats;
  for (std::size_t i = 1; i < choices.size(); ++i) {
    s.generated_tokens += choices[i].stats.generated_tokens;
    s.decode_ms = std::max(s.decode_ms, choices[i].stats.decode_ms);
  }
  return s;
}

// Runs an endpoint's body; an exception becomes the API's error reply (what current_failure()
// makes of it, in `shape`).
template <class F>
auto Service::guarded(ErrorShape shape, F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (...) {
    const Failure f = current_failure();
    Reply r{f.status, shape(f)};
    if constexpr (std::is_same_v<decltype(body()), Reply>) return r;
    else return {r, nullptr};
  }
}

inline void Service::check_chat_template() const {
  if (!engine_.has_chat_template()) throw ApiError(status::bad_request, "this model has no chat template; use /v1/completions");
}

// A chat request's prompt: its schemas' cost checked before anything is rendered, the template
// rendered (its errors are the request's, naming `param`), the text measured, then tokenized.
inline PromptIds Service::chat_prompt(const ChatRequest& r, const OutputRules& rules, const char* param, PromptImages images) const {
  ConstraintFactory::check_cost(rules);
  check_chat_template();
  refuse_images_untaken(r);
  RenderedPrompt prompt;
  try {
    prompt = render(r);
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    throw ApiError(status::bad_request, client_text(e), param);
  }
  check_prompt_bytes(prompt.text.size(), param);
  return with_images(tokenize(prompt), r.images, images);
}

// A request with images for a model that takes none: a 400 at the first image's field, with the engine's reason
// (no tower, or a tokenizer without the image pad), before the template sees image items.
inline void Service::refuse_images_untaken(const ChatRequest& r) const {
  if (r.images.empty() || engine_.has_vision()) return;
  try {
    (void)engine_.image_processor();
  } catch (const Error& e) {
    throw invalid(r.images.front().field, client_text(e));
  }
}

// The request's images (limits first, then decoding, each error naming its field) placed in the prompt: its
// pads expanded, and encoded by the tower on this thread (one request at a time there) while the inference
// thread decodes the other slots. With a tower, a pad without its image is refused (messages).
inline PromptIds Service::with_images(PromptIds prompt, const std::vector<RequestImage>& images, PromptImages work) const {
  if (images.empty()) {  // a pad the template wrote with no image behind it is refused (a tower would read garbage)
    if (engine_.has_vision() && std::find(prompt.ids.begin(), prompt.ids.end(), engine_.image_pad_id()) != prompt.ids.end())
      throw invalid("messages", "the rendered prompt has image placeholders but the request sent no images");
    return prompt;
  }
  check_image_limits(images, options_.image_limits);
  if (!options_.decode_image) throw invalid(images.front().field, "this server was built without image decoding");
  std::vector<vision::Image> decoded;  // [images]
  std::vector<ImageTokens> sizes;      // [images]
  for (const RequestImage& im : images) {
    const std::string bytes = decode_base64(im.base64, im.field);
    try {  // the file, then its size against the processor (an aspect ratio past 200 is refused there)
      decoded.push_back(options_.decode_image(std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()), "the image"));
      sizes.push_back(image_tokens(decoded.back().width, decoded.back().height, engine_.image_processor()));
    } catch (const Error& e) {
      throw invalid(im.field, client_text(e));
    }
  }
  try {
    if (work == PromptImages::counted) {
      prompt.ids = expand_image_pads(prompt.ids, engine_.image_pad_id(), sizes).ids;
      return prompt;
    }
    auto p = std::make_shared<ImagePrompt>(engine_.encode_images(prompt.ids, decoded));
    prompt.ids = p->ids;
    prompt.images = std::move(p);
  } catch (const Error& e) {  // a pad count off (a template that drops image items)
    throw invalid("messages", client_text(e));
  }
  return prompt;
}

inline PromptIds Service::text_prompt(std::string_view text, const char* param) const {
  check_prompt_bytes(text.size(), param);
  try {
    return {engine_.tokenizer().encode(text), Channel::answer, {}};
  } catch (const Error& e) {
    throw invalid(param, client_text(e));
  }
}

// One job per choice (r.n) on `prompt`: sampling, stop strings and the token limit from the
// request, choice i seeded with seed + i, constraints from `rules`, logprob recorders when asked.
// Choices after the first start from the first one's prompt (Job::prompt_leader).
inline Service::Prepared Service::prepare(const GenerationRequest& r, PromptIds prompt, const OutputRules& rules, std::string id,
                                          const char* param) const {
  const std::int64_t ctx = scheduler_.context_length();
  const auto n = static_cast<std::int64_t>(prompt.ids.size());
  if (n == 0) throw invalid(param, "the prompt is empty");
  if (n >= ctx)
    throw ApiError(status::bad_request, "this model's context is " + std::to_string(ctx) + " tokens; the prompt has " + std::to_string(n),
                   param, "context_length_exceeded");
  const auto choices = static_cast<std::size_t>(r.n);
  if (choices > scheduler_.max_choices())  // before any grammar is compiled for them
    throw ApiError(status::bad_request,
                   "'n' is " + std::to_string(r.n) + ": this server runs " + std::to_string(scheduler_.slots()) +
                       " generations at once and queues " + std::to_string(scheduler_.max_queued()) +
                       " (--parallel, --queue), so one request fits at most " + std::to_string(scheduler_.max_choices()) + " choices",
                   "n", "too_many_choices");
  if (r.ignore_eos && (rules.format.type != ResponseFormat::Type::text || rules.tool_choice.forces_call()))
    throw invalid("ignore_eos", "'ignore_eos' cannot go with a constrained answer (response_format, grammar, a forced tool call), "
                                "which ends where its grammar does");
  auto constraints = constraints_.make(rules, choices);
  Prepared p;
  p.head = ResponseHead{std::move(id), unix_time(), served_name(r.model), fingerprint_};
  p.prompt_tokens = n;
  for (std::size_t i = 0; i < choices; ++i) {
    auto job = std::make_shared<Job>();
    job->prompt = prompt.ids;
    job->start = prompt.start;
    job->options.sampling = r.sampling;
    if (r.sampling.seed) job->options.sampling.seed = *r.sampling.seed + i;  // wraps past 2^64, as seeds may
    job->options.stop = r.stop;
    job->options.max_new_tokens = r.max_tokens.value_or(ctx - n);
    job->speculative = r.speculative && !prompt.images;  // speculative decoding takes no image prompts yet
    if (prompt.images) job->images = prompt.images, job->options.images = prompt.images->rows;
    if (!constraints.empty()) {
      job->constraint = std::move(constraints[i]);
      job->options.constraint = job->constraint.get();
    }
    LogprobRequest logit_rules = r.logprob;
    if (r.ignore_eos) logit_rules.masked = engine_.eos_ids();  // never drawn, so the answer runs to max_tokens
    p.logprobs.push_back(attach_logprobs(job->options, logit_rules, engine_.sampleable_ids()));
    if (i > 0) job->prompt_leader = p.jobs.front();
    p.jobs.push_back(std::move(job));
  }
  return p;
}

// What one request's choices share; used on the inference thread only (the callbacks).
struct AnswerState {
  std::shared_ptr<Answer> answer;
  std::vector<Generation> done;  // [n]
  std::size_t remaining = 0;
  std::optional<Failure> failure;
  std::promise<Reply> reply;          // whole answers
  std::weak_ptr<EventStream> stream;  // streamed ones
  std::vector<std::weak_ptr<Job>> jobs;
  std::shared_ptr<ClientWatch> watch;

  void emit(std::string events) {
    if (events.empty()) return;
    if (auto s = stream.lock()) s->push(std::move(events));
  }
  // The first failure wins and cancels the other choices.
  void fail(Failure f) {
    if (failure) return;
    failure = std::move(f);
    for (const auto& weak : jobs)
      if (auto sibling = weak.lock()) sibling->cancelled = true;
  }
  // Every choice has ended: the whole reply, or the stream's last events.
  void end() {
    const bool ran = !failure && done.front().stats.prompt_tokens > 0;
    if (watch && ran) watch->record(combined_stats(done));  // for the access log and metrics, before the answer
    if (!answer->stream) {
      reply.set_value(failure ? Reply{failure->status, answer->error_body(*failure)} : Reply{status::ok, answer->finish(done)});
      return;
    }
    emit(failure ? answer->error_events(*failure) : answer->finish(done));
    if (auto s = stream.lock()) s->close();
  }
};

// Choice i's job tells `state` its prefill, pieces and end.
inline void Service::wire(Job& job, std::size_t i, const std::shared_ptr<AnswerState>& state, std::int64_t prompt_tokens) {
  job.options.on_prefill = [state, i, prompt_tokens](std::int64_t done, std::int64_t total) {
    if (done == total) state->emit(state->answer->prefilled(i, prompt_tokens - total));
  };
  job.on_piece = [state, i](const Piece& piece) {
    if (state->answer->stream && state->stream.expired()) return false;  // the client is gone
    state->emit(state->answer->piece(i, piece));
    return true;
  };
  job.on_done = [this, state, i](Generation&& g, std::optional<Failure> error) {
    if (error) state->fail(*error);
    else if (aborting_ && g.stop_reason == StopReason::cancelled) state->fail(shutdown_failure());
    if (!state->failure && state->answer->stream) state->emit(state->answer->end(i, g));
    state->done[i] = std::move(g);
    if (--state->remaining == 0) state->end();
  };
}

// The reply path: wires every choice's job to `answer`, queues them together, and answers the
// client (whole: once all are done; streamed: an EventStream now). A choice that fails cancels
// its siblings; the client then gets the failure in the API's shape.
inline Started Service::answer(Prepared p, std::shared_ptr<Answer> answer, const std::shared_ptr<ClientWatch>& watch) {
  auto state = std::make_shared<AnswerState>();
  state->answer = std::move(answer);
  state->done.resize(p.jobs.size());
  state->remaining = p.jobs.size();
  state->watch = watch;
  for (const auto& job : p.jobs) state->jobs.push_back(job);
  std::shared_ptr<EventStream> stream;
  if (state->answer->stream) {
    ++in_flight_;  // a stream is in flight until its last event was written (or dropped)
    stream = std::make_shared<EventStream>(p.jobs, [this] { --in_flight_; });
    state->stream = stream;
  }
  for (std::size_t i = 0; i < p.jobs.size(); ++i) wire(*p.jobs[i], i, state, p.prompt_tokens);
  if (watch)
    watch->on_gone([jobs = state->jobs] {
      for (const auto& weak : jobs)
        if (auto j = weak.lock()) j->cancelled = true;
    });
  if (!stream) return {submit_and_wait(p.jobs, state->reply.get_future()), nullptr};
  state->emit(state->answer->start());
  submit(p.jobs);
  return {{}, stream};
}

}  // namespace kylin::server
