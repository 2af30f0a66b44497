// Service: kylin-server's endpoints without the HTTP transport. Every generation API (OpenAI chat
// and completions, Anthropic messages, the Responses API, llama.cpp's /infill) is a thin adapter
// over one request preparation and one reply/stream path (server/front.hpp): the body is validated
// (a 400 before anything is queued), the prompt rendered and tokenized on the calling thread, the
// generations queued, and a streamed call returns its EventStream at once.
#pragma once

#include <atomic>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/chat/template_defaults.hpp"
#include "kylin/chat/tool_arguments.hpp"
#include "kylin/server/client_watch.hpp"
#include "kylin/server/event_stream.hpp"
#include "kylin/server/logprobs.hpp"
#include "kylin/server/metrics.hpp"
#include "kylin/server/output_constraint.hpp"
#include "kylin/server/request.hpp"
#include "kylin/server/response_store.hpp"
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

// How an API writes an error body: OpenAI's shape (error_body) or Anthropic's (anthropic.hpp).
using ErrorShape = std::string (*)(const Failure&);

// The prompt of a request, tokenized: its ids and the channel its answer starts in (a prompt that
// ends inside <think> continues the reasoning).
struct PromptIds {
  std::vector<int> ids;
  Channel start = Channel::answer;
  std::shared_ptr<const ImagePrompt> images;  // null without images; ids then hold its image keys
};

// What a chat prompt's images are needed for: to run (encoded by the vision tower) or to count tokens (decoded
// for their sizes only).
enum class PromptImages { encoded, counted };

// Decodes an image file (kylin-server: io::decode_image, linked from kylin::image); `what` names it in errors.
using ImageDecoder = std::function<vision::Image(std::span<const std::uint8_t> bytes, std::string_view what)>;

class Answer;            // server/front.hpp
struct AnswerState;      // server/front.hpp
struct ResponsesRequest;  // server/responses_request.hpp

struct ServiceOptions {
  // plain (the server's default): text in messages, and in rerank queries, documents and
  // instructions, that spells <|im_start|>, <tool_call> etc. stays text, so a client cannot forge
  // turns or a reranker's answer; special: transformers' behaviour (docs/CHAT.md). Embedding
  // inputs are tokenized as sentence-transformers does either way (docs/EMBEDDINGS.md).
  ContentTokens content_tokens = ContentTokens::plain;
  PromptCache* prompt_cache = nullptr;  // --cache-dir: also where slot files go
  ServerTask task = ServerTask::generate;  // the endpoints that answer; the others say how to get them
  // --served-model-name: the model ids clients may send, all listed by /v1/models; empty: the
  // directory's name. Any other `model` is a 404.
  std::vector<std::string> served_names;
  // Whatever identifies the build (kylin-server: a hash of its executable): system_fingerprint
  // changes with it, with the model files and with the weight format.
  std::string build_id;
  ResponseStoreLimits response_store;  // the Responses API's stored responses
  // --chat-template-kwargs and --reasoning: under every chat request's own (apply_chat_defaults).
  TemplateDefaults template_defaults;
  // Image parts: decoded with decode_image (none: a request with images is a 400 saying so), checked against
  // image_limits first (--max-images, --max-image-bytes).
  ImageDecoder decode_image;
  ImageRequestLimits image_limits;
};

class Service {
 public:
  Service(Engine& engine, Scheduler& scheduler, std::string model_id, const ServiceOptions& options = {})
      : engine_(engine), scheduler_(scheduler),
        names_(options.served_names.empty() ? std::vector<std::string>{std::move(model_id)} : options.served_names),
        created_(unix_time()), max_prompt_bytes_(max_prompt_bytes(engine.tokenizer(), scheduler.context_length())),
        options_(options), constraints_(engine), fingerprint_(system_fingerprint(engine, options.build_id)),
        stored_(options.response_store) {}

  // The first served name: what the server calls its model (logs, answers to requests naming none).
  const std::string& model_id() const { return names_.front(); }
  const std::string& fingerprint() const { return fingerprint_; }

  Reply models() const {
    json::Value data = json::Array{};
    for (const auto& name : names_) data.push_back(model_card(name, created_, scheduler_.context_length()));
    json::Value out = json::Object{};
    out.set("object", "list");
    out.set("data", std::move(data));
    return {status::ok, json::dump(out)};
  }

  Reply model(std::string_view id) const {
    return {status::ok, json::dump(model_card(served_name(std::string(id), true), created_, scheduler_.context_length()))};
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

  // llama.cpp's GET /props and POST /completion (server/llama_endpoints.hpp).
  Reply props() const;
  Started llama_completion(std::string_view text, const std::shared_ptr<ClientWatch>& watch = nullptr);

  // POST /tokenize, /detokenize, /apply-template in llama.cpp's shapes (server/text_endpoints.hpp).
  Reply tokenize(std::string_view text) const;
  Reply detokenize(std::string_view text) const;
  Reply apply_template(std::string_view text) const;

  // `watch` (from the transport, optional): when the client goes away, the job is cancelled,
  // queued or running, streamed or not. Every generation endpoint answers errors in its own API's
  // shape instead of throwing.
  // POST /v1/chat/completions, /v1/completions and /infill (server/openai_service.hpp).
  Started chat(std::string_view text, const std::shared_ptr<ClientWatch>& watch = nullptr);
  Started complete(std::string_view text, const std::shared_ptr<ClientWatch>& watch = nullptr);
  Started infill(std::string_view text, const std::shared_ptr<ClientWatch>& watch = nullptr);
  // POST /v1/messages and /v1/messages/count_tokens, Anthropic's (server/anthropic_service.hpp).
  Started messages(std::string_view text, const std::shared_ptr<ClientWatch>& watch = nullptr);
  Reply count_message_tokens(std::string_view text);
  // The Responses API (server/responses_service.hpp): POST /v1/responses, GET and DELETE
  // /v1/responses/{id}, POST /v1/responses/input_tokens.
  Started create_response(std::string_view text, const std::shared_ptr<ClientWatch>& watch = nullptr);
  Reply response(std::string_view id) const;
  Reply delete_response(std::string_view id);
  Reply response_input_tokens(std::string_view text);
  // POST /v1/embeddings and /v1/rerank (server/retrieval.hpp).
  Reply embeddings(std::string_view text, const std::shared_ptr<ClientWatch>& watch = nullptr);
  Reply rerank(std::string_view text, const std::shared_ptr<ClientWatch>& watch = nullptr);

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
  // A request ready to queue: one job per choice, all on one prompt (server/front.hpp).
  struct Prepared {
    std::vector<std::shared_ptr<Job>> jobs;                  // [n]
    std::vector<std::shared_ptr<LogprobRecorder>> logprobs;  // [n] null when none are asked for
    ResponseHead head;
    std::int64_t prompt_tokens = 0;
  };

  // The one preparation and reply path (server/front.hpp).
  template <class F>
  static auto guarded(ErrorShape shape, F&& body) -> decltype(body());
  void check_chat_template() const;
  PromptIds chat_prompt(const ChatRequest& r, const OutputRules& rules, const char* param, PromptImages images = PromptImages::encoded) const;
  PromptIds with_images(PromptIds prompt, const std::vector<RequestImage>& images, PromptImages work) const;
  void refuse_images_untaken(const ChatRequest& r) const;
  PromptIds text_prompt(std::string_view text, const char* param) const;
  Prepared prepare(const GenerationRequest& r, PromptIds prompt, const OutputRules& rules, std::string id, const char* param) const;
  Started answer(Prepared p, std::shared_ptr<Answer> answer, const std::shared_ptr<ClientWatch>& watch);
  void wire(Job& job, std::size_t choice, const std::shared_ptr<AnswerState>& state, std::int64_t prompt_tokens);
  std::vector<int> infill_ids(const InfillRequest& r, const FimTokens& fim) const;  // openai_service.hpp

  // The name a request's `model` is answered under: one of the served names (404 for any other;
  // `required`: an empty name is refused too), or the first when the request named none.
  const std::string& served_name(const std::string& model, bool required = false) const {
    for (const auto& n : names_)
      if (n == model) return n;
    if (model.empty() && !required) return names_.front();
    std::string served;
    for (const auto& n : names_) served += (served.empty() ? "'" : ", '") + n + "'";
    throw ApiError(status::not_found, "model '" + shown(model) + "' not found (this server serves " + served + ")", "model",
                   "model_not_found");
  }
  void check_model(const std::string& model) const { (void)served_name(model); }

  Reply run_engine_task(std::function<void()> work, const std::shared_ptr<ClientWatch>& watch);  // retrieval.hpp
  json::Value response_conversation(ResponsesRequest& r) const;  // responses_service.hpp
  std::function<std::optional<json::Value>(const std::string&)> stored_items() const {
    return [this](const std::string& id) { return stored_.find_item(id); };
  }

  // The prompt of a chat request, as Session::render_chat_prompt makes it: the text and the byte
  // ranges that came from the request. Tool-call arguments sent as JSON strings reach the template
  // as the mappings it expects (chat/tool_arguments.hpp).
  // A continued final message (prefill.hpp) renders without the generation prompt and is cut.
  RenderedPrompt render(const ChatRequest& r) const {
    json::Value kwargs = r.chat.extra_kwargs.is_object() ? r.chat.extra_kwargs : json::Value(json::Object{});
    kwargs.set("enable_thinking", r.chat.enable_thinking);
    RenderOptions options;
    options.add_generation_prompt = r.prompt_end == PromptEnd::generation_prompt;
    options.tools = r.chat.tools;
    options.kwargs = std::move(kwargs);
    RenderedPrompt p = render_client_chat(engine_.chat_template(), r.messages, options);
    return r.prompt_end == PromptEnd::continue_final ? cut_after_final_message(std::move(p), r.messages, "messages") : p;
  }

  // The server's --chat-template-kwargs under the request's own, and its --reasoning where the
  // request chose nothing; before the answer's rules are made (a constraint knows the thinking).
  void apply_chat_defaults(ChatRequest& r) const {
    const TemplateDefaults& d = options_.template_defaults;
    r.chat.extra_kwargs = d.under(r.chat.extra_kwargs);
    if (d.enable_thinking && !r.thinking_chosen) r.chat.enable_thinking = *d.enable_thinking;
  }

  // The prompt's ids under options_.content_tokens, and whether they leave a <think> block open
  // (decided by token: in plain mode a "<think>" typed by the client is text).
  PromptIds tokenize(const RenderedPrompt& p) const {
    const Tokenizer& t = engine_.tokenizer();
    std::vector<int> ids = options_.content_tokens == ContentTokens::plain ? t.encode_with_plain(p.text, p.from_request) : t.encode(p.text);
    const int open = t.token_to_id("<think>").value_or(-1), close = t.token_to_id("</think>").value_or(-1);
    const bool reasoning = open >= 0 ? Session::opens_reasoning(ids, open, close) : Session::opens_reasoning(p.text);
    return {std::move(ids), reasoning ? Channel::reasoning : Channel::answer, {}};
  }

  // A prompt of more than context × (longest token's bytes) × 3 bytes cannot fit: each token
  // covers at most the longest token's bytes of normalized text, and NFC shrinks text at most
  // threefold (Hangul jamo L+V+T, 9 bytes, compose to one 3-byte syllable). Checked on the text
  // about to be tokenized (a chat's rendered template), so a huge prompt costs no BPE work.
  static std::size_t max_prompt_bytes(const Tokenizer& tokenizer, std::int64_t context) {
    std::size_t longest = 1;
    for (int id = 0; id < tokenizer.vocab_size(); ++id)
      if (tokenizer.id_to_token(id)) longest = std::max(longest, tokenizer.token_bytes(id).size());
    for (const auto& t : tokenizer.added_tokens()) longest = std::max(longest, t.content.size());
    return static_cast<std::size_t>(context) * longest * 3;
  }

  void check_prompt_bytes(std::size_t bytes, const std::string& param) const {
    if (bytes > max_prompt_bytes_)
      throw ApiError(status::bad_request,
                     "the prompt text has " + std::to_string(bytes) + " bytes; at most " + std::to_string(max_prompt_bytes_) +
                         " can fit in this model's context of " + std::to_string(scheduler_.context_length()) + " tokens",
                     param, "context_length_exceeded");
  }

  // "fp_" and 16 hex digits of a hash of the model's files, backend, weight format and layout
  // (the prompt cache's engine identity) and the build.
  static std::string system_fingerprint(const Engine& engine, const std::string& build_id) {
    Xxh64 h;
    h.add(engine_identity(engine));
    h.add(build_id.size()).update(std::as_bytes(std::span(build_id)));
    static constexpr char hex[] = "0123456789abcdef";
    std::string out = "fp_";
    for (int shift = 60; shift >= 0; shift -= 4) out += hex[(h.digest() >> shift) & 0xF];
    return out;
  }

  // Queues a request's jobs together (all or none): 503 when draining or the queue is full.
  void submit(const std::vector<std::shared_ptr<Job>>& jobs) {
    if (draining_) throw ApiError(status::unavailable, "the server is shutting down", {}, "server_shutting_down");
    if (!scheduler_.submit(jobs))
      throw ApiError(status::unavailable, jobs.size() > 1 ? "the request queue has no room for this request's " + std::to_string(jobs.size()) +
                                                                " choices (each takes a place); retry later"
                                                          : "the request queue is full; retry later",
                     {}, "server_overloaded");
    std::lock_guard lock(jobs_mutex_);
    std::erase_if(jobs_, [](const std::weak_ptr<Job>& w) { return w.expired(); });
    jobs_.insert(jobs_.end(), jobs.begin(), jobs.end());
  }

  // For a single job that is not a generation (embeddings, rerank): cancels it when the client
  // goes away.
  static void watch_client(const std::shared_ptr<ClientWatch>& watch, const std::shared_ptr<Job>& job) {
    if (!watch) return;
    watch->on_gone([weak = std::weak_ptr<Job>(job)] {
      if (auto j = weak.lock()) j->cancelled = true;
    });
  }

  static Failure shutdown_failure() {
    return {status::unavailable, "the server shut down before this request finished", {}, "server_shutting_down"};
  }
  static Reply shutdown_reply() { return {status::unavailable, error_body(shutdown_failure())}; }

  // A non-streamed request is answered here, on the calling thread, once its jobs are done.
  Reply submit_and_wait(const std::vector<std::shared_ptr<Job>>& jobs, std::future<Reply> reply) {
    ++in_flight_;
    struct Done {
      std::atomic<int>& n;
      ~Done() { --n; }
    } done{in_flight_};
    submit(jobs);
    return reply.get();
  }

  static Reply failure(const Failure& f) { return {f.status, error_body(f)}; }

  Engine& engine_;
  Scheduler& scheduler_;
  std::vector<std::string> names_;  // served model ids, the first the server's own
  std::int64_t created_;
  std::size_t max_prompt_bytes_;
  ServiceOptions options_;
  ConstraintFactory constraints_;
  std::string fingerprint_;
  ResponseStore stored_;
  Metrics metrics_;
  std::atomic<bool> draining_{false}, aborting_{false};
  std::atomic<int> in_flight_{0};
  std::mutex jobs_mutex_;
  std::vector<std::weak_ptr<Job>> jobs_;  // submitted, for abort()
};

}  // namespace kylin::server
