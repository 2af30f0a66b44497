// Jinja's operators with Python semantics: attribute and item lookup (Undefined on a miss),
// slices, arithmetic (overflow-checked 64-bit ints), comparisons, `in`, iteration.
#pragma once

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/chat/markup.hpp"
#include "kylin/chat/value.hpp"

namespace kylin::jinja {

// Strings built by templates (repetition, concatenation, output) stay under this size.
inline constexpr std::size_t kMaxStringBytes = std::size_t{64} << 20;

inline Value undefined_attr(const Value& obj, std::string_view name) {
  if (obj.is_none()) return Undefined{"'None' has no attribute '" + std::string(name) + "'"};
  return Undefined{"'" + std::string(obj.type_name()) + " object' has no attribute '" + std::string(name) + "'"};
}

Value bound_method(const Value& obj, std::string_view name);  // builtins.hpp; Undefined if none
Value percent_format(const Value& format, const Value& args);  // format.hpp: fmt % args

// What jinja2's ImmutableSandboxedEnvironment refuses to look up: dunder attributes and the
// methods that mutate a list or dict. Using the result fails with the sandbox's SecurityError text.
inline bool unsafe_attribute(const Value& obj, std::string_view name) {
  if (name.size() > 4 && name.substr(0, 2) == "__" && name.substr(name.size() - 2) == "__") return true;
  static constexpr std::string_view list_mutators[] = {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};
  static constexpr std::string_view dict_mutators[] = {"clear", "pop", "popitem", "setdefault", "update"};
  if (obj.is_list() && !obj.as_list().tuple)
    return std::find(std::begin(list_mutators), std::end(list_mutators), name) != std::end(list_mutators);
  return obj.is_dict() && std::find(std::begin(dict_mutators), std::end(dict_mutators), name) != std::end(dict_mutators);
}

// obj.name: Jinja tries the Python attribute (methods) first, then the item.
inline Value get_attr(const Value& obj, std::string_view name) {
  require_defined(obj);
  if (obj.is_namespace()) {
    const Value* v = obj.as_namespace().attrs.find(name);
    return v ? *v : undefined_attr(obj, name);
  }
  if (unsafe_attribute(obj, name))
    return Undefined{"access to attribute '" + std::string(name) + "' of '" + std::string(obj.type_name()) + "' object is unsafe."};
  if (obj.is_list() && obj.as_list().group && (name == "grouper" || name == "list"))
    return obj.as_list().items[name == "grouper" ? 0 : 1];
  Value method = bound_method(obj, name);
  if (!method.is_undefined()) return method;
  if (obj.is_dict())
    if (const Value* v = obj.as_dict().find(name)) return *v;
  return undefined_attr(obj, name);
}

namespace detail {

// Byte offset of each code point of `s` (as decode_utf8 splits it), then s.size().
inline std::vector<std::size_t> codepoint_offsets(std::string_view s) {
  std::vector<std::size_t> out;
  out.reserve(s.size() + 1);
  for (std::size_t i = 0; i < s.size();) {
    out.push_back(i);
    char32_t cp = 0;
    i += next_codepoint(s, i, cp);
  }
  out.push_back(s.size());
  return out;
}

// Bytes [begin, end) of string `v` as a new string, keeping the taint of those bytes (and a
// Markup's markup: markupsafe's __getitem__ returns Markup).
inline Value substring(const Value& v, std::size_t begin, std::size_t end) {
  TaintedText out;
  out.append(v.as_string(), v.taint(), begin, end);
  return Value(std::move(out.text), std::move(out.taint), v.is_markup());
}

}  // namespace detail

inline std::int64_t to_index(const Value& key) {
  if (!key.is_int() && !key.is_bool()) fail("indices must be integers, not " + std::string(key.type_name()));
  return key.as_int();
}

// obj[key]: Jinja tries the item first, then the attribute for string keys.
inline Value get_item(const Value& obj, const Value& key) {
  require_defined(obj);
  // jinja2's getitem turns the KeyError/TypeError of an undefined key into an undefined value
  if (key.is_undefined()) return Undefined{"'" + std::string(obj.type_name()) + " object' has no item Undefined"};
  if (obj.is_dict() && key.is_string()) {
    if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
    return get_attr(obj, key.as_string());
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    std::int64_t i = key.as_int();
    if (obj.is_list()) {
      const auto& items = obj.as_list().items;
      const auto n = static_cast<std::int64_t>(items.size());
      if (i < 0) i += n;
      return i >= 0 && i < n ? items[static_cast<std::size_t>(i)] : Value(Undefined{"list index out of range"});
    }
    const std::vector<std::size_t> at = detail::codepoint_offsets(obj.as_string());
    const auto n = static_cast<std::int64_t>(at.size() - 1);
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Undefined{"string index out of range"};
    const auto k = static_cast<std::size_t>(i);
    return detail::substring(obj, at[k], at[k + 1]);
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Undefined{"'" + std::string(obj.type_name()) + " object' has no item " + repr(key)};
}

// Python slice semantics (PySlice_AdjustIndices) for lists and strings (by code point).
inline Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step_v) {
  require_defined(obj);
  const std::int64_t step = step_v.is_none() || step_v.is_undefined() ? 1 : to_index(step_v);
  if (step == 0) fail("slice step cannot be zero");
  const bool is_str = obj.is_string();
  if (!is_str && !obj.is_list()) fail("'" + std::string(obj.type_name()) + "' object is not subscriptable");
  const std::vector<std::size_t> at = is_str ? detail::codepoint_offsets(obj.as_string()) : std::vector<std::size_t>{};
  const auto n = static_cast<std::int64_t>(is_str ? at.size() - 1 : obj.as_list().items.size());
  auto adjust = [&](const Value& v, std::int64_t dflt) {
    if (v.is_none() || v.is_undefined()) return dflt;
    std::int64_t i = to_index(v);
    if (i < 0) i = std::max(i + n, step < 0 ? std::int64_t{-1} : std::int64_t{0});
    else if (i >= n) i = step < 0 ? n - 1 : n;
    return i;
  };
  const std::int64_t lo = adjust(start, step < 0 ? n - 1 : 0), hi = adjust(stop, step < 0 ? -1 : n);
  if (is_str && step == 1) return detail::substring(obj, at[static_cast<std::size_t>(lo)], at[static_cast<std::size_t>(std::max(lo, hi))]);
  std::vector<Value> items;
  TaintedText text;
  // i += step stops on overflow: the next index would lie beyond hi anyway (step is up to 2^63-1).
  for (std::int64_t i = lo; step > 0 ? i < hi : i > hi;) {
    const auto k = static_cast<std::size_t>(i);
    if (is_str) text.append(obj.as_string(), obj.taint(), at[k], at[k + 1]);
    else items.push_back(obj.as_list().items[k]);
    if (__builtin_add_overflow(i, step, &i)) break;
  }
  if (is_str) return Value(std::move(text.text), std::move(text.taint), obj.is_markup());
  return Value(std::move(items), obj.as_list().tuple);
}

// What `for x in v` visits: list items, dict keys, string characters; Undefined is empty.
// The copy is charged to the render's budget: a 64 MB string is 64M one-character Values.
inline std::vector<Value> iterate(const Value& v) {
  if (v.is_undefined()) return {};
  if (v.is_list()) {
    detail::charge(value_bytes(v));
    return v.as_list().items;
  }
  std::vector<Value> out;
  if (v.is_dict()) {
    detail::charge(value_bytes(v));
    for (const auto& [k, item] : v.as_dict().items) out.push_back(string_value(k, v.as_dict().tainted_keys));
    return out;
  }
  if (v.is_string()) {
    const std::vector<std::size_t> at = detail::codepoint_offsets(v.as_string());
    detail::charge(at.size() * (sizeof(Value) + 8));
    for (std::size_t k = 0; k + 1 < at.size(); ++k) {
      Value c = detail::substring(v, at[k], at[k + 1]);
      out.push_back(c.is_markup() ? Value(c.as_string(), c.taint()) : std::move(c));  // Markup iterates as plain str
    }
    return out;
  }
  fail("'" + std::string(v.type_name()) + "' object is not iterable");
}

inline bool contains(const Value& container, const Value& item) {
  if (container.is_undefined()) return false;
  if (container.is_string()) {
    if (!item.is_string()) fail("'in <string>' requires string as left operand, not " + std::string(item.type_name()));
    return container.as_string().find(item.as_string()) != std::string::npos;
  }
  if (container.is_list()) {
    for (const auto& x : container.as_list().items)
      if (equal(x, item)) return true;
    return false;
  }
  if (container.is_dict()) return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
  fail("argument of type '" + std::string(container.type_name()) + "' is not iterable");
}

namespace detail {

[[noreturn]] inline void bad_operands(std::string_view op, const Value& a, const Value& b) {
  fail("unsupported operand type(s) for " + std::string(op) + ": '" + std::string(a.type_name()) + "' and '" +
       std::string(b.type_name()) + "'");
}

inline Value repeat(const Value& seq, std::int64_t times) {
  if (times < 0) times = 0;
  const std::size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_list().items.size() * sizeof(Value);
  if (unit == 0) return seq.is_string() ? Value("") : Value(std::vector<Value>{}, seq.as_list().tuple);  // '' * 10**18
  if (static_cast<std::size_t>(times) > kMaxStringBytes / unit) fail("repetition result too large");
  charge(unit * static_cast<std::size_t>(times));
  if (seq.is_string()) {
    TaintedText out;
    for (std::int64_t i = 0; i < times; ++i) out.append(seq.as_string(), seq.taint());
    return Value(std::move(out.text), std::move(out.taint), seq.is_markup());
  }
  std::vector<Value> out;
  for (std::int64_t i = 0; i < times; ++i)
    out.insert(out.end(), seq.as_list().items.begin(), seq.as_list().items.end());
  return Value(std::move(out), seq.as_list().tuple);
}

inline Value int_op(char op, std::int64_t x, std::int64_t y) {
  std::int64_t r = 0;
  bool overflow = false;
  switch (op) {
    case '+': overflow = __builtin_add_overflow(x, y, &r); break;
    case '-': overflow = __builtin_sub_overflow(x, y, &r); break;
    case '*': overflow = __builtin_mul_overflow(x, y, &r); break;
    case 'f':  // floor division
    case '%': {
      if (y == 0) fail("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) fail("integer overflow");
      std::int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;
      return op == 'f' ? q : m;
    }
    case 'p': {  // power, y >= 0, by squaring: 1 ** 10**18 takes 60 steps, not 10**18
      r = 1;
      for (std::int64_t base = x, e = y; e > 0 && !overflow; e >>= 1) {
        if (e & 1) overflow = __builtin_mul_overflow(r, base, &r);
        if (e > 1 && !overflow) overflow = __builtin_mul_overflow(base, base, &base);
      }
      break;
    }
    default: break;
  }
  if (overflow) fail("integer overflow (kylin's template integers are 64-bit)");
  return r;
}

}  // namespace detail

// a <op> b for + - * / // % **.
inline Value binary(std::string_view op, const Value& a, const Value& b) {
  require_defined(a);
  require_defined(b);
  if (a.is_number() && b.is_number()) {
    const bool ints = !a.is_float() && !b.is_float();
    const char c = op == "//" ? 'f' : op == "**" ? 'p' : op[0];
    if (ints && c != '/' && !(c == 'p' && b.as_int() < 0)) {
      if (c == 'p' && b.as_int() > 64 && a.as_int() != 0 && a.as_int() != 1 && a.as_int() != -1)
        fail("integer overflow (kylin's template integers are 64-bit)");
      return detail::int_op(c, a.as_int(), b.as_int());
    }
    const double x = a.as_double(), y = b.as_double();
    switch (c) {
      case '+': return x + y;
      case '-': return x - y;
      case '*': return x * y;
      case 'p': return std::pow(x, y);
      default: break;
    }
    if (y == 0) fail(c == '/' ? "division by zero" : "float modulo or floor division by zero");
    if (c == '/') return x / y;
    const double m = std::fmod(x, y);
    const double mod = (m != 0 && ((m < 0) != (y < 0))) ? m + y : m;
    return c == '%' ? mod : std::floor(x / y);
  }
  if (op == "+" && a.is_string() && b.is_string()) {
    if (a.as_string().size() + b.as_string().size() > kMaxStringBytes) fail("string result too large");
    if (a.is_markup() || b.is_markup()) return detail::markup_concat(a, b);
    TaintedText out;
    out.append(a.as_string(), a.taint());
    out.append(b.as_string(), b.taint());
    return std::move(out).value();
  }
  if (op == "+" && a.is_list() && b.is_list() && a.as_list().tuple == b.as_list().tuple) {
    detail::charge(value_bytes(a) + value_bytes(b));
    std::vector<Value> items = a.as_list().items;
    items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
    return Value(std::move(items), a.as_list().tuple);
  }
  if (op == "*" && (a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return detail::repeat(a, b.as_int());
  if (op == "*" && (b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return detail::repeat(b, a.as_int());
  if (op == "%" && a.is_string()) return percent_format(a, b);
  if (op == "+" && (a.is_string() || a.is_list()))
    fail("can only concatenate " + std::string(a.type_name()) + " (not \"" + std::string(b.type_name()) + "\") to " +
         std::string(a.type_name()));
  detail::bad_operands(op, a, b);
}

// Ordering for < <= > >=: numbers, strings (code point order), sequences lexicographically.
inline int order(const Value& a, const Value& b, std::string_view op) {
  detail::tick();
  require_defined(a);
  require_defined(b);
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int();
    return a.as_double() < b.as_double() ? -1 : a.as_double() > b.as_double();
  }
  if (a.is_string() && b.is_string()) return a.as_string().compare(b.as_string()) < 0 ? -1 : a.as_string() != b.as_string();
  if (a.is_list() && b.is_list()) {
    const auto &x = a.as_list().items, &y = b.as_list().items;
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equal(x[i], y[i])) return order(x[i], y[i], op);
    return x.size() < y.size() ? -1 : x.size() > y.size();
  }
  fail("'" + std::string(op) + "' not supported between instances of '" + std::string(a.type_name()) + "' and '" +
       std::string(b.type_name()) + "'");
}

inline bool compare(std::string_view op, const Value& a, const Value& b) {
  if (op == "==") return equal(a, b);
  if (op == "!=") return !equal(a, b);
  if (op == "in") return contains(b, a);
  if (op == "not in") return !contains(b, a);
  const int c = order(a, b, op);
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;
}

}  // namespace kylin::jinja
