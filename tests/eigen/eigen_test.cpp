// kylin::eigen views: values read through the maps equal kylin's own widening for BF16/F16/F32
// checkpoints, the maps alias the mapped data (no copy), Eigen linear algebra on them matches
// kernels::matmul_ref, and wrong dtypes, ranks and buffer sizes are errors naming what is wrong.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kylin/eigen.hpp"
#include "kylin/io/checkpoint.hpp"
#include "kylin/io/config.hpp"
#include "kylin/io/safetensors_writer.hpp"
#include "kylin/kernels/ops.hpp"
#include "kylin/model/model.hpp"
#include "kylin/model/weights.hpp"

using namespace kylin;

namespace {

const std::string models = std::string(KYLIN_TEST_DATA) + "/models/";

struct Case {
  const char* model;
  DType dtype;  // what every tensor of that checkpoint is stored as
};
constexpr Case cases[] = {{"tiny-qwen3-untied", DType::bf16}, {"odd-qwen3-f16-sharded", DType::f16}, {"small-qwen2-f32", DType::f32}};

// kylin's widening of element i of a tensor, by raw bits for 16-bit dtypes (dtype.hpp's exact conversions).
float kylin_value(const io::TensorView& t, std::int64_t i) {
  if (t.dtype == DType::f32) return t.as<float>()[i];
  std::uint16_t bits;
  std::memcpy(&bits, t.data + i * 2, 2);
  return t.dtype == DType::bf16 ? bf16_to_f32(bits) : f16_to_f32(bits);
}

// Every element of `m` (a view of `t`) widens to exactly kylin's value, bit for bit; returns the count.
template <class Map>
std::int64_t count_equal_elements(const Map& m, const io::TensorView& t) {
  std::int64_t equal = 0;
  const kernels::MatRef flat{t.dtype, t.data, 1, t.numel()};
  for (Eigen::Index r = 0; r < m.rows(); ++r)
    for (Eigen::Index c = 0; c < m.cols(); ++c) {
      const std::int64_t i = r * m.cols() + c;
      const float via_eigen = static_cast<float>(m(r, c));
      const bool same = std::bit_cast<std::uint32_t>(via_eigen) == std::bit_cast<std::uint32_t>(kylin_value(t, i)) &&
                        std::bit_cast<std::uint32_t>(via_eigen) == std::bit_cast<std::uint32_t>(kernels::weight_at(flat, i));
      equal += same;
    }
  return equal;
}

template <class Scalar>
void check_every_tensor(const io::Checkpoint& ckpt) {
  REQUIRE(!ckpt.tensors().empty());
  for (const io::TensorView* t : ckpt.tensors()) {
    CAPTURE(t->name);
    REQUIRE(t->dtype == eigen::ScalarDType<Scalar>::dtype);
    const auto m = eigen::map<Scalar>(*t);
    const std::int64_t rows = t->shape.size() == 2 ? t->shape[0] : 1;
    CHECK(m.rows() == rows);
    CHECK(m.cols() == t->shape.back());
    CHECK(static_cast<const void*>(m.data()) == static_cast<const void*>(t->data));  // zero-copy
    CHECK(count_equal_elements(m, *t) == t->numel());
  }
}

// An in-memory safetensors file with the given tensors, zero-filled; the bytes must outlive the parse.
std::vector<std::byte> safetensors_bytes(const std::vector<io::TensorSpec>& specs) {
  const std::string header = io::safetensors_header(specs, {});
  std::size_t data = 0;
  for (const auto& s : specs) data += s.nbytes();
  std::vector<std::byte> bytes(8 + header.size() + data);
  for (int i = 0; i < 8; ++i) bytes[static_cast<std::size_t>(i)] = static_cast<std::byte>((header.size() >> (8 * i)) & 0xFF);
  std::memcpy(bytes.data() + 8, header.data(), header.size());
  return bytes;
}

std::string error_text(auto&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("Eigen's half and bfloat16 hold exactly the stored 16-bit patterns") {
  // 0x3F80 is 1.0 as BF16, 0x3C00 is 1.0 as F16; 0xC0490FDB's top half is -pi rounded down in BF16.
  CHECK(static_cast<float>(Eigen::numext::bit_cast<Eigen::bfloat16>(std::uint16_t{0x3F80})) == 1.0f);
  CHECK(static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(std::uint16_t{0x3C00})) == 1.0f);
  for (std::uint32_t bits = 0; bits <= 0xFFFF; ++bits) {  // every pattern, NaNs compared as NaNs
    const auto h = static_cast<std::uint16_t>(bits);
    const float b = Eigen::numext::bit_cast<Eigen::bfloat16>(h), f = Eigen::numext::bit_cast<Eigen::half>(h);
    if (std::isnan(bf16_to_f32(h))) CHECK(std::isnan(b));
    else if (std::bit_cast<std::uint32_t>(b) != std::bit_cast<std::uint32_t>(bf16_to_f32(h))) FAIL_CHECK("bf16 " << bits);
    if (std::isnan(f16_to_f32(h))) CHECK(std::isnan(f));
    else if (std::bit_cast<std::uint32_t>(f) != std::bit_cast<std::uint32_t>(f16_to_f32(h))) FAIL_CHECK("f16 " << bits);
  }
}

TEST_CASE("every tensor of the BF16, F16 and F32 test checkpoints reads through its map as kylin widens it, in place") {
  check_every_tensor<Eigen::bfloat16>(io::Checkpoint(models + "tiny-qwen3-untied"));
  check_every_tensor<Eigen::half>(io::Checkpoint(models + "odd-qwen3-f16-sharded"));  // three shards
  check_every_tensor<float>(io::Checkpoint(models + "small-qwen2-f32"));
}

TEST_CASE("eigen::visit hands each tensor to the callback in its stored dtype") {
  for (const Case& c : cases) {
    CAPTURE(c.model);
    const io::Checkpoint ckpt(models + c.model);
    const io::TensorView& t = *ckpt.find("model.layers.0.mlp.down_proj.weight");
    const double sum = eigen::visit(t, [](auto m) { return m.template cast<double>().sum(); });
    double expected = 0;
    for (std::int64_t i = 0; i < t.numel(); ++i) expected += kylin_value(t, i);
    CHECK(sum == doctest::Approx(expected).epsilon(1e-12));
    const DType seen = eigen::visit(t, [](auto m) { return eigen::ScalarDType<typename decltype(m)::Scalar>::dtype; });
    CHECK(seen == c.dtype);
  }
}

TEST_CASE("W * x with Eigen in double on bound weights matches kernels::matmul_ref, one token and several") {
  for (const Case& c : cases) {
    CAPTURE(c.model);
    const io::Checkpoint ckpt(models + c.model);
    const ModelConfig config = load_model_config(models + c.model);
    const ModelWeights weights = bind_weights(ckpt, config);
    for (const kernels::MatRef* w : {&weights.layers[0].q_proj, &weights.layers[1].down_proj, &weights.lm_head}) {
      CAPTURE(w->rows);
      CAPTURE(w->cols);
      REQUIRE(w->dtype == c.dtype);
      for (std::int64_t T : {1, 3}) {
        std::mt19937 rng(static_cast<unsigned>(w->rows * 7 + T));
        std::normal_distribution<float> dist(0.f, 1.f);
        std::vector<float> x(static_cast<std::size_t>(T * w->cols)), ref(static_cast<std::size_t>(T * w->rows));
        for (float& v : x) v = dist(rng);
        kernels::matmul_ref(x.data(), *w, nullptr, ref.data(), T);
        const Eigen::MatrixXd y = eigen::visit(*w, [&](auto W) {  // [T, rows]
          CHECK(static_cast<const void*>(W.data()) == w->data);      // zero-copy
          return Eigen::MatrixXd(eigen::map_rows(x, T).cast<double>() * W.template cast<double>().transpose());
        });
        REQUIRE(y.rows() == T);
        REQUIRE(y.cols() == w->rows);
        const auto expected = eigen::map_rows(ref, T).cast<double>();
        // Both sum in double; they differ by summation order and matmul_ref's rounding to float.
        CHECK((y - expected).norm() <= 1e-6 * expected.norm());
      }
    }
  }
}

TEST_CASE("a map of the wrong dtype names the tensor, its dtype and the requested type") {
  const io::Checkpoint bf16(models + "tiny-qwen3-untied");
  const io::TensorView& norm = *bf16.find("model.norm.weight");
  const std::string msg = error_text([&] { (void)eigen::map<float>(norm); });
  CHECK(msg.find("model.norm.weight") != std::string::npos);
  CHECK(msg.find("model.safetensors") != std::string::npos);  // the file it lives in
  CHECK(msg.find("BF16") != std::string::npos);
  CHECK(msg.find("cannot be viewed as float") != std::string::npos);
  CHECK(msg.find("Eigen::bfloat16") != std::string::npos);  // the type that would work
  CHECK(error_text([&] { (void)eigen::map<Eigen::half>(norm); }).find("as Eigen::half") != std::string::npos);

  const io::Checkpoint f32(models + "small-qwen2-f32");
  const std::string f32_msg = error_text([&] { (void)eigen::map<Eigen::bfloat16>(*f32.find("model.norm.weight")); });
  CHECK(f32_msg.find("F32 cannot be viewed as Eigen::bfloat16") != std::string::npos);

  const ModelWeights w = bind_weights(bf16, load_model_config(models + "tiny-qwen3-untied"));
  const std::string weight_msg = error_text([&] { (void)eigen::map<Eigen::half>(w.layers[0].up_proj); });
  CHECK(weight_msg.find("weight [128,64]") != std::string::npos);
  CHECK(weight_msg.find("BF16 cannot be viewed as Eigen::half") != std::string::npos);
  CHECK(error_text([] { (void)eigen::map<float>(kernels::MatRef{}); }).find("not bound") != std::string::npos);
}

TEST_CASE("1-D tensors map as a row or a column vector, rank 0 as 1x1, rank 3 and non-float dtypes are refused by name") {
  const auto bytes = safetensors_bytes({{"vec", DType::f32, {5}},
                                        {"scalar", DType::bf16, {}},
                                        {"cube", DType::f16, {2, 3, 4}},
                                        {"ids", DType::i64, {4}}});
  const io::SafetensorsFile file("mem.safetensors", bytes);
  const io::TensorView& vec = *file.find("vec");
  const auto row = eigen::map<float>(vec);
  const auto col = eigen::map<float>(vec, eigen::VectorAs::column);
  CHECK((row.rows() == 1 && row.cols() == 5));
  CHECK((col.rows() == 5 && col.cols() == 1));
  CHECK(row.data() == col.data());
  const auto s = eigen::map<Eigen::bfloat16>(*file.find("scalar"));
  CHECK((s.rows() == 1 && s.cols() == 1));

  const std::string rank = error_text([&] { (void)eigen::map<Eigen::half>(*file.find("cube")); });
  CHECK(rank.find("mem.safetensors: cube") != std::string::npos);
  CHECK(rank.find("rank 3 tensor [2,3,4] has no matrix view") != std::string::npos);
  const std::string ids = error_text([&] { (void)eigen::visit(*file.find("ids"), [](auto m) { return m.rows(); }); });
  CHECK(ids.find("ids") != std::string::npos);
  CHECK(ids.find("I64 has no Eigen view") != std::string::npos);
  CHECK(error_text([&] { (void)eigen::map<float>(*file.find("ids")); }).find("I64 cannot be viewed as float") != std::string::npos);
}

TEST_CASE("a weight packed in panels (the CPU backend's layout) has no map: the error says so and names the way out") {
  const std::uint16_t storage[16 * 2] = {};
  const kernels::MatRef packed{DType::bf16, storage, 16, 2, kernels::Layout::panels};
  const std::string what = error_text([&] { (void)eigen::map<Eigen::bfloat16>(packed); });
  CHECK(what.find("panels") != std::string::npos);
  CHECK(what.find("WeightLayout::stored") != std::string::npos);
}

TEST_CASE("a weight whose data is not aligned to its element size is refused, not read misaligned") {
  alignas(4) std::uint16_t storage[4] = {};
  const kernels::MatRef odd{DType::bf16, reinterpret_cast<const std::byte*>(storage) + 1, 1, 2};
  CHECK(error_text([&] { (void)eigen::map<Eigen::bfloat16>(odd); }).find("not aligned to 2 bytes") != std::string::npos);
}

TEST_CASE("map_rows views a float buffer as [rows, size/rows] in place, writable only when the buffer is") {
  std::vector<float> buf(12);
  auto m = eigen::map_rows(buf, 3);
  static_assert(std::is_same_v<decltype(m), eigen::MatrixMap<float>>);
  CHECK((m.rows() == 3 && m.cols() == 4));
  CHECK(m.data() == buf.data());
  m(2, 1) = 5.f;  // row-major: element 2 * 4 + 1
  CHECK(buf[9] == 5.f);
  const std::vector<float>& cbuf = buf;
  const auto c = eigen::map_rows(cbuf, 2);
  static_assert(std::is_same_v<std::remove_const_t<decltype(c)>, eigen::ConstMatrixMap<float>>);
  CHECK(c(1, 3) == 5.f);
  const auto s = eigen::map_rows(std::span<const float>(buf).subspan(4), 1);
  CHECK((s.rows() == 1 && s.cols() == 8 && s(0, 5) == 5.f));
  CHECK(error_text([&] { (void)eigen::map_rows(buf, 5); }).find("12 floats does not split into 5 equal rows") != std::string::npos);
  CHECK(error_text([&] { (void)eigen::map_rows(buf, 0); }).find("0 equal rows") != std::string::npos);
}

TEST_CASE("row r of the mapped [tokens, vocab] logits is the last-position logits of the first r+1 tokens") {
  Model model = Model::load(models + "tiny-qwen3-untied", {.threads = 1});
  const std::vector<int> tokens = {3, 17, 42, 99, 5};
  const auto V = static_cast<std::size_t>(model.vocab_size());
  std::vector<float> logits(tokens.size() * V);
  auto cache = model.new_cache(64);
  model.forward(tokens, cache, logits, Positions::all);
  const auto L = eigen::map_rows(logits, static_cast<std::int64_t>(tokens.size()));
  REQUIRE(L.cols() == model.vocab_size());
  for (std::size_t r = 0; r < tokens.size(); ++r) {
    CAPTURE(r);
    auto prefix_cache = model.new_cache(64);
    std::vector<float> last = model.logits_last(std::span(tokens).first(r + 1), prefix_cache);
    const auto expected = eigen::map_rows(last, 1);
    CHECK((L.row(static_cast<Eigen::Index>(r)) - expected).norm() <= 1e-5f * expected.norm());
  }
}
