// Python str methods that chat templates call (strip, split, replace, startswith, case changes),
// by code point. Case mapping covers ASCII only; other characters keep their case.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/chat/ops.hpp"

namespace kylin::jinja::detail {

// str.strip/lstrip/rstrip: `chars` absent strips whitespace, present strips those code points.
inline std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::u32string cps = decode_utf8(s);
  const std::u32string set = chars ? decode_utf8(*chars) : std::u32string();
  auto strip_me = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_space(c); };
  std::size_t b = 0, e = cps.size();
  while (left && b < e && strip_me(cps[b])) ++b;
  while (right && e > b && strip_me(cps[e - 1])) --e;
  return encode_utf8(std::u32string_view(cps).substr(b, e - b));
}

// str.split(sep=None, maxsplit=-1).
inline std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, std::int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) fail("empty separator");
    std::size_t pos = 0;
    for (std::size_t hit; (maxsplit < 0 || static_cast<std::int64_t>(out.size()) < maxsplit) &&
                          (hit = s.find(*sep, pos)) != std::string_view::npos;
         pos = hit + sep->size())
      out.emplace_back(s.substr(pos, hit - pos));
    out.emplace_back(s.substr(pos));
    return out;
  }
  const std::u32string cps = decode_utf8(s);
  std::size_t i = 0;
  while (true) {
    while (i < cps.size() && is_space(cps[i])) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) == maxsplit) {
      std::size_t e = cps.size();
      while (e > i && is_space(cps[e - 1])) --e;  // the rest, trailing whitespace removed
      out.push_back(encode_utf8(std::u32string_view(cps).substr(i, e - i)));
      break;
    }
    std::size_t j = i;
    while (j < cps.size() && !is_space(cps[j])) ++j;
    out.push_back(encode_utf8(std::u32string_view(cps).substr(i, j - i)));
    i = j;
  }
  return out;
}

inline std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, std::int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts `repl` around every character
    const std::u32string cps = decode_utf8(s);
    std::int64_t n = 0;
    for (std::size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || n < count) out += repl, ++n;
      if (i < cps.size()) out += encode_utf8(std::u32string_view(cps).substr(i, 1));
    }
    return out;
  }
  std::size_t pos = 0;
  for (std::int64_t n = 0; count < 0 || n < count; ++n) {
    const std::size_t hit = s.find(old, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(repl);
    pos = hit + old.size();
    if (out.size() > kMaxStringBytes) fail("string result too large");
  }
  out.append(s.substr(pos));
  return out;
}

inline char ascii_upper(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 32) : c; }
inline char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }
inline bool is_cased(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80; }

inline std::string py_upper(std::string s) {
  for (char& c : s) c = ascii_upper(c);
  return s;
}
inline std::string py_lower(std::string s) {
  for (char& c : s) c = ascii_lower(c);
  return s;
}
// str.title(): upper after an uncased character, lower after a cased one.
inline std::string py_title(std::string s) {
  bool prev_cased = false;
  for (char& c : s) {
    const auto u = static_cast<unsigned char>(c);
    if ((u & 0xC0) == 0x80) continue;  // UTF-8 continuation byte
    c = prev_cased ? ascii_lower(c) : ascii_upper(c);
    prev_cased = is_cased(u);
  }
  return s;
}
inline std::string py_capitalize(std::string s) {
  s = py_lower(std::move(s));
  if (!s.empty()) s[0] = ascii_upper(s[0]);
  return s;
}
// Jinja's |title: each word (split at whitespace, '-', and opening brackets) capitalized.
inline std::string jinja_title(const std::string& s) {
  std::string out;
  bool at_word_start = true;
  for (char c : s) {
    const bool sep = std::string_view(" \t\n\r\f\v-({[<").find(c) != std::string_view::npos;
    out += sep ? c : at_word_start ? ascii_upper(c) : ascii_lower(c);
    at_word_start = sep;
  }
  return out;
}

}  // namespace kylin::jinja::detail
