// JSON in and out of the Jinja interpreter: messages/tools become Values (optionally marked as
// user data), and transformers' tojson filter writes Values back as JSON text.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>

#include "kylin/chat/value.hpp"
#include "kylin/core/json.hpp"

namespace kylin::jinja {

// --- JSON in and out ------------------------------------------------------------------------------

// `user_data`: every string and key is marked as user data (tainted), e.g. messages.
inline Value from_json(const json::Value& j, bool user_data = false) {
  using T = json::Value::Type;
  switch (j.type()) {
    case T::null: return None{};
    case T::boolean: return j.as_bool();
    case T::integer: return j.as_int();
    case T::number: return j.as_double();
    case T::string: return string_value(j.as_string(), user_data);
    case T::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& item : j.as_array()) items.push_back(from_json(item, user_data));
      return Value(std::move(items));
    }
    case T::object: {
      DictData d;
      d.tainted_keys = user_data && !j.as_object().empty();
      for (const auto& [k, item] : j.as_object()) d.set(k, from_json(item, user_data));
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
// Sets *tainted when the output shows user data; checks the memory budget as it grows.
inline void to_json(std::string& out, const Value& v, const ToJsonOptions& o, int depth, bool* tainted = nullptr) {
  using K = Value::Kind;
  detail::check_growth(out.size());
  auto newline = [&](int d) {
    if (!o.has_indent) return;
    out += '\n';
    for (int i = 0; i < d; ++i) {
      out += o.indent;
      detail::check_growth(out.size());
    }
  };
  if (tainted && ((v.is_string() && !v.taint().empty()) || (v.is_dict() && v.as_dict().tainted_keys))) *tainted = true;
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
        to_json(out, items[i], o, depth + 1, tainted);
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
        to_json(out, items[i].second, o, depth + 1, tainted);
      }
      if (!items.empty()) newline(depth);
      out += '}';
      return;
    }
    default: fail("Object of type " + std::string(v.type_name()) + " is not JSON serializable");
  }
}

}  // namespace kylin::jinja
