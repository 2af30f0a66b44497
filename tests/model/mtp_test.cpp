// The MTP head of the Qwen3.5 / Qwen3-Next checkpoints (BasicModel::forward_mtp) against the float64 draft
// references (tests/data/reference/<model>-mtp.json): the first pass over the target's hidden states, every
// draft step after it, teacher-forced over whole prompts; and the errors of a head that is absent or misfed.
#include <doctest/doctest.h>

#include <limits>
#include <string>
#include <vector>

#include "common/reference.hpp"
#include "kylin/model/model.hpp"

namespace mtp_test {

using kylin::test::data;
using kylin::test::relative_l2;
using kylin::test::worse;

// Measured worst relative L2 of the draft steps (printed by the first TEST_CASE's MESSAGE): tiny-qwen35 5.8e-6,
// tiny-qwen35-moe 2.3e-6, tiny-qwen3-next 4.2e-6; the bar is 1e-5. The teacher-forced rows of tiny-qwen35 reach
// 1.5e-5 at positions 11 and 12 of the 20-token case, where the target's own logits are 1.4e-5 off (the f32
// rounding that checkpoint amplifies: tests/model/hybrid_test.cpp): they take that test's bar for it.
constexpr double draft_bar = 1e-5;
struct Head {
  const char* name;
  double teacher_forced_bar;
};
constexpr Head heads[] = {{"tiny-qwen35", 2.5e-5}, {"tiny-qwen35-moe", 1e-5}, {"tiny-qwen3-next", 1e-5}};
constexpr const char* models[] = {"tiny-qwen35", "tiny-qwen35-moe", "tiny-qwen3-next"};

std::vector<int> ints(const kylin::json::Value& a) {
  std::vector<int> out;
  for (const auto& x : a.as_array()) out.push_back(static_cast<int>(x.as_int()));
  return out;
}
std::vector<double> doubles(const kylin::json::Value& a) {
  std::vector<double> out;
  for (const auto& x : a.as_array()) out.push_back(x.as_double());
  return out;
}

// The target over tokens: every position's final hidden state [T, H] (its cache keeps them).
std::vector<float> target_hidden(kylin::Model& model, kylin::KVCache& cache, std::span<const int> tokens) {
  std::vector<float> hidden(tokens.size() * static_cast<std::size_t>(model.hidden_size()));
  std::vector<float> logits(static_cast<std::size_t>(model.vocab_size()));
  model.forward(tokens, cache, {.logits = logits, .hidden = hidden, .positions = kylin::Positions::last, .hidden_positions = kylin::Positions::all});
  return hidden;
}

struct MtpOut {
  std::vector<float> logits;  // [rows, V]
  std::vector<float> hidden;  // [H] the last row's (after mtp.norm)
};

// The head over (tokens[i], hidden rows[i]) at positions mtp_cache.size().., logits of every row.
MtpOut mtp(kylin::Model& model, kylin::KVCache& mtp_cache, std::span<const int> tokens, std::span<const float> hidden) {
  MtpOut out{std::vector<float>(tokens.size() * static_cast<std::size_t>(model.vocab_size())),
             std::vector<float>(static_cast<std::size_t>(model.hidden_size()))};
  const kylin::SequenceInput in{tokens, mtp_cache, {.logits = out.logits, .hidden = out.hidden, .positions = kylin::Positions::all,
                                                    .hidden_positions = kylin::Positions::last},
                                false, {}, hidden};
  model.forward_mtp(std::span(&in, 1));
  return out;
}

TEST_CASE("MTP head: draft logits within 1e-5 of the float64 references at every step, argmax the reference's; teacher-forced rows too") {
  for (const auto& [name, teacher_forced_bar] : heads) {
    for (std::int64_t pass_rows : {512, 50}) {
      const std::string model_name = name;  // (CAPTURE prints a const char* as a pointer)
      CAPTURE(model_name);
      CAPTURE(pass_rows);
      kylin::Model model = kylin::Model::load(data + "/models/" + name, {.threads = 2, .max_pass_rows = pass_rows, .mtp = kylin::MtpHead::loaded});
      REQUIRE(model.has_mtp());
      const auto V = static_cast<std::size_t>(model.vocab_size()), H = static_cast<std::size_t>(model.hidden_size());
      const auto ref = kylin::json::parse(kylin::io::read_text_file(data + "/reference/" + std::string(name) + "-mtp.json"));
      double worst = 0, worst_forced = 0;
      int steps = 0;
      for (const auto& c : ref.find("cases")->as_array()) {
        const std::vector<int> tokens = ints(*c.find("tokens"));
        CAPTURE(tokens.size());
        for (const auto& d : c.find("drafts")->as_array()) {
          const auto p = static_cast<std::size_t>(d.find("start")->as_int());
          CAPTURE(p);
          auto cache = model.new_cache(512);
          auto mtp_cache = model.new_mtp_cache(512);
          const std::vector<float> h = target_hidden(model, cache, std::span(tokens).first(p + 1));
          // first pass: (h_j, tokens[j + 1]) for j < p, (h_p, next_token)
          std::vector<int> shifted(tokens.begin() + 1, tokens.begin() + static_cast<std::ptrdiff_t>(p) + 1);
          shifted.push_back(static_cast<int>(d.find("next_token")->as_int()));
          MtpOut out = mtp(model, mtp_cache, shifted, h);
          std::span<const float> row = std::span<const float>(out.logits).last(V);
          for (const auto& s : d.find("steps")->as_array()) {
            CAPTURE(s.find("position")->as_int());
            REQUIRE(mtp_cache.size() == s.find("position")->as_int() + 1);
            worst = worse(worst, relative_l2(row.data(), doubles(*s.find("logits"))));
            CHECK(kylin::test::argmax(row.data(), V) == s.find("token")->as_int());
            ++steps;
            // the next step: the draft token with the head's own last hidden state
            const int next = kylin::test::argmax(row.data(), V);
            out = mtp(model, mtp_cache, std::vector<int>{next}, std::vector<float>(out.hidden));
            row = out.logits;
          }
        }
        if (const auto* tf = c.find("teacher_forced")) {
          auto cache = model.new_cache(512);
          auto mtp_cache = model.new_mtp_cache(512);
          const std::vector<float> h = target_hidden(model, cache, tokens);
          const std::size_t n = tokens.size() - 1;  // positions 0 .. T-2 read (h_j, tokens[j + 1])
          const MtpOut out = mtp(model, mtp_cache, std::span(tokens).subspan(1), std::span(h).first(n * H));
          const auto& rows = tf->find("logits")->as_array();
          const std::vector<int> positions = ints(*tf->find("positions")), argmax = ints(*tf->find("argmax"));
          for (std::size_t r = 0; r < rows.size(); ++r) {
            CAPTURE(positions[r]);
            const float* mine = out.logits.data() + static_cast<std::size_t>(positions[r]) * V;
            worst_forced = worse(worst_forced, relative_l2(mine, doubles(rows[r])));
            CHECK(kylin::test::argmax(mine, V) == argmax[r]);
          }
        }
      }
      MESSAGE(std::string(name) << " (max_pass_rows " << pass_rows << "): worst relative L2 " << worst << " over " << steps
                   << " draft steps, " << worst_forced << " over the teacher-forced rows");
      CHECK(steps > 0);
      CHECK(worst <= draft_bar);
      CHECK(worst_forced <= teacher_forced_bar);
    }
  }
}

// The first draft of the 20-token case's last start, and the target's logits there, from a model loaded with `o`.
struct FirstDraft {
  std::vector<float> target, draft;  // [V] each
};
FirstDraft first_draft(const char* name, kylin::ModelOptions o, const kylin::json::Value& c) {
  o.mtp = kylin::MtpHead::loaded;
  kylin::Model model = kylin::Model::load(data + "/models/" + name, o);
  const std::vector<int> tokens = ints(*c.find("tokens"));
  const auto& d = c.find("drafts")->as_array().back();
  const auto p = static_cast<std::size_t>(d.find("start")->as_int());
  auto cache = model.new_cache(64);
  auto mtp_cache = model.new_mtp_cache(64);
  FirstDraft out{std::vector<float>(static_cast<std::size_t>(model.vocab_size())), {}};
  std::vector<float> h((p + 1) * static_cast<std::size_t>(model.hidden_size()));
  model.forward(std::span(tokens).first(p + 1), cache, {.logits = out.target, .hidden = h, .hidden_positions = kylin::Positions::all});
  std::vector<int> shifted(tokens.begin() + 1, tokens.begin() + static_cast<std::ptrdiff_t>(p) + 1);
  shifted.push_back(static_cast<int>(d.find("next_token")->as_int()));
  out.draft = mtp(model, mtp_cache, shifted, h).logits;
  out.draft.erase(out.draft.begin(), out.draft.end() - model.vocab_size());
  return out;
}

TEST_CASE("MTP head: quantized and packed weights move the draft no more than they move the target") {
  for (const char* name : models) {
    const std::string model_name = name;
    CAPTURE(model_name);
    const auto ref = kylin::json::parse(kylin::io::read_text_file(data + "/reference/" + std::string(name) + "-mtp.json"));
    const auto& c = ref.find("cases")->as_array()[1];  // the 20-token case
    const FirstDraft exact = first_draft(name, {.threads = 2, .weight_layout = kylin::WeightLayout::stored}, c);
    for (kylin::WeightFormat f : {kylin::WeightFormat::stored, kylin::WeightFormat::q8, kylin::WeightFormat::q4}) {
      CAPTURE(static_cast<int>(f));
      const FirstDraft q = first_draft(name, {.threads = 2, .weights = f}, c);
      const double target_err = relative_l2(q.target, exact.target), draft_err = relative_l2(q.draft, exact.draft);
      MESSAGE(std::string(name) << " weights " << static_cast<int>(f) << ": target moved " << target_err << ", draft " << draft_err);
      // the head reads the target's hidden state and the shared LM head; measured 0.6-1.05x the target's move
      CHECK(draft_err <= 3 * target_err + 1e-6);
    }
  }
}

TEST_CASE("MTP head: a draft vocabulary (mtp_vocab) gives the first ids' logits of the whole one, the rest -inf; stored and quantized") {
  for (kylin::WeightFormat f : {kylin::WeightFormat::stored, kylin::WeightFormat::q8, kylin::WeightFormat::q4}) {
    for (const char* name : {"tiny-qwen35", "tiny-qwen35-moe"}) {  // tied and untied LM heads
      const std::string model_name = name;
      CAPTURE(model_name);
      CAPTURE(static_cast<int>(f));
      const auto ref = kylin::json::parse(kylin::io::read_text_file(data + "/reference/" + std::string(name) + "-mtp.json"));
      const auto& c = ref.find("cases")->as_array()[1];
      const FirstDraft all = first_draft(name, {.threads = 2, .weights = f}, c);
      const FirstDraft some = first_draft(name, {.threads = 2, .weights = f, .mtp_vocab = 200}, c);  // 208: whole panels
      REQUIRE(some.draft.size() == all.draft.size());
      CHECK(some.target == all.target);
      for (std::size_t i = 0; i < all.draft.size(); ++i) {
        CAPTURE(i);
        if (i < 208) CHECK(some.draft[i] == all.draft[i]);  // each logit is its own dot product
        else CHECK(some.draft[i] == -std::numeric_limits<float>::infinity());
      }
    }
  }
  kylin::Model model = kylin::Model::load(data + "/models/tiny-qwen35", {.threads = 1, .mtp = kylin::MtpHead::loaded, .mtp_vocab = 64});
  auto cache = model.new_mtp_cache(8);
  const std::vector<int> one{5};
  const std::vector<float> h(static_cast<std::size_t>(model.hidden_size()));
  int id = -1;
  const kylin::SequenceInput picks{one, cache, {.greedy = std::span(&id, 1)}, false, {}, h};
  CHECK_THROWS_WITH_AS(model.forward_mtp(std::span(&picks, 1)), doctest::Contains("draft vocabulary"), kylin::Error);
  CHECK_THROWS_WITH_AS(kylin::Model::load(data + "/models/tiny-qwen35", {.threads = 1, .mtp = kylin::MtpHead::loaded, .mtp_vocab = -1}),
                       doctest::Contains("mtp_vocab"), kylin::Error);
}

TEST_CASE("MTP head: a model loaded without it, a checkpoint without one, and misfed hidden states are errors naming the thing") {
  kylin::Model plain = kylin::Model::load(data + "/models/tiny-qwen35", {.threads = 1});
  CHECK_FALSE(plain.has_mtp());
  auto mtp_cache = plain.new_mtp_cache(8);
  const std::vector<int> one{5};
  const std::vector<float> h(static_cast<std::size_t>(plain.hidden_size()));
  const kylin::SequenceInput in{one, mtp_cache, {}, false, {}, h};
  CHECK_THROWS_WITH_AS(plain.forward_mtp(std::span(&in, 1)), doctest::Contains("without its MTP head"), kylin::Error);
  CHECK_THROWS_WITH_AS(kylin::Model::load(data + "/models/small-qwen3", {.threads = 1, .mtp = kylin::MtpHead::loaded}),
                       doctest::Contains("no MTP head"), kylin::Error);

  kylin::Model model = kylin::Model::load(data + "/models/tiny-qwen35", {.threads = 1, .mtp = kylin::MtpHead::loaded});
  auto cache = model.new_mtp_cache(8);
  const std::vector<float> short_h(h.size() - 1);
  const kylin::SequenceInput bad{one, cache, {}, false, {}, short_h};
  CHECK_THROWS_WITH_AS(model.forward_mtp(std::span(&bad, 1)), doctest::Contains("hidden_in"), kylin::Error);
  auto target_cache = model.new_cache(8);  // the target's cache has the target's layers, not the head's one
  const kylin::SequenceInput wrong{one, target_cache, {}, false, {}, h};
  CHECK_THROWS_WITH_AS(model.forward_mtp(std::span(&wrong, 1)), doctest::Contains("layer or head shape"), kylin::Error);
  CHECK(cache.size() == 0);
}

}  // namespace mtp_test
