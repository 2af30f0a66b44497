// kylin-server: an OpenAI-compatible HTTP server for one model directory (see docs/SERVER.md).
// SIGINT/SIGTERM: new generations get 503, the ones in flight finish, then the server exits 0.
#include <CLI/CLI.hpp>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "kylin-server/routes.hpp"

namespace {

struct Options {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::int64_t ctx = 0;
  int threads = 0;
  std::string kv_dtype = "f32";
  std::string api_key;
  int parallel = 1;
  std::size_t queue = 16;
  std::size_t max_body = std::size_t{4} << 20;
};

// Signals are taken by one thread with sigwait, so no handler runs inside httplib or the model.
sigset_t shutdown_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);  // sent to ourselves when listen() ends on its own
  return set;
}

int serve(const Options& o) {
  const sigset_t signals = shutdown_signals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before any thread starts: all inherit it
  signal(SIGPIPE, SIG_IGN);

  kylin::EngineOptions eo;
  eo.threads = o.threads;
  eo.kv_dtype = kylin::parse_kv_dtype(o.kv_dtype);
  if (o.ctx > 0) eo.context_length = o.ctx;
  auto engine = kylin::Engine::load(o.model, eo);
  kylin::server::Scheduler scheduler(*engine, {.slots = o.parallel, .max_queued = o.queue, .context_length = std::nullopt});
  std::string id = std::filesystem::weakly_canonical(o.model).filename().string();
  kylin::server::Service service(*engine, scheduler, id.empty() ? o.model : id);

  httplib::Server http;
  // Enough HTTP threads for every queued request plus a few for health, tokenize and refusals.
  const std::size_t http_threads = std::max<std::size_t>(8, o.queue + static_cast<std::size_t>(o.parallel) + 4);
  http.new_task_queue = [http_threads] { return new httplib::ThreadPool(http_threads); };
  kylin_server::install_routes(http, service, {.api_key = o.api_key, .max_body = o.max_body});
  if (!http.bind_to_port(o.host, o.port)) {
    std::fprintf(stderr, "kylin-server: cannot listen on %s:%d\n", o.host.c_str(), o.port);
    return 1;
  }
  std::fprintf(stderr, "kylin-server: %s (context %lld, %d slot(s)) on http://%s:%d\n", service.model_id().c_str(),
               static_cast<long long>(scheduler.context_length()), scheduler.slots(), o.host.c_str(), o.port);

  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    service.drain();
    while (service.in_flight() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    http.stop();
  });
  http.listen_after_bind();
  pthread_kill(waiter.native_handle(), SIGUSR1);  // harmless if the waiter already returned
  waiter.join();
  scheduler.shutdown();
  std::fprintf(stderr, "kylin-server: stopped\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kylin-server: OpenAI-compatible HTTP server (chat/completions, completions, models, tokenize)"};
  Options o;
  app.add_option("--model", o.model, "Model directory (config.json, safetensors, tokenizer files)")->required();
  app.add_option("--host", o.host, "Address to bind (default loopback only)");
  app.add_option("--port", o.port, "TCP port")->check(CLI::Range(1, 65535));
  app.add_option("--ctx", o.ctx, "Context length per slot (default: the model's, within a 2 GiB KV budget)");
  app.add_option("-t,--threads", o.threads, "Compute threads (0: all cores)");
  app.add_option("--kv-dtype", o.kv_dtype, "KV cache element type (f16: half the memory, ~1e-3 logits error)")
      ->check(CLI::IsMember({"f32", "f16"}));
  app.add_option("--api-key", o.api_key, "Require Authorization: Bearer <key> (all routes but /health)")->envname("KYLIN_API_KEY");
  app.add_option("--parallel", o.parallel, "KV-cache slots (conversations kept warm; the model runs one at a time)")
      ->check(CLI::Range(1, 64));
  app.add_option("--queue", o.queue, "Most requests waiting; more get 503")->check(CLI::Range(std::size_t{1}, std::size_t{4096}));
  app.add_option("--max-body", o.max_body, "Largest request body in bytes; larger get 413");
  CLI11_PARSE(app, argc, argv);
  try {
    return serve(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kylin-server: %s\n", e.what());
    return 1;
  }
}
