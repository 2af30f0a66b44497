// `kylin embed`: the embeddings of texts with a sentence-transformers model directory
// (Qwen3-Embedding), as Engine::embed computes them, printed as JSON or one line per text.
#include <charconv>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kylin/cli.hpp"
#include "kylin/generate/engine.hpp"

namespace cmd_embed {

struct Options {
  std::string model;
  std::string prompt_name;
  std::int64_t dimensions = 0;  // 0: the model's hidden size
  std::string format = "json";
  std::vector<std::string> texts;
  int threads = 0;
};

// Shortest round-trip float text: exact and compact.
void append_float(std::string& out, float v) {
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, res.ptr);
}

int run(const Options& o) {
  auto engine = kylin::Engine::load(o.model, {.threads = o.threads});
  kylin::EmbedOptions options{.prompt_name = o.prompt_name, .dimensions = std::nullopt};
  if (o.dimensions != 0) options.dimensions = o.dimensions;
  const kylin::EmbedResult r = engine->embed(o.texts, options);
  const bool json = o.format == "json";
  std::string out = json ? "{\"embeddings\": [" : "";
  for (std::size_t i = 0; i < r.embeddings.size(); ++i) {
    if (json) out += i ? ", [" : "[";
    for (std::size_t j = 0; j < r.embeddings[i].size(); ++j) {
      if (j) out += json ? ", " : " ";
      append_float(out, r.embeddings[i][j]);
    }
    out += json ? "]" : "\n";
  }
  if (json) out += "], \"prompt_tokens\": " + std::to_string(r.prompt_tokens) + "}\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

const kylin::cli::Registrar registrar{"embed", [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("embed", "Print the embeddings of texts (a sentence-transformers model such as Qwen3-Embedding)");
  cmd->add_option("--model", o->model, "Model directory with modules.json (sentence-transformers layout)")->required();
  cmd->add_option("--prompt-name", o->prompt_name,
                  "A prompt of config_sentence_transformers.json prepended to every text, e.g. query (default: its default_prompt_name)");
  cmd->add_option("--dimensions", o->dimensions, "Keep the first N values, re-normalised (Matryoshka); default: all")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--format", o->format,
                  "json: {\"embeddings\": [[...], ...], \"prompt_tokens\": N} (N: tokens run, over all texts); "
                  "text: one line per text, values separated by spaces")
      ->check(CLI::IsMember({"json", "text"}));
  cmd->add_option("-t,--threads", o->threads, "Threads (0: all cores)");
  cmd->add_option("texts", o->texts, "Texts to embed, each one argument; all run as one batch")->required();
  cmd->callback([o] { kylin::cli::exit_code() = run(*o); });
}};

}  // namespace cmd_embed
