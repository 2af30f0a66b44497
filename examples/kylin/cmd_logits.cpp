// `kylin logits`: run the forward pass over given token ids and print the logits as JSON.
#include <cstdio>
#include <string>

#include "kylin/cli.hpp"
#include "kylin/core/json.hpp"
#include "kylin/model/model.hpp"

namespace cmd_logits {

struct Options {
  std::string model;
  std::string tokens;
  std::string positions = "last";
  std::string format = "json";
  int threads = 0;
  std::string backend = "cpu";
  std::string weights = "stored";
  std::string prefill_activations = "f32";
};

int run(const Options& o) {
  const std::vector<int> ids = kylin::cli::parse_id_list(o.tokens);
  kylin::Model model = kylin::Model::load(
      o.model, {.backend = o.backend, .threads = o.threads, .weights = *kylin::parse_weight_format(o.weights),
                .prefill_activations = *kylin::kernels::parse_prefill_activations(o.prefill_activations)});
  auto cache = model.new_cache();  // the default context length: longer inputs are an error
  cache.check_room(static_cast<std::int64_t>(ids.size()));
  const bool all = o.positions == "all";
  const auto V = static_cast<std::size_t>(model.vocab_size());
  std::vector<float> logits((all ? ids.size() : 1) * V);
  model.forward(ids, cache, logits, all ? kylin::Positions::all : kylin::Positions::last);
  // Shortest round-trip float text keeps the output exact and compact.
  std::string out = "{\"logits\": [";
  for (std::size_t r = 0; r < logits.size() / V; ++r) {
    out += r ? ", [" : "[";
    for (std::size_t i = 0; i < V; ++i) {
      char buf[32];
      auto res = std::to_chars(buf, buf + sizeof buf, logits[r * V + i]);
      if (i) out += ", ";
      out.append(buf, res.ptr);
    }
    out += "]";
  }
  out += "]}\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

const kylin::cli::Registrar registrar{"logits", [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("logits", "Print the logits of a token sequence as JSON");
  cmd->add_option("--model", o->model, "Model directory (config.json + safetensors)")->required();
  cmd->add_option("--tokens", o->tokens, "Comma-separated token ids, e.g. 1,2,3")->required();
  cmd->add_option("--positions", o->positions, "last: logits of the last token; all: of every token")
      ->check(CLI::IsMember({"last", "all"}));
  cmd->add_option("--format", o->format, "Output format")->check(CLI::IsMember({"json"}));
  cmd->add_option("-t,--threads", o->threads, "Threads (0: all cores)");
  cmd->add_option("--weights", o->weights, "Linear layers as stored, or quantized at load to q8 or q4 (docs/QUANTIZATION.md)")
      ->check(CLI::IsMember({"stored", "q8", "q4"}));
  kylin::cli::add_prefill_activations_option(cmd, o->prefill_activations);
  kylin::cli::add_backend_option(cmd, o->backend);
  cmd->callback([o] { kylin::cli::exit_code() = run(*o); });
}};

}  // namespace cmd_logits
