// Python str methods that chat templates call (strip, split, replace, startswith, case changes),
// by code point. Case mapping covers ASCII only; other characters keep their case.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kylin/chat/ops.hpp"

namespace kylin::jinja::detail {

// str.strip/lstrip/rstrip as byte bounds [b, e) of `s`: `chars` absent strips whitespace,
// present strips those code points.
inline std::pair<std::size_t, std::size_t> strip_bounds(std::string_view s, const std::optional<std::string>& chars,
                                                         bool left, bool right) {
  const std::u32string set = chars ? decode_utf8(*chars) : std::u32string();
  const std::vector<std::size_t> at = codepoint_offsets(s);
  auto strip_me = [&](std::size_t k) {
    char32_t c = 0;
    next_codepoint(s, at[k], c);
    return chars ? set.find(c) != std::u32string::npos : is_space(c);
  };
  std::size_t b = 0, e = at.size() - 1;
  while (left && b < e && strip_me(b)) ++b;
  while (right && e > b && strip_me(e - 1)) --e;
  return {at[b], at[e]};
}

inline std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const auto [b, e] = strip_bounds(s, chars, left, right);
  return std::string(s.substr(b, e - b));
}

// str(v) as a string Value, keeping the taint (see TaintedText::append_value).
inline Value str_value(const Value& v) {
  if (v.is_string()) return v;
  TaintedText out;
  out.append_value(v);
  return std::move(out).value();
}

inline Value strip_value(const Value& v, const std::optional<std::string>& chars, bool left, bool right) {
  const Value s = str_value(v);
  const auto [b, e] = strip_bounds(s.as_string(), chars, left, right);
  return substring(s, b, e);
}

// str.split(sep=None, maxsplit=-1) as byte bounds of the parts.
inline std::vector<std::pair<std::size_t, std::size_t>> split_bounds(std::string_view s, const std::optional<std::string>& sep,
                                                                     std::int64_t maxsplit) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  if (sep) {
    if (sep->empty()) fail("empty separator");
    std::size_t pos = 0;
    for (std::size_t hit; (maxsplit < 0 || static_cast<std::int64_t>(out.size()) < maxsplit) &&
                          (hit = s.find(*sep, pos)) != std::string_view::npos;
         pos = hit + sep->size())
      out.emplace_back(pos, hit);
    out.emplace_back(pos, s.size());
    return out;
  }
  const std::vector<std::size_t> at = codepoint_offsets(s);
  const std::size_t n = at.size() - 1;
  auto space = [&](std::size_t k) {
    char32_t c = 0;
    next_codepoint(s, at[k], c);
    return is_space(c);
  };
  std::size_t i = 0;
  while (true) {
    while (i < n && space(i)) ++i;
    if (i == n) break;
    if (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) == maxsplit) {
      std::size_t e = n;
      while (e > i && space(e - 1)) --e;  // the rest, trailing whitespace removed
      out.emplace_back(at[i], at[e]);
      break;
    }
    std::size_t j = i;
    while (j < n && !space(j)) ++j;
    out.emplace_back(at[i], at[j]);
    i = j;
  }
  return out;
}

inline Value split_value(const Value& s, const std::optional<std::string>& sep, std::int64_t maxsplit) {
  std::vector<Value> parts;
  for (const auto& [b, e] : split_bounds(s.as_string(), sep, maxsplit)) parts.push_back(substring(s, b, e));
  return Value(std::move(parts));  // charged by the interpreter (Interpreter::built)
}

// str.replace(old, new, count); `repl` keeps its own taint where it is inserted.
inline Value replace_value(const Value& subject, std::string_view old, const Value& repl, std::int64_t count) {
  const Value sv = str_value(subject);
  const std::string& s = sv.as_string();
  TaintedText out;
  if (old.empty()) {  // Python inserts `repl` around every character
    const std::vector<std::size_t> at = codepoint_offsets(s);
    std::int64_t n = 0;
    for (std::size_t k = 0; k < at.size(); ++k) {
      if (count < 0 || n < count) out.append(repl.as_string(), repl.taint()), ++n;
      if (k + 1 < at.size()) out.append(s, sv.taint(), at[k], at[k + 1]);
      if (out.text.size() > kMaxStringBytes) fail("string result too large");
    }
    return std::move(out).value();
  }
  std::size_t pos = 0;
  for (std::int64_t n = 0; count < 0 || n < count; ++n) {
    const std::size_t hit = s.find(old, pos);
    if (hit == std::string::npos) break;
    out.append(s, sv.taint(), pos, hit);
    out.append(repl.as_string(), repl.taint());
    pos = hit + old.size();
    if (out.text.size() > kMaxStringBytes) fail("string result too large");
  }
  out.append(s, sv.taint(), pos);
  return std::move(out).value();
}

// A case change (ASCII only, so byte lengths and hence the taint ranges stay the same).
inline Value recase_value(const Value& v, std::string (*fn)(std::string)) {
  const Value s = str_value(v);
  return Value(fn(s.as_string()), s.taint());
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
inline std::string jinja_title(std::string s) {
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
