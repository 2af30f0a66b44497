// The methods templates call on str, list, tuple and dict values, with Python's semantics (by
// code point; case mapping and the case tests ASCII-only, isalpha/isalnum/isnumeric by the
// tokenizer's Unicode letter/number tables). A Markup's methods return Markup, as markupsafe's do.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "kylin/chat/str_format.hpp"
#include "kylin/chat/strings.hpp"
#include "kylin/tokenizer/unicode.hpp"

namespace kylin::jinja::detail {

// Positional argument i or keyword `name` of a call to `fn`.
struct Args {
  CallArgs& call;
  std::string_view fn;

  const Value* get(std::size_t i, std::string_view name) const {
    if (i < call.args.size()) return &call.args[i];
    for (const auto& [k, v] : call.kwargs)
      if (k == name) return &v;
    return nullptr;
  }
  Value value(std::size_t i, std::string_view name, Value fallback = Undefined{}) const {
    const Value* v = get(i, name);
    return v ? *v : fallback;
  }
  std::string str(std::size_t i, std::string_view name) const {
    const Value* v = get(i, name);
    if (!v || !v->is_string()) fail(std::string(fn) + "() argument '" + std::string(name) + "' must be a string");
    return v->as_string();
  }
  std::optional<std::string> opt_str(std::size_t i, std::string_view name) const {
    const Value* v = get(i, name);
    if (!v || v->is_none()) return std::nullopt;
    return str(i, name);
  }
  std::int64_t integer(std::size_t i, std::string_view name, std::int64_t fallback) const {
    const Value* v = get(i, name);
    if (!v || v->is_none()) return fallback;
    if (!v->is_int() && !v->is_bool()) fail(std::string(fn) + "() argument '" + std::string(name) + "' must be an int");
    return v->as_int();
  }
  void at_most(std::size_t n) const {
    if (call.args.size() > n) fail(std::string(fn) + "() takes at most " + std::to_string(n) + " positional arguments");
  }
};

// A string argument as a Value (keeping its taint), or an error naming it.
inline Value str_arg(const Args& a, std::size_t i, std::string_view name) {
  (void)a.str(i, name);
  return *a.get(i, name);
}

inline bool prefix_test(const std::string& s, const Value& arg, bool suffix) {
  auto one = [&](const Value& p) {
    if (!p.is_string()) fail("startswith/endswith argument must be a string or tuple of strings");
    const std::string& x = p.as_string();
    return x.size() <= s.size() && s.compare(suffix ? s.size() - x.size() : 0, x.size(), x) == 0;
  };
  if (arg.is_list()) {
    for (const auto& p : arg.as_list().items)
      if (one(p)) return true;
    return false;
  }
  return one(arg);
}

// find/rfind/index/rindex/count over s[start:end] (code points, slice rules); returns the
// code-point index of the hit in s, -1 when none; `count` counts non-overlapping hits.
inline std::int64_t search(const std::string& s, const Args& a, bool from_right, bool count) {
  const std::string sub = a.str(0, "sub");
  const std::vector<std::size_t> at = codepoint_offsets(s);
  const auto n = static_cast<std::int64_t>(at.size() - 1);
  auto bound = [&](std::size_t i, std::int64_t dflt) {
    std::int64_t v = a.integer(i, i == 1 ? "start" : "end", dflt);
    if (v < 0) v = std::max<std::int64_t>(v + n, 0);
    return std::min(v, n);
  };
  const std::int64_t lo = bound(1, 0), hi = bound(2, n);
  if (lo > hi) return count ? 0 : -1;
  const std::string_view window = std::string_view(s).substr(at[static_cast<std::size_t>(lo)], at[static_cast<std::size_t>(hi)] - at[static_cast<std::size_t>(lo)]);
  if (count) {
    if (sub.empty()) return static_cast<std::int64_t>(codepoint_count(window)) + 1;
    std::int64_t k = 0;
    for (std::size_t p = window.find(sub); p != std::string_view::npos; p = window.find(sub, p + sub.size())) ++k;
    return k;
  }
  const std::size_t hit = from_right ? window.rfind(sub) : window.find(sub);
  if (hit == std::string_view::npos) return -1;
  return lo + static_cast<std::int64_t>(codepoint_count(window.substr(0, hit)));
}

// str.rsplit(sep=None, maxsplit=-1): split_bounds from the right.
inline Value rsplit_value(const Value& v, const std::optional<std::string>& sep, std::int64_t maxsplit) {
  if (maxsplit < 0) return split_value(v, sep, -1);
  const std::string& s = v.as_string();
  std::vector<std::pair<std::size_t, std::size_t>> parts;  // from the right
  if (sep) {
    if (sep->empty()) fail("empty separator");
    std::size_t end = s.size();
    while (static_cast<std::int64_t>(parts.size()) < maxsplit) {
      const std::size_t hit = end >= sep->size() ? s.rfind(*sep, end - sep->size()) : std::string::npos;
      if (hit == std::string::npos) break;
      parts.emplace_back(hit + sep->size(), end);
      end = hit;
    }
    parts.emplace_back(0, end);
  } else {
    const std::vector<std::size_t> at = codepoint_offsets(s);
    auto space = [&](std::size_t k) {
      char32_t c = 0;
      next_codepoint(s, at[k], c);
      return is_space(c);
    };
    std::size_t j = at.size() - 1;
    while (true) {
      while (j > 0 && space(j - 1)) --j;
      if (j == 0) break;
      if (static_cast<std::int64_t>(parts.size()) == maxsplit) {  // the rest, leading whitespace kept
        parts.emplace_back(0, at[j]);
        break;
      }
      std::size_t i = j;
      while (i > 0 && !space(i - 1)) --i;
      parts.emplace_back(at[i], at[j]);
      j = i;
    }
  }
  std::vector<Value> out;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) out.push_back(substring(v, it->first, it->second));
  return Value(std::move(out));
}

// Python's str.splitlines() line boundaries.
inline std::size_t line_break_length(std::string_view s, std::size_t i) {
  char32_t c = 0;
  const std::size_t len = next_codepoint(s, i, c);
  if (c == '\r') return i + 1 < s.size() && s[i + 1] == '\n' ? 2 : 1;
  const bool brk = c == '\n' || c == '\v' || c == '\f' || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
  return brk ? len : 0;
}

inline Value splitlines_value(const Value& v, bool keepends) {
  const std::string& s = v.as_string();
  std::vector<Value> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i < s.size();) {
    if (const std::size_t br = line_break_length(s, i)) {
      out.push_back(substring(v, start, keepends ? i + br : i));
      i += br;
      start = i;
    } else {
      char32_t c = 0;
      i += next_codepoint(s, i, c);
    }
  }
  if (start < s.size()) out.push_back(substring(v, start, s.size()));
  return Value(std::move(out));
}

// ljust/rjust/center/zfill: `s` padded to `width` code points.
inline Value justify(const Value& v, std::string_view how, std::int64_t width, const std::string& fill) {
  if (codepoint_count(fill) != 1) fail("The fill character must be exactly one character long");
  check_width(width);
  const auto len = static_cast<std::int64_t>(codepoint_count(v.as_string()));
  if (width <= len) return v;
  const std::int64_t marg = width - len;
  std::int64_t left = how == "rjust" ? marg : how == "center" ? marg / 2 + (marg & width & 1) : 0;
  TaintedText out;
  std::size_t body = 0;
  if (how == "zfill") {
    const std::string& s = v.as_string();
    body = !s.empty() && (s[0] == '+' || s[0] == '-');
    out.append(s, v.taint(), 0, body);
    left = marg;
  }
  for (std::int64_t k = 0; k < left; ++k) out.append_plain(how == "zfill" ? "0" : fill);
  out.append(v.as_string(), v.taint(), body);
  for (std::int64_t k = left; k < marg; ++k) out.append_plain(fill);
  return std::move(out).value();
}

inline Value expandtabs_value(const Value& v, std::int64_t tabsize) {
  TaintedText out;
  const std::string& s = v.as_string();
  std::int64_t column = 0;
  for (std::size_t i = 0; i < s.size();) {
    char32_t c = 0;
    const std::size_t len = next_codepoint(s, i, c);
    if (c == '\t') {
      const std::int64_t n = tabsize > 0 ? tabsize - column % tabsize : 0;
      check_width(n);
      out.append_plain(std::string(static_cast<std::size_t>(n), ' '));
      column += n;
    } else {
      out.append(s, v.taint(), i, i + len);
      column = c == '\n' || c == '\r' ? 0 : column + 1;
    }
    i += len;
  }
  return std::move(out).value();
}

inline Value partition_value(const Value& v, const std::string& sep, bool from_right) {
  if (sep.empty()) fail("empty separator");
  const std::string& s = v.as_string();
  const std::size_t hit = from_right ? s.rfind(sep) : s.find(sep);
  std::vector<Value> parts;
  if (hit == std::string::npos) {
    parts = from_right ? std::vector<Value>{Value(""), Value(""), v} : std::vector<Value>{v, Value(""), Value("")};
  } else {
    parts = {substring(v, 0, hit), substring(v, hit, hit + sep.size()), substring(v, hit + sep.size(), s.size())};
  }
  for (auto& p : parts) p = like(v, std::move(p));
  return Value(std::move(parts), true);
}

// isalpha, isdigit, ... : true for a non-empty string whose every code point passes `test`.
inline bool all_codepoints(const std::string& s, bool (*test)(char32_t)) {
  if (s.empty()) return false;
  for (char32_t c : decode_utf8(s))
    if (!test(c)) return false;
  return true;
}
inline bool cp_alpha(char32_t c) { return kylin::detail::code_point_flags(c) & kylin::detail::unicode_tables::letter; }
inline bool cp_numeric(char32_t c) { return kylin::detail::code_point_flags(c) & kylin::detail::unicode_tables::number; }
inline bool cp_digit(char32_t c) { return (c >= '0' && c <= '9') || (c >= 0x80 && cp_numeric(c)); }
inline bool cp_alnum(char32_t c) { return cp_alpha(c) || cp_numeric(c); }
inline bool cp_space(char32_t c) { return is_space(c); }
inline bool cp_ascii(char32_t c) { return c < 0x80; }

// islower/isupper/istitle over ASCII letters (the cased characters kylin maps).
inline bool case_test(const std::string& s, std::string_view which) {
  bool cased = false, prev_cased = false;
  for (char ch : s) {
    const bool up = ch >= 'A' && ch <= 'Z', low = ch >= 'a' && ch <= 'z';
    if (which == "istitle") {
      if ((up && prev_cased) || (low && !prev_cased)) return false;
    } else if ((which == "islower" && up) || (which == "isupper" && low)) {
      return false;
    }
    cased |= up || low;
    prev_cased = up || low;
  }
  return cased;
}

inline constexpr std::array<std::string_view, 42> string_methods = {
    "startswith", "endswith", "strip",    "lstrip",    "rstrip",       "split",        "rsplit",  "splitlines",
    "replace",    "upper",    "lower",    "title",     "capitalize",   "swapcase",     "casefold", "find",
    "rfind",      "index",    "rindex",   "count",     "join",         "partition",    "rpartition", "removeprefix",
    "removesuffix", "ljust",  "rjust",    "center",    "zfill",        "expandtabs",   "format",  "isalpha",
    "isdigit",    "isdecimal", "isnumeric", "isalnum", "isspace",      "islower",      "isupper", "istitle",
    "isascii",    "format_map"};

inline std::string py_swapcase(std::string s) {
  for (char& c : s) c = c >= 'a' && c <= 'z' ? ascii_upper(c) : ascii_lower(c);
  return s;
}

inline Value string_method_other(const Value& v, std::string_view name, Args& a);

inline Value string_method(const Value& v, std::string_view name, CallArgs& call) {
  const std::string& s = v.as_string();
  Args a{call, name};
  if (name == "startswith" || name == "endswith") return prefix_test(s, a.value(0, "prefix"), name == "endswith");
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return like(v, strip_value(v, a.opt_str(0, "chars"), name != "rstrip", name != "lstrip"));
  if (name == "split" || name == "rsplit" || name == "splitlines") {
    Value parts = name == "splitlines" ? splitlines_value(v, truthy(a.value(0, "keepends", false)))
                  : name == "split"    ? split_value(v, a.opt_str(0, "sep"), a.integer(1, "maxsplit", -1))
                                       : rsplit_value(v, a.opt_str(0, "sep"), a.integer(1, "maxsplit", -1));
    if (!v.is_markup()) return parts;
    std::vector<Value> items;
    for (const Value& p : parts.as_list().items) items.push_back(as_markup(p));
    return Value(std::move(items));
  }
  if (name == "replace") return like(v, replace_value(v, a.str(0, "old"), str_arg(a, 1, "new"), a.integer(2, "count", -1)));
  if (name == "upper") return like(v, recase_value(v, py_upper));
  if (name == "lower" || name == "casefold") return like(v, recase_value(v, py_lower));
  if (name == "title") return like(v, recase_value(v, py_title));
  if (name == "capitalize") return like(v, recase_value(v, py_capitalize));
  if (name == "swapcase") return like(v, recase_value(v, py_swapcase));
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    const std::int64_t r = search(s, a, name == "rfind" || name == "rindex", name == "count");
    if (r < 0 && (name == "index" || name == "rindex")) fail("substring not found");
    return r;
  }
  return string_method_other(v, name, a);
}

inline Value string_method_other(const Value& v, std::string_view name, Args& a) {
  const std::string& s = v.as_string();
  if (name == "join") {
    TaintedText out;
    bool first = true;
    for (const auto& item : iterate(a.value(0, "iterable"))) {
      if (!item.is_string()) fail("sequence item: expected str instance, " + std::string(item.type_name()) + " found");
      if (!first) out.append(s, v.taint());
      if (v.is_markup()) append_escaped(out, item.as_string(), item.taint());  // markupsafe escapes the items
      else out.append(item.as_string(), item.taint());
      first = false;
    }
    return like(v, std::move(out).value());
  }
  if (name == "partition" || name == "rpartition") return partition_value(v, a.str(0, "sep"), name == "rpartition");
  if (name == "removeprefix" || name == "removesuffix") {
    const std::string affix = a.str(0, name == "removeprefix" ? "prefix" : "suffix");
    const bool suffix = name == "removesuffix";
    if (affix.empty() || !prefix_test(s, Value(affix), suffix)) return v;
    return like(v, suffix ? substring(v, 0, s.size() - affix.size()) : substring(v, affix.size(), s.size()));
  }
  if (name == "ljust" || name == "rjust" || name == "center" || name == "zfill") {
    const Value* w = a.get(0, "width");
    if (!w || (!w->is_int() && !w->is_bool())) fail(std::string(name) + "() argument 'width' must be an int");
    return like(v, justify(v, name, w->as_int(), name == "zfill" ? "0" : a.get(1, "fillchar") ? a.str(1, "fillchar") : " "));
  }
  if (name == "expandtabs") return like(v, expandtabs_value(v, a.integer(0, "tabsize", 8)));
  if (name == "format") return str_format(v, a.call);
  if (name == "format_map") {
    CallArgs by_name;
    const Value mapping = a.value(0, "mapping");
    if (!mapping.is_dict()) fail("format_map() argument must be a mapping");
    for (const auto& [k, x] : mapping.as_dict().items) by_name.kwargs.emplace_back(k, x);
    return str_format(v, by_name);
  }
  if (name == "isalpha") return all_codepoints(s, cp_alpha);
  if (name == "isdigit" || name == "isdecimal") return all_codepoints(s, cp_digit);
  if (name == "isnumeric") return all_codepoints(s, cp_numeric);
  if (name == "isalnum") return all_codepoints(s, cp_alnum);
  if (name == "isspace") return all_codepoints(s, cp_space);
  if (name == "isascii") return s.empty() || all_codepoints(s, cp_ascii);
  return case_test(s, name);  // islower, isupper, istitle
}

// list.count/index/copy, tuple.count/index, dict.items/keys/values/get/copy.
inline Value sequence_method(const Value& l, std::string_view name, CallArgs& call) {
  Args a{call, name};
  if (name == "copy") return l;
  const Value x = a.value(0, "value");
  std::int64_t n = 0, i = 0;
  for (const Value& item : l.as_list().items) {
    if (equal(item, x)) {
      if (name == "index") return i;
      ++n;
    }
    ++i;
  }
  if (name == "count") return n;
  fail(l.as_list().tuple ? "tuple.index(x): x not in tuple" : repr(x) + " is not in list");
}

inline Value dict_method(const Value& d, std::string_view name, CallArgs& call) {
  Args a{call, name};
  if (name == "copy") return d;
  std::vector<Value> out;
  const bool tainted = d.as_dict().tainted_keys;
  for (const auto& [k, v] : d.as_dict().items) {
    if (name == "items") out.push_back(Value(std::vector<Value>{string_value(k, tainted), v}, true));
    else if (name == "keys") out.push_back(string_value(k, tainted));
    else if (name == "values") out.push_back(v);
  }
  if (name != "get") return Value(std::move(out));
  const Value key = a.value(0, "key");
  const Value* hit = key.is_string() ? d.as_dict().find(key.as_string()) : nullptr;
  return hit ? *hit : a.value(1, "default", None{});
}

}  // namespace kylin::jinja::detail
