// Service: the OpenAI-compatible endpoints without the HTTP transport. Each call validates the
// body (ApiError on a bad one, before anything is queued), renders and tokenizes the prompt on
// the calling thread, then queues the generation; a streamed call returns its EventStream at once.
#pragma once

#include <atomic>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "kylin/server/client_watch.hpp"
#include "kylin/server/event_stream.hpp"
#include "kylin/server/logprobs.hpp"
#include "kylin/server/metrics.hpp"
#include "kylin/server/output_constraint.hpp"
#include "kylin/server/request.hpp"
#include "kylin/server/responses.hpp"
#include "kylin/server/scheduler.hpp"
#include "kylin/server/slots.hpp"

namespace kylin::server {

struct Reply {
  int status = status::ok;
  std::string body;  // JSON
};

// A generation endpoint's answer: a finished reply, or a stream of SSE events.
struct Started {
  Reply reply;
  std::shared_ptr<EventStream> stream;
};

// How a chat answer is shaped: tool calls parsed (at most max_calls of them), logprobs recorded
// (null: none asked for).
struct ChatShape {
  bool tools = false;
  std::size_t max_calls = any_number_of_calls;
  std::shared_ptr<LogprobRecorder> logprobs;
};

struct ServiceOptions {
  // plain (the server's default): text in messages, and in rerank queries, documents and
  // instructions, that spells <|im_start|>, <tool_call> etc. stays text, so a client cannot forge
  // turns or a reranker's answer; special: transformers' behaviour (docs/CHAT.md). Embedding
  // inputs are tokenized as sentence-transformers does either way (docs/EMBEDDINGS.md).
  ContentTokens content_tokens = ContentTokens::plain;
  PromptCache* prompt_cache = nullptr;  // --cache-dir: also where slot files go
  ServerTask task = ServerTask::generate;  // the endpoints that answer; the others say how to get them
};

class Service {
 public:
  Service(Engine& engine, Scheduler& scheduler, std::string model_id, const ServiceOptions& options = {})
      : engine_(engine), scheduler_(scheduler), model_id_(std::move(model_id)), created_(unix_time()),
        max_prompt_bytes_(max_prompt_bytes(engine.tokenizer(), scheduler.context_length())), options_(options),
        constraints_(engine) {}

  const std::string& model_id() const { return model_id_; }

  Reply models() const {
    json::Value out = json::Object{};
    out.set("object", "list");
    out.set("data", json::Array{model_card(model_id_, created_, scheduler_.context_length())});
    return {status::ok, json::dump(out)};
  }

  Reply model(std::string_view id) const {
    if (id != model_id_) throw ApiError(status::not_found, "model '" + std::string(id) + "' not found", "model", "model_not_found");
    return {status::ok, json::dump(model_card(model_id_, created_, scheduler_.context_length()))};
  }

  Reply health() const {
    json::Value out = json::Object{};
    out.set("status", draining_ ? "shutting_down" : "ok");
    out.set("queued", static_cast<std::int64_t>(scheduler_.queued()));
    out.set("busy", scheduler_.busy());
    out.set("active", static_cast<std::int64_t>(scheduler_.active()));
    out.set("queued_cancelled", static_cast<std::int64_t>(scheduler_.queued_cancelled()));
    out.set("skipped", static_cast<std::int64_t>(scheduler_.skipped()));
    out.set("generated_tokens", static_cast<std::int64_t>(scheduler_.generated_tokens()));
    return {status::ok, json::dump(out)};
  }

  // GET /metrics: the Prometheus text format (metrics.hpp); the transport records requests.
  Metrics& metrics() { return metrics_; }
  std::string metrics_text() const {
    const auto slots = static_cast<std::int64_t>(scheduler_.slots());
    return metrics_.render({.slots = slots,
                            .active = scheduler_.active(),
                            .queued = static_cast<std::int64_t>(scheduler_.queued()),
                            .kv_tokens = scheduler_.kv_tokens(),
                            .kv_capacity = slots * scheduler_.context_length()});
  }

  // {"content" | "text": "...", "parse_special": true} -> {"tokens": [...]}
  Reply tokenize(std::string_view text) const {
    const json::Value body = detail::parse_body(text);
    const json::Value* content = detail::field(body, "content");
    const char* param = "content";
    if (content == nullptr) content = detail::field(body, "text"), param = "text";
    if (content == nullptr || !content->is_string()) throw invalid(param, "'content' (or 'text') must be a string");
    EncodeOptions options;
    options.parse_special = detail::bool_field(body, "parse_special").value_or(true);
    json::Value tokens = json::Array{};
    try {
      for (int id : engine_.tokenizer().encode(content->as_string(), options)) tokens.push_back(id);
    } catch (const Error& e) {
      throw invalid(param, client_text(e));
    }
    json::Value out = json::Object{};
    out.set("tokens", std::move(tokens));
    return {status::ok, json::dump(out)};
  }

  // {"tokens": [...]} -> {"content": "..."}
  Reply detokenize(std::string_view text) const {
    const json::Value body = detail::parse_body(text);
    const json::Value* tokens = detail::field(body, "tokens");
    if (tokens == nullptr || !tokens->is_array()) throw invalid("tokens", "'tokens' must be an array of token ids");
    std::vector<int> ids;
    const std::int64_t vocab = engine_.tokenizer().vocab_size();
    for (const auto& t : tokens->as_array()) {
      if (!t.is_int() || t.as_int() < 0 || t.as_int() >= vocab)
        throw invalid("tokens", "token ids must be integers in [0, " + std::to_string(vocab) + ")");
      ids.push_back(static_cast<int>(t.as_int()));
    }
    json::Value out = json::Object{};
    out.set("content", engine_.tokenizer().decode(ids));
    return {status::ok, json::dump(out)};
  }

  // `watch` (from the transport, optional): when the client goes away, the job is cancelled,
  // queued or running, streamed or not.
  // POST /v1/chat/completions and /v1/completions, defined in server/openai_service.hpp.
  Started chat(std::string_view text, const std::shared_ptr<ClientWatch>& watch = nullptr);
  Started complete(std::string_view text, const std::shared_ptr<ClientWatch>& watch = nullptr);
  // POST /v1/embeddings and /v1/rerank, defined in server/retrieval.hpp.
  Reply embeddings(std::string_view text, const std::shared_ptr<ClientWatch>& watch = nullptr);
  Reply rerank(std::string_view text, const std::shared_ptr<ClientWatch>& watch = nullptr);
  // POST /v1/messages and /v1/messages/count_tokens (Anthropic), defined in server/anthropic_service.hpp.
  Started messages(std::string_view text, const std::shared_ptr<ClientWatch>& watch = nullptr);
  Reply count_message_tokens(std::string_view text);

  // POST /slots/{id}?action=save|restore|erase (server/slots.hpp).
  Reply slot(std::string_view id, std::string_view action, std::string_view body) {
    return {status::ok, json::dump(slot_action(scheduler_, options_.prompt_cache, id, action, body))};
  }

  // Shutdown: refuse new generations; in_flight() counts those still being answered.
  void drain() { draining_ = true; }
  int in_flight() const { return in_flight_.load(); }
  // Past the shutdown deadline: every queued or running job stops; its client gets 503 (or an
  // SSE error event) instead of the answer.
  void abort() {
    aborting_ = true;
    std::lock_guard lock(jobs_mutex_);
    for (auto& weak : jobs_)
      if (auto job = weak.lock()) job->cancelled = true;
    jobs_.clear();
  }
  // Longest prompt text accepted before tokenizing (see max_prompt_bytes()).
  std::size_t prompt_byte_limit() const { return max_prompt_bytes_; }

 private:
  struct Prepared {
    std::shared_ptr<Job> job;
    ResponseHead head;
  };
  // The non-streamed and streamed halves of chat() and complete() (server/openai_service.hpp).
  Started chat_reply(Prepared& p, const ChatShape& shape, const std::shared_ptr<ClientWatch>& watch);
  Started chat_stream(Prepared& p, const ChatShape& shape, bool usage, const std::shared_ptr<ClientWatch>& watch);
  Started completion_reply(Prepared& p, std::shared_ptr<LogprobRecorder> logprobs, const std::shared_ptr<ClientWatch>& watch);
  Started completion_stream(Prepared& p, std::shared_ptr<LogprobRecorder> logprobs, bool usage,
                            const std::shared_ptr<ClientWatch>& watch);

  void check_model(const std::string& model) const {
    if (!model.empty() && model != model_id_)
      throw ApiError(status::not_found, "model '" + model + "' not found (this server serves '" + model_id_ + "')",
                     "model", "model_not_found");
  }

  Reply run_engine_task(std::function<void()> work, const std::shared_ptr<ClientWatch>& watch);  // retrieval.hpp
  Prepared prepare(const GenerationRequest& r, std::vector<int> prompt, Channel start, const char* prompt_param) const {
    const std::int64_t ctx = scheduler_.context_length();
    const auto n = static_cast<std::int64_t>(prompt.size());
    if (n == 0) throw invalid(prompt_param, "the prompt is empty");
    if (n >= ctx)
      throw ApiError(status::bad_request,
                     "this model's context is " + std::to_string(ctx) + " tokens; the prompt has " + std::to_string(n),
                     prompt_param, "context_length_exceeded");
    auto job = std::make_shared<Job>();
    job->prompt = std::move(prompt);
    job->start = start;
    job->options.sampling = r.sampling;
    job->options.stop = r.stop;
    job->options.max_new_tokens = r.max_tokens.value_or(ctx - n);
    job->speculative = r.speculative;
    return {std::move(job), ResponseHead{"", unix_time(), model_id_}};
  }

  // The prompt of a chat request, as Session::render_chat_prompt makes it: the text and the byte
  // ranges that came from the request.
  RenderedPrompt render(const ChatRequest& r) const {
    json::Value kwargs = r.chat.extra_kwargs.is_object() ? r.chat.extra_kwargs : json::Value(json::Object{});
    kwargs.set("enable_thinking", r.chat.enable_thinking);
    RenderOptions options;
    options.add_generation_prompt = true;
    options.tools = r.chat.tools;
    options.kwargs = std::move(kwargs);
    return engine_.chat_template().render_prompt(r.messages, options);
  }

  // The prompt's ids under options_.content_tokens, and whether they leave a <think> block open
  // (decided by token: in plain mode a "<think>" typed by the client is text).
  std::pair<std::vector<int>, Channel> tokenize(const RenderedPrompt& p) const {
    const Tokenizer& t = engine_.tokenizer();
    std::vector<int> ids = options_.content_tokens == ContentTokens::plain ? t.encode_with_plain(p.text, p.from_request) : t.encode(p.text);
    const int open = t.token_to_id("<think>").value_or(-1), close = t.token_to_id("</think>").value_or(-1);
    const bool reasoning = open >= 0 ? Session::opens_reasoning(ids, open, close) : Session::opens_reasoning(p.text);
    return {std::move(ids), reasoning ? Channel::reasoning : Channel::answer};
  }

  // A prompt of more than context × (longest token's bytes) × 3 bytes cannot fit: each token
  // covers at most the longest token's bytes of normalized text, and NFC shrinks text at most
  // threefold (Hangul jamo L+V+T, 9 bytes, compose to one 3-byte syllable). Checked before any
  // tokenizing, so a huge prompt costs no BPE work.
  static std::size_t max_prompt_bytes(const Tokenizer& tokenizer, std::int64_t context) {
    std::size_t longest = 1;
    for (int id = 0; id < tokenizer.vocab_size(); ++id)
      if (tokenizer.id_to_token(id)) longest = std::max(longest, tokenizer.token_bytes(id).size());
    for (const auto& t : tokenizer.added_tokens()) longest = std::max(longest, t.content.size());
    return static_cast<std::size_t>(context) * longest * 3;
  }

  void check_prompt_bytes(std::size_t bytes, const char* param) const {
    if (bytes > max_prompt_bytes_)
      throw ApiError(status::bad_request,
                     "the prompt text has " + std::to_string(bytes) + " bytes; at most " + std::to_string(max_prompt_bytes_) +
                         " can fit in this model's context of " + std::to_string(scheduler_.context_length()) + " tokens",
                     param, "context_length_exceeded");
  }

  void submit(const std::shared_ptr<Job>& job) {
    if (draining_) throw ApiError(status::unavailable, "the server is shutting down", {}, "server_shutting_down");
    if (!scheduler_.submit(job))
      throw ApiError(status::unavailable, "the request queue is full; retry later", {}, "server_overloaded");
    std::lock_guard lock(jobs_mutex_);
    std::erase_if(jobs_, [](const std::weak_ptr<Job>& w) { return w.expired(); });
    jobs_.push_back(job);
  }

  // Cancels the job when the client goes away; hands the generation's statistics to the
  // transport (access log, metrics) before the job's own on_done answers.
  static void watch_client(const std::shared_ptr<ClientWatch>& watch, const std::shared_ptr<Job>& job) {
    if (!watch) return;
    watch->on_gone([weak = std::weak_ptr<Job>(job)] {
      if (auto j = weak.lock()) j->cancelled = true;
    });
    job->on_done = [watch, done = std::move(job->on_done)](Generation&& g, std::optional<Failure> error) {
      if (!error && g.stats.prompt_tokens > 0) watch->record(g.stats);  // a generation ran
      done(std::move(g), std::move(error));
    };
  }

  // Puts `rules`' constraint (if the answer is not free) on the job, which owns it.
  void constrain(Job& job, const OutputRules& rules) const {
    job.constraint = constraints_.make(rules);
    job.options.constraint = job.constraint.get();
  }

  // A job cut short by abort(): its client is told the server shut down.
  bool aborted(const Generation& g) const { return aborting_ && g.stop_reason == StopReason::cancelled; }
  static Reply shutdown_reply() {
    return {status::unavailable, error_body(status::unavailable, "the server shut down before this request finished", {},
                                            "server_shutting_down")};
  }
  Reply result(Generation&& g, const std::optional<Failure>& error, const std::function<std::string(Generation&)>& body) const {
    if (error) return failure(*error);
    if (aborted(g)) return shutdown_reply();
    return {status::ok, body(g)};
  }

  // A non-streamed request is answered here, on the calling thread, once its job is done.
  Reply submit_and_wait(const std::shared_ptr<Job>& job, std::future<Reply> reply) {
    ++in_flight_;
    struct Done {
      std::atomic<int>& n;
      ~Done() { --n; }
    } done{in_flight_};
    submit(job);
    return reply.get();
  }

  // A streamed request counts as in flight until its last event was written (or dropped).
  std::shared_ptr<EventStream> open_stream(const std::shared_ptr<Job>& job) {
    ++in_flight_;
    return std::make_shared<EventStream>(job, [this] { --in_flight_; });
  }

  static Reply failure(const Failure& f) { return {f.status, error_body(f)}; }

  Engine& engine_;
  Scheduler& scheduler_;
  std::string model_id_;
  std::int64_t created_;
  std::size_t max_prompt_bytes_;
  ServiceOptions options_;
  ConstraintFactory constraints_;
  Metrics metrics_;
  std::atomic<bool> draining_{false}, aborting_{false};
  std::atomic<int> in_flight_{0};
  std::mutex jobs_mutex_;
  std::vector<std::weak_ptr<Job>> jobs_;  // submitted, for abort()
};

}  // namespace kylin::server
