// Speculative decoding: cheap guesses at the next tokens (a small draft model of the same
// tokenizer, or prompt lookup: what followed an earlier occurrence of the last n-gram), checked by
// the target in one batched pass. Leviathan et al. 2023's acceptance rule keeps the output
// distribution the target's, and greedy output identical token for token (docs/SPECULATIVE.md).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kylin/constrain/constraint.hpp"
#include "kylin/generate/engine.hpp"
#include "kylin/generate/mtp_context.hpp"
#include "kylin/generate/token_context.hpp"

namespace kylin {

struct SpeculativeOptions {
  Engine* draft = nullptr;  // a smaller model with the target's tokenizer (check_draft), or null
  bool mtp = false;         // the target's own MTP head drafts (loaded with ModelOptions::mtp); not beside a draft model
  int max_draft = 8;        // k: most tokens proposed per verification pass
  float p_min = 0.75f;      // the draft model stops proposing once its top token's probability is below this
  int lookup = 0;           // prompt lookup: longest n-gram matched against the context (0: off)

  bool enabled() const { return max_draft > 0 && (draft != nullptr || mtp || lookup > 0); }
  void validate() const {
    if (mtp && draft) throw Error(ErrorCategory::request, "speculative.mtp", "the MTP head and a draft model cannot both draft; pick one");
    if (max_draft < 0 || max_draft > max_draft_limit)
      throw Error(ErrorCategory::request, "speculative.max_draft", "must be in [0, " + std::to_string(max_draft_limit) + "], got " + std::to_string(max_draft));
    if (!(p_min >= 0.0f && p_min <= 1.0f))
      throw Error(ErrorCategory::request, "speculative.p_min", "must be in [0, 1], got " + detail::number_text(p_min));
    if (lookup < 0 || lookup > max_lookup)
      throw Error(ErrorCategory::request, "speculative.lookup", "must be in [0, " + std::to_string(max_lookup) + "], got " + std::to_string(lookup));
  }
  static constexpr int max_draft_limit = 64;  // a verification pass of more rows costs about a prefill chunk
  static constexpr int max_lookup = 16;
};

// A draft must tokenize as the target does: the same ids for the same tokens, the same special
// tokens. Model vocab_size may differ (a padded lm_head), only the tokenizer's ids are drafted.
// Throws kylin::Error (config) naming the draft directory and the first difference.
inline void check_draft(const Engine& target, const Engine& draft) {
  auto refuse = [&](const std::string& what) {
    throw Error(ErrorCategory::config, draft.dir().string(), "cannot draft for " + target.dir().string() + ": " + what);
  };
  if (!draft.model().has_lm_head()) refuse("the draft has no lm_head (an embedding model?)");
  const Tokenizer &t = target.tokenizer(), &d = draft.tokenizer();
  if (t.vocab_size() != d.vocab_size())
    refuse("its tokenizer has " + std::to_string(d.vocab_size()) + " token ids, the target's " + std::to_string(t.vocab_size()));
  auto spelled = [](std::optional<std::string_view> s) { return s ? "'" + std::string(*s) + "'" : std::string("no token"); };
  for (int id = 0; id < t.vocab_size(); ++id) {
    const auto a = t.id_to_token(id), b = d.id_to_token(id);
    if (a != b) refuse("id " + std::to_string(id) + " is " + spelled(b) + " in the draft's vocabulary, " + spelled(a) + " in the target's");
    if (t.is_special(id) != d.is_special(id))
      refuse("special tokens differ: " + spelled(a) + " (id " + std::to_string(id) + ") is special only in the " +
             (t.is_special(id) ? "target's" : "draft's") + " tokenizer");
  }
}

// Prompt lookup decoding (Saxena 2023, github.com/apoorvumang/prompt-lookup-decoding): for n from
// max_ngram down to 1, the most recent earlier occurrence of the context's last n tokens; what
// followed it (up to max_tokens, within the context) is appended to `out`. The longest n wins.
inline void lookup_continuation(const TokenContext& ctx, int max_ngram, std::size_t max_tokens, std::vector<int>& out) {
  const std::size_t size = ctx.size();
  for (auto n = static_cast<std::size_t>(max_ngram); n >= 1 && max_tokens > 0; --n) {
    if (n >= size) continue;
    const std::size_t suffix = size - n;
    for (std::size_t start = suffix; start-- > 0;) {
      std::size_t i = 0;
      while (i < n && ctx[start + i] == ctx[suffix + i]) ++i;
      if (i < n) continue;
      for (std::size_t j = start + n; j < size && out.size() < max_tokens; ++j) out.push_back(ctx[j]);
      return;
    }
  }
}

// What the target made of one draft token.
struct DraftVerdict {
  int id;         // the token emitted at this position
  bool accepted;  // id is the draft token
};

// Leviathan et al. 2023 (arXiv:2211.17192), Algorithm 1: a draft token x proposed with probability
// q(x) is kept with probability min(1, p(x) / q(x)), else the token is drawn from
// norm(max(0, p - q)); either way it is distributed as p. kylin's drafts are deterministic (the
// draft model's argmax, a lookup's continuation), so q is a point mass at x: x is kept with
// probability p(x), else drawn from p with x removed. p: the target's candidates, every sampler
// option applied; the uniform comes from the sampler's own seeded stream. Greedy p is a point mass
// too: x is kept exactly when it is the target's argmax, else the argmax is emitted.
inline DraftVerdict verify_draft(Sampler& sampler, const SamplingCandidates& p, int x) {
  double px = 0.0;
  for (std::size_t j = 0; j < p.ids.size(); ++j)
    if (p.ids[j] == x) px += p.weights[j];
  const double u = sampler.uniform();
  const double rest = p.total - px;  // mass of max(0, p - q), unnormalised
  if (u * p.total < px || !(rest > 0.0)) return {x, px > 0.0 || p.ids.empty()};
  const double target = sampler.uniform() * rest;
  double cumulative = 0.0;
  int last = x;
  for (std::size_t j = 0; j < p.ids.size(); ++j) {
    if (p.ids[j] == x) continue;
    last = p.ids[j];
    cumulative += p.weights[j];
    if (cumulative > target) return {last, false};
  }
  return {last, false};  // rounding left the running mass just short of u * rest
}

namespace detail {

// softmax(row)[id] at temperature 1, when row[id] is the row's maximum: the draft's confidence.
inline double top_probability(std::span<const float> row, int id) {
  const float top = row[static_cast<std::size_t>(id)];
  double sum = 0.0;
  for (float l : row) sum += scaled_weight(l, top, 1.0f);
  return sum > 0.0 ? 1.0 / sum : 0.0;
}

}  // namespace detail

// The proposing half of one speculative generation: each decode step, up to `max` draft tokens
// from prompt lookup, else from the draft model or the MTP head, greedily, one draft forward per token, after
// the draft's cache has caught up with the context (during the target's prefill, one chunk a step).
// A constraint masks the draft rows and filters lookups; it is walked forward over the drafts and
// rewound. The caller runs the draft forward on input() while drafting() (mtp(): on the target's
// forward_mtp), then calls advance().
class Speculator {
 public:
  struct Step {
    std::int64_t max_drafts = 0;  // 0: no drafts this step (the draft may still catch up)
    bool prefilling = false;      // the target is still prefilling: the draft only feeds the prompt
    std::int64_t chunk = 0;       // most prompt tokens the draft feeds in one catch-up forward
  };

  // draft_cache: the draft model's cache (null without a draft model); mtp: the MTP head's side of the session
  // (null unless o.mtp); params: the target's.
  Speculator(const SpeculativeOptions& o, const Engine& target, KVCache* draft_cache, MtpContext* mtp, const SamplingParams& params)
      : o_(o), target_(target), cache_(draft_cache), mtp_(mtp),
        sampler_(static_cast<std::size_t>(std::max<std::int64_t>(1, draft_vocab(o, target))), greedy(params),
                 o.draft ? o.draft->sampleable_ids() : mtp ? target.sampleable_ids() : SampleableIds{}),
        logits_(static_cast<std::size_t>(draft_vocab(o, target))) {
    drafts_.reserve(static_cast<std::size_t>(o.max_draft));
    // a draft with recurrent states keeps one per drafted token, so rolling back a rejection recomputes nothing
    if (cache_) cache_->states().keep_recent(o.max_draft + 1);
    if (mtp_) mtp_in_.resize(static_cast<std::size_t>(target.model().hidden_size())), mtp_out_.resize(mtp_in_.size());
  }

  // Whether the draft forwards are the MTP head's (Model::forward_mtp) rather than a draft model's.
  bool mtp() const { return mtp_ != nullptr; }

  // Plans the drafts of the next target pass.
  void begin(const TokenContext& ctx, const Step& step, constrain::Constraint* constraint) {
    drafts_.clear();
    drafting_ = false;
    constraint_ = constraint;
    max_ = static_cast<std::size_t>(std::max<std::int64_t>(0, step.max_drafts));
    if (max_ > 0 && o_.lookup > 0) {
      lookup_continuation(ctx, o_.lookup, max_, drafts_);
      keep_allowed();
      if (!drafts_.empty()) {
        if (mtp_) begin_mtp(ctx, step, false);  // the head still reads the target's new hidden states
        return;
      }
    }
    if (mtp_) return begin_mtp(ctx, step, true);
    if (cache_ == nullptr || (max_ == 0 && !step.prefilling)) return;
    // the draft's cache keeps what it shares with the context and feeds the rest; at least the
    // last token is fed, for the logits of the first draft
    std::size_t keep = ctx.common_prefix(cache_->tokens());
    if (!step.prefilling && keep == ctx.size()) --keep;
    cache_->truncate(static_cast<std::int64_t>(keep));
    keep = static_cast<std::size_t>(cache_->size());  // a draft with recurrent states lands on a kept state
    const std::size_t lag = ctx.size() - keep;
    const auto chunk = static_cast<std::size_t>(std::max<std::int64_t>(1, step.chunk));
    want_logits_ = !step.prefilling && lag <= chunk;
    feed_.clear();
    for (std::size_t i = keep; i < keep + std::min(lag, chunk); ++i) feed_.push_back(ctx[i]);
    drafting_ = !feed_.empty();
    if (want_logits_) remember(ctx);
  }

  bool drafting() const { return drafting_; }
  std::span<const int> drafts() const { return drafts_; }

  // The draft forward: the catch-up tokens or the last draft, on the draft's cache. A few tokens
  // take the decode kernels, so a draft that is the target proposes from the target's own numbers.
  SequenceInput input() {
    const auto n = static_cast<std::int64_t>(feed_.size());
    const std::span<float> logits = want_logits_ ? std::span<float>(logits_) : std::span<float>{};
    if (mtp_)
      return {feed_, mtp_->cache(), {.logits = logits, .hidden = want_logits_ ? std::span<float>(mtp_out_) : std::span<float>{}},
              want_logits_ && n <= max_decode_rows, {}, feed_hidden_};
    return {feed_, *cache_, {.logits = logits}, want_logits_ && n <= max_decode_rows};
  }

  // After the draft forward of input(): the next draft token, or the end of drafting.
  void advance() {
    if (mtp_ && first_pass_) {
      mtp_->consumed(static_cast<std::int64_t>(feed_.size()));
      first_pass_ = false;
      mtp_first_end_ = mtp_->cache().size();
    }
    if (!want_logits_) return stop();
    std::span<float> row = logits_;
    if (constraint_) constraint_->mask(row);
    const SamplingCandidates c = sampler_.candidates(row, prompt_, generated_);  // greedy: the argmax
    const int id = c.ids.front();
    if (!(row[static_cast<std::size_t>(id)] > -std::numeric_limits<float>::infinity()) ||
        (!mtp_ && o_.p_min > 0.0f && detail::top_probability(row.first(std::min(row.size(), sampler_.sampleable().end())), id) < o_.p_min))
      return stop();
    drafts_.push_back(id);
    generated_.push_back(id);
    if (constraint_) constraint_->accept(id);
    if (drafts_.size() >= max_ || target_.is_eos(id) || (constraint_ && constraint_->finished())) return stop();
    feed_.assign(1, id);
    if (mtp_) {  // the next step reads the head's own output (after mtp.norm) as its hidden state
      mtp_in_.swap(mtp_out_);
      feed_hidden_ = mtp_in_;
    }
  }

  // Ends drafting early (the generation was cancelled): the constraint goes back to its mark.
  void abandon() {
    if (drafting_) stop();
  }

 private:
  static constexpr std::int64_t max_decode_rows = 16;

  static std::int64_t draft_vocab(const SpeculativeOptions& o, const Engine& target) {
    return o.draft ? o.draft->model().vocab_size() : o.mtp ? target.model().vocab_size() : 0;
  }

  // The MTP head reads the target's pending hidden states (positions j, each with the token after it: all of
  // them, or a chunk while it lags) and, when drafts are wanted, drafts from the last row's logits, then from
  // its own outputs (vLLM / SGLang's MTP proposer; docs/SPECULATIVE.md).
  void begin_mtp(const TokenContext& ctx, const Step& step, bool drafts) {
    const std::int64_t from = mtp_->cache().size(), hidden = target_.model().hidden_size();
    const std::int64_t lag = std::min<std::int64_t>(mtp_->pending_rows(), static_cast<std::int64_t>(ctx.size()) - 1 - from);
    if (lag <= 0) return;
    const std::int64_t n = std::min(lag, std::max<std::int64_t>(1, step.chunk));
    want_logits_ = drafts && !step.prefilling && max_ > 0 && n == mtp_->pending_rows();
    feed_.clear();
    for (std::int64_t j = from; j < from + n; ++j) feed_.push_back(ctx[static_cast<std::size_t>(j + 1)]);
    feed_hidden_ = mtp_->pending().first(static_cast<std::size_t>(n * hidden));
    first_pass_ = drafting_ = true;
    if (want_logits_) remember(ctx);
  }

  // The context the drafts continue (penalties), and the constraint's state before them.
  void remember(const TokenContext& ctx) {
    generated_.assign(ctx.generated.begin(), ctx.generated.end());
    prompt_ = ctx.prompt;
    if (constraint_) constraint_->mark();
  }

  // The draft model's choice: the target's sampling options (penalties) at argmax.
  static SamplingParams greedy(SamplingParams p) {
    p.greedy = true;
    p.seed = 0;  // never drawn from
    return p;
  }

  void stop() {
    if (drafting_ && want_logits_ && constraint_) constraint_->rewind();
    if (drafting_ && mtp_ && !first_pass_) mtp_->cache().truncate(mtp_first_end_);  // the draft steps' entries are not the target's
    drafting_ = false;
  }

  // Lookup drafts up to the first one the constraint forbids.
  void keep_allowed() {
    if (constraint_ == nullptr || drafts_.empty()) return;
    constraint_->mark();
    std::size_t ok = 0;
    while (ok < drafts_.size() && constraint_->allows(drafts_[ok]) && !constraint_->finished()) constraint_->accept(drafts_[ok++]);
    drafts_.resize(ok);
    constraint_->rewind();
  }

  SpeculativeOptions o_;
  const Engine& target_;
  KVCache* cache_;
  MtpContext* mtp_;
  Sampler sampler_;              // the draft's argmax under the target's penalties
  std::vector<float> logits_;    // [draft vocab] the draft's last row
  std::vector<int> feed_;        // [<= chunk] what the next draft forward feeds
  std::vector<int> drafts_;      // [<= max_draft] this step's proposals
  std::vector<int> generated_;   // the generated tokens, then the drafts (penalties)
  std::span<const int> prompt_;
  constrain::Constraint* constraint_ = nullptr;
  std::size_t max_ = 0;
  bool drafting_ = false, want_logits_ = false;
  // the MTP head (mtp()): the hidden states the next forward reads, its output, where the first pass left its cache
  std::span<const float> feed_hidden_;  // [feed, hidden]: pending target rows, then mtp_in_
  std::vector<float> mtp_in_, mtp_out_;  // [hidden] each
  bool first_pass_ = false;
  std::int64_t mtp_first_end_ = 0;
};

}  // namespace kylin
