// SchemaCost: what compiling JSON schemas may cost, measured on their JSON before any rule is
// built, so a schema too large to compile is refused after a walk instead of seconds of compiling.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "kylin/constrain/grammar.hpp"
#include "kylin/core/json.hpp"

namespace kylin::constrain {

// Counted on the JSON: the values (every object, array, string, number, keyword or not), the
// bytes of their JSON pointers (paths name rules and errors, and grow with deep or long property
// names), the counted repetitions (a count n of minItems, maxItems, minLength or maxLength builds
// ~n rules and ~4n elements) and the text (a property name or enum value is an element per byte;
// descriptions count too, an over-estimate), and the automata (schema_numbers.hpp,
// schema_pattern.hpp), a rule per state: an integer multipleOf m builds up to ~15 m digit states
// of up to 10 alternatives (32 elements), a format up to kFormatStates, a pattern
// ~kPatternStatesPerByte per byte and per unit of its {n,m} counts (its DFA is also capped at
// GrammarLimits::max_pattern_states while it is built), a pattern or format with minLength or
// maxLength beside it kLengthStates more (the maximum is lowered to stay within them); a DFA
// state has ~kDfaStateElements elements (tests check these bounds on every format). add_schema_cost sums over a request's schemas;
// check_schema_cost refuses what is past GrammarLimits before the work is spent.
struct SchemaCost {
  std::size_t nodes = 0;
  std::size_t path_bytes = 0;
  std::size_t repeats = 0;
  std::size_t text_bytes = 0;
  std::size_t automaton_states = 0;
  std::size_t automaton_elements = 0;
  std::size_t patterns = 0;  // each may build up to GrammarLimits::max_pattern_states DFA states
  std::size_t rules() const { return repeats + automaton_states; }
  std::size_t elements() const { return 4 * repeats + text_bytes + automaton_elements; }
};

inline constexpr std::size_t kFormatStates = 512;        // above every format's DFA (a test checks)
inline constexpr std::size_t kPatternStatesPerByte = 4;  // a regex's NFA: a few states per byte or count
inline constexpr std::size_t kLengthStates = 4096;       // a pattern/format DFA counted by minLength/maxLength
inline constexpr std::size_t kDfaStateElements = 12;     // a DFA state's rule: a few byte sets and references

// The numbers inside a pattern's {n}, {n,}, {n,m} quantifiers, summed (each copies its operand).
inline std::size_t pattern_counts(const std::string& pattern) {
  constexpr std::size_t cap = std::size_t{1} << 20;
  std::size_t sum = 0, n = 0;
  bool inside = false;
  for (char c : pattern) {
    if (c == '{') inside = true, n = 0;
    else if (inside && c >= '0' && c <= '9') n = std::min(n * 10 + static_cast<std::size_t>(c - '0'), cap);
    else if (inside && (c == ',' || c == '}')) sum = std::min(sum + n, cap), n = 0, inside = c == ',';
    else inside = false;
  }
  return sum;
}

inline void add_schema_cost(const json::Value& schema, SchemaCost& cost) {
  constexpr std::size_t count_cap = std::size_t{1} << 20;  // a count beyond any limit: no overflow
  std::vector<std::pair<const json::Value*, std::size_t>> stack{{&schema, 1}};  // (value, its path's bytes)
  while (!stack.empty()) {
    const auto [v, path] = stack.back();
    stack.pop_back();
    ++cost.nodes;
    cost.path_bytes += path;
    if (v->is_string()) cost.text_bytes += v->as_string().size();
    if (v->is_array()) {
      for (const json::Value& item : v->as_array()) stack.push_back({&item, path + 8});
    } else if (v->is_object()) {
      for (const auto& [key, value] : v->as_object()) {
        stack.push_back({&value, path + 1 + key.size()});
        cost.text_bytes += key.size();
        const bool counted = key == "minItems" || key == "maxItems" || key == "minLength" || key == "maxLength";
        if (counted && value.is_int() && value.as_int() > 0)
          cost.repeats += std::min(static_cast<std::size_t>(value.as_int()), count_cap);
        const json::Value* props = v->find("properties");  // a property count builds ~count rules per property
        if ((key == "minProperties" || key == "maxProperties") && value.is_int() && value.as_int() > 0 && props && props->is_object())
          cost.repeats += std::min(static_cast<std::size_t>(value.as_int()), count_cap) * props->as_object().size();
        auto automaton = [&](std::size_t states, std::size_t elements_per_state) {
          cost.automaton_states += states;
          cost.automaton_elements += states * elements_per_state;
        };
        if (key == "multipleOf" && value.is_int() && value.as_int() > 0)
          automaton(15 * std::min(static_cast<std::size_t>(value.as_int()), count_cap), 32);
        if (key == "format" && value.is_string()) automaton(kFormatStates, kDfaStateElements);
        if (key == "pattern") ++cost.patterns;
        if (key == "pattern" && value.is_string())
          automaton(kPatternStatesPerByte * (value.as_string().size() + pattern_counts(value.as_string())), kDfaStateElements);
        const bool dfa_string = v->contains("pattern") || v->contains("format");
        if (dfa_string && (key == "minLength" || key == "maxLength") && !(key == "minLength" && v->contains("maxLength")))
          automaton(kLengthStates, kDfaStateElements);  // once per string
      }
    }
  }
}

inline void check_schema_cost(const SchemaCost& cost, const GrammarLimits& limits) {
  auto refuse = [](const std::string& message) { throw detail::grammar_error("json schema", message); };
  if (cost.nodes > limits.max_schema_nodes)
    refuse("too large: " + std::to_string(cost.nodes) + " JSON values; at most " + std::to_string(limits.max_schema_nodes) +
           " are compiled per request");
  if (cost.path_bytes > limits.max_schema_path_bytes)
    refuse("too large: its values' JSON pointers add up to " + std::to_string(cost.path_bytes) + " bytes of paths; at most " +
           std::to_string(limits.max_schema_path_bytes) + " (shorter property names or less nesting)");
  if (cost.rules() > limits.max_rules)  // a count of n builds about n rules
    refuse("too complex: its counted repetitions (minItems, maxItems, minLength, maxLength, min/maxProperties: " +
           std::to_string(cost.repeats) + ") and automata (pattern, format, multipleOf: " + std::to_string(cost.automaton_states) +
           " states) need about " + std::to_string(cost.rules()) + " grammar rules; at most " + std::to_string(limits.max_rules));
  // A regex's DFA can grow exponentially in its length, so each may cost the whole per-string cap
  // to build: their number is bounded (48 by default) so that the work is.
  if (cost.patterns * limits.max_pattern_states > limits.max_rules)
    refuse("too many patterns: " + std::to_string(cost.patterns) + "; each may build up to " + std::to_string(limits.max_pattern_states) +
           " automaton states, so at most " + std::to_string(limits.max_rules / std::max<std::size_t>(limits.max_pattern_states, 1)) +
           " are compiled per request");
  if (cost.elements() > limits.max_elements)
    refuse("too complex: its counted repetitions (minItems, maxItems, minLength, maxLength, min/maxProperties: " +
           std::to_string(cost.repeats) + "), automata (pattern, format, multipleOf: " + std::to_string(cost.automaton_states) +
           " states) and text (" + std::to_string(cost.text_bytes) + " bytes) would take about " + std::to_string(cost.elements()) +
           " grammar elements; at most " + std::to_string(limits.max_elements));
}

}  // namespace kylin::constrain
