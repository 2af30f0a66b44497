// Engine::embed on the Qwen3-Embedding layout (tests/data/models/e2e-qwen3-embedding): ids and
// embeddings equal the float64 reference, alone and batched, at 1 and 2 threads; Matryoshka
// dimensions; prompts; the embedding model without lm_head; every request error names its input.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/temp_dir.hpp"
#include "kylin/generate/session.hpp"

namespace {

const std::string embedding_model = std::string(KYLIN_TEST_DATA) + "/models/e2e-qwen3-embedding";
const std::string chat_model = std::string(KYLIN_TEST_DATA) + "/models/e2e-qwen3-chat";

struct Case {
  std::string text;
  std::vector<int> ids;
  std::vector<double> embedding, embedding_dim16;  // [hidden], [16]
};

std::vector<double> doubles(const kylin::json::Value& v) {
  std::vector<double> out;
  for (const auto& x : v.as_array()) out.push_back(x.as_double());
  return out;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = [] {
    const std::string path = std::string(KYLIN_TEST_DATA) + "/reference/e2e-qwen3-embedding.json";
    const auto ref = kylin::json::parse(kylin::io::read_text_file(path), path);
    std::vector<Case> out;
    for (const auto& c : ref.find("cases")->as_array()) {
      Case k{c.find("text")->as_string(), {}, doubles(*c.find("embedding")), doubles(*c.find("embedding_dim16"))};
      for (const auto& id : c.find("ids")->as_array()) k.ids.push_back(static_cast<int>(id.as_int()));
      out.push_back(std::move(k));
    }
    return out;
  }();
  return all;
}

kylin::Engine& engine(int threads) {
  static std::unique_ptr<kylin::Engine> one, two;
  auto& e = threads == 1 ? one : two;
  if (!e) e = kylin::Engine::load(embedding_model, {.threads = threads, .context_length = 256});
  return *e;
}

double cosine_distance(const std::vector<float>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double dot = 0, na = 0, nb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    na += double(a[i]) * a[i];
    nb += b[i] * b[i];
  }
  return 1 - dot / std::sqrt(na * nb);
}

void check_unit_norm(const std::vector<float>& v) {
  double n = 0;
  for (float x : v) n += double(x) * x;
  CHECK(std::sqrt(n) == doctest::Approx(1.0).epsilon(1e-6));
}

std::vector<std::string> texts() {
  std::vector<std::string> out;
  for (const Case& c : cases()) out.push_back(c.text);
  return out;
}

template <class F>
void check_error(F&& f, kylin::ErrorCategory category, const std::string& needle) {
  try {
    f();
    FAIL("no error; expected one containing: " << needle);
  } catch (const kylin::Error& e) {
    CHECK(e.category() == category);
    CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, e.what());
  }
}

}  // namespace

TEST_CASE("embed: the tokenizer with add_special_tokens gives the reference ids (text + <|endoftext|>); plain encode adds nothing") {
  const kylin::Tokenizer& tok = engine(2).tokenizer();
  for (const Case& c : cases()) {
    CHECK(tok.encode(c.text, {.add_special_tokens = true}) == c.ids);
    const std::vector<int> plain(c.ids.begin(), c.ids.end() - 1);
    CHECK(tok.encode(c.text) == plain);
  }
}

TEST_CASE("embed: every reference case within 1e-5 cosine distance, full and dimensions=16, one at a time and batched, 1 and 2 threads") {
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    kylin::Engine& e = engine(threads);
    REQUIRE(e.can_embed());
    const auto all = texts();
    const kylin::EmbedResult batched = e.embed(all), batched16 = e.embed(all, {.prompt_name = "", .dimensions = 16});
    REQUIRE(batched.embeddings.size() == cases().size());
    std::int64_t tokens = 0;
    for (std::size_t i = 0; i < cases().size(); ++i) {
      const Case& c = cases()[i];
      CAPTURE(c.text);
      const kylin::EmbedResult one = e.embed(std::vector<std::string>{c.text});
      const kylin::EmbedResult one16 = e.embed(std::vector<std::string>{c.text}, {.prompt_name = "", .dimensions = 16});
      CHECK(one.prompt_tokens == static_cast<std::int64_t>(c.ids.size()));
      CHECK(cosine_distance(one.embeddings[0], c.embedding) < 1e-5);
      CHECK(cosine_distance(batched.embeddings[i], c.embedding) < 1e-5);
      CHECK(cosine_distance(one16.embeddings[0], c.embedding_dim16) < 1e-5);
      CHECK(cosine_distance(batched16.embeddings[i], c.embedding_dim16) < 1e-5);
      CHECK(batched.embeddings[i] == one.embeddings[0]);  // the batched forward equals each input alone
      check_unit_norm(one.embeddings[0]);
      check_unit_norm(one16.embeddings[0]);
      tokens += static_cast<std::int64_t>(c.ids.size());
    }
    CHECK(batched.prompt_tokens == tokens);
  }
}

TEST_CASE("embed: prompt_name \"query\" prepends the query prompt (the reference's query cases); embed_tokens of the ids equals embed") {
  kylin::Engine& e = engine(2);
  const std::string* prompt = e.embedding_info().prompt("query");
  REQUIRE(prompt != nullptr);
  for (const Case& c : cases()) {
    if (!c.text.starts_with(*prompt)) continue;
    const kylin::EmbedResult r = e.embed(std::vector<std::string>{c.text.substr(prompt->size())}, {.prompt_name = "query"});
    CHECK(r.prompt_tokens == static_cast<std::int64_t>(c.ids.size()));
    CHECK(cosine_distance(r.embeddings[0], c.embedding) < 1e-5);
  }
  std::vector<std::vector<int>> ids;
  for (const Case& c : cases()) ids.push_back(c.ids);
  const kylin::EmbedResult by_ids = e.embed_tokens(ids), by_text = e.embed(texts());
  CHECK(by_ids.embeddings == by_text.embeddings);
  CHECK(by_ids.prompt_tokens == by_text.prompt_tokens);
}

TEST_CASE("embed: request errors name what is wrong: no inputs, an empty input, too long, ids outside the vocab, bad prompt or dimensions") {
  kylin::Engine& e = engine(2);
  using kylin::ErrorCategory;
  check_error([&] { e.embed(std::vector<std::string>{}); }, ErrorCategory::request, "no inputs");
  check_error([&] { e.embed_tokens(std::vector<std::vector<int>>{}); }, ErrorCategory::request, "no inputs");
  check_error([&] { e.embed(std::vector<std::string>{"a", ""}); }, ErrorCategory::request, "input 1: is empty");
  check_error([&] { e.embed_tokens(std::vector<std::vector<int>>{{1}, {}}); }, ErrorCategory::request, "input 1: is empty");
  std::string long_text;
  for (int i = 0; i < 300; ++i) long_text += " a";
  check_error([&] { e.embed(std::vector<std::string>{"a", long_text}); }, ErrorCategory::request,
              "input 1: 301 tokens exceed the context length of 256");
  check_error([&] { e.embed_tokens(std::vector<std::vector<int>>(2, std::vector<int>(257, 1))); }, ErrorCategory::request,
              "input 0: 257 tokens exceed the context length of 256");
  check_error([&] { e.embed_tokens(std::vector<std::vector<int>>{{1}, {2, 151936}}); }, ErrorCategory::request,
              "input 1: token id 151936 is outside the vocabulary");
  check_error([&] { e.embed_tokens(std::vector<std::vector<int>>{{-1}}); }, ErrorCategory::request, "input 0: token id -1");
  check_error([&] { e.embed(std::vector<std::string>{"a"}, {.prompt_name = "passage"}); }, ErrorCategory::request,
              "'passage' is not a prompt of this model (query, document)");
  check_error([&] { e.embed_tokens(std::vector<std::vector<int>>{{1}}, {.prompt_name = "query"}); }, ErrorCategory::request,
              "text inputs only");
  for (std::int64_t d : {0, -1, 33})
    check_error([&] { e.embed(std::vector<std::string>{"a"}, {.prompt_name = "", .dimensions = d}); }, ErrorCategory::request,
                "dimensions: " + std::to_string(d) + " is outside [1, 32]");
  CHECK(e.embed(std::vector<std::string>{"a"}, {.prompt_name = "", .dimensions = 32}).embeddings[0].size() == 32);
}

TEST_CASE("embed: a chat model's directory cannot embed, and says so") {
  auto e = kylin::Engine::load(chat_model, {.threads = 1, .context_length = 64});
  CHECK_FALSE(e->can_embed());
  check_error([&] { e->embed(std::vector<std::string>{"a"}); }, kylin::ErrorCategory::request, "cannot embed");
}

TEST_CASE("embed: an untied embedding directory without lm_head loads and embeds; asking it for logits is a named error") {
  kylin::test::TempDir dir;
  for (const auto& entry : std::filesystem::directory_iterator(embedding_model))
    if (entry.path().filename() != "config.json") std::filesystem::create_symlink(entry.path(), dir / entry.path().filename().string());
  auto config = kylin::json::parse(kylin::io::read_text_file(embedding_model + "/config.json"));
  config.set("tie_word_embeddings", false);
  std::ofstream(dir / "config.json") << kylin::json::dump(config);

  auto e = kylin::Engine::load(dir.path(), {.threads = 1, .context_length = 64});
  CHECK_FALSE(e->model().has_lm_head());
  const Case& c = cases()[2];
  CHECK(cosine_distance(e->embed(std::vector<std::string>{c.text}).embeddings[0], c.embedding) < 1e-5);
  auto cache = e->model().new_cache(8);
  std::vector<float> logits(static_cast<std::size_t>(e->model().vocab_size()));
  check_error([&] { e->model().forward(std::vector<int>{1, 2}, cache, logits); }, kylin::ErrorCategory::request,
              "has no lm_head: it is an embedding model; use embed");
  kylin::Session session(*e);
  kylin::GenerateOptions o;
  o.max_new_tokens = 2;
  check_error([&] { session.generate(std::vector<int>{1, 2}, o); }, kylin::ErrorCategory::request, "has no lm_head");
}
