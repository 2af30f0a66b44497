// Final hidden states through the Eigen views: logits = hidden · lm_head^T on the maps, and the
// kylin-similarity example as a process, checked against cosines computed here in double.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/process.hpp"
#include "kylin/core/json.hpp"
#include "kylin/eigen.hpp"
#include "kylin/model/model.hpp"
#include "kylin/model/weights.hpp"
#include "kylin/tokenizer/tokenizer.hpp"

using namespace kylin;

namespace similarity_test {

const std::string models = std::string(KYLIN_TEST_DATA) + "/models/";
const std::string similarity_bin = std::string(KYLIN_BIN_DIR) + "/kylin-similarity";
const std::string chat_model = models + "e2e-qwen3-chat";  // the test checkpoint with a tokenizer

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

test::ProcessResult run_similarity(const std::string& args) {
  return test::run_shell(similarity_bin + " " + args + " 2>&1", similarity_bin);
}

// The last token's final hidden state through Model::forward, [hidden] in double.
std::vector<double> last_hidden(Model& model, const std::vector<int>& ids) {
  auto cache = model.new_cache(static_cast<std::int64_t>(ids.size()));
  std::vector<float> hidden(static_cast<std::size_t>(model.config().hidden_size));
  model.forward(ids, cache, ForwardOutputs{.logits = {}, .hidden = hidden, .positions = Positions::last});
  return {hidden.begin(), hidden.end()};
}

double cosine(const std::vector<double>& a, const std::vector<double>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ab += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  return ab / std::sqrt(aa * bb);
}


TEST_CASE("logits equal the mapped hidden states [tokens, hidden] times the mapped lm_head, in one forward call") {
  for (const char* name : {"tiny-qwen3-untied", "odd-qwen3-f16-sharded", "small-qwen2-f32"}) {
    CAPTURE(name);
    Model model = Model::load(models + name, {.threads = 1});
    const ModelWeights weights = bind_weights(model.checkpoint(), model.config());
    const std::vector<int> tokens = {1, 7, 30, 2, 11, 5};
    const auto T = static_cast<std::int64_t>(tokens.size());
    std::vector<float> logits(static_cast<std::size_t>(T * model.vocab_size()));         // [T, vocab]
    std::vector<float> hidden(static_cast<std::size_t>(T * model.config().hidden_size));  // [T, hidden]
    auto cache = model.new_cache(64);
    model.forward(tokens, cache, ForwardOutputs{.logits = logits, .hidden = hidden, .positions = Positions::all});
    const Eigen::MatrixXd H = eigen::map_rows(hidden, T).cast<double>();
    const Eigen::MatrixXd W =  // [vocab, hidden]: lm_head.weight, or embed_tokens when tied
        eigen::visit(weights.lm_head, [](auto m) { return Eigen::MatrixXd(m.template cast<double>()); });
    REQUIRE(W.rows() == model.vocab_size());
    const Eigen::MatrixXd expected = H * W.transpose();  // [T, vocab]
    const auto L = eigen::map_rows(logits, T);
    for (Eigen::Index r = 0; r < T; ++r) {
      CAPTURE(r);
      // f32 kernels against a double product of the same inputs
      CHECK((L.row(r).cast<double>() - expected.row(r)).norm() <= 1e-5 * expected.row(r).norm());
    }
  }
}

TEST_CASE("kylin-similarity --format json: unit diagonal, symmetric, entries equal cosines of Model::forward hidden states") {
  const std::vector<std::string> texts = {"Why is the sky blue?", "The sky is blue because of Rayleigh scattering.",
                                          "Bonjour à tous", "12345 + 678"};
  std::string args = "--model " + chat_model + " --format json -t 1";
  for (const auto& t : texts) {
    args += ' ';  // appended piecewise: GCC 12's -Wrestrict misfires on "literal" + string temporary
    args += shell_quote(t);
  }
  const auto r = run_similarity(args);
  INFO(r.out);
  REQUIRE(r.exit_code == 0);
  const json::Value out = json::parse(r.out);
  const auto& S = out.find("similarity")->as_array();
  REQUIRE(S.size() == texts.size());

  const Tokenizer tokenizer = Tokenizer::from_dir(chat_model);
  Model model = Model::load(chat_model, {.threads = 1});
  std::vector<std::vector<double>> hidden;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const std::vector<int> ids = tokenizer.encode(texts[i]);
    CHECK(out.find("tokens")->as_array()[i].as_int() == static_cast<std::int64_t>(ids.size()));
    hidden.push_back(last_hidden(model, ids));
  }
  for (std::size_t i = 0; i < texts.size(); ++i) {
    REQUIRE(S[i].as_array().size() == texts.size());
    CHECK(std::abs(S[i].as_array()[i].as_double() - 1.0) <= 1e-6);
    for (std::size_t j = 0; j < texts.size(); ++j) {
      CAPTURE(i);
      CAPTURE(j);
      const double s = S[i].as_array()[j].as_double();
      CHECK(s == S[j].as_array()[i].as_double());
      // same float hidden states, both summed in double: only the summation order differs
      CHECK(std::abs(s - cosine(hidden[i], hidden[j])) <= 1e-9);
    }
  }
}

TEST_CASE("kylin-similarity prints the matrix and each text's token count as text by default") {
  const auto r = run_similarity("--model " + chat_model + " -t 1 'hello world' 'hello world' 'goodbye'");
  INFO(r.out);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find(" 1.000000  1.000000 ") != std::string::npos);  // two identical texts: cosine 1
  const Tokenizer tokenizer = Tokenizer::from_dir(chat_model);
  for (const auto& [i, text] : {std::pair<int, std::string>{0, "hello world"}, {2, "goodbye"}}) {
    std::string line = "[";
    line += std::to_string(i);
    line += "] ";
    line += std::to_string(tokenizer.encode(text).size());
    line += " tokens: ";
    line += text;
    CHECK(r.out.find(line + '\n') != std::string::npos);
  }
}

TEST_CASE("kylin-similarity refuses a model without a tokenizer and an empty text, naming the problem") {
  const auto no_tokenizer = run_similarity("--model " + models + "tiny-qwen3-untied 'a' 'b'");
  CHECK(no_tokenizer.exit_code == 1);
  CHECK(no_tokenizer.out.find("no tokenizer.json") != std::string::npos);
  const auto empty = run_similarity("--model " + chat_model + " 'a' ''");
  CHECK(empty.exit_code == 1);
  CHECK(empty.out.find("text 1: is empty") != std::string::npos);
}

}  // namespace similarity_test
