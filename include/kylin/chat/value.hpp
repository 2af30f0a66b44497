// jinja::Value: the runtime value of kylin's Jinja interpreter, with Python's semantics where
// chat templates can see them (str(), repr(), truthiness, ==, code-point strings), plus
// Jinja's Undefined. Lists and dicts are immutable once built (as in transformers' sandbox).
// A string also carries the byte ranges that came from user data (message content), so the
// rendered prompt can say which of its bytes must be tokenized as plain text.
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

#include "kylin/chat/budget.hpp"
#include "kylin/chat/text.hpp"
#include "kylin/core/json.hpp"
#include "kylin/tokenizer/text_range.hpp"

namespace kylin::jinja {

using Taint = std::vector<TextRange>;  // sorted, disjoint byte ranges of a string from user data

class Value;
struct CallArgs;
using Function = std::function<Value(CallArgs&)>;

struct Undefined {
  std::string hint;  // Jinja's message when the value is used: "'x' is undefined"
};
struct None {};
// Lists and dicts nest at most this deep, so printing, comparing and freeing them (all
// recursive) cannot exhaust the stack; JSON input is already limited to 1024 levels.
inline constexpr std::uint32_t kMaxValueDepth = 2048;

struct ListData {
  std::vector<Value> items;
  bool tuple = false;  // only changes repr(): (1, 2) vs [1, 2]
  bool group = false;  // a tuple from |groupby: items[0] is also .grouper, items[1] .list
  std::uint32_t depth = 1;
  bool holds_namespace = false;  // a namespace() inside, at any depth (see Interpreter::exec_set)
};
struct StringData {
  std::string text;
  Taint taint;
  // markupsafe.Markup (from |safe, |escape): `+` escapes the other operand, repr is Markup('...').
  bool markup = false;
};
struct DictData {
  std::vector<std::pair<std::string, Value>> items;  // insertion order kept, like Python dicts
  bool tainted_keys = false;                         // some key came from user data
  std::uint32_t depth = 1;                           // set when it becomes a Value
  bool holds_namespace = false;
  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);
};
// namespace() objects (mutable through `set ns.x = ...`) and the read-only `loop` object.
struct NamespaceData {
  DictData attrs;
  bool read_only = false;
  Function call;  // set for a recursive loop's `loop(...)`; empty: not callable
};
struct FunctionData {
  std::string name;
  Function fn;
  bool holds_namespace = false;  // it captured a value holding a namespace() (a bound method of one)
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
  Value(const char* s) : v_(StringData{std::string(s), {}}) {}
  Value(std::string s) : v_(StringData{std::move(s), {}}) {}
  Value(std::string_view s) : v_(StringData{std::string(s), {}}) {}
  Value(std::string s, Taint taint, bool markup = false) : v_(StringData{std::move(s), std::move(taint), markup}) {}
  Value(std::vector<Value> items, bool tuple = false, bool group = false) {
    ListData l{std::move(items), tuple, group};
    for (const Value& item : l.items) nest(item, l.depth, l.holds_namespace);
    v_ = std::make_shared<const ListData>(std::move(l));
  }
  Value(DictData d) {
    d.depth = 1;
    for (const auto& item : d.items) nest(item.second, d.depth, d.holds_namespace);
    v_ = std::make_shared<const DictData>(std::move(d));
  }
  Value(std::shared_ptr<NamespaceData> ns) : v_(std::move(ns)) {}
  Value(std::string name, Function fn, bool holds_namespace = false)
      : v_(std::make_shared<const FunctionData>(FunctionData{std::move(name), std::move(fn), holds_namespace})) {}

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  // The shared object behind a list, dict, namespace or function (Python's id()); null otherwise.
  const void* identity() const {
    return std::visit([](const auto& x) -> const void* {
      if constexpr (requires { x.get(); }) return x.get();
      else return nullptr;
    }, v_);
  }
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
  const std::string& as_string() const { return std::get<StringData>(v_).text; }
  bool is_markup() const { return is_string() && std::get<StringData>(v_).markup; }
  // The user-data ranges of a string; empty for template text and for non-strings.
  const Taint& taint() const {
    static const Taint none;
    return is_string() ? std::get<StringData>(v_).taint : none;
  }
  const ListData& as_list() const { return *std::get<std::shared_ptr<const ListData>>(v_); }
  const DictData& as_dict() const { return *std::get<std::shared_ptr<const DictData>>(v_); }
  NamespaceData& as_namespace() const { return *std::get<std::shared_ptr<NamespaceData>>(v_); }
  const FunctionData& as_function() const { return *std::get<std::shared_ptr<const FunctionData>>(v_); }

  // Python's name for the type, as error messages show it.
  std::string_view type_name() const;
  std::uint32_t depth() const { return is_list() ? as_list().depth : is_dict() ? as_dict().depth : 0; }
  bool holds_namespace() const {
    return is_namespace() || (is_list() && as_list().holds_namespace) || (is_dict() && as_dict().holds_namespace) ||
           (is_function() && as_function().holds_namespace);
  }

 private:
  static void nest(const Value& item, std::uint32_t& depth, bool& holds_namespace) {
    depth = std::max(depth, item.depth() + 1);
    holds_namespace |= item.holds_namespace();
    if (depth > kMaxValueDepth) fail("lists or dicts nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
  }

  std::variant<Undefined, None, bool, std::int64_t, double, StringData, std::shared_ptr<const ListData>,
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

// Using an Undefined for anything but printing, testing or iterating fails, as in Jinja.
inline void require_defined(const Value& v) {
  if (v.is_undefined()) fail(v.undefined().hint.empty() ? "value is undefined" : v.undefined().hint);
}

// Python repr(). Sets *tainted when the text shows user data (a tainted string or dict key).
// Shared sub-lists are printed once per reference, so the output is checked against the
// render's memory budget as it grows.
inline void repr_into(std::string& out, const Value& v, bool* tainted) {
  using K = Value::Kind;
  detail::check_growth(out.size());
  switch (v.kind()) {
    case K::undefined: out += "Undefined"; return;
    case K::none: out += "None"; return;
    case K::boolean: out += v.as_bool() ? "True" : "False"; return;
    case K::integer: out += std::to_string(v.as_int()); return;
    case K::floating: out += detail::python_float(v.as_double()); return;
    case K::string:
      if (tainted && !v.taint().empty()) *tainted = true;
      if (v.is_markup()) out += "Markup(";
      out += detail::python_string_repr(v.as_string());
      if (v.is_markup()) out += ")";
      return;
    case K::list: {
      const auto& l = v.as_list();
      out += l.tuple ? "(" : "[";
      for (std::size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        repr_into(out, l.items[i], tainted);
      }
      if (l.tuple && l.items.size() == 1) out += ",";
      out += l.tuple ? ")" : "]";
      return;
    }
    case K::dict: {
      if (tainted && v.as_dict().tainted_keys) *tainted = true;
      out += "{";
      bool first = true;
      for (const auto& [k, item] : v.as_dict().items) {
        out += (first ? "" : ", ") + detail::python_string_repr(k) + ": ";
        repr_into(out, item, tainted);
        first = false;
      }
      out += "}";
      return;
    }
    case K::ns:
      out += "<Namespace ";
      repr_into(out, Value(v.as_namespace().attrs), tainted);
      out += ">";
      return;
    case K::function: out += "<function " + v.as_function().name + ">"; return;
  }
}

inline std::string repr(const Value& v, bool* tainted = nullptr) {
  std::string out;
  repr_into(out, v, tainted);
  return out;
}

// Python's str(): what `{{ x }}`, `~` and `|string` produce. Undefined prints as "".
inline std::string to_str(const Value& v) {
  using K = Value::Kind;
  switch (v.kind()) {
    case K::undefined: return "";
    case K::string: return v.as_string();
    default: return repr(v);
  }
}

// A string being built, with the byte ranges of its user data.
struct TaintedText {
  std::string text;
  Taint taint;

  void append_plain(std::string_view plain) {
    detail::check_growth(text.size() + plain.size());
    text.append(plain);
  }
  // Bytes [begin, end) of `s`, keeping their taint.
  void append(const std::string& s, const Taint& t, std::size_t begin = 0, std::size_t end = std::string::npos) {
    end = std::min(end, s.size());
    if (begin >= end) return;
    detail::check_growth(text.size() + (end - begin));
    kylin::detail::add_ranges_within(taint, t, begin, end, text.size());
    text.append(s, begin, end - begin);
  }
  // str(v): a string keeps its ranges; any other value is wholly tainted if it shows user data.
  void append_value(const Value& v) {
    if (v.is_string()) return append(v.as_string(), v.taint());
    if (v.is_undefined()) return;
    bool tainted = false;
    const std::string s = repr(v, &tainted);
    const std::size_t begin = text.size();
    append_plain(s);
    if (tainted) kylin::detail::add_range(taint, begin, text.size());
  }
  void taint_all() {
    taint.clear();
    kylin::detail::add_range(taint, 0, text.size());
  }
  Value value() && { return Value(std::move(text), std::move(taint)); }
};

// A new string: `text`, tainted as a whole when `tainted`.
inline Value string_value(std::string text, bool tainted) {
  Taint t;
  if (tainted) kylin::detail::add_range(t, 0, text.size());
  return Value(std::move(text), std::move(t));
}

// The bytes a value holds by value (strings are copied into lists; sub-lists are shared), as
// charged to the render's memory budget.
inline std::size_t value_bytes(const Value& v) {
  using K = Value::Kind;
  switch (v.kind()) {
    case K::string: return sizeof(Value) + v.as_string().size() + v.taint().size() * sizeof(TextRange);
    case K::list: {
      std::size_t n = sizeof(Value) + sizeof(ListData);
      for (const Value& item : v.as_list().items) n += item.is_string() ? value_bytes(item) : sizeof(Value);
      return n;
    }
    case K::dict: {
      std::size_t n = sizeof(Value) + sizeof(DictData);
      for (const auto& [k, item] : v.as_dict().items)
        n += sizeof(std::string) + k.size() + (item.is_string() ? value_bytes(item) : sizeof(Value));
      return n;
    }
    default: return sizeof(Value);
  }
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
  detail::tick();  // comparing shared sub-lists can take exponential time: poll the deadline
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

}  // namespace kylin::jinja

#include "kylin/chat/value_json.hpp"
