// safetensors header validation: every malformed file is a kylin::Error naming the file and
// the tensor, and well-formed files load as zero-copy views.
#include "kylin/io/safetensors.hpp"

#include <doctest/doctest.h>

#include <cstring>

#include "helpers.hpp"

using kylin::io::SafetensorsFile;
using namespace kylin::test;

namespace {

// Parses `bytes` under the name "bad.safetensors" and returns the error text.
std::string parse_error(const std::vector<std::byte>& bytes) {
  return error_text([&] { SafetensorsFile f("bad.safetensors", bytes); });
}

// One F32 [2,3] tensor "w" followed by its 24 bytes.
std::vector<std::byte> one_tensor_file(std::string_view entry_json, std::size_t data_bytes = 24) {
  return safetensors_bytes(std::string("{") + std::string(entry_json) + "}", pattern_bytes(data_bytes));
}

}  // namespace

TEST_CASE("a well-formed file exposes every tensor with dtype, shape and a view into the buffer") {
  const auto header = std::string("{\"__metadata__\":{\"format\":\"pt\"},") + tensor_entry("a", "F32", "[2,3]", 0, 24) + "," +
                      tensor_entry("b", "BF16", "[4]", 24, 32) + "}";
  const auto bytes = safetensors_bytes(header, pattern_bytes(32));
  SafetensorsFile f("ok.safetensors", bytes);
  REQUIRE(f.tensors().size() == 2);
  const auto* a = f.find("a");
  REQUIRE(a != nullptr);
  CHECK(a->dtype == kylin::DType::f32);
  CHECK(a->shape == std::vector<std::int64_t>{2, 3});
  CHECK(a->numel() == 6);
  CHECK(a->nbytes == 24);
  CHECK(*a->file == "ok.safetensors");
  const auto* b = f.find("b");
  REQUIRE(b != nullptr);
  CHECK(b->offset == 24);
  CHECK(std::memcmp(b->data, bytes.data() + 8 + header.size() + 24, 8) == 0);
  CHECK(f.metadata().at("format") == "pt");
  CHECK(f.find("missing") == nullptr);
}

TEST_CASE("a header length larger than the file is refused, naming the file and both sizes") {
  const auto bytes = safetensors_bytes("{}", {}, 1000);
  const auto msg = parse_error(bytes);
  CHECK(contains(msg, "[kylin.load] bad.safetensors"));
  CHECK(contains(msg, "header length 1000 is larger than the file (10 bytes)"));
}

TEST_CASE("an absurd header length (> 100 MB) is refused before anything is read") {
  const auto msg = parse_error(safetensors_bytes("{}", {}, 200'000'000));
  CHECK(contains(msg, "bad.safetensors"));
  CHECK(contains(msg, "header length 200000000 is absurd"));
  // The limit itself: the largest u64 is also absurd, not an overflow.
  CHECK(contains(parse_error(safetensors_bytes("{}", {}, UINT64_MAX - 1)), "is absurd"));
}

TEST_CASE("a file shorter than the 8-byte length prefix is refused, in memory and on disk") {
  std::vector<std::byte> five(5);
  CHECK(contains(parse_error(five), "bad.safetensors: file is 5 bytes, shorter than the 8-byte header length"));
  TempDir dir;
  write_file(dir / "empty.safetensors", std::vector<std::byte>{});
  const auto msg = error_text([&] { SafetensorsFile f(dir / "empty.safetensors"); });
  CHECK(contains(msg, (dir / "empty.safetensors").string() + ": file is 0 bytes"));
}

TEST_CASE("invalid JSON in the header names the file and the JSON error") {
  const auto msg = parse_error(safetensors_bytes("{\"a\": {", {}));
  CHECK(contains(msg, "bad.safetensors: header"));
  CHECK(contains(msg, "invalid JSON header"));
  CHECK(contains(parse_error(safetensors_bytes("[1,2]")), "invalid JSON header"));
}

TEST_CASE("a tensor entry missing a field is refused, naming the tensor and the field") {
  CHECK(contains(parse_error(one_tensor_file("\"w\":{\"shape\":[2,3],\"data_offsets\":[0,24]}")),
                 "bad.safetensors: w: missing field \"dtype\""));
  CHECK(contains(parse_error(one_tensor_file("\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,24]}")),
                 "bad.safetensors: w: missing field \"shape\""));
  CHECK(contains(parse_error(one_tensor_file("\"w\":{\"dtype\":\"F32\",\"shape\":[2,3]}")),
                 "bad.safetensors: w: missing field \"data_offsets\""));
}

TEST_CASE("a tensor entry with an extra field or wrongly typed fields is refused, naming the tensor") {
  CHECK(contains(parse_error(one_tensor_file(
                     "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24],\"stride\":[3,1]}")),
                 "bad.safetensors: w: unexpected field \"stride\""));
  CHECK(contains(parse_error(one_tensor_file("\"w\":[1]")), "bad.safetensors: w: tensor entry must be an object"));
  CHECK(contains(parse_error(one_tensor_file("\"w\":{\"dtype\":4,\"shape\":[2,3],\"data_offsets\":[0,24]}")),
                 "w: \"dtype\" must be a string"));
  CHECK(contains(parse_error(one_tensor_file("\"w\":{\"dtype\":\"F32\",\"shape\":[2,-3],\"data_offsets\":[0,24]}")),
                 "w: shape entries must be non-negative integers"));
  CHECK(contains(parse_error(one_tensor_file("\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0]}")),
                 "w: data_offsets must have exactly two entries"));
  CHECK(contains(parse_error(one_tensor_file("\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[24,0]}")),
                 "w: data_offsets begin 24 > end 0"));
  CHECK(contains(parse_error(safetensors_bytes("{\"__metadata__\":{\"n\":1}}")), "__metadata__.n"));
}

TEST_CASE("an unknown dtype is refused, naming the tensor and the dtype") {
  const auto msg = parse_error(one_tensor_file(tensor_entry("model.norm.weight", "F12", "[6]", 0, 24)));
  CHECK(contains(msg, "bad.safetensors: model.norm.weight: unknown dtype \"F12\""));
}

TEST_CASE("shape product x dtype size must equal the byte length of data_offsets") {
  const auto msg = parse_error(one_tensor_file(tensor_entry("w", "F32", "[2,4]", 0, 24)));
  CHECK(contains(msg, "bad.safetensors: w: shape [2,4] x F32 needs 32 bytes, data_offsets span 24"));
}

TEST_CASE("a shape whose byte size overflows 64 bits is refused instead of wrapping to a small size") {
  // 2^62 F32 elements = 2^64 bytes, which wraps to 0 and would match an empty span.
  CHECK(contains(parse_error(one_tensor_file(tensor_entry("w", "F32", "[4611686018427387904]", 0, 0))),
                 "w: shape product overflows"));
  CHECK(contains(parse_error(one_tensor_file(tensor_entry("w", "F64", "[4294967296,4294967296]", 0, 0))),
                 "w: shape product overflows"));
}

TEST_CASE("offsets outside the data section are refused, naming the tensor and the section size") {
  const auto msg = parse_error(one_tensor_file(tensor_entry("w", "F32", "[2,3]", 8, 32)));
  CHECK(contains(msg, "bad.safetensors: w: data_offsets [8,32] outside the data section of 24 bytes"));
}

TEST_CASE("overlapping tensors are refused, naming both tensors") {
  const auto header = std::string("{") + tensor_entry("first", "F32", "[4]", 0, 16) + "," + tensor_entry("second", "F32", "[2]", 8, 16) + "}";
  const auto msg = parse_error(safetensors_bytes(header, pattern_bytes(16)));
  CHECK(contains(msg, "bad.safetensors: second: data overlaps tensor first"));
  // Empty tensors occupy no bytes, so they overlap nothing.
  const auto ok = std::string("{") + tensor_entry("a", "F32", "[4]", 0, 16) + "," + tensor_entry("e", "F32", "[0]", 4, 4) + "}";
  const auto ok_bytes = safetensors_bytes(ok, pattern_bytes(16));
  CHECK_NOTHROW(SafetensorsFile("ok", ok_bytes));
}

TEST_CASE("a tensor name that appears twice in one header is refused, naming it") {
  const auto header = std::string("{") + tensor_entry("w", "F32", "[1]", 0, 4) + "," + tensor_entry("w", "F32", "[1]", 4, 8) + "}";
  CHECK(contains(parse_error(safetensors_bytes(header, pattern_bytes(8))), "bad.safetensors: w: duplicate tensor name"));
}

TEST_CASE("a tensor at a misaligned offset gets an aligned copy with identical bytes; aligned ones stay views") {
  // Data section starts at 8 + header size; pad the header so the section starts 8-aligned in the
  // buffer, then put an F32 tensor at offset 2 (misaligned) and one at offset 16 (aligned).
  std::string header = std::string("{") + tensor_entry("odd", "F32", "[3]", 2, 14) + "," + tensor_entry("even", "F32", "[2]", 16, 24) + "}";
  while ((8 + header.size()) % 8 != 0) header += ' ';
  const auto bytes = safetensors_bytes(header, pattern_bytes(24, 5));
  REQUIRE(reinterpret_cast<std::uintptr_t>(bytes.data()) % 8 == 0);  // std::vector storage is new-aligned
  const std::byte* section = bytes.data() + 8 + header.size();
  SafetensorsFile f("mis.safetensors", bytes);
  const auto* odd = f.find("odd");
  const auto* even = f.find("even");
  REQUIRE(odd != nullptr);
  REQUIRE(even != nullptr);
  CHECK(reinterpret_cast<std::uintptr_t>(odd->data) % alignof(float) == 0);
  CHECK(odd->data != section + 2);  // a copy
  CHECK(std::memcmp(odd->data, section + 2, 12) == 0);
  CHECK(even->data == section + 16);  // still a view
}

TEST_CASE("parsed but non-runnable dtypes (I8, U8, F64, I64, BOOL, F8) load fine as views") {
  std::string header = std::string("{") + tensor_entry("i8", "I8", "[3]", 0, 3) + "," + tensor_entry("u8", "U8", "[5]", 3, 8) + "," +
                       tensor_entry("f64", "F64", "[2]", 8, 24) + "," + tensor_entry("i64", "I64", "[1]", 24, 32) + "," +
                       tensor_entry("b", "BOOL", "[2]", 32, 34) + "," + tensor_entry("f8", "F8_E4M3", "[2]", 34, 36) + "}";
  while ((8 + header.size()) % 8 != 0) header += ' ';
  const auto bytes = safetensors_bytes(header, pattern_bytes(36));
  SafetensorsFile f("mixed", bytes);
  REQUIRE(f.tensors().size() == 6);
  CHECK(f.find("i8")->dtype == kylin::DType::i8);
  CHECK(f.find("u8")->dtype == kylin::DType::u8);
  CHECK(f.find("f64")->dtype == kylin::DType::f64);
  CHECK(f.find("f64")->data == bytes.data() + 8 + header.size() + 8);
  CHECK(f.find("i64")->dtype == kylin::DType::i64);
  CHECK(f.find("b")->dtype == kylin::DType::boolean);
  CHECK(f.find("f8")->dtype == kylin::DType::f8_e4m3);
  CHECK_FALSE(kylin::info(f.find("f64")->dtype).runnable);
}

TEST_CASE("an empty header object and a null __metadata__ are valid") {
  const auto empty = safetensors_bytes("{}");
  CHECK(SafetensorsFile("e", empty).tensors().empty());
  const auto null_meta = safetensors_bytes("{\"__metadata__\":null}");
  CHECK(SafetensorsFile("n", null_meta).metadata().empty());
}
