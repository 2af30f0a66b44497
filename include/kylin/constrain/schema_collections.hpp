// Objects and arrays whose keywords count: properties with minProperties/maxProperties,
// prefixItems (a tuple, then items for the rest) and uniqueItems over a small finite item set.
// Each takes the already compiled member/item rules from json_schema.hpp's compiler.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kylin/constrain/grammar.hpp"
#include "kylin/core/json.hpp"

namespace kylin::constrain::detail {

struct ObjectMember {
  std::vector<Element> key_value;  // "key": then the value's rule
  bool required = false;
  std::string path;  // its JSON pointer (names its rules)
};

// {"k0":v0,...} writing the listed members in order, the required ones always, between min and
// max of them (max < 0: no bound). State (i, k): members i.. left, k written, clamped where larger
// counts behave alike (without bounds k is 0 or 1: whether a comma comes first); a state that
// cannot reach the bounds is not built.
inline int counted_object_rule(GrammarBuilder& b, const std::string& path, const std::vector<ObjectMember>& members,
                               std::size_t min, long long max) {
  const std::size_t n = members.size();
  std::vector<std::size_t> required_after(n + 1, 0);  // [n+1] required members among i..
  for (std::size_t i = n; i-- > 0;) required_after[i] = required_after[i + 1] + (members[i].required ? 1 : 0);
  if (max >= 0 && static_cast<std::size_t>(max) >= n) max = -1;  // cannot be exceeded
  const std::size_t cap = max >= 0 ? static_cast<std::size_t>(max) : std::max<std::size_t>(min, 1);
  auto feasible = [&](std::size_t i, std::size_t k) {
    return k + (n - i) >= min && (max < 0 || k + required_after[i] <= static_cast<std::size_t>(max));
  };
  if (!feasible(0, 0))
    throw grammar_error("json schema " + path + (min > n ? "/minProperties" : "/maxProperties"),
                        min > n ? "minProperties is above the number of properties that can be written (additional properties are never written)"
                                : "maxProperties is below the number of required properties");
  // Built from the last member back (no recursion: objects may list thousands of properties);
  // k <= i, as only i members came before.
  std::vector<std::vector<int>> state(n + 1);  // [n+1][cap+1] rule, -1 infeasible
  for (std::size_t i = n + 1; i-- > 0;) {
    state[i].assign(cap + 1, -1);
    for (std::size_t k = 0; k <= std::min(i, cap); ++k) {
      if (!feasible(i, k)) continue;
      const int r = b.new_rule(i < n ? members[i].path : path + "/end");
      state[i][k] = r;
      if (i == n) {
        b.add_alt(r, {});
        continue;
      }
      const std::size_t k_next = std::min(k + 1, cap);
      if ((max < 0 || k < static_cast<std::size_t>(max)) && state[i + 1][k_next] >= 0 && feasible(i + 1, k + 1)) {
        std::vector<Element> seq = k > 0 ? literal(",") : std::vector<Element>{};
        seq.insert(seq.end(), members[i].key_value.begin(), members[i].key_value.end());
        seq.push_back(Element::ref(state[i + 1][k_next]));
        b.add_alt(r, seq);
      }
      if (!members[i].required && state[i + 1][k] >= 0) b.add_alt(r, {Element::ref(state[i + 1][k])});
    }
  }
  std::vector<Element> seq = literal("{");
  seq.push_back(Element::ref(state[0][0]));
  seq.push_back(Element::byte('}'));
  return b.rule_of(path, {seq});
}

// [p0,p1,...,rest...]: item i matches prefix[i]; after the prefix, `rest` items (-1: none, as
// items: false). Between min and max items (max < 0: no bound).
inline int prefix_array_rule(GrammarBuilder& b, const std::string& path, const std::vector<int>& prefix, int rest,
                             std::size_t min, long long max) {
  const std::size_t p = prefix.size();
  if (rest < 0 && min > p) throw grammar_error("json schema " + path + "/minItems", "minItems is above the prefixItems count with items: false");
  // tail: after all of the prefix, further ",item"s
  int next = -1;
  if (rest >= 0 && (max < 0 || static_cast<std::size_t>(max) > p)) {
    std::vector<Element> comma_item = literal(",");
    comma_item.push_back(Element::ref(rest));
    next = b.repeat(path + "/items", comma_item, {}, min > p ? min - p : 0, max < 0 ? -1 : max - static_cast<long long>(p));
  } else {
    next = b.rule_of(path + "/end", {{}});
  }
  for (std::size_t i = p; i-- > 0;) {  // after i items: stop (when i >= min), or write item i
    const int r = b.new_rule(path + "/prefixItems/" + std::to_string(i));
    if (i >= min) b.add_alt(r, {});
    if (max < 0 || static_cast<long long>(i) < max) {
      std::vector<Element> seq = i > 0 ? literal(",") : std::vector<Element>{};
      seq.push_back(Element::ref(prefix[i]));
      seq.push_back(Element::ref(next));
      b.add_alt(r, seq);
    }
    next = r;
  }
  return b.rule_of(path, {{Element::byte('['), Element::ref(next), Element::byte(']')}});
}

// uniqueItems over a finite item set: the arrays of distinct values (any order), the used
// values as a bit mask, so 2^n states: n is at most max_unique_values.
inline constexpr std::size_t max_unique_values = 8;

// The compact JSON texts of a finite item set where uniqueItems can be enforced: items that are
// only an enum or const (type and annotations beside them), boolean or null, whose values are
// strings, integers, booleans or null (written one way each, so distinct texts are distinct
// values), at most max_unique_values of them. Empty where that does not hold.
inline std::vector<std::string> unique_item_values(const json::Value* items) {
  std::vector<std::string> values;
  if (!items || !items->is_object()) return values;
  for (const auto& [key, value] : items->as_object())
    if (key != "enum" && key != "const" && key != "type" && key != "title" && key != "description") return values;
  const json::Value* t = items->find("type");
  const std::string type = t && t->is_string() ? t->as_string() : "";
  if (const json::Value* e = items->find("enum"); e && e->is_array())
    for (const json::Value& v : e->as_array()) values.push_back(json::dump(v));
  else if (const json::Value* c = items->find("const")) values.push_back(json::dump(*c));
  else if (type == "boolean") values = {"false", "true"};
  else if (type == "null") values = {"null"};
  for (const std::string& v : values)
    if (v[0] != '"' && v != "true" && v != "false" && v != "null" && v.find_first_of(".eE{[") != std::string::npos) return {};
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  if (values.size() > max_unique_values) return {};
  return values;
}

inline int unique_array_rule(GrammarBuilder& b, const std::string& path, const std::vector<std::string>& values,
                             std::size_t min, long long max) {
  const std::size_t n = values.size();
  if (min > n) throw grammar_error("json schema " + path + "/minItems", "minItems is above the number of distinct items uniqueItems allows");
  std::vector<int> rule(std::size_t{1} << n, -1);  // [2^n] by used mask
  for (std::size_t mask = rule.size(); mask-- > 0;) {
    const auto used = static_cast<std::size_t>(__builtin_popcountll(mask));
    rule[mask] = b.new_rule(path + "/uniqueItems");
    if (used >= min) b.add_alt(rule[mask], {});
    if (max >= 0 && static_cast<long long>(used) >= max) continue;
    for (std::size_t v = 0; v < n; ++v) {
      if (mask >> v & 1) continue;
      std::vector<Element> seq = literal(std::string(used > 0 ? "," : "") + values[v]);
      seq.push_back(Element::ref(rule[mask | (std::size_t{1} << v)]));
      b.add_alt(rule[mask], seq);
    }
  }
  return b.rule_of(path, {{Element::byte('['), Element::ref(rule[0]), Element::byte(']')}});
}

}  // namespace kylin::constrain::detail
