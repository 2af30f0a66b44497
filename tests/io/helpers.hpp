// Test helpers for the loading layer: safetensors bytes built in memory, temporary model
// directories, and "which error did this throw" checks.
#pragma once

#include <doctest/doctest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/temp_dir.hpp"
#include "kylin/core/error.hpp"

namespace kylin::test {

// u64 little-endian header length, the header text, then `data` (the data section).
inline std::vector<std::byte> safetensors_bytes(std::string_view header, const std::vector<std::byte>& data = {},
                                                std::uint64_t header_len = UINT64_MAX) {
  if (header_len == UINT64_MAX) header_len = header.size();
  std::vector<std::byte> out(8);
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<std::byte>((header_len >> (8 * i)) & 0xFF);
  for (char c : header) out.push_back(static_cast<std::byte>(c));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// `n` bytes counting up from `seed`, so copies can be compared byte for byte.
inline std::vector<std::byte> pattern_bytes(std::size_t n, unsigned seed = 1) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 7 + seed) & 0xFF);
  return v;
}

// A JSON tensor entry: "name":{"dtype":..,"shape":[..],"data_offsets":[b,e]}
inline std::string tensor_entry(std::string_view name, std::string_view dtype, std::string_view shape, std::size_t begin,
                                std::size_t end) {
  std::string s = "\"";  // appended piecewise: GCC 12's -Wrestrict misfires on "literal" + std::string
  s.append(name).append("\":{\"dtype\":\"").append(dtype).append("\",\"shape\":").append(shape);
  s.append(",\"data_offsets\":[").append(std::to_string(begin)).append(",").append(std::to_string(end)).append("]}");
  return s;
}

inline void write_file(const std::filesystem::path& path, const std::vector<std::byte>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(f.good());
}

inline void write_file(const std::filesystem::path& path, std::string_view text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  REQUIRE(f.good());
}

// The kylin::Error text `fn` throws; fails the test when it throws nothing or another type.
inline std::string error_text(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const kylin::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("threw a non-kylin exception: " << e.what());
    return {};
  }
  FAIL("expected a kylin::Error, nothing was thrown");
  return {};
}

inline bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

}  // namespace kylin::test
