// `kylin rerank`: documents ordered by relevance to a query with a Qwen3-Reranker directory, as
// Engine::rerank scores them, printed as JSON or one line per document.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kylin/cli.hpp"
#include "kylin/core/json.hpp"
#include "kylin/generate/engine.hpp"

namespace cmd_rerank {

struct Options {
  std::string model;
  std::string query;
  std::string instruction = kylin::RerankOptions{}.instruction;
  std::int64_t top_n = 0;  // 0: all documents
  std::string format = "json";
  std::vector<std::string> documents;
  int threads = 0;
};

std::string as_json(const kylin::Reranking& r, const std::vector<std::string>& documents) {
  kylin::json::Value results = kylin::json::Array{};
  for (const auto& x : r.results) {
    kylin::json::Value item = kylin::json::Object{};
    item.set("index", x.index);
    item.set("score", x.score);
    item.set("document", documents[static_cast<std::size_t>(x.index)]);
    results.push_back(std::move(item));
  }
  kylin::json::Value out = kylin::json::Object{};
  out.set("results", std::move(results));
  out.set("prompt_tokens", r.prompt_tokens);
  return kylin::json::dump(out, {.item_separator = ", ", .key_separator = ": "}) + "\n";
}

int run(const Options& o) {
  auto engine = kylin::Engine::load(o.model, {.threads = o.threads});
  kylin::RerankOptions options{.instruction = o.instruction, .top_n = std::nullopt};
  if (o.top_n != 0) options.top_n = o.top_n;
  const kylin::Reranking r = engine->rerank(o.query, o.documents, options);
  std::string out;
  if (o.format == "json") {
    out = as_json(r, o.documents);
  } else {
    for (const auto& x : r.results) {
      char score[32];
      std::snprintf(score, sizeof score, "%.6f", x.score);
      out += std::string(score) + "\t" + std::to_string(x.index) + "\t" + o.documents[static_cast<std::size_t>(x.index)] + "\n";
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

const kylin::cli::Registrar registrar{"rerank", [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("rerank", "Order documents by relevance to a query (a Qwen3-Reranker model)");
  cmd->add_option("--model", o->model, "Model directory (a Qwen3-Reranker: a plain Qwen3ForCausalLM with its tokenizer)")->required();
  cmd->add_option("--query", o->query, "The query")->required();
  cmd->add_option("--instruction", o->instruction, "The task instruction of the reranker prompt (default: the model card's web search one)");
  cmd->add_option("--top-n", o->top_n, "Print only the N most relevant documents")->check(CLI::PositiveNumber);
  cmd->add_option("--format", o->format,
                  "json: {\"results\": [{\"index\", \"score\", \"document\"}, ...], \"prompt_tokens\": N}, best first; "
                  "text: one line per document, score<TAB>index<TAB>document")
      ->check(CLI::IsMember({"json", "text"}));
  cmd->add_option("-t,--threads", o->threads, "Threads (0: all cores)");
  cmd->add_option("documents", o->documents, "Documents, each one argument; all run as one batch")->required();
  cmd->callback([o] { kylin::cli::exit_code() = run(*o); });
}};

}  // namespace cmd_rerank
