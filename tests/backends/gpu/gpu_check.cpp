// kylin-gpu-check (scripts/gpu-check.sh, KYLIN_CUDA builds): every reference checkpoint on
// --backend cuda against the float64 references, with the bars the emulated CUDA backend meets in
// tests/backends/cuda_backend_test.cpp: <= 1e-4 relative L2 with an f32 KV cache and greedy tokens
// identical, <= 2e-3 with an f16 cache, and Q8_0/Q4_0 weights within the CPU's agreement bars
// (tests/common/agreement.hpp); a KV cache in device memory saved to a file, restored and copied
// decodes on bit for bit; decode with the speed switches off equals decode with them on, bit for
// bit; greedy ids picked on the device are the logits' argmax, top-k picked there their
// kernels::top_k, and draws made there the logits' inverse CDF. Exit 0 only if all pass; needs an NVIDIA GPU. With --matvec-bench: the
// matvec's bandwidth instead (matvec_bench.hpp).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/agreement.hpp"
#include "common/draw_oracle.hpp"
#include "common/reference.hpp"
#include "backends/gpu/matvec_bench.hpp"
#include "kylin/generate/kv_file.hpp"
#include "kylin/kernels/draw_row.hpp"
#include "kylin/kernels/ops.hpp"
#include "kylin/model/model.hpp"

namespace {

// The emulated backend's bars: its f32-cache rows measured up to 5e-6 (an H200 gave 1.7e-6 to
// 2.2e-5, docs/CUDA.md); an f16 cache rounds every key and value by design (forward_test: 2e-3).
constexpr double f32_kv_bar = 1e-4, f16_kv_bar = 2e-3;
const char* const models[] = {"tiny-qwen3-untied", "small-qwen3",        "odd-qwen3-f16-sharded", "small-qwen2-f32",
                              "e2e-qwen3-fullvocab", "tiny-qwen3-yarn", "tiny-qwen3-moe",        "odd-qwen3-moe-f32-sharded"};

kylin::Model load(const std::string& name, kylin::WeightFormat weights, kylin::DType kv = kylin::DType::f32) {
  return kylin::Model::load(kylin::test::data + "/models/" + name, {.backend = "cuda", .kv_dtype = kv, .weights = weights});
}

// Stored weights: worst relative L2 over the reference rows with the cache in `kv`, and (f32)
// every case's 12 greedy tokens.
bool check_exact(const std::string& name, kylin::DType kv) {
  kylin::Model model = load(name, kylin::WeightFormat::stored, kv);
  const auto V = static_cast<std::size_t>(model.vocab_size());
  double worst = 0;
  bool greedy_ok = true;
  for (const kylin::test::Case& c : kylin::test::load_cases(name)) {
    auto cache = model.new_cache(256);
    std::vector<float> logits(c.logits.size() * V);
    model.forward(c.tokens, cache, logits, c.all_positions ? kylin::Positions::all : kylin::Positions::last);
    for (std::size_t r = 0; r < c.logits.size(); ++r) worst = kylin::test::worse(worst, kylin::test::relative_l2(logits.data() + r * V, c.logits[r]));
    if (kv == kylin::DType::f32) greedy_ok = greedy_ok && kylin::test::greedy(model, cache, logits, 12) == c.greedy;
  }
  const double bar = kv == kylin::DType::f32 ? f32_kv_bar : f16_kv_bar;
  const bool ok = worst <= bar && greedy_ok;
  std::printf("%-28s stored %s KV: worst relative L2 %.3g (bar %.0e)%s  %s\n", name.c_str(), std::string(kylin::dtype_name(kv)).c_str(), worst, bar,
              kv == kylin::DType::f32 ? (greedy_ok ? ", greedy identical" : ", greedy differs") : "", ok ? "ok" : "FAIL");
  return ok;
}

// Quantized weights: each checkpoint within the bars; the rows of all of them keep their top tokens.
bool check_quantized(kylin::WeightFormat weights, const kylin::test::AgreementBars& bars) {
  const std::string fmt(kylin::weight_format_name(weights));
  kylin::test::Agreement all;
  bool ok = true;
  for (const char* name : models) {
    kylin::Model model = load(name, weights);
    const kylin::test::Agreement a = kylin::test::quantized_agreement(model, name);
    const std::string miss = bars.check(name, a);
    std::printf("%-28s %-6s rel. L2 median %.3g worst %.3g, top-1 %d/%d, top-5 %d/%d  %s\n", name, fmt.c_str(), a.median(), a.worst(), a.top1,
                a.rows(), a.top5, a.rows(), miss.empty() ? "ok" : ("FAIL: " + miss).c_str());
    ok = ok && miss.empty();
    all.merge(a);
  }
  const std::string miss = bars.check_total(all);
  std::printf("%-28s %-6s top-1 %d/%d, top-5 %d/%d  %s\n", "(all checkpoints)", fmt.c_str(), all.top1, all.rows(), all.top5, all.rows(),
              miss.empty() ? "ok" : ("FAIL: " + miss).c_str());
  return ok && miss.empty();
}

// A device KV cache through the host (Memory::read/write over cudaMemcpy): saved to a file and
// restored into a second cache, copied into a third; each decodes the next token bit for bit as
// the original does.
bool check_kv_round_trip(const std::string& name) {
  kylin::Model model = load(name, kylin::WeightFormat::stored, kylin::DType::f16);
  const std::vector<int> prompt{5, 9, 2, 7, 11, 4, 8}, next{3};
  auto a = model.new_cache(64), restored = model.new_cache(64), copied = model.new_cache(64);
  model.logits_last(prompt, a);
  const auto path = std::filesystem::temp_directory_path() / "kylin-gpu-check.kvc";
  const kylin::KVFileMeta meta{1, a.dtype(), a.n_layers(), a.n_kv_heads(), a.head_dim()};
  kylin::write_kv_file(path, meta, a, a.size());
  kylin::KVFileReader(path, meta).load_into(restored);
  std::filesystem::remove(path);
  copied.copy_prefix(a, a.size());
  const std::vector<float> want = model.logits_last(next, a);
  const bool ok = model.logits_last(next, restored) == want && model.logits_last(next, copied) == want;
  std::printf("%-28s KV saved, restored and copied through the host: next-token logits %s  %s\n", name.c_str(),
              ok ? "identical" : "differ", ok ? "ok" : "FAIL");
  return ok;
}

// Decode logits of two sequences in one batch, 8 steps on fixed tokens (graphs replay from the
// third), with the environment variable `var` set to `value` while the model is made (empty: as it is).
std::vector<float> decode_steps(const std::string& name, const char* var, const char* value) {
  if (var) setenv(var, value, 1);
  kylin::Model model = load(name, kylin::WeightFormat::stored);
  if (var) unsetenv(var);
  auto a = model.new_cache(64), b = model.new_cache(64);
  std::vector<int> ta{1, 2, 3}, tb{7, 8};
  std::vector<float> la(static_cast<std::size_t>(model.vocab_size())), lb = la, all;
  for (int step = 0; step < 8; ++step) {
    const kylin::SequenceInput batch[] = {{ta, a, {.logits = la}}, {tb, b, {.logits = lb}}};
    model.forward(batch);
    all.insert(all.end(), la.begin(), la.end());
    all.insert(all.end(), lb.begin(), lb.end());
    ta = {3 * step + 4};
    tb = {5 * step + 2};
  }
  return all;
}

// What the speed switches change must not change a bit: decode as by default (kernels overlapping
// their predecessors, fused stores) equals decode with each switch turned. A kernel touching data
// before its predecessor finished would show here as differing bits. Norms taken into the matvecs
// apply the norm to the sums (products round before the scale): within the emulator's 4e-6.
bool check_switches(const std::string& name) {
  const std::vector<float> with = decode_steps(name, nullptr, nullptr);
  const std::vector<double> with_d(with.begin(), with.end());
  bool ok = true;
  const std::pair<const char*, const char*> turned[] = {
      {"KYLIN_CUDA_OVERLAP", "0"}, {"KYLIN_CUDA_FUSE", "0"}, {"KYLIN_CUDA_FUSE_NORM", "1"}};
  for (const auto& [var, value] : turned) {
    const std::vector<float> got = decode_steps(name, var, value);
    bool same = got == with;
    if (std::string(var) == "KYLIN_CUDA_FUSE_NORM") {
      const double l2 = got.size() == with.size() ? kylin::test::relative_l2(got.data(), with_d) : 1.0;
      same = l2 <= 4e-6;
      std::printf("%-28s decode with %s=%s: logits within %.3g relative L2  %s\n", name.c_str(), var, value, l2, same ? "ok" : "FAIL");
    } else {
      std::printf("%-28s decode with %s=%s: logits %s  %s\n", name.c_str(), var, value, same ? "identical" : "differ", same ? "ok" : "FAIL");
    }
    ok = ok && same;
  }
  return ok;
}

// Greedy ids picked on the device (ForwardOutputs::greedy): each equals kernels::argmax of the
// logits the same forward downloads, and greedy decoding on ids alone gives every case's 12 tokens.
bool check_greedy_ids(const std::string& name) {
  kylin::Model model = load(name, kylin::WeightFormat::stored);
  const auto V = static_cast<std::size_t>(model.vocab_size());
  bool ok = true;
  for (const kylin::test::Case& c : kylin::test::load_cases(name)) {
    auto cache = model.new_cache(256);
    std::vector<float> logits(V);
    int id = -1;
    model.forward(c.tokens, cache, {.logits = logits, .greedy = std::span<int>(&id, 1)});
    ok = ok && id == kylin::kernels::argmax(logits);
    std::vector<int> tokens;
    for (int i = 0; i < 12; ++i) {
      tokens.push_back(id);
      if (i < 11) model.forward(std::span<const int>(&tokens.back(), 1), cache, {.greedy = std::span<int>(&id, 1)});
    }
    ok = ok && tokens == c.greedy;
  }
  std::printf("%-28s greedy ids picked on the device: %s  %s\n", name.c_str(), ok ? "argmax of the logits, references' tokens" : "differ",
              ok ? "ok" : "FAIL");
  return ok;
}

// Top-k picked on the device (ForwardOutputs::top, k 1, 20 and 256 as the device kernels rank
// them; 300 through the host): each row's equals kernels::top_k of the logits the same forward
// downloads, cut and whole, on every case's prompt.
bool check_top_k(const std::string& name) {
  kylin::Model model = load(name, kylin::WeightFormat::stored);
  const auto V = static_cast<std::size_t>(model.vocab_size());
  bool ok = true;
  for (const kylin::test::Case& c : kylin::test::load_cases(name))
    for (std::size_t k : {1, 20, 256, 300})
      for (std::size_t end : {V, V / 2}) {
        auto cache = model.new_cache(256);
        std::vector<float> logits(V);
        std::vector<kylin::kernels::RankedLogit> top(k), expected(k);
        model.forward(c.tokens, cache, {.logits = logits, .pick_end = static_cast<std::int64_t>(end), .top = top, .top_k = static_cast<std::int64_t>(k)});
        kylin::kernels::top_k(std::span<const float>(logits).first(end), expected);
        ok = ok && top == expected;
      }
  std::printf("%-28s top-k picked on the device: %s  %s\n", name.c_str(), ok ? "kernels::top_k of the logits" : "differ", ok ? "ok" : "FAIL");
  return ok;
}

// Draws made on the device (ForwardOutputs::drawn; temperatures 0.6, 1 and 2, min-p 0 and 0.05,
// top-p 1 and 0.9, eleven uniform numbers from 0 to just below 1, cut and whole rows): each is
// where the running mass of the logits the same forward downloads passes u * total
// (test::inverse_cdf_pick), or with top-p, one of the tokens kernels::draw_row keeps from them; how
// many are also kernels::draw_row's token (host sums in another order) is printed.
bool check_draws(const std::string& name) {
  kylin::Model model = load(name, kylin::WeightFormat::stored);
  const auto V = static_cast<std::size_t>(model.vocab_size());
  bool ok = true;
  std::size_t n = 0, same = 0;
  kylin::kernels::DrawScratch scratch;
  for (const kylin::test::Case& c : kylin::test::load_cases(name))
    for (const float t : {0.6f, 1.0f, 2.0f})
      for (const float min_weight : {1e-45f, 0.05f})
        for (const float top_p : {1.0f, 0.9f})
          for (int i = 0; i <= 10; ++i)
            for (std::size_t end : {V, V / 2}) {
              auto cache = model.new_cache(256);
              std::vector<float> logits(V);
              int drawn = -7;
              const kylin::kernels::RowDraw d{.inv_temperature = 1.0f / t, .min_weight = min_weight, .u = i < 10 ? i / 10.0 : 1.0 - 0x1p-53, .top_p = top_p};
              model.forward(c.tokens, cache, {.logits = logits, .pick_end = static_cast<std::int64_t>(end), .drawn = std::span<int>(&drawn, 1),
                                              .draws = std::span<const kylin::kernels::RowDraw>(&d, 1)});
              const auto row = std::span<const float>(logits).first(end);
              const int host = kylin::kernels::draw_row(row, d, scratch);
              const bool kept = std::find(scratch.ids.begin(), scratch.ids.end(), drawn) != scratch.ids.end();
              ok = ok && (top_p < 1.0f ? kept : kylin::test::inverse_cdf_pick(row, d, drawn));
              same += drawn == host;
              ++n;
            }
  std::printf("%-28s draws made on the device: %s (%zu of %zu kernels::draw_row's token)  %s\n", name.c_str(),
              ok ? "the logits' inverse CDF (top-p: a token of their nucleus)" : "differ", same, n, ok ? "ok" : "FAIL");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--matvec-bench") return matvec_bench::run();
  try {
    bool all = true;
    for (const char* name : models)
      for (kylin::DType kv : {kylin::DType::f32, kylin::DType::f16}) all = check_exact(name, kv) && all;
    all = check_quantized(kylin::WeightFormat::q8, kylin::test::q8_bars) && all;
    all = check_quantized(kylin::WeightFormat::q4, kylin::test::q4_bars) && all;
    all = check_kv_round_trip("small-qwen3") && all;
    for (const char* name : {"small-qwen3", "tiny-qwen3-moe"}) all = check_switches(name) && all;
    for (const char* name : {"small-qwen3", "e2e-qwen3-fullvocab"}) all = check_greedy_ids(name) && all;
    for (const char* name : {"small-qwen3", "e2e-qwen3-fullvocab"}) all = check_top_k(name) && all;
    for (const char* name : {"small-qwen3", "e2e-qwen3-fullvocab"}) all = check_draws(name) && all;
    std::printf("gpu-check: %s\n", all ? "all checkpoints pass" : "FAILED");
    return all ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kylin-gpu-check: %s\n", e.what());
    return 1;
  }
}
