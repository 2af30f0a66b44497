// safetensors reader: validates the header of one mmap'd file and exposes its tensors as
// zero-copy views. Every malformed input is a kylin::Error naming the file and the tensor.
// Format: u64 little-endian header length N, N bytes of JSON, then the data section.
#pragma once

#include <simdjson.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <unordered_set>
#include <vector>

#include "kylin/core/dtype.hpp"
#include "kylin/core/error.hpp"
#include "kylin/io/mapped_file.hpp"

namespace kylin::io {

// A tensor inside a mapped file. `data` stays valid while the owning SafetensorsFile lives.
struct TensorView {
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  const std::byte* data = nullptr;
  std::size_t nbytes = 0;
  std::size_t offset = 0;    // within the data section
  const std::string* file = nullptr;  // path of the file it lives in, for error messages

  std::int64_t numel() const {
    return std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
  }
  template <class T>
  const T* as() const { return reinterpret_cast<const T*>(data); }
};

inline std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);
  }
  s += ']';
  return s;
}

// Larger headers are refused before parsing: real checkpoints need well under 1 MB.
inline constexpr std::uint64_t max_header_bytes = 100u * 1000u * 1000u;

namespace detail {

inline std::uint64_t read_u64_le(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(p[i]);
  return v;
}

// Parses the JSON header (already length-checked) into views over `data_section`.
class HeaderParser {
 public:
  HeaderParser(const std::string& file, std::span<const std::byte> data_section)
      : file_(file), data_(data_section) {}

  void parse(std::string_view json, std::vector<TensorView>& out, std::map<std::string, std::string>& metadata) {
    simdjson::dom::parser parser;
    simdjson::dom::object root;
    if (auto err = parser.parse(simdjson::padded_string(json)).get(root))
      fail("header", std::string("invalid JSON header: ") + simdjson::error_message(err));
    std::unordered_set<std::string> seen;  // a set: a hostile header may hold millions of keys
    for (auto field : root) {
      std::string key(field.key);
      if (!seen.insert(key).second) fail(key, "duplicate tensor name in header");
      if (key == "__metadata__") {
        parse_metadata(field.value, metadata);
        continue;
      }
      out.push_back(parse_tensor(key, field.value));
    }
    check_overlaps(out);
  }

 private:
  [[noreturn]] void fail(const std::string& what, const std::string& message) const {
    throw Error(ErrorCategory::load, file_ + ": " + what, message);
  }

  void parse_metadata(simdjson::dom::element value, std::map<std::string, std::string>& metadata) {
    if (value.is_null()) return;  // some writers emit "__metadata__": null
    simdjson::dom::object obj;
    if (value.get(obj)) fail("__metadata__", "must be an object of strings");
    for (auto f : obj) {
      std::string_view s;
      if (f.value.get(s)) fail("__metadata__." + std::string(f.key), "metadata values must be strings");
      metadata[std::string(f.key)] = std::string(s);
    }
  }

  TensorView parse_tensor(const std::string& name, simdjson::dom::element value) {
    simdjson::dom::object obj;
    if (value.get(obj)) fail(name, "tensor entry must be an object");
    std::string_view dtype_str;
    simdjson::dom::array shape_arr, offsets_arr;
    bool has_dtype = false, has_shape = false, has_offsets = false;
    for (auto f : obj) {
      if (f.key == "dtype") {
        if (f.value.get(dtype_str)) fail(name, "\"dtype\" must be a string");
        has_dtype = true;
      } else if (f.key == "shape") {
        if (f.value.get(shape_arr)) fail(name, "\"shape\" must be an array");
        has_shape = true;
      } else if (f.key == "data_offsets") {
        if (f.value.get(offsets_arr)) fail(name, "\"data_offsets\" must be an array");
        has_offsets = true;
      } else {
        fail(name, "unexpected field \"" + std::string(f.key) + "\"");
      }
    }
    if (!has_dtype) fail(name, "missing field \"dtype\"");
    if (!has_shape) fail(name, "missing field \"shape\"");
    if (!has_offsets) fail(name, "missing field \"data_offsets\"");

    TensorView t;
    t.name = name;
    t.file = &file_;
    auto dtype = parse_dtype(dtype_str);
    if (!dtype) fail(name, "unknown dtype \"" + std::string(dtype_str) + "\"");
    t.dtype = *dtype;

    // Shape product is checked for overflow: a hostile header must not wrap it into a small size.
    std::uint64_t numel = 1;
    for (auto dim : shape_arr) {
      std::uint64_t d;
      if (dim.get(d)) fail(name, "shape entries must be non-negative integers");
      if (d != 0 && numel > (std::uint64_t{1} << 62) / d) fail(name, "shape product overflows");
      numel *= d;
      t.shape.push_back(static_cast<std::int64_t>(d));
    }
    std::vector<std::uint64_t> offs;
    for (auto o : offsets_arr) {
      std::uint64_t v;
      if (o.get(v)) fail(name, "data_offsets entries must be non-negative integers");
      offs.push_back(v);
    }
    if (offs.size() != 2) fail(name, "data_offsets must have exactly two entries [begin, end]");
    if (offs[0] > offs[1]) fail(name, "data_offsets begin " + std::to_string(offs[0]) + " > end " + std::to_string(offs[1]));
    if (offs[1] > data_.size())
      fail(name, "data_offsets [" + std::to_string(offs[0]) + "," + std::to_string(offs[1]) +
                     "] outside the data section of " + std::to_string(data_.size()) + " bytes");
    // numel <= 2^62 can still wrap when multiplied by an 8-byte dtype size.
    if (numel > UINT64_MAX / dtype_size(t.dtype)) fail(name, "shape product overflows");
    const std::uint64_t expected = numel * dtype_size(t.dtype);
    if (expected != offs[1] - offs[0])
      fail(name, "shape " + shape_string(t.shape) + " x " + std::string(dtype_name(t.dtype)) + " needs " +
                     std::to_string(expected) + " bytes, data_offsets span " + std::to_string(offs[1] - offs[0]));
    t.offset = offs[0];
    t.nbytes = offs[1] - offs[0];
    t.data = data_.data() + offs[0];
    return t;
  }

  void check_overlaps(const std::vector<TensorView>& tensors) const {
    std::vector<const TensorView*> order;
    for (const auto& t : tensors)
      if (t.nbytes) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
    for (std::size_t i = 1; i < order.size(); ++i)
      if (order[i]->offset < order[i - 1]->offset + order[i - 1]->nbytes)
        fail(order[i]->name, "data overlaps tensor " + order[i - 1]->name);
  }

  const std::string& file_;
  std::span<const std::byte> data_;
};

}  // namespace detail

// One .safetensors file: the mapping plus its validated tensor table.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path, FileMemory memory = FileMemory::mapped)
      : map_(path, memory), name_(map_.path()) {
    parse();
  }
  // For tests and fuzzing: parse an in-memory buffer (the bytes must outlive this object).
  SafetensorsFile(std::string name, std::span<const std::byte> bytes) : name_(std::move(name)), bytes_(bytes) { parse(); }
  // Views point at name_ and the mapping: the object stays put (hold it by unique_ptr).
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return name_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const TensorView* find(std::string_view name) const {
    for (const auto& t : tensors_)
      if (t.name == name) return &t;
    return nullptr;
  }
  const MappedFile& mapping() const { return map_; }

 private:
  void parse() {
    if (map_.data()) bytes_ = map_.bytes();
    if (bytes_.size() < 8)
      throw Error(ErrorCategory::load, name_, "file is " + std::to_string(bytes_.size()) + " bytes, shorter than the 8-byte header length");
    const std::uint64_t n = detail::read_u64_le(bytes_.data());
    if (n > max_header_bytes)
      throw Error(ErrorCategory::load, name_, "header length " + std::to_string(n) + " is absurd (limit " + std::to_string(max_header_bytes) + ")");
    if (n > bytes_.size() - 8)
      throw Error(ErrorCategory::load, name_, "header length " + std::to_string(n) + " is larger than the file (" + std::to_string(bytes_.size()) + " bytes)");
    std::string_view json(reinterpret_cast<const char*>(bytes_.data() + 8), n);
    detail::HeaderParser(name_, bytes_.subspan(8 + n)).parse(json, tensors_, metadata_);
    realign();
  }

  // Tensors whose offset is not a multiple of their element size would be misaligned loads in
  // the kernels; such (rare) tensors get an aligned private copy, all others stay zero-copy.
  void realign() {
    for (auto& t : tensors_) {
      if (reinterpret_cast<std::uintptr_t>(t.data) % dtype_size(t.dtype) == 0) continue;
      auto& buf = copies_.emplace_back(std::make_unique<std::byte[]>(t.nbytes + 64));
      std::byte* aligned = buf.get() + (64 - reinterpret_cast<std::uintptr_t>(buf.get()) % 64) % 64;
      std::memcpy(aligned, t.data, t.nbytes);
      t.data = aligned;
    }
  }

  MappedFile map_;
  std::string name_;
  std::span<const std::byte> bytes_;
  std::vector<TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
  std::vector<std::unique_ptr<std::byte[]>> copies_;
};

}  // namespace kylin::io
