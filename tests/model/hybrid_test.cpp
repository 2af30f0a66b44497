// The hybrid Gated DeltaNet models (Qwen3.5 dense and MoE, Qwen3-Next) against float64 references at every
// given position: prefill whole, fed in odd chunks, in passes cut at other sizes, token by token, beside other
// sequences (the same bits as alone), through a decode-rows pass, after a state restored from a snapshot or
// copied from another cache; and where truncate() lands when a cache holds no state at the asked position.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/agreement.hpp"
#include "common/reference.hpp"
#include "kylin/model/model.hpp"

namespace hybrid_test {

using kylin::test::Case;
using kylin::test::data;
using kylin::test::load_cases;
using kylin::test::relative_l2;
using kylin::test::worse;

// Measured worst relative L2 over every reference row (T = 1, 20, 128 and positions 63..299 of 300 tokens), all
// feeding orders below: tiny-qwen35-moe 2.7e-6, tiny-qwen3-next 3.2e-6; tiny-qwen35 1.4e-5 (prefill) and 2.0e-5
// (token by token), both at position 11 of the 20-token case and under 8e-6 everywhere else. That checkpoint
// amplifies f32 rounding there: transformers' own float32 path (a numpy float32 replica of it) is 2.45e-5 off at
// the same position, and in_proj_qkv's f32 accumulation alone accounts for 1.0e-5 (tools/qwen35_reference.py is
// the float64 oracle; docs/PERFORMANCE.md, "Exactness of the hybrid models"). A wrong reading of the semantics
// (eps inside l2norm's sqrt, the gate's half of q_proj, 1 + w norms) moves logits by 2e-6 to 1e-1.
constexpr double f32_bar = 1e-5;
constexpr double sensitive_bar = 2.5e-5;  // tiny-qwen35 only: 1.25x its measured token-by-token worst
struct Hybrid {
  const char* name;
  double bar;
};
constexpr Hybrid hybrids[] = {{"tiny-qwen35", sensitive_bar}, {"tiny-qwen35-moe", f32_bar}, {"tiny-qwen3-next", f32_bar}};

// The rows of a case's listed positions from logits of every position [T, V].
double case_error(const Case& c, const std::vector<float>& all, std::size_t V) {
  double worst = 0;
  for (std::size_t r = 0; r < c.logits.size(); ++r) {
    const std::size_t p = c.all_positions ? r : c.positions.empty() ? c.tokens.size() - 1 : c.positions[r];
    worst = worse(worst, relative_l2(all.data() + p * V, c.logits[r]));
  }
  return worst;
}

// Feeds c.tokens in forward calls of `chunk` tokens (0: one call), every position's logits.
std::vector<float> feed(kylin::Model& model, kylin::KVCache& cache, const std::vector<int>& tokens, std::size_t chunk) {
  const auto V = static_cast<std::size_t>(model.vocab_size());
  std::vector<float> all(tokens.size() * V);
  if (chunk == 0) chunk = tokens.size();
  for (std::size_t i = 0; i < tokens.size(); i += chunk) {
    const std::size_t n = std::min(chunk, tokens.size() - i);
    model.forward(std::span(tokens).subspan(i, n), cache, std::span(all).subspan(i * V, n * V), kylin::Positions::all);
  }
  return all;
}

TEST_CASE("hybrid models: logits within the bar at every reference position, whole, in odd chunks, in cut passes, token by token; greedy identical") {
  for (const Hybrid& h : hybrids) {
    for (std::int64_t pass_rows : {512, 50}) {
      CAPTURE(h.name);
      CAPTURE(pass_rows);
      kylin::Model model = kylin::Model::load(data + "/models/" + h.name, {.threads = 2, .max_pass_rows = pass_rows});
      const auto V = static_cast<std::size_t>(model.vocab_size());
      for (const Case& c : load_cases(h.name)) {
        CAPTURE(c.tokens.size());
        for (std::size_t chunk : {std::size_t{0}, std::size_t{7}, std::size_t{37}, std::size_t{64}, std::size_t{65}, std::size_t{1}}) {
          if (pass_rows != 512 && chunk != 0) continue;  // the cut passes are one call's business
          CAPTURE(chunk);
          auto cache = model.new_cache(512);
          const std::vector<float> all = feed(model, cache, c.tokens, chunk);
          CHECK(case_error(c, all, V) <= h.bar);
          if (chunk == 0) CHECK(kylin::test::greedy(model, cache, std::vector<float>(all.end() - static_cast<std::ptrdiff_t>(V), all.end()), 12) == c.greedy);
        }
      }
    }
  }
}

TEST_CASE("hybrid models: a sequence beside others in one forward gets the same bits as alone (passes cut at 100 rows)") {
  for (const Hybrid& h : hybrids) {
    CAPTURE(h.name);
    kylin::Model model = kylin::Model::load(data + "/models/" + h.name, {.threads = 2, .max_pass_rows = 100});
    const auto V = static_cast<std::size_t>(model.vocab_size());
    const std::vector<Case> cases = load_cases(h.name);
    const Case& longest = cases.back();  // 300 tokens
    const Case& short_case = cases[1];   // 20 tokens
    // alone: each prompt by itself, and a sequence decoding one token after a 20-token prefix
    auto a = model.new_cache(512), b = model.new_cache(512), d = model.new_cache(512);
    const auto la = feed(model, a, longest.tokens, 0), lb = feed(model, b, short_case.tokens, 0);
    feed(model, d, short_case.tokens, 0);
    std::vector<float> ld(V);
    model.forward(std::span(longest.tokens).first(1), d, ld);
    // together: the decode step, then the two prompts, in one call
    auto a2 = model.new_cache(512), b2 = model.new_cache(512), d2 = model.new_cache(512);
    feed(model, d2, short_case.tokens, 0);
    std::vector<float> ta(la.size()), tb(lb.size()), td(V);
    const kylin::SequenceInput batch[] = {{std::span(longest.tokens).first(1), d2, {.logits = td}},
                                          {longest.tokens, a2, {.logits = ta, .positions = kylin::Positions::all}},
                                          {short_case.tokens, b2, {.logits = tb, .positions = kylin::Positions::all}}};
    model.forward(batch);
    CHECK(std::memcmp(ta.data(), la.data(), la.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(tb.data(), lb.data(), lb.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(td.data(), ld.data(), ld.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("hybrid models: a decode-rows pass gives each row a one-token step's bits and a state, so truncate lands exactly inside it") {
  for (const Hybrid& h : hybrids) {
    CAPTURE(h.name);
    kylin::Model model = kylin::Model::load(data + "/models/" + h.name, {.threads = 2});
    const auto V = static_cast<std::size_t>(model.vocab_size());
    const std::vector<int> tokens = load_cases(h.name).back().tokens;
    const std::span<const int> prefix = std::span(tokens).first(100), more = std::span(tokens).subspan(100, 5);
    auto steps = model.new_cache(512), rows = model.new_cache(512);
    feed(model, steps, {prefix.begin(), prefix.end()}, 0);
    feed(model, rows, {prefix.begin(), prefix.end()}, 0);
    std::vector<float> one(5 * V), all(5 * V);
    for (std::size_t i = 0; i < 5; ++i) model.forward(more.subspan(i, 1), steps, std::span(one).subspan(i * V, V));
    const kylin::SequenceInput verify{more, rows, {.logits = all, .positions = kylin::Positions::all}, true};
    model.forward(std::span(&verify, 1));
    CHECK(std::memcmp(one.data(), all.data(), all.size() * sizeof(float)) == 0);
    // a rejected draft: back to 102 tokens, which the pass kept a state of, and on from there as a cache fed
    // only those (the step-by-step cache kept its last step alone: it lands below)
    rows.truncate(102);
    CHECK(rows.size() == 102);
    steps.truncate(102);
    CHECK(steps.size() < 102);
    auto fresh = model.new_cache(512);
    feed(model, fresh, {prefix.begin(), prefix.end()}, 0);
    std::vector<float> x(V), y(V);
    for (std::size_t i = 0; i < 3; ++i) model.forward(std::span(tokens).subspan(100 + i, 1), fresh, y);  // 100, 101, 102 one step each
    model.forward(std::span(tokens).subspan(102, 1), rows, x);
    CHECK(std::memcmp(x.data(), y.data(), V * sizeof(float)) == 0);
  }
}

TEST_CASE("hybrid models: truncate lands on the last kept state at or below the asked position; snapshots and copies resume at the reference") {
  for (const Hybrid& h : hybrids) {
    CAPTURE(h.name);
    kylin::Model model = kylin::Model::load(data + "/models/" + h.name, {.threads = 2});
    const auto V = static_cast<std::size_t>(model.vocab_size());
    const Case c = load_cases(h.name).back();  // 300 tokens, positions 63 .. 299
    auto cache = model.new_cache(512);
    REQUIRE(cache.has_states());
    std::vector<float> row(V);
    model.forward(std::span(c.tokens).first(128), cache, row);
    cache.keep_state();  // a snapshot at 128
    model.forward(std::span(c.tokens).subspan(128, 64), cache, row);  // 192
    model.forward(std::span(c.tokens).subspan(192, 64), cache, row);  // 256
    CHECK(cache.restorable(200) == 192);  // the state before the last pass is kept (one past step)
    model.forward(std::span(c.tokens).subspan(256, 10), cache, row);  // 266: 192's buffer went to this state
    CHECK(cache.restorable(200) == 128);
    CHECK(cache.restorable(266) == 266);
    // a copy holds the first restorable(n) positions and their state
    auto copy = model.new_cache(512);
    copy.copy_prefix(cache, 200);
    CHECK(copy.size() == 128);
    cache.truncate(200);
    CHECK(cache.size() == 128);
    CHECK(cache.states().snapshots() == std::vector<std::int64_t>{128});
    for (kylin::KVCache* k : {&cache, &copy}) {
      const std::vector<int> rest(c.tokens.begin() + 128, c.tokens.end());
      const auto all = feed(model, *k, rest, 0);
      double worst = 0;
      for (std::size_t r = 0; r < c.logits.size(); ++r)
        if (c.positions[r] >= 128) worst = worse(worst, relative_l2(all.data() + (c.positions[r] - 128) * V, c.logits[r]));
      CHECK(worst <= h.bar);
    }
    // attention-only caches cut back anywhere
    kylin::Model qwen3 = kylin::Model::load(data + "/models/tiny-qwen3-untied", {.threads = 1});
    auto plain = qwen3.new_cache(64);
    CHECK_FALSE(plain.has_states());
    const std::vector<int> five{1, 2, 3, 4, 5};
    std::vector<float> logits(static_cast<std::size_t>(qwen3.vocab_size()));
    qwen3.forward(five, plain, logits);
    plain.truncate(3);
    CHECK(plain.size() == 3);
  }
}

TEST_CASE("hybrid models: keep_states keeps snapshots inside a prefill without cutting its passes: the same logits, resumable there") {
  for (const Hybrid& h : hybrids) {
    CAPTURE(h.name);
    kylin::Model model = kylin::Model::load(data + "/models/" + h.name, {.threads = 2, .max_pass_rows = 512});
    const auto V = static_cast<std::size_t>(model.vocab_size());
    const Case c = load_cases(h.name).back();  // 300 tokens
    auto plain = model.new_cache(512), kept = model.new_cache(512);
    const auto la = feed(model, plain, c.tokens, 0);
    std::vector<float> lb(la.size());
    const std::int64_t at[] = {1, 100, 128, 299};
    const kylin::SequenceInput in{c.tokens, kept, {.logits = lb, .positions = kylin::Positions::all}, false, at};
    model.forward(std::span(&in, 1));
    CHECK(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)) == 0);
    CHECK(kept.states().snapshots() == std::vector<std::int64_t>{1, 100, 128, 299});
    kept.truncate(299);
    CHECK(kept.size() == 299);
    std::vector<float> last(V);
    model.forward(std::span(c.tokens).subspan(299, 1), kept, last);
    CHECK(relative_l2(last.data(), c.logits.back()) <= h.bar);
    const std::int64_t bad[] = {0};
    const kylin::SequenceInput wrong{c.tokens, plain, {}, false, bad};
    CHECK_THROWS_AS(model.forward(std::span(&wrong, 1)), kylin::Error);
  }
}

// These random hybrids pass every rounding on, amplified (see the f32 bars above): Q8_0 weights alone, in a
// float64 numpy forward (tools/qwen35_reference.py with the projections rounded to Q8_0), move tiny-qwen35's
// logits by a median 0.16 and at worst 0.55. Measured here (Zen 5, AVX-512 VNNI: int8 activations too),
// q8 median / worst: tiny-qwen35 0.24 / 0.68, tiny-qwen35-moe 0.12 / 0.27, tiny-qwen3-next 0.056 / 0.28; top-5
// kept on 144 of 147 rows. q4: 0.97 / 1.32, 0.61 / 0.88, 0.61 / 1.02; top-1 31 / 147, top-5 77 / 147. The bars sit
// ~1.3x above; a wrong scale or block keeps the top-5 token by chance only (1 %).
constexpr kylin::test::AgreementBars hybrid_q8_bars{.dense_median = 0.32, .dense_worst = 0.9, .moe_median = 0.16, .top1 = 0.5, .top5 = 0.9};
constexpr kylin::test::AgreementBars hybrid_q4_bars{.dense_median = 1.25, .dense_worst = 1.75, .moe_median = 0.8, .top1 = 0.15, .top5 = 0.4};

TEST_CASE("hybrid models with q8 and q4 weights: every projection and expert quantized, logits near the float64 reference") {
  for (kylin::WeightFormat format : {kylin::WeightFormat::q8, kylin::WeightFormat::q4}) {
    kylin::test::Agreement all;
    for (const Hybrid& h : hybrids) {
      CAPTURE(h.name);
      kylin::Model model = kylin::Model::load(data + "/models/" + h.name, {.threads = 2, .weights = format});
      // every projection with a multiple of 32 columns (not the router, the shared expert's one-row gate, in_proj_b/a)
      kylin::ModelWeights w = model.weights();
      std::size_t quantized = 0, kept = 0;
      for (kylin::LayerWeights& L : w.layers)
        L.each_projection([&](kylin::MatRef& m) {
          if (m.data && m.cols % 32 == 0) ++(kylin::kernels::is_quantized(m.dtype) ? quantized : kept);
        });
      CHECK(quantized > 0);
      CHECK(kept == 0);
      const kylin::test::Agreement a = kylin::test::quantized_agreement(model, h.name);
      MESSAGE(h.name, " ", kylin::weight_format_name(format), ": rel. L2 median ", a.median(), " worst ", a.worst(), ", top-1 ", a.top1, "/",
              a.rows(), ", top-5 ", a.top5, "/", a.rows());
      const kylin::test::AgreementBars& bars = format == kylin::WeightFormat::q8 ? hybrid_q8_bars : hybrid_q4_bars;
      CHECK(bars.check(h.name, a) == "");
      all.merge(a);
    }
    CHECK((format == kylin::WeightFormat::q8 ? hybrid_q8_bars : hybrid_q4_bars).check_total(all) == "");
  }
}

}  // namespace hybrid_test
