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
  // The prompt's image tokens (model/image_rows.hpp), rows counted over the whole prompt, their rows holding
  // image keys (image_token_key): the embeddings the vision tower gave (Model::encode_image). Not with speculative decoding.
  std::span<const ImageRows> images;
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

  // `images`: the messages' image parts in order (the items the template renders as one <|image_pad|> each),
  // decoded (io::decode_image); each is preprocessed and run through the vision tower here.
  Generation chat(const json::Value& messages, const ChatOptions& chat, const GenerateOptions& o,
                  std::span<const vision::Image> images = {}) {
    if (!images.empty()) (void)engine_->image_processor();  // a model without a tower: said before its template sees image items
    const RenderedPrompt prompt = render_chat_prompt(messages, chat);
    const ImagePrompt p = engine_->encode_images(tokenize_chat(prompt, chat), images);
    return generate(p, o, prompt_channel(p.ids, prompt.text));
  }

  // Where a chat prompt leaves the model: by token, so that in plain mode a "<think>" typed in the content is
  // text, not an open block.
  Channel prompt_channel(std::span<const int> ids, std::string_view text) const {
    const bool reasoning = think_open_ >= 0 ? opens_reasoning(ids, think_open_, think_close_) : opens_reasoning(text);
    return reasoning ? Channel::reasoning : Channel::answer;
  }

  Generation complete(std::string_view text, const GenerateOptions& o) {
    return generate(engine_->tokenizer().encode(text), o, Channel::answer);
  }

  Generation generate(std::span<const int> prompt, const GenerateOptions& o, Channel channel = Channel::answer);
  // A prompt Engine::encode_images made: its ids fed with its images' rows.
  Generation generate(const ImagePrompt& prompt, const GenerateOptions& o, Channel channel = Channel::answer) {
    if (prompt.rows.empty()) return generate(prompt.ids, o, channel);
    GenerateOptions with = o;
    with.images = prompt.rows;
    return generate(prompt.ids, with, channel);
  }

  const KVCache& cache() const { return cache_; }
  void reset() {
    cache_.reset();
    if (draft_cache_) draft_cache_->reset();
    if (mtp_) mtp_->reset();
  }
  // The draft model's cache of this session (speculative decoding), made the first time `draft`
  // drafts here, once check_draft accepted it; null before.
  const KVCache* draft_cache() const { return draft_cache_ ? &*draft_cache_ : nullptr; }
  // The MTP head's side of this session (SpeculativeOptions::mtp), made the first time it drafts here; null before.
  const MtpContext* mtp() const { return mtp_ ? &*mtp_ : nullptr; }
  // Starts from the first n positions of `other`'s cache (same model), copied instead of prefilled.
  void copy_prefix(const Session& other, std::int64_t n) { cache_.copy_prefix(other.cache_, n); }

  // The whole KV state (cache().tokens() and their keys/values, and a hybrid model's recurrent state with
  // its snapshots) to `path`, atomically, in the format of docs/PROMPT_CACHE.md; returns the bytes written.
  // kylin::Error (io) on failure.
  std::size_t save(const std::filesystem::path& path) const {
    return write_kv_file(path, kv_file_meta(*engine_), cache_, cache_.size(), true);
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
  // With recurrent states, the prefix stored is the last snapshot short of the prompt's end (before its last
  // turn opener): what a later prompt sharing this one's turns can resume from.
  bool store_prompt(PromptCache& cache, std::span<const int> prompt) const {
    const std::int64_t shared = cache_.common_prefix(prompt);
    return cache.store(cache_, cache_.has_states() ? std::min<std::int64_t>(shared, static_cast<std::int64_t>(prompt.size()) - 1) : shared);
  }
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

  MtpContext& mtp_context() {
    if (!engine_->model().has_mtp())
      throw Error(ErrorCategory::request, "speculative.mtp", "the model was loaded without its MTP head (--mtp, EngineOptions::mtp)");
    if (!mtp_) mtp_.emplace(engine_->model(), cache_.capacity());
    return *mtp_;
  }

  Engine* engine_;
  KVCache cache_;
  std::vector<float> logits_;  // [vocab]
  std::vector<float> verify_logits_;  // [max_draft + 1, vocab] a verification pass's rows
  const Engine* draft_engine_ = nullptr;
  std::optional<KVCache> draft_cache_;
  std::optional<MtpContext> mtp_;
  int think_open_ = -1, think_close_ = -1;
};

}  // namespace kylin

// GenerationRun and Session::generate, which need Session complete.
#include "kylin/generate/generation_run.hpp"
