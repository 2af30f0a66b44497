// UTF-8 and Unicode for the tokenizer: strict validation (encode input), lossy decoding with
// U+FFFD per maximal invalid subpart (as Rust's String::from_utf8_lossy, which HF decode uses),
// per-code-point regex classes, and NFC (UAX #15) over the tables in unicode_tables.hpp.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/core/utf8.hpp"
#include "kylin/tokenizer/unicode_tables.hpp"

namespace kylin::detail {

// Length of the valid UTF-8 sequence at s[i], or 0 when it is not one. The ranges of the
// second byte follow Table 3-7 of the Unicode standard (no overlongs, surrogates or > U+10FFFF).
// With `prefix_ok`, a truncated but so-far valid sequence at the end returns its available length.
inline std::size_t utf8_sequence_length(std::string_view s, std::size_t i, std::size_t* valid_prefix = nullptr) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return 1;
  std::size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  }
  std::size_t k = 1;
  if (len != 0) {
    for (; k < len && i + k < s.size(); ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) break;
    }
    if (k == len) return len;
  }
  if (valid_prefix) *valid_prefix = len == 0 ? 0 : k;  // bytes of a valid start before the failure
  return 0;
}

// Offset of the first invalid byte of s, or npos when s is valid UTF-8.
inline std::size_t find_invalid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const std::size_t len = utf8_sequence_length(s, i);
    if (len == 0) return i;
    i += len;
  }
  return std::string_view::npos;
}

// Appends s with every maximal invalid subpart replaced by one U+FFFD.
inline void append_utf8_lossy(std::string& out, std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    std::size_t prefix = 0;
    const std::size_t len = utf8_sequence_length(s, i, &prefix);
    if (len != 0) {
      out.append(s.data() + i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      i += prefix == 0 ? 1 : prefix;
    }
  }
}

// Decodes the code point at s[i] of already validated UTF-8; `len` receives its byte length.
inline char32_t decode_utf8(std::string_view s, std::size_t i, std::size_t& len) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    len = 1;
    return b0;
  }
  len = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
  char32_t cp = b0 & (0x7F >> len);
  for (std::size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp;
}

// Per-code-point flags (unicode_tables::letter, number, space, word, nfc_unsure, ccc_nonzero)
// in a two-stage table built once from the generated runs: 256-code-point blocks, deduplicated.
class CodePointFlags {
 public:
  static const CodePointFlags& instance() {
    static const CodePointFlags table;
    return table;
  }
  std::uint8_t operator()(char32_t cp) const {
    if (cp >= 0x110000) return 0;
    return blocks_[static_cast<std::size_t>(block_of_[cp >> 8]) * 256 + (cp & 0xFF)];
  }

 private:
  CodePointFlags() {
    namespace t = unicode_tables;
    std::array<std::uint8_t, 256> block{};
    std::map<std::array<std::uint8_t, 256>, std::uint16_t> seen;
    std::size_t run = 0;
    constexpr std::size_t n_runs = sizeof(t::flag_runs) / sizeof(t::flag_runs[0]);
    for (char32_t base = 0; base < 0x110000; base += 256) {
      for (char32_t k = 0; k < 256; ++k) {
        while (run + 1 < n_runs && t::flag_runs[run + 1].start <= base + k) ++run;
        block[k] = t::flag_runs[run].flags;
      }
      auto [it, inserted] = seen.try_emplace(block, static_cast<std::uint16_t>(seen.size()));
      if (inserted) blocks_.insert(blocks_.end(), block.begin(), block.end());
      block_of_[base >> 8] = it->second;
    }
  }
  std::array<std::uint16_t, 0x1100> block_of_{};
  std::vector<std::uint8_t> blocks_;
};

inline std::uint8_t code_point_flags(char32_t cp) { return CodePointFlags::instance()(cp); }

inline std::uint8_t combining_class(char32_t cp) {
  const auto& r = unicode_tables::ccc_ranges;
  auto it = std::upper_bound(std::begin(r), std::end(r), cp, [](char32_t c, const auto& e) { return c < e.first; });
  if (it == std::begin(r)) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

}  // namespace kylin::detail
