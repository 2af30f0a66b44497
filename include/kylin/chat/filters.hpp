// Jinja's builtin filters by name, with jinja2/filters.py semantics (the sequence and text ones in
// filters_seq.hpp and filters_text.hpp); tojson is transformers' replacement: json.dumps(x,
// ensure_ascii=False, indent, separators, sort_keys). wordwrap and urlize (textwrap and URL
// heuristics no chat template uses) are refused by name at load.
#pragma once

#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/chat/builtins.hpp"
#include "kylin/chat/filters_text.hpp"

namespace kylin::jinja {

using FilterFn = Value (*)(const Value&, detail::Args&);
inline const std::vector<std::pair<std::string_view, FilterFn>>& filters();

inline Value run_filter(std::string_view name, const Value& v, CallArgs& call) {
  for (const auto& [n, fn] : filters())
    if (n == name) {
      detail::Args a{call, name};
      return fn(v, a);
    }
  fail("unsupported filter '" + std::string(name) + "'");
}

inline bool has_filter(std::string_view name) {
  for (const auto& [n, fn] : filters())
    if (n == name) return true;
  return false;
}

namespace detail {

// Wider indents are no real template's and would let one call allocate gigabytes.
inline constexpr std::int64_t max_indent = 1024;

// transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False): note
// that its first positional argument is ensure_ascii, not jinja2's indent.
inline Value tojson(const Value& v, Args& a) {
  ToJsonOptions o;
  const Value indent = a.value(1, "indent", None{});
  if (indent.is_int()) {
    o.has_indent = true;
    if (indent.as_int() > max_indent) fail("tojson() indent " + std::to_string(indent.as_int()) + " is wider than " +
                                            std::to_string(max_indent));
    o.indent = std::string(static_cast<std::size_t>(std::max<std::int64_t>(indent.as_int(), 0)), ' ');
  } else if (indent.is_string()) {
    o.has_indent = true;
    o.indent = indent.as_string();
  } else if (!indent.is_none()) {
    fail("tojson() indent must be an int or a string");
  }
  if (o.has_indent) o.item_separator = ",";
  const Value seps = a.value(2, "separators", None{});
  if (seps.is_list() && seps.as_list().items.size() == 2 && seps.as_list().items[0].is_string() &&
      seps.as_list().items[1].is_string()) {
    o.item_separator = seps.as_list().items[0].as_string();
    o.key_separator = seps.as_list().items[1].as_string();
  } else if (!seps.is_none()) {
    fail("tojson() separators must be a pair of strings");
  }
  o.sort_keys = truthy(a.value(3, "sort_keys", false));
  o.ensure_ascii = truthy(a.value(0, "ensure_ascii", false));  // transformers' positional order
  std::string out;
  bool tainted = false;
  to_json(out, v, o, 0, &tainted);
  return string_value(std::move(out), tainted);  // user data inside: all of it is plain text
}

// A float truncated to a 64-bit int (Python's int(x)); Python's ints are unbounded, ours are not,
// so a float beyond the range is an error rather than undefined behaviour.
inline std::int64_t float_to_int(double d) {
  constexpr double limit = 9223372036854775808.0;  // 2^63, exactly representable
  if (!(d >= -limit && d < limit)) fail("int() of " + detail::python_float(d) + " is out of the 64-bit range");
  return static_cast<std::int64_t>(d);
}

inline Value to_int(const Value& v, Args& a) {
  const Value fallback = a.value(0, "default", std::int64_t{0});
  if (v.is_int() || v.is_bool()) return v.as_int();
  if (v.is_float()) return std::isfinite(v.as_double()) ? Value(float_to_int(v.as_double())) : fallback;
  if (!v.is_string()) return fallback;
  const std::int64_t base = a.integer(1, "base", 10);
  const std::string s = py_strip(v.as_string(), std::nullopt, true, true);
  char* end = nullptr;
  if (base == 0 || (base >= 2 && base <= 36)) {  // else Jinja's int(s, base) fails and it tries float
    errno = 0;
    const long long i = std::strtoll(s.c_str(), &end, static_cast<int>(base));
    if (!s.empty() && end == s.c_str() + s.size() && errno == ERANGE)
      fail("int() of '" + s.substr(0, 64) + "' is out of the 64-bit range");
    if (!s.empty() && end == s.c_str() + s.size()) return static_cast<std::int64_t>(i);
  }
  const double d = std::strtod(s.c_str(), &end);
  if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(d)) return float_to_int(d);
  return fallback;
}

inline Value to_float(const Value& v, Args& a) {
  const Value fallback = a.value(0, "default", 0.0);
  if (v.is_number()) return v.as_double();
  if (!v.is_string()) return fallback;
  const std::string s = py_strip(v.as_string(), std::nullopt, true, true);
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size() ? Value(d) : fallback;
}

inline Value length(const Value& v, Args&) {
  if (v.is_string()) return static_cast<std::int64_t>(codepoint_count(v.as_string()));
  if (v.is_list()) return static_cast<std::int64_t>(v.as_list().items.size());
  if (v.is_dict()) return static_cast<std::int64_t>(v.as_dict().items.size());
  if (v.is_undefined()) return std::int64_t{0};
  if (v.is_namespace()) return static_cast<std::int64_t>(v.as_namespace().attrs.items.size());
  fail("object of type '" + std::string(v.type_name()) + "' has no len()");
}

inline Value default_value(const Value& v, Args& a) {
  const bool boolean = truthy(a.value(1, "boolean", false));
  return (v.is_undefined() || (boolean && !truthy(v))) ? a.value(0, "default_value", "") : v;
}

// |replace with autoescape off: str(s).replace(str(old), str(new), count), a plain str.
inline Value replace_filter(const Value& v, Args& a) {
  const Value old = str_value(a.value(0, "old")), repl = str_value(a.value(1, "new"));
  const Value r = replace_value(v, old.as_string(), repl, a.integer(2, "count", -1));
  return Value(r.as_string(), r.taint());
}

}  // namespace detail

inline const std::vector<std::pair<std::string_view, FilterFn>>& filters() {
  using A = detail::Args;
  using detail::like;
  static const std::vector<std::pair<std::string_view, FilterFn>> table = {
      {"tojson", detail::tojson},
      {"trim", [](const Value& v, A& a) -> Value { return detail::strip_value(v, a.opt_str(0, "chars"), true, true); }},
      {"length", detail::length},
      {"count", detail::length},
      {"string", [](const Value& v, A&) -> Value { return detail::str_value(v); }},
      {"int", detail::to_int},
      {"float", detail::to_float},
      {"list", [](const Value& v, A&) -> Value { return Value(iterate(v)); }},
      {"join", detail::join},
      {"default", detail::default_value},
      {"d", detail::default_value},
      {"first", [](const Value& v, A&) { return detail::first_or_last(v, false); }},
      {"last", [](const Value& v, A&) { return detail::first_or_last(v, true); }},
      {"lower", [](const Value& v, A&) -> Value { return like(v, detail::recase_value(v, detail::py_lower)); }},
      {"upper", [](const Value& v, A&) -> Value { return like(v, detail::recase_value(v, detail::py_upper)); }},
      {"capitalize", [](const Value& v, A&) -> Value { return like(v, detail::recase_value(v, detail::py_capitalize)); }},
      {"title", [](const Value& v, A&) -> Value {
         const Value t = detail::recase_value(v, detail::jinja_title);
         return Value(t.as_string(), t.taint());
       }},
      {"items", detail::items},
      {"reverse", detail::reverse},
      {"safe", [](const Value& v, A&) { return detail::as_markup(detail::str_value(v)); }},
      {"escape", [](const Value& v, A&) { return detail::escape_html(v); }},
      {"e", [](const Value& v, A&) { return detail::escape_html(v); }},
      {"forceescape", detail::forceescape},
      {"select", [](const Value& v, A& a) { return detail::select(v, a, false, true); }},
      {"reject", [](const Value& v, A& a) { return detail::select(v, a, false, false); }},
      {"selectattr", [](const Value& v, A& a) { return detail::select(v, a, true, true); }},
      {"rejectattr", [](const Value& v, A& a) { return detail::select(v, a, true, false); }},
      {"map", detail::map},
      {"replace", detail::replace_filter},
      {"abs", [](const Value& v, A&) -> Value {
         if (!v.is_number()) fail("bad operand type for abs(): '" + std::string(v.type_name()) + "'");
         return v.is_float() ? Value(std::fabs(v.as_double())) : binary("*", v, v.as_int() < 0 ? -1 : 1);
       }},
      {"attr", detail::attr},
      {"sort", detail::sort},
      {"unique", detail::unique},
      {"min", [](const Value& v, A& a) { return detail::min_or_max(v, a, false); }},
      {"max", [](const Value& v, A& a) { return detail::min_or_max(v, a, true); }},
      {"sum", detail::sum},
      {"dictsort", detail::dictsort},
      {"groupby", detail::groupby},
      {"batch", detail::batch},
      {"slice", detail::slice_filter},
      {"random", detail::random_item},
      {"center", [](const Value& v, A& a) -> Value {
         return like(v, detail::justify(detail::str_value(v), "center", a.integer(0, "width", 80), " "));
       }},
      {"indent", detail::indent},
      {"truncate", detail::truncate},
      {"wordcount", detail::wordcount},
      {"format", detail::format_filter},
      {"round", detail::round_filter},
      {"filesizeformat", detail::filesizeformat},
      {"striptags", detail::striptags},
      {"urlencode", detail::urlencode},
      {"xmlattr", detail::xmlattr},
      {"pprint", detail::pprint},
  };
  return table;
}

}  // namespace kylin::jinja
