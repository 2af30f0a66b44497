// SamplingParams: what one request asks of the sampler, with its validation, the model's
// defaults from generation_config.json (transformers' GenerationConfig semantics), and
// per-request overrides applied on top of those defaults.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "kylin/core/error.hpp"
#include "kylin/core/json.hpp"

namespace kylin {

struct SamplingParams {
  float temperature = 1.0f;         // 0 (or subnormal): argmax
  int top_k = 0;                    // 0: off; keep the k most likely tokens
  float top_p = 1.0f;               // (0, 1]; 1: off; keep the smallest prefix with mass >= top_p
  float min_p = 0.0f;               // [0, 1]; 0: off; keep p >= min_p * p_max
  float repetition_penalty = 1.0f;  // HF: tokens in prompt or output: logit>0 ? logit/r : logit*r
  float presence_penalty = 0.0f;    // OpenAI: logit -= presence * (count > 0), generated tokens
  float frequency_penalty = 0.0f;   // OpenAI: logit -= frequency * count, generated tokens
  std::optional<std::uint64_t> seed;  // absent: seeded from std::random_device
  bool greedy = false;              // argmax after penalties, whatever the other fields say

  // Argmax is what temperature 0, top_k 1 and greedy all mean (ties go to the lowest id). So is
  // a temperature whose reciprocal overflows (subnormal, below ~2.9e-39): argmax is its limit,
  // while 1/T = inf would weigh even the top token (logit - max) * inf = 0 * inf = NaN.
  bool is_greedy() const noexcept {
    return greedy || top_k == 1 || !(1.0f / temperature < std::numeric_limits<float>::infinity());
  }
  bool has_penalties() const noexcept {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }

  // Throws kylin::Error naming the offending field; `where` prefixes it ("generation_config").
  void validate(ErrorCategory category = ErrorCategory::request, std::string_view where = {}) const;
};

// What a request may change; each field set replaces the model default.
struct SamplingOverrides {
  std::optional<float> temperature;
  std::optional<int> top_k;
  std::optional<float> top_p;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
  std::optional<float> presence_penalty;
  std::optional<float> frequency_penalty;
  std::optional<std::uint64_t> seed;
  std::optional<bool> greedy;
};

namespace detail {

inline std::string field_name(std::string_view where, std::string_view field) {
  std::string s(where);
  if (!s.empty()) s += '.';
  s += field;
  return s;
}

// The shortest text that reads back as `v` ("2.0", "0.95", "1.1754944e-38", "inf"): fixed six
// decimals would print a tiny value as 0.0.
inline std::string number_text(float v) {
  char buf[32];
  std::string s(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
  if (std::isfinite(v) && s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

}  // namespace detail

inline void SamplingParams::validate(ErrorCategory category, std::string_view where) const {
  auto fail = [&](std::string_view field, const std::string& message) {
    throw Error(category, detail::field_name(where, field), message);
  };
  auto check_finite = [&](std::string_view field, float v) {
    if (!std::isfinite(v)) fail(field, "must be a finite number, got " + detail::number_text(v));
  };
  check_finite("temperature", temperature);
  check_finite("top_p", top_p);
  check_finite("min_p", min_p);
  check_finite("repetition_penalty", repetition_penalty);
  check_finite("presence_penalty", presence_penalty);
  check_finite("frequency_penalty", frequency_penalty);
  if (temperature < 0.0f) fail("temperature", "must be >= 0, got " + detail::number_text(temperature));
  if (top_k < 0) fail("top_k", "must be >= 0 (0 disables it), got " + std::to_string(top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f)) fail("top_p", "must be in (0, 1], got " + detail::number_text(top_p));
  if (!(min_p >= 0.0f && min_p <= 1.0f)) fail("min_p", "must be in [0, 1], got " + detail::number_text(min_p));
  if (repetition_penalty <= 0.0f)
    fail("repetition_penalty", "must be > 0, got " + detail::number_text(repetition_penalty));
}

// Each set override replaces the base value. A request that names a temperature but not
// `greedy` wants sampling governed by that temperature, so it lifts a do_sample=false default
// (temperature 0 still means argmax).
inline SamplingParams apply_overrides(SamplingParams base, const SamplingOverrides& o) {
  if (o.temperature) base.temperature = *o.temperature;
  if (o.top_k) base.top_k = *o.top_k;
  if (o.top_p) base.top_p = *o.top_p;
  if (o.min_p) base.min_p = *o.min_p;
  if (o.repetition_penalty) base.repetition_penalty = *o.repetition_penalty;
  if (o.presence_penalty) base.presence_penalty = *o.presence_penalty;
  if (o.frequency_penalty) base.frequency_penalty = *o.frequency_penalty;
  if (o.seed) base.seed = *o.seed;
  if (o.greedy)
    base.greedy = *o.greedy;
  else if (o.temperature)
    base.greedy = false;
  base.validate(ErrorCategory::request);
  return base;
}

namespace detail {

inline const json::Value* config_field(const json::Value& config, std::string_view field) {
  const json::Value* v = config.find(field);
  return v == nullptr || v->is_null() ? nullptr : v;
}

inline std::optional<float> config_number(const json::Value& config, std::string_view field) {
  const json::Value* v = config_field(config, field);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number())
    throw Error(ErrorCategory::config, field_name("generation_config", field), "expected a number");
  return static_cast<float>(v->as_double());
}

}  // namespace detail

// Model defaults as transformers reads generation_config.json: absent fields take
// GenerationConfig's defaults (do_sample false, temperature 1, top_k 50, top_p 1), and
// do_sample false means greedy. Qwen3 ships do_sample true, temperature 0.6, top_k 20, top_p 0.95.
inline SamplingParams from_generation_config(const json::Value& config) {
  constexpr int kHfDefaultTopK = 50;  // transformers.GenerationConfig.top_k
  if (!config.is_object())
    throw Error(ErrorCategory::config, "generation_config", "expected a JSON object");
  SamplingParams p;
  p.top_k = kHfDefaultTopK;
  bool do_sample = false;
  if (const json::Value* v = detail::config_field(config, "do_sample")) {
    if (!v->is_bool()) throw Error(ErrorCategory::config, "generation_config.do_sample", "expected true or false");
    do_sample = v->as_bool();
  }
  p.greedy = !do_sample;
  if (auto v = detail::config_number(config, "temperature")) p.temperature = *v;
  if (auto v = detail::config_number(config, "top_p")) p.top_p = *v;
  if (auto v = detail::config_number(config, "min_p")) p.min_p = *v;
  if (auto v = detail::config_number(config, "repetition_penalty")) p.repetition_penalty = *v;
  if (const json::Value* v = detail::config_field(config, "top_k")) {
    if (!v->is_int()) throw Error(ErrorCategory::config, "generation_config.top_k", "expected an integer");
    p.top_k = static_cast<int>(v->as_int());
    if (v->as_int() != p.top_k)
      throw Error(ErrorCategory::config, "generation_config.top_k", "out of range");
  }
  p.validate(ErrorCategory::config, "generation_config");
  return p;
}

}  // namespace kylin
