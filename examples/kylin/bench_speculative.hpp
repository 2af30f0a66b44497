// `kylin bench --draft DIR` (or --mtp K, --lookup N): speculative decoding measured two ways. The cost
// model: a verification pass of k + 1 decode rows timed against a one-row step at the same depth
// (k = 1..8), a draft step (the draft model's, or the MTP head's) against it too, and the speed-up that
// implies at acceptance rates 0.5..0.9 (Leviathan et al.
// 2023: a pass emits (1 - a^(k+1)) / (1 - a) tokens on average). The measurement: greedy
// generations through Session with and without speculation in the same repetitions: acceptance,
// tokens per pass, decode tok/s, and the draft model's share of the decode time (docs/SPECULATIVE.md).
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kylin/core/json.hpp"
#include "kylin/generate/session.hpp"

namespace kylin::cli {

struct SpeculativeBenchOptions {
  SpeculativeOptions speculative;  // draft (may be the target itself), k, p_min, lookup
  int prompt = 64;                 // random prompt tokens before the generations (and the cost model's depth)
  int gen = 64;                    // tokens per generation
  int reps = 3;
  int max_k = 8;                   // the cost model's largest draft count
};

namespace detail {

inline double bench_median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

inline double bench_seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU seconds of the process (all threads): on a shared machine, how many cycles a pass needed,
// where its wall time also counts the time other processes held the cores.
inline double process_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return sec(ru.ru_utime) + sec(ru.ru_stime);
}

struct PassTime {
  double wall = 0, cpu = 0;
};

// Seconds of one forward of `n` random tokens as decode rows at depth `depth` of `cache`, every
// row's logits out (what a verification pass of n - 1 drafts costs).
inline PassTime verify_seconds(Model& model, KVCache& cache, std::int64_t depth, int n, std::vector<float>& logits, std::mt19937& rng) {
  std::uniform_int_distribution<int> id(0, static_cast<int>(model.vocab_size()) - 1);
  std::vector<int> tokens(static_cast<std::size_t>(n));
  for (int& t : tokens) t = id(rng);
  cache.truncate(depth);
  const SequenceInput in{tokens, cache, {.logits = std::span<float>(logits).first(tokens.size() * static_cast<std::size_t>(model.vocab_size())),
                                         .positions = Positions::all}, true};
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = process_cpu_seconds();
  model.forward(std::span<const SequenceInput>(&in, 1));
  return {bench_seconds(t0), process_cpu_seconds() - c0};
}

// Seconds of one MTP-head step (one row, the target's hidden state of the last position) at depth `depth` of
// `mtp_cache`, which holds the head's entries of a prompt at least that long.
inline PassTime mtp_step_seconds(Model& model, KVCache& mtp_cache, std::int64_t depth, std::span<const float> hidden, std::vector<float>& logits,
                                 std::mt19937& rng) {
  std::uniform_int_distribution<int> id(0, static_cast<int>(model.vocab_size()) - 1);
  const int token = id(rng);
  mtp_cache.truncate(depth);
  std::vector<float> out(hidden.size());
  const SequenceInput in{std::span<const int>(&token, 1), mtp_cache,
                         {.logits = std::span<float>(logits).first(static_cast<std::size_t>(model.vocab_size())), .hidden = out}, false, {}, hidden};
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = process_cpu_seconds();
  model.forward_mtp(std::span<const SequenceInput>(&in, 1));
  return {bench_seconds(t0), process_cpu_seconds() - c0};
}

// The MTP head's cache over the prompt (its first pass over the target's hidden states there), and the
// target's hidden state of the prompt's last position [hidden].
inline KVCache mtp_over_prompt(Model& model, const std::vector<int>& prompt, std::vector<float>& last_hidden) {
  const auto H = static_cast<std::size_t>(model.hidden_size());
  auto target = model.new_cache(static_cast<std::int64_t>(prompt.size()) + 1);
  std::vector<float> hidden(prompt.size() * H);
  model.forward(prompt, target, {.hidden = hidden, .hidden_positions = Positions::all});
  KVCache mtp = model.new_mtp_cache(static_cast<std::int64_t>(prompt.size()) + 2);
  const std::vector<int> next(prompt.begin() + 1, prompt.end());
  const SequenceInput in{next, mtp, {}, false, {}, std::span<const float>(hidden).first(next.size() * H)};
  model.forward_mtp(std::span<const SequenceInput>(&in, 1));
  last_hidden.assign(hidden.end() - static_cast<std::ptrdiff_t>(H), hidden.end());
  return mtp;
}

// Expected tokens a pass emits with k drafts each accepted with probability a, independently.
inline double tokens_per_pass(double a, int k) { return a >= 1.0 ? k + 1.0 : (1.0 - std::pow(a, k + 1)) / (1.0 - a); }

inline std::vector<int> random_prompt(const Engine& e, int n, std::mt19937& rng) {
  const SampleableIds& s = e.sampleable_ids();
  const auto end = static_cast<int>(std::min<std::size_t>(s.end(), static_cast<std::size_t>(e.model().vocab_size())));
  std::uniform_int_distribution<int> id(0, end - 1);
  std::vector<int> p;
  while (static_cast<int>(p.size()) < n)
    if (const int t = id(rng); s.contains(t) && !e.is_eos(t)) p.push_back(t);
  return p;
}

}  // namespace detail

// Runs both measurements; prints them (text) and returns them as a JSON object.
inline json::Object speculative_bench(Engine& target, const SpeculativeBenchOptions& o, bool print) {
  if (o.gen < 2) throw Error(ErrorCategory::request, "--gen", "the speculative measurement needs at least 2 generated tokens");
  Model& model = target.model();
  std::mt19937 rng(4141);
  const std::vector<int> prompt = detail::random_prompt(target, o.prompt, rng);
  // cost model: one-row steps and (k+1)-row passes at the prompt's depth, interleaved repetitions
  auto cache = model.new_cache(o.prompt + o.max_k + 2);
  std::vector<float> logits(static_cast<std::size_t>(o.max_k + 1) * static_cast<std::size_t>(model.vocab_size()));
  model.forward(prompt, cache, std::span<float>{});
  cache.keep_state();  // every pass restarts from the prompt's depth: a hybrid model's state there is kept
  std::vector<std::vector<double>> ratio(static_cast<std::size_t>(o.max_k + 1)), cpu_ratio(ratio.size());
  std::vector<double> step_ms, draft_ratio;
  std::vector<float> last_hidden;
  std::optional<KVCache> mtp_cache;  // --mtp: the head's entries of the prompt
  if (o.speculative.mtp) mtp_cache.emplace(detail::mtp_over_prompt(model, prompt, last_hidden));
  const auto mtp_depth = static_cast<std::int64_t>(prompt.size()) - 1;  // the entries of positions 0 .. prompt - 2
  for (int r = 0; r < o.reps + 1; ++r) {  // the first round warms up and is dropped  // the first round warms up and is dropped
    const detail::PassTime step = detail::verify_seconds(model, cache, o.prompt, 1, logits, rng);
    const double one = step.wall;
    for (int k = 1; k <= o.max_k; ++k) {
      const detail::PassTime t = detail::verify_seconds(model, cache, o.prompt, k + 1, logits, rng);
      if (r == 0) continue;
      ratio[static_cast<std::size_t>(k)].push_back(t.wall / one);
      cpu_ratio[static_cast<std::size_t>(k)].push_back(t.cpu / step.cpu);
    }
    if (r == 0) continue;
    step_ms.push_back(one * 1e3);
    if (mtp_cache) draft_ratio.push_back(detail::mtp_step_seconds(model, *mtp_cache, mtp_depth, last_hidden, logits, rng).wall / one);
    if (Engine* d = o.speculative.draft; d != nullptr && d != &target) {  // the draft's own one-row step, same depth
      auto dc = d->model().new_cache(o.prompt + 2);
      std::vector<float> dl(static_cast<std::size_t>(d->model().vocab_size()));
      d->model().forward(prompt, dc, std::span<float>{});
      draft_ratio.push_back(detail::verify_seconds(d->model(), dc, o.prompt, 1, dl, rng).wall / one);
    }
  }
  const double draft_cost = o.speculative.draft == &target ? 1.0 : o.speculative.draft || mtp_cache ? detail::bench_median(draft_ratio) : 0.0;
  json::Array cost;
  for (int k = 1; k <= o.max_k; ++k) {
    const double rk = detail::bench_median(ratio[static_cast<std::size_t>(k)]);
    json::Object row{{"k", json::Value(k)}, {"verify_ratio", json::Value(rk)},
                     {"verify_cpu_ratio", json::Value(detail::bench_median(cpu_ratio[static_cast<std::size_t>(k)]))}};
    for (double a : {0.5, 0.6, 0.7, 0.8, 0.9}) {
      const double e = detail::tokens_per_pass(a, k);
      row.emplace_back("speedup_a" + std::to_string(static_cast<int>(a * 10)), json::Value(e / rk));
      row.emplace_back("speedup_with_draft_a" + std::to_string(static_cast<int>(a * 10)), json::Value(e / (rk + k * draft_cost)));
    }
    cost.emplace_back(std::move(row));
  }

  // measurement: greedy generations from the same prompt, plain and speculative in each repetition
  GenerateOptions plain;
  plain.sampling.greedy = true;
  plain.max_new_tokens = o.gen;
  plain.ignore_eos = true;
  GenerateOptions spec = plain;
  spec.speculative = o.speculative;
  std::vector<double> tg_plain, tg_spec, tg_spec_no_draft, speedup, speedup_no_draft, accept, per_pass, draft_share;
  Session session(target, o.prompt + o.gen + o.speculative.max_draft + 2);
  for (int r = 0; r < o.reps; ++r) {
    session.reset();
    const Generation a = session.generate(prompt, plain);
    session.reset();
    const Generation b = session.generate(prompt, spec);
    const GenerationStats &p = a.stats, &s = b.stats;
    const double decoded = static_cast<double>(s.generated_tokens - 1);
    tg_plain.push_back(p.decode_tok_s);
    tg_spec.push_back(s.decode_tok_s);
    tg_spec_no_draft.push_back(s.decode_ms > s.draft_ms ? 1000.0 * decoded / (s.decode_ms - s.draft_ms) : 0.0);
    speedup.push_back(s.decode_tok_s / p.decode_tok_s);
    speedup_no_draft.push_back(tg_spec_no_draft.back() / p.decode_tok_s);
    accept.push_back(s.draft_tokens > 0 ? static_cast<double>(s.draft_accepted) / static_cast<double>(s.draft_tokens) : 0.0);
    per_pass.push_back(s.decode_passes > 0 ? decoded / static_cast<double>(s.decode_passes) : 0.0);
    draft_share.push_back(s.decode_ms > 0 ? s.draft_ms / s.decode_ms : 0.0);
    if (b.tokens != a.tokens) throw Error(ErrorCategory::runtime, "bench", "speculative greedy output differs from plain greedy output");
  }
  // the cost model's speed-up at the measured tokens per pass, each pass verifying k drafts
  const double tpp = detail::bench_median(per_pass);
  const int k = std::min(o.speculative.max_draft, o.max_k);
  const double predicted = k > 0 ? tpp / detail::bench_median(ratio[static_cast<std::size_t>(k)]) : 0.0;
  const std::string draft_name = o.speculative.draft == &target ? "target" : o.speculative.draft ? o.speculative.draft->dir().string()
                                 : o.speculative.mtp ? "mtp" : "none";
  json::Object out{{"draft", json::Value(draft_name)},
                   {"draft_max", json::Value(o.speculative.max_draft)},
                   {"draft_p_min", json::Value(o.speculative.p_min)},
                   {"lookup", json::Value(o.speculative.lookup)},
                   {"depth", json::Value(o.prompt)},
                   {"step_ms", json::Value(detail::bench_median(step_ms))},
                   {"draft_step_ratio", json::Value(draft_cost)},
                   {"cost_model", json::Value(cost)},
                   {"n_gen", json::Value(o.gen)},
                   {"acceptance", json::Value(detail::bench_median(accept))},
                   {"tokens_per_pass", json::Value(tpp)},
                   {"tg_tok_s", json::Value(detail::bench_median(tg_plain))},
                   {"tg_spec_tok_s", json::Value(detail::bench_median(tg_spec))},
                   {"tg_spec_without_draft_tok_s", json::Value(detail::bench_median(tg_spec_no_draft))},
                   {"draft_time_share", json::Value(detail::bench_median(draft_share))},
                   {"speedup", json::Value(detail::bench_median(speedup))},
                   {"speedup_without_draft", json::Value(detail::bench_median(speedup_no_draft))},
                   {"speedup_predicted_without_draft", json::Value(predicted)}};
  if (!print) return out;
  std::printf("speculative decoding: draft %s, k = %d, p_min %.2f, lookup %d; depth %d\n",
              o.speculative.draft == &target ? "= target" : draft_name.c_str(), o.speculative.max_draft, o.speculative.p_min, o.speculative.lookup,
              o.prompt);
  std::printf("cost model: one-row step %.1f ms; %s step = %.3f x target step\n", detail::bench_median(step_ms),
              o.speculative.mtp ? "MTP" : "draft", draft_cost);
  std::printf("   k  verify/step (CPU time)  speed-up at a=0.6  0.8  0.9  (with the draft's cost: 0.6  0.8  0.9)\n");
  for (const json::Value& row : cost) {
    auto f = [&](const char* key) { return row.find(key)->as_double(); };
    std::printf("  %2lld  %10.3f (%8.3f)  %16.2f %5.2f %5.2f  %27.2f %5.2f %5.2f\n", static_cast<long long>(row.find("k")->as_int()),
                f("verify_ratio"), f("verify_cpu_ratio"),
                f("speedup_a6"), f("speedup_a8"), f("speedup_a9"), f("speedup_with_draft_a6"), f("speedup_with_draft_a8"),
                f("speedup_with_draft_a9"));
  }
  std::printf("measured (%d greedy tokens, median of %d): acceptance %.3f, %.2f tokens per pass\n", o.gen, o.reps,
              detail::bench_median(accept), tpp);
  std::printf("  decode %.2f tok/s plain, %.2f tok/s speculative (%.2fx); without the draft's time (%.0f%% of it) %.2f tok/s (%.2fx; "
              "the cost model says %.2fx)\n",
              detail::bench_median(tg_plain), detail::bench_median(tg_spec), detail::bench_median(speedup),
              100.0 * detail::bench_median(draft_share), detail::bench_median(tg_spec_no_draft), detail::bench_median(speedup_no_draft),
              predicted);
  return out;
}

}  // namespace kylin::cli
