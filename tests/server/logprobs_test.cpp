// LogprobRecorder: logit_bias edits the row the sampler sees; logprobs are the log-softmax of the
// biased row over the sampleable ids, with the top alternatives in order; the JSON follows
// OpenAI's chat and legacy-completions shapes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kylin/server/logprobs.hpp"

using namespace kylin::server;
using kylin::SampleableIds;
using kylin::json::Value;

namespace logprobs_test {

// log-softmax of `row` at `id` over ids [0, end) except `holes`, computed plainly in double.
double reference_logprob(const std::vector<float>& row, int id, std::size_t end, const std::vector<int>& holes) {
  double sum = 0;
  for (std::size_t i = 0; i < end; ++i)
    if (std::find(holes.begin(), holes.end(), static_cast<int>(i)) == holes.end()) sum += std::exp(static_cast<double>(row[i]));
  return static_cast<double>(row[static_cast<std::size_t>(id)]) - std::log(sum);
}

const kylin::Tokenizer& qwen3_tokenizer() {
  static const kylin::Tokenizer t = kylin::Tokenizer::from_dir(std::string(KYLIN_TEST_DATA) + "/qwen3-tokenizer");
  return t;
}


TEST_CASE("a recorded token's logprob is the log-softmax of the biased row over sampleable ids; top alternatives sorted") {
  std::vector<float> row = {1.0f, 3.0f, -2.0f, 0.5f, 2.0f, 9.0f, 0.0f};  // id 5 is a hole, id 6 is past the end
  const SampleableIds sampleable(6, {5});
  LogprobRequest req;
  req.logprobs = true;
  req.top = 3;
  req.logit_bias = {{0, 2.5f}, {2, -100.0f}};
  LogprobRecorder r(req, sampleable, 4);
  std::vector<float> seen = row;
  r.see_row(seen);
  CHECK(seen[0] == doctest::Approx(3.5));  // the sampler sees the bias
  CHECK(seen[2] == doctest::Approx(-102.0));
  r.see_token(4);
  std::vector<float> biased = row;
  biased[0] += 2.5f;
  biased[2] -= 100.0f;
  REQUIRE(r.all().size() == 1);
  const TokenLogprob& t = r.all()[0];
  CHECK(t.id == 4);
  CHECK(t.logprob == doctest::Approx(reference_logprob(biased, 4, 6, {5})).epsilon(1e-6));
  REQUIRE(t.n_top == 3);
  CHECK(t.top[0].first == 0);  // 3.5, then 3.0, then 2.0; the hole's 9.0 is never a candidate
  CHECK(t.top[1].first == 1);
  CHECK(t.top[2].first == 4);
  CHECK(t.top[2].second == doctest::Approx(t.logprob));
  double total = 0;
  for (int id : {0, 1, 2, 3, 4}) total += std::exp(reference_logprob(biased, id, 6, {5}));
  CHECK(total == doctest::Approx(1.0));
}

TEST_CASE("take() hands out each step's entries once, in order; a bias-only recorder records nothing") {
  const SampleableIds all;
  LogprobRequest req;
  req.logprobs = true;
  LogprobRecorder r(req, all, 8);
  for (int step = 0; step < 3; ++step) {
    std::vector<float> row = {0.0f, static_cast<float>(step)};
    r.see_row(row);
    r.see_token(step % 2);
  }
  CHECK(r.take().size() == 3);
  CHECK(r.take().empty());
  std::vector<float> row = {0.0f, 0.0f};
  r.see_row(row);
  r.see_token(1);
  const auto last = r.take();
  REQUIRE(last.size() == 1);
  CHECK(last[0].logprob == doctest::Approx(std::log(0.5)));
  CHECK(r.all().size() == 4);

  LogprobRequest bias_only;
  bias_only.logit_bias = {{1, 1.0f}};
  LogprobRecorder b(bias_only, all, 8);
  std::vector<float> row2 = {0.0f, 0.0f};
  b.see_row(row2);
  b.see_token(1);
  CHECK(row2[1] == 1.0f);
  CHECK(b.all().empty());
}

TEST_CASE("a logprob that underflows is reported as -9999, as OpenAI does, never -inf") {
  LogprobRequest req;
  req.logprobs = true;
  req.top = 2;
  const SampleableIds all;
  LogprobRecorder r(req, all, 1);
  std::vector<float> row = {0.0f, -std::numeric_limits<float>::infinity()};
  r.see_row(row);
  r.see_token(1);
  CHECK(r.all()[0].logprob == LogprobRecorder::minimum);
  CHECK(r.all()[0].top[1].second == LogprobRecorder::minimum);
}

TEST_CASE("chat logprobs carry token, logprob, bytes and top_logprobs; completions carry parallel lists and text offsets") {
  const kylin::Tokenizer& tok = qwen3_tokenizer();
  const int hello = tok.encode("Hello").at(0), world = tok.encode(" world").at(0);
  std::vector<TokenLogprob> entries(2);
  entries[0].id = hello;
  entries[0].logprob = -0.5f;
  entries[0].n_top = 2;
  entries[0].top[0] = {hello, -0.5f};
  entries[0].top[1] = {world, -1.5f};
  entries[1].id = world;
  entries[1].logprob = -0.25f;
  const Value chat = chat_logprobs(tok, entries);
  const Value& c0 = chat.find("content")->as_array().at(0);
  CHECK(c0.find("token")->as_string() == "Hello");
  CHECK(c0.find("logprob")->as_double() == -0.5);
  CHECK(c0.find("bytes")->size() == 5);
  CHECK(c0.find("bytes")->as_array()[0].as_int() == 'H');
  REQUIRE(c0.find("top_logprobs")->size() == 2);
  CHECK(c0.find("top_logprobs")->as_array()[1].find("token")->as_string() == " world");
  CHECK(chat.find("content")->as_array().at(1).find("top_logprobs")->size() == 0);
  CHECK(chat.find("refusal")->is_null());

  std::int64_t offset = 0;
  const Value comp = completion_logprobs(tok, entries, offset);
  CHECK(comp.find("tokens")->as_array()[1].as_string() == " world");
  CHECK(comp.find("token_logprobs")->as_array()[1].as_double() == -0.25);
  CHECK(comp.find("text_offset")->as_array()[0].as_int() == 0);
  CHECK(comp.find("text_offset")->as_array()[1].as_int() == 5);
  CHECK(offset == 11);
  CHECK(comp.find("top_logprobs")->as_array()[0].find(" world")->as_double() == -1.5);

  // A token holding part of a character (here the lone byte 0xE4, a 3-byte lead) is named by
  // its bytes; bytes has them exactly.
  int partial = -1;
  for (int id = 0; id < tok.vocab_size() && partial < 0; ++id)
    if (tok.token_bytes(id) == "\xe4") partial = id;
  REQUIRE(partial >= 0);
  CHECK(logprob_token_text(tok, partial) == "bytes:\\xe4");
  CHECK(kylin::json::dump(kylin::server::detail::token_bytes_json(tok, partial)) == "[228]");
  CHECK(logprob_token_text(tok, hello) == "Hello");
}

}  // namespace logprobs_test
