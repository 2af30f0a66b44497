// Python's int(), float() and a subset of ast.literal_eval, as vLLM's qwen3_coder tool parser
// applies them to the text of a parameter (tool_calls_xml.hpp): models trained on Python-rendered
// templates write {'a': 1}, True and None. Each gives nothing where Python would raise.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kylin/core/json.hpp"
#include "kylin/core/utf8.hpp"

namespace kylin::server::detail {

inline std::string_view strip_ascii_space(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r\n\f\v");
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t\r\n\f\v") - first + 1);
}

// Decimal digits with single underscores between them (Python's digitpart); returns the digits.
inline std::optional<std::string> digit_part(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && s[i - 1] != '_') continue;
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
    out += s[i];
  }
  if (out.empty()) return std::nullopt;
  return out;
}

// int(text): the integer's canonical JSON text (any size), or nothing.
inline std::optional<std::string> python_int(std::string_view text) {
  std::string_view s = strip_ascii_space(text);
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) negative = s[0] == '-', s.remove_prefix(1);
  auto digits = digit_part(s);
  if (!digits) return std::nullopt;
  const std::size_t nz = digits->find_first_not_of('0');
  if (nz == std::string::npos) return std::string("0");
  return (negative ? "-" : "") + digits->substr(nz);
}

// Python's float() syntax (digit parts with underscores, an optional fraction and exponent)
// read as a double; nothing for other text and for inf and nan, which no JSON number holds.
inline std::optional<double> finite_float(std::string_view text) {
  std::string_view s = strip_ascii_space(text);
  std::string plain;  // sign, mantissa and exponent without underscores
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) plain += s[0], s.remove_prefix(1);
  const std::size_t e = s.find_first_of("eE");
  const std::string_view mantissa = s.substr(0, e);
  const std::size_t dot = mantissa.find('.');
  const std::string_view whole = mantissa.substr(0, dot), frac = dot == std::string_view::npos ? "" : mantissa.substr(dot + 1);
  if (whole.empty() && frac.empty()) return std::nullopt;
  for (const auto& [part, lead] : {std::pair{whole, ""}, std::pair{frac, "."}}) {
    if (part.empty()) continue;
    const auto d = digit_part(part);
    if (!d) return std::nullopt;
    plain += lead + *d;
  }
  if (whole.empty()) plain.insert(plain.find('.'), "0");
  if (e != std::string_view::npos) {
    std::string_view ex = s.substr(e + 1);
    std::string sign;
    if (!ex.empty() && (ex[0] == '+' || ex[0] == '-')) sign = ex[0], ex.remove_prefix(1);
    const auto d = digit_part(ex);
    if (!d) return std::nullopt;
    plain += "e" + sign + *d;
  }
  double v = 0;
  const auto r = std::from_chars(plain.data(), plain.data() + plain.size(), v);
  if (r.ec != std::errc() || r.ptr != plain.data() + plain.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// float(text) as vLLM uses it: an integral value becomes an integer (Python's int(float):
// 3.0 -> 3, 1e3 -> 1000). The JSON text, or nothing.
inline std::optional<std::string> python_float(std::string_view text) {
  const auto v = finite_float(text);
  if (!v) return std::nullopt;
  if (*v != std::trunc(*v)) return json::dump(json::Value(*v));
  if (std::fabs(*v) < 9.2e18) return std::to_string(static_cast<std::int64_t>(*v));
  char buf[400];  // a double's integer digits (at most 309)
  const auto r = std::to_chars(buf, buf + sizeof buf, *v, std::chars_format::fixed);
  return std::string(buf, r.ptr);
}

// ast.literal_eval over numbers, strings ('', "", triple-quoted, u/r prefixes, adjacent ones
// joined), True/False/None, lists, tuples (-> arrays) and dicts with str, int, bool or None keys
// (-> their json.dumps key text). Sets, bytes, complex numbers and non-finite floats: nothing.
class PythonLiteral {
 public:
  static std::optional<json::Value> parse(std::string_view text) {
    PythonLiteral p(text);
    auto v = p.value(0);
    p.space();
    if (!v || p.i_ != p.s_.size()) return std::nullopt;
    return v;
  }

 private:
  explicit PythonLiteral(std::string_view s) : s_(s) {}
  static constexpr int max_depth = 64;

  void space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\f')) ++i_;
  }
  bool eat(char c) {
    space();
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  bool word(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) return false;
    const std::size_t end = i_ + w.size();
    if (end < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[end])) || s_[end] == '_')) return false;
    i_ = end;
    return true;
  }

  std::optional<json::Value> value(int depth) {
    if (depth > max_depth) return std::nullopt;
    space();
    if (i_ >= s_.size()) return std::nullopt;
    const char c = s_[i_];
    if (c == '[') return ++i_, sequence(']', depth);
    if (c == '(') return ++i_, parenthesized(depth);
    if (c == '{') return ++i_, dict(depth);
    if (word("True")) return json::Value(true);
    if (word("False")) return json::Value(false);
    if (word("None")) return json::Value();
    if (c == '\'' || c == '"' || ((c == 'u' || c == 'U' || c == 'r' || c == 'R') && i_ + 1 < s_.size() && (s_[i_ + 1] == '\'' || s_[i_ + 1] == '"')))
      return strings();
    return number();
  }

  std::optional<json::Value> sequence(char close, int depth) {
    json::Value out = json::Array{};
    for (;;) {
      if (eat(close)) return out;
      auto v = value(depth + 1);
      if (!v) return std::nullopt;
      out.push_back(std::move(*v));
      if (eat(close)) return out;
      if (!eat(',')) return std::nullopt;
    }
  }

  // (x) is x; (), (x,) and (x, y) are tuples.
  std::optional<json::Value> parenthesized(int depth) {
    if (eat(')')) return json::Value(json::Array{});
    auto first = value(depth + 1);
    if (!first) return std::nullopt;
    if (eat(')')) return first;
    if (!eat(',')) return std::nullopt;
    auto rest = sequence(')', depth);
    if (!rest) return std::nullopt;
    json::Value out = json::Array{std::move(*first)};
    for (const json::Value& v : rest->as_array()) out.push_back(v);
    return out;
  }

  std::optional<json::Value> dict(int depth) {
    json::Value out = json::Object{};
    for (;;) {
      if (eat('}')) return out;
      auto k = value(depth + 1);
      if (!k || !eat(':')) return std::nullopt;  // a set ({1, 2}) is no JSON value
      std::string key;
      if (k->is_string()) key = k->as_string();
      else if (k->is_int() || k->is_bool() || k->is_null()) key = json::dump(*k);  // json.dumps' key text
      else return std::nullopt;
      auto v = value(depth + 1);
      if (!v) return std::nullopt;
      out.set(key, std::move(*v));
      if (eat('}')) return out;
      if (!eat(',')) return std::nullopt;
    }
  }

  std::optional<json::Value> strings() {
    std::string out;
    bool any = false;
    for (;;) {
      space();
      if (i_ >= s_.size()) break;
      bool raw = false;
      if (s_[i_] == 'u' || s_[i_] == 'U' || s_[i_] == 'r' || s_[i_] == 'R') {
        if (i_ + 1 >= s_.size() || (s_[i_ + 1] != '\'' && s_[i_ + 1] != '"')) break;
        raw = s_[i_] == 'r' || s_[i_] == 'R';
        ++i_;
      } else if (s_[i_] != '\'' && s_[i_] != '"') {
        break;
      }
      if (!string_body(raw, out)) return std::nullopt;
      any = true;
    }
    if (!any) return std::nullopt;
    return json::Value(std::move(out));
  }

  bool string_body(bool raw, std::string& out) {
    const char q = s_[i_];
    const bool triple = s_.substr(i_, 3) == std::string(3, q);
    i_ += triple ? 3 : 1;
    while (i_ < s_.size()) {
      if (triple ? s_.substr(i_, 3) == std::string(3, q) : s_[i_] == q) return i_ += triple ? 3 : 1, true;
      const char c = s_[i_++];
      if (c == '\n' && !triple) return false;
      if (c != '\\' || raw) {
        out += c;
        if (c == '\\' && i_ < s_.size()) out += s_[i_++];  // r"\'" keeps both characters
        continue;
      }
      if (i_ >= s_.size() || !escape(out)) return false;
    }
    return false;
  }

  bool escape(std::string& out) {
    const char e = s_[i_++];
    const char* simple = "\\\\''\"\"a\ab\bf\fn\nr\rt\tv\v";
    for (const char* p = simple; *p; p += 2)
      if (e == p[0]) return out += p[1], true;
    if (e == '\n') return true;  // a line continuation
    if (e >= '0' && e <= '7') {
      unsigned v = static_cast<unsigned>(e - '0');
      for (int k = 0; k < 2 && i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '7'; ++k) v = v * 8 + static_cast<unsigned>(s_[i_++] - '0');
      kylin::detail::append_utf8(out, v);
      return true;
    }
    const int n = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (n == 0) return out += '\\', out += e, true;  // unknown escapes stay as written
    unsigned v = 0;
    if (i_ + static_cast<std::size_t>(n) > s_.size() ||
        std::from_chars(s_.data() + i_, s_.data() + i_ + n, v, 16).ptr != s_.data() + i_ + n)
      return false;
    i_ += static_cast<std::size_t>(n);
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return false;  // no text in UTF-8
    kylin::detail::append_utf8(out, v);
    return true;
  }

  // A number with an optional sign: Python's int literals (decimal without leading zeros, 0x,
  // 0o, 0b) and floats; a j suffix (complex) is none.
  std::optional<json::Value> number() {
    const std::size_t start = i_;
    if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) {
      ++i_;
      space();
    }
    const std::size_t body = i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_' || s_[i_] == '.' ||
                              ((s_[i_] == '+' || s_[i_] == '-') && (s_[i_ - 1] == 'e' || s_[i_ - 1] == 'E'))))
      ++i_;
    const std::string_view token = s_.substr(body, i_ - body);
    const bool negative = s_[start] == '-';
    if (token.empty()) return std::nullopt;
    if (token.size() > 2 && token[0] == '0' && std::string_view("xXoObB").find(token[1]) != std::string_view::npos) {
      const int base = token[1] == 'x' || token[1] == 'X' ? 16 : token[1] == 'o' || token[1] == 'O' ? 8 : 2;
      std::string digits;
      for (char c : token.substr(2)) if (c != '_') digits += c;
      std::int64_t v = 0;
      if (digits.empty() || std::from_chars(digits.data(), digits.data() + digits.size(), v, base).ptr != digits.data() + digits.size())
        return std::nullopt;
      return json::Value(negative ? -v : v);
    }
    if (token.find_first_of(".eE") == std::string_view::npos) {
      auto digits = digit_part(token);
      if (!digits || (digits->size() > 1 && (*digits)[0] == '0' && digits->find_first_not_of('0') != std::string::npos)) return std::nullopt;
      std::int64_t v = 0;
      if (std::from_chars(digits->data(), digits->data() + digits->size(), v).ec == std::errc()) return json::Value(negative ? -v : v);
    }
    const auto d = finite_float(token);  // also an integer beyond 64 bits, as the nearest double
    if (!d) return std::nullopt;
    return json::Value(negative ? -*d : *d);
  }

  std::string_view s_;
  std::size_t i_ = 0;
};

inline std::optional<json::Value> python_literal(std::string_view text) { return PythonLiteral::parse(text); }

}  // namespace kylin::server::detail
