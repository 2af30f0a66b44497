// Session: one conversation's KV cache plus the generation loop. Each call renders (or takes)
// the full prompt, reuses the cached prefix it shares with what was fed before, prefills only
// the rest, then samples token by token, streaming UTF-8-safe pieces tagged with their channel
// (Qwen3's <think> reasoning or the answer) until EOS, a stop string, a limit or the callback.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kylin/constrain/constraint.hpp"
#include "kylin/generate/engine.hpp"
#include "kylin/generate/generation_stats.hpp"
#include "kylin/generate/channel_router.hpp"
#include "kylin/generate/prompt_cache.hpp"
#include "kylin/tokenizer/stream_decoder.hpp"

namespace kylin {

enum class StopReason { eos, stop_string, max_tokens, context_full, cancelled };

constexpr std::string_view to_string(StopReason r) {
  switch (r) {
    case StopReason::eos: return "eos";
    case StopReason::stop_string: return "stop_string";
    case StopReason::max_tokens: return "max_tokens";
    case StopReason::context_full: return "context_full";
    case StopReason::cancelled: return "cancelled";
  }
  return "unknown";
}

struct GenerateOptions {
  SamplingOverrides sampling;             // on top of the engine's generation_config defaults
  std::int64_t max_new_tokens = 512;
  std::vector<std::string> stop;          // answer text ends before the first of these
  bool ignore_eos = false;
  std::function<bool(const Piece&)> on_piece;                              // false: stop now
  std::function<void(std::int64_t done, std::int64_t total)> on_prefill;  // progress of long prompts
  // May edit each step's logit row [model vocab] before sampling (a logit bias, a constraint).
  // Whatever it writes, only the tokenizer's ids are sampled (Engine::sampleable_ids).
  std::function<void(std::span<float> logits)> on_logits;
  // Each sampled token except an ending EOS, before its text reaches on_piece (logprobs pair
  // the row on_logits saw with the id drawn from it).
  std::function<void(int id)> on_token;
  // A grammar the answer must follow (constrain/constraint.hpp) or null. Its mask goes on after
  // on_logits, so no edit re-enables a forbidden token; it is told every sampled token, and
  // generation ends (StopReason::eos) once the grammar's sentence is complete and closed.
  constrain::Constraint* constraint = nullptr;
  // A disk cache of prompt prefixes (generate/prompt_cache.hpp) or null. The prefill loads its
  // longest stored prefix of the prompt when that beats what the session's cache holds; with
  // store_prompt, the prompt's keys and values are handed to its background writer at the end.
  PromptCache* prompt_cache = nullptr;
  bool store_prompt = true;
};

struct ChatOptions {
  bool enable_thinking = true;
  json::Value tools;          // null or an array of tool schemas
  json::Value extra_kwargs;   // more template variables (an object), e.g. from a request
  // special: message text spelling <|im_start|> etc. becomes that token, as transformers does
  // (the library default). plain: it stays text, so untrusted content cannot forge turns
  // (kylin-server's default). See docs/CHAT.md.
  ContentTokens content_tokens = ContentTokens::special;
};


struct Generation {
  std::string content;    // the answer
  std::string reasoning;  // text inside <think>...</think>, newlines at its edges trimmed
  std::vector<int> tokens;
  StopReason stop_reason = StopReason::max_tokens;
  GenerationStats stats;
};

class Session {
 public:
  explicit Session(Engine& engine, std::optional<std::int64_t> context_length = std::nullopt)
      : engine_(&engine),
        cache_(engine.model().new_cache(context_length.value_or(engine.context_length()))),
        logits_(static_cast<std::size_t>(engine.model().vocab_size())) {
    think_open_ = engine.tokenizer().token_to_id("<think>").value_or(-1);
    think_close_ = engine.tokenizer().token_to_id("</think>").value_or(-1);
  }

  // The prompt text the chat template renders for `messages` (with the generation prompt).
  std::string render_chat(const json::Value& messages, const ChatOptions& chat) const {
    return render_chat_prompt(messages, chat).text;
  }

  // The same text, with the byte ranges that came from the messages, tools and kwargs.
  RenderedPrompt render_chat_prompt(const json::Value& messages, const ChatOptions& chat) const {
    if (!engine_->has_chat_template())
      throw Error(ErrorCategory::chat_template, engine_->dir().string(), "no chat template (tokenizer_config.json)");
    json::Value kwargs = chat.extra_kwargs.is_object() ? chat.extra_kwargs : json::Value(json::Object{});
    kwargs.set("enable_thinking", chat.enable_thinking);
    RenderOptions options;
    options.add_generation_prompt = true;
    options.tools = chat.tools;
    options.kwargs = kwargs;
    return engine_->chat_template().render_prompt(messages, options);
  }

  std::vector<int> tokenize_prompt(const std::string& text) const { return engine_->tokenizer().encode(text); }

  // The prompt's token ids under chat.content_tokens.
  std::vector<int> tokenize_chat(const RenderedPrompt& prompt, const ChatOptions& chat) const {
    const Tokenizer& t = engine_->tokenizer();
    return chat.content_tokens == ContentTokens::plain ? t.encode_with_plain(prompt.text, prompt.from_request)
                                                       : t.encode(prompt.text);
  }

  Generation chat(const json::Value& messages, const ChatOptions& chat, const GenerateOptions& o) {
    const RenderedPrompt prompt = render_chat_prompt(messages, chat);
    const std::vector<int> ids = tokenize_chat(prompt, chat);
    // By token: in plain mode a "<think>" typed in the content is text, not an open block.
    const bool reasoning = think_open_ >= 0 ? opens_reasoning(ids, think_open_, think_close_) : opens_reasoning(prompt.text);
    return generate(ids, o, reasoning ? Channel::reasoning : Channel::answer);
  }

  Generation complete(std::string_view text, const GenerateOptions& o) {
    return generate(engine_->tokenizer().encode(text), o, Channel::answer);
  }

  Generation generate(std::span<const int> prompt, const GenerateOptions& o, Channel channel = Channel::answer);

  const KVCache& cache() const { return cache_; }
  void reset() { cache_.reset(); }

  // The whole KV state (cache().tokens() and their keys/values) to `path`, atomically, in the
  // format of docs/PROMPT_CACHE.md; returns the bytes written. kylin::Error (io) on failure.
  std::size_t save(const std::filesystem::path& path) const {
    return write_kv_file(path, kv_file_meta(*engine_), cache_, cache_.size());
  }
  // Replaces the KV state with the one saved in `path`; returns its tokens. A file of another model,
  // weight format, KV dtype or format, damaged, holding a NaN or infinity, too long for the context,
  // a symlink or not a regular file (a FIFO is never opened for reading) is a kylin::Error (io)
  // saying which.
  std::int64_t load(const std::filesystem::path& path) {
    KVFileReader file(path, kv_file_meta(*engine_));
    file.load_into(cache_);
    return cache_.size();
  }
  // Hands the KV of the prompt's tokens that this session's cache holds to `cache`'s background
  // writer (after generate() with store_prompt false, once the answer went out).
  bool store_prompt(PromptCache& cache, std::span<const int> prompt) const { return cache.store(cache_, cache_.common_prefix(prompt)); }
  Engine& engine() { return *engine_; }

  // A prompt that ends inside an unclosed <think> makes the model continue its reasoning.
  static bool opens_reasoning(std::string_view prompt) {
    const auto open = prompt.rfind("<think>"), close = prompt.rfind("</think>");
    return open != std::string_view::npos && (close == std::string_view::npos || close < open);
  }
  static bool opens_reasoning(std::span<const int> ids, int open_id, int close_id) {
    for (std::size_t i = ids.size(); i-- > 0;) {
      if (ids[i] == close_id) return false;
      if (ids[i] == open_id) return true;
    }
    return false;
  }

 private:
  friend class GenerationRun;

  Engine* engine_;
  KVCache cache_;
  std::vector<float> logits_;  // [vocab]
  int think_open_ = -1, think_close_ = -1;
};

// One generation on a Session, advanced one model step at a time: the caller runs the model on
// input() (alone, or beside other runs in one batched forward) and then calls advance(). Session::
// generate drives one run by itself; kylin-server's scheduler steps all its slots' runs together.
// The run keeps references to the session and the prompt ids; it may not be moved.
class GenerationRun {
 public:
  // Checks the options, reuses the cached prefix (or a stored one from o.prompt_cache) and plans
  // the prefill in chunks of at most `prefill_chunk` tokens (0: the whole rest in one input).
  GenerationRun(Session& s, std::span<const int> prompt, GenerateOptions o, Channel channel, std::int64_t prefill_chunk = 0)
      : s_(s), prompt_(prompt), o_(std::move(o)), t0_(clock::now()),
        sampler_(s.logits_.size(), checked_params(*s.engine_, o_), s.engine_->sampleable_ids()),  // never an id without a token
        decoder_(s.engine_->tokenizer()),
        emit_(o_.on_piece, o_.stop, g_.content, g_.reasoning, channel) {
    g_.stats.load_ms = s.engine_->load_ms();
    start_prefill();
    chunk_ = prefill_chunk > 0 ? prefill_chunk : o_.on_prefill ? 256 : static_cast<std::int64_t>(rest_.size());
    if (o_.constraint) o_.constraint->begin(channel == Channel::reasoning);
  }
  GenerationRun(const GenerationRun&) = delete;
  GenerationRun& operator=(const GenerationRun&) = delete;

  bool done() const { return done_; }
  bool prefilling() const { return fed_ < static_cast<std::int64_t>(rest_.size()); }

  // The next forward: a chunk of the prompt, or the last sampled token, on the session's cache,
  // its last row's logits into the session's buffer. Only while !done().
  SequenceInput input() {
    const std::span<const int> tokens =
        prefilling() ? rest_.subspan(static_cast<std::size_t>(fed_), static_cast<std::size_t>(std::min<std::int64_t>(
                                                                          chunk_, static_cast<std::int64_t>(rest_.size()) - fed_)))
                     : std::span<const int>(&g_.tokens.back(), 1);
    return {tokens, s_.cache_, {.logits = s_.logits_}};
  }

  // After the forward of input(): reports prefill progress, or samples and emits the next token
  // and decides whether the generation goes on.
  void advance() {
    if (prefilling()) {
      fed_ += std::min<std::int64_t>(chunk_, static_cast<std::int64_t>(rest_.size()) - fed_);
      if (o_.on_prefill) o_.on_prefill(fed_, static_cast<std::int64_t>(rest_.size()));
      if (prefilling()) return;
      end_prefill();
      if (o_.max_new_tokens <= 0) return stop(StopReason::max_tokens);
    }
    sample();
  }

  // Ends the generation before its natural end (e.g. its client left), as cancelled.
  void cancel() {
    if (!done_) stop(StopReason::cancelled);
  }

  // The result, once done(). Stores the prompt in o.prompt_cache when asked to.
  Generation finish() {
    if (g_.stop_reason != StopReason::stop_string && g_.stop_reason != StopReason::cancelled) {
      emit_.text(decoder_.flush());
      emit_.finish();
    }
    GenerationStats& st = g_.stats;
    st.generated_tokens = static_cast<std::int64_t>(g_.tokens.size());
    // Decode speed counts the tokens after the first, which came out of the prefill.
    st.decode_ms = g_.tokens.empty() ? 0 : ms_since(t_first_);
    const auto decoded = st.generated_tokens > 1 ? st.generated_tokens - 1 : 0;
    st.decode_tok_s = st.decode_ms > 0 && decoded ? 1000.0 * static_cast<double>(decoded) / st.decode_ms : 0;
    if (o_.prompt_cache && o_.store_prompt) s_.store_prompt(*o_.prompt_cache, prompt_);
    return std::move(g_);
  }

 private:
  using clock = std::chrono::steady_clock;
  static double ms_since(clock::time_point t) { return std::chrono::duration<double, std::milli>(clock::now() - t).count(); }
  static SamplingParams checked_params(const Engine& e, const GenerateOptions& o) {
    const SamplingParams params = apply_overrides(e.default_sampling(), o.sampling);
    params.validate();
    return params;
  }

  void start_prefill() {
    KVCache& cache = s_.cache_;
    if (prompt_.empty()) throw Error(ErrorCategory::request, "prompt", "empty prompt");
    if (static_cast<std::int64_t>(prompt_.size()) >= cache.capacity())
      throw Error(ErrorCategory::request, "prompt",
                  "prompt of " + std::to_string(prompt_.size()) + " tokens leaves no room in the context of " +
                      std::to_string(cache.capacity()) + " tokens");
    // Reuse the shared prefix; at least the last prompt token is re-run to get its logits.
    const auto last = static_cast<std::int64_t>(prompt_.size()) - 1;
    std::int64_t reuse = std::min<std::int64_t>(cache.common_prefix(prompt_), last);
    if (o_.prompt_cache) {
      const auto t_load = clock::now();
      if (o_.prompt_cache->load(prompt_, cache, reuse) > 0) g_.stats.cache_load_ms = ms_since(t_load);
      reuse = std::min<std::int64_t>(cache.common_prefix(prompt_), last);
    }
    cache.truncate(reuse);
    rest_ = prompt_.subspan(static_cast<std::size_t>(reuse));
    g_.stats.prompt_tokens = static_cast<std::int64_t>(prompt_.size());
    g_.stats.cached_tokens = reuse;
    g_.stats.prefill_tokens = static_cast<std::int64_t>(rest_.size());
    t_prefill_ = clock::now();
  }

  void end_prefill() {
    g_.stats.prefill_ms = ms_since(t_prefill_);
    g_.stats.prefill_tok_s = g_.stats.prefill_ms > 0 ? 1000.0 * static_cast<double>(rest_.size()) / g_.stats.prefill_ms : 0;
  }

  void stop(StopReason r) {
    g_.stop_reason = r;
    done_ = true;
  }

  void sample() {
    std::span<float> logits = s_.logits_;
    if (o_.on_logits) o_.on_logits(logits);
    if (o_.constraint) o_.constraint->mask(logits);
    const int id = sampler_.sample(logits, prompt_, g_.tokens);
    if (g_.tokens.empty()) {
      g_.stats.ttft_ms = ms_since(t0_);
      t_first_ = clock::now();
    }
    if (!o_.ignore_eos && s_.engine_->is_eos(id)) return stop(StopReason::eos);
    g_.tokens.push_back(id);
    if (o_.on_token) o_.on_token(id);
    if (o_.constraint) o_.constraint->accept(id);
    bool keep = true;
    if (id == s_.think_open_ && emit_.channel() == Channel::answer) keep = emit_.switch_to(Channel::reasoning);
    else if (id == s_.think_close_ && emit_.channel() == Channel::reasoning) keep = emit_.switch_to(Channel::answer);
    else keep = emit_.text(decoder_.push(id));
    if (emit_.stopped_by_string()) stop(StopReason::stop_string);
    else if (!keep) stop(StopReason::cancelled);
    else if (o_.constraint && o_.constraint->finished()) stop(StopReason::eos);
    else if (static_cast<std::int64_t>(g_.tokens.size()) >= o_.max_new_tokens) stop(StopReason::max_tokens);
    else if (s_.cache_.remaining() == 0) stop(StopReason::context_full);
  }

  Session& s_;
  std::span<const int> prompt_;
  GenerateOptions o_;
  clock::time_point t0_, t_prefill_, t_first_;
  Generation g_;
  Sampler sampler_;
  StreamDecoder decoder_;
  ChannelRouter emit_;
  std::span<const int> rest_;  // the prompt after the reused prefix: what the prefill runs
  std::int64_t fed_ = 0;       // of rest_
  std::int64_t chunk_ = 0;
  bool done_ = false;
};

inline Generation Session::generate(std::span<const int> prompt, const GenerateOptions& o, Channel channel) {
  GenerationRun run(*this, prompt, o, channel);
  while (!run.done()) {
    const SequenceInput in = run.input();
    engine_->model().forward(std::span<const SequenceInput>(&in, 1));
    run.advance();
  }
  return run.finish();
}

}  // namespace kylin
