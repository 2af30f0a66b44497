// `kylin bench`: llama-bench-style throughput of one checkpoint: prefill (pp) and decode (tg)
// tokens/s, each the median of repetitions, against the machine's measured limits: decode reads
// every weight once per token, the KV of its depth and (hybrid models) reads and writes the
// recurrent state (roofline: read bandwidth / bytes per token), prefill is judged against the f32
// FMA peak. With --draft, --mtp or --lookup, speculative decoding too (bench_speculative.hpp).
#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kylin/bench_image.hpp"
#include "kylin/bench_speculative.hpp"
#include "kylin/cli.hpp"
#include "kylin/speculative_flags.hpp"
#include "kylin/core/json.hpp"
#include "kylin/core/thread_pool.hpp"
#include "kylin/generate/sampler.hpp"
#include "kylin/model/model.hpp"

namespace cmd_bench {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// CPU seconds (user + system, all threads) used by the process so far: on a busy machine,
// tokens per CPU-second shows the kernels' own speed when wall-clock rates are depressed.
double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return sec(ru.ru_utime) + sec(ru.ru_stime);
}

double load_average() {
  double avg[1] = {0};
  return getloadavg(avg, 1) == 1 ? avg[0] : -1.0;
}

// Starts a new peak-RSS (VmHWM) window, so the bandwidth buffer freed before the model loads does
// not count as the model's peak (Linux: "5" to /proc/self/clear_refs; a no-op where unsupported).
void reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
}

double peak_rss_mb() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

// Weight bytes one decode step reads, in the form the forward reads them (kylin::held_bytes: quantized,
// packed or as stored): every matrix and norm of the bound weights except the embedding table, which is
// read one row at a time (a tied table is counted as the LM head). Of an MoE layer's experts a token reads k
// of num_experts (its router's choice), so expert matrices count k / num_experts. Tensors the forward never
// reads (a Qwen3.5 checkpoint's vision tower and MTP head) do not count.
double weight_bytes_per_token(const kylin::Model& m) {
  kylin::ModelWeights w = m.weights();
  const auto& moe = m.config().moe;
  const double expert_share = moe ? static_cast<double>(moe->num_experts_per_tok) / static_cast<double>(moe->num_experts) : 1.0;
  double total = static_cast<double>(kylin::held_bytes(w.lm_head) + kylin::held_bytes(w.norm));
  for (kylin::LayerWeights& L : w.layers) {
    double experts = 0, all = 0;
    for (const kylin::ExpertWeights& x : L.experts) experts += static_cast<double>(kylin::held_bytes(x.gate_proj) + kylin::held_bytes(x.up_proj) + kylin::held_bytes(x.down_proj));
    L.each_matrix([&](kylin::MatRef& x) { all += static_cast<double>(kylin::held_bytes(x)); });
    L.each_norm([&](kylin::MatRef& x) { all += static_cast<double>(kylin::held_bytes(x)); });
    total += all - experts + expert_share * experts;
  }
  return total;
}

// Recurrent-state bytes one decode step moves: each linear layer's state read and written once.
double state_bytes_per_token(const kylin::Model& m) { return 2.0 * static_cast<double>(kylin::KVCache::state_bytes(m.config())); }

// FLOPs of one n-token prefill from an empty cache: 2 per weight of every matrix the forward reads per token
// (an MoE layer's experts at k / num_experts, as above; embedding rows are looked up), the LM head once (the
// last token's logits), attention's QK^T and PV over the causal context in the attention layers, and in the
// Gated DeltaNet layers the delta rule's minimum, four dk x dv products per value head and token (the
// chunked form computes more), and the conv's taps.
double prefill_flops(const kylin::Model& m, std::int64_t n) {
  const auto& c = m.config();
  const auto& moe = c.moe;
  const double expert_share = moe ? static_cast<double>(moe->num_experts_per_tok) / static_cast<double>(moe->num_experts) : 1.0;
  kylin::ModelWeights w = m.weights();
  double per_token = 0;
  for (kylin::LayerWeights& L : w.layers) {
    double experts = 0, all = 0;
    for (const kylin::ExpertWeights& x : L.experts)
      for (const kylin::MatRef* mat : {&x.gate_proj, &x.up_proj, &x.down_proj}) experts += 2.0 * static_cast<double>(mat->rows * mat->cols);
    L.each_matrix([&](kylin::MatRef& x) { all += 2.0 * static_cast<double>(x.rows * x.cols); });
    per_token += all - experts + expert_share * experts;
  }
  if (c.linear) {
    const auto& g = *c.linear;
    per_token += static_cast<double>(c.linear_layers()) *
                 (8.0 * static_cast<double>(g.linear_num_value_heads * g.linear_key_head_dim * g.linear_value_head_dim) +
                  2.0 * static_cast<double>(g.linear_conv_kernel_dim * g.conv_dim()));
  }
  const double lm_head = 2.0 * static_cast<double>(m.vocab_size()) * static_cast<double>(m.hidden_size());
  const double keys = static_cast<double>(n) * static_cast<double>(n + 1) / 2.0;
  const double attention = 4.0 * static_cast<double>(c.attention_layers() * c.num_attention_heads * c.head_dim) * keys;
  return per_token * static_cast<double>(n) + lm_head + attention;
}

// Bandwidth samples allocate 512 MB each: the peak RSS reported is the highest VmHWM seen just
// before a sample and at the end, with a fresh VmHWM window after every sample.
struct BandwidthSampler {
  int threads;
  double peak_rss = 0;
  double sample() {
    peak_rss = std::max(peak_rss, peak_rss_mb());
    const double gb_s = kylin::cpu_kernels().read_bandwidth_gbs(threads);
    reset_peak_rss();
    return gb_s;
  }
  double final_peak_rss() { return std::max(peak_rss, peak_rss_mb()); }
};

// How a decode test takes each token: the forward's greedy id, as a greedy generation takes it
// (picked where the logits are: a GPU sends back one int, not the row); with `logits`, the row
// downloaded and its argmax picked on the host (what llama-bench times); with `top_k`, the row's
// top-k picked where the logits are and a token drawn from those on the host, as top-k sampling
// (Qwen3's generation_config: temperature 0.6, top_k 20, top_p 0.95) takes it; with `draw`, a
// token drawn from the whole row at temperature 0.6 where the logits are (ForwardOutputs::drawn),
// under `--top-p` from its nucleus.
struct TokenPick {
  std::span<float> logits = {};                    // [vocab] or empty
  std::vector<kylin::kernels::RankedLogit> top_k;  // [k] or empty
  bool draw = false;
  std::optional<kylin::Sampler> sampler;           // with top_k or draw

  int next(kylin::Model& model, kylin::KVCache& cache, int tok) {
    const std::span<const int> in(&tok, 1);
    int id = 0;
    if (!logits.empty()) {
      model.forward(in, cache, logits);
      id = kylin::kernels::argmax(logits);
    } else if (!top_k.empty()) {
      model.forward(in, cache, {.top = top_k, .top_k = static_cast<std::int64_t>(top_k.size())});
      id = sampler->draw(sampler->candidates_from_top(top_k, static_cast<std::size_t>(model.vocab_size())));
    } else if (draw) {
      const kylin::kernels::RowDraw d = sampler->row_draw();
      model.forward(in, cache, {.drawn = std::span<int>(&id, 1), .draws = std::span<const kylin::kernels::RowDraw>(&d, 1)});
      sampler->uniform();  // the draw's number
    } else {
      model.forward(in, cache, {.greedy = std::span<int>(&id, 1)});
    }
    return std::max(id, 0);  // -1: no logit above -inf (never with finite weights)
  }
};

// One decode test: `gen` tokens from `cache` truncated to `depth`, each taken as `pick` says, in
// tok/s; adds the CPU seconds it used to `cpu`.
double decode_once(kylin::Model& model, kylin::KVCache& cache, TokenPick& pick, int gen, std::int64_t depth,
                   std::mt19937& rng, double& cpu) {
  std::uniform_int_distribution<int> id(0, static_cast<int>(model.vocab_size()) - 1);
  cache.truncate(depth);
  int tok = id(rng);
  const auto t0 = Clock::now();
  const double c0 = cpu_seconds();
  for (int i = 0; i < gen; ++i) tok = pick.next(model, cache, tok);
  const double tok_s = gen / seconds_since(t0);
  cpu += cpu_seconds() - c0;
  return tok_s;
}

// One batched decode test: B sequences from depth 0, `gen` greedy steps of one batched forward
// each; aggregate tok/s over all B sequences.
double decode_batch_once(kylin::Model& model, std::vector<kylin::KVCache>& caches, int gen, std::mt19937& rng) {
  const std::size_t B = caches.size();
  std::uniform_int_distribution<int> id(0, static_cast<int>(model.vocab_size()) - 1);
  std::vector<int> tok(B), next(B);
  std::vector<kylin::SequenceInput> inputs;
  for (std::size_t i = 0; i < B; ++i) {
    caches[i].reset();
    tok[i] = id(rng);
    inputs.push_back({std::span<const int>(&tok[i], 1), caches[i], {.greedy = std::span<int>(&next[i], 1)}});
  }
  const auto t0 = Clock::now();
  for (int step = 0; step < gen; ++step) {
    model.forward(inputs);
    for (std::size_t i = 0; i < B; ++i) tok[i] = std::max(next[i], 0);
  }
  return static_cast<double>(B) * gen / seconds_since(t0);
}

// Decode repetitions, each paired with a bandwidth sample taken just before it: the bandwidth of
// a shared VM drifts by tens of percent within a minute, so a decode run is judged against the
// bandwidth of its own moment. fraction[r] = tg[r] * bytes_per_token / bandwidth[r]. With a
// short-context cache, each repetition also decodes from depth 0 right after, so the long-context
// slowdown is tg[r] / tg_short[r] of the same moment rather than a ratio of two separate runs.
struct DecodeRuns {
  std::vector<double> tg, bandwidth, fraction, tg_short, depth_ratio, tg_batch, batch_speedup;
  double cpu = 0;
};

// With --batch, each repetition also decodes B sequences together right after, so the batch
// speed-up is a ratio within one moment as well.
DecodeRuns decode_runs(kylin::Model& model, kylin::KVCache& cache, kylin::KVCache* short_cache, TokenPick& pick,
                       std::vector<kylin::KVCache>& batch_caches, int reps, int gen, std::int64_t depth, double bytes_per_token,
                       BandwidthSampler& sampler, std::mt19937& rng) {
  DecodeRuns runs;
  for (int r = 0; r < reps && gen > 0; ++r) {
    const double gb_s = sampler.sample();
    runs.tg.push_back(decode_once(model, cache, pick, gen, depth, rng, runs.cpu));
    runs.bandwidth.push_back(gb_s);
    runs.fraction.push_back(runs.tg.back() * bytes_per_token / (gb_s * 1e9));
    if (!batch_caches.empty()) {
      runs.tg_batch.push_back(decode_batch_once(model, batch_caches, gen, rng));
      runs.batch_speedup.push_back(runs.tg_batch.back() / runs.tg.back());
    }
    if (short_cache == nullptr) continue;
    double short_cpu = 0;
    runs.tg_short.push_back(decode_once(model, *short_cache, pick, gen, 0, rng, short_cpu));
    runs.depth_ratio.push_back(runs.tg.back() / runs.tg_short.back());
  }
  return runs;
}

struct Options {
  std::string model;
  int prompt = 512;
  int gen = 128;
  int threads = 0;
  int reps = 3;
  std::int64_t depth = 0;
  std::int64_t ctx = 0;
  int batch = 0;
  std::string kv_dtype = "f32";
  std::string weights = "stored";
  std::string weight_layout = "packed";
  std::string experts = "held";
  std::string prefill_activations = "f32";
  std::string backend = "cpu";
  std::string format = "text";
  bool no_mmap = false;
  bool download_logits = false;
  int top_k = 0;  // > 0: decode by top-k sampling (TokenPick)
  bool draw = false;  // decode by drawing from the whole row (TokenPick)
  float top_p = 1.0f;  // with draw: from the row's nucleus
  std::string image;   // WxH: also time the vision tower on an image of that size (bench_image.hpp)
  // random weights: a draft's confidence is low, so the bench drafts regardless (p_min 0)
  kylin::cli::SpeculativeFlags speculative{.draft = {}, .draft_max = 4, .p_min = 0.0f, .lookup = 0};
};

int run(const Options& o) {
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  BandwidthSampler sampler{threads};
  const double bandwidth_idle = sampler.sample();  // used when there is no decode test
  const double compute_gflops = kylin::cpu_kernels().fma_peak_gflops(threads);
  // prefill on BF16 activations multiplies with vdpbf16ps: judged against that instruction's peak too
  const double bf16_gflops = o.prefill_activations == "bf16" ? kylin::cpu_kernels().bf16_dot_peak_gflops(threads) : 0.0;
  const auto t_load = Clock::now();
  kylin::ModelOptions options;
  options.backend = o.backend;
  options.threads = threads;
  options.kv_dtype = kylin::parse_kv_dtype(o.kv_dtype);
  options.weights = *kylin::parse_weight_format(o.weights);
  options.weight_layout = *kylin::parse_weight_layout(o.weight_layout);
  options.checkpoint_memory = o.no_mmap ? kylin::io::FileMemory::copied : kylin::io::FileMemory::mapped;
  options.experts = *kylin::parse_expert_memory(o.experts);
  options.prefill_activations = *kylin::kernels::parse_prefill_activations(o.prefill_activations);
  // speculative decoding runs through an Engine (tokenizer files needed); the plain tests use its model
  std::unique_ptr<kylin::Engine> engine, draft;
  std::optional<kylin::Model> own;
  if (o.speculative.any()) {
    kylin::EngineOptions eo{.backend = options.backend, .threads = threads, .max_pass_rows = options.max_pass_rows, .context_length = std::nullopt,
                            .kv_dtype = options.kv_dtype, .weights = options.weights, .weight_layout = options.weight_layout,
                            .checkpoint_memory = options.checkpoint_memory, .prefill_activations = options.prefill_activations,
                            .experts = options.experts};
    o.speculative.apply(eo);
    engine = kylin::Engine::load(o.model, eo);
    draft = o.speculative.load_draft(*engine, eo);
  } else {
    own.emplace(kylin::Model::load(o.model, options));
  }
  kylin::Model& model = engine ? engine->model() : *own;
  const std::int64_t ctx = o.ctx > 0 ? o.ctx : std::max<std::int64_t>(o.prompt, o.depth + o.gen) + 16;
  auto cache = model.new_cache(ctx);
  std::vector<float> logits(static_cast<std::size_t>(model.vocab_size()));
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> id(0, static_cast<int>(model.vocab_size()) - 1);
  const int first = id(rng);
  model.forward(std::span<const int>(&first, 1), cache, logits);
  const double first_token_ms = seconds_since(t_load) * 1e3;
  std::optional<kylin::cli::ImageBenchResult> image;
  if (!o.image.empty()) image = kylin::cli::image_bench(model, o.image, o.reps);

  std::vector<double> pp;
  double pp_cpu = 0;
  std::vector<int> prompt(static_cast<std::size_t>(o.prompt));
  for (int r = 0; r < o.reps && o.prompt > 0; ++r) {
    for (int& t : prompt) t = id(rng);
    cache.reset();
    const auto t0 = Clock::now();
    const double c0 = cpu_seconds();
    model.forward(prompt, cache, logits);
    pp.push_back(o.prompt / seconds_since(t0));
    pp_cpu += cpu_seconds() - c0;
  }
  // fill the cache to `depth` once (untimed), then decode from there each repetition
  cache.reset();
  std::vector<int> fill(static_cast<std::size_t>(o.depth));
  for (int& t : fill) t = id(rng);
  if (!fill.empty()) model.forward(fill, cache, logits);
  cache.keep_state();  // each repetition restarts from depth: a hybrid model's state there is kept
  const double kv_bytes = static_cast<double>(cache.bytes_per_token()) * (static_cast<double>(o.depth) + o.gen / 2.0);
  const double state_bytes = state_bytes_per_token(model);
  const double bytes_per_token = weight_bytes_per_token(model) + kv_bytes + state_bytes;
  // the short-context reference of a --depth run: its own small cache, so the filled one stays
  std::optional<kylin::KVCache> short_cache;
  if (o.depth > 0 && o.gen > 0) short_cache.emplace(model.new_cache(o.gen + 16));
  std::vector<kylin::KVCache> batch_caches;
  for (int i = 0; i < o.batch; ++i) batch_caches.push_back(model.new_cache(o.gen + 16));
  TokenPick pick{.logits = o.download_logits ? std::span<float>(logits) : std::span<float>{}, .top_k = {}, .draw = o.draw, .sampler = {}};
  if (o.top_k > 0) {
    pick.top_k.resize(static_cast<std::size_t>(o.top_k));
    pick.sampler.emplace(static_cast<std::size_t>(model.vocab_size()),
                         kylin::SamplingParams{.temperature = 0.6f, .top_k = o.top_k, .top_p = 0.95f, .seed = 1});
  }
  if (o.draw) pick.sampler.emplace(static_cast<std::size_t>(model.vocab_size()), kylin::SamplingParams{.temperature = 0.6f, .top_p = o.top_p, .seed = 1});
  const DecodeRuns dec = decode_runs(model, cache, short_cache ? &*short_cache : nullptr, pick, batch_caches, o.reps, o.gen,
                                     o.depth, bytes_per_token, sampler, rng);
  const double peak_rss = sampler.final_peak_rss();
  const double bandwidth = dec.bandwidth.empty() ? bandwidth_idle : median(dec.bandwidth);
  const double tg_tok_s = median(dec.tg), pp_tok_s = median(pp);
  const double roofline = bandwidth * 1e9 / bytes_per_token;
  const double fraction = median(dec.fraction);
  const double pp_gflops = o.prompt > 0 ? prefill_flops(model, o.prompt) / o.prompt * pp_tok_s / 1e9 : 0.0;
  // The probes measure the host: a device backend's speed has no roofline here (null).
  const bool on_host = model.backend_name() == "cpu";
  auto host_only = [&](double v) { return on_host ? kylin::json::Value(v) : kylin::json::Value(); };
  kylin::json::Object out{{"model", kylin::json::Value(o.model)},
                          {"backend", kylin::json::Value(std::string(model.backend_name()))},
                          {"arch", kylin::json::Value(std::string(kylin::cpu_kernels().simd))},
                          {"cpu_kernels", kylin::json::Value(std::string(kylin::cpu_kernels().name))},
                          {"threads", kylin::json::Value(threads)},
                          {"kv_dtype", kylin::json::Value(o.kv_dtype)},
                          {"weights", kylin::json::Value(o.weights)},
                          {"weight_layout", kylin::json::Value(std::string(kylin::weight_layout_name(model.weight_layout())))},
                          {"checkpoint", kylin::json::Value(o.no_mmap ? "copied" : "mapped")},
                          {"experts", kylin::json::Value(std::string(kylin::expert_memory_name(model.expert_memory())))},
                          {"prefill_activations", kylin::json::Value(o.prefill_activations)},
                          {"n_prompt", kylin::json::Value(o.prompt)},
                          {"n_gen", kylin::json::Value(o.gen)},
                          {"depth", kylin::json::Value(o.depth)},
                          {"tg_output", kylin::json::Value(o.download_logits ? "logits" : o.top_k > 0 ? "top_k" : o.draw ? (o.top_p < 1.0f ? "draw_top_p" : "draw") : "greedy_ids")},
                          {"pp_tok_s", kylin::json::Value(pp_tok_s)},
                          {"tg_tok_s", kylin::json::Value(tg_tok_s)},
                          {"pp_tok_per_cpu_s", kylin::json::Value(pp_cpu > 0 ? o.prompt * static_cast<double>(pp.size()) / pp_cpu : 0.0)},
                          {"tg_tok_per_cpu_s", kylin::json::Value(dec.cpu > 0 ? o.gen * static_cast<double>(dec.tg.size()) / dec.cpu : 0.0)},
                          {"load_average_1m", kylin::json::Value(load_average())},
                          {"bandwidth_gb_s", kylin::json::Value(bandwidth)},
                          {"bytes_per_token", kylin::json::Value(bytes_per_token)},
                          {"kv_bytes_per_token", kylin::json::Value(kv_bytes)},
                          {"state_bytes_per_token", kylin::json::Value(state_bytes)},
                          {"kv_bytes_per_position", kylin::json::Value(static_cast<double>(cache.bytes_per_token()))},
                          {"state_bytes_per_sequence", kylin::json::Value(static_cast<double>(kylin::KVCache::state_bytes(model.config())))},
                          {"tg_roofline_tok_s", kylin::json::Value(roofline)},
                          {"tg_roofline_fraction", host_only(fraction)},
                          {"compute_gflops", kylin::json::Value(compute_gflops)},
                          {"pp_gflops", kylin::json::Value(pp_gflops)},
                          {"pp_compute_fraction", host_only(pp_gflops / compute_gflops)},
                          {"peak_rss_mb", kylin::json::Value(peak_rss)},
                          {"checkpoint_mb", kylin::json::Value(static_cast<double>(model.checkpoint().total_bytes()) / 1048576.0)},
                          {"kv_cache_mb", kylin::json::Value(static_cast<double>(cache.bytes()) / 1048576.0)},
                          {"load_ms", kylin::json::Value(model.load_seconds() * 1e3)},
                          {"first_token_ms", kylin::json::Value(first_token_ms)}};
  if (bf16_gflops > 0) {
    out.emplace_back("compute_bf16_gflops", kylin::json::Value(bf16_gflops));
    out.emplace_back("pp_bf16_compute_fraction", host_only(pp_gflops / bf16_gflops));
  }
  if (!dec.depth_ratio.empty()) {
    out.emplace_back("tg_short_tok_s", kylin::json::Value(median(dec.tg_short)));
    out.emplace_back("tg_depth_ratio", kylin::json::Value(median(dec.depth_ratio)));
  }
  if (!dec.tg_batch.empty()) {
    out.emplace_back("tg_batch", kylin::json::Value(o.batch));
    out.emplace_back("tg_batch_tok_s", kylin::json::Value(median(dec.tg_batch)));
    out.emplace_back("tg_batch_speedup", kylin::json::Value(median(dec.batch_speedup)));
  }
  const kylin::cli::SpeculativeBenchOptions spec{.speculative = engine ? o.speculative.options(*engine, draft.get()) : kylin::SpeculativeOptions{},
                                                  .prompt = 64, .gen = o.gen, .reps = o.reps, .max_k = 8};
  if (image) out.emplace_back("image", kylin::cli::image_bench_json(*image, compute_gflops));
  if (o.format == "json") {
    if (engine) out.emplace_back("speculative", kylin::json::Value(kylin::cli::speculative_bench(*engine, spec, false)));
    std::printf("%s\n", kylin::json::dump(kylin::json::Value(std::move(out))).c_str());
    return 0;
  }
  std::printf("model %s  cpu kernels %s  threads %d  kv %s  weights %s  layout %s  checkpoint %s  experts %s  prefill activations %s\n",
              o.model.c_str(), kylin::describe(kylin::cpu_kernels()).c_str(), threads, o.kv_dtype.c_str(), o.weights.c_str(),
              std::string(kylin::weight_layout_name(model.weight_layout())).c_str(), o.no_mmap ? "copied" : "mapped",
              std::string(kylin::expert_memory_name(model.expert_memory())).c_str(), o.prefill_activations.c_str());
  std::printf("pp%-5d %8.2f tok/s  (%.2f tok per CPU-second; 1-min load average %.2f)\n", o.prompt, pp_tok_s,
              pp_cpu > 0 ? o.prompt * static_cast<double>(pp.size()) / pp_cpu : 0.0, load_average());
  std::printf("pp%-5d %8.1f GFLOP/s = %.1f%% of the f32 FMA peak (%.1f GFLOP/s)\n", o.prompt, pp_gflops,
              100.0 * pp_gflops / compute_gflops, compute_gflops);
  if (bf16_gflops > 0)
    std::printf("pp%-5d %8.1f GFLOP/s = %.1f%% of the vdpbf16ps peak (%.1f GFLOP/s; BF16 activations)\n", o.prompt, pp_gflops,
                100.0 * pp_gflops / bf16_gflops, bf16_gflops);
  std::printf("tg%-5d %8.2f tok/s at depth %lld  (roofline %.2f tok/s = %.1f GB/s / %.1f MB per token: %.1f%%)\n", o.gen,
              tg_tok_s, static_cast<long long>(o.depth), roofline, bandwidth, bytes_per_token / 1e6, 100.0 * fraction);
  if (!dec.depth_ratio.empty())
    std::printf("tg%-5d %8.2f tok/s at depth 0 in the same repetitions: depth %lld runs at %.2f of it\n", o.gen,
                median(dec.tg_short), static_cast<long long>(o.depth), median(dec.depth_ratio));
  if (!dec.tg_batch.empty())
    std::printf("tg%-5d %8.2f tok/s summed over %d sequences decoding together: %.2fx one sequence in the same repetitions\n",
                o.gen, median(dec.tg_batch), o.batch, median(dec.batch_speedup));
  std::printf("KV cache %.1f KB per position; recurrent state %.1f MB per sequence (%.1f MB read and written per token)\n",
              static_cast<double>(cache.bytes_per_token()) / 1e3, static_cast<double>(kylin::KVCache::state_bytes(model.config())) / 1e6,
              state_bytes / 1e6);
  std::printf("load %.0f ms, first token %.0f ms, peak RSS %.0f MB (checkpoint %.0f MB + KV cache %.0f MB)\n",
              model.load_seconds() * 1e3, first_token_ms, peak_rss,
              static_cast<double>(model.checkpoint().total_bytes()) / 1048576.0, static_cast<double>(cache.bytes()) / 1048576.0);
  if (image) kylin::cli::print_image_bench(*image, compute_gflops);
  if (engine) kylin::cli::speculative_bench(*engine, spec, true);
  return 0;
}

const kylin::cli::Registrar registrar{"bench", [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("bench", "Prefill/decode throughput against the memory-bandwidth roofline");
  cmd->add_option("--model", o->model, "Model directory")->required();
  cmd->add_option("-p,--prompt", o->prompt, "Prompt tokens for the prefill test (0: skip)");
  cmd->add_option("-n,--gen", o->gen, "Tokens decoded in the decode test (0: skip)");
  cmd->add_option("-t,--threads", o->threads, "Threads (0: all cores)");
  cmd->add_option("-r,--reps", o->reps, "Repetitions; the median is reported")->check(CLI::PositiveNumber);
  cmd->add_option("-d,--depth", o->depth, "Cached tokens before the decode test starts");
  cmd->add_option("--ctx", o->ctx, "KV cache capacity (default: what the tests need)");
  cmd->add_option("--kv-dtype", o->kv_dtype, "KV cache element type")->check(CLI::IsMember({"f32", "f16"}));
  cmd->add_option("--weights", o->weights, "Linear layers as stored, or quantized at load to q8 or q4")->check(CLI::IsMember({"stored", "q8", "q4"}));
  cmd->add_option("--weight-layout", o->weight_layout, "How matmul weights are held: packed into the kernels' own layout at load, or stored (read in place from the mapped checkpoint; docs/PERFORMANCE.md)")->check(CLI::IsMember({"packed", "stored"}));
  cmd->add_option("--experts", o->experts, "Where an MoE model's routed experts are held: with the other weights, or mapped (read in place from the checkpoint as the router picks them: for checkpoints larger than memory; docs/PERFORMANCE.md)")->check(CLI::IsMember({"held", "mapped"}));
  kylin::cli::add_prefill_activations_option(cmd, o->prefill_activations);
  cmd->add_flag("--no-mmap", o->no_mmap, "Copy the checkpoint into memory in huge pages at load instead of mapping it (with --weight-layout stored; docs/PERFORMANCE.md)");
  kylin::cli::add_backend_option(cmd, o->backend);
  cmd->add_flag("--download-logits", o->download_logits, "Decode test: download each step's logits and pick the token on the host (what llama-bench times) instead of taking the forward's greedy id");
  cmd->add_option("--top-k", o->top_k, "Decode test: draw each token by top-k sampling (temperature 0.6, top_p 0.95) from the row's K best, picked where the logits are, instead of taking the forward's greedy id")
      ->check(CLI::Range(2, 256))
      ->excludes(cmd->get_option("--download-logits"));
  cmd->add_flag("--draw", o->draw, "Decode test: draw each token from the whole row at temperature 0.6, where the logits are, instead of taking the forward's greedy id")
      ->excludes(cmd->get_option("--download-logits"))
      ->excludes(cmd->get_option("--top-k"));
  cmd->add_option("--top-p", o->top_p, "Decode test with --draw: draw from the row's top-p nucleus (as a request sending top_p without top_k)")
      ->check(CLI::Range(0.01f, 1.0f))
      ->needs(cmd->get_option("--draw"));
  cmd->add_option("-b,--batch", o->batch, "Also decode this many sequences together (aggregate tok/s)")->check(CLI::Range(0, 256));
  cmd->add_option("--image", o->image, "Also time the vision tower on one WIDTHxHEIGHT image (e.g. 448x448): encode time and GFLOP/s against the FMA peak");
  cmd->add_option("--format", o->format, "Output format")->check(CLI::IsMember({"text", "json"}));
  o->speculative.add_to(cmd);  // --draft (may be --model itself), --mtp, --draft-max, --draft-p-min, --lookup
  cmd->callback([o] { kylin::cli::exit_code() = run(*o); });
}};

}  // namespace cmd_bench
