// Text helpers with Python's rules: UTF-8 <-> code points (Python strings index by code point),
// str.isspace(), float repr() and str repr(). Used by the Jinja interpreter (value.hpp).
#pragma once

#include <charconv>
#include <cmath>
#include <string>
#include <string_view>

#include "kylin/core/utf8.hpp"

namespace kylin::jinja {

namespace detail {

// One code point at s[i]; returns its byte length. Invalid bytes map to U+DC80..U+DCFF (and
// back in encode_utf8, as Python's surrogateescape does), so nothing is lost.
inline std::size_t next_codepoint(std::string_view s, std::size_t i, char32_t& cp) {
  const auto c = static_cast<unsigned char>(s[i]);
  const std::size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  bool ok = len > 0 && i + len <= s.size();
  cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
  for (std::size_t k = 1; ok && k < len; ++k) {
    const auto cc = static_cast<unsigned char>(s[i + k]);
    ok = (cc & 0xC0) == 0x80;
    cp = (cp << 6) | (cc & 0x3F);
  }
  if (ok) return len;
  cp = static_cast<char32_t>(0xDC00 + c);
  return 1;
}

inline std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    i += next_codepoint(s, i, cp);
    out += cp;
  }
  return out;
}

inline std::string encode_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) {
    if (cp >= 0xDC80 && cp <= 0xDCFF)
      out += static_cast<char>(cp - 0xDC00);  // a byte that was not UTF-8 (see next_codepoint)
    else
      kylin::detail::append_utf8(out, cp);
  }
  return out;
}

inline std::size_t codepoint_count(std::string_view s) {
  std::size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// Python's str.isspace() set.
inline bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Python float repr: shortest round-trip digits, exponent form outside 1e-4 <= |x| < 1e16.
inline std::string python_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<std::size_t>(r.ptr - buf));
  std::string sign;
  if (sci.front() == '-') {
    sign = "-";
    sci.remove_prefix(1);
  }
  const std::size_t e_pos = sci.find('e');
  std::string digits(sci.substr(0, e_pos));
  if (digits.size() > 1) digits.erase(1, 1);  // drop the '.'
  const int exponent = std::stoi(std::string(sci.substr(e_pos + 1)));
  const int decpt = exponent + 1;  // value = 0.digits * 10^decpt
  if (d == 0) return sign + "0.0";
  if (decpt <= -4 || decpt > 16) {
    std::string mantissa = digits.substr(0, 1);
    if (digits.size() > 1) mantissa += "." + digits.substr(1);
    std::string e = std::to_string(exponent < 0 ? -exponent : exponent);
    if (e.size() < 2) e = "0" + e;
    return sign + mantissa + "e" + (exponent < 0 ? "-" : "+") + e;
  }
  if (decpt <= 0) return sign + "0." + std::string(static_cast<std::size_t>(-decpt), '0') + digits;
  if (static_cast<std::size_t>(decpt) >= digits.size())
    return sign + digits + std::string(static_cast<std::size_t>(decpt) - digits.size(), '0') + ".0";
  return sign + digits.substr(0, static_cast<std::size_t>(decpt)) + "." + digits.substr(static_cast<std::size_t>(decpt));
}

// Python repr() of a str: single quotes unless the text has ' and no ".
inline std::string python_string_repr(std::string_view s) {
  const bool dq = s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos;
  const char quote = dq ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : decode_utf8(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F || (c >= 0x80 && c < 0xA0) || (c >= 0xDC80 && c <= 0xDCFF)) {
      static constexpr char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[(c >> 4) & 0xF];
      out += hex[c & 0xF];
    } else {
      out += encode_utf8(std::u32string_view(&c, 1));
    }
  }
  out += quote;
  return out;
}

}  // namespace detail

}  // namespace kylin::jinja
