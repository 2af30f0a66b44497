// FP8 checkpoints (the Qwen3-*-FP8 layout: F8_E4M3 weights with F32 weight_scale_inv per block of
// quantization_config.weight_block_size): loading widens them to exactly the BF16 weights
// w * scale, so the logits equal those of that BF16 checkpoint bit for bit, full and partial
// blocks alike; a missing or misshapen scale, or an unsupported quantization_config, is refused by name.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <functional>
#include <numeric>
#include <fstream>
#include <string>
#include <vector>

#include "common/reference.hpp"
#include "common/temp_dir.hpp"
#include "kylin/io/safetensors_writer.hpp"
#include "kylin/model/model.hpp"

namespace fp8_test {

const std::string data = KYLIN_TEST_DATA;
namespace fs = std::filesystem;

// e4m3fn decoded from its bit fields into a float's (independent of core/dtype.hpp's decoder).
float e4m3_value(unsigned v) {
  const unsigned sign = (v >> 7) & 1, exp = (v >> 3) & 0xF, mant = v & 7;
  float mag;
  if (exp == 0) mag = static_cast<float>(mant) / 512.0f;
  else mag = std::bit_cast<float>(((exp - 7 + 127) << 23) | (mant << 20));
  return sign ? -mag : mag;
}

// The nearest e4m3fn code to x (|x| <= 448), ties to the even code.
std::uint8_t e4m3_code(float x) {
  static const std::vector<float> values = [] {  // the positive finite codes 0..0x7E, ascending in value
    std::vector<float> v;
    for (unsigned c = 0; c < 0x7F; ++c) v.push_back(e4m3_value(c));
    return v;
  }();
  const float a = std::abs(x);
  auto hi = static_cast<unsigned>(std::lower_bound(values.begin(), values.end(), a) - values.begin());
  hi = std::min(hi, 0x7Eu);
  unsigned best = hi;
  if (hi > 0) {
    const unsigned lo = hi - 1;
    const float below = a - values[lo], above = values[hi] - a;
    if (below < above || (below == above && (lo & 1) == 0)) best = lo;
  }
  return static_cast<std::uint8_t>(best | (x < 0 ? 0x80u : 0u));
}

bool is_projection(const std::string& name) {
  for (const char* p : {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "gate_proj.weight", "up_proj.weight",
                        "down_proj.weight", "in_proj_qkv.weight", "in_proj_z.weight", "in_proj_qkvz.weight", "out_proj.weight"})
    if (name.ends_with(p)) return true;
  return false;
}

struct Pair {
  fs::path fp8, bf16;  // the FP8 checkpoint, and the BF16 one its weights should widen to
};

// Quantizes every projection of checkpoint `name` per block [br, bc] (scale = amax / 448) and
// writes it as FP8 with its scales, and as the BF16 checkpoint of bf16(decoded * scale).
// `config_extra` goes into config.json ("" for none).
Pair make_fp8(const std::string& name, const fs::path& dir, std::int64_t br, std::int64_t bc, const std::string& config_extra) {
  const kylin::io::Checkpoint in(data + "/models/" + name);
  std::vector<kylin::io::TensorSpec> fp8_specs, bf16_specs;
  std::vector<std::vector<std::byte>> fp8_bytes, bf16_bytes;
  // As the FP8 releases store them: fused experts per expert; DeltaNet's in_proj_b/a, conv, norms,
  // routers and the shared expert's gate stay as they are.
  struct Source {
    std::string name;
    kylin::DType dtype;
    const std::byte* data;
    std::vector<std::int64_t> shape;
  };
  std::vector<Source> sources;
  for (const auto* t : in.tensors()) {
    const auto parts = kylin::fused_expert_parts(*t);
    if (parts.empty()) sources.push_back({t->name, t->dtype, t->data, t->shape});
    for (const auto& p : parts) sources.push_back({p.name, t->dtype, t->data + p.offset, {p.rows, p.cols}});
  }
  for (const Source& t : sources) {
    const std::int64_t count = std::accumulate(t.shape.begin(), t.shape.end(), std::int64_t{1}, std::multiplies<>());
    if (!is_projection(t.name)) {
      for (auto* specs : {&fp8_specs, &bf16_specs}) specs->push_back({t.name, t.dtype, t.shape});
      for (auto* bytes : {&fp8_bytes, &bf16_bytes}) bytes->emplace_back(t.data, t.data + count * static_cast<std::int64_t>(kylin::dtype_size(t.dtype)));
      continue;
    }
    const kylin::kernels::MatRef m{t.dtype, t.data, t.shape[0], t.shape[1]};
    const std::int64_t R = m.rows, C = m.cols, sr = (R + br - 1) / br, sc = (C + bc - 1) / bc;
    std::vector<float> scales(static_cast<std::size_t>(sr * sc));
    for (std::int64_t r = 0; r < R; ++r)
      for (std::int64_t c = 0; c < C; ++c) {
        float& s = scales[static_cast<std::size_t>((r / br) * sc + c / bc)];
        s = std::max(s, std::abs(kylin::kernels::weight_at(m, r * C + c)) / 448.0f);
      }
    std::vector<std::byte> q(static_cast<std::size_t>(R * C)), wide(static_cast<std::size_t>(R * C) * 2);
    for (std::int64_t r = 0; r < R; ++r)
      for (std::int64_t c = 0; c < C; ++c) {
        const float s = scales[static_cast<std::size_t>((r / br) * sc + c / bc)];
        const std::uint8_t code = e4m3_code(s > 0 ? kylin::kernels::weight_at(m, r * C + c) / s : 0.0f);
        q[static_cast<std::size_t>(r * C + c)] = std::byte{code};
        const std::uint16_t b = kylin::f32_to_bf16(e4m3_value(code) * s);
        std::memcpy(wide.data() + (r * C + c) * 2, &b, 2);
      }
    fp8_specs.push_back({t.name, kylin::DType::f8_e4m3, t.shape});
    fp8_bytes.push_back(std::move(q));
    fp8_specs.push_back({kylin::fp8_scale_name(t.name), kylin::DType::f32, {sr, sc}});
    fp8_bytes.emplace_back(reinterpret_cast<const std::byte*>(scales.data()), reinterpret_cast<const std::byte*>(scales.data() + scales.size()));
    bf16_specs.push_back({t.name, kylin::DType::bf16, t.shape});
    bf16_bytes.push_back(std::move(wide));
  }
  const Pair out{dir / "fp8", dir / "bf16"};
  std::string config = kylin::io::read_text_file(in.dir() / "config.json");
  for (const auto& [path, specs, bytes, extra] : {std::tuple{out.fp8, &fp8_specs, &fp8_bytes, config_extra}, std::tuple{out.bf16, &bf16_specs, &bf16_bytes, std::string()}}) {
    fs::create_directories(path);
    std::string c = config;
    if (!extra.empty()) c.insert(c.rfind('}'), ", " + extra);
    std::ofstream(path / "config.json") << c;
    kylin::io::SafetensorsWriter w(path / "model.safetensors", *specs);
    for (std::size_t i = 0; i < specs->size(); ++i) w.write((*specs)[i].name, (*bytes)[i]);
    w.close();
  }
  return out;
}

std::string quantization_config(std::int64_t br, std::int64_t bc) {
  return R"("quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [)" +
         std::to_string(br) + ", " + std::to_string(bc) + "]}";
}

std::vector<float> logits(const fs::path& dir, kylin::WeightFormat weights = kylin::WeightFormat::stored) {
  kylin::Model m = kylin::Model::load(dir, {.threads = 2, .weights = weights});
  auto cache = m.new_cache(32);
  const std::vector<int> tokens{3, 1, 4, 1, 5, 9, 2, 6};
  std::vector<float> out(tokens.size() * static_cast<std::size_t>(m.vocab_size()));
  m.forward(tokens, cache, out, kylin::Positions::all);
  return out;
}

TEST_CASE("an FP8 checkpoint gives the logits of its BF16 widening bit for bit (128x128 blocks, partial blocks, other block sizes)") {
  // small-qwen3: whole 128x128 blocks; odd-qwen3-f16-sharded: 192/520-wide matrices, partial blocks;
  // the hybrids as Qwen3.6-35B-A3B-FP8 lays them out (experts per expert, DeltaNet's small tensors BF16)
  // What FP8 costs against the checkpoint it was made from (4 significant bits per weight), bars 2x the
  // measured: 0.076-0.105 relative L2 on the Qwen3 checkpoints; the random hybrids amplify every rounding
  // (hybrid_test.cpp's q8 bars), 0.19-0.56 measured.
  const std::pair<const char*, double> checkpoints[] = {{"small-qwen3", 0.2}, {"odd-qwen3-f16-sharded", 0.2}, {"tiny-qwen35", 1.1},
                                                        {"tiny-qwen35-moe", 0.5}, {"tiny-qwen3-next", 0.55}};
  for (const auto& checkpoint : checkpoints)
    for (const auto& block : {std::array<std::int64_t, 2>{128, 128}, std::array<std::int64_t, 2>{64, 32}}) {
      const auto& [name, bar] = checkpoint;
      CAPTURE(checkpoint.first);
      CAPTURE(block[0]);
      kylin::test::TempDir dir;
      const Pair p = make_fp8(name, dir.path(), block[0], block[1], quantization_config(block[0], block[1]));
      const std::vector<float> fp8 = logits(p.fp8), original = logits(data + "/models/" + name);
      CHECK(fp8 == logits(p.bf16));
      const double error = kylin::test::relative_l2(fp8, original);
      MESSAGE(std::string(name) << " " << block[0] << "x" << block[1] << ": relative L2 against the source checkpoint " << error);
      CHECK(error < bar);
      // --weights q8|q4 quantizes the widening, as it would the BF16 checkpoint
      CHECK(logits(p.fp8, kylin::WeightFormat::q8) == logits(p.bf16, kylin::WeightFormat::q8));
      CHECK(logits(p.fp8, kylin::WeightFormat::q4) == logits(p.bf16, kylin::WeightFormat::q4));
    }
}

TEST_CASE("FP8 weights without their scales, with misshapen scales, or without quantization_config are refused naming the tensor") {
  kylin::test::TempDir dir;
  const Pair p = make_fp8("tiny-qwen3-untied", dir.path(), 128, 128, quantization_config(128, 128));
  const std::string victim = "model.layers.1.mlp.up_proj.weight";
  const kylin::io::Checkpoint good(p.fp8);
  for (const char* damage : {"drop", "reshape", "no config"}) {
    CAPTURE(damage);
    const fs::path bad = dir.path() / damage;
    fs::create_directories(bad);
    std::string config = kylin::io::read_text_file(p.fp8 / "config.json");
    if (std::string(damage) == "no config") config = kylin::io::read_text_file(data + "/models/tiny-qwen3-untied/config.json");
    std::ofstream(bad / "config.json") << config;
    std::vector<kylin::io::TensorSpec> specs;
    for (const auto* t : good.tensors()) {
      if (t->name == kylin::fp8_scale_name(victim) && std::string(damage) == "drop") continue;
      specs.push_back({t->name, t->dtype, t->name == kylin::fp8_scale_name(victim) && std::string(damage) == "reshape"
                                             ? std::vector<std::int64_t>{t->shape[0] * t->shape[1]} : t->shape});
    }
    kylin::io::SafetensorsWriter w(bad / "model.safetensors", specs);
    for (const auto& s : specs) w.write(s.name, std::span<const std::byte>(good.find(s.name)->data, good.find(s.name)->nbytes));
    w.close();
    const kylin::WeightCheck check = kylin::check_weights(kylin::io::Checkpoint(bad), kylin::load_model_config(bad));
    REQUIRE(check.problems.size() == (std::string(damage) == "no config" ? 14u : 1u));  // every FP8 tensor, or the one damaged
    CHECK(check.problems.front().starts_with(std::string(damage) == "no config" ? "model.layers.0." : victim));
    CHECK_THROWS_WITH((void)kylin::Model::load(bad, {.threads = 1}), doctest::Contains(damage == std::string("drop") ? "without its scales"
                                                                                     : damage == std::string("reshape") ? "must be F32 or BF16 [1,1]"
                                                                                                                        : "no quantization_config"));
  }
  CHECK(kylin::check_weights(good, kylin::load_model_config(p.fp8)).loads());
}

TEST_CASE("a quantization_config kylin cannot read is refused at the config, naming the field") {
  const std::string base = kylin::io::read_text_file(data + "/models/tiny-qwen3-untied/config.json");
  auto parse = [&](const std::string& extra) {
    std::string c = base;
    c.insert(c.rfind('}'), ", " + extra);
    return kylin::parse_model_config(kylin::json::parse(c));
  };
  CHECK(parse(quantization_config(128, 128)).fp8->block_cols == 128);
  CHECK_THROWS_WITH(parse(R"("quantization_config": {"quant_method": "awq", "bits": 4})"), doctest::Contains("quantization_config.quant_method"));
  CHECK_THROWS_WITH(parse(R"("quantization_config": {"quant_method": "fp8", "activation_scheme": "static"})"),
                    doctest::Contains("quantization_config.activation_scheme"));
  CHECK_THROWS_WITH(parse(R"("quantization_config": {"quant_method": "fp8", "weight_block_size": [0, 128]})"),
                    doctest::Contains("quantization_config.weight_block_size"));
}

}  // namespace fp8_test

TEST_CASE("an FP8 row widens every code (finite, subnormal, zero, NaN) times its block's scale to the BF16 rounding of the product") {
  std::vector<std::uint8_t> q(256);  // one row: codes 0..127 in block 0, 128..255 in block 1
  for (unsigned v = 0; v < 256; ++v) q[v] = static_cast<std::uint8_t>(v);
  for (float s0 : {1.f, -3.25f, 1.7e-3f, 1e-30f, 3e38f, 0.f}) {
    const float scales[2] = {s0, 0.75f * s0};
    CAPTURE(s0);
    const kylin::Fp8Source src{q.data(), reinterpret_cast<const std::byte*>(scales), kylin::DType::f32, 1, 256, 128, 128};
    std::vector<float> got(256);
    src.row(0, got.data());
    for (unsigned v = 0; v < 256; ++v) {
      const float x = fp8_test::e4m3_value(v), p = x * scales[v / 128];
      CAPTURE(v);
      if ((v & 0x7F) == 0x7F) {  // S.1111.111: NaN
        CHECK(std::isnan(got[v]));
      } else if (std::isnan(p)) {
        CHECK(std::isnan(got[v]));
      } else {
        CHECK(std::bit_cast<std::uint32_t>(got[v]) == std::uint32_t{kylin::f32_to_bf16(p)} << 16);
      }
    }
  }
}
