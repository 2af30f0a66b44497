// kylin-server: an OpenAI-compatible HTTP server for one model directory (see docs/SERVER.md).
// SIGINT/SIGTERM: new generations get 503, the ones in flight get --shutdown-timeout seconds to
// finish (then end with 503 or an SSE error event), and the server exits 0.
#include <CLI/CLI.hpp>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <span>
#include <thread>
#include <vector>

#include "kylin-server/routes.hpp"
#if KYLIN_IMAGE_INPUT
#include "kylin/io/image_decode.hpp"
#endif

namespace {

struct Options {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::int64_t ctx = 0;
  int threads = 0;
  std::string kv_dtype = "f32";
  std::string weights = "stored";
  std::string weight_layout = "packed";
  std::string experts = "held";
  std::string prefill_activations = "f32";
  std::string backend = "cpu";
  bool no_mmap = false;
  std::string api_key;
  int parallel = 1;
  std::size_t queue = 16;
  std::size_t max_body = 0;         // 0: 4 MiB, or 32 MiB for a model that takes images
  std::size_t max_images = kylin::server::ImageRequestLimits{}.max_images;
  std::size_t max_image_bytes = kylin::server::ImageRequestLimits{}.max_bytes;
  std::int64_t image_min_pixels = 0, image_max_pixels = 0;  // 0: preprocessor_config.json's
  std::vector<std::string> cors_origins;
  std::string chat_template_kwargs;  // JSON object; empty: none
  std::string reasoning = "auto";
  bool no_access_log = false;
  bool special_in_content = false;  // transformers' tokenization of message text (off: plain text)
  double shutdown_timeout = 5;
  double request_timeout = 30;
  std::string cache_dir;            // prompt cache and slot files; empty: none
  std::string cache_size = "8GiB";
  std::string task;                 // generate | embed | rerank; empty: embed if the model can, else generate
  std::string model_draft;          // speculative decoding's draft model; empty: none
  int draft_max = kylin::SpeculativeOptions{}.max_draft;
  float draft_p_min = kylin::SpeculativeOptions{}.p_min;
  int lookup = 0;
  int mtp = 0;                      // the MTP head's drafts per pass; 0: off
  std::int64_t mtp_vocab = 0;       // the head drafts among ids [0, mtp_vocab) only; 0: all
  std::vector<std::string> served_names;  // --served-model-name; empty: the directory's name
  std::size_t response_store_count = 1024;
  std::string response_store_bytes = "64MiB";
  kylin::server::http::Limits limits;
};

// The image parts' decoder: kylin::image's (PNG, JPEG, WebP, GIF) where the build found its libraries.
kylin::server::ImageDecoder image_decoder() {
#if KYLIN_IMAGE_INPUT
  return [](std::span<const std::uint8_t> bytes, std::string_view what) { return kylin::io::decode_image(bytes, what); };
#else
  return nullptr;
#endif
}

// Signals are taken by one thread with sigwait, so no handler runs inside the transport or the model.
sigset_t shutdown_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);  // sent to ourselves when run() ends on its own
  return set;
}

using Ms = std::chrono::milliseconds;
Ms seconds(double s) { return Ms(static_cast<std::int64_t>(s * 1000)); }

// Waits until `done()` or `timeout`; true if done.
template <class F>
bool wait_for(F done, Ms timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(Ms(20));
  }
  return true;
}

// A hash of this executable, so that system_fingerprint changes with the build.
std::string build_id() {
  std::ifstream in("/proc/self/exe", std::ios::binary);
  kylin::Xxh64 h;
  std::vector<char> buf(std::size_t{1} << 20);
  while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0)
    h.update(std::as_bytes(std::span(buf.data(), static_cast<std::size_t>(in.gcount()))));
  return std::to_string(h.digest());
}

// --task, checked against the model at startup so that a wrong pairing fails before serving.
kylin::server::ServerTask server_task(const std::string& name, const kylin::Engine& engine) {
  using kylin::server::ServerTask;
  if (name.empty()) return engine.can_embed() ? ServerTask::embed : ServerTask::generate;
  if (name == "embed") {
    engine.embedding_info();  // throws, naming the directory, when it is not an embedding model
    return ServerTask::embed;
  }
  if (name == "rerank") {
    if (!engine.model().has_lm_head())
      throw kylin::Error(kylin::ErrorCategory::config, "--task rerank", "the model has no lm_head; a reranker needs its logits");
    kylin::rerank_answer_ids(engine.tokenizer());  // throws when "yes" or "no" is not a token
    return ServerTask::rerank;
  }
  return ServerTask::generate;
}

int serve(const Options& o) {
  const sigset_t signals = shutdown_signals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before any thread starts: all inherit it
  signal(SIGPIPE, SIG_IGN);
  // glibc's thresholds fixed before the model loads; outlives every thread that frees request memory.
  kylin_server::MemoryReturn memory;

  const kylin::TemplateDefaults template_defaults = kylin::parse_template_defaults(o.chat_template_kwargs, o.reasoning);
  const kylin::server::CorsPolicy cors(o.cors_origins);  // both checked before the model loads
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
  if (o.mtp > 0 && !o.model_draft.empty())
    throw kylin::Error(kylin::ErrorCategory::request, "--mtp", "the MTP head drafts instead of a draft model: leave out --model-draft or --mtp");
  if (o.mtp > 0) eo.mtp = kylin::MtpHead::loaded, eo.mtp_vocab = o.mtp_vocab;
  auto engine = kylin::Engine::load(o.model, eo);
  const kylin::server::ServerTask task = server_task(o.task, *engine);
  // the draft runs as the target does (backend, threads, KV and weight formats); its cache per slot
  // is as long as the target's
  std::unique_ptr<kylin::Engine> draft;
  if (!o.model_draft.empty()) draft = kylin::Engine::load(o.model_draft, eo);
  const kylin::SpeculativeOptions speculative{.draft = draft.get(), .mtp = o.mtp > 0, .max_draft = o.mtp > 0 ? o.mtp : o.draft_max,
                                              .p_min = o.draft_p_min, .lookup = o.lookup};
  // Declared before the scheduler, so it outlives it and finishes the last queued write on exit.
  std::unique_ptr<kylin::PromptCache> prompt_cache;
  if (!o.cache_dir.empty())
    prompt_cache = std::make_unique<kylin::PromptCache>(
        *engine, kylin::PromptCacheOptions{.dir = o.cache_dir, .max_bytes = kylin::parse_byte_size(o.cache_size), .min_tokens = 16, .warn = {}});
  kylin::server::Scheduler scheduler(*engine, {.slots = o.parallel, .max_queued = o.queue, .context_length = std::nullopt,
                                               .prompt_cache = prompt_cache.get(), .speculative = speculative});
  std::string id = std::filesystem::weakly_canonical(o.model).filename().string();
  kylin::server::Service service(*engine, scheduler, id.empty() ? o.model : id,
                                 {.content_tokens = o.special_in_content ? kylin::ContentTokens::special : kylin::ContentTokens::plain,
                                  .prompt_cache = prompt_cache.get(),
                                  .task = task,
                                  .served_names = o.served_names,
                                  .build_id = build_id(),
                                  .response_store = {.max_responses = o.response_store_count,
                                                     .max_bytes = kylin::parse_byte_size(o.response_store_bytes)},
                                  .template_defaults = template_defaults,
                                  .decode_image = image_decoder(),
                                  .image_limits = {.max_images = o.max_images, .max_bytes = o.max_image_bytes}});

  kylin::server::http::Limits limits = o.limits;
  limits.max_body = o.max_body > 0 ? o.max_body : (engine->has_vision() ? std::size_t{32} : std::size_t{4}) << 20;
  limits.request_timeout = seconds(o.request_timeout);
  // A worker for every queued request (each waits for its generation) plus a few for health,
  // tokenize and refusals; incomplete requests never take one.
  limits.workers = std::max<std::size_t>(8, o.queue + static_cast<std::size_t>(o.parallel) + 4);
  kylin::server::http::Server http(limits, kylin_server::make_handler(service, {.api_key = o.api_key, .cors = cors,
                                                                                 .access_log = !o.no_access_log, .memory = &memory}),
                                   kylin_server::transport_error);
  http.bind(o.host, o.port);
  std::fprintf(stderr, "kylin-server: %s (task %s, context %lld, %d slot(s)%s) on http://%s:%d\n", service.model_id().c_str(),
               std::string(kylin::server::to_string(task)).c_str(), static_cast<long long>(scheduler.context_length()),
               scheduler.slots(), speculative.enabled() ? ", speculative decoding" : "", o.host.c_str(), o.port);

  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (sig == SIGUSR1) return;
    service.drain();
    if (!wait_for([&] { return service.in_flight() == 0; }, seconds(o.shutdown_timeout))) {
      std::fprintf(stderr, "kylin-server: shutdown timeout: ending %d request(s) with an error\n", service.in_flight());
      service.abort();
      wait_for([&] { return service.in_flight() == 0; }, Ms(2000));
    }
    http.stop(Ms(1000));  // time to write the last answers
  });
  http.run();
  pthread_kill(waiter.native_handle(), SIGUSR1);  // harmless if the waiter already returned
  waiter.join();
  // A generation can outlive the abort only inside one long prefill (no token to stop at).
  if (!http.wait_workers(Ms(2000)) || !wait_for([&] { return !scheduler.busy() && scheduler.queued() == 0; }, Ms(2000))) {
    std::fprintf(stderr, "kylin-server: a generation is still running; exiting without it\n");
    std::_Exit(0);
  }
  scheduler.shutdown();
  std::fprintf(stderr, "kylin-server: stopped\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kylin-server: OpenAI-compatible HTTP server (chat/completions, completions, embeddings, rerank, models, tokenize)"};
  app.set_version_flag("--version", [] { return kylin::version_string("kylin-server"); });
  Options o;
  app.add_option("--model", o.model, "Model directory (config.json, safetensors, tokenizer files)")->required();
  app.add_option("--host", o.host, "Address to bind (default loopback only)");
  app.add_option("--port", o.port, "TCP port")->check(CLI::Range(1, 65535));
  app.add_option("--ctx", o.ctx, "Context length per slot (default: the model's, within a 2 GiB KV budget)");
  app.add_option("-t,--threads", o.threads, "Compute threads (0: all cores)");
  app.add_option("--kv-dtype", o.kv_dtype, "KV cache element type (f16: half the memory, ~1e-3 logits error)")
      ->check(CLI::IsMember({"f32", "f16"}));
  app.add_option("--weights", o.weights, "Linear layers as stored, or quantized at load to q8 or q4 (docs/QUANTIZATION.md)")
      ->check(CLI::IsMember({"stored", "q8", "q4"}));
  app.add_option("--weight-layout", o.weight_layout, "How matmul weights are held: packed into the kernels' own layout at load, or stored (read in place from the mapped checkpoint; docs/PERFORMANCE.md)")->check(CLI::IsMember({"packed", "stored"}));
  app.add_option("--experts", o.experts, "Where an MoE model's routed experts are held: with the other weights, or mapped (read in place from the checkpoint as the router picks them: for checkpoints larger than memory; docs/PERFORMANCE.md)")->check(CLI::IsMember({"held", "mapped"}));
  app.add_option("--prefill-activations", o.prefill_activations, "What the prefill GEMM of BF16 weights multiplies: f32 activations (exact, the default) or activations rounded to BF16 (faster where the CPU has AVX512_BF16, not exact; docs/PERFORMANCE.md)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  app.add_flag("--no-mmap", o.no_mmap, "Copy the checkpoint into memory in huge pages at load instead of mapping it (with --weight-layout stored; docs/PERFORMANCE.md)");
  app.add_option("--backend", o.backend, "Where the model runs (default cpu), one of:\n" + kylin::backends().describe())
      ->check(CLI::Validator([](const std::string& name) { return kylin::backends().check(name); }, "BACKEND"));
  app.add_option("--api-key", o.api_key, "Require Authorization: Bearer <key> (all routes but /health)")->envname("KYLIN_API_KEY");
  app.add_option("--parallel", o.parallel, "Slots: generations that run at once, batched into each forward pass (each keeps its KV cache warm)")
      ->check(CLI::Range(1, 64));
  app.add_option("--queue", o.queue, "Most choices waiting beyond the running ones (a request of n choices takes n places); more get 503, a request of more than --parallel + --queue choices 400")->check(CLI::Range(std::size_t{1}, std::size_t{4096}));
  app.add_option("--max-body", o.max_body, "Largest request body in bytes; larger get 413 (default 4 MiB, 32 MiB for a model that takes images)");
  app.add_option("--max-images", o.max_images, "Most images in one request; more get 400");
  app.add_option("--max-image-bytes", o.max_image_bytes, "Largest image file in a request, in bytes (before base64); larger get 413");
  app.add_option("--image-min-pixels", o.image_min_pixels, "Images are resized to at least this many pixels (default: the model's preprocessor_config.json)");
  app.add_option("--image-max-pixels", o.image_max_pixels, "Images are resized to at most this many pixels (default: the model's preprocessor_config.json)");
  app.add_flag("--special-tokens-in-content", o.special_in_content,
               "Tokenize control-token text in messages (<|im_start|>, <tool_call>, ...) as those tokens, as transformers "
               "does; by default it stays text so clients cannot forge turns (docs/CHAT.md)");
  app.add_option("--cache-dir", o.cache_dir,
                 "Directory of stored prompt prefixes (KV cache on disk, reused across requests and restarts) and slot files");
  app.add_option("--cache-size", o.cache_size, "Most bytes of prompt prefixes in --cache-dir (8GiB, 512MiB, ...); least recently used go first");
  app.add_option("--task", o.task,
                 "generate: chat and completions; embed: /v1/embeddings (a sentence-transformers model such as Qwen3-Embedding); "
                 "rerank: /v1/rerank (a Qwen3-Reranker). Default: embed when the model directory is an embedding model, else generate")
      ->check(CLI::IsMember({"generate", "embed", "rerank"}));
  app.add_option("--model-draft", o.model_draft,
                 "Draft model directory for speculative decoding: a smaller model with the same tokenizer; requests opt out "
                 "with \"speculative\": false (docs/SPECULATIVE.md)");
  app.add_option("--draft-max", o.draft_max, "Most tokens drafted per verification pass")->check(CLI::Range(0, kylin::SpeculativeOptions::max_draft_limit));
  app.add_option("--draft-p-min", o.draft_p_min, "The draft stops proposing once its top token's probability is below this")
      ->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--mtp", o.mtp, "Speculative decoding with the checkpoint's own MTP head (Qwen3.5, Qwen3.6, Qwen3-Next): K drafts per "
                                 "pass (--mtp alone: 3); requests opt out with \"speculative\": false (docs/SPECULATIVE.md)")
      ->expected(0, 1)->default_str("3")->check(CLI::Range(1, kylin::SpeculativeOptions::max_draft_limit));
  app.add_option("--mtp-vocab", o.mtp_vocab, "With --mtp: the head drafts among the first N token ids only (the earliest BPE merges), "
                                             "its LM head reading those rows: a cheaper draft step (0: all ids)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--lookup", o.lookup, "Prompt lookup drafts: longest n-gram matched in the prompt and output (0: off)")
      ->check(CLI::Range(0, kylin::SpeculativeOptions::max_lookup));
  app.add_option("--served-model-name", o.served_names,
                 "A model id clients may send (repeatable: aliases, all listed by /v1/models; the first is the server's own). "
                 "Default: the model directory's name. Other names get 404");
  app.add_option("--response-store-count", o.response_store_count, "Most stored Responses API responses (store: true); oldest evicted first");
  app.add_option("--response-store-bytes", o.response_store_bytes, "Most bytes of stored responses and their conversations (64MiB, ...)");
  app.add_option("--cors-origin", o.cors_origins,
                 "Browser origins allowed to read answers (repeatable, or comma-separated): scheme://host[:port], * (any), or "
                 "localhost (any port of localhost, 127.0.0.1, [::1]); answered with Access-Control-Allow-Origin and preflights")
      ->delimiter(',');
  app.add_option("--chat-template-kwargs", o.chat_template_kwargs,
                 "Template kwargs for every chat request, a JSON object (e.g. '{\"enable_thinking\": false}'); a request's own "
                 "chat_template_kwargs are laid over them");
  app.add_option("--reasoning", o.reasoning,
                 "Whether the model thinks when a request does not say (reasoning_effort, chat_template_kwargs.enable_thinking, "
                 "Anthropic's thinking, reasoning.effort): on, off, or auto (each API's default)")
      ->check(CLI::IsMember({"on", "off", "auto"}));
  app.add_flag("--no-access-log", o.no_access_log, "Write no line per request on stderr");
  app.add_option("--shutdown-timeout", o.shutdown_timeout, "Seconds requests in flight get after SIGTERM before they end with 503")
      ->check(CLI::Range(0.0, 3600.0));
  auto& l = o.limits;
  app.add_option("--request-timeout", o.request_timeout, "Seconds a request's headers and body may take to arrive; then 408")
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--max-headers", l.max_headers, "Most header fields in a request; more get 431");
  app.add_option("--max-header-bytes", l.max_header_bytes, "Largest request line + headers in bytes; larger get 431");
  app.add_option("--max-connections", l.max_connections, "Most open connections; beyond, the oldest without a complete request is closed");
  CLI11_PARSE(app, argc, argv);
  try {
    return serve(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kylin-server: %s\n", e.what());
    return 1;
  }
}
