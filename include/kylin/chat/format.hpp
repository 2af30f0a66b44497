// Python string formatting as templates call it: `fmt % args` and `fmt|format(...)` (printf-style,
// CPython's PyUnicode_Format) and `fmt.format(...)` (str.format and its format-spec mini-language,
// as jinja2's sandboxed formatter runs it). A Markup format string escapes what it inserts.
#pragma once

#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "kylin/chat/markup.hpp"
#include "kylin/chat/ops.hpp"
#include "kylin/chat/strings.hpp"

namespace kylin::jinja::detail {

// Python's ascii(): repr() with non-ASCII code points escaped.
inline std::string python_ascii(const Value& v) {
  std::string out;
  static constexpr char hex[] = "0123456789abcdef";
  for (char32_t c : decode_utf8(repr(v))) {
    if (c < 0x80) {
      out += static_cast<char>(c);
      continue;
    }
    const int digits = c <= 0xFF ? 2 : c <= 0xFFFF ? 4 : 8;
    out += digits == 2 ? "\\x" : digits == 4 ? "\\u" : "\\U";
    for (int k = digits - 1; k >= 0; --k) out += hex[(c >> (4 * k)) & 0xF];
  }
  return out;
}

// One conversion's parsed spec (printf flags, or a str.format spec mapped onto the same fields).
struct FormatSpec {
  char fill = ' ';
  char align = 0;  // '<' '>' '^' '=', 0: the type's default
  char sign = '-';
  bool alternate = false;
  bool zero = false;
  std::int64_t width = 0;
  std::int64_t precision = -1;
  char grouping = 0;  // ',' or '_' (str.format only)
  char type = 0;
};

inline void check_width(std::int64_t w) {
  if (w > static_cast<std::int64_t>(kMaxStringBytes)) fail("format width or precision too large");
}

// Pads `body` (its sign and prefix in `head`) to spec.width code points.
inline std::string pad(std::string head, std::string body, const FormatSpec& spec, bool numeric) {
  const std::int64_t len = static_cast<std::int64_t>(codepoint_count(head) + codepoint_count(body));
  if (spec.width <= len) return head + body;
  const auto n = static_cast<std::size_t>(spec.width - len);
  const char align = spec.align ? spec.align : (spec.zero && numeric) ? '=' : numeric ? '>' : '<';
  const std::string fill(n, spec.align || !spec.zero ? spec.fill : '0');
  if (align == '<') return head + body + fill;
  if (align == '=') return head + fill + body;
  if (align == '^') return std::string(n / 2, fill[0]) + head + body + std::string(n - n / 2, fill[0]);
  return fill + head + body;
}

inline std::string group_digits(std::string digits, char sep) {
  if (!sep) return digits;
  std::string out;
  const std::size_t n = digits.size();
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0 && (n - i) % 3 == 0) out += sep;
    out += digits[i];
  }
  return out;
}

inline std::string sign_of(bool negative, char sign) {
  return negative ? "-" : sign == '+' ? "+" : sign == ' ' ? " " : "";
}

// An integer in base 2, 8, 10 or 16 ('b' 'o' 'd' 'x' 'X'), with '#' prefixes as Python writes them.
inline std::string format_int(std::int64_t v, const FormatSpec& spec, bool printf_style) {
  const char t = spec.type ? spec.type : 'd';
  const int base = t == 'b' ? 2 : t == 'o' ? 8 : (t == 'x' || t == 'X') ? 16 : 10;
  std::uint64_t u = v < 0 ? std::uint64_t{0} - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
  std::string digits;
  do {
    digits.insert(digits.begin(), "0123456789abcdef"[u % static_cast<unsigned>(base)]);
    u /= static_cast<unsigned>(base);
  } while (u);
  if (t == 'X')
    for (char& c : digits) c = ascii_upper(c);
  if (printf_style && spec.precision > static_cast<std::int64_t>(digits.size()))
    digits.insert(0, static_cast<std::size_t>(spec.precision) - digits.size(), '0');
  std::string head = sign_of(v < 0, spec.sign);
  if (spec.alternate && base != 10) head += t == 'b' ? "0b" : t == 'o' ? "0o" : t == 'X' ? "0X" : "0x";
  return pad(head, group_digits(digits, spec.grouping), spec, true);
}

// A float in 'e' 'f' 'g' (and upper-case) forms through C's printf, which rounds as Python does;
// '%' and str.format's default form are built on them.
inline std::string format_float(double d, const FormatSpec& spec) {
  char t = spec.type ? spec.type : 'r';
  const bool negative = std::signbit(d) && !std::isnan(d);
  std::string body;
  if (t == 'r' && spec.precision < 0) {
    body = python_float(std::fabs(d));
  } else {
    const bool percent = t == '%';
    const bool general = t == 'r';
    const char c = percent ? 'f' : general ? 'g' : t;
    const int prec = static_cast<int>(spec.precision < 0 ? 6 : spec.precision);
    std::string custom = spec.alternate ? "%#.*" : "%.*";
    custom += c;
    const double x = std::fabs(percent ? d * 100 : d);
    const int n = std::snprintf(nullptr, 0, custom.c_str(), prec, x);
    body.resize(static_cast<std::size_t>(n) + 1);
    std::snprintf(body.data(), body.size(), custom.c_str(), prec, x);
    body.pop_back();
    if (general && std::isfinite(d) && body.find_first_of(".e") == std::string::npos) body += ".0";
    if (percent) body += '%';
  }
  if (spec.grouping && std::isfinite(d)) {
    const std::size_t end = body.find_first_not_of("0123456789");
    body = group_digits(body.substr(0, end), spec.grouping) + (end == std::string::npos ? "" : body.substr(end));
  }
  return pad(sign_of(negative, spec.sign), body, spec, true);
}

inline std::string format_text(const std::string& s, const FormatSpec& spec) {
  std::string body = s;
  if (spec.precision >= 0) {
    const std::vector<std::size_t> at = codepoint_offsets(s);
    if (static_cast<std::size_t>(spec.precision) + 1 < at.size()) body = s.substr(0, at[static_cast<std::size_t>(spec.precision)]);
  }
  return pad("", body, spec, false);
}

// Appends str/repr/ascii of `v` (the 's' 'r' 'a' conversions): a string keeps its user-data
// ranges when it is inserted whole; a Markup format string escapes what it inserts.
inline void append_converted(TaintedText& out, const Value& v, char conv, const FormatSpec& spec, bool markup) {
  if (conv == 's' && v.is_string() && spec.width == 0 && spec.precision < 0) {
    if (markup && !v.is_markup()) append_escaped(out, v.as_string(), v.taint());  // escape() keeps a Markup
    else out.append(v.as_string(), v.taint());
    return;
  }
  bool tainted = !v.taint().empty();
  std::string text = conv == 'r' ? repr(v, &tainted) : conv == 'a' ? python_ascii(v) : v.is_string() ? v.as_string() : v.is_undefined() ? "" : repr(v, &tainted);
  if (conv == 'a') (void)repr(v, &tainted);
  text = format_text(text, spec);
  const std::size_t begin = out.text.size();
  if (markup) append_escaped(out, text, {});
  else out.append_plain(text);
  if (tainted) kylin::detail::add_range(out.taint, begin, out.text.size());
}

// --- printf-style: fmt % args ----------------------------------------------------------------------

inline std::string printf_number(const Value& v, char type, const FormatSpec& spec) {
  const bool integer_type = type == 'x' || type == 'X' || type == 'o';
  if (type == 'd' || type == 'i' || type == 'u') {
    if (!v.is_number()) fail("%" + std::string(1, type) + " format: a real number is required, not " + std::string(v.type_name()));
    FormatSpec s = spec;
    s.type = 'd';
    if (v.is_float()) {
      if (!std::isfinite(v.as_double())) fail("cannot convert float " + python_float(v.as_double()) + " to integer");
      return format_int(static_cast<std::int64_t>(v.as_double()), s, true);
    }
    return format_int(v.as_int(), s, true);
  }
  if (integer_type) {
    if (!v.is_int() && !v.is_bool())
      fail("%" + std::string(1, type) + " format: an integer is required, not " + std::string(v.type_name()));
    FormatSpec s = spec;
    s.type = type;
    return format_int(v.as_int(), s, true);
  }
  if (!v.is_number()) fail("must be real number, not " + std::string(v.type_name()));
  FormatSpec s = spec;
  s.type = type;
  return format_float(v.as_double(), s);
}

struct PercentArgs {
  const Value& args;
  std::size_t next = 0;
  bool used_single = false;

  bool is_tuple() const { return args.is_list() && args.as_list().tuple; }
  const Value& take() {
    if (!is_tuple()) {
      if (used_single) fail("not enough arguments for format string");
      used_single = true;
      return args;
    }
    if (next >= args.as_list().items.size()) fail("not enough arguments for format string");
    return args.as_list().items[next++];
  }
};

inline std::int64_t star_value(PercentArgs& a) {
  const Value& w = a.take();
  if (!w.is_int() && !w.is_bool()) fail("* wants int");
  check_width(w.as_int());
  return w.as_int();
}

// One conversion's flags, width, precision and length modifiers from f[p...], up to its type
// character (returned); `*` takes the width or precision from the arguments.
inline char parse_printf_spec(const std::string& f, std::size_t& p, PercentArgs& a, FormatSpec& spec) {
  for (; p < f.size() && std::string_view("-+ #0").find(f[p]) != std::string_view::npos; ++p) {
    if (f[p] == '-') spec.align = '<';
    else if (f[p] == '+') spec.sign = '+';
    else if (f[p] == ' ' && spec.sign != '+') spec.sign = ' ';
    else if (f[p] == '#') spec.alternate = true;
    else if (f[p] == '0') spec.zero = true;
  }
  auto number = [&](std::int64_t& into) {
    if (p < f.size() && f[p] == '*') {
      ++p;
      into = star_value(a);
      return;
    }
    std::int64_t n = 0;
    for (; p < f.size() && f[p] >= '0' && f[p] <= '9'; ++p) {
      n = n * 10 + (f[p] - '0');
      check_width(n);
    }
    into = n;
  };
  number(spec.width);
  if (spec.width < 0) spec.align = '<', spec.width = -spec.width;
  if (p < f.size() && f[p] == '.') {
    ++p;
    number(spec.precision);
  }
  while (p < f.size() && (f[p] == 'h' || f[p] == 'l' || f[p] == 'L')) ++p;
  if (p >= f.size()) fail("incomplete format");
  if (spec.align == '<') spec.zero = false;
  return f[p];
}

// Appends one conversion of `v` ('%' excluded) to `out`.
inline void append_printf(TaintedText& out, const Value& v, char type, FormatSpec spec, bool markup, std::size_t at) {
  if (type == 's' || type == 'r' || type == 'a' || type == 'c') spec.align = spec.align ? spec.align : '>';  // printf right-aligns text
  if (type == 's' || type == 'r' || type == 'a') return append_converted(out, v, type, spec, markup);
  if (type == 'c') {
    std::string ch;
    if (v.is_string() && codepoint_count(v.as_string()) == 1) ch = v.as_string();
    else if ((v.is_int() || v.is_bool()) && v.as_int() >= 0 && v.as_int() < 0x110000) kylin::detail::append_utf8(ch, static_cast<char32_t>(v.as_int()));
    else fail("%c requires int or char");
    spec.precision = -1;
    return append_converted(out, Value(ch), 's', spec, markup);
  }
  if (std::string_view("diuxXoeEfFgG").find(type) != std::string_view::npos) return out.append_plain(printf_number(v, type, spec));
  char code[8];
  std::snprintf(code, sizeof code, "%x", static_cast<unsigned char>(type));
  fail("unsupported format character '" + std::string(1, type) + "' (0x" + code + ") at index " + std::to_string(at));
}

inline Value percent_format_impl(const Value& format, const Value& args) {
  const std::string& f = format.as_string();
  PercentArgs a{args};
  const bool mapping = args.is_dict() || (args.is_list() && !args.as_list().tuple);
  TaintedText out;
  for (std::size_t i = 0; i < f.size();) {
    const std::size_t pct = f.find('%', i);
    out.append(f, format.taint(), i, pct);
    if (pct == std::string::npos) break;
    std::size_t p = pct + 1;
    if (p >= f.size()) fail("incomplete format");
    std::optional<Value> keyed;  // %(name)s
    if (f[p] == '(') {
      const std::size_t close = f.find(')', p);
      if (close == std::string::npos) fail("incomplete format key");
      if (!args.is_dict()) fail("format requires a mapping");
      const Value* hit = args.as_dict().find(std::string_view(f).substr(p + 1, close - p - 1));
      if (!hit) fail(python_string_repr(f.substr(p + 1, close - p - 1)));
      keyed = *hit;
      p = close + 1;
    }
    FormatSpec spec;
    const char type = parse_printf_spec(f, p, a, spec);
    i = p + 1;
    if (type == '%') out.append_plain("%");
    else append_printf(out, keyed ? *keyed : a.take(), type, spec, format.is_markup(), p);
  }
  if (a.is_tuple() ? a.next < args.as_list().items.size() : (!a.used_single && !mapping))
    fail("not all arguments converted during string formatting");
  Value result = std::move(out).value();
  return format.is_markup() ? as_markup(std::move(result)) : result;
}

}  // namespace kylin::jinja::detail

namespace kylin::jinja {
inline Value percent_format(const Value& format, const Value& args) { return detail::percent_format_impl(format, args); }
}  // namespace kylin::jinja

#include "kylin/chat/str_format.hpp"
