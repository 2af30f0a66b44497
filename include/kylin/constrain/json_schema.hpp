// JSON schema -> Grammar of compact JSON (no whitespace anywhere) that the schema accepts.
// The supported subset is in docs/CONSTRAINED.md; every other keyword is a kylin::Error naming
// it, never ignored. Output properties follow the schema's order.
#pragma once

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "kylin/constrain/grammar.hpp"
#include "kylin/constrain/schema_collections.hpp"
#include "kylin/constrain/schema_cost.hpp"
#include "kylin/constrain/schema_keywords.hpp"
#include "kylin/constrain/schema_numbers.hpp"
#include "kylin/constrain/schema_strings.hpp"
#include "kylin/core/json.hpp"

namespace kylin::constrain {

namespace detail {

class SchemaCompiler {
 public:
  SchemaCompiler(const json::Value& root, GrammarLimits limits) : b_(limits), root_(root) {}

  Grammar compile_root() {
    const int r = compile(root_, "#", 0);
    return b_.finish(r);
  }
  Grammar any_value() { return b_.finish(value_rule()); }
  Grammar any_object() { return b_.finish(object_any_rule()); }

 private:
  static Error schema_error(const std::string& path, const std::string& message) {
    return grammar_error("json schema " + path, message);
  }

  int compile(const json::Value& s, const std::string& path, int depth) {
    if (depth > b_.limits().max_depth)
      throw schema_error(path, "nested deeper than " + std::to_string(b_.limits().max_depth) + " levels");
    if (s.is_bool()) {
      if (!s.as_bool()) throw schema_error(path, "schema false accepts no value");
      return value_rule();
    }
    if (!s.is_object()) throw schema_error(path, "a schema must be an object or a boolean");
    check_keywords(s, path);
    if (const json::Value* ref = s.find("$ref")) return ref_rule(*ref, s, path, depth);
    for (const char* alone : {"const", "enum", "anyOf"})
      if (s.contains(alone)) check_alone(s, alone, path);
    if (const json::Value* c = s.find("const")) return literal_rule(path, {json::dump(*c)});
    if (const json::Value* e = s.find("enum")) return enum_rule(*e, path);
    if (const json::Value* any = s.find("anyOf")) return any_of(*any, path, depth);
    const json::Value* type = s.find("type");
    if (!type) return untyped(s, path, depth);
    std::vector<std::string> types;
    if (type->is_string()) types.push_back(type->as_string());
    else if (type->is_array())
      for (const json::Value& t : type->as_array()) {
        if (!t.is_string()) throw schema_error(path + "/type", "type array entries must be strings");
        types.push_back(t.as_string());
      }
    if (types.empty()) throw schema_error(path + "/type", "type must be a string or a non-empty array of strings");
    check_applicable(types, s, path);
    if (types.size() == 1) return typed(types[0], s, path, depth);
    const int r = b_.new_rule(path + "/type");
    for (const std::string& t : types) b_.add_alt(r, {Element::ref(typed(t, s, path, depth))});
    return r;
  }

  static void check_keywords(const json::Value& s, const std::string& path) {
    for (const auto& [key, value] : s.as_object())
      if (!schema_keywords().count(key)) throw schema_error(path + "/" + key, "unsupported JSON-schema keyword \"" + key + "\"");
    if (s.contains("$ref"))
      for (const auto& [key, value] : s.as_object())
        if (key != "$ref" && !schema_annotations().count(key))
          throw schema_error(path + "/" + key, "keyword \"" + key + "\" beside $ref is unsupported");
  }

  // const, enum and anyOf decide the value alone: a sibling that would narrow it is refused.
  static void check_alone(const json::Value& s, const std::string& keyword, const std::string& path) {
    static const std::set<std::string> allowed = {"type",    "title",    "description", "$schema",    "$id",
                                                  "$comment", "default", "examples",    "$defs", "definitions"};
    for (const auto& [key, value] : s.as_object())
      if (key != keyword && (!allowed.count(key) || (key == "type" && keyword == "anyOf")))
        throw schema_error(path + "/" + key, "keyword \"" + key + "\" beside \"" + keyword + "\" is unsupported");
  }

  // Keywords without "type": the type they imply, or any value.
  int untyped(const json::Value& s, const std::string& path, int depth) {
    const std::string type = implied_type(s);
    return type.empty() ? value_rule() : typed(type, s, path, depth);
  }

  int typed(const std::string& type, const json::Value& s, const std::string& path, int depth) {
    if (type == "object") return object_rule(s, path, depth);
    if (type == "array") return array_rule(s, path, depth);
    if (type == "string") return string_rule(s, path);
    if (type == "number" || type == "integer") {
      const int r = numeric_keywords_rule(b_, s, path, type == "integer");
      return r >= 0 ? r : type == "number" ? number_rule() : integer_rule();
    }
    if (type == "boolean") return literal_rule(path, {"true", "false"});
    if (type == "null") return literal_rule(path, {"null"});
    throw schema_error(path + "/type", "unknown type \"" + type + "\"");
  }

  // A keyword of another type (minLength on an object) would be silently ignored: refused.
  static void check_applicable(const std::vector<std::string>& types, const json::Value& s, const std::string& path) {
    auto has = [&](const std::string& t) {  // an integer is a number: number keywords apply to it
      return std::find(types.begin(), types.end(), t) != types.end() || (t == "number" && has_integer(types));
    };
    for (const auto& [key, value] : s.as_object()) {
      const std::string& owner = schema_keywords().at(key);
      // JSON Schema's multipleOf is a number > 0 under any type; kylin enforces it on integers only.
      if (key == "multipleOf" && !(value.is_number() && value.as_double() > 0))
        throw schema_error(path + "/" + key, "multipleOf must be a number greater than 0");
      if (key == "multipleOf" && !has(owner))
        throw schema_error(path + "/" + key, "multipleOf is supported on integer schemas only, not on type \"" + types[0] + "\"");
      if (!owner.empty() && !has(owner))
        throw schema_error(path + "/" + key, "keyword \"" + key + "\" does not apply to type \"" + types[0] + "\"");
    }
  }

  static bool has_integer(const std::vector<std::string>& types) {
    return std::find(types.begin(), types.end(), "integer") != types.end();
  }

  static std::size_t count(const json::Value& s, const char* key, const std::string& path, std::size_t fallback) {
    const json::Value* v = s.find(key);
    if (!v) return fallback;
    if (!v->is_int() || v->as_int() < 0) throw schema_error(path + "/" + key, std::string(key) + " must be a non-negative integer");
    return static_cast<std::size_t>(v->as_int());
  }

  int object_rule(const json::Value& s, const std::string& path, int depth) {
    const json::Value* props = s.find("properties");
    if (const json::Value* extra = s.find("additionalProperties"); extra && !extra->is_bool())
      throw schema_error(path + "/additionalProperties", "only true or false is supported (a schema is not)");
    const bool closed = s.find("additionalProperties") && !s.find("additionalProperties")->as_bool();
    const std::size_t min = count(s, "minProperties", path, 0);
    const long long max = s.contains("maxProperties") ? static_cast<long long>(count(s, "maxProperties", path, 0)) : -1;
    if (max >= 0 && static_cast<std::size_t>(max) < min) throw schema_error(path + "/maxProperties", "maxProperties is below minProperties");
    if (!props && !s.contains("required") && !closed)
      return min > 0 || max >= 0 ? object_counted_any_rule(path, min, max) : object_any_rule();
    if (props && !props->is_object()) throw schema_error(path + "/properties", "properties must be an object");
    std::set<std::string> required;
    if (const json::Value* req = s.find("required")) {
      if (!req->is_array()) throw schema_error(path + "/required", "required must be an array of strings");
      for (const json::Value& k : req->as_array()) {
        if (!k.is_string() || !props || !props->contains(k.as_string()))
          throw schema_error(path + "/required", "required names " + json::dump(k) + ", which properties does not define");
        required.insert(k.as_string());
      }
    }
    std::vector<ObjectMember> members;
    if (props)
      for (const auto& [key, sub] : props->as_object()) {
        const std::string sub_path = path + "/properties/" + key;
        members.push_back({literal(json::dump(json::Value(key)) + ":"), required.count(key) > 0, sub_path});
        members.back().key_value.push_back(Element::ref(compile(sub, sub_path, depth + 1)));
      }
    return counted_object_rule(b_, path, members, min, max);
  }

  // A tuple is prefixItems + items (2020-12) or, in draft 7 (zod-to-json-schema's default), an
  // items array + additionalItems: the same grammar.
  int array_rule(const json::Value& s, const std::string& path, int depth) {
    const bool draft7 = s.find("items") && s.find("items")->is_array();
    const std::string tuple_key = draft7 ? "items" : "prefixItems", rest_key = draft7 ? "additionalItems" : "items";
    const json::Value* prefix = s.find(tuple_key);
    const json::Value* items = s.find(rest_key);
    if (s.contains(draft7 ? "prefixItems" : "additionalItems"))
      throw schema_error(path + (draft7 ? "/prefixItems" : "/additionalItems"),
                         draft7 ? "prefixItems beside an items array is unsupported" : "additionalItems needs an items array (draft 7 tuple)");
    if (items && !items->is_object() && !items->is_bool()) throw schema_error(path + "/" + rest_key, rest_key + " must be one schema");
    if (prefix && (!prefix->is_array() || prefix->as_array().empty()))
      throw schema_error(path + "/" + tuple_key, tuple_key + " must be a non-empty array of schemas");
    const bool no_items = items && items->is_bool() && !items->as_bool();
    if (no_items && !prefix) throw schema_error(path + "/items", "items false without prefixItems accepts only [], unsupported");
    const std::size_t min = count(s, "minItems", path, 0);
    const long long max = s.contains("maxItems") ? static_cast<long long>(count(s, "maxItems", path, 0)) : -1;
    if (max >= 0 && static_cast<std::size_t>(max) < min) throw schema_error(path + "/maxItems", "maxItems is below minItems");
    const json::Value* unique = s.find("uniqueItems");
    if (unique && !unique->is_bool()) throw schema_error(path + "/uniqueItems", "uniqueItems must be a boolean");
    if (unique && unique->as_bool() && (max < 0 || max > 1)) return unique_rule(s, prefix ? nullptr : items, path, depth, min, max);
    if (prefix) {
      std::vector<int> tuple;
      for (const json::Value& sub : prefix->as_array())
        tuple.push_back(compile(sub, path + "/" + tuple_key + "/" + std::to_string(tuple.size()), depth + 1));
      const int rest = no_items ? -1 : items ? compile(*items, path + "/" + rest_key, depth + 1) : value_rule();
      return prefix_array_rule(b_, path, tuple, rest, min, max);
    }
    const int item = items ? compile(*items, path + "/items", depth + 1) : value_rule();
    const int list = b_.repeat(path + "/items", {Element::ref(item)}, literal(","), min, max);
    return b_.rule_of(path, {{Element::byte('['), Element::ref(list), Element::byte(']')}});
  }

  int string_rule(const json::Value& s, const std::string& path) {
    const std::size_t min = count(s, "minLength", path, 0);
    const long long max = s.contains("maxLength") ? static_cast<long long>(count(s, "maxLength", path, 0)) : -1;
    if (max >= 0 && static_cast<std::size_t>(max) < min) throw schema_error(path + "/maxLength", "maxLength is below minLength");
    if (const int r = string_keywords_rule(b_, s, path, min, max); r >= 0) return r;
    if (min == 0 && max < 0) return plain_string_rule();
    const int chars = b_.repeat(path + "/chars", {Element::ref(char_rule())}, {}, min, max);
    return b_.rule_of(path, {{Element::byte('"'), Element::ref(chars), Element::byte('"')}});
  }

  int unique_rule(const json::Value& s, const json::Value* items, const std::string& path, int depth, std::size_t min, long long max) {
    const std::vector<std::string> values = unique_item_values(items);
    if (values.empty() || s.contains("prefixItems"))
      throw schema_error(path + "/uniqueItems", "uniqueItems: true is enforced only for items that are an enum or const of at most " +
                                                    std::to_string(max_unique_values) + " strings, integers, booleans or null (or with maxItems <= 1)");
    compile(*items, path + "/items", depth + 1);  // its own keywords are still checked
    return unique_array_rule(b_, path, values, min, max);
  }

  int enum_rule(const json::Value& e, const std::string& path) {
    if (!e.is_array() || e.as_array().empty()) throw schema_error(path + "/enum", "enum must be a non-empty array");
    if (e.as_array().size() > b_.limits().max_repeat)
      throw schema_error(path + "/enum", "enum has more than " + std::to_string(b_.limits().max_repeat) + " values");
    std::vector<std::string> values;
    for (const json::Value& v : e.as_array()) values.push_back(json::dump(v));
    return literal_rule(path + "/enum", std::move(values));
  }

  int any_of(const json::Value& any, const std::string& path, int depth) {
    if (!any.is_array() || any.as_array().empty()) throw schema_error(path + "/anyOf", "anyOf must be a non-empty array");
    const int r = b_.new_rule(path + "/anyOf");
    std::size_t i = 0;
    for (const json::Value& sub : any.as_array())
      b_.add_alt(r, {Element::ref(compile(sub, path + "/anyOf/" + std::to_string(i++), depth + 1))});
    return r;
  }

  int ref_rule(const json::Value& ref, const json::Value& s, const std::string& path, int depth) {
    (void)s;
    if (!ref.is_string()) throw schema_error(path + "/$ref", "$ref must be a string");
    const std::string& target = ref.as_string();
    if (auto it = refs_.find(target); it != refs_.end()) return it->second;  // recursion ends here
    const json::Value* resolved = resolve(target, path);
    const int r = b_.new_rule(target);
    refs_[target] = r;
    b_.add_alt(r, {Element::ref(compile(*resolved, target, depth + 1))});
    return r;
  }

  // "#", "#/$defs/name", "#/definitions/name" (JSON pointer within this schema only).
  const json::Value* resolve(const std::string& target, const std::string& path) const {
    if (target.empty() || target[0] != '#')
      throw schema_error(path + "/$ref", "only references within the schema (\"#...\") are supported, got \"" + target + "\"");
    const json::Value* at = &root_;
    std::size_t i = 1;
    while (i < target.size()) {
      if (target[i] != '/') throw schema_error(path + "/$ref", "unsupported reference \"" + target + "\"");
      std::size_t j = target.find('/', i + 1);
      if (j == std::string::npos) j = target.size();
      std::string part;  // the pointer token with ~1 -> / and ~0 -> ~
      for (std::size_t k = i + 1; k < j; ++k) {
        const bool escape = target[k] == '~' && k + 1 < j;
        part += escape ? (target[k + 1] == '1' ? '/' : '~') : target[k];
        k += escape ? 1 : 0;
      }
      at = at->is_object() ? at->find(part) : nullptr;
      if (!at) throw schema_error(path + "/$ref", "reference \"" + target + "\" resolves to nothing");
      i = j;
    }
    return at;
  }

  // Alternatives of literal byte strings, factored into a byte trie so the parse stays
  // deterministic (one stack) however many values share a prefix.
  int literal_rule(const std::string& name, std::vector<std::string> values) {
    std::sort(values.begin(), values.end());
    values.erase(std::unique(values.begin(), values.end()), values.end());
    return literal_trie(name, values, 0, values.size(), 0);
  }
  int literal_trie(const std::string& name, const std::vector<std::string>& v, std::size_t lo, std::size_t hi, std::size_t at) {
    const int r = b_.new_rule(name);
    std::size_t i = lo;
    if (v[i].size() == at) b_.add_alt(r, {}), ++i;  // sorted: the value ending here comes first
    while (i < hi) {
      std::size_t j = i + 1;
      while (j < hi && v[j][at] == v[i][at]) ++j;
      std::size_t common = at + 1;  // bytes all of v[i..j) share, written as one run
      while (j - i > 1 && common < v[i].size() && std::all_of(v.begin() + static_cast<long>(i), v.begin() + static_cast<long>(j),
                                                               [&](const std::string& x) { return x.size() > common && x[common] == v[i][common]; }))
        ++common;
      if (j - i == 1) common = v[i].size();
      std::vector<Element> seq = literal(std::string_view(v[i]).substr(at, common - at));
      if (j - i > 1) seq.push_back(Element::ref(literal_trie(name, v, i, j, common)));
      b_.add_alt(r, seq);
      i = j;
    }
    return r;
  }

  // Shared building blocks, made once per grammar.
  int char_rule() {
    if (char_ >= 0) return char_;
    ByteSet plain = ByteSet::of(0x20, 0x7F), esc, hex, hex_no_d, low;
    plain.bits[0] &= ~(std::uint64_t{1} << '"');
    plain.bits[1] &= ~(std::uint64_t{1} << ('\\' - 64));
    for (char c : std::string_view("\"\\/bfnrt")) esc.add(static_cast<unsigned char>(c));
    for (char c : std::string_view("0123456789abcdefABCDEF")) hex.add(static_cast<unsigned char>(c));
    for (char c : std::string_view("0123456789abcefABCEF")) hex_no_d.add(static_cast<unsigned char>(c));
    low = ByteSet::of('0', '7');
    std::vector<std::vector<Element>> alts;
    utf8_ranges(0x80, 0x10FFFF, alts);
    alts.push_back({Element::byte_set(plain)});
    alts.push_back({Element::byte('\\'), Element::byte_set(esc)});
    // \uXXXX outside the surrogates: a lone surrogate is not text (and strict parsers refuse it).
    alts.push_back({Element::byte('\\'), Element::byte('u'), Element::byte_set(hex_no_d), Element::byte_set(hex),
                    Element::byte_set(hex), Element::byte_set(hex)});
    ByteSet d;
    d.add('d');
    d.add('D');
    alts.push_back({Element::byte('\\'), Element::byte('u'), Element::byte_set(d), Element::byte_set(low),
                    Element::byte_set(hex), Element::byte_set(hex)});
    return char_ = b_.rule_of("json-char", alts);
  }
  int plain_string_rule() {
    if (string_ >= 0) return string_;
    const int chars = b_.repeat("json-chars", {Element::ref(char_rule())}, {}, 0, -1);
    return string_ = b_.rule_of("json-string", {{Element::byte('"'), Element::ref(chars), Element::byte('"')}});
  }
  // Numbers stay within what int64 and double parsers hold (simdjson refuses 1e400 and
  // 20-digit integers): at most 15 integer digits, 15 fraction digits, a 2-digit exponent.
  int digits_rule(int which, std::size_t max) {
    static const char* names[] = {"json-int-digits", "json-frac-digits", "json-exp-digits"};
    if (digits_[which] >= 0) return digits_[which];
    return digits_[which] = b_.repeat(names[which], {Element::byte_set(ByteSet::of('0', '9'))}, {}, 0,
                                      static_cast<long long>(max));
  }
  int integer_rule() {
    if (integer_ >= 0) return integer_;
    const int sign = b_.rule_of("json-sign", {{Element::byte('-')}, {}});
    const int mag = b_.rule_of("json-int", {{Element::byte('0')},
                                            {Element::byte_set(ByteSet::of('1', '9')), Element::ref(digits_rule(0, 14))}});
    return integer_ = b_.rule_of("json-integer", {{Element::ref(sign), Element::ref(mag)}});
  }
  int number_rule() {
    if (number_ >= 0) return number_;
    const ByteSet digit = ByteSet::of('0', '9');
    ByteSet e, pm;
    e.add('e'), e.add('E'), pm.add('+'), pm.add('-');
    const int frac = b_.rule_of("json-frac", {{Element::byte('.'), Element::byte_set(digit), Element::ref(digits_rule(1, 14))}, {}});
    const int sign = b_.rule_of("json-exp-sign", {{Element::byte_set(pm)}, {}});
    const int exp = b_.rule_of("json-exp", {{Element::byte_set(e), Element::ref(sign), Element::byte_set(digit),
                                             Element::ref(digits_rule(2, 1))}, {}});
    return number_ = b_.rule_of("json-number", {{Element::ref(integer_rule()), Element::ref(frac), Element::ref(exp)}});
  }
  int value_rule() {
    if (value_ >= 0) return value_;
    value_ = b_.new_rule("json-value");
    const int array_items = b_.repeat("json-array-items", {Element::ref(value_)}, literal(","), 0, -1);
    const int array = b_.rule_of("json-array", {{Element::byte('['), Element::ref(array_items), Element::byte(']')}});
    for (int r : {object_any_rule(), array, plain_string_rule(), number_rule(), literal_rule("json-literal", {"true", "false", "null"})})
      b_.add_alt(value_, {Element::ref(r)});
    return value_;
  }
  int object_counted_any_rule(const std::string& path, std::size_t min, long long max) {
    std::vector<Element> member = {Element::ref(plain_string_rule()), Element::byte(':'), Element::ref(value_rule())};
    const int members = b_.repeat(path + "/members", member, literal(","), min, max);
    return b_.rule_of(path, {{Element::byte('{'), Element::ref(members), Element::byte('}')}});
  }
  int object_any_rule() {
    if (object_ >= 0) return object_;
    object_ = b_.new_rule("json-object");
    std::vector<Element> member = {Element::ref(plain_string_rule()), Element::byte(':'), Element::ref(value_rule())};
    const int members = b_.repeat("json-members", member, literal(","), 0, -1);
    b_.add_alt(object_, {Element::byte('{'), Element::ref(members), Element::byte('}')});
    return object_;
  }

  GrammarBuilder b_;
  const json::Value& root_;
  std::map<std::string, int> refs_;  // $ref target -> its rule
  int char_ = -1, string_ = -1, integer_ = -1, number_ = -1, value_ = -1, object_ = -1;
  int digits_[3] = {-1, -1, -1};  // integer, fraction, exponent digit runs
};

}  // namespace detail

// The grammar of the compact JSON texts `schema` accepts (subset in docs/CONSTRAINED.md);
// kylin::Error (request) naming the keyword and its JSON pointer for anything outside it, or the
// limit a schema too large to compile exceeds (checked before compiling).
inline Grammar json_schema_grammar(const json::Value& schema, GrammarLimits limits = {}) {
  SchemaCost cost;
  add_schema_cost(schema, cost);
  check_schema_cost(cost, limits);
  return detail::SchemaCompiler(schema, limits).compile_root();
}
// Any compact JSON value / any JSON object (OpenAI's response_format json_object).
inline Grammar json_value_grammar() { return detail::SchemaCompiler(json::Value(), {}).any_value(); }
inline Grammar json_object_grammar() { return detail::SchemaCompiler(json::Value(), {}).any_object(); }

}  // namespace kylin::constrain
