// `kylin run` (one prompt through the chat template, answer streamed to stdout) and
// `kylin chat` (interactive multi-turn chat). Reasoning (<think>) goes to stderr, so stdout is
// exactly the answer; the stats line goes to stderr too.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "kylin/chat/template_defaults.hpp"
#include "kylin/cli.hpp"
#include "kylin/constrain/gbnf.hpp"
#include "kylin/constrain/json_schema.hpp"
#include "kylin/generate/session.hpp"
#include "kylin/sampling_options.hpp"
#include "kylin/speculative_flags.hpp"
#if KYLIN_IMAGE_INPUT
#include "kylin/io/image_decode.hpp"
#endif

namespace cmd_run {

struct Options {
  std::string model;
  std::string prompt;
  std::string system;
  std::int64_t n = 2048;
  std::int64_t ctx = 0;
  int threads = 0;
  std::string kv_dtype = "f32";
  std::string weights = "stored";
  std::string weight_layout = "packed";
  std::string experts = "held";
  std::string prefill_activations = "f32";
  std::string backend = "cpu";
  bool no_mmap = false;
  bool no_think = false;
  bool hide_think = false;
  std::vector<std::string> stop;
  std::string cache_dir;  // prompt prefixes on disk (docs/PROMPT_CACHE.md); empty: none
  std::string cache_size = "8GiB";
  kylin::cli::SamplingFlags sampling;
  kylin::cli::SpeculativeFlags speculative;
  std::string json_schema;  // run: the answer must be JSON valid under this schema file (docs/CONSTRAINED.md)
  std::string grammar;      // run: the answer must be a sentence of this GBNF file
  std::string chat_template_kwargs;  // JSON object for the template (as kylin-server's option)
  std::string reasoning = "auto";    // on | off | auto (--no-think is off)
  std::vector<std::string> images;   // run: image files, before the prompt in the user message
  std::int64_t image_min_pixels = 0, image_max_pixels = 0;  // 0: preprocessor_config.json's
};

// --chat-template-kwargs and --reasoning (with --no-think, which is --reasoning off), resolved:
// the kwargs and whether the model thinks.
struct ChatSettings {
  kylin::json::Value kwargs;
  bool think = true;
};

ChatSettings chat_settings(const Options& o) {
  if (o.no_think && o.reasoning == "on") throw kylin::Error(kylin::ErrorCategory::config, "--no-think", "contradicts --reasoning on");
  const kylin::TemplateDefaults d = kylin::parse_template_defaults(o.chat_template_kwargs, o.no_think ? "off" : o.reasoning);
  return {d.kwargs, d.enable_thinking.value_or(true)};
}

std::atomic<bool> interrupted{false};
extern "C" void on_sigint(int) { interrupted.store(true); }

bool stderr_tty() { return ::isatty(STDERR_FILENO) == 1; }

// An image file of --image or /image, decoded by kylin::image (PNG, JPEG, WebP, GIF).
kylin::vision::Image read_image(const std::string& path) {
#if KYLIN_IMAGE_INPUT
  std::ifstream in(path, std::ios::binary);
  if (!in) throw kylin::Error(kylin::ErrorCategory::io, path, "cannot open the image file");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return kylin::io::decode_image(std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()), path);
#else
  throw kylin::Error(kylin::ErrorCategory::request, path, "this kylin was built without image decoding (kylin::image: scripts/setup.sh installs its libraries)");
#endif
}

kylin::json::Value message(const std::string& role, const std::string& content) {
  kylin::json::Value m = kylin::json::Object{};
  m.set("role", role);
  m.set("content", content);
  return m;
}

// A user message: `images` image items (the template's), then the text.
kylin::json::Value user_message(const std::string& text, std::size_t images) {
  if (images == 0) return message("user", text);
  kylin::json::Value content = kylin::json::Array{};
  for (std::size_t i = 0; i < images; ++i) content.push_back(kylin::json::parse(R"({"type": "image"})"));
  kylin::json::Value part = kylin::json::Object{};
  part.set("type", "text");
  part.set("text", text);
  content.push_back(std::move(part));
  kylin::json::Value m = kylin::json::Object{};
  m.set("role", "user");
  m.set("content", std::move(content));
  return m;
}

kylin::EngineOptions engine_options(const Options& o) {
  kylin::EngineOptions eo;
  eo.backend = o.backend;
  eo.threads = o.threads;
  eo.kv_dtype = kylin::parse_kv_dtype(o.kv_dtype);
  eo.weights = *kylin::parse_weight_format(o.weights);
  eo.weight_layout = *kylin::parse_weight_layout(o.weight_layout);
  eo.checkpoint_memory = o.no_mmap ? kylin::io::FileMemory::copied : kylin::io::FileMemory::mapped;
  eo.experts = *kylin::parse_expert_memory(o.experts);
  eo.prefill_activations = *kylin::kernels::parse_prefill_activations(o.prefill_activations);
  if (o.ctx > 0) eo.context_length = o.ctx;
  eo.image_min_pixels = o.image_min_pixels;
  eo.image_max_pixels = o.image_max_pixels;
  o.speculative.apply(eo);
  return eo;
}

// The model and, with --draft, its draft model (loaded as the model is, checked against it).
struct Engines {
  std::unique_ptr<kylin::Engine> model, draft;
};

Engines load_engines(const Options& o) {
  if (stderr_tty()) std::fprintf(stderr, "loading %s ...\r", o.model.c_str());
  Engines e;
  e.model = kylin::Engine::load(o.model, engine_options(o));
  e.draft = o.speculative.load_draft(*e.model, engine_options(o));
  if (stderr_tty()) std::fprintf(stderr, "\33[2K\r");
  return e;
}

kylin::GenerateOptions generate_options(const Options& o, const Engines& engines) {
  kylin::GenerateOptions g;
  g.sampling = o.sampling.overrides();
  g.speculative = o.speculative.options(*engines.model, engines.draft.get());
  g.max_new_tokens = o.n;
  g.stop = o.stop;
  const bool tty = stderr_tty();
  const bool show_think = !o.hide_think;
  g.on_piece = [tty, show_think](const kylin::Piece& p) {
    if (p.channel == kylin::Channel::answer) {
      std::fwrite(p.text.data(), 1, p.text.size(), stdout);
      std::fflush(stdout);
    } else if (show_think) {
      std::fprintf(stderr, tty ? "\33[2m%.*s\33[0m" : "%.*s", static_cast<int>(p.text.size()), p.text.data());
    }
    return !interrupted.load();
  };
  if (tty)
    g.on_prefill = [](std::int64_t done, std::int64_t total) {
      if (total > 256) std::fprintf(stderr, done < total ? "\rprefill %lld/%lld" : "\33[2K\r", static_cast<long long>(done),
                                    static_cast<long long>(total));
    };
  return g;
}

void print_stats(const kylin::Generation& r) {
  const auto& s = r.stats;
  char disk[48] = "";  // time spent loading a stored prefix (--cache-dir)
  if (s.cache_load_ms > 0) std::snprintf(disk, sizeof disk, ", %.1f ms from disk", s.cache_load_ms);
  char drafts[96] = "";  // speculative decoding: drafts accepted, tokens per target pass
  if (s.draft_tokens > 0)
    std::snprintf(drafts, sizeof drafts, " (drafts %lld/%lld accepted, %.2f tok/pass)", static_cast<long long>(s.draft_accepted),
                  static_cast<long long>(s.draft_tokens),
                  s.decode_passes > 0 ? static_cast<double>(s.generated_tokens - 1) / static_cast<double>(s.decode_passes) : 0.0);
  std::fprintf(stderr,
               "\n[kylin] load %.0f ms | prompt %lld tok (cached %lld%s, prefilled %lld) at %.1f tok/s | ttft %.0f ms | "
               "%lld tok at %.1f tok/s%s | stop: %s\n",
               s.load_ms, static_cast<long long>(s.prompt_tokens), static_cast<long long>(s.cached_tokens),
               disk,
               static_cast<long long>(s.prefill_tokens), s.prefill_tok_s, s.ttft_ms,
               static_cast<long long>(s.generated_tokens), s.decode_tok_s, drafts, std::string(kylin::to_string(r.stop_reason)).c_str());
}

// The prompt cache of --cache-dir, or null.
std::unique_ptr<kylin::PromptCache> open_prompt_cache(const kylin::Engine& engine, const Options& o) {
  if (o.cache_dir.empty()) return nullptr;
  return std::make_unique<kylin::PromptCache>(
      engine, kylin::PromptCacheOptions{.dir = o.cache_dir, .max_bytes = kylin::parse_byte_size(o.cache_size), .min_tokens = 16, .warn = {}});
}


std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw kylin::Error(kylin::ErrorCategory::io, path, "cannot open");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The constraint of --json-schema / --grammar, or null. With thinking on, the <think> block
// stays free text and the grammar applies to the answer after it.
std::unique_ptr<kylin::constrain::Constraint> make_constraint(const kylin::Engine& engine, const Options& o, bool think) {
  if (o.json_schema.empty() && o.grammar.empty()) return nullptr;
  kylin::constrain::Grammar grammar =
      o.grammar.empty() ? kylin::constrain::json_schema_grammar(kylin::json::parse(read_text_file(o.json_schema), o.json_schema))
                        : kylin::constrain::parse_gbnf(read_text_file(o.grammar));
  auto trie = std::make_shared<const kylin::constrain::TokenTrie>(kylin::constrain::TokenTrie::build(
      engine.tokenizer(), engine.eos_ids(), static_cast<std::size_t>(engine.model().vocab_size())));
  kylin::constrain::ConstraintOptions options;
  options.thinking = think ? kylin::constrain::ThinkingPolicy::allow : kylin::constrain::ThinkingPolicy::none;
  return std::make_unique<kylin::constrain::Constraint>(std::move(grammar), std::move(trie), options);
}

int run(const Options& o) {
  const ChatSettings chat = chat_settings(o);  // before the model loads: a bad JSON fails at once
  const Engines engines = load_engines(o);
  kylin::Engine* engine = engines.model.get();
  const auto constraint = make_constraint(*engine, o, chat.think);
  const auto prompt_cache = open_prompt_cache(*engine, o);  // its destructor finishes the write
  kylin::Session session(*engine);
  kylin::json::Value messages = kylin::json::Array{};
  if (!o.system.empty()) messages.push_back(message("system", o.system));
  std::vector<kylin::vision::Image> images;
  for (const std::string& path : o.images) images.push_back(read_image(path));
  messages.push_back(user_message(o.prompt, images.size()));
  std::signal(SIGINT, on_sigint);
  auto g = generate_options(o, engines);
  g.prompt_cache = prompt_cache.get();
  g.constraint = constraint.get();
  const auto result = session.chat(messages, {.enable_thinking = chat.think, .tools = {}, .extra_kwargs = chat.kwargs}, g, images);
  std::fputs("\n", stdout);
  std::fflush(stdout);
  print_stats(result);
  return 0;
}

// Installs SIGINT without SA_RESTART, so Ctrl-C interrupts a blocking read of the next line too.
void install_interrupt_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);
}

int chat(const Options& o) {
  const ChatSettings settings = chat_settings(o);
  const Engines engines = load_engines(o);
  kylin::Engine* engine = engines.model.get();
  const auto prompt_cache = open_prompt_cache(*engine, o);
  kylin::Session session(*engine);
  kylin::json::Value messages = kylin::json::Array{};
  if (!o.system.empty()) messages.push_back(message("system", o.system));
  bool think = settings.think;
  const bool tty = ::isatty(STDIN_FILENO) == 1;
  install_interrupt_handler();
  std::vector<kylin::vision::Image> images;  // the conversation's, in order; the next message's are the last `pending`
  std::size_t pending = 0;
  if (tty) std::fprintf(stderr, "kylin chat: /image FILE /think /no_think /reset /quit; Ctrl-C stops an answer, Ctrl-D quits\n");
  std::string line;
  while (true) {
    if (tty) std::fputs("> ", stdout), std::fflush(stdout);
    interrupted.store(false);
    if (!std::getline(std::cin, line)) {
      if (interrupted.load() && !std::cin.eof()) {  // Ctrl-C at the prompt: drop the line
        std::cin.clear();
        std::fputs("\n", stdout);
        continue;
      }
      break;
    }
    if (line == "/quit" || line == "/exit") break;
    if (line == "/think" || line == "/no_think") {
      think = line == "/think";
      std::fprintf(stderr, "[kylin] thinking %s\n", think ? "on" : "off");
      continue;
    }
    if (line == "/reset") {
      messages = kylin::json::Array{};
      if (!o.system.empty()) messages.push_back(message("system", o.system));
      images.clear(), pending = 0;
      session.reset();
      std::fprintf(stderr, "[kylin] conversation reset\n");
      continue;
    }
    if (line.starts_with("/image ")) {  // goes with the next message; a bad file is said and skipped
      try {
        if (!engine->has_vision()) throw kylin::Error(kylin::ErrorCategory::request, "/image", "this model has no vision tower: it takes no images");
        images.push_back(read_image(line.substr(7)));
        ++pending;
        std::fprintf(stderr, "[kylin] image %zu: %lldx%lld, for the next message\n", images.size(), static_cast<long long>(images.back().width),
                     static_cast<long long>(images.back().height));
      } catch (const kylin::Error& e) {
        std::fprintf(stderr, "[kylin] %s\n", e.what());
      }
      continue;
    }
    if (line.empty()) continue;
    messages.push_back(user_message(line, pending));
    pending = 0;
    auto g = generate_options(o, engines);
    g.prompt_cache = prompt_cache.get();
    const auto result = session.chat(messages, {.enable_thinking = think, .tools = {}, .extra_kwargs = settings.kwargs}, g, images);
    messages.push_back(message("assistant", result.content));
    std::fputs("\n", stdout);
    std::fflush(stdout);
    print_stats(result);
  }
  return 0;
}

void add_common(CLI::App* cmd, Options& o) {
  cmd->add_option("--model", o.model, "Model directory (config.json, safetensors, tokenizer files)")
      ->envname("KYLIN_MODEL")
      ->required();
  cmd->add_option("--system", o.system, "System message");
  cmd->add_option("-n,--n-predict", o.n, "Most tokens to generate per answer")->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  cmd->add_option("--ctx", o.ctx, "Context length in tokens (default: max_position_embeddings within a 2 GiB KV budget)");
  cmd->add_option("-t,--threads", o.threads, "Threads (0: all cores)");
  cmd->add_option("--kv-dtype", o.kv_dtype, "KV cache element type (f16: half the memory, ~1e-3 logits error)")
      ->check(CLI::IsMember({"f32", "f16"}));
  cmd->add_option("--weights", o.weights, "Linear layers as stored, or quantized at load to q8 or q4 (docs/QUANTIZATION.md)")
      ->check(CLI::IsMember({"stored", "q8", "q4"}));
  cmd->add_option("--weight-layout", o.weight_layout, "How matmul weights are held: packed into the kernels' own layout at load, or stored (read in place from the mapped checkpoint; docs/PERFORMANCE.md)")->check(CLI::IsMember({"packed", "stored"}));
  cmd->add_option("--experts", o.experts, "Where an MoE model's routed experts are held: with the other weights, or mapped (read in place from the checkpoint as the router picks them: for checkpoints larger than memory; docs/PERFORMANCE.md)")->check(CLI::IsMember({"held", "mapped"}));
  kylin::cli::add_prefill_activations_option(cmd, o.prefill_activations);
  cmd->add_flag("--no-mmap", o.no_mmap, "Copy the checkpoint into memory in huge pages at load instead of mapping it (with --weight-layout stored; docs/PERFORMANCE.md)");
  kylin::cli::add_backend_option(cmd, o.backend);
  cmd->add_flag("--no-think", o.no_think, "Qwen3: answer without a <think> block (--reasoning off)");
  cmd->add_option("--reasoning", o.reasoning, "Whether the model thinks: on, off, or auto (the template's default)")
      ->check(CLI::IsMember({"on", "off", "auto"}));
  cmd->add_option("--chat-template-kwargs", o.chat_template_kwargs,
                  "Variables for the chat template, a JSON object (e.g. '{\"enable_thinking\": false}'), as kylin-server's");
  cmd->add_flag("--hide-think", o.hide_think, "Do not print the reasoning");
  cmd->add_option("--stop", o.stop, "Stop before this text (repeatable)");
  cmd->add_option("--cache-dir", o.cache_dir, "Keep prompt prefixes' KV state in this directory and reuse it (docs/PROMPT_CACHE.md)");
  cmd->add_option("--cache-size", o.cache_size, "Most bytes kept in --cache-dir (8GiB, 512MiB, ...)");
  cmd->add_option("--image-min-pixels", o.image_min_pixels, "Images are resized to at least this many pixels (default: the model's preprocessor_config.json)");
  cmd->add_option("--image-max-pixels", o.image_max_pixels, "Images are resized to at most this many pixels (default: the model's preprocessor_config.json)");
  o.sampling.add_to(cmd);
  o.speculative.add_to(cmd);
}

const kylin::cli::Registrar run_registrar{"run", [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("run", "Answer one prompt (through the chat template), streaming to stdout");
  add_common(cmd, *o);
  cmd->add_option("-p,--prompt", o->prompt, "The user message")->required();
  cmd->add_option("--image", o->images, "An image file (PNG, JPEG, WebP, GIF) before the prompt in the user message (repeatable; a model with a vision tower)");
  auto* schema = cmd->add_option("--json-schema", o->json_schema, "Answer with JSON valid under this JSON-schema file (docs/CONSTRAINED.md)");
  cmd->add_option("--grammar", o->grammar, "Answer with a sentence of this GBNF grammar file (docs/CONSTRAINED.md)")->excludes(schema);
  cmd->callback([o] { kylin::cli::exit_code() = run(*o); });
}};

const kylin::cli::Registrar chat_registrar{"chat", [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("chat", "Interactive multi-turn chat on the terminal");
  add_common(cmd, *o);
  cmd->callback([o] { kylin::cli::exit_code() = chat(*o); });
}};

}  // namespace cmd_run
