// NFC normalization (UAX #15), the normalizer of Qwen's tokenizer.json: quick check first
// (almost all text is already NFC), else canonical decomposition, canonical ordering and
// canonical composition, Hangul included. Input must be valid UTF-8.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/tokenizer/unicode.hpp"

namespace kylin::detail {

namespace hangul {
inline constexpr char32_t s_base = 0xAC00, l_base = 0x1100, v_base = 0x1161, t_base = 0x11A7;
inline constexpr char32_t l_count = 19, v_count = 21, t_count = 28, n_count = v_count * t_count,
                          s_count = l_count * n_count;
}  // namespace hangul

// NFC_QC = Yes for every code point and canonical order holds: the text is its own NFC.
inline bool is_nfc_quick(std::string_view s) {
  namespace t = unicode_tables;
  std::uint8_t last_ccc = 0;
  for (std::size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      last_ccc = 0;
      ++i;
      continue;
    }
    std::size_t len = 0;
    const char32_t cp = decode_utf8(s, i, len);
    i += len;
    const std::uint8_t f = code_point_flags(cp);
    if (f & t::nfc_unsure) return false;
    const std::uint8_t ccc = (f & t::ccc_nonzero) ? combining_class(cp) : 0;
    if (ccc != 0 && last_ccc > ccc) return false;
    last_ccc = ccc;
  }
  return true;
}

inline void decompose_canonical(char32_t cp, std::vector<char32_t>& out) {
  using namespace hangul;
  if (cp >= s_base && cp < s_base + s_count) {
    const char32_t index = cp - s_base;
    out.push_back(l_base + index / n_count);
    out.push_back(v_base + (index % n_count) / t_count);
    if (index % t_count != 0) out.push_back(t_base + index % t_count);
    return;
  }
  const auto& d = unicode_tables::decompositions;
  auto it = std::lower_bound(std::begin(d), std::end(d), cp, [](const auto& e, char32_t c) { return e.cp < c; });
  if (it == std::end(d) || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  for (std::size_t k = 0; k < it->length; ++k) out.push_back(unicode_tables::decomp_data[it->offset + k]);
}

// The primary composite of (a, b), or 0 when there is none.
inline char32_t compose_pair(char32_t a, char32_t b) {
  using namespace hangul;
  if (a >= l_base && a < l_base + l_count && b >= v_base && b < v_base + v_count)
    return s_base + ((a - l_base) * v_count + (b - v_base)) * t_count;
  if (a >= s_base && a < s_base + s_count && (a - s_base) % t_count == 0 && b > t_base && b < t_base + t_count)
    return a + (b - t_base);
  const auto& c = unicode_tables::compositions;
  auto it = std::lower_bound(std::begin(c), std::end(c), std::pair{a, b}, [](const auto& e, const auto& key) {
    return e.first != key.first ? e.first < key.first : e.second < key.second;
  });
  return it != std::end(c) && it->first == a && it->second == b ? it->composite : 0;
}

inline std::string nfc_full(std::string_view s) {
  std::vector<char32_t> cps;
  cps.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    std::size_t len = 0;
    decompose_canonical(decode_utf8(s, i, len), cps);
    i += len;
  }
  std::vector<std::uint8_t> ccc(cps.size());
  for (std::size_t i = 0; i < cps.size(); ++i) ccc[i] = combining_class(cps[i]);
  // Canonical ordering: a stable sort by class of every run of non-starters.
  for (std::size_t i = 0; i < cps.size();) {
    if (ccc[i] == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < cps.size() && ccc[j] != 0) ++j;
    for (std::size_t a = i + 1; a < j; ++a)  // insertion sort: runs are short
      for (std::size_t b = a; b > i && ccc[b - 1] > ccc[b]; --b) {
        std::swap(ccc[b - 1], ccc[b]);
        std::swap(cps[b - 1], cps[b]);
      }
    i = j;
  }
  // Canonical composition: a character joins the last starter unless blocked by a character
  // between them of class 0 or of class >= its own.
  std::string out;
  out.reserve(s.size());
  std::size_t kept = 0, starter = 0;
  bool have_starter = false;
  int last_class = -1;  // class of the last kept character after the starter; -1: none
  for (std::size_t i = 0; i < cps.size(); ++i) {
    const char32_t cp = cps[i];
    const int cls = ccc[i];
    if (have_starter && (last_class == -1 || last_class < cls)) {
      if (char32_t composite = compose_pair(cps[starter], cp)) {
        cps[starter] = composite;
        continue;
      }
    }
    if (cls == 0) {
      starter = kept;
      have_starter = true;
      last_class = -1;
    } else {
      last_class = cls;
    }
    cps[kept++] = cp;
  }
  for (std::size_t i = 0; i < kept; ++i) append_utf8(out, cps[i]);
  return out;
}

}  // namespace kylin::detail

namespace kylin {

// NFC of valid UTF-8 text.
inline std::string nfc(std::string_view s) { return detail::is_nfc_quick(s) ? std::string(s) : detail::nfc_full(s); }

}  // namespace kylin
