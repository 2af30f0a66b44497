// The JSON-schema keywords json_schema.hpp compiles, each with the type it applies to: one table
// for the supported set, the check that a keyword fits the schema's type, and the type a schema
// without "type" implies.
#pragma once

#include <map>
#include <set>
#include <string>

namespace kylin::constrain::detail {

// keyword -> the type it constrains ("" for keywords of any type). number keywords apply to
// integers too.
inline const std::map<std::string, std::string>& schema_keywords() {
  static const std::map<std::string, std::string> table = {
      {"type", ""},         {"enum", ""},          {"const", ""},         {"anyOf", ""},
      {"$ref", ""},         {"$defs", ""},         {"definitions", ""},   {"title", ""},
      {"description", ""},  {"$schema", ""},       {"$id", ""},           {"$comment", ""},
      {"default", ""},      {"examples", ""},
      {"properties", "object"},    {"required", "object"},      {"additionalProperties", "object"},
      {"minProperties", "object"}, {"maxProperties", "object"},
      {"items", "array"},          {"prefixItems", "array"},    {"additionalItems", "array"},
      {"minItems", "array"},
      {"maxItems", "array"},       {"uniqueItems", "array"},
      {"minLength", "string"},     {"maxLength", "string"},     {"pattern", "string"},
      {"format", "string"},
      {"minimum", "number"},       {"maximum", "number"},       {"exclusiveMinimum", "number"},
      {"exclusiveMaximum", "number"}, {"multipleOf", "integer"}};
  return table;
}

// Keywords with no effect on validity (the only ones allowed beside $ref).
inline const std::set<std::string>& schema_annotations() {
  static const std::set<std::string> set = {"title", "description", "$schema", "$id", "$comment",
                                            "default", "examples", "$defs", "definitions"};
  return set;
}

// The type a schema without "type" implies by its keywords, or "" (any value).
template <class Schema>
std::string implied_type(const Schema& s) {
  for (const char* type : {"object", "array", "string", "integer", "number"})  // multipleOf makes an integer
    for (const auto& [key, value] : s.as_object())
      if (auto it = schema_keywords().find(key); it != schema_keywords().end() && it->second == type) return type;
  return "";
}

}  // namespace kylin::constrain::detail
