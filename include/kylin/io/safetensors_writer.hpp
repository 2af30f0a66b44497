// safetensors writer: declare every tensor (name, dtype, shape) up front, then stream each
// tensor's bytes in declaration order, in as many pieces as convenient, so a file larger than
// memory can be written. The header is padded with spaces to 8 bytes, as the reference writer does.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "kylin/core/dtype.hpp"
#include "kylin/core/error.hpp"
#include "kylin/core/json.hpp"
#include "kylin/io/safetensors.hpp"

namespace kylin::io {

struct TensorSpec {
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;

  std::size_t nbytes() const {
    const auto n = std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
    return static_cast<std::size_t>(n) * dtype_size(dtype);
  }
};

// Header alignment of the data section (the reference implementation pads to 8).
inline constexpr std::size_t safetensors_alignment = 8;

// The header JSON for `specs` laid out back to back, padded with spaces to the alignment.
inline std::string safetensors_header(const std::vector<TensorSpec>& specs, const std::map<std::string, std::string>& metadata) {
  json::Object root;
  json::Object meta;
  for (const auto& [k, v] : metadata) meta.emplace_back(k, json::Value(v));
  if (!meta.empty()) root.emplace_back("__metadata__", json::Value(std::move(meta)));
  std::size_t offset = 0;
  for (const auto& s : specs) {
    json::Array shape;
    for (std::int64_t d : s.shape) shape.emplace_back(d);
    const std::size_t end = offset + s.nbytes();
    root.emplace_back(s.name, json::Value(json::Object{{"dtype", json::Value(dtype_name(s.dtype))},
                                                       {"shape", json::Value(std::move(shape))},
                                                       {"data_offsets", json::Value(json::Array{json::Value(static_cast<std::uint64_t>(offset)),
                                                                                                json::Value(static_cast<std::uint64_t>(end))})}}));
    offset = end;
  }
  std::string header = json::dump(json::Value(std::move(root)));
  header.append((safetensors_alignment - (8 + header.size()) % safetensors_alignment) % safetensors_alignment, ' ');
  return header;
}

class SafetensorsWriter {
 public:
  // Writes the header at once; metadata defaults to {"format": "pt"} like torch-saved files.
  SafetensorsWriter(const std::filesystem::path& path, std::vector<TensorSpec> specs,
                    std::map<std::string, std::string> metadata = {{"format", "pt"}})
      : path_(path.string()), specs_(std::move(specs)), out_(path, std::ios::binary | std::ios::trunc) {
    if (!out_) throw Error(ErrorCategory::io, path_, "cannot open for writing");
    for (std::size_t i = 0; i < specs_.size(); ++i)
      for (std::size_t j = 0; j < i; ++j)
        if (specs_[i].name == specs_[j].name) throw Error(ErrorCategory::request, path_ + ": " + specs_[i].name, "duplicate tensor name");
    const std::string header = safetensors_header(specs_, metadata);
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((header.size() >> (8 * i)) & 0xFF);
    out_.write(reinterpret_cast<const char*>(len), 8);
    out_.write(header.data(), static_cast<std::streamsize>(header.size()));
    check_stream("header");
    skip_empty();
  }
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Appends bytes of tensor `name`, which must be the current tensor in declaration order.
  void write(std::string_view name, std::span<const std::byte> bytes) {
    if (current_ >= specs_.size()) throw Error(ErrorCategory::request, path_ + ": " + std::string(name), "all declared tensors are already written");
    const TensorSpec& s = specs_[current_];
    if (s.name != name)
      throw Error(ErrorCategory::request, path_ + ": " + std::string(name), "expected the bytes of '" + s.name + "' (declaration order)");
    if (written_ + bytes.size() > s.nbytes())
      throw Error(ErrorCategory::request, path_ + ": " + s.name,
                  "got " + std::to_string(written_ + bytes.size()) + " bytes, the declared shape holds " + std::to_string(s.nbytes()));
    out_.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    check_stream(s.name);
    written_ += bytes.size();
    if (written_ == s.nbytes()) {
      ++current_;
      written_ = 0;
      skip_empty();
    }
  }
  template <class T>
  void write(std::string_view name, std::span<const T> values) {
    write(name, std::as_bytes(values));
  }

  // Flushes and checks every declared byte was written.
  void close() {
    skip_empty();
    if (current_ < specs_.size())
      throw Error(ErrorCategory::request, path_ + ": " + specs_[current_].name,
                  "incomplete: " + std::to_string(written_) + " of " + std::to_string(specs_[current_].nbytes()) + " bytes written");
    out_.flush();
    check_stream("close");
    out_.close();
  }

 private:
  void skip_empty() {
    while (current_ < specs_.size() && specs_[current_].nbytes() == 0) ++current_;
  }
  void check_stream(const std::string& what) {
    if (!out_) throw Error(ErrorCategory::io, path_ + ": " + what, "write failed (disk full?)");
  }

  std::string path_;
  std::vector<TensorSpec> specs_;
  std::ofstream out_;
  std::size_t current_ = 0;  // index of the tensor being written
  std::size_t written_ = 0;  // bytes of it written so far
};

}  // namespace kylin::io
