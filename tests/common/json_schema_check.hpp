// A small JSON-schema validator for the tests, written apart from kylin's grammar compiler so
// constrained outputs are checked by something that does not share its code: the subset of
// docs/CONSTRAINED.md (type, properties, required, additionalProperties, items, min/maxItems,
// min/maxLength, enum, const, anyOf, $ref into the root).
#pragma once

#include <string>

#include "kylin/core/json.hpp"

namespace test_schema {

// Code points of a UTF-8 string (continuation bytes not counted).
inline std::size_t code_points(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

inline bool has_type(const kylin::json::Value& v, const std::string& type) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "number") return v.is_number();
  if (type == "integer") return v.is_int() || (v.is_number() && v.as_double() == static_cast<double>(static_cast<long long>(v.as_double())));
  if (type == "boolean") return v.is_bool();
  if (type == "null") return v.is_null();
  return false;
}

// Empty when v satisfies schema, else why not (with a JSON-pointer-ish path).
inline std::string check(const kylin::json::Value& v, const kylin::json::Value& schema, const kylin::json::Value& root,
                         const std::string& at = "") {
  using kylin::json::Value;
  if (schema.is_bool()) return schema.as_bool() ? "" : at + ": schema false";
  if (const Value* ref = schema.find("$ref")) {
    const Value* target = &root;
    std::string r = ref->as_string().substr(1);
    while (!r.empty()) {
      const auto next = r.find('/', 1);
      target = target->find(r.substr(1, next == std::string::npos ? std::string::npos : next - 1));
      if (!target) return at + ": unresolvable $ref";
      r = next == std::string::npos ? "" : r.substr(next);
    }
    return check(v, *target, root, at);
  }
  if (const Value* c = schema.find("const"); c && !(*c == v)) return at + ": not the const";
  if (const Value* e = schema.find("enum")) {
    bool found = false;
    for (const Value& x : e->as_array()) found = found || x == v;
    if (!found) return at + ": not in enum";
  }
  if (const Value* any = schema.find("anyOf")) {
    for (const Value& sub : any->as_array())
      if (check(v, sub, root, at).empty()) return "";
    return at + ": matches no anyOf branch";
  }
  if (const Value* t = schema.find("type")) {
    bool ok = false;
    if (t->is_string()) ok = has_type(v, t->as_string());
    else
      for (const Value& x : t->as_array()) ok = ok || has_type(v, x.as_string());
    if (!ok) return at + ": wrong type";
  }
  if (v.is_string()) {
    const std::size_t n = code_points(v.as_string());
    if (const Value* m = schema.find("minLength"); m && n < static_cast<std::size_t>(m->as_int())) return at + ": too short";
    if (const Value* m = schema.find("maxLength"); m && n > static_cast<std::size_t>(m->as_int())) return at + ": too long";
  }
  if (v.is_array()) {
    const std::size_t n = v.as_array().size();
    if (const Value* m = schema.find("minItems"); m && n < static_cast<std::size_t>(m->as_int())) return at + ": too few items";
    if (const Value* m = schema.find("maxItems"); m && n > static_cast<std::size_t>(m->as_int())) return at + ": too many items";
    if (const Value* items = schema.find("items"))
      for (std::size_t i = 0; i < n; ++i)
        if (auto e = check(v.as_array()[i], *items, root, at + "/" + std::to_string(i)); !e.empty()) return e;
  }
  if (v.is_object()) {
    const Value* props = schema.find("properties");
    if (const Value* req = schema.find("required"))
      for (const Value& k : req->as_array())
        if (!v.contains(k.as_string())) return at + ": missing " + k.as_string();
    for (const auto& [key, value] : v.as_object()) {
      const Value* sub = props ? props->find(key) : nullptr;
      if (sub) {
        if (auto e = check(value, *sub, root, at + "/" + key); !e.empty()) return e;
      } else if (const Value* extra = schema.find("additionalProperties"); extra && extra->is_bool() && !extra->as_bool()) {
        return at + ": unexpected property " + key;
      }
    }
  }
  return "";
}

}  // namespace test_schema
