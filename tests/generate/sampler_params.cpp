// SamplingParams: validation names the field; generation_config.json defaults; overrides.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "kylin/core/json.hpp"
#include "kylin/generate/sampler.hpp"
#include "kylin/generate/sampler_params.hpp"

namespace sampler_params {

using kylin::ErrorCategory;
using kylin::SamplingParams;

// Runs validate() on p and returns the error's context (empty when it passed).
std::string rejected_field(const SamplingParams& p) {
  try {
    p.validate();
  } catch (const kylin::Error& e) {
    CHECK(e.category() == ErrorCategory::request);
    CHECK(std::string(e.what()).find(e.context()) != std::string::npos);
    return e.context();
  }
  return {};
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();


TEST_CASE("SamplingParams: defaults validate and mean plain temperature-1 sampling") {
  SamplingParams p;
  CHECK(rejected_field(p).empty());
  CHECK_FALSE(p.is_greedy());
  CHECK_FALSE(p.has_penalties());
}

TEST_CASE("SamplingParams: each invalid value is rejected with the field's name") {
  auto with = [](auto mutate) {
    SamplingParams p;
    mutate(p);
    return rejected_field(p);
  };
  CHECK(with([](SamplingParams& p) { p.temperature = -0.1f; }) == "temperature");
  CHECK(with([](SamplingParams& p) { p.temperature = kNaN; }) == "temperature");
  CHECK(with([](SamplingParams& p) { p.top_p = 0.0f; }) == "top_p");
  CHECK(with([](SamplingParams& p) { p.top_p = 1.01f; }) == "top_p");
  CHECK(with([](SamplingParams& p) { p.top_p = kNaN; }) == "top_p");
  CHECK(with([](SamplingParams& p) { p.min_p = -0.01f; }) == "min_p");
  CHECK(with([](SamplingParams& p) { p.min_p = 1.5f; }) == "min_p");
  CHECK(with([](SamplingParams& p) { p.min_p = kNaN; }) == "min_p");
  CHECK(with([](SamplingParams& p) { p.top_k = -1; }) == "top_k");
  CHECK(with([](SamplingParams& p) { p.repetition_penalty = 0.0f; }) == "repetition_penalty");
  CHECK(with([](SamplingParams& p) { p.repetition_penalty = -1.0f; }) == "repetition_penalty");
  CHECK(with([](SamplingParams& p) { p.repetition_penalty = kNaN; }) == "repetition_penalty");
  CHECK(with([](SamplingParams& p) { p.presence_penalty = kNaN; }) == "presence_penalty");
  CHECK(with([](SamplingParams& p) { p.frequency_penalty = kNaN; }) == "frequency_penalty");
  // The boundaries themselves are allowed.
  CHECK(with([](SamplingParams& p) { p.top_p = 1.0f; p.min_p = 1.0f; p.temperature = 0.0f; }).empty());
  CHECK(with([](SamplingParams& p) { p.min_p = 0.0f; p.top_k = 0; p.presence_penalty = -2.0f; }).empty());
}

TEST_CASE("Sampler: construction rejects invalid params naming the field") {
  SamplingParams p;
  p.top_p = 2.0f;
  try {
    kylin::Sampler s(16, p);
    FAIL("expected kylin::Error");
  } catch (const kylin::Error& e) {
    CHECK(e.context() == "top_p");
    CHECK(std::string(e.what()) == "[kylin.request] top_p: must be in (0, 1], got 2.0");
  }
}

TEST_CASE("from_generation_config: Qwen3's published defaults") {
  const auto config = kylin::json::parse(R"({"bos_token_id": 151643, "do_sample": true,
      "eos_token_id": [151645, 151643], "pad_token_id": 151643, "temperature": 0.6,
      "top_k": 20, "top_p": 0.95, "transformers_version": "4.51.0"})");
  const SamplingParams p = kylin::from_generation_config(config);
  CHECK_FALSE(p.is_greedy());
  CHECK(p.temperature == 0.6f);
  CHECK(p.top_k == 20);
  CHECK(p.top_p == 0.95f);
  CHECK(p.min_p == 0.0f);
  CHECK(p.repetition_penalty == 1.0f);
  CHECK_FALSE(p.seed.has_value());
}

TEST_CASE("from_generation_config: do_sample false or absent means greedy, absent fields take HF defaults") {
  const SamplingParams off = kylin::from_generation_config(kylin::json::parse(R"({"do_sample": false, "temperature": 0.7})"));
  CHECK(off.is_greedy());
  CHECK(off.temperature == 0.7f);
  const SamplingParams empty = kylin::from_generation_config(kylin::json::parse("{}"));
  CHECK(empty.is_greedy());
  CHECK(empty.temperature == 1.0f);
  CHECK(empty.top_k == 50);  // transformers.GenerationConfig default
  CHECK(empty.top_p == 1.0f);
  const SamplingParams qwen2 = kylin::from_generation_config(kylin::json::parse(
      R"({"do_sample": true, "repetition_penalty": 1.05, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": null})"));
  CHECK_FALSE(qwen2.is_greedy());
  CHECK(qwen2.repetition_penalty == 1.05f);
  CHECK(qwen2.min_p == 0.0f);
}

TEST_CASE("from_generation_config: bad types and values are config errors naming the field") {
  auto field_of = [](const char* text) -> std::string {
    try {
      kylin::from_generation_config(kylin::json::parse(text));
    } catch (const kylin::Error& e) {
      CHECK(e.category() == ErrorCategory::config);
      return e.context();
    }
    return {};
  };
  CHECK(field_of(R"({"temperature": "hot"})") == "generation_config.temperature");
  CHECK(field_of(R"({"top_k": 2.5})") == "generation_config.top_k");
  CHECK(field_of(R"({"do_sample": 1})") == "generation_config.do_sample");
  CHECK(field_of(R"({"top_p": 0})") == "generation_config.top_p");
  CHECK(field_of(R"({"repetition_penalty": 0.0})") == "generation_config.repetition_penalty");
  CHECK(field_of(R"([1, 2])") == "generation_config");
}

TEST_CASE("apply_overrides: set fields replace the defaults, unset ones keep them") {
  const SamplingParams qwen3 = kylin::from_generation_config(
      kylin::json::parse(R"({"do_sample": true, "temperature": 0.6, "top_k": 20, "top_p": 0.95})"));
  kylin::SamplingOverrides o;
  o.top_p = 0.5f;
  o.seed = 7;
  o.presence_penalty = 1.5f;
  const SamplingParams p = kylin::apply_overrides(qwen3, o);
  CHECK(p.temperature == 0.6f);
  CHECK(p.top_k == 20);
  CHECK(p.top_p == 0.5f);
  CHECK(p.presence_penalty == 1.5f);
  CHECK(p.seed == 7u);
  CHECK_FALSE(p.is_greedy());
}

TEST_CASE("apply_overrides: an explicit temperature lifts a greedy default; explicit greedy wins") {
  const SamplingParams greedy_default = kylin::from_generation_config(kylin::json::parse(R"({"do_sample": false})"));
  kylin::SamplingOverrides o;
  o.temperature = 0.8f;
  CHECK_FALSE(kylin::apply_overrides(greedy_default, o).is_greedy());
  o.greedy = true;
  CHECK(kylin::apply_overrides(greedy_default, o).is_greedy());
  kylin::SamplingOverrides zero;
  zero.temperature = 0.0f;
  CHECK(kylin::apply_overrides(SamplingParams{}, zero).is_greedy());
}

TEST_CASE("apply_overrides: an invalid override is a request error naming the field") {
  kylin::SamplingOverrides o;
  o.min_p = 2.0f;
  try {
    kylin::apply_overrides(SamplingParams{}, o);
    FAIL("expected kylin::Error");
  } catch (const kylin::Error& e) {
    CHECK(e.category() == ErrorCategory::request);
    CHECK(e.context() == "min_p");
  }
}

}  // namespace sampler_params
