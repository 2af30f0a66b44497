// `kylin logits` and `kylin generate --tokens` as processes, against the reference data.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <map>
#include <string>

#include "common/process.hpp"
#include "kylin/model/descriptors.hpp"
#include "common/reference.hpp"
#include "common/temp_dir.hpp"
#include "common/temp_model.hpp"
#include "kylin/core/json.hpp"
#include "kylin/io/checkpoint.hpp"
#include "kylin/model/model.hpp"

namespace cli_test {

const std::string data = KYLIN_TEST_DATA;
using kylin::test::kylin_bin;

using Run = kylin::test::ProcessResult;

// stdout and stderr together.
Run run(const std::string& command) { return kylin::test::run_shell(command + " 2>&1"); }

std::string join(const kylin::json::Array& ids) {
  std::string s;
  for (const auto& id : ids) {
    if (!s.empty()) s += ',';
    s += std::to_string(id.as_int());
  }
  return s;
}

const kylin::json::Value& reference_case(const std::string& model, std::size_t i) {
  static std::map<std::string, kylin::json::Value> cache;
  auto& v = cache[model];
  if (v.is_null()) v = kylin::json::parse(kylin::io::read_text_file(data + "/reference/" + model + ".json"));
  return v.find("cases")->as_array()[i];
}


TEST_CASE("kylin logits --positions all prints every position's logits within the exactness bar") {
  for (const char* model : {"tiny-qwen3-untied", "small-qwen2-f32"}) {
    CAPTURE(model);
    const auto& c = reference_case(model, 1);
    const Run r = run(kylin_bin + " logits --model " + data + "/models/" + model + " --tokens " +
                      join(c.find("tokens")->as_array()) + " --positions all --format json");
    REQUIRE(r.exit_code == 0);
    const auto out = kylin::json::parse(r.out);
    const auto& rows = out.find("logits")->as_array();
    const auto& ref = c.find("logits")->as_array();
    REQUIRE(rows.size() == ref.size());
    for (std::size_t p = 0; p < rows.size(); ++p) {
      double num = 0, den = 0;
      for (std::size_t i = 0; i < ref[p].size(); ++i) {
        const double d = rows[p].as_array()[i].as_double() - ref[p].as_array()[i].as_double();
        num += d * d;
        den += std::pow(ref[p].as_array()[i].as_double(), 2);
      }
      CHECK(std::sqrt(num / den) <= 1e-5);  // the f32 exactness bar of forward_test.cpp
    }
    const Run last = run(kylin_bin + " logits --model " + data + "/models/" + model + " --tokens 1,2,3 --positions last");
    CHECK(kylin::json::parse(last.out).find("logits")->size() == 1);
  }
}

TEST_CASE("kylin logits --weights q8|q4 prints the logits of the weights quantized at load: Model::load's with that format, bit for bit, each moved from the reference") {
  const std::string model = "tiny-qwen3-moe";  // attention, a dense MLP, experts and the tied LM head quantized
  const auto cases = kylin::test::load_cases(model);
  const kylin::test::Case& c = cases[1];  // 9 tokens, every position
  const std::string tokens = join(reference_case(model, 1).find("tokens")->as_array());
  for (kylin::WeightFormat format : {kylin::WeightFormat::q8, kylin::WeightFormat::q4}) {
    const std::string name(kylin::weight_format_name(format));
    CAPTURE(name);
    const Run r = run(kylin_bin + " logits --model " + data + "/models/" + model + " --tokens " + tokens + " --positions all --weights " + name);
    REQUIRE(r.exit_code == 0);
    const auto rows = kylin::json::parse(r.out).find("logits")->as_array();
    kylin::Model m = kylin::Model::load(data + "/models/" + model, {.threads = 2, .weights = format});
    const auto V = static_cast<std::size_t>(m.vocab_size());
    auto cache = m.new_cache(64);
    std::vector<float> expected(c.tokens.size() * V);
    m.forward(c.tokens, cache, expected, kylin::Positions::all);
    REQUIRE(rows.size() == c.tokens.size());
    std::vector<float> got;
    for (const auto& row : rows)
      for (const auto& x : row.as_array()) got.push_back(static_cast<float>(x.as_double()));  // shortest round-trip text: exact
    CHECK(got == expected);
    // quantized for real: further from the float64 reference than the exact path's 1e-5 (forward_test's bars)
    CHECK(kylin::test::relative_l2(got.data(), c.logits.back()) > 1e-4);
  }
  const Run bad = run(kylin_bin + " logits --model " + data + "/models/" + model + " --tokens 1 --weights q3");
  CHECK(bad.exit_code != 0);
  CHECK(bad.out.find("--weights") != std::string::npos);
}

TEST_CASE("kylin logits --prefill-activations bf16: Model::load's logits with it, bit for bit, off the exact ones; refused where the CPU lacks AVX512_BF16") {
  const std::string model = data + "/models/small-qwen3";  // BF16 weights
  std::vector<int> ids;
  std::string tokens;
  for (int i = 0; i < 120; ++i) {  // past the 96 rows from which a prefill over panels takes the GEMM
    ids.push_back(i * 31 % 4000 + 5);
    if (i) tokens += ',';
    tokens += std::to_string(ids.back());
  }
  const Run r = run(kylin_bin + " logits --model " + model + " --tokens " + tokens + " --prefill-activations bf16");
  if (!kylin::kernels::bf16_gemm_supported()) {
    CHECK(r.exit_code != 0);
    CHECK(r.out.find("AVX512_BF16") != std::string::npos);
    return;
  }
  REQUIRE(r.exit_code == 0);
  const kylin::json::Value out = kylin::json::parse(r.out);
  std::vector<float> got;
  for (const auto& x : out.find("logits")->as_array().at(0).as_array()) got.push_back(static_cast<float>(x.as_double()));
  const auto last_row = [&](kylin::kernels::PrefillActivations a) {
    kylin::Model m = kylin::Model::load(model, {.threads = 2, .prefill_activations = a});
    auto cache = m.new_cache(256);
    std::vector<float> row(static_cast<std::size_t>(m.vocab_size()));
    m.forward(ids, cache, row);
    return row;
  };
  CHECK(got == last_row(kylin::kernels::PrefillActivations::bf16));
  const double off = kylin::test::relative_l2(got, last_row(kylin::kernels::PrefillActivations::f32));
  CHECK(off > 1e-5);  // the activations were rounded
  CHECK(off < 2e-2);
  const Run bad = run(kylin_bin + " logits --model " + model + " --tokens 1 --prefill-activations f16");
  CHECK(bad.exit_code != 0);
  CHECK(bad.out.find("--prefill-activations") != std::string::npos);
}

TEST_CASE("kylin generate --tokens --greedy --format json prints the reference greedy continuation") {
  for (const char* model : {"small-qwen3", "odd-qwen3-f16-sharded", "tiny-qwen3-yarn", "tiny-qwen3-moe"}) {
    CAPTURE(model);
    const auto& c = reference_case(model, 2);
    const Run r = run(kylin_bin + " generate --model " + data + "/models/" + model + " --tokens " +
                      join(c.find("tokens")->as_array()) + " -n 12 --greedy --format json");
    REQUIRE(r.exit_code == 0);
    CHECK(kylin::json::parse(r.out).find("tokens")->as_array() == c.find("greedy")->as_array());
  }
}

TEST_CASE("bad CLI input exits non-zero with one error line: id >= vocab, empty list, context overflow, bad dir") {
  const std::string tiny = data + "/models/tiny-qwen3-untied";  // vocab 256, max_position_embeddings 2048
  auto one_line_error = [](const Run& r, const std::string& needle) {
    CHECK(r.exit_code != 0);
    CHECK(r.out.find(needle) != std::string::npos);
    CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 1);
  };
  one_line_error(run(kylin_bin + " logits --model " + tiny + " --tokens 1,256"), "token id 256 is outside the vocabulary [0, 256)");
  one_line_error(run(kylin_bin + " logits --model " + tiny + " --tokens ''"), "is not a non-negative integer id");
  one_line_error(run(kylin_bin + " generate --model " + tiny + " --tokens 1,x -n 2"), "'x' is not a non-negative integer id");
  one_line_error(run(kylin_bin + " generate --model " + tiny + " --tokens 1,2 -n 5000"), "exceed the context length of 2048");
  std::string many = "1";
  for (int i = 0; i < 2048; ++i) many += ",1";
  one_line_error(run(kylin_bin + " logits --model " + tiny + " --tokens " + many), "at most 2048 tokens");
  one_line_error(run(kylin_bin + " logits --model " + data + "/nonexistent --tokens 1"), "no such model directory");
  one_line_error(run(kylin_bin + " generate --model " + data + " --tokens 1"), "config.json: missing");
}

TEST_CASE("kylin bench --format json reports every documented key with consistent values") {
  const Run r = run(kylin_bin + " bench --model " + data + "/models/tiny-qwen3-untied -p 8 -n 4 -r 1 -t 2 --format json");
  REQUIRE(r.exit_code == 0);
  const auto out = kylin::json::parse(r.out);
  auto num = [&](const char* key) {
    const auto* v = out.find(key);
    REQUIRE_MESSAGE(v != nullptr, key);
    return v->as_double();
  };
  CHECK(out.find("checkpoint")->as_string() == "mapped");  // the default: zero-copy
  CHECK(out.find("prefill_activations")->as_string() == "f32");  // the default: exact
  CHECK(num("pp_tok_s") > 0);
  CHECK(num("tg_tok_s") > 0);
  CHECK(num("bandwidth_gb_s") > 0);
  CHECK(num("bytes_per_token") > 0);
  CHECK(num("peak_rss_mb") > 0);
  CHECK(num("load_ms") >= 0);
  CHECK(num("tg_roofline_tok_s") == doctest::Approx(num("bandwidth_gb_s") * 1e9 / num("bytes_per_token")));
  // with one repetition the fraction is that run's speed over the roofline of its own bandwidth sample
  CHECK(num("tg_roofline_fraction") == doctest::Approx(num("tg_tok_s") / num("tg_roofline_tok_s")));
  // peak RSS leaves out the 512 MB bandwidth buffers, so it stays far below them for a tiny model
  CHECK(num("peak_rss_mb") < 400);
  // prefill FLOPs of tiny-qwen3-untied's config.json (hidden 64, 2 layers, 4 q / 2 kv heads of 16,
  // intermediate 128, vocab 256) for 8 tokens: the projections per token, the LM head once, and
  // QK^T + PV over 1 + 2 + ... + 8 keys per head
  const double H = 64, L = 2, q = 4 * 16, kv = 2 * 16, I = 128, V = 256, n = 8;
  const double flops = n * 2 * L * (H * q + 2 * H * kv + q * H + 3 * H * I) + 2 * V * H + 4 * L * q * (n * (n + 1) / 2);
  CHECK(num("pp_gflops") == doctest::Approx(num("pp_tok_s") * flops / n / 1e9));
  CHECK(num("compute_gflops") > 0);
  CHECK(num("pp_compute_fraction") == doctest::Approx(num("pp_gflops") / num("compute_gflops")));
  CHECK(out.find("compute_bf16_gflops") == nullptr);  // only with --prefill-activations bf16
}

TEST_CASE("kylin bench --prefill-activations bf16 also judges prefill against the vdpbf16ps peak it measures; refused without AVX512_BF16") {
  const std::string bench = " bench --model " + data + "/models/small-qwen3 -p 16 -n 0 -r 1 -t 2 --prefill-activations bf16 --format json";
  // the AVX2 kernels have no BF16 GEMM on any CPU; KYLIN_CPU picks them where the build has
  // kernel-set modules (the portable build; a native one runs its built-in kernels)
  if (run("KYLIN_CPU=avx2 " + kylin_bin + " --version").out.find("cpu kernels: avx2 (") != std::string::npos) {
    const Run refused = run("KYLIN_CPU=avx2 " + kylin_bin + bench);
    CHECK(refused.exit_code != 0);
    CHECK(refused.out.find("AVX512_BF16") != std::string::npos);
  }
  const Run r = run("env -u KYLIN_CPU " + kylin_bin + bench);  // the best set this CPU runs, as bf16_gemm_supported() asks
  if (!kylin::kernels::bf16_gemm_supported()) {
    CHECK(r.exit_code != 0);
    CHECK(r.out.find("AVX512_BF16") != std::string::npos);
    return;
  }
  REQUIRE(r.exit_code == 0);
  const auto out = kylin::json::parse(r.out);
  for (const char* key : {"compute_bf16_gflops", "pp_bf16_compute_fraction", "pp_gflops"}) REQUIRE_MESSAGE(out.find(key) != nullptr, key);
  const double peak = out.find("compute_bf16_gflops")->as_double();
  CHECK(peak > 0);
  CHECK(out.find("pp_bf16_compute_fraction")->as_double() == doctest::Approx(out.find("pp_gflops")->as_double() / peak));
  CHECK(out.find("prefill_activations")->as_string() == "bf16");
}

TEST_CASE("kylin bench says how decode took its tokens: greedy ids, downloaded logits, --top-k, --draw or --draw --top-p sampling; --top-k refuses 1, and each refuses the others") {
  const std::string model = data + "/models/tiny-qwen3-untied";
  for (const auto& flag_output : {std::pair{"", "greedy_ids"}, std::pair{" --download-logits", "logits"}, std::pair{" --top-k 20", "top_k"}, std::pair{" --draw", "draw"}, std::pair{" --draw --top-p 0.9", "draw_top_p"}}) {
    const std::string flag = flag_output.first, output = flag_output.second;  // not structured bindings: CAPTURE's lambda cannot name those in clang 14
    CAPTURE(flag);
    const Run r = run(kylin_bin + " bench --model " + model + " -p 0 -n 4 -r 1 -t 1 --format json" + flag);
    REQUIRE(r.exit_code == 0);
    const auto out = kylin::json::parse(r.out);
    CHECK(out.find("tg_output")->as_string() == output);
    CHECK(out.find("tg_tok_s")->as_double() > 0);
  }
  CHECK(run(kylin_bin + " bench --model " + model + " --top-k 1").exit_code != 0);
  CHECK(run(kylin_bin + " bench --model " + model + " --top-k 20 --download-logits").exit_code != 0);
  CHECK(run(kylin_bin + " bench --model " + model + " --draw --download-logits").exit_code != 0);
  CHECK(run(kylin_bin + " bench --model " + model + " --draw --top-k 20").exit_code != 0);
  CHECK(run(kylin_bin + " bench --model " + model + " --top-p 0.9").exit_code != 0);  // needs --draw
}

TEST_CASE("kylin bench --weights q8 reads the quantized bytes: the roofline counts Q8_0 projections and LM head, not the checkpoint's") {
  const std::string model = data + "/models/tiny-qwen3-untied";
  const Run stored = run(kylin_bin + " bench --model " + model + " -p 0 -n 2 -r 1 -t 1 --format json");
  const Run q8 = run(kylin_bin + " bench --model " + model + " -p 0 -n 2 -r 1 -t 1 --weights q8 --format json");
  REQUIRE(stored.exit_code == 0);
  REQUIRE(q8.exit_code == 0);
  const auto a = kylin::json::parse(stored.out), b = kylin::json::parse(q8.out);
  CHECK(a.find("weights")->as_string() == "stored");
  CHECK(b.find("weights")->as_string() == "q8");
  // tiny-qwen3-untied (BF16): 2 layers of projections (hidden 64, q 64, kv 32, intermediate 128)
  // and its own LM head [256, 64] go from 2 bytes per weight to 34 bytes per 32.
  const double weights = 2 * (64 * 64 + 2 * 32 * 64 + 64 * 64 + 3 * 128 * 64) + 256 * 64;
  const double saved = weights * 2 - weights * 34 / 32;
  CHECK(a.find("bytes_per_token")->as_double() - b.find("bytes_per_token")->as_double() == doctest::Approx(saved));
  const Run bad = run(kylin_bin + " bench --model " + model + " --weights q3");
  CHECK(bad.exit_code != 0);
  CHECK(bad.out.find("--weights") != std::string::npos);
}

TEST_CASE("kylin bench --weights q8/q4 on MoE checkpoints: each expert counts its quantized bytes at the k / num_experts share a token reads") {
  auto bytes_per_token = [](const std::string& model, const std::string& weights) {
    // row-major weights: the packed layout reads 16-row panels, the last padded (odd's 56-row experts as 64)
    const Run r = run(kylin_bin + " bench --model " + data + "/models/" + model + " -p 0 -n 2 -r 1 -t 1 --weight-layout stored --weights " + weights +
                      " --format json");
    REQUIRE(r.exit_code == 0);
    const auto out = kylin::json::parse(r.out);
    CHECK(out.find("tg_roofline_fraction")->as_double() > 0);
    return out.find("bytes_per_token")->as_double();
  };
  // tiny-qwen3-moe (BF16, tied): 3 layers of attention (hidden 128, q 128, kv 64), layer 1 a dense
  // MLP (intermediate 192), layers 0 and 2 8 experts (intermediate 64) of which a token reads 2,
  // and the tied LM head [2048, 128]; all of them go from 2 bytes per weight to 34 (18) per 32.
  const double tiny = 3 * (2 * 128 * 128 + 2 * 64 * 128) + 3 * 192 * 128 + 2 * (2.0 / 8) * 8 * 3 * 64 * 128 + 2048 * 128;
  const double tiny_stored = bytes_per_token("tiny-qwen3-moe", "stored");
  CHECK(tiny_stored - bytes_per_token("tiny-qwen3-moe", "q8") == doctest::Approx(tiny * (2 - 34.0 / 32)));
  CHECK(tiny_stored - bytes_per_token("tiny-qwen3-moe", "q4") == doctest::Approx(tiny * (2 - 18.0 / 32)));
  // odd-qwen3-moe-f32-sharded (F32, untied, 4 layers, hidden 96): what has a multiple of 32 columns
  // is quantized: q [240, 96], k and v [80, 96] of every layer (o [96, 240] is not), gate and up
  // [136, 96] of the dense layers 0 and 2, gate and up [56, 96] of the 12 experts of layers 1 and 3
  // (3 read per token; down [96, 56] is not), and the LM head [1531, 96].
  const double odd = 4 * (240 * 96 + 2 * 80 * 96) + 2 * 2 * 136 * 96 + 2 * (3.0 / 12) * 12 * 2 * 56 * 96 + 1531 * 96;
  CHECK(bytes_per_token("odd-qwen3-moe-f32-sharded", "stored") - bytes_per_token("odd-qwen3-moe-f32-sharded", "q4") ==
        doctest::Approx(odd * (4 - 18.0 / 32)));
}

TEST_CASE("kylin bench --depth also decodes from depth 0 in the same repetitions and reports the ratio") {
  const Run r = run(kylin_bin + " bench --model " + data + "/models/tiny-qwen3-untied -p 0 -n 4 -r 3 -t 1 --depth 24 --format json");
  REQUIRE(r.exit_code == 0);
  const auto out = kylin::json::parse(r.out);
  const auto* ratio = out.find("tg_depth_ratio");
  const auto* short_tg = out.find("tg_short_tok_s");
  REQUIRE(ratio != nullptr);
  REQUIRE(short_tg != nullptr);
  CHECK(short_tg->as_double() > 0);
  CHECK(ratio->as_double() > 0);
  CHECK(std::isfinite(ratio->as_double()));
  // without --depth there is no short-context reference to report
  const Run plain = run(kylin_bin + " bench --model " + data + "/models/tiny-qwen3-untied -p 0 -n 2 -r 1 -t 1 --format json");
  REQUIRE(plain.exit_code == 0);
  CHECK(kylin::json::parse(plain.out).find("tg_depth_ratio") == nullptr);
}

TEST_CASE("kylin generate with several --tokens runs them as one batch: each sequence's ids equal its reference greedy run") {
  // three reference prompts of different lengths, one batch; the oracle is the float64 greedy ids
  const std::string model = "small-qwen3";
  std::string args;
  kylin::json::Array expected;
  for (std::size_t i : {0, 1, 2}) {
    const auto& c = reference_case(model, i);
    args += " --tokens " + join(c.find("tokens")->as_array());
    expected.push_back(*c.find("greedy"));
  }
  const Run r = run(kylin_bin + " generate --model " + data + "/models/" + model + args + " -n 12 --greedy --format json");
  REQUIRE(r.exit_code == 0);
  const auto out = kylin::json::parse(r.out);
  const auto& seqs = out.find("sequences")->as_array();
  REQUIRE(seqs.size() == expected.size());
  for (std::size_t i = 0; i < seqs.size(); ++i) CHECK(seqs[i].find("tokens")->as_array() == expected[i].as_array());
}

TEST_CASE("kylin bench --batch reports the batch size, aggregate tok/s and its ratio to one sequence") {
  const Run r = run(kylin_bin + " bench --model " + data + "/models/tiny-qwen3-untied -p 0 -n 4 -r 2 -t 1 --batch 3 --format json");
  REQUIRE(r.exit_code == 0);
  const auto out = kylin::json::parse(r.out);
  REQUIRE(out.find("tg_batch") != nullptr);
  CHECK(out.find("tg_batch")->as_int() == 3);
  CHECK(out.find("tg_batch_tok_s")->as_double() > 0);
  CHECK(out.find("tg_batch_speedup")->as_double() > 0);
  CHECK(out.find("tg_tok_s") != nullptr);
}

TEST_CASE("kylin bench --no-mmap --weight-layout stored decodes from a copy of the checkpoint and says so; beside q8 or packed weights it is refused") {
  const std::string model = data + "/models/tiny-qwen3-untied";
  const Run copied = run(kylin_bin + " bench --model " + model + " -p 0 -n 2 -r 1 -t 1 --no-mmap --weight-layout stored --format json");
  REQUIRE(copied.exit_code == 0);
  const auto out = kylin::json::parse(copied.out);
  CHECK(out.find("checkpoint")->as_string() == "copied");
  CHECK(out.find("weight_layout")->as_string() == "stored");
  CHECK(out.find("tg_tok_s")->as_double() > 0);
  const Run both = run(kylin_bin + " bench --model " + model + " --no-mmap --weight-layout stored --weights q8");
  CHECK(both.exit_code != 0);
  CHECK(both.out.find("--no-mmap") != std::string::npos);
  const Run packed = run(kylin_bin + " bench --model " + model + " --no-mmap");
  CHECK(packed.exit_code != 0);
  CHECK(packed.out.find("--weight-layout stored") != std::string::npos);
}

TEST_CASE("kylin bench reports the weight layout: packed by default, stored when asked") {
  const std::string model = data + "/models/tiny-qwen3-untied";
  for (const char* layout : {"packed", "stored"}) {
    CAPTURE(layout);
    const Run r = run(kylin_bin + " bench --model " + model + " -p 4 -n 2 -r 1 -t 1 --format json" +
                      (std::string(layout) == "stored" ? " --weight-layout stored" : ""));
    REQUIRE(r.exit_code == 0);
    CHECK(kylin::json::parse(r.out).find("weight_layout")->as_string() == layout);
  }
}

TEST_CASE("make-test-model writes an MoE checkpoint (--layers overrides the depth) that inspect accepts and generate runs") {
  kylin::test::TempDir dir;
  const std::string out = (dir.path() / "moe").string();
  const Run made = run(kylin_bin + " make-test-model --preset tiny-qwen3-moe --layers 3 --out " + out);
  REQUIRE(made.exit_code == 0);
  const Run inspected = run(kylin_bin + " inspect --model " + out);
  CHECK(inspected.exit_code == 0);
  CHECK(inspected.out.find("num_experts               8\n") != std::string::npos);
  CHECK(inspected.out.find("derived: 3 of 3 layers sparse\n") != std::string::npos);
  CHECK(inspected.out.find("model.layers.2.mlp.experts.7.down_proj.weight") != std::string::npos);
  const Run generated = run(kylin_bin + " generate --model " + out + " --tokens 1,2,3 --tokens 4 -n 4 --greedy --format json");
  REQUIRE(generated.exit_code == 0);
  CHECK(kylin::json::parse(generated.out).find("sequences")->size() == 2);
}

TEST_CASE("make-test-model writes hybrid (Qwen3.5-layout) checkpoints that inspect describes and bench and generate run; every preset's shape is its descriptor's") {
  kylin::test::TempDir dir;
  for (const char* preset : {"tiny-qwen3.5", "tiny-qwen3.5-moe"}) {
    CAPTURE(preset);
    const std::string out = (dir.path() / preset).string();
    REQUIRE(run(kylin_bin + " make-test-model --preset " + preset + " --layers 8 --out " + out).exit_code == 0);
    const Run inspected = run(kylin_bin + " inspect --model " + out);
    CHECK(inspected.exit_code == 0);
    CHECK(inspected.out.find("layer_types               linear x3, full, linear x3, full\n") != std::string::npos);
    CHECK(inspected.out.find("derived: 2 of 8 layers gated attention (RoPE on 16 of 64 dims), 6 Gated DeltaNet") != std::string::npos);
    CHECK(inspected.out.find("model.language_model.layers.4.linear_attn.in_proj_qkv.weight") != std::string::npos);
    const Run generated = run(kylin_bin + " generate --model " + out + " --tokens 1,2,3 --tokens 4 -n 4 --greedy --format json");
    REQUIRE(generated.exit_code == 0);
    CHECK(kylin::json::parse(generated.out).find("sequences")->size() == 2);
    const Run bench = run(kylin_bin + " bench --model " + out + " -p 16 -n 4 -r 1 -t 1 --format json");
    REQUIRE(bench.exit_code == 0);
    const auto b = kylin::json::parse(bench.out);
    // 6 linear layers' states (conv [3, 256] and S [4, 32, 32] f32 each) read and written per token
    const double state = 6 * (3 * 256 + 4 * 32 * 32) * 4.0;
    CHECK(b.find("state_bytes_per_sequence")->as_double() == state);
    CHECK(b.find("state_bytes_per_token")->as_double() == 2 * state);
    CHECK(b.find("kv_bytes_per_position")->as_double() == 2 * 2 * 2 * 64 * 4.0);  // 2 attention layers, k and v, 2 kv heads of 64, f32
  }
  // one layer, a linear one: no keys to hold, the default context is the model's (was a division by zero)
  const std::string one = (dir.path() / "one-linear-layer").string();
  REQUIRE(run(kylin_bin + " make-test-model --preset tiny-qwen3.5 --layers 1 --out " + one).exit_code == 0);
  CHECK(run(kylin_bin + " generate --model " + one + " --tokens 1,2,3 -n 2 --greedy --format json").exit_code == 0);
  // the published shapes: a config written for each preset matches it
  for (const char* preset : {"qwen3.5-0.8b", "qwen3.5-9b", "qwen3.5-27b", "qwen3.6-35b-a3b", "qwen3.5-397b-a17b"}) {
    CAPTURE(preset);
    const std::string out = (dir.path() / preset).string();
    REQUIRE(run(kylin_bin + " make-test-model --preset " + preset + " --config-only --out " + out).exit_code == 0);
    const kylin::ModelConfig c = kylin::load_model_config(out);
    const kylin::ModelDescriptor* d = kylin::find_descriptor(c);
    REQUIRE(d != nullptr);
    CHECK(kylin::describe_preset_match(c) == "preset " + std::string(d->name));
    CHECK(c.attention_layers() == c.num_hidden_layers / 4);
  }
}

TEST_CASE("make-test-model --dtype fp8 writes F8_E4M3 projections with block scales that load widened and quantized") {
  kylin::test::TempDir dir;
  const std::string out = (dir.path() / "fp8").string();
  const Run made = run(kylin_bin + " make-test-model --preset tiny-qwen3-moe --layers 2 --dtype fp8 --out " + out);
  REQUIRE(made.exit_code == 0);
  const Run inspected = run(kylin_bin + " inspect --model " + out);
  CHECK(inspected.exit_code == 0);
  CHECK(inspected.out.find("model.layers.1.mlp.experts.7.down_proj.weight") != std::string::npos);
  CHECK(inspected.out.find("F8_E4M3") != std::string::npos);
  CHECK(inspected.out.find("model.layers.1.mlp.experts.7.down_proj.weight_scale_inv") != std::string::npos);
  const Run generated = run(kylin_bin + " generate --model " + out + " --tokens 1,2,3 -n 4 --greedy --format json");
  CHECK(generated.exit_code == 0);
  const Run q4 = run(kylin_bin + " bench --model " + out + " -p 4 -n 2 -r 1 -t 1 --weights q4 --format json");
  REQUIRE(q4.exit_code == 0);
  CHECK(kylin::json::parse(q4.out).find("tg_tok_s")->as_double() > 0);
  const Run bad = run(kylin_bin + " make-test-model --preset tiny-qwen3 --dtype fp16 --out " + out + "-bad");
  CHECK(bad.exit_code != 0);
}

TEST_CASE("kylin bench --draft: the cost model for k = 1..8 and the measured run; the model drafting for itself has every draft accepted") {
  const std::string model = data + "/models/e2e-qwen3-chat";  // with its tokenizer
  const kylin::test::TempModel other("e2e-qwen3-fullvocab", kylin::test::TestTokenizer::qwen3);
  for (const std::string& draft : {model, other.dir().string()}) {
    CAPTURE(draft);
    const Run r = run(kylin_bin + " bench --model " + model + " --draft " + draft + " --draft-max 3 -p 0 -n 9 -r 1 -t 2 --format json");
    INFO(r.out);
    REQUIRE(r.exit_code == 0);
    const auto out = kylin::json::parse(r.out);
    const kylin::json::Value* spec = out.find("speculative");
    REQUIRE(spec != nullptr);
    const auto& cost = spec->find("cost_model")->as_array();
    REQUIRE(cost.size() == 8);
    for (std::size_t k = 1; k <= cost.size(); ++k) {
      const auto& row = cost[k - 1];
      CHECK(row.find("k")->as_int() == static_cast<std::int64_t>(k));
      const double rk = row.find("verify_ratio")->as_double();
      CHECK(rk > 0);
      // at acceptance 0.9 a pass emits (1 - 0.9^(k+1)) / 0.1 tokens on average
      CHECK(row.find("speedup_a9")->as_double() == doctest::Approx((1 - std::pow(0.9, k + 1.0)) / 0.1 / rk));
    }
    CHECK(spec->find("tg_tok_s")->as_double() > 0);
    CHECK(spec->find("tg_spec_tok_s")->as_double() > 0);
    if (draft == model) {
      CHECK(spec->find("acceptance")->as_double() == 1.0);
      CHECK(spec->find("tokens_per_pass")->as_double() == 4.0);  // 8 tokens after the first, two passes of 3 drafts + 1
      CHECK(spec->find("draft_step_ratio")->as_double() == 1.0);
    } else {
      CHECK(spec->find("draft")->as_string() == draft);
      CHECK(spec->find("draft_step_ratio")->as_double() > 0);  // measured, not the target's 1
    }
  }
}

}  // namespace cli_test
