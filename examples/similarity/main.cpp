// kylin-similarity: cosine similarity of texts, each embedded as the model's final hidden state
// (after the last RMSNorm) of its last token. The linear algebra is Eigen on zero-copy views of
// kylin's output buffers (kylin/eigen.hpp). Usage: kylin-similarity --model DIR "text a" "text b" ...
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "kylin/core/json.hpp"
#include "kylin/eigen.hpp"
#include "kylin/model/model.hpp"
#include "kylin/tokenizer/tokenizer.hpp"

namespace {

struct Options {
  std::string model;
  std::vector<std::string> texts;
  std::string format = "text";
  int threads = 0;
};

// The last token's final hidden state, [hidden], widened to double for the products below.
Eigen::VectorXd last_hidden_state(kylin::Model& model, std::span<const int> ids) {
  auto cache = model.new_cache(static_cast<std::int64_t>(ids.size()));  // each text on its own
  std::vector<float> hidden(static_cast<std::size_t>(model.config().hidden_size));  // [1, hidden]
  model.forward(ids, cache, kylin::ForwardOutputs{.logits = {}, .hidden = hidden, .positions = kylin::Positions::last});
  return kylin::eigen::map_rows(hidden, 1).row(0).transpose().cast<double>();
}

// S[i, j] = cos(e_i, e_j) for the rows e_i of E [n, hidden]; symmetric by construction.
Eigen::MatrixXd cosine_matrix(const Eigen::MatrixXd& E) {
  const Eigen::VectorXd norms = E.rowwise().norm();  // [n]
  for (Eigen::Index i = 0; i < norms.size(); ++i)
    if (!(norms[i] > 0))
      throw kylin::Error(kylin::ErrorCategory::runtime, "text " + std::to_string(i), "hidden state has zero norm: no direction to compare");
  const Eigen::MatrixXd U = norms.cwiseInverse().asDiagonal() * E;  // [n, hidden], unit rows
  Eigen::MatrixXd S = Eigen::MatrixXd::Zero(E.rows(), E.rows());    // [n, n]
  S.selfadjointView<Eigen::Lower>().rankUpdate(U);                  // lower triangle of U U^T
  return S.selfadjointView<Eigen::Lower>();
}

void print_text(const Options& o, const std::vector<std::vector<int>>& ids, const Eigen::MatrixXd& S) {
  std::printf("cosine similarity of last-token final hidden states (%s)\n", o.model.c_str());
  for (Eigen::Index i = 0; i < S.rows(); ++i) {
    for (Eigen::Index j = 0; j < S.cols(); ++j) std::printf("%s%9.6f", j ? " " : "", S(i, j));
    std::printf("\n");
  }
  for (std::size_t i = 0; i < o.texts.size(); ++i)
    std::printf("[%zu] %zu tokens: %s\n", i, ids[i].size(), o.texts[i].c_str());
}

void print_json(const Options& o, const std::vector<std::vector<int>>& ids, const Eigen::MatrixXd& S) {
  using kylin::json::Array, kylin::json::Object, kylin::json::Value;
  Array texts, tokens, rows;
  for (std::size_t i = 0; i < o.texts.size(); ++i) {
    texts.emplace_back(o.texts[i]);
    tokens.emplace_back(static_cast<std::int64_t>(ids[i].size()));
  }
  for (Eigen::Index i = 0; i < S.rows(); ++i) {
    Array row;
    for (Eigen::Index j = 0; j < S.cols(); ++j) row.emplace_back(S(i, j));
    rows.emplace_back(std::move(row));
  }
  const Value out(Object{{"texts", Value(std::move(texts))}, {"tokens", Value(std::move(tokens))},
                         {"similarity", Value(std::move(rows))}});
  std::printf("%s\n", kylin::json::dump(out).c_str());
}

int run(const Options& o) {
  const kylin::Tokenizer tokenizer = kylin::Tokenizer::from_dir(o.model);
  kylin::Model model = kylin::Model::load(o.model, {.threads = o.threads});
  tokenizer.check_model_vocab(model.vocab_size());
  std::vector<std::vector<int>> ids;
  Eigen::MatrixXd E(static_cast<Eigen::Index>(o.texts.size()), model.config().hidden_size);  // [n, hidden]
  for (std::size_t i = 0; i < o.texts.size(); ++i) {
    ids.push_back(tokenizer.encode(o.texts[i]));
    if (ids.back().empty()) throw kylin::Error(kylin::ErrorCategory::request, "text " + std::to_string(i), "is empty (no tokens)");
    E.row(static_cast<Eigen::Index>(i)) = last_hidden_state(model, ids.back());
  }
  const Eigen::MatrixXd S = cosine_matrix(E);
  if (o.format == "json") print_json(o, ids, S);
  else print_text(o, ids, S);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kylin-similarity: cosine similarity of texts by the model's final hidden states"};
  Options o;
  app.add_option("--model", o.model, "Model directory (config.json, safetensors, tokenizer)")->required();
  app.add_option("texts", o.texts, "Texts to compare")->required();
  app.add_option("--format", o.format, "Output format")->check(CLI::IsMember({"text", "json"}));
  app.add_option("-t,--threads", o.threads, "Threads (0: all cores)");
  try {
    app.parse(argc, argv);
    return run(o);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kylin-similarity: error: %s\n", e.what());
    return 1;
  }
}
