// Jinja builtins as transformers' chat-template sandbox sees them: methods (str_methods.hpp),
// tests (jinja2/tests.py), and filters (filters.hpp; tojson is transformers' json.dumps version).
// Anything else is rejected by name.
#pragma once

#include <array>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>

#include "kylin/chat/ops.hpp"
#include "kylin/chat/str_methods.hpp"

namespace kylin::jinja {

// raise_exception(msg): the message becomes the kylin::Error text unchanged.
struct TemplateException : EvalError {
  using EvalError::EvalError;
};

inline Value bound_method(const Value& obj, std::string_view name) {
  using detail::string_methods;
  static constexpr std::array<std::string_view, 5> dict_methods = {"items", "keys", "values", "get", "copy"};
  static constexpr std::array<std::string_view, 3> list_methods = {"count", "index", "copy"};
  auto has = [&](const auto& names) { return std::find(names.begin(), names.end(), name) != names.end(); };
  const std::string n(name);
  if (obj.is_string() && has(string_methods))
    return Value("str." + n, [obj, n](CallArgs& call) { return detail::string_method(obj, n, call); });
  // A bound method keeps its object: storing it in a namespace must count as storing the object.
  const bool holds = obj.holds_namespace();
  if (obj.is_dict() && has(dict_methods))
    return Value("dict." + n, [obj, n](CallArgs& call) { return detail::dict_method(obj, n, call); }, holds);
  if (obj.is_list() && has(list_methods) && !(obj.as_list().tuple && n == "copy"))
    return Value(std::string(obj.type_name()) + "." + n, [obj, n](CallArgs& call) { return detail::sequence_method(obj, n, call); },
                 holds);
  return Undefined{};
}

// --- tests -----------------------------------------------------------------------------------------
using TestFn = bool (*)(const Value&, detail::Args&);
inline bool has_test(std::string_view name);
inline bool has_filter(std::string_view name);

namespace detail {
// Python's `is` as far as kylin's values show it: lists, dicts, namespaces and functions by
// identity; None, booleans, numbers and strings by value (CPython caches small ints and interns
// literal strings, so real templates' `sameas` checks on them agree).
inline bool same_object(const Value& a, const Value& b) {
  if (a.kind() != b.kind()) return false;
  if (a.is_list() || a.is_dict() || a.is_namespace() || a.is_function()) return a.identity() == b.identity();
  return a.is_undefined() || equal(a, b);
}
}  // namespace detail

inline const std::vector<std::pair<std::string_view, TestFn>>& tests() {
  using A = detail::Args;
  static const std::vector<std::pair<std::string_view, TestFn>> table = {
      {"defined", [](const Value& v, A&) { return !v.is_undefined(); }},
      {"undefined", [](const Value& v, A&) { return v.is_undefined(); }},
      {"none", [](const Value& v, A&) { return v.is_none(); }},
      {"string", [](const Value& v, A&) { return v.is_string(); }},
      {"mapping", [](const Value& v, A&) { return v.is_dict(); }},
      {"iterable", [](const Value& v, A&) { return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict(); }},
      {"sequence", [](const Value& v, A&) { return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict(); }},
      {"number", [](const Value& v, A&) { return v.is_number(); }},
      {"integer", [](const Value& v, A&) { return v.is_int(); }},
      {"float", [](const Value& v, A&) { return v.is_float(); }},
      {"boolean", [](const Value& v, A&) { return v.is_bool(); }},
      {"true", [](const Value& v, A&) { return v.is_bool() && v.as_bool(); }},
      {"false", [](const Value& v, A&) { return v.is_bool() && !v.as_bool(); }},
      {"callable", [](const Value& v, A&) { return v.is_function() || (v.is_namespace() && v.as_namespace().call); }},
      // Jinja's `value % 2 == 1`: a float's remainder is a float (2.5 is not odd, 3.0 is)
      {"odd", [](const Value& v, A&) { return equal(binary("%", v, std::int64_t{2}), Value(std::int64_t{1})); }},
      {"even", [](const Value& v, A&) { return equal(binary("%", v, std::int64_t{2}), Value(std::int64_t{0})); }},
      {"divisibleby", [](const Value& v, A& a) { return binary("%", v, a.value(0, "num")).as_double() == 0; }},
      {"eq", [](const Value& v, A& a) { return equal(v, a.value(0, "other")); }},
      {"ne", [](const Value& v, A& a) { return !equal(v, a.value(0, "other")); }},
      {"lt", [](const Value& v, A& a) { return compare("<", v, a.value(0, "other")); }},
      {"le", [](const Value& v, A& a) { return compare("<=", v, a.value(0, "other")); }},
      {"gt", [](const Value& v, A& a) { return compare(">", v, a.value(0, "other")); }},
      {"ge", [](const Value& v, A& a) { return compare(">=", v, a.value(0, "other")); }},
      {"in", [](const Value& v, A& a) { return contains(a.value(0, "seq"), v); }},
      {"lower", [](const Value& v, A&) { return detail::case_test(to_str(v), "islower"); }},
      {"upper", [](const Value& v, A&) { return detail::case_test(to_str(v), "isupper"); }},
      {"sameas", [](const Value& v, A& a) { return detail::same_object(v, a.value(0, "other")); }},
      {"escaped", [](const Value& v, A&) { return v.is_markup(); }},
      {"filter", [](const Value& v, A&) { return v.is_string() && has_filter(v.as_string()); }},
      {"test", [](const Value& v, A&) { return v.is_string() && has_test(v.as_string()); }},
  };
  return table;
}

inline TestFn find_test(std::string_view name) {
  static constexpr std::pair<std::string_view, std::string_view> aliases[] = {
      {"equalto", "eq"}, {"==", "eq"}, {"!=", "ne"}, {"<", "lt"}, {"<=", "le"},
      {">", "gt"},       {">=", "ge"}, {"greaterthan", "gt"}, {"lessthan", "lt"}};
  for (auto [alias, target] : aliases)
    if (name == alias) name = target;
  for (const auto& [n, fn] : tests())
    if (n == name) return fn;
  return nullptr;
}
inline bool has_test(std::string_view name) { return find_test(name) != nullptr; }

inline bool run_test(std::string_view name, const Value& v, CallArgs& call) {
  TestFn fn = find_test(name);
  if (!fn) fail("unsupported test '" + std::string(name) + "'");
  detail::Args a{call, name};
  return fn(v, a);
}

}  // namespace kylin::jinja

#include "kylin/chat/filters.hpp"
