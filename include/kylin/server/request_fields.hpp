// The typed readers of OpenAI request fields: a missing or null field is absent, a field of the
// wrong type is a 400 naming it.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "kylin/core/json.hpp"
#include "kylin/server/api_error.hpp"

namespace kylin::server::detail {

// A double as the shortest text that reads back as it (5e-324, 1e+300).
inline std::string shortest_text(double v) {
  char buf[32];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

// The double whose shortest text is the float's shortest text: compact JSON that parses back to
// the same float (0.8f is 0.8, not 0.800000011920929).
inline double compact(float v) {
  char buf[32];
  const char* end = std::to_chars(buf, buf + sizeof buf, v).ptr;
  double d = 0;
  std::from_chars(buf, end, d);
  return d;
}

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

// An integer: one beyond 64 bits (valid JSON, parsed as a whole double) is out of range, not a float.
inline std::optional<std::int64_t> int_field(const json::Value& body, std::string_view name) {
  const json::Value* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  const std::string n(name);
  if (!v->is_int() && v->is_number() && std::trunc(v->as_double()) == v->as_double() && std::abs(v->as_double()) >= 0x1p63)
    throw invalid(n, "'" + n + "' is out of range: it must be an integer between -2^63 and 2^63-1");
  if (!v->is_int()) throw invalid(n, "'" + n + "' must be an integer");
  return v->as_int();
}

// A count (max_tokens, n, max_output_tokens, ...): an integer of at least `min`. Below it, or past
// 64 bits, the refusal says the range the field takes, not the whole int64 range.
inline std::optional<std::int64_t> count_field(const json::Value& body, std::string_view name, std::int64_t min) {
  const json::Value* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  const std::string n(name);
  const std::string range = "'" + n + "' must be an integer >= " + std::to_string(min) + " (and at most 2^63-1), got ";
  if (!v->is_int() && v->is_number() && std::trunc(v->as_double()) == v->as_double())
    throw invalid(n, "'" + n + "' is out of range: " + range + shortest_text(v->as_double()));
  if (!v->is_int()) throw invalid(n, "'" + n + "' must be an integer");
  if (v->as_int() < min) throw invalid(n, range + std::to_string(v->as_int()));
  return v->as_int();
}

inline std::optional<bool> bool_field(const json::Value& body, std::string_view name, std::string_view path = {}) {
  const json::Value* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  const std::string param = path.empty() ? std::string(name) : std::string(path);
  if (!v->is_bool()) throw invalid(param, "'" + param + "' must be true or false");
  return v->as_bool();
}

// A number as the float the sampler holds. Beyond a float's range it is a 400 naming the value; a
// nonzero value too small for a float becomes the smallest normal float of its sign, never 0 (a
// top_p of 5e-324 keeps only the most probable token, as it asks).
inline std::optional<float> float_field(const json::Value& body, std::string_view name) {
  const std::optional<double> v = number_field(body, name);
  if (!v) return std::nullopt;
  const std::string n(name);
  if (std::abs(*v) > std::numeric_limits<float>::max())
    throw invalid(n, "'" + n + "' is " + shortest_text(*v) + ", beyond the range of a 32-bit float (about 3.4e38)");
  if (*v != 0 && std::abs(*v) < std::numeric_limits<float>::min())
    return std::copysign(std::numeric_limits<float>::min(), static_cast<float>(*v));
  return static_cast<float>(*v);
}

}  // namespace kylin::server::detail
