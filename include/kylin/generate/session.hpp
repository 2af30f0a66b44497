// Session: one conversation's KV cache plus the generation loop. Each call renders (or takes)
// the full prompt, reuses the cached prefix it shares with what was fed before, prefills only
// the rest, then samples token by token, streaming UTF-8-safe pieces tagged with their channel
// (Qwen3's <think> reasoning or the answer) until EOS, a stop string, a limit or the callback.
#pragma once

#include <chrono>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kylin/constrain/constraint.hpp"
#include "kylin/generate/engine.hpp"
#include "kylin/generate/generation_stats.hpp"
#include "kylin/generate/channel_router.hpp"
#include "kylin/generate/prompt_cache.hpp"
#include "kylin/generate/speculative.hpp"
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
  // Speculative decoding (generate/speculative.hpp, docs/SPECULATIVE.md): drafts from a draft
  // model and/or prompt lookup, verified in one target pass; the output is what it is without.
  SpeculativeOptions speculative;
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
  void reset() {
    cache_.reset();
    if (draft_cache_) draft_cache_->reset();
  }
  // The draft model's cache of this session (speculative decoding), made the first time `draft`
  // drafts here, once check_draft accepted it; null before.
  const KVCache* draft_cache() const { return draft_cache_ ? &*draft_cache_ : nullptr; }

  // The whole KV state (cache().tokens() and their keys/values) to `path`, atomically, in the
  // format of docs/PROMPT_CACHE.md; returns the bytes written. kylin::Error (io) on failure.
  std::size_t save(const std::filesystem::path& path) const {
    return write_kv_file(path, kv_file_meta(*engine_), cache_, cache_.size());
  }
  // Replaces the KV state with the one saved in `path`; returns its tokens. A file of another model,
  // KV dtype or format, damaged or too long for the context is a kylin::Error (io) saying which.
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

  KVCache& draft_cache_for(Engine& draft) {
    if (draft_engine_ != &draft) {
      check_draft(*engine_, draft);
      draft_cache_.reset();
      draft_cache_.emplace(draft.model().new_cache(cache_.capacity()));
      draft_engine_ = &draft;
    }
    return *draft_cache_;
  }

  Engine* engine_;
  KVCache cache_;
  std::vector<float> logits_;  // [vocab]
  std::vector<float> verify_logits_;  // [max_draft + 1, vocab] a verification pass's rows
  const Engine* draft_engine_ = nullptr;
  std::optional<KVCache> draft_cache_;
  int think_open_ = -1, think_close_ = -1;
};

// One generation on a Session, advanced one model step at a time: the caller runs the model on
// input() (alone, or beside other runs in one batched forward) and then calls advance(). With
// speculative decoding, the draft model runs first on draft_input() while drafting(), each time
// followed by advance_draft(); input() then verifies the drafts. Session::generate drives one run
// by itself; kylin-server's scheduler steps all its slots' runs together.
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
    if (o_.speculative.enabled()) {
      KVCache* draft_cache = o_.speculative.draft ? &s.draft_cache_for(*o_.speculative.draft) : nullptr;
      spec_.emplace(o_.speculative, *s.engine_, draft_cache, sampler_.params());
      s.verify_logits_.resize(static_cast<std::size_t>(o_.speculative.max_draft + 1) * s.logits_.size());
    }
    start_prefill();
    chunk_ = prefill_chunk > 0 ? prefill_chunk : o_.on_prefill ? 256 : static_cast<std::int64_t>(rest_.size());
    // the draft catches up in the same chunks, not in the rest's: its cache may reuse less
    draft_chunk_ = prefill_chunk > 0 || o_.on_prefill ? chunk_ : std::numeric_limits<std::int64_t>::max();
    if (o_.constraint) o_.constraint->begin(channel == Channel::reasoning);
    plan_step();
  }
  GenerationRun(const GenerationRun&) = delete;
  GenerationRun& operator=(const GenerationRun&) = delete;

  bool done() const { return done_; }
  bool prefilling() const { return fed_ < static_cast<std::int64_t>(rest_.size()); }

  // The next forward: a chunk of the prompt, the last sampled token, or that token and the drafts
  // to verify (decode rows: each row's logits as a one-token step would give them), on the
  // session's cache; the logits of its last row (of every row when verifying) to the session's
  // buffers. Only while !done() and !drafting().
  SequenceInput input() {
    if (prefilling()) {
      const auto n = std::min<std::int64_t>(chunk_, static_cast<std::int64_t>(rest_.size()) - fed_);
      return {rest_.subspan(static_cast<std::size_t>(fed_), static_cast<std::size_t>(n)), s_.cache_, {.logits = s_.logits_}};
    }
    if (!verifying()) return {std::span<const int>(&g_.tokens.back(), 1), s_.cache_, {.logits = s_.logits_}};
    verify_feed_.assign(1, g_.tokens.back());
    verify_feed_.insert(verify_feed_.end(), spec_->drafts().begin(), spec_->drafts().end());
    const std::size_t rows = verify_feed_.size() * s_.logits_.size();
    return {verify_feed_, s_.cache_, {.logits = std::span<float>(s_.verify_logits_).first(rows), .positions = Positions::all}, true};
  }

  // After the forward of input(): reports prefill progress, or samples (verifies) and emits the
  // next token(s) and decides whether the generation goes on.
  void advance() {
    if (prefilling()) {
      fed_ += std::min<std::int64_t>(chunk_, static_cast<std::int64_t>(rest_.size()) - fed_);
      if (o_.on_prefill) o_.on_prefill(fed_, static_cast<std::int64_t>(rest_.size()));
      if (prefilling()) return plan_step();
      end_prefill();
      if (o_.max_new_tokens <= 0) return stop(StopReason::max_tokens);
      sample(s_.logits_, -1);
    } else {
      ++g_.stats.decode_passes;
      if (verifying()) verify();
      else sample(s_.logits_, -1);
    }
    plan_step();
  }

  // Speculative decoding: whether a draft-model forward (on draft_model(), of draft_input()) and
  // then advance_draft() come before the next input().
  bool drafting() const { return !done_ && spec_ && spec_->drafting(); }
  Model& draft_model() { return o_.speculative.draft->model(); }
  SequenceInput draft_input() {
    t_draft_ = clock::now();
    return spec_->input();
  }
  void advance_draft() {
    g_.stats.draft_ms += ms_since(t_draft_);
    spec_->advance();
  }

  // Ends the generation before its natural end (e.g. its client left), as cancelled.
  void cancel() {
    if (spec_) spec_->abandon();
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
    o.speculative.validate();
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

  TokenContext context() const { return {prompt_, g_.tokens}; }
  bool verifying() const { return spec_ && !spec_->drafts().empty(); }

  // The drafts of the next pass: as many as the pass could emit before max_new_tokens or a full
  // context ends the generation (the pass emits up to drafts + 1 tokens).
  void plan_step() {
    if (!spec_ || done_) return;
    std::int64_t most = 0;
    if (!prefilling())
      most = std::min<std::int64_t>({o_.speculative.max_draft, o_.max_new_tokens - static_cast<std::int64_t>(g_.tokens.size()) - 1,
                                     s_.cache_.remaining() - 1});
    spec_->begin(context(), {.max_drafts = most, .prefilling = prefilling(), .chunk = draft_chunk_}, o_.constraint);
  }

  // The rows of a verification pass, in order, until one rejects its draft or the generation
  // ends: each row is sampled as the step without speculation would sample it (on_logits, the
  // constraint's mask, every sampler option), its draft kept or replaced by verify_draft. Then
  // both caches keep only what the context holds, as they would without speculation.
  void verify() {
    const std::span<const int> drafts = spec_->drafts();
    const std::size_t V = s_.logits_.size();
    g_.stats.draft_tokens += static_cast<std::int64_t>(drafts.size());
    for (std::size_t i = 0; i <= drafts.size() && !done_; ++i) {
      const std::span<float> row = std::span<float>(s_.verify_logits_).subspan(i * V, V);
      if (i == drafts.size()) sample(row, -1);  // every draft accepted: one more token from the last row
      else if (!sample(row, drafts[i])) break;
      else ++g_.stats.draft_accepted;
    }
    // Positions after the last token are not fed yet, except after an EOS, which is not in the context.
    const TokenContext ctx = context();
    const std::size_t fed = eos_token_ ? ctx.size() : ctx.size() - 1;
    s_.cache_.truncate(static_cast<std::int64_t>(std::min(ctx.common_prefix(s_.cache_.tokens()), fed)));
    if (s_.draft_cache_) s_.draft_cache_->truncate(static_cast<std::int64_t>(ctx.common_prefix(s_.draft_cache_->tokens())));
  }

  // Samples the token after `row` and emits it. With a draft token (>= 0), the draw is
  // verify_draft's; returns whether the draft was accepted.
  bool sample(std::span<float> row, int draft) {
    if (o_.on_logits) o_.on_logits(row);
    if (o_.constraint) o_.constraint->mask(row);
    const SamplingCandidates c = sampler_.candidates(row, prompt_, g_.tokens);
    const DraftVerdict v = draft >= 0 ? verify_draft(sampler_, c, draft) : DraftVerdict{sampler_.draw(c), false};
    emit(v.id);
    return v.accepted;
  }

  void emit(int id) {
    if (g_.tokens.empty()) {
      g_.stats.ttft_ms = ms_since(t0_);
      t_first_ = clock::now();
    }
    if (!o_.ignore_eos && s_.engine_->is_eos(id)) {
      eos_token_ = true;
      return stop(StopReason::eos);
    }
    g_.tokens.push_back(id);
    if (o_.on_token) o_.on_token(id);
    if (o_.constraint) o_.constraint->accept(id);
    bool keep = true;
    if (id == s_.think_open_ && emit_.channel() == Channel::answer) keep = emit_.switch_to(Channel::reasoning);
    else if (id == s_.think_close_ && emit_.channel() == Channel::reasoning) keep = emit_.switch_to(Channel::answer);
    else keep = emit_.text(decoder_.push(id));
    const auto context = static_cast<std::int64_t>(prompt_.size() + g_.tokens.size());
    if (emit_.stopped_by_string()) stop(StopReason::stop_string);
    else if (!keep) stop(StopReason::cancelled);
    else if (o_.constraint && o_.constraint->finished()) stop(StopReason::eos);
    else if (static_cast<std::int64_t>(g_.tokens.size()) >= o_.max_new_tokens) stop(StopReason::max_tokens);
    else if (context - 1 >= s_.cache_.capacity()) stop(StopReason::context_full);  // the cache holds all but the last token
  }

  Session& s_;
  std::span<const int> prompt_;
  GenerateOptions o_;
  clock::time_point t0_, t_prefill_, t_first_, t_draft_;
  Generation g_;
  Sampler sampler_;
  StreamDecoder decoder_;
  ChannelRouter emit_;
  std::span<const int> rest_;  // the prompt after the reused prefix: what the prefill runs
  std::int64_t fed_ = 0;       // of rest_
  std::int64_t chunk_ = 0, draft_chunk_ = 0;
  bool done_ = false;
  bool eos_token_ = false;          // ended by an EOS token (which the context does not hold)
  std::optional<Speculator> spec_;  // with GenerateOptions::speculative enabled
  std::vector<int> verify_feed_;    // [drafts + 1] the last token and the drafts
};

inline Generation Session::generate(std::span<const int> prompt, const GenerateOptions& o, Channel channel) {
  GenerationRun run(*this, prompt, o, channel);
  while (!run.done()) {
    while (run.drafting()) {
      const SequenceInput in = run.draft_input();
      run.draft_model().forward(std::span<const SequenceInput>(&in, 1));
      run.advance_draft();
    }
    const SequenceInput in = run.input();
    engine_->model().forward(std::span<const SequenceInput>(&in, 1));
    run.advance();
  }
  return run.finish();
}

}  // namespace kylin
