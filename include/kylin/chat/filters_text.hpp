// Jinja's text and number filters, after jinja2/filters.py (3.1) and markupsafe 3: center,
// indent, truncate, wordcount, format, round, filesizeformat, escape/forceescape, striptags,
// urlencode, xmlattr, pprint. Autoescaping is off, as in transformers' environment.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "kylin/chat/filters_seq.hpp"

namespace kylin::jinja::detail {

inline const Value& require_str(const Value& v, std::string_view filter) {
  if (!v.is_string()) fail(std::string(filter) + "() expects a string, got " + std::string(v.type_name()));
  return v;
}

// indent(width=4, first=False, blank=False): jinja2 appends "\n" and splits with str.splitlines,
// so any Python line break becomes "\n".
inline Value indent(const Value& v, Args& a) {
  if (!v.is_string()) fail("unsupported operand type(s) for +=: '" + std::string(v.type_name()) + "' and 'str'");
  const Value width = a.value(0, "width", std::int64_t{4});
  const bool first = truthy(a.value(1, "first", false)), blank = truthy(a.value(2, "blank", false));
  std::string indention;
  if (width.is_string()) indention = width.as_string();
  else if (width.is_int() || width.is_bool()) check_width(width.as_int()), indention.assign(static_cast<std::size_t>(std::max<std::int64_t>(width.as_int(), 0)), ' ');
  else fail("indent() width must be an int or a string");
  TaintedText joined;
  joined.append(v.as_string(), v.taint());
  joined.append_plain("\n");
  const Value lines = splitlines_value(std::move(joined).value(), false);
  TaintedText out;
  const auto& items = lines.as_list().items;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out.append_plain("\n");
    if ((i > 0 || first) && (blank || !items[i].as_string().empty() || (i == 0 && first))) out.append_plain(indention);
    out.append(items[i].as_string(), items[i].taint());
  }
  return like(v, std::move(out).value());
}

// truncate(length=255, killwords=False, end='...', leeway=5): cut at a word unless killwords.
inline Value truncate(const Value& v, Args& a) {
  if (!v.is_string()) fail("object of type '" + std::string(v.type_name()) + "' has no len()");
  const std::int64_t length = a.integer(0, "length", 255), leeway = a.integer(3, "leeway", 5);
  const bool killwords = truthy(a.value(1, "killwords", false));
  const Value end = a.get(2, "end") ? str_arg(a, 2, "end") : Value("...");
  const auto end_len = static_cast<std::int64_t>(codepoint_count(end.as_string()));
  if (length < end_len) fail("expected length >= " + std::to_string(end_len) + ", got " + std::to_string(length));
  if (leeway < 0) fail("expected leeway >= 0, got " + std::to_string(leeway));
  if (static_cast<std::int64_t>(codepoint_count(v.as_string())) <= length + leeway) return v;
  Value head = slice(v, None{}, length - end_len, None{});
  if (!killwords) {
    const std::size_t space = head.as_string().rfind(' ');
    if (space != std::string::npos) head = substring(head, 0, space);
  }
  return binary("+", head, end);
}

inline Value wordcount(const Value& v, Args&) {
  const std::string s = to_str(v);
  std::int64_t n = 0;
  bool in_word = false;
  for (char32_t c : decode_utf8(s)) {
    const bool w = c == '_' || (c < 0x80 ? std::isalnum(static_cast<int>(c)) != 0
                                         : (kylin::detail::code_point_flags(c) & kylin::detail::unicode_tables::word) != 0);
    n += w && !in_word;
    in_word = w;
  }
  return n;
}

inline Value format_filter(const Value& v, Args& a) {
  if (!a.call.args.empty() && !a.call.kwargs.empty()) fail("can't handle positional and keyword arguments at the same time");
  const Value fmt = str_value(v);
  if (!a.call.kwargs.empty()) {
    DictData d;
    for (const auto& [k, x] : a.call.kwargs) d.set(k, x);
    return percent_format(fmt, Value(std::move(d)));
  }
  return percent_format(fmt, Value(a.call.args, true));
}

// Python's round(x, n) for a float: the correctly rounded decimal (printf rounds the exact
// binary value, ties to even, as CPython's dtoa does).
inline double round_float(double x, std::int64_t n) {
  if (!std::isfinite(x) || n > 330) return x;
  char buf[720];  // 1e308 to 330 places: 309 + 1 + 330 digits and a sign
  if (n >= 0) {
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(n), x);
    return std::strtod(buf, nullptr);
  }
  if (x == 0) return x;
  std::snprintf(buf, sizeof buf, "%.16e", x);
  const long e10 = std::strtol(std::strchr(buf, 'e') + 1, nullptr, 10);
  const long digits = e10 + 1 + static_cast<long>(n);  // significant digits kept
  if (digits < 0 || n < -330) return std::copysign(0.0, x);
  if (digits == 0) {  // |x| < 10^-n: 0 or 10^-n, ties to the even 0
    const double unit = std::pow(10.0, static_cast<double>(-n));
    return std::copysign(std::fabs(x) > unit / 2 ? unit : 0.0, x);
  }
  std::snprintf(buf, sizeof buf, "%.*e", static_cast<int>(digits - 1), x);
  return std::strtod(buf, nullptr);
}

inline Value round_filter(const Value& v, Args& a) {
  const std::int64_t precision = a.integer(0, "precision", 0);
  const Value method = a.value(1, "method", "common");
  const std::string m = to_str(method);
  if (m != "common" && m != "ceil" && m != "floor") fail("method must be common, ceil or floor");
  if (!v.is_number()) fail("type " + std::string(v.type_name()) + " doesn't define __round__ method");
  if (m == "common") {
    if (v.is_float()) return round_float(v.as_double(), precision);
    if (precision >= 0 || precision < -18) return precision >= 0 ? Value(v.as_int()) : Value(std::int64_t{0});
    std::int64_t unit = 1;
    for (std::int64_t k = 0; k < -precision; ++k) unit *= 10;
    const std::int64_t x = v.as_int(), q = x / unit, r = x % unit;  // ties to even, as Python's int round
    const std::int64_t twice = 2 * (r < 0 ? -r : r);
    std::int64_t rounded = q;
    if (twice > unit || (twice == unit && q % 2 != 0)) rounded += x < 0 ? -1 : 1;
    return binary("*", Value(rounded), Value(unit));
  }
  // math.ceil/floor(value * 10**precision) / 10**precision, in Python's float arithmetic
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double scaled = v.as_double() * scale;
  if (!std::isfinite(scaled)) fail("cannot convert float infinity to integer");
  const double r = m == "ceil" ? std::ceil(scaled) : std::floor(scaled);
  return r / scale;
}

// Python's float(v) for a number or a string, or its error.
inline double python_to_float(const Value& v) {
  if (v.is_number()) return v.as_double();
  if (!v.is_string()) fail("float() argument must be a string or a real number, not '" + std::string(v.type_name()) + "'");
  const std::string s = py_strip(v.as_string(), std::nullopt, true, true);
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size()) fail("could not convert string to float: " + python_string_repr(v.as_string()));
  return d;
}

inline Value filesizeformat(const Value& v, Args& a) {
  const double bytes = python_to_float(v);
  const bool binary_units = truthy(a.value(0, "binary", false));
  const double base = binary_units ? 1024 : 1000;
  static constexpr const char* decimal[] = {"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
  static constexpr const char* binary[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
  if (bytes == 1) return "1 Byte";
  if (bytes < base) {
    if (!(bytes > -9.2e18)) fail("filesizeformat() of " + python_float(bytes) + " is out of the 64-bit range");
    return std::to_string(static_cast<std::int64_t>(bytes)) + " Bytes";
  }
  double unit = base;
  char buf[64];
  for (int i = 0; i < 8; ++i) {
    unit *= base;
    if (bytes < unit || i == 7) {
      std::snprintf(buf, sizeof buf, "%.1f %s", base * bytes / unit, binary_units ? binary[i] : decimal[i]);
      break;
    }
  }
  return std::string(buf);
}

// forceescape: escape even a Markup (its text escaped again).
inline Value forceescape(const Value& v, Args&) {
  return escape_html(v.is_markup() ? Value(v.as_string(), v.taint()) : v);
}

// markupsafe's Markup.striptags: comments, then tags removed, whitespace collapsed, then the
// common entities unescaped (&amp; &lt; &gt; &quot; &#39; &apos; &nbsp; and numeric ones; other
// named HTML5 entities are kept as written).
inline Value striptags(const Value& v, Args&) {
  std::string s = to_str(v);
  for (const auto& [open, close] : {std::pair<std::string, std::string>{"<!--", "-->"}, {"<", ">"}})
    for (std::size_t start; (start = s.find(open)) != std::string::npos;) {
      const std::size_t end = s.find(close, start);
      if (end == std::string::npos) break;
      s.erase(start, end + close.size() - start);
    }
  std::string collapsed;
  for (const auto& [b, e] : split_bounds(s, std::nullopt, -1)) collapsed += (collapsed.empty() ? "" : " ") + s.substr(b, e - b);
  std::string out;
  for (std::size_t i = 0; i < collapsed.size(); ++i) {
    const std::size_t semi = collapsed[i] == '&' ? collapsed.find(';', i) : std::string::npos;
    const std::string name = semi == std::string::npos || semi - i > 10 ? "" : collapsed.substr(i + 1, semi - i - 1);
    static const std::pair<const char*, char32_t> named[] = {{"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}, {"nbsp", 0xA0}};
    char32_t cp = 0;
    for (const auto& [n, c] : named)
      if (name == n) cp = c;
    if (name.size() > 1 && name[0] == '#') {
      const bool hex = name[1] == 'x' || name[1] == 'X';
      char* end = nullptr;
      const unsigned long n = std::strtoul(name.c_str() + 1 + hex, &end, hex ? 16 : 10);
      if (end && *end == 0 && n > 0 && n < 0x110000) cp = static_cast<char32_t>(n);
    }
    if (cp == 0) {
      out += collapsed[i];
      continue;
    }
    kylin::detail::append_utf8(out, cp);
    i = semi;
  }
  return string_value(std::move(out), !v.taint().empty());
}

// url_quote: UTF-8 bytes, unreserved characters (and '/' outside query strings) kept.
inline std::string url_quote(const Value& v, bool for_qs) {
  std::string out;
  for (unsigned char c : to_str(v)) {
    if (std::isalnum(c) || c == '_' || c == '.' || c == '-' || c == '~' || (!for_qs && c == '/')) out += static_cast<char>(c);
    else if (for_qs && c == ' ') out += '+';
    else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

inline Value urlencode(const Value& v, Args&) {
  if (v.is_string() || !(v.is_list() || v.is_dict() || v.is_undefined())) return string_value(url_quote(v, false), !v.taint().empty());
  std::string out;
  bool tainted = v.is_dict() && v.as_dict().tainted_keys;
  std::vector<Value> pairs = v.is_dict() ? std::vector<Value>{} : iterate(v);
  if (v.is_dict())
    for (const auto& [k, x] : v.as_dict().items) pairs.push_back(Value(std::vector<Value>{Value(k), x}, true));
  for (const Value& p : pairs) {
    const std::vector<Value> kv = iterate(p);
    if (kv.size() != 2) fail(kv.size() > 2 ? "too many values to unpack (expected 2)" : "not enough values to unpack (expected 2)");
    if (!out.empty()) out += '&';
    out += url_quote(kv[0], true) + "=" + url_quote(kv[1], true);
    tainted |= !kv[0].taint().empty() || !kv[1].taint().empty() || kv[1].is_list() || kv[1].is_dict();
  }
  return string_value(std::move(out), tainted);
}

inline Value xmlattr(const Value& v, Args& a) {
  require_defined(v);
  if (!v.is_dict()) fail("'" + std::string(v.type_name()) + "' object has no attribute 'items'");
  TaintedText out;
  for (const auto& [k, x] : v.as_dict().items) {
    if (x.is_none() || x.is_undefined()) continue;
    if (k.find_first_of(" \t\n\r\f\v/>=") != std::string::npos) fail("Invalid character in attribute name: " + python_string_repr(k));
    if (!out.text.empty()) out.append_plain(" ");
    append_escaped(out, k, v.as_dict().tainted_keys ? Taint{{0, k.size()}} : Taint{});
    out.append_plain("=\"");
    const Value ex = escape_html(x);
    out.append(ex.as_string(), ex.taint());
    out.append_plain("\"");
  }
  if (truthy(a.value(0, "autospace", true)) && !out.text.empty()) {
    TaintedText spaced;
    spaced.append_plain(" ");
    spaced.append(out.text, out.taint);
    return std::move(spaced).value();
  }
  return std::move(out).value();
}

// pprint.pformat for values that fit on one 80-column line (dict keys sorted, as pformat does);
// wider ones would wrap, which kylin does not reproduce.
inline void sorted_repr(std::string& out, const Value& v, bool* tainted) {
  if (v.is_dict()) {
    auto items = v.as_dict().items;
    std::stable_sort(items.begin(), items.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    out += "{";
    for (std::size_t i = 0; i < items.size(); ++i) {
      out += (i ? ", " : "") + python_string_repr(items[i].first) + ": ";
      sorted_repr(out, items[i].second, tainted);
    }
    if (tainted && v.as_dict().tainted_keys) *tainted = true;
    out += "}";
  } else if (v.is_list()) {
    const auto& l = v.as_list();
    out += l.tuple ? "(" : "[";
    for (std::size_t i = 0; i < l.items.size(); ++i) {
      if (i) out += ", ";
      sorted_repr(out, l.items[i], tainted);
    }
    out += l.tuple ? (l.items.size() == 1 ? ",)" : ")") : "]";
  } else {
    repr_into(out, v, tainted);
  }
  check_growth(out.size());
}

inline Value pprint(const Value& v, Args&) {
  std::string out;
  bool tainted = false;
  sorted_repr(out, v, &tainted);
  if (codepoint_count(out) > 80 && (v.is_list() || v.is_dict() || v.is_string()))
    fail("pprint of a value wider than 80 columns (pformat would wrap it) is not supported");
  return string_value(std::move(out), tainted);
}

}  // namespace kylin::jinja::detail
