// Grammar: the byte-level context-free grammar every constraint compiles to (from a JSON schema
// or GBNF). Terminals are sets of bytes, so UTF-8 characters are sequences of byte sets and a
// token that ends inside a character leaves the parser inside that sequence.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/core/error.hpp"

namespace kylin::constrain {

// Compile-time bounds: a hostile schema or grammar gets a named error instead of unbounded size.
// The last two are checked on a JSON schema before any rule is built (json_schema.hpp's
// SchemaCost), over all of a request's schemas together, so a request too large to compile costs
// a walk over its JSON, not the compile. An element is 40 bytes: 1M of them hold 40 MB.
struct GrammarLimits {
  std::size_t max_elements = 1'000'000;  // terminals + rule references over all alternatives
  std::size_t max_rules = 200'000;
  int max_depth = 64;                    // schema nesting / $ref chain / GBNF group nesting
  std::size_t max_repeat = 4096;         // counted repetitions ({m,n}, minLength, maxItems...)
  std::size_t max_schema_nodes = 20'000;          // JSON values of the schemas (any keyword's)
  std::size_t max_schema_path_bytes = 16u << 20;  // their JSON pointers together (rule names and error texts grow with them)
  std::size_t max_pattern_states = 4096;          // DFA states of one string's pattern/format/lengths (a rule each)
  std::size_t max_multiple_of = 1000;             // an integer multipleOf (about 15 rules per unit)
  // Stack nodes the parser may push expanding references before it reads a byte (expansion_size):
  // repetitions of items that can match nothing multiply when nested, as a pattern's copied counts.
  std::size_t max_expansion = std::size_t{1} << 16;
};

// Rule names are for error texts; a name longer than this keeps its two ends, so a schema's long
// property names cannot make the rule table large.
inline constexpr std::size_t max_rule_name_bytes = 200;

struct ByteSet {
  std::array<std::uint64_t, 4> bits{};  // [256] one bit per byte
  bool has(unsigned char b) const { return (bits[b >> 6] >> (b & 63)) & 1u; }
  void add(unsigned char b) { bits[b >> 6] |= std::uint64_t{1} << (b & 63); }
  void add_range(unsigned lo, unsigned hi) {
    for (unsigned b = lo; b <= hi && b < 256; ++b) add(static_cast<unsigned char>(b));
  }
  static ByteSet of(unsigned lo, unsigned hi) {
    ByteSet s;
    s.add_range(lo, hi);
    return s;
  }
};

// One grammar symbol. An alternative is a run of elements closed by an `end` element.
struct Element {
  enum class Kind : std::uint8_t { bytes, rule, end };
  Kind kind = Kind::end;
  int rule = -1;  // Kind::rule: the referenced rule
  ByteSet set;    // Kind::bytes: the accepted bytes
  static Element byte_set(ByteSet s) { return {Kind::bytes, -1, s}; }
  static Element byte(unsigned char b) { return byte_set(ByteSet::of(b, b)); }
  static Element ref(int r) { return {Kind::rule, r, {}}; }
};

struct Grammar {
  std::vector<Element> elements;               // [n_elements] all alternatives, each closed by end
  std::vector<std::vector<int>> alternatives;  // [n_rules][n_alts] start index into elements
  std::vector<std::string> names;              // [n_rules]
  int root = -1;
};

namespace detail {

inline Error grammar_error(std::string context, const std::string& message) {
  return Error(ErrorCategory::request, std::move(context), message);
}

// Builds a Grammar rule by rule; every addition is counted against GrammarLimits.
class GrammarBuilder {
 public:
  explicit GrammarBuilder(GrammarLimits limits = {}) : limits_(limits) {}

  int new_rule(std::string name) {
    if (name.size() > max_rule_name_bytes)
      name = name.substr(0, max_rule_name_bytes / 2 - 2) + "..." + name.substr(name.size() - (max_rule_name_bytes / 2 - 2));
    if (g_.names.size() >= limits_.max_rules)
      throw grammar_error(name, "grammar exceeds " + std::to_string(limits_.max_rules) + " rules");
    g_.names.push_back(std::move(name));
    g_.alternatives.emplace_back();
    return static_cast<int>(g_.names.size()) - 1;
  }
  void add_alt(int rule, const std::vector<Element>& seq) {
    if (g_.elements.size() + seq.size() + 1 > limits_.max_elements)
      throw grammar_error(g_.names[static_cast<std::size_t>(rule)],
                          "grammar exceeds " + std::to_string(limits_.max_elements) + " elements");
    g_.alternatives[static_cast<std::size_t>(rule)].push_back(static_cast<int>(g_.elements.size()));
    g_.elements.insert(g_.elements.end(), seq.begin(), seq.end());
    g_.elements.push_back(Element{});
  }
  int rule_of(std::string name, const std::vector<std::vector<Element>>& alts) {
    const int r = new_rule(std::move(name));
    for (const auto& a : alts) add_alt(r, a);
    return r;
  }
  const GrammarLimits& limits() const { return limits_; }
  std::size_t rule_count() const { return g_.names.size(); }

  // item{min,max} (max < 0: unbounded), items separated by `sep` (may be empty).
  int repeat(const std::string& name, const std::vector<Element>& item, const std::vector<Element>& sep,
             std::size_t min, long long max) {
    if (min > limits_.max_repeat || (max >= 0 && static_cast<std::size_t>(max) > limits_.max_repeat))
      throw grammar_error(name, "repetition count above the limit of " + std::to_string(limits_.max_repeat));
    std::vector<Element> sep_item = sep;
    sep_item.insert(sep_item.end(), item.begin(), item.end());
    // more[k]: up to k further items, each after sep (-1: none); unbounded: one looping rule.
    std::vector<int> more{-1};
    if (max < 0) {
      const int loop = new_rule(name + "-more");
      loops_.push_back(loop);
      std::vector<Element> again = sep_item;
      again.push_back(Element::ref(loop));
      add_alt(loop, again);
      add_alt(loop, {});
      more[0] = loop;
    } else {
      if (max < static_cast<long long>(min)) throw grammar_error(name, "maximum count below the minimum");
      for (long long k = 1; k <= max - static_cast<long long>(min) || (min == 0 && k < max); ++k) {
        const int r = new_rule(name + "-more");
        std::vector<Element> again = sep_item;
        if (more.back() >= 0) again.push_back(Element::ref(more.back()));
        add_alt(r, again);
        add_alt(r, {});
        more.push_back(r);
      }
    }
    auto tail = [&](std::size_t k) { return max < 0 ? more[0] : more[k]; };
    const int r = new_rule(name);
    std::vector<Element> seq;
    if (min == 0) {
      add_alt(r, {});
      if (max == 0) return r;
      seq = item;
      const int rest = tail(max < 0 ? 0 : static_cast<std::size_t>(max - 1));
      if (rest >= 0) seq.push_back(Element::ref(rest));
      add_alt(r, seq);
      return r;
    }
    seq = item;
    for (std::size_t i = 1; i < min; ++i) seq.insert(seq.end(), sep_item.begin(), sep_item.end());
    const int rest = tail(max < 0 ? 0 : static_cast<std::size_t>(max - static_cast<long long>(min)));
    if (rest >= 0) seq.push_back(Element::ref(rest));
    add_alt(r, seq);
    return r;
  }

  // Copies every rule of `g` into this grammar (renumbered); returns the rule that was its root.
  int include(const Grammar& g) {
    const int offset = static_cast<int>(g_.names.size());
    for (const std::string& name : g.names) new_rule(name);
    std::vector<Element> seq;
    for (std::size_t r = 0; r < g.alternatives.size(); ++r)
      for (int start : g.alternatives[r]) {
        seq.clear();
        for (auto i = static_cast<std::size_t>(start); g.elements[i].kind != Element::Kind::end; ++i) {
          Element e = g.elements[i];
          if (e.kind == Element::Kind::rule) e.rule += offset;
          seq.push_back(e);
        }
        add_alt(offset + static_cast<int>(r), seq);
      }
    return offset + g.root;
  }

  Grammar finish(int root);

 private:
  void check_left_recursion() const;

  GrammarLimits limits_;
  Grammar g_;
  std::vector<int> loops_;  // the looping rule of each unbounded repetition (item*, item+)
};

// A rule can derive the empty string (fixed point over all rules).
inline std::vector<char> nullable_rules(const Grammar& g) {
  std::vector<char> nullable(g.names.size(), 0);  // [n_rules]
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t r = 0; r < g.names.size(); ++r) {
      if (nullable[r]) continue;
      for (int start : g.alternatives[r]) {
        bool all = true;
        for (int i = start; g.elements[static_cast<std::size_t>(i)].kind != Element::Kind::end && all; ++i) {
          const Element& e = g.elements[static_cast<std::size_t>(i)];
          all = e.kind == Element::Kind::rule && nullable[static_cast<std::size_t>(e.rule)];
        }
        if (all) {
          nullable[r] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  return nullable;
}

// The parser expands rule references eagerly, so a rule that can reach itself before consuming
// a byte would expand forever: refused here, naming the rule. A cycle through an unbounded
// repetition's loop is a repeated item that can match the empty string (("a"*)*): named as such.
inline void GrammarBuilder::check_left_recursion() const {
  const std::vector<char> nullable = nullable_rules(g_);
  const std::size_t n = g_.names.size();
  std::vector<std::vector<int>> first_refs(n);  // [n_rules] rules reachable before any byte
  for (std::size_t r = 0; r < n; ++r)
    for (int start : g_.alternatives[r])
      for (int i = start; g_.elements[static_cast<std::size_t>(i)].kind == Element::Kind::rule; ++i) {
        const int target = g_.elements[static_cast<std::size_t>(i)].rule;
        first_refs[r].push_back(target);
        if (!nullable[static_cast<std::size_t>(target)]) break;
      }
  std::vector<char> color(n, 0);  // [n_rules] 0 new, 1 on the DFS path, 2 done
  std::vector<std::pair<int, std::size_t>> stack;  // [depth] (rule, next edge)
  for (std::size_t s = 0; s < n; ++s) {
    if (color[s]) continue;
    stack.push_back({static_cast<int>(s), 0});
    color[s] = 1;
    while (!stack.empty()) {
      auto& [r, edge] = stack.back();
      if (edge == first_refs[static_cast<std::size_t>(r)].size()) {
        color[static_cast<std::size_t>(r)] = 2;
        stack.pop_back();
        continue;
      }
      const int t = first_refs[static_cast<std::size_t>(r)][edge++];
      if (color[static_cast<std::size_t>(t)] == 1) {
        auto on_cycle = std::find_if(stack.begin(), stack.end(), [&](const auto& frame) { return frame.first == t; });
        for (; on_cycle != stack.end(); ++on_cycle)
          if (std::find(loops_.begin(), loops_.end(), on_cycle->first) != loops_.end())
            throw grammar_error(g_.names[static_cast<std::size_t>(on_cycle->first)],
                                "the repeated item can match the empty string, so the repetition could loop without "
                                "consuming input; make the item non-empty (for (\"a\"*)* write \"a\"*)");
        throw grammar_error(g_.names[static_cast<std::size_t>(t)],
                            "rule is left-recursive (it can reach itself without consuming input)");
      }
      if (color[static_cast<std::size_t>(t)] == 0) {
        color[static_cast<std::size_t>(t)] = 1;
        stack.push_back({t, 0});
      }
    }
  }
}

// An upper bound on the stack nodes StackArena pushes expanding rule references before it reads
// a byte: from the start, or from any position after a byte (a step; what the stacks above it
// add when their rests are nullable comes on top, each bounded alike). Expanding rule r under a
// continuation pushes N(r) = the sum over its alternatives e_0..e_{k-1} of from(0), where
// from(i) = 1, plus for a reference to t: N(t) and, unless e_i is the last, from(i+1) when t can
// match nothing (the parser goes on past it), else 1 (the continuation it pushes). So a nullable
// repetition inside a repetition multiplies: (("a"{0,1000}){0,1000}){0,1000} pushes ~3e6 nodes
// (2.3 s to construct its Constraint), ("a"{1,1000}){1,1000} a handful. Saturates at `cap`;
// `at` gets the rule where the largest expansion begins. The grammar must not be left-recursive
// (the references before a byte form no cycle).
inline std::size_t expansion_size(const Grammar& g, const std::vector<char>& nullable, std::size_t cap, int* at = nullptr) {
  const std::size_t n = g.names.size();
  auto add = [cap](std::size_t a, std::size_t b) { return std::min(cap, a + b); };  // a, b <= cap
  std::vector<std::size_t> cost(n, 0);  // [n_rules] N(r)
  // from(i) for i = last down to begin of one alternative; last: where a byte is read first
  // (all N needed then are known), or the alternative's last element (every N is known).
  std::vector<std::size_t> from;  // [alternative length] from(i - begin)
  auto alternative = [&](std::size_t begin, std::size_t last, std::size_t end) {
    from.assign(last - begin + 1, 0);
    for (std::size_t i = last + 1; i-- > begin;) {
      const Element& e = g.elements[i];
      std::size_t c = 1;
      if (e.kind == Element::Kind::rule) {
        const auto t = static_cast<std::size_t>(e.rule);
        c = add(c, cost[t]);
        if (i + 1 < end) c = add(c, nullable[t] && i < last ? from[i + 1 - begin] : 1);
      }
      from[i - begin] = c;
    }
  };
  auto alt_end = [&](std::size_t begin) {
    std::size_t e = begin;
    while (g.elements[e].kind != Element::Kind::end) ++e;
    return e;
  };
  // The references an expansion meets before a byte, and where a byte comes first.
  auto prefix_last = [&](std::size_t begin, std::size_t end) {
    std::size_t i = begin;
    while (i + 1 < end && g.elements[i].kind == Element::Kind::rule && nullable[static_cast<std::size_t>(g.elements[i].rule)]) ++i;
    return i;
  };
  std::vector<std::vector<std::size_t>> first(n);  // [n_rules] the references met before a byte
  for (std::size_t r = 0; r < n; ++r)
    for (int start : g.alternatives[r]) {
      const auto b = static_cast<std::size_t>(start), e = alt_end(b);
      for (std::size_t i = b; i < e && g.elements[i].kind == Element::Kind::rule; ++i) {
        first[r].push_back(static_cast<std::size_t>(g.elements[i].rule));
        if (!nullable[first[r].back()]) break;
      }
    }
  std::vector<char> done(n, 0);                            // [n_rules] cost known
  std::vector<std::pair<std::size_t, std::size_t>> stack;  // [depth] (rule, next edge): post-order, no cycle
  for (std::size_t s = 0; s < n; ++s) {
    if (done[s]) continue;
    stack.push_back({s, 0});
    while (!stack.empty()) {
      auto& [r, edge] = stack.back();
      if (edge < first[r].size()) {
        const std::size_t t = first[r][edge++];
        if (!done[t]) stack.push_back({t, 0});
        continue;
      }
      std::size_t total = 0;
      for (int start : g.alternatives[r]) {
        const auto b = static_cast<std::size_t>(start), e = alt_end(b);
        if (e == b) continue;
        alternative(b, prefix_last(b, e), e);
        total = add(total, from[0]);
      }
      cost[r] = total;
      done[r] = 1;
      stack.pop_back();
    }
  }
  std::size_t best = g.root >= 0 ? cost[static_cast<std::size_t>(g.root)] : 0;
  if (at) *at = g.root;
  for (std::size_t r = 0; r < n; ++r)
    for (int start : g.alternatives[r]) {
      const auto b = static_cast<std::size_t>(start), e = alt_end(b);
      if (e == b) continue;
      alternative(b, e - 1, e);
      const std::size_t c = *std::max_element(from.begin(), from.end());
      if (c <= best) continue;
      best = c;
      if (at) *at = static_cast<int>(r);
    }
  return best;
}

inline Grammar GrammarBuilder::finish(int root) {
  for (std::size_t r = 0; r < g_.names.size(); ++r)
    if (g_.alternatives[r].empty()) throw grammar_error(g_.names[r], "rule has no definition");
  check_left_recursion();
  g_.root = root;
  int at = root;
  const std::size_t pushes = expansion_size(g_, nullable_rules(g_), limits_.max_expansion + 1, &at);
  if (pushes > limits_.max_expansion)
    throw grammar_error(g_.names[static_cast<std::size_t>(at)],
                        "nested repetitions multiply: the parser would expand over " + std::to_string(limits_.max_expansion) +
                            " stacks before reading a byte (a repeated item that can match nothing, inside another "
                            "repetition, counts its count times the inner one's; give the inner item a minimum of 1 or "
                            "lower the counts)");
  return std::move(g_);
}

// The UTF-8 byte sequences of the code points [lo, hi] (no surrogates), as sequences of byte
// ranges, by splitting the range where encodings change length or leading bytes.
inline void utf8_ranges(char32_t lo, char32_t hi, std::vector<std::vector<Element>>& out) {
  if (lo > hi) return;
  if (lo <= 0xDFFF && hi >= 0xD800) {  // surrogates are no characters
    if (lo < 0xD800) utf8_ranges(lo, 0xD7FF, out);
    if (hi > 0xDFFF) utf8_ranges(0xE000, hi, out);
    return;
  }
  static constexpr char32_t bounds[] = {0x7F, 0x7FF, 0xFFFF};
  for (char32_t b : bounds)
    if (lo <= b && hi > b) {
      utf8_ranges(lo, b, out);
      utf8_ranges(b + 1, hi, out);
      return;
    }
  const int n = hi < 0x80 ? 1 : hi < 0x800 ? 2 : hi < 0x10000 ? 3 : 4;
  for (int i = 1; i < n; ++i) {
    const char32_t m = (char32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_ranges(lo, lo | m, out);
        utf8_ranges((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_ranges(lo, (hi & ~m) - 1, out);
        utf8_ranges(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  auto enc = [](std::string& s, char32_t cp, int len) {
    if (len == 1) s += static_cast<char>(cp);
    else if (len == 2) s = {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    else if (len == 3)
      s = {static_cast<char>(0xE0 | (cp >> 12)), static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
           static_cast<char>(0x80 | (cp & 0x3F))};
    else
      s = {static_cast<char>(0xF0 | (cp >> 18)), static_cast<char>(0x80 | ((cp >> 12) & 0x3F)),
           static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), static_cast<char>(0x80 | (cp & 0x3F))};
  };
  enc(a, lo, n);
  enc(b, hi, n);
  std::vector<Element> seq;
  for (int i = 0; i < n; ++i)
    seq.push_back(Element::byte_set(ByteSet::of(static_cast<unsigned char>(a[static_cast<std::size_t>(i)]),
                                                static_cast<unsigned char>(b[static_cast<std::size_t>(i)]))));
  out.push_back(std::move(seq));
}

// The elements matching one character of a code-point class: a single byte set when the class is
// ASCII only, else a reference to a new rule with one alternative per UTF-8 byte-range sequence.
inline std::vector<Element> char_class(GrammarBuilder& b, const std::string& name,
                                       const std::vector<std::pair<char32_t, char32_t>>& ranges) {
  std::vector<std::vector<Element>> alts;
  ByteSet ascii;
  bool only_ascii = true;
  for (auto [lo, hi] : ranges) {
    if (lo < 0x80) ascii.add_range(lo, std::min<char32_t>(hi, 0x7F));
    if (hi >= 0x80) {
      only_ascii = false;
      utf8_ranges(std::max<char32_t>(lo, 0x80), std::min<char32_t>(hi, 0x10FFFF), alts);
    }
  }
  if (only_ascii) return {Element::byte_set(ascii)};
  if (ascii.bits != ByteSet{}.bits) alts.push_back({Element::byte_set(ascii)});
  return {Element::ref(b.rule_of(name, alts))};
}

// The complement of `ranges` within the Unicode scalar values.
inline std::vector<std::pair<char32_t, char32_t>> complement(std::vector<std::pair<char32_t, char32_t>> ranges) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<char32_t, char32_t>> out;
  char32_t next = 0;
  for (auto [lo, hi] : ranges) {
    if (lo > next) out.push_back({next, lo - 1});
    if (hi + 1 > next) next = hi + 1;
  }
  if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
  return out;
}

inline std::vector<Element> literal(std::string_view bytes) {
  std::vector<Element> seq;
  for (char c : bytes) seq.push_back(Element::byte(static_cast<unsigned char>(c)));
  return seq;
}

}  // namespace detail
}  // namespace kylin::constrain
