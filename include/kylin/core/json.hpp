// kylin::json::Value: a small owned JSON value (objects keep key order) for chat messages,
// tool schemas, template contexts and server bodies. Parsing goes through simdjson, whose
// depth limit bounds recursion; dump() writes UTF-8 as is (no \u escapes, as tojson does).
#pragma once

#include <simdjson.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "kylin/core/error.hpp"

namespace kylin::json {

class Value;
using Array = std::vector<Value>;
using Object = std::vector<std::pair<std::string, Value>>;  // insertion order kept

class Value {
 public:
  enum class Type { null, boolean, integer, number, string, array, object };

  Value() = default;
  Value(std::nullptr_t) {}
  Value(bool b) : v_(b) {}
  Value(int i) : v_(static_cast<std::int64_t>(i)) {}
  Value(std::int64_t i) : v_(i) {}
  Value(std::uint64_t i) : v_(static_cast<std::int64_t>(i)) {}
  Value(double d) : v_(d) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(std::string_view s) : v_(std::string(s)) {}
  Value(Array a) : v_(std::make_shared<Array>(std::move(a))) {}
  Value(Object o) : v_(std::make_shared<Object>(std::move(o))) {}

  Type type() const { return static_cast<Type>(v_.index()); }
  bool is_null() const { return type() == Type::null; }
  bool is_bool() const { return type() == Type::boolean; }
  bool is_int() const { return type() == Type::integer; }
  bool is_number() const { return type() == Type::integer || type() == Type::number; }
  bool is_string() const { return type() == Type::string; }
  bool is_array() const { return type() == Type::array; }
  bool is_object() const { return type() == Type::object; }

  bool as_bool() const { return std::get<bool>(v_); }
  std::int64_t as_int() const {
    return is_int() ? std::get<std::int64_t>(v_) : static_cast<std::int64_t>(std::get<double>(v_));
  }
  double as_double() const {
    return is_int() ? static_cast<double>(std::get<std::int64_t>(v_)) : std::get<double>(v_);
  }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const Array& as_array() const { return *std::get<std::shared_ptr<Array>>(v_); }
  const Object& as_object() const { return *std::get<std::shared_ptr<Object>>(v_); }
  // Mutable access copies a shared container first, so copies of a Value never alias.
  Array& as_array() { return mutable_ref<Array>(); }
  Object& as_object() { return mutable_ref<Object>(); }

  // Object lookup; nullptr when absent or when this is not an object.
  const Value* find(std::string_view key) const {
    if (!is_object()) return nullptr;
    for (const auto& [k, v] : as_object())
      if (k == key) return &v;
    return nullptr;
  }
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  // Sets or replaces a key, keeping the position of an existing one.
  void set(std::string key, Value value) {
    if (!is_object()) v_ = std::make_shared<Object>();
    for (auto& [k, v] : as_object())
      if (k == key) {
        v = std::move(value);
        return;
      }
    as_object().emplace_back(std::move(key), std::move(value));
  }
  void push_back(Value value) {
    if (!is_array()) v_ = std::make_shared<Array>();
    as_array().push_back(std::move(value));
  }
  std::size_t size() const {
    if (is_array()) return as_array().size();
    if (is_object()) return as_object().size();
    if (is_string()) return as_string().size();
    return 0;
  }

  friend bool operator==(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
      if (a.is_int() && b.is_int()) return a.as_int() == b.as_int();
      return a.as_double() == b.as_double();
    }
    if (a.type() != b.type()) return false;
    switch (a.type()) {
      case Type::null: return true;
      case Type::boolean: return a.as_bool() == b.as_bool();
      case Type::string: return a.as_string() == b.as_string();
      case Type::array: return a.as_array() == b.as_array();
      case Type::object: return a.as_object() == b.as_object();
      default: return false;
    }
  }

 private:
  template <class T>
  T& mutable_ref() {
    auto& p = std::get<std::shared_ptr<T>>(v_);
    if (p.use_count() > 1) p = std::make_shared<T>(*p);
    return *p;
  }

  std::variant<std::monostate, bool, std::int64_t, double, std::string, std::shared_ptr<Array>,
               std::shared_ptr<Object>>
      v_;
};

struct DumpOptions {
  std::string_view item_separator = ",";  // Python json.dumps default is ", "
  std::string_view key_separator = ":";   // Python json.dumps default is ": "
  int indent = -1;                        // < 0: one line
  bool ensure_ascii = false;              // true: escape non-ASCII as \uXXXX
};

namespace detail {

inline void append_codepoint_escape(std::string& out, unsigned cp) {
  static constexpr char hex[] = "0123456789abcdef";
  auto put = [&](unsigned u) {
    out += "\\u";
    for (int shift = 12; shift >= 0; shift -= 4) out += hex[(u >> shift) & 0xF];
  };
  if (cp >= 0x10000) {
    cp -= 0x10000;
    put(0xD800 + (cp >> 10));
    put(0xDC00 + (cp & 0x3FF));
  } else {
    put(cp);
  }
}

inline void dump_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20) {
      append_codepoint_escape(out, c);
    } else if (c >= 0x80 && ensure_ascii) {
      // Decode one UTF-8 sequence; invalid bytes are escaped as U+FFFD.
      unsigned cp = 0xFFFD;
      std::size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      if (len > 1 && i + len <= s.size()) {
        cp = c & (0x7F >> len);
        for (std::size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
        i += len - 1;
      }
      append_codepoint_escape(out, cp);
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

inline void dump_double(std::string& out, double d) {
  if (!std::isfinite(d)) {  // JSON has no NaN/Infinity; null is what most encoders emit
    out += "null";
    return;
  }
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d);
  std::string_view s(buf, static_cast<std::size_t>(r.ptr - buf));
  out += s;
  if (s.find_first_of(".eEn") == std::string_view::npos) out += ".0";  // keep it a float
}

inline void newline(std::string& out, const DumpOptions& o, int depth) {
  if (o.indent < 0) return;
  out += '\n';
  out.append(static_cast<std::size_t>(o.indent * depth), ' ');
}

inline void dump(std::string& out, const Value& v, const DumpOptions& o, int depth) {
  using T = Value::Type;
  switch (v.type()) {
    case T::null: out += "null"; break;
    case T::boolean: out += v.as_bool() ? "true" : "false"; break;
    case T::integer: out += std::to_string(v.as_int()); break;
    case T::number: dump_double(out, v.as_double()); break;
    case T::string: dump_string(out, v.as_string(), o.ensure_ascii); break;
    case T::array: {
      const auto& a = v.as_array();
      out += '[';
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (i) out += o.indent >= 0 ? std::string_view(",") : o.item_separator;
        newline(out, o, depth + 1);
        dump(out, a[i], o, depth + 1);
      }
      if (!a.empty()) newline(out, o, depth);
      out += ']';
      break;
    }
    case T::object: {
      const auto& obj = v.as_object();
      out += '{';
      for (std::size_t i = 0; i < obj.size(); ++i) {
        if (i) out += o.indent >= 0 ? std::string_view(",") : o.item_separator;
        newline(out, o, depth + 1);
        dump_string(out, obj[i].first, o.ensure_ascii);
        out += o.key_separator;
        dump(out, obj[i].second, o, depth + 1);
      }
      if (!obj.empty()) newline(out, o, depth);
      out += '}';
      break;
    }
  }
}

inline Value from_simdjson(simdjson::dom::element e) {
  using simdjson::dom::element_type;
  switch (e.type()) {
    case element_type::NULL_VALUE: return Value();
    case element_type::BOOL: return Value(bool(e.get_bool().value()));
    case element_type::INT64: return Value(std::int64_t(e.get_int64().value()));
    case element_type::UINT64: {
      std::uint64_t u = e.get_uint64().value();
      return u > static_cast<std::uint64_t>(INT64_MAX) ? Value(static_cast<double>(u)) : Value(u);
    }
    case element_type::DOUBLE: return Value(double(e.get_double().value()));
    case element_type::STRING: return Value(std::string_view(e.get_string().value()));
    case element_type::ARRAY: {
      Array a;
      const simdjson::dom::array arr = e.get_array().value();  // named: iterators point into it
      for (auto item : arr) a.push_back(from_simdjson(item));
      return Value(std::move(a));
    }
    case element_type::OBJECT: {
      // A key given twice keeps its first position and its last value, as Python's json and
      // JavaScript's JSON.parse do (RFC 8259 leaves it open). Past a few keys an index keeps
      // that linear in the object's size.
      Object o;
      const simdjson::dom::object obj = e.get_object().value();
      std::vector<std::string_view> keys;  // [fields of o] simdjson's copies, which stay put while it parses
      std::unordered_map<std::string_view, std::size_t> index;  // key -> position in o, once o is large
      constexpr std::size_t scan_up_to = 16;
      for (auto field : obj) {
        std::size_t at = keys.size();
        if (!index.empty()) {
          if (auto it = index.find(field.key); it != index.end()) at = it->second;
        } else {
          for (std::size_t i = 0; i < keys.size(); ++i)
            if (keys[i] == field.key) at = i;
        }
        if (at < keys.size()) {
          o[at].second = from_simdjson(field.value);
          continue;
        }
        keys.push_back(field.key);
        o.emplace_back(std::string(field.key), from_simdjson(field.value));
        if (!index.empty()) index.emplace(field.key, at);
        else if (keys.size() == scan_up_to)
          for (std::size_t i = 0; i < keys.size(); ++i) index.emplace(keys[i], i);
      }
      return Value(std::move(o));
    }
  }
  return Value();
}

}  // namespace detail

inline std::string dump(const Value& v, const DumpOptions& options = {}) {
  std::string out;
  detail::dump(out, v, options, 0);
  return out;
}

namespace detail {

// simdjson refuses numbers outside int64/uint64/double, which JSON itself allows. On that error
// `text` is scanned (outside strings) for its number tokens: an integer beyond 64 bits is rewritten
// as a float ("18446744073709551621" -> "18446744073709551621.0", the nearest double, as Python's
// float() and JSON.parse give), so a request can be told that its field is out of range instead
// of that its JSON is invalid. A number beyond a double's range (1e400) is named in `why`.
// Returns the rewritten text, or nothing when no number needed it.
inline std::optional<std::string> widen_big_integers(std::string_view text, std::string& why) {
  std::string out;
  std::size_t copied = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
      continue;
    }
    if (c != '-' && (c < '0' || c > '9')) continue;
    std::size_t end = i;
    while (end < text.size() && std::string_view("0123456789+-.eE").find(text[end]) != std::string_view::npos) ++end;
    const std::string token(text.substr(i, end - i));
    const bool integer = token.find_first_of(".eE") == std::string::npos;
    errno = 0;
    const double value = std::strtod(token.c_str(), nullptr);
    if (!integer && errno == ERANGE && std::isinf(value) && why.empty())
      why = "the number " + token.substr(0, 40) + " is beyond the range of a 64-bit float";
    std::int64_t i64 = 0;
    std::uint64_t u64 = 0;
    const char* first = token.data();
    const char* last = token.data() + token.size();
    const bool fits = std::from_chars(first, last, i64).ec == std::errc() || std::from_chars(first, last, u64).ec == std::errc();
    if (integer && !fits && token.size() > 1 && token.find_first_not_of("-0123456789") == std::string::npos) {
      out.append(text.substr(copied, end - copied)).append(".0");
      copied = end;
    }
    i = end - 1;
  }
  if (copied == 0) return std::nullopt;
  out.append(text.substr(copied));
  return out;
}

}  // namespace detail

// Parses a complete JSON text. Errors name `what` (a file or "request body") and simdjson's reason.
// Integers beyond 64 bits parse as the nearest double; a key given twice keeps its last value.
inline Value parse(std::string_view text, std::string_view what = "json",
                   ErrorCategory category = ErrorCategory::io) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(text);
  simdjson::dom::element root;
  auto err = parser.parse(padded).get(root);
  if (err == simdjson::NUMBER_ERROR) {
    std::string why;
    if (const auto widened = detail::widen_big_integers(text, why); widened && why.empty()) {
      padded = simdjson::padded_string(*widened);
      err = parser.parse(padded).get(root);
    }
    if (!why.empty()) throw Error(category, std::string(what), "invalid JSON: " + why);
  }
  if (err) throw Error(category, std::string(what), std::string("invalid JSON: ") + simdjson::error_message(err));
  return detail::from_simdjson(root);
}

}  // namespace kylin::json
