// jinja::Value: the runtime value of kylin's Jinja interpreter, with Python's semantics where
// chat templates can see them (str(), repr(), truthiness, ==, code-point strings), plus
// Jinja's Undefined. Lists and dicts are immutable once built (as in transformers' sandbox).
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "kylin/chat/text.hpp"
#include "kylin/core/json.hpp"

namespace kylin::jinja {

// A failure inside evaluation; the interpreter turns it into kylin::Error naming the line.
struct EvalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Value;
struct CallArgs;
using Function = std::function<Value(CallArgs&)>;

struct Undefined {
  std::string hint;  // Jinja's message when the value is used: "'x' is undefined"
};
struct None {};
struct ListData {
  std::vector<Value> items;
  bool tuple = false;  // only changes repr(): (1, 2) vs [1, 2]
};
struct DictData {
  std::vector<std::pair<std::string, Value>> items;  // insertion order kept, like Python dicts
  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);
};
// namespace() objects (mutable through `set ns.x = ...`) and the read-only `loop` object.
struct NamespaceData {
  DictData attrs;
  bool read_only = false;
};
struct FunctionData {
  std::string name;
  Function fn;
};

class Value {
 public:
  enum class Kind { undefined, none, boolean, integer, floating, string, list, dict, ns, function };

  Value() : v_(Undefined{}) {}
  Value(Undefined u) : v_(std::move(u)) {}
  Value(None) : v_(None{}) {}
  Value(bool b) : v_(b) {}
  Value(int i) : v_(std::int64_t{i}) {}
  Value(std::int64_t i) : v_(i) {}
  Value(double d) : v_(d) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(std::string_view s) : v_(std::string(s)) {}
  Value(std::vector<Value> items, bool tuple = false)
      : v_(std::make_shared<const ListData>(ListData{std::move(items), tuple})) {}
  Value(DictData d) : v_(std::make_shared<const DictData>(std::move(d))) {}
  Value(std::shared_ptr<NamespaceData> ns) : v_(std::move(ns)) {}
  Value(std::string name, Function fn)
      : v_(std::make_shared<const FunctionData>(FunctionData{std::move(name), std::move(fn)})) {}

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::undefined; }
  bool is_none() const { return kind() == Kind::none; }
  bool is_bool() const { return kind() == Kind::boolean; }
  bool is_int() const { return kind() == Kind::integer; }
  bool is_float() const { return kind() == Kind::floating; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // bool is an int in Python
  bool is_string() const { return kind() == Kind::string; }
  bool is_list() const { return kind() == Kind::list; }
  bool is_dict() const { return kind() == Kind::dict; }
  bool is_namespace() const { return kind() == Kind::ns; }
  bool is_function() const { return kind() == Kind::function; }

  const Undefined& undefined() const { return std::get<Undefined>(v_); }
  bool as_bool() const { return std::get<bool>(v_); }
  std::int64_t as_int() const { return is_bool() ? std::int64_t{as_bool()} : std::get<std::int64_t>(v_); }
  double as_double() const { return is_float() ? std::get<double>(v_) : static_cast<double>(as_int()); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const ListData& as_list() const { return *std::get<std::shared_ptr<const ListData>>(v_); }
  const DictData& as_dict() const { return *std::get<std::shared_ptr<const DictData>>(v_); }
  NamespaceData& as_namespace() const { return *std::get<std::shared_ptr<NamespaceData>>(v_); }
  const FunctionData& as_function() const { return *std::get<std::shared_ptr<const FunctionData>>(v_); }

  // Python's name for the type, as error messages show it.
  std::string_view type_name() const;

 private:
  std::variant<Undefined, None, bool, std::int64_t, double, std::string, std::shared_ptr<const ListData>,
               std::shared_ptr<const DictData>, std::shared_ptr<NamespaceData>, std::shared_ptr<const FunctionData>>
      v_;
};

struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

inline const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

inline void DictData::set(std::string key, Value value) {
  for (auto& [k, v] : items)
    if (k == key) {
      v = std::move(value);
      return;
    }
  items.emplace_back(std::move(key), std::move(value));
}

inline std::string_view Value::type_name() const {
  switch (kind()) {
    case Kind::undefined: return "Undefined";
    case Kind::none: return "NoneType";
    case Kind::boolean: return "bool";
    case Kind::integer: return "int";
    case Kind::floating: return "float";
    case Kind::string: return "str";
    case Kind::list: return as_list().tuple ? "tuple" : "list";
    case Kind::dict: return "dict";
    case Kind::ns: return "Namespace";
    case Kind::function: return "function";
  }
  return "object";
}

[[noreturn]] inline void fail(const std::string& message) { throw EvalError(message); }

// Using an Undefined for anything but printing, testing or iterating fails, as in Jinja.
inline void require_defined(const Value& v) {
  if (v.is_undefined()) fail(v.undefined().hint.empty() ? "value is undefined" : v.undefined().hint);
}

std::string repr(const Value& v);

// Python's str(): what `{{ x }}`, `~` and `|string` produce. Undefined prints as "".
inline std::string to_str(const Value& v) {
  using K = Value::Kind;
  switch (v.kind()) {
    case K::undefined: return "";
    case K::string: return v.as_string();
    default: return repr(v);
  }
}

inline std::string repr(const Value& v) {
  using K = Value::Kind;
  switch (v.kind()) {
    case K::undefined: return "Undefined";
    case K::none: return "None";
    case K::boolean: return v.as_bool() ? "True" : "False";
    case K::integer: return std::to_string(v.as_int());
    case K::floating: return detail::python_float(v.as_double());
    case K::string: return detail::python_string_repr(v.as_string());
    case K::list: {
      const auto& l = v.as_list();
      std::string out = l.tuple ? "(" : "[";
      for (std::size_t i = 0; i < l.items.size(); ++i) out += (i ? ", " : "") + repr(l.items[i]);
      if (l.tuple && l.items.size() == 1) out += ",";
      return out + (l.tuple ? ")" : "]");
    }
    case K::dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, item] : v.as_dict().items) {
        out += (first ? "" : ", ") + detail::python_string_repr(k) + ": " + repr(item);
        first = false;
      }
      return out + "}";
    }
    case K::ns: return "<Namespace " + repr(Value(v.as_namespace().attrs)) + ">";
    case K::function: return "<function " + v.as_function().name + ">";
  }
  return "";
}

// Python truthiness; Undefined is falsy.
inline bool truthy(const Value& v) {
  using K = Value::Kind;
  switch (v.kind()) {
    case K::undefined:
    case K::none: return false;
    case K::boolean: return v.as_bool();
    case K::integer: return v.as_int() != 0;
    case K::floating: return v.as_double() != 0.0;
    case K::string: return !v.as_string().empty();
    case K::list: return !v.as_list().items.empty();
    case K::dict: return !v.as_dict().items.empty();
    default: return true;
  }
}

// Python ==: numbers compare by value (True == 1), dicts ignore order, Undefined == Undefined.
inline bool equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::undefined:
    case K::none: return true;
    case K::string: return a.as_string() == b.as_string();
    case K::list: {
      const auto &x = a.as_list().items, &y = b.as_list().items;
      if (x.size() != y.size() || a.as_list().tuple != b.as_list().tuple) return false;
      for (std::size_t i = 0; i < x.size(); ++i)
        if (!equal(x[i], y[i])) return false;
      return true;
    }
    case K::dict: {
      const auto &x = a.as_dict(), &y = b.as_dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.find(k);
        if (!other || !equal(v, *other)) return false;
      }
      return true;
    }
    case K::ns: return &a.as_namespace() == &b.as_namespace();
    case K::function: return &a.as_function() == &b.as_function();
    default: return false;
  }
}

// --- JSON in and out ------------------------------------------------------------------------------

inline Value from_json(const json::Value& j) {
  using T = json::Value::Type;
  switch (j.type()) {
    case T::null: return None{};
    case T::boolean: return j.as_bool();
    case T::integer: return j.as_int();
    case T::number: return j.as_double();
    case T::string: return j.as_string();
    case T::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& item : j.as_array()) items.push_back(from_json(item));
      return Value(std::move(items));
    }
    case T::object: {
      DictData d;
      for (const auto& [k, item] : j.as_object()) d.set(k, from_json(item));
      return Value(std::move(d));
    }
  }
  return None{};
}

struct ToJsonOptions {
  std::string indent;  // "" with has_indent: newlines without spaces (Python indent=0)
  bool has_indent = false;
  std::string item_separator = ", ";  // Python's defaults; "," when indenting
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=..., separators=..., sort_keys=False).
inline void to_json(std::string& out, const Value& v, const ToJsonOptions& o, int depth) {
  using K = Value::Kind;
  auto newline = [&](int d) {
    if (!o.has_indent) return;
    out += '\n';
    for (int i = 0; i < d; ++i) out += o.indent;
  };
  switch (v.kind()) {
    case K::none: out += "null"; return;
    case K::boolean: out += v.as_bool() ? "true" : "false"; return;
    case K::integer: out += std::to_string(v.as_int()); return;
    case K::floating: {
      const double d = v.as_double();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : detail::python_float(d);
      return;
    }
    case K::string: json::detail::dump_string(out, v.as_string(), o.ensure_ascii); return;
    case K::list: {
      const auto& items = v.as_list().items;
      out += '[';
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_separator;
        newline(depth + 1);
        to_json(out, items[i], o, depth + 1);
      }
      if (!items.empty()) newline(depth);
      out += ']';
      return;
    }
    case K::dict: {
      auto items = v.as_dict().items;
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto& a, auto& b) { return a.first < b.first; });
      out += '{';
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_separator;
        newline(depth + 1);
        json::detail::dump_string(out, items[i].first, o.ensure_ascii);
        out += o.key_separator;
        to_json(out, items[i].second, o, depth + 1);
      }
      if (!items.empty()) newline(depth);
      out += '}';
      return;
    }
    default: fail("Object of type " + std::string(v.type_name()) + " is not JSON serializable");
  }
}

}  // namespace kylin::jinja
