// GenerationRun: one generation on a Session, one model step at a time, so a caller can step many
// sessions' runs through one batched forward (kylin-server's scheduler); Session::generate drives
// one alone. Speculative decoding's draft and verification steps live here too.
#pragma once

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "kylin/generate/session.hpp"

namespace kylin {

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
    if (!o_.images.empty() && o_.speculative.enabled())
      throw Error(ErrorCategory::request, "speculative", "speculative decoding does not take prompts with images yet");
    if (o_.speculative.enabled()) {
      KVCache* draft_cache = o_.speculative.draft ? &s.draft_cache_for(*o_.speculative.draft) : nullptr;
      mtp_ = o_.speculative.mtp ? &s.mtp_context() : nullptr;
      spec_.emplace(o_.speculative, *s.engine_, draft_cache, mtp_, sampler_.params());
      s.verify_logits_.resize(static_cast<std::size_t>(o_.speculative.max_draft + 1) * s.logits_.size());
    }
    start_prefill();
    chunk_ = prefill_chunk > 0 ? prefill_chunk : o_.on_prefill ? 256 : static_cast<std::int64_t>(rest_.size());
    // the draft catches up in the same chunks, not in the rest's: its cache may reuse less
    draft_chunk_ = prefill_chunk > 0 || o_.on_prefill ? chunk_ : std::numeric_limits<std::int64_t>::max();
    if (o_.constraint) o_.constraint->begin(channel == Channel::reasoning);
    // Greedy decoding that nothing else looks at the row for takes each token straight from the
    // forward (picked where the logits are: one int, not the row, comes back from a GPU); top-k
    // sampling the same way takes the row's top_k best and draws from those on the host.
    const SamplingParams& p = sampler_.params();
    const bool row_unseen = !p.has_penalties() && sampler_.sampleable().holes().empty() && !o_.constraint && !o_.on_logits && !spec_;
    greedy_only_ = row_unseen && p.is_greedy();
    if (row_unseen && sampler_.needs_only_top_k(s_.logits_.size())) top_.resize(static_cast<std::size_t>(p.top_k));
    draw_only_ = row_unseen && sampler_.draws_whole_row(s_.logits_.size());  // temperature, top-p and min-p alone: drawn where the logits are
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
      // the snapshots this chunk's positions (cache.size(), cache.size() + n] hold
      const auto first = std::upper_bound(snapshots_.begin(), snapshots_.end(), s_.cache_.size());
      const auto last = std::upper_bound(first, snapshots_.end(), s_.cache_.size() + n);
      chunk_images_.clear();  // the images of prompt tokens [cache.size(), + n)
      clip_images(o_.images, s_.cache_.size(), n, s_.engine_->model().hidden_size(), chunk_images_);
      return {rest_.subspan(static_cast<std::size_t>(fed_), static_cast<std::size_t>(n)), s_.cache_, with_hidden(outputs(), n), false,
              std::span<const std::int64_t>(first, last), {}, chunk_images_};
    }
    if (!verifying()) {
      const std::span<const int> tokens = unfed();
      return {tokens, s_.cache_, with_hidden(outputs(), static_cast<std::int64_t>(tokens.size()))};
    }
    verify_feed_.assign(1, g_.tokens.back());
    verify_feed_.insert(verify_feed_.end(), spec_->drafts().begin(), spec_->drafts().end());
    const std::size_t rows = verify_feed_.size() * s_.logits_.size();
    const ForwardOutputs out{.logits = std::span<float>(s_.verify_logits_).first(rows), .positions = Positions::all};
    return {verify_feed_, s_.cache_, with_hidden(out, static_cast<std::int64_t>(verify_feed_.size())), true};
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
      next();
    } else {
      ++g_.stats.decode_passes;
      if (verifying()) verify();
      else next();
    }
    plan_step();
  }

  // Speculative decoding: whether a draft-model forward (on draft_model(), of draft_input()) and
  // then advance_draft() come before the next input().
  bool drafting() const { return !done_ && spec_ && spec_->drafting(); }
  Model& draft_model() { return o_.speculative.draft->model(); }
  // The draft forward of a batch of draft_input()s (this run's, or those of runs with the same speculative
  // options): the draft model's, or the target's MTP head's.
  void forward_drafts(std::span<const SequenceInput> batch) {
    if (spec_->mtp()) s_.engine_->model().forward_mtp(batch);
    else draft_model().forward(batch);
  }
  SequenceInput draft_input() {
    t_draft_ = clock::now();
    return spec_->input();
  }
  void advance_draft() {
    if (!g_.tokens.empty()) g_.stats.draft_ms += ms_since(t_draft_);  // decode time; the prefill's counts in prefill_ms
    spec_->advance();
  }

  // The drafts the next input() verifies (empty: a plain step), once drafting() is over.
  std::span<const int> drafts() const { return spec_ ? spec_->drafts() : std::span<const int>{}; }

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
    std::int64_t reuse = cache.restorable(std::min<std::int64_t>(cache.common_prefix(prompt_), last));
    if (o_.prompt_cache) {
      const auto t_load = clock::now();
      if (o_.prompt_cache->load(prompt_, cache, reuse) > 0) g_.stats.cache_load_ms = ms_since(t_load);
      reuse = std::min<std::int64_t>(cache.common_prefix(prompt_), last);
    }
    cache.truncate(reuse);
    if (mtp_) mtp_->align({prompt_, {}}, cache);  // the MTP head lacks hidden states of a prefix it never read
    reuse = cache.size();  // a cache with recurrent states lands on its last kept state at or below it
    rest_ = prompt_.subspan(static_cast<std::size_t>(reuse));
    plan_snapshots(reuse);
    g_.stats.prompt_tokens = static_cast<std::int64_t>(prompt_.size());
    g_.stats.cached_tokens = reuse;
    g_.stats.prefill_tokens = static_cast<std::int64_t>(rest_.size());
    t_prefill_ = clock::now();
  }

  // Where the prefill of a cache with recurrent states keeps snapshots (positions): before each of the last
  // turn openers (the next request of the conversation shares the prompt up to one of them) and before the
  // prompt's last token (the same prompt again, sibling choices, a stored prompt: each re-runs only that
  // token for its logits), within the cache's snapshot limit. The passes compute them on the side.
  void plan_snapshots(std::int64_t reuse) {
    snapshots_.clear();
    if (!s_.cache_.has_states()) return;
    const std::int64_t keep = s_.cache_.states().retention().snapshots, open = s_.engine_->turn_start_id(),
                       last = static_cast<std::int64_t>(prompt_.size()) - 1;
    if (last > reuse) snapshots_.push_back(last);
    for (std::int64_t p = last - 1; p > reuse && open >= 0 && static_cast<std::int64_t>(snapshots_.size()) < keep; --p)
      if (prompt_[static_cast<std::size_t>(p)] == open) snapshots_.push_back(p);
    std::reverse(snapshots_.begin(), snapshots_.end());
  }
  // The context's tokens the cache does not hold yet: the last sampled token, or more after a cache with
  // recurrent states was cut back below what verification kept (Speculator and RecurrentStates: rarely).
  std::span<const int> unfed() {
    const auto have = static_cast<std::size_t>(s_.cache_.size()), total = prompt_.size() + g_.tokens.size();
    if (have + 1 == total) return {&g_.tokens.back(), 1};
    const TokenContext ctx = context();
    unfed_.clear();
    for (std::size_t i = have; i < total; ++i) unfed_.push_back(ctx[i]);
    return unfed_;
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
    const bool caught_up = static_cast<std::size_t>(s_.cache_.size()) + 1 >= prompt_.size() + g_.tokens.size();
    if (!prefilling() && caught_up)  // a cache cut back below the context catches up in a plain step first
      most = std::min<std::int64_t>({o_.speculative.max_draft, o_.max_new_tokens - static_cast<std::int64_t>(g_.tokens.size()) - 1,
                                     s_.cache_.remaining() - 1});
    if (mtp_) mtp_->settle(s_.cache_.size());
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
    if (mtp_) mtp_->align(ctx, s_.cache_);
    if (s_.draft_cache_) s_.draft_cache_->truncate(static_cast<std::int64_t>(ctx.common_prefix(s_.draft_cache_->tokens())));
  }

  // With the MTP head drafting, every target row's hidden state goes to its pending rows (MtpContext).
  ForwardOutputs with_hidden(ForwardOutputs out, std::int64_t rows) {
    if (!mtp_) return out;
    out.hidden = mtp_->next_rows(s_.cache_.size(), rows);
    out.hidden_positions = Positions::all;
    return out;
  }

  // What a plain step's forward hands back: the last row's logits, or only its greedy id, top-k or
  // draw (whose uniform number next() takes from the sampler's stream).
  ForwardOutputs outputs() {
    const auto end = static_cast<std::int64_t>(std::min(sampler_.sampleable().end(), s_.logits_.size()));
    if (greedy_only_) return {.greedy = std::span<int>(&greedy_id_, 1), .pick_end = end};
    if (!top_.empty()) return {.pick_end = end, .top = top_, .top_k = static_cast<std::int64_t>(top_.size())};
    if (draw_only_) {
      row_draw_ = sampler_.row_draw();
      return {.pick_end = end, .drawn = std::span<int>(&drawn_id_, 1), .draws = std::span<const kernels::RowDraw>(&row_draw_, 1)};
    }
    return {.logits = s_.logits_};
  }
  // The token after a plain step: the forward's greedy id or draw as Sampler::sample would pick it
  // (its fallback where no logit is above -inf), a draw from its top-k as from the row, or from the row.
  void next() {
    const int fallback = sampler_.fallback(s_.logits_.size());
    if (greedy_only_) return emit(greedy_id_ >= 0 ? greedy_id_ : fallback);
    if (!top_.empty()) return emit(sampler_.draw(sampler_.candidates_from_top(top_, s_.logits_.size())));
    if (draw_only_) {
      sampler_.uniform();  // the draw's number, which row_draw() read
      return emit(drawn_id_ >= 0 ? drawn_id_ : fallback);
    }
    sample(s_.logits_, -1);
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
  MtpContext* mtp_ = nullptr;       // the session's, when the MTP head drafts
  std::vector<int> verify_feed_;    // [drafts + 1] the last token and the drafts
  std::vector<ImageRows> chunk_images_;  // the prefill chunk's share of o_.images
  std::vector<std::int64_t> snapshots_;  // positions whose recurrent states the prefill keeps (plan_snapshots)
  std::vector<int> unfed_;          // context tokens a cut-back cache still lacks (unfed())
  bool greedy_only_ = false;        // plain steps hand back greedy ids, not logit rows (outputs())
  int greedy_id_ = -1;              // the last plain step's greedy id
  std::vector<kernels::RankedLogit> top_;  // [top_k] the last plain step's top-k, where sampling needs only that
  bool draw_only_ = false;          // plain steps draw from the whole row where the logits are (outputs())
  kernels::RowDraw row_draw_;       // the next plain step's draw
  int drawn_id_ = -1;               // the last plain step's drawn id
};

inline Generation Session::generate(std::span<const int> prompt, const GenerateOptions& o, Channel channel) {
  GenerationRun run(*this, prompt, o, channel);
  while (!run.done()) {
    while (run.drafting()) {
      const SequenceInput in = run.draft_input();
      run.forward_drafts(std::span<const SequenceInput>(&in, 1));
      run.advance_draft();
    }
    const SequenceInput in = run.input();
    engine_->model().forward(std::span<const SequenceInput>(&in, 1));
    run.advance();
  }
  return run.finish();
}

}  // namespace kylin
