// Jinja builtins as transformers' chat-template sandbox sees them: str/dict methods, filters
// (tojson is transformers' json.dumps version), tests, and the globals raise_exception,
// namespace, range, dict and strftime_now. Anything else is rejected by name.
#pragma once

#include <array>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>

#include "kylin/chat/ops.hpp"
#include "kylin/chat/strings.hpp"

namespace kylin::jinja {

// raise_exception(msg): the message becomes the kylin::Error text unchanged.
struct TemplateException : EvalError {
  using EvalError::EvalError;
};

namespace detail {

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

// A string argument as a Value (keeping its taint), or an error naming it.
inline Value str_arg(const Args& a, std::size_t i, std::string_view name) {
  (void)a.str(i, name);
  return *a.get(i, name);
}

inline Value string_method(const Value& v, std::string_view name, CallArgs& call) {
  const std::string& s = v.as_string();
  Args a{call, name};
  if (name == "startswith" || name == "endswith") return prefix_test(s, a.value(0, "prefix"), name == "endswith");
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return strip_value(v, a.opt_str(0, "chars"), name != "rstrip", name != "lstrip");
  if (name == "split") return split_value(v, a.opt_str(0, "sep"), a.integer(1, "maxsplit", -1));
  if (name == "replace") return replace_value(v, a.str(0, "old"), str_arg(a, 1, "new"), a.integer(2, "count", -1));
  if (name == "upper") return recase_value(v, py_upper);
  if (name == "lower") return recase_value(v, py_lower);
  if (name == "title") return recase_value(v, py_title);
  if (name == "capitalize") return recase_value(v, py_capitalize);
  if (name == "find") {
    const std::size_t hit = s.find(a.str(0, "sub"));
    return hit == std::string::npos ? std::int64_t{-1} : static_cast<std::int64_t>(codepoint_count(s.substr(0, hit)));
  }
  if (name == "count") {
    const std::string sub = a.str(0, "sub");
    std::int64_t n = 0;
    for (std::size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + std::max<std::size_t>(sub.size(), 1))) ++n;
    return n;
  }
  // join
  TaintedText out;
  bool first = true;
  for (const auto& item : iterate(a.value(0, "iterable"))) {
    if (!item.is_string()) fail("sequence item: expected str instance, " + std::string(item.type_name()) + " found");
    if (!first) out.append(s, v.taint());
    out.append(item.as_string(), item.taint());
    first = false;
  }
  return std::move(out).value();
}

inline Value dict_method(const Value& d, std::string_view name, CallArgs& call) {
  Args a{call, name};
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

}  // namespace detail

inline Value bound_method(const Value& obj, std::string_view name) {
  static constexpr std::array<std::string_view, 14> str_methods = {
      "startswith", "endswith", "strip", "lstrip", "rstrip", "split", "replace",
      "upper",      "lower",    "title", "capitalize", "find", "count", "join"};
  static constexpr std::array<std::string_view, 4> dict_methods = {"items", "keys", "values", "get"};
  if (obj.is_string() && std::find(str_methods.begin(), str_methods.end(), name) != str_methods.end()) {
    std::string n(name);
    return Value("str." + n, [obj, n](CallArgs& call) { return detail::string_method(obj, n, call); });
  }
  if (obj.is_dict() && std::find(dict_methods.begin(), dict_methods.end(), name) != dict_methods.end()) {
    std::string n(name);
    return Value("dict." + n, [obj, n](CallArgs& call) { return detail::dict_method(obj, n, call); });
  }
  return Undefined{};
}

// --- tests -----------------------------------------------------------------------------------------
using TestFn = bool (*)(const Value&, detail::Args&);

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
      {"callable", [](const Value& v, A&) { return v.is_function(); }},
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
      {"lower", [](const Value& v, A&) { return v.is_string() && detail::py_lower(v.as_string()) == v.as_string(); }},
      {"upper", [](const Value& v, A&) { return v.is_string() && detail::py_upper(v.as_string()) == v.as_string(); }},
  };
  return table;
}

inline TestFn find_test(std::string_view name) {
  static constexpr std::pair<std::string_view, std::string_view> aliases[] = {
      {"equalto", "eq"}, {"==", "eq"}, {"!=", "ne"}, {"<", "lt"}, {"<=", "le"},
      {">", "gt"},       {">=", "ge"}, {"greaterthan", "gt"}, {"lessthan", "lt"}, {"sameas", "eq"}};
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

// --- filters (filters.hpp) ----------------------------------------------------------------------------
bool has_filter(std::string_view name);

}  // namespace kylin::jinja

#include "kylin/chat/filters.hpp"
