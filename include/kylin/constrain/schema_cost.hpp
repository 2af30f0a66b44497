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
// descriptions count too, an over-estimate). add_schema_cost sums over a request's schemas;
// check_schema_cost refuses what is past GrammarLimits before the work is spent.
struct SchemaCost {
  std::size_t nodes = 0;
  std::size_t path_bytes = 0;
  std::size_t repeats = 0;
  std::size_t text_bytes = 0;
  std::size_t elements() const { return 4 * repeats + text_bytes; }
};

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
  if (cost.repeats > limits.max_rules)  // a count of n builds about n rules
    refuse("too complex: its counted repetitions (minItems, maxItems, minLength, maxLength) add up to " + std::to_string(cost.repeats) +
           ", about as many grammar rules; at most " + std::to_string(limits.max_rules));
  if (cost.elements() > limits.max_elements)
    refuse("too complex: its counted repetitions (minItems, maxItems, minLength, maxLength: " + std::to_string(cost.repeats) +
           ") and text (" + std::to_string(cost.text_bytes) + " bytes) would take about " + std::to_string(cost.elements()) +
           " grammar elements; at most " + std::to_string(limits.max_elements));
}

}  // namespace kylin::constrain
