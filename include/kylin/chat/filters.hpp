// Jinja filters used by chat templates, with jinja2/filters.py semantics; tojson is
// transformers' replacement: json.dumps(x, ensure_ascii=False, indent, separators, sort_keys).
#pragma once

#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/chat/builtins.hpp"

namespace kylin::jinja {

using FilterFn = Value (*)(const Value&, detail::Args&);
const std::vector<std::pair<std::string_view, FilterFn>>& filters();

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

inline Value tojson(const Value& v, Args& a) {
  ToJsonOptions o;
  const Value indent = a.value(0, "indent", None{});
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
  const Value seps = a.value(1, "separators", None{});
  if (seps.is_list() && seps.as_list().items.size() == 2 && seps.as_list().items[0].is_string() &&
      seps.as_list().items[1].is_string()) {
    o.item_separator = seps.as_list().items[0].as_string();
    o.key_separator = seps.as_list().items[1].as_string();
  } else if (!seps.is_none()) {
    fail("tojson() separators must be a pair of strings");
  }
  o.sort_keys = truthy(a.value(2, "sort_keys", false));
  o.ensure_ascii = truthy(a.value(3, "ensure_ascii", false));
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

inline Value join(const Value& v, Args& a) {
  const Value sep = a.get(0, "d") ? str_value(*a.get(0, "d")) : Value("");
  const Value attribute = a.value(1, "attribute", None{});
  TaintedText out;
  bool first = true;
  for (const auto& item : iterate(v)) {
    if (!first) out.append(sep.as_string(), sep.taint());
    out.append_value(attribute.is_none() ? item : get_item(item, attribute));
    first = false;
  }
  return std::move(out).value();
}

inline Value length(const Value& v, Args&) {
  if (v.is_string()) return static_cast<std::int64_t>(codepoint_count(v.as_string()));
  if (v.is_list()) return static_cast<std::int64_t>(v.as_list().items.size());
  if (v.is_dict()) return static_cast<std::int64_t>(v.as_dict().items.size());
  if (v.is_undefined()) return std::int64_t{0};
  if (v.is_namespace()) return static_cast<std::int64_t>(v.as_namespace().attrs.items.size());
  fail("object of type '" + std::string(v.type_name()) + "' has no len()");
}

// Attribute path "a.b" or index, as selectattr/map take it.
inline Value attribute_of(const Value& item, const std::string& path) {
  Value cur = item;
  std::size_t pos = 0;
  while (true) {
    const std::size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    const bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    std::int64_t index = 0;
    const bool is_index = digits && std::from_chars(part.data(), part.data() + part.size(), index).ec == std::errc();
    cur = is_index ? get_item(cur, Value(index)) : get_item(cur, Value(part));
    if (dot == std::string::npos) return cur;
    pos = dot + 1;
  }
}

// select/reject (by_attr false) and selectattr/rejectattr (by_attr true).
inline Value select(const Value& v, Args& a, bool by_attr, bool keep) {
  const std::size_t first_test_arg = by_attr ? 1 : 0;
  const std::string attr = by_attr ? a.str(0, "attribute") : "";
  const Value* test = a.get(first_test_arg, "test");
  CallArgs test_args;
  for (std::size_t i = first_test_arg + 1; i < a.call.args.size(); ++i) test_args.args.push_back(a.call.args[i]);
  std::vector<Value> out;
  for (const auto& item : iterate(v)) {
    const Value subject = by_attr ? attribute_of(item, attr) : item;
    bool ok = test ? run_test(to_str(*test), subject, test_args) : truthy(subject);
    if (ok == keep) out.push_back(item);
  }
  return Value(std::move(out));
}

// map(attribute='x', default=...) or map('filter', args...).
inline Value map(const Value& v, Args& a) {
  std::vector<Value> out;
  if (const Value* attr = a.get(99, "attribute")) {
    const Value fallback = a.value(99, "default");
    for (const auto& item : iterate(v)) {
      Value x = attribute_of(item, to_str(*attr));
      out.push_back(x.is_undefined() && !fallback.is_undefined() ? fallback : x);
    }
    return Value(std::move(out));
  }
  const std::string name = a.str(0, "filter");
  CallArgs rest;
  rest.args.assign(a.call.args.begin() + 1, a.call.args.end());
  rest.kwargs = a.call.kwargs;
  for (const auto& item : iterate(v)) {
    CallArgs args = rest;
    out.push_back(run_filter(name, item, args));
  }
  return Value(std::move(out));
}

inline Value default_value(const Value& v, Args& a) {
  const bool boolean = truthy(a.value(1, "boolean", false));
  return (v.is_undefined() || (boolean && !truthy(v))) ? a.value(0, "default_value", "") : v;
}

inline Value first_or_last(const Value& v, bool last) {
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Undefined{"No first item, sequence was empty."};
  return last ? items.back() : items.front();
}

inline Value reverse(const Value& v, Args&) {
  if (v.is_string()) return slice(v, None{}, None{}, std::int64_t{-1});
  std::vector<Value> items = iterate(v);
  return Value(std::vector<Value>(items.rbegin(), items.rend()));
}

inline Value items(const Value& v, Args&) {
  if (v.is_undefined()) return Value(std::vector<Value>{});
  if (!v.is_dict()) fail("can only get item pairs from a mapping");
  std::vector<Value> out;
  for (const auto& [k, x] : v.as_dict().items)
    out.push_back(Value(std::vector<Value>{string_value(k, v.as_dict().tainted_keys), x}, true));
  return Value(std::move(out));
}

}  // namespace detail

inline const std::vector<std::pair<std::string_view, FilterFn>>& filters() {
  using A = detail::Args;
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
      {"lower", [](const Value& v, A&) -> Value { return detail::recase_value(v, detail::py_lower); }},
      {"upper", [](const Value& v, A&) -> Value { return detail::recase_value(v, detail::py_upper); }},
      {"capitalize", [](const Value& v, A&) -> Value { return detail::recase_value(v, detail::py_capitalize); }},
      {"title", [](const Value& v, A&) -> Value { return detail::recase_value(v, detail::jinja_title); }},
      {"items", detail::items},
      {"reverse", detail::reverse},
      {"safe", [](const Value& v, A&) { return v; }},
      {"select", [](const Value& v, A& a) { return detail::select(v, a, false, true); }},
      {"reject", [](const Value& v, A& a) { return detail::select(v, a, false, false); }},
      {"selectattr", [](const Value& v, A& a) { return detail::select(v, a, true, true); }},
      {"rejectattr", [](const Value& v, A& a) { return detail::select(v, a, true, false); }},
      {"map", detail::map},
      {"replace", [](const Value& v, A& a) -> Value {
         return detail::replace_value(v, a.str(0, "old"), detail::str_arg(a, 1, "new"), a.integer(2, "count", -1));
       }},
      {"abs", [](const Value& v, A&) -> Value {
         if (!v.is_number()) fail("bad operand type for abs(): '" + std::string(v.type_name()) + "'");
         return v.is_float() ? Value(std::fabs(v.as_double())) : binary("*", v, v.as_int() < 0 ? -1 : 1);
       }},
  };
  return table;
}

}  // namespace kylin::jinja
