// The typed readers of OpenAI request fields: a missing or null field is absent, a field of the
// wrong type is a 400 naming it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kylin/core/json.hpp"
#include "kylin/server/api_error.hpp"

namespace kylin::server::detail {

inline const json::Value* field(const json::Value& body, std::string_view name) {
  const json::Value* v = body.find(name);
  return v == nullptr || v->is_null() ? nullptr : v;
}

inline std::optional<double> number_field(const json::Value& body, std::string_view name) {
  const json::Value* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) throw invalid(std::string(name), "'" + std::string(name) + "' must be a number");
  return v->as_double();
}

inline std::optional<std::int64_t> int_field(const json::Value& body, std::string_view name) {
  const json::Value* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_int()) throw invalid(std::string(name), "'" + std::string(name) + "' must be an integer");
  return v->as_int();
}

inline std::optional<bool> bool_field(const json::Value& body, std::string_view name, std::string_view path = {}) {
  const json::Value* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  const std::string param = path.empty() ? std::string(name) : std::string(path);
  if (!v->is_bool()) throw invalid(param, "'" + param + "' must be true or false");
  return v->as_bool();
}

inline std::optional<float> float_field(const json::Value& body, std::string_view name) {
  auto v = number_field(body, name);
  if (v) return static_cast<float>(*v);
  return std::nullopt;
}

}  // namespace kylin::server::detail
