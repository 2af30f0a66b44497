// SafetensorsWriter: what it writes reads back through SafetensorsFile byte for byte, with an
// 8-byte aligned data section, {"format": "pt"} metadata, chunked writes, and misuse refused.
#include <doctest/doctest.h>

#include <cstring>

#include "helpers.hpp"
#include "kylin/io/safetensors.hpp"
#include "kylin/io/safetensors_writer.hpp"

using namespace kylin;

TEST_CASE("written tensors round-trip through the reader: names, dtypes, shapes, bytes, metadata") {
  test::TempDir dir;
  const auto path = dir.path() / "model.safetensors";
  const auto a = test::pattern_bytes(3 * 5 * 2, 1);  // BF16 [3,5]
  const auto b = test::pattern_bytes(7 * 4, 2);      // F32 [7]
  const auto c = test::pattern_bytes(1 * 8, 3);      // I64 [1]
  {
    io::SafetensorsWriter w(path, {{"layer.a", DType::bf16, {3, 5}}, {"b", DType::f32, {7}}, {"c \"quoted\"", DType::i64, {1}}});
    w.write("layer.a", std::span(a).first(10));  // in pieces, as a streaming writer would
    w.write("layer.a", std::span(a).subspan(10));
    w.write("b", std::span<const std::byte>(b));
    w.write("c \"quoted\"", std::span<const std::byte>(c));
    w.close();
  }
  io::SafetensorsFile f(path);
  REQUIRE(f.tensors().size() == 3);
  CHECK(f.metadata().at("format") == "pt");
  const io::TensorView* ta = f.find("layer.a");
  const io::TensorView* tb = f.find("b");
  const io::TensorView* tc = f.find("c \"quoted\"");
  REQUIRE((ta && tb && tc));
  CHECK(ta->dtype == DType::bf16);
  CHECK(ta->shape == std::vector<std::int64_t>{3, 5});
  CHECK(tb->shape == std::vector<std::int64_t>{7});
  CHECK(tc->dtype == DType::i64);
  CHECK(std::memcmp(ta->data, a.data(), a.size()) == 0);
  CHECK(std::memcmp(tb->data, b.data(), b.size()) == 0);
  CHECK(std::memcmp(tc->data, c.data(), c.size()) == 0);
  // the data section starts 8-byte aligned: header length + 8 is a multiple of 8
  std::ifstream in(path, std::ios::binary);
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  CHECK((n + 8) % 8 == 0);
}

TEST_CASE("zero-size tensors need no write call and still round-trip") {
  test::TempDir dir;
  const auto path = dir.path() / "empty.safetensors";
  const auto x = test::pattern_bytes(4, 9);
  io::SafetensorsWriter w(path, {{"empty", DType::f32, {0, 3}}, {"x", DType::f16, {2}}});
  w.write("x", std::span<const std::byte>(x));
  w.close();
  io::SafetensorsFile f(path);
  REQUIRE(f.find("empty"));
  CHECK(f.find("empty")->nbytes == 0);
  CHECK(std::memcmp(f.find("x")->data, x.data(), 4) == 0);
}

TEST_CASE("the writer refuses out-of-order tensors, overlong data, incomplete files and duplicate names") {
  test::TempDir dir;
  const auto path = dir.path() / "bad.safetensors";
  const auto four = test::pattern_bytes(4);
  {
    io::SafetensorsWriter w(path, {{"a", DType::f32, {1}}, {"b", DType::f32, {1}}});
    CHECK_THROWS_AS(w.write("b", std::span<const std::byte>(four)), kylin::Error);
    CHECK_THROWS_AS(w.write("a", std::span<const std::byte>(test::pattern_bytes(8))), kylin::Error);
    w.write("a", std::span<const std::byte>(four));
    CHECK_THROWS_AS(w.close(), kylin::Error);  // b never written
  }
  CHECK_THROWS_AS(io::SafetensorsWriter(path, {{"a", DType::f32, {1}}, {"a", DType::f32, {1}}}), kylin::Error);
}
