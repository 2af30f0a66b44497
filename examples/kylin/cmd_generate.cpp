// `kylin generate`: continue token ids (--tokens, repeatable: the sequences run as one batch) or
// raw text (--prompt, no chat template). With --draft or --lookup (speculative decoding) one
// sequence runs through a Session, which needs the tokenizer files.
#include <cstdio>
#include <string>

#include "kylin/cli.hpp"
#include "kylin/generate/session.hpp"
#include "kylin/sampling_options.hpp"
#include "kylin/speculative_flags.hpp"

namespace cmd_generate {

struct Options {
  std::string model;
  std::vector<std::string> tokens;  // one id list per sequence
  std::string prompt;
  std::int64_t n = 16;
  std::string format = "text";
  int threads = 0;
  std::string backend = "cpu";
  bool ignore_eos = false;
  kylin::cli::SamplingFlags sampling;
  kylin::cli::SpeculativeFlags speculative;
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

// One sequence of a token-id run: its cache, sampler, logits and what it generated.
struct Stream {
  std::vector<int> prompt;
  kylin::KVCache cache;
  kylin::Sampler sampler;
  std::vector<float> logits;
  std::vector<int> out;
  bool done = false;
};

// Token ids in, token ids out: works on a checkpoint without tokenizer files. Several --tokens
// lists decode together, one batched forward per step; each equals its run alone.
int generate_tokens(const Options& o) {
  kylin::Model model = kylin::Model::load(o.model, {.backend = o.backend, .threads = o.threads});
  const kylin::json::Value& gen = model.generation_config();
  const auto params = kylin::apply_overrides(
      kylin::from_generation_config(gen.is_null() ? kylin::json::Value(kylin::json::Object{}) : gen), o.sampling.overrides());
  const auto sampleable = kylin::sampleable_ids(o.model);
  const auto V = static_cast<std::size_t>(model.vocab_size());
  std::vector<Stream> streams;
  streams.reserve(o.tokens.size());
  for (const std::string& list : o.tokens) {
    Stream s{kylin::cli::parse_id_list(list), model.new_cache(), kylin::Sampler(V, params, sampleable), std::vector<float>(V), {}};
    if (static_cast<std::int64_t>(s.prompt.size()) + o.n > s.cache.capacity())
      throw kylin::Error(kylin::ErrorCategory::request, "context",
                         std::to_string(s.prompt.size()) + " prompt tokens + " + std::to_string(o.n) +
                             " new tokens exceed the context length of " + std::to_string(s.cache.capacity()));
    s.done = o.n == 0;
    streams.push_back(std::move(s));
  }
  const auto& eos = model.config().eos_token_id;
  for (bool first = true;; first = false) {
    std::vector<kylin::SequenceInput> inputs;
    for (Stream& s : streams)
      if (!s.done) inputs.push_back({first ? std::span<const int>(s.prompt) : std::span<const int>(&s.out.back(), 1), s.cache, {.logits = s.logits}});
    if (inputs.empty()) break;
    model.forward(inputs);
    for (Stream& s : streams) {
      if (s.done) continue;
      const int id = s.sampler.sample(s.logits, s.prompt, s.out);
      if (!o.ignore_eos && std::find(eos.begin(), eos.end(), id) != eos.end()) s.done = true;
      else s.out.push_back(id);
      s.done = s.done || static_cast<std::int64_t>(s.out.size()) >= o.n;
    }
  }
  if (streams.size() == 1) {
    if (o.format == "json") std::printf("{\"tokens\": %s}\n", ids_json(streams[0].out).c_str());
    else std::printf("%s\n", ids_json(streams[0].out).c_str());
    return 0;
  }
  std::string json = "{\"sequences\": [";
  for (std::size_t i = 0; i < streams.size(); ++i) {
    if (o.format == "text") std::printf("%s\n", ids_json(streams[i].out).c_str());
    json += (i ? ", " : "") + std::string("{\"tokens\": ") + ids_json(streams[i].out) + "}";
  }
  if (o.format == "json") std::printf("%s]}\n", json.c_str());
  return 0;
}

void print_json(const kylin::Generation& result) {
  kylin::json::Value v = kylin::json::Object{};
  kylin::json::Array ids;
  for (int id : result.tokens) ids.emplace_back(id);
  v.set("tokens", ids);
  v.set("text", result.content);
  v.set("stop_reason", std::string(kylin::to_string(result.stop_reason)));
  const auto& s = result.stats;
  if (s.draft_tokens > 0 || s.decode_passes > 0) {
    v.set("draft_tokens", s.draft_tokens);
    v.set("draft_accepted", s.draft_accepted);
    v.set("decode_passes", s.decode_passes);
  }
  std::printf("%s\n", kylin::json::dump(v).c_str());
}

// Raw text (or, with speculative decoding, one --tokens list) in, streamed text out.
int generate_text(const Options& o) {
  kylin::EngineOptions eo{.backend = o.backend, .threads = o.threads};
  o.speculative.apply(eo);
  auto engine = kylin::Engine::load(o.model, eo);
  const auto draft = o.speculative.load_draft(*engine, eo);
  kylin::Session session(*engine);
  kylin::GenerateOptions g;
  g.sampling = o.sampling.overrides();
  g.max_new_tokens = o.n;
  g.ignore_eos = o.ignore_eos;
  g.speculative = o.speculative.options(*engine, draft.get());
  if (o.format == "text")
    g.on_piece = [](const kylin::Piece& p) {
      std::fwrite(p.text.data(), 1, p.text.size(), stdout);
      std::fflush(stdout);
      return true;
    };
  if (!o.tokens.empty()) {
    if (o.n == 0) g.max_new_tokens = 0;
    const std::vector<int> ids = kylin::cli::parse_id_list(o.tokens.front());
    const kylin::Generation result = session.generate(ids, g);
    if (o.format == "json") print_json(result);
    else std::printf("%s\n", ids_json(result.tokens).c_str());
    return 0;
  }
  const kylin::Generation result = session.complete(o.prompt, g);
  if (o.format == "json") print_json(result);
  else std::printf("\n");
  return 0;
}

const kylin::cli::Registrar registrar{"generate", [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("generate", "Continue token ids or raw text (no chat template)");
  cmd->add_option("--model", o->model, "Model directory")->required();
  auto* tokens = cmd->add_option("--tokens", o->tokens, "Comma-separated prompt token ids; repeat for several sequences, run as one batch")
                     ->take_all();
  auto* prompt = cmd->add_option("--prompt", o->prompt, "Raw prompt text (needs the tokenizer files)");
  tokens->excludes(prompt);
  cmd->add_option("-n,--n-predict", o->n, "Number of tokens to generate")->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 30));
  cmd->add_option("--format", o->format, "text or json")->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("-t,--threads", o->threads, "Threads (0: all cores)");
  kylin::cli::add_backend_option(cmd, o->backend);
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Do not stop at end-of-sequence tokens");
  o->sampling.add_to(cmd);
  o->speculative.add_to(cmd);
  cmd->callback([o, tokens, prompt] {
    if (tokens->count() == 0 && prompt->count() == 0)
      throw kylin::Error(kylin::ErrorCategory::request, "generate", "give --tokens or --prompt");
    if (o->speculative.any() && o->tokens.size() > 1)
      throw kylin::Error(kylin::ErrorCategory::request, "--tokens", "speculative decoding (--draft, --mtp, --lookup) runs one sequence: give one --tokens list");
    kylin::cli::exit_code() = tokens->count() && !o->speculative.any() ? generate_tokens(*o) : generate_text(*o);
  });
}};

}  // namespace cmd_generate
