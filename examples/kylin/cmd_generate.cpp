// `kylin generate`: continue token ids (--tokens) or raw text (--prompt, no chat template).
#include <cstdio>
#include <string>

#include "kylin/cli.hpp"
#include "kylin/generate/session.hpp"
#include "kylin/sampling_options.hpp"

namespace {

struct Options {
  std::string model;
  std::string tokens;
  std::string prompt;
  std::int64_t n = 16;
  std::string format = "text";
  int threads = 0;
  bool ignore_eos = false;
  kylin::cli::SamplingFlags sampling;
};

std::string ids_json(const std::vector<int>& ids) {
  std::string s = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(ids[i]);
  }
  s += ']';
  return s;
}

// Token ids in, token ids out: works on a checkpoint without tokenizer files.
int generate_tokens(const Options& o) {
  const std::vector<int> prompt = kylin::cli::parse_id_list(o.tokens);
  kylin::Model model = kylin::Model::load(o.model, {.threads = o.threads});
  const kylin::json::Value& gen = model.generation_config();
  const auto params = kylin::apply_overrides(
      kylin::from_generation_config(gen.is_null() ? kylin::json::Value(kylin::json::Object{}) : gen), o.sampling.overrides());
  auto cache = model.new_cache();  // the default context length
  if (static_cast<std::int64_t>(prompt.size()) + o.n > cache.capacity())
    throw kylin::Error(kylin::ErrorCategory::request, "context",
                       std::to_string(prompt.size()) + " prompt tokens + " + std::to_string(o.n) +
                           " new tokens exceed the context length of " + std::to_string(cache.capacity()));
  kylin::Sampler sampler(static_cast<std::size_t>(model.vocab_size()), params, kylin::sampleable_ids(o.model));
  std::vector<float> logits = model.logits_last(prompt, cache);
  std::vector<int> out;
  const auto& eos = model.config().eos_token_id;
  while (static_cast<std::int64_t>(out.size()) < o.n) {
    const int id = sampler.sample(logits, prompt, out);
    if (!o.ignore_eos && std::find(eos.begin(), eos.end(), id) != eos.end()) break;
    out.push_back(id);
    if (static_cast<std::int64_t>(out.size()) < o.n) model.forward(std::span<const int>(&out.back(), 1), cache, logits);
  }
  if (o.format == "json")
    std::printf("{\"tokens\": %s}\n", ids_json(out).c_str());
  else
    std::printf("%s\n", ids_json(out).c_str());
  return 0;
}

// Raw text in, streamed text out.
int generate_text(const Options& o) {
  auto engine = kylin::Engine::load(o.model, {.threads = o.threads});
  kylin::Session session(*engine);
  kylin::GenerateOptions g;
  g.sampling = o.sampling.overrides();
  g.max_new_tokens = o.n;
  g.ignore_eos = o.ignore_eos;
  if (o.format == "text")
    g.on_piece = [](const kylin::Piece& p) {
      std::fwrite(p.text.data(), 1, p.text.size(), stdout);
      std::fflush(stdout);
      return true;
    };
  const kylin::Generation result = session.complete(o.prompt, g);
  if (o.format == "json") {
    kylin::json::Value v = kylin::json::Object{};
    kylin::json::Array ids;
    for (int id : result.tokens) ids.emplace_back(id);
    v.set("tokens", ids);
    v.set("text", result.content);
    v.set("stop_reason", std::string(kylin::to_string(result.stop_reason)));
    std::printf("%s\n", kylin::json::dump(v).c_str());
  } else {
    std::printf("\n");
  }
  return 0;
}

const kylin::cli::Registrar registrar{"generate", [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("generate", "Continue token ids or raw text (no chat template)");
  cmd->add_option("--model", o->model, "Model directory")->required();
  auto* tokens = cmd->add_option("--tokens", o->tokens, "Comma-separated prompt token ids");
  auto* prompt = cmd->add_option("--prompt", o->prompt, "Raw prompt text (needs the tokenizer files)");
  tokens->excludes(prompt);
  cmd->add_option("-n,--n-predict", o->n, "Number of tokens to generate")->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 30));
  cmd->add_option("--format", o->format, "text or json")->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("-t,--threads", o->threads, "Threads (0: all cores)");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Do not stop at end-of-sequence tokens");
  o->sampling.add_to(cmd);
  cmd->callback([o, tokens, prompt] {
    if (tokens->count() == 0 && prompt->count() == 0)
      throw kylin::Error(kylin::ErrorCategory::request, "generate", "give --tokens or --prompt");
    kylin::cli::exit_code() = tokens->count() ? generate_tokens(*o) : generate_text(*o);
  });
}};

}  // namespace
