// Grammars of the XML tool calls of Qwen3.5/3.6 and Qwen3-Coder, `<tool_call>\n<function=NAME>\n`,
// `<parameter=K>\nV\n</parameter>\n` per argument, `</function>\n</tool_call>`, and the one rule of
// how a parameter's value is typed by its schema (xml_value_type), which kylin-server's parser shares.
#pragma once

#include <algorithm>
#include <cctype>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/constrain/byte_dfa.hpp"
#include "kylin/constrain/json_schema.hpp"
#include "kylin/constrain/schema_keywords.hpp"
#include "kylin/constrain/tool_call_grammar.hpp"
#include "kylin/core/json.hpp"

namespace kylin::constrain {

// How a parameter's text becomes its JSON value, after vLLM's qwen3_coder parser
// (vllm/tool_parsers/qwen3coder_tool_parser.py, _convert_param_value; tests/data/qwen35-tokenizer/
// TOOL_CALLS.md rule 5): text stays a string; integer/number/boolean are read as Python's int(),
// float() and == "true" read them; json as json.loads, then Python literals; literal as
// ast.literal_eval. `nullable`: "null"/"None" is JSON null even for text.
enum class XmlValueKind { text, integer, number, boolean, json, literal };

struct XmlValueType {
  XmlValueKind kind = XmlValueKind::text;
  bool nullable = false;
  std::string name;  // the type name read (lower case), "string" when the schema gives none
};

namespace detail {

inline std::string lower_trimmed(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  s = s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// vLLM reads str(type): a type that is not a string gets the text of its JSON here.
inline std::string type_name(const json::Value& t) { return lower_trimmed(t.is_string() ? t.as_string() : json::dump(t)); }

inline XmlValueKind kind_of_type(std::string_view name) {
  auto starts = [&](std::string_view p) { return name.substr(0, p.size()) == p; };
  for (std::string_view t : {"string", "str", "text", "varchar", "char", "enum"})
    if (name == t) return XmlValueKind::text;
  for (std::string_view p : {"int", "uint", "long", "short", "unsigned"})
    if (starts(p)) return XmlValueKind::integer;
  if (starts("num") || starts("float")) return XmlValueKind::number;
  if (name == "boolean" || name == "bool" || name == "binary") return XmlValueKind::boolean;
  if (name == "object" || name == "array" || name == "arr" || starts("dict") || starts("list")) return XmlValueKind::json;
  return XmlValueKind::literal;
}

}  // namespace detail

// The type of a parameter whose property schema is `schema` (null: the tool or the parameter is
// not in the request: text). `type` (vLLM: str(type).strip().lower()) decides; else anyOf's first
// member of a type other than null, nullable when a member has type null; else text. One
// deviation: a type array (["string", "null"]) reads as that anyOf would, where vLLM's str() of a
// list matches no type name and falls to ast.literal_eval.
inline XmlValueType xml_value_type(const json::Value* schema) {
  XmlValueType out{XmlValueKind::text, false, "string"};
  if (schema == nullptr || !schema->is_object()) return out;
  if (const json::Value* t = schema->find("type")) {
    if (t->is_array()) {
      bool picked = false;
      for (const json::Value& m : t->as_array()) {
        const std::string name = detail::type_name(m);
        if (name == "null") out.nullable = true;
        else if (!picked) out.name = name, picked = true;
      }
      if (!picked && out.nullable) out.name = "null";
    } else {
      out.name = detail::type_name(*t);
      out.nullable = out.name == "null";
    }
  } else if (const json::Value* any = schema->find("anyOf"); any && any->is_array()) {
    bool picked = false;
    for (const json::Value& m : any->as_array()) {
      const json::Value* t = m.is_object() ? m.find("type") : nullptr;
      if (t == nullptr) continue;
      const std::string name = detail::type_name(*t);
      if (name == "null") out.nullable = true;
      else if (!picked) out.name = name, picked = true;
    }
  }
  out.kind = detail::kind_of_type(out.name);
  return out;
}

namespace detail {

// What ends a parameter's value in kylin-server's parser (tool_calls_xml.hpp), read in "\n" + V:
// an XML string value V must hold none of them, or the parse would end it early.
inline constexpr std::string_view xml_value_ends[] = {"</parameter>", "\n<parameter=", "\n</function>", "\n</tool_call>"};

// The DFA of the text values: UTF-8 (tab, LF and CR the only controls) in which, read after one
// "\n" (the line break before every value), no xml_value_ends string occurs. States: the longest
// suffix of the text that begins a marker (the markers are ASCII, so a multi-byte character
// restarts it), and the continuation bytes a UTF-8 character still needs. State 0 is the start.
inline ByteDfa xml_text_dfa() {
  std::vector<std::string> prefixes{""};  // every proper prefix of a marker
  for (std::string_view m : xml_value_ends)
    for (std::size_t n = 1; n < m.size(); ++n) prefixes.emplace_back(m.substr(0, n));
  std::sort(prefixes.begin(), prefixes.end());
  prefixes.erase(std::unique(prefixes.begin(), prefixes.end()), prefixes.end());
  std::stable_partition(prefixes.begin(), prefixes.end(), [](const std::string& p) { return p == "\n"; });  // the start first
  std::map<std::string, int> id;
  ByteDfa dfa;
  for (const std::string& p : prefixes) id[p] = dfa.add_state(true);
  // UTF-8 tails: [0..2] 1-3 continuation bytes left; [3..6] after E0, ED, F0, F4 (narrower second byte)
  int tail[7];
  for (int& t : tail) t = dfa.add_state(false);
  const int ground = id.at("");
  for (int k = 0; k < 3; ++k)
    for (unsigned b = 0x80; b <= 0xBF; ++b) dfa.next[static_cast<std::size_t>(tail[k])][b] = k == 0 ? ground : tail[k - 1];
  const struct { int state; unsigned lo, hi; int to; } narrow[] = {
      {tail[3], 0xA0, 0xBF, tail[0]}, {tail[4], 0x80, 0x9F, tail[0]}, {tail[5], 0x90, 0xBF, tail[1]}, {tail[6], 0x80, 0x8F, tail[1]}};
  for (const auto& n : narrow)
    for (unsigned b = n.lo; b <= n.hi; ++b) dfa.next[static_cast<std::size_t>(n.state)][b] = n.to;
  for (const std::string& p : prefixes) {
    auto& row = dfa.next[static_cast<std::size_t>(id.at(p))];
    for (unsigned b = 0; b < 0x80; ++b) {
      if (b < 0x20 && b != '\t' && b != '\n' && b != '\r') continue;
      const std::string t = p + static_cast<char>(b);
      if (std::any_of(std::begin(xml_value_ends), std::end(xml_value_ends), [&](std::string_view m) { return t.ends_with(m); })) continue;
      for (std::size_t cut = 0; cut <= t.size(); ++cut)  // the longest suffix that begins a marker
        if (auto it = id.find(t.substr(cut)); it != id.end()) {
          row[b] = it->second;
          break;
        }
    }
    for (unsigned b = 0xC2; b <= 0xF4; ++b)
      row[b] = b <= 0xDF ? tail[0] : b == 0xE0 ? tail[3] : b == 0xED ? tail[4] : b <= 0xEF ? tail[1] : b == 0xF0 ? tail[5] : b <= 0xF3 ? tail[2] : tail[6];
  }
  return dfa;
}

inline bool dfa_accepts(const ByteDfa& dfa, std::string_view s) {
  int state = 0;
  for (char c : s)
    if ((state = dfa.next[static_cast<std::size_t>(state)][static_cast<unsigned char>(c)]) < 0) return false;
  return dfa.accept[static_cast<std::size_t>(state)] != 0;
}

inline Error xml_error(const std::string& path, const std::string& message) { return grammar_error("xml tool call " + path, message); }

// The most characters a length-bounded XML text value may be held to: the DFA counts them, one copy of the
// text DFA per count.
inline constexpr std::int64_t xml_max_counted_length = 128;

// The text DFA with its characters counted (a UTF-8 character starts at a byte below 0x80 or from 0xC0):
// accepting after min..max of them (max < 0: at least min, the count saturating there).
inline ByteDfa counted_text_dfa(const ByteDfa& text, std::int64_t min, std::int64_t max) {
  const bool unbounded = max < 0;
  if (unbounded) max = min;
  const auto states = static_cast<int>(text.next.size());
  ByteDfa dfa;
  for (std::int64_t c = 0; c <= max; ++c)
    for (int t = 0; t < states; ++t) dfa.add_state(text.accept[static_cast<std::size_t>(t)] && c >= min);
  for (std::int64_t c = 0; c <= max; ++c)
    for (int t = 0; t < states; ++t)
      for (unsigned byte = 0; byte < 256; ++byte) {
        const int to = text.next[static_cast<std::size_t>(t)][byte];
        std::int64_t count = c + (byte < 0x80 || byte >= 0xC0 ? 1 : 0);
        if (unbounded) count = std::min(count, max);
        if (to >= 0 && count <= max) dfa.next[static_cast<std::size_t>(c * states + t)][byte] = static_cast<int>(count * states + to);
      }
  return dfa;
}

inline std::int64_t utf8_length(std::string_view s) {
  return std::count_if(s.begin(), s.end(), [](char ch) { return (static_cast<unsigned char>(ch) & 0xC0) != 0x80; });
}

// Any text value, of minLength..maxLength characters where the schema says (at most
// xml_max_counted_length), or one of the strings of enum/const; "null" beside them when nullable.
inline Grammar xml_text_grammar(const json::Value* s, bool nullable, const std::string& path) {
  static const ByteDfa text = xml_text_dfa();
  GrammarBuilder b;
  std::vector<std::string> values;
  std::int64_t min = 0, max = -1;  // max -1: unbounded
  if (s != nullptr && s->is_object())
    for (const char* key : {"minLength", "maxLength"})
      if (const json::Value* v = s->find(key)) {
        if (!v->is_int() || v->as_int() < 0) throw xml_error(path + "/" + key, std::string(key) + " must be a non-negative integer");
        (std::string_view(key) == "minLength" ? min : max) = v->as_int();
      }
  if (max > xml_max_counted_length || (max < 0 && min > xml_max_counted_length))
    throw xml_error(path + "/" + std::string(max >= 0 ? "maxLength" : "minLength"),
                    "an XML tool-call string is held to at most " + std::to_string(xml_max_counted_length) + " characters");
  if (max >= 0 && min > max) throw xml_error(path + "/minLength", "minLength is above maxLength");
  auto fits = [&](std::string_view v) { return utf8_length(v) >= min && (max < 0 || utf8_length(v) <= max); };
  if (s != nullptr && s->is_object())
    for (const auto& [key, v] : s->as_object()) {
      if (key == "type" || key == "minLength" || key == "maxLength" || schema_annotations().count(key)) continue;
      if (key != "enum" && key != "const")
        throw xml_error(path + "/" + key, "keyword \"" + key + "\" cannot be enforced on an XML tool-call string, which is raw text "
                                          "(supported: enum, const, minLength, maxLength)");
      if (key == "enum" && (!v.is_array() || v.as_array().empty())) throw xml_error(path + "/enum", "enum must be a non-empty array");
      for (const json::Value& e : key == "enum" && v.is_array() ? v.as_array() : json::Array{v})
        if (e.is_string() && dfa_accepts(text, e.as_string()) && fits(e.as_string())) values.push_back(e.as_string());
      if (values.empty())
        throw xml_error(path + "/" + key, key + " has no string an XML value can hold (a value must not contain </parameter>; "
                                              "within minLength and maxLength)");
    }
  if (values.empty() && (min > 0 || max >= 0)) return b.finish(emit_dfa(b, counted_text_dfa(text, min, max), path));
  if (values.empty()) return b.finish(emit_dfa(b, text, path));
  if (nullable) values.push_back("null");
  const int r = b.new_rule(path + "/enum");
  for (const std::string& v : values) b.add_alt(r, literal(v));
  return b.finish(r);
}

// The schema of the member the value is written as: the property itself, the anyOf member whose
// type xml_value_type read, or the property with a type array narrowed to that type.
inline json::Value xml_value_member(const json::Value& s, const XmlValueType& t, const std::string& path) {
  const json::Value* type = s.find("type");
  if (type && type->is_array()) {
    json::Value out = s;
    out.set("type", t.name);
    return out;
  }
  if (type || !s.contains("anyOf")) return s;
  for (const json::Value& m : s.find("anyOf")->as_array())
    if (const json::Value* mt = m.is_object() ? m.find("type") : nullptr; mt && type_name(*mt) == t.name) return m;
  throw xml_error(path + "/anyOf", "an XML tool-call value is read as its first typed anyOf member; this anyOf has none with a type");
}

}  // namespace detail

// The grammar of one parameter's value V under its property schema `s`: raw text for text types,
// a compact JSON value valid under the schema (json_schema_grammar) for the others, "null" too
// when nullable. `root` (the tool's parameters schema) lends its $defs / definitions. Errors name
// `path` and the keyword.
inline Grammar xml_value_grammar(const json::Value& s, const json::Value& root, const std::string& path, GrammarLimits limits = {}) {
  if (!s.is_object() && !(s.is_bool() && s.as_bool())) throw detail::xml_error(path, "a schema must be an object or true");
  const XmlValueType t = xml_value_type(&s);
  if (t.kind == XmlValueKind::text) {
    if (s.is_object() && s.contains("anyOf") && !s.contains("type")) {
      const json::Value m = detail::xml_value_member(s, t, path);
      return detail::xml_text_grammar(&m, t.nullable, path);
    }
    if (s.is_object() && s.contains("$ref")) throw detail::xml_error(path + "/$ref", "a parameter read as text cannot be a $ref: give it a type");
    return detail::xml_text_grammar(&s, t.nullable, path);
  }
  if (t.kind == XmlValueKind::literal && t.name != "null")
    throw detail::xml_error(path + "/type", "type \"" + t.name + "\" cannot be enforced in an XML tool call");
  json::Value m = detail::xml_value_member(s, t, path);
  for (const char* defs : {"$defs", "definitions"})
    if (const json::Value* d = root.is_object() ? root.find(defs) : nullptr; d && !m.contains(defs)) m.set(defs, *d);
  Grammar value;
  try {
    value = json_schema_grammar(m, limits);
  } catch (const Error& e) {
    throw detail::xml_error(path, e.message());
  }
  if (!t.nullable || t.kind == XmlValueKind::literal) return value;
  detail::GrammarBuilder b(limits);
  return either(value, b.finish(b.rule_of(path + "/null", {detail::literal("null")})), limits);
}

// One parameter of a tool in the XML form, in the schema's order.
struct XmlParameter {
  std::string name;
  Grammar value;
  bool required = false;
};

// One callable tool in the XML form; `any_parameters`: no properties listed, so any names with
// text values (what the parser types as strings).
struct XmlToolGrammar {
  std::string name;
  std::vector<XmlParameter> parameters;
  bool any_parameters = false;
};

// Compiles a tool from its name and parameters schema (null or {}: any parameters). The schema
// is an object schema: type, properties, required, additionalProperties (true or false) and
// annotations. Only the listed properties are ever written (strict or not, as the JSON form's
// schema grammar does), each at most once and in the schema's order, the required ones always.
inline XmlToolGrammar xml_tool_grammar(const std::string& name, const json::Value* parameters, GrammarLimits limits = {}) {
  if (name.empty() || name.find_first_of("{}<>\"' \t\r\n") != std::string::npos)
    throw detail::xml_error("function name", "\"" + name + "\" cannot be written as <function=NAME> (no space, quote, brace or angle bracket)");
  XmlToolGrammar out{name, {}, false};
  if (parameters == nullptr || parameters->is_null() || (parameters->is_object() && parameters->size() == 0)) {
    out.any_parameters = true;
    return out;
  }
  if (!parameters->is_object()) throw detail::xml_error("#", "the parameters schema must be an object");
  for (const auto& [key, v] : parameters->as_object()) {
    const bool known = key == "type" || key == "properties" || key == "required" || key == "additionalProperties";
    if (!known && !detail::schema_annotations().count(key))
      throw detail::xml_error("#/" + key, "keyword \"" + key + "\" cannot be enforced on the parameters of an XML tool call");
  }
  if (const json::Value* t = parameters->find("type"); t && !(t->is_string() && t->as_string() == "object"))
    throw detail::xml_error("#/type", "the parameters of an XML tool call are an object");
  const json::Value* extra = parameters->find("additionalProperties");
  if (extra && !extra->is_bool()) throw detail::xml_error("#/additionalProperties", "only true or false is supported");
  const json::Value* props = parameters->find("properties");
  if (props && !props->is_object()) throw detail::xml_error("#/properties", "properties must be an object");
  std::vector<std::string> required;
  if (const json::Value* req = parameters->find("required")) {
    if (!req->is_array()) throw detail::xml_error("#/required", "required must be an array of strings");
    for (const json::Value& k : req->as_array()) {
      if (!k.is_string() || !props || !props->contains(k.as_string()))
        throw detail::xml_error("#/required", "required names " + json::dump(k) + ", which properties does not define");
      required.push_back(k.as_string());
    }
  }
  if (!props) {
    out.any_parameters = !(extra && !extra->as_bool());
    return out;
  }
  for (const auto& [key, sub] : props->as_object()) {
    const std::string path = "#/properties/" + key;
    if (key.empty() || key.find_first_of(">\r\n") != std::string::npos)
      throw detail::xml_error(path, "a parameter name cannot be empty or hold '>' or a line break (<parameter=NAME>)");
    const bool is_required = std::find(required.begin(), required.end(), key) != required.end();
    out.parameters.push_back({key, xml_value_grammar(sub, *parameters, path, limits), is_required});
  }
  return out;
}

// The answer is `count` XML tool calls and nothing else, "\n" apart as the chat template writes
// them (tool_choice required or a named tool). As with tool_calls_grammar, build the TokenTrie
// with <tool_call> and </tool_call> as text; <function= and <parameter= are plain text.
inline Grammar xml_tool_calls_grammar(std::span<const XmlToolGrammar> tools, ToolCallCount count = {}, GrammarLimits limits = {}) {
  if (tools.empty()) throw detail::grammar_error("tool calls", "no tool to call");
  if (count.min == 0 || count.max < count.min)
    throw detail::grammar_error("tool calls", "the call count must be at least 1 and max at least min");
  detail::GrammarBuilder b(limits);
  auto append = [](std::vector<Element>& to, const std::vector<Element>& from) { to.insert(to.end(), from.begin(), from.end()); };
  int any = -1;  // the parameters of a tool without properties: any names, text values
  const int call = b.new_rule("xml-tool-call");
  for (const XmlToolGrammar& t : tools) {
    std::vector<Element> seq = detail::literal("<tool_call>\n<function=" + t.name + ">\n");
    if (t.any_parameters) {
      if (any < 0) {
        const auto name_char = detail::char_class(b, "xml-parameter-name-char", detail::complement({{0, 0x1F}, {'>', '>'}}));
        std::vector<Element> p = detail::literal("<parameter=");
        p.push_back(Element::ref(b.repeat("xml-parameter-name", name_char, {}, 1, -1)));
        append(p, detail::literal(">\n"));
        p.push_back(Element::ref(b.include(detail::xml_text_grammar(nullptr, false, "xml-text"))));
        append(p, detail::literal("\n</parameter>\n"));
        any = b.repeat("xml-parameters", p, {}, 0, -1);
      }
      seq.push_back(Element::ref(any));
    }
    for (const XmlParameter& p : t.parameters) {
      std::vector<Element> one = detail::literal("<parameter=" + p.name + ">\n");
      one.push_back(Element::ref(b.include(p.value)));
      append(one, detail::literal("\n</parameter>\n"));
      if (p.required) append(seq, one);
      else seq.push_back(Element::ref(b.rule_of(t.name + "/" + p.name, {one, {}})));
    }
    append(seq, detail::literal("</function>\n</tool_call>"));
    b.add_alt(call, seq);
  }
  const long long max = count.max == any_number_of_calls ? -1 : static_cast<long long>(count.max);
  return b.finish(b.repeat("xml-tool-calls", {Element::ref(call)}, detail::literal("\n"), count.min, max));
}

}  // namespace kylin::constrain
