// A JSON-schema string with "pattern" and/or "format" (and minLength/maxLength beside them): the
// intersection of their byte DFAs over the JSON-encoded content, written as grammar rules.
#pragma once

#include <string>

#include "kylin/constrain/byte_dfa.hpp"
#include "kylin/constrain/schema_cost.hpp"
#include "kylin/constrain/schema_formats.hpp"
#include "kylin/constrain/schema_pattern.hpp"
#include "kylin/core/json.hpp"

namespace kylin::constrain::detail {

inline constexpr const char* kSupportedFormats = "date-time, date, time, uuid, email, ipv4, uri";

// The rule of the quoted string, or -1 when `s` has neither pattern nor format.
inline int string_keywords_rule(GrammarBuilder& b, const json::Value& s, const std::string& path, std::size_t min_length,
                                long long max_length) {
  const json::Value* pattern = s.find("pattern");
  const json::Value* format = s.find("format");
  if (!pattern && !format) return -1;
  const GrammarLimits& limits = b.limits();
  std::vector<ByteDfa> parts;
  if (pattern) {
    if (!pattern->is_string()) throw grammar_error("json schema " + path + "/pattern", "pattern must be a string");
    parts.push_back(regex_dfa(pattern->as_string(), path + "/pattern", "pattern", limits));
  }
  if (format) {
    const std::string regex = format->is_string() ? format_regex(format->as_string()) : "";
    if (regex.empty())
      throw grammar_error("json schema " + path + "/format", "format " + json::dump(*format) + " is unsupported (supported: " +
                                                                 kSupportedFormats + ")");
    parts.push_back(regex_dfa(regex, path + "/format", "format \"" + format->as_string() + "\"", limits));
  }
  ByteDfa dfa = std::move(parts[0]);
  if (parts.size() == 2) dfa = intersect(dfa, parts[1], limits.max_pattern_states, path, "pattern and format together");
  // Where the lengths would pass the state cap, a lower maximum (down to minLength) still writes
  // only strings the schema allows: the grammar keeps a subset (Pydantic's HttpUrl is a uri of
  // maxLength 2083).
  for (long long max = max_length; min_length > 0 || max_length >= 0;) {
    if (auto counted = with_length(dfa, min_length, max, std::min(limits.max_pattern_states, kLengthStates))) {
      dfa = std::move(*counted);
      break;
    }
    if (max < 0 || static_cast<std::size_t>(max) == min_length)
      throw automaton_error(path + (max_length >= 0 ? "/maxLength" : "/minLength"), "minLength/maxLength beside pattern or format",
                            std::min(limits.max_pattern_states, kLengthStates));
    max = std::max(static_cast<long long>(min_length), max / 2);
  }
  if (!trim(dfa)) {
    const std::string keyword = pattern ? "pattern" : "format";
    throw grammar_error("json schema " + path + "/" + keyword,
                        keyword + " (with the other string keywords beside it) matches no string the grammar can write");
  }
  const int content = emit_dfa(b, dfa, path);
  return b.rule_of(path, {{Element::byte('"'), Element::ref(content), Element::byte('"')}});
}

}  // namespace kylin::constrain::detail
