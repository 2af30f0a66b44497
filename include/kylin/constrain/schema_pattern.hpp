// JSON-schema "pattern" (an ECMA-262 regex, unanchored unless ^...$) -> a byte DFA over the
// JSON-encoded string content. The subset (docs/CONSTRAINED.md): literals, ., [...] classes and
// ranges, \d \w \s and their negations, escapes, groups, |, * + ? {n} {n,} {n,m} (lazy too), ^ and $
// at the ends only. Lookaround, backreferences, \b, \p{...} are refused by name.
#pragma once

#include <cctype>
#include <string>
#include <vector>

#include "kylin/constrain/byte_dfa.hpp"

namespace kylin::constrain::detail {

using CodeRanges = std::vector<std::pair<char32_t, char32_t>>;

struct Regex {
  enum class Kind { chars, cat, alt, repeat };
  Kind kind = Kind::cat;
  CodeRanges chars;          // Kind::chars: one code point of these
  std::vector<Regex> kids;   // cat / alt operands, repeat's single operand
  std::size_t min = 0;
  long long max = -1;        // repeat: -1 unbounded
};

// Each code point of `ranges` in its canonical JSON string encoding: raw UTF-8, except the quote,
// the backslash and the controls, which are escaped (\", \n, \u001f). The escapes share one
// backslash state and UTF-8 tails share their continuation-byte states, so a class (even ".")
// is a handful of NFA states.
inline void add_json_chars(ByteNfa& nfa, int from, const CodeRanges& ranges, int to) {
  ByteSet plain, shorts, low, high;  // raw bytes; \X letters; \u000X and \u001X nibbles
  std::vector<std::vector<Element>> multi;
  const char* hex = "0123456789abcdef";
  for (auto [lo, hi] : ranges) {
    for (char32_t c = lo; c <= std::min<char32_t>(hi, 0x7F); ++c) {
      if (c == '"' || c == '\\') shorts.add(static_cast<unsigned char>(c));
      else if (c >= 0x20) plain.add(static_cast<unsigned char>(c));
      else if (c == 8 || c == 9 || c == 10 || c == 12 || c == 13) shorts.add(static_cast<unsigned char>("btnvfr"[c - 8]));  // \v has no short form
      else (c < 16 ? low : high).add(static_cast<unsigned char>(hex[c & 15]));
    }
    if (hi >= 0x80) utf8_ranges(std::max<char32_t>(lo, 0x80), std::min<char32_t>(hi, 0x10FFFF), multi);
  }
  const ByteSet none;
  if (plain.bits != none.bits) nfa.add_bytes(from, {Element::byte_set(plain)}, to);
  if (shorts.bits != none.bits || low.bits != none.bits || high.bits != none.bits) {
    const int esc = nfa.add_state();
    nfa.add_bytes(from, literal("\\"), esc);
    if (shorts.bits != none.bits) nfa.add_bytes(esc, {Element::byte_set(shorts)}, to);
    if (low.bits != none.bits || high.bits != none.bits) {
      const int u00 = nfa.add_state();
      nfa.add_bytes(esc, literal("u00"), u00);
      if (low.bits != none.bits) nfa.add_bytes(u00, {Element::byte('0'), Element::byte_set(low)}, to);
      if (high.bits != none.bits) nfa.add_bytes(u00, {Element::byte('1'), Element::byte_set(high)}, to);
    }
  }
  // tail[k]: k continuation bytes (any of 80-BF) left before `to`
  std::vector<int> tail{to};
  const ByteSet cont = ByteSet::of(0x80, 0xBF);
  for (const auto& seq : multi) {
    std::size_t k = 0;  // trailing elements that are any continuation byte
    while (k + 1 < seq.size() && seq[seq.size() - 1 - k].set.bits == cont.bits) ++k;
    while (tail.size() <= k) {
      const int t = nfa.add_state();
      nfa.add_bytes(t, {Element::byte_set(cont)}, tail.back());
      tail.push_back(t);
    }
    nfa.add_bytes(from, std::vector<Element>(seq.begin(), seq.end() - static_cast<long>(k)), tail[k]);
  }
}

class RegexParser {
 public:
  RegexParser(std::string_view pattern, std::string path, std::size_t max_repeat)
      : path_(std::move(path)), max_repeat_(max_repeat) {
    for (std::size_t i = 0; i < pattern.size();) cps_.push_back(decode(pattern, i));
  }

  // The whole pattern with search semantics: a top-level branch not anchored by ^ (at its start)
  // or $ (at its end) may be preceded or followed by anything.
  Regex parse() {
    end_ = cps_.size();
    Regex any{Regex::Kind::chars, {{0, 0x10FFFF}}, {}, 0, -1};
    const Regex anything{Regex::Kind::repeat, {}, {any}, 0, -1};
    Regex whole{Regex::Kind::alt, {}, {}, 0, -1};
    do {
      const bool from_start = eat('^');
      Regex body = sequence();
      const bool to_end = eat('$');
      Regex branch;
      if (!from_start) branch.kids.push_back(anything);
      branch.kids.push_back(std::move(body));
      if (!to_end) branch.kids.push_back(anything);
      whole.kids.push_back(std::move(branch));
    } while (eat('|'));
    if (pos_ != end_) fail(cps_[pos_] == ')' ? "an unmatched ')'" : "'$' not at the end");
    return whole;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw grammar_error("json schema " + path_, "pattern: " + what + " at character " + std::to_string(pos_) +
                                                    " is outside the supported regex subset (docs/CONSTRAINED.md)");
  }
  static char32_t decode(std::string_view s, std::size_t& i) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    char32_t c = n == 1 ? b : b & (0x3F >> (n - 1));
    for (int k = 1; k < n && i + static_cast<std::size_t>(k) < s.size(); ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]) & 0x3F);
    i += static_cast<std::size_t>(n);
    return c;
  }
  bool more() const { return pos_ < end_; }
  bool branch_end() const {  // a '$' closing a top-level branch
    return groups_ == 0 && peek() == '$' && (pos_ + 1 == end_ || cps_[pos_ + 1] == '|');
  }
  char32_t peek() const { return cps_[pos_]; }
  bool eat(char32_t c) {
    if (more() && peek() == c) return ++pos_, true;
    return false;
  }

  Regex alternation() {
    Regex r{Regex::Kind::alt, {}, {sequence()}, 0, -1};
    while (eat('|')) r.kids.push_back(sequence());
    return r.kids.size() == 1 ? std::move(r.kids[0]) : r;
  }
  Regex sequence() {
    Regex r;
    while (more() && peek() != '|' && peek() != ')' && !branch_end()) {
      if (++depth_ > 64) fail("nesting deeper than 64");
      Regex a = atom();
      a = quantified(std::move(a));
      --depth_;
      r.kids.push_back(std::move(a));
    }
    return r;
  }
  Regex quantified(Regex a) {
    while (more()) {
      std::size_t min = 0;
      long long max = -1;
      const char32_t c = peek();
      if (c == '*') ++pos_;
      else if (c == '+') ++pos_, min = 1;
      else if (c == '?') ++pos_, max = 1;
      else if (c == '{') {
        ++pos_;
        min = number();
        max = static_cast<long long>(min);
        if (eat(',')) max = more() && peek() == '}' ? -1 : static_cast<long long>(number());
        if (!eat('}')) fail("a '{' that is no {n}, {n,} or {n,m} quantifier");
        if (max >= 0 && max < static_cast<long long>(min)) fail("a quantifier {n,m} with m < n");
      } else break;
      eat('?');  // lazy: the same strings match the whole string
      a = Regex{Regex::Kind::repeat, {}, {std::move(a)}, min, max};
    }
    return a;
  }
  std::size_t number() {
    std::size_t n = 0, digits = 0;
    while (more() && peek() >= '0' && peek() <= '9') n = std::min<std::size_t>(n * 10 + (peek() - '0'), 1u << 30), ++pos_, ++digits;
    if (digits == 0) fail("a '{' that is no {n}, {n,} or {n,m} quantifier");
    if (n > max_repeat_) fail("a count above the limit of " + std::to_string(max_repeat_));
    return n;
  }
  Regex chars(CodeRanges r) { return Regex{Regex::Kind::chars, std::move(r), {}, 0, -1}; }

  Regex atom() {
    const char32_t c = peek();
    ++pos_;
    switch (c) {
      case '(': {
        if (eat('?')) {
          if (eat(':')) {
          } else if (more() && peek() == '<' && pos_ + 1 < end_ && cps_[pos_ + 1] != '=' && cps_[pos_ + 1] != '!') {
            while (more() && peek() != '>') ++pos_;  // a named group is a plain group here
            if (!eat('>')) fail("an unterminated group name");
          } else {
            --pos_;
            fail("lookaround (?=, ?!, ?<=, ?<!)");
          }
        }
        ++groups_;
        Regex inner = alternation();
        --groups_;
        if (!eat(')')) fail("an unclosed '('");
        return inner;
      }
      case '[': return chars(char_class());
      case '.': return chars(complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
      case '\\': return chars(escape(false));
      case '^': --pos_, fail("'^' not at the start");
      case '$': --pos_, fail("'$' not at the end");
      case '*': case '+': case '?': case '{': --pos_, fail("a quantifier without an operand");
      default: return chars({{c, c}});
    }
  }

  CodeRanges char_class() {
    const bool negated = eat('^');
    CodeRanges out;
    while (more() && peek() != ']') {
      CodeRanges lo = class_atom();
      if (lo.size() == 1 && lo[0].first == lo[0].second && more() && peek() == '-' && pos_ + 1 < end_ && cps_[pos_ + 1] != ']') {
        ++pos_;
        CodeRanges hi = class_atom();
        if (hi.size() != 1 || hi[0].first != hi[0].second) fail("a class range ending in a class escape");
        if (hi[0].first < lo[0].first) fail("a class range out of order");
        out.push_back({lo[0].first, hi[0].first});
      } else out.insert(out.end(), lo.begin(), lo.end());
    }
    if (!eat(']')) fail("an unclosed '['");
    return negated ? complement(out) : out;
  }
  CodeRanges class_atom() {
    const char32_t c = peek();
    ++pos_;
    return c == '\\' ? escape(true) : CodeRanges{{c, c}};
  }

  CodeRanges escape(bool in_class) {
    if (!more()) fail("a trailing '\\'");
    const char32_t c = peek();
    ++pos_;
    const CodeRanges digit{{'0', '9'}}, word{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    const CodeRanges space{{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                           {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
    switch (c) {
      case 'd': return digit;
      case 'D': return complement(digit);
      case 'w': return word;
      case 'W': return complement(word);
      case 's': return space;
      case 'S': return complement(space);
      case 't': return {{'\t', '\t'}};
      case 'n': return {{'\n', '\n'}};
      case 'r': return {{'\r', '\r'}};
      case 'f': return {{'\f', '\f'}};
      case 'v': return {{'\v', '\v'}};
      case 'x': return {{hex(2), hex_last_}};
      case 'u': return {{hex(4), hex_last_}};
      case '0':
        if (more() && peek() >= '0' && peek() <= '9') break;
        return {{0, 0}};
      case 'b':
        if (in_class) return {{8, 8}};
        --pos_, fail("the word boundary \\b");
      default: break;
    }
    --pos_;
    if (c == 'B') fail("the word boundary \\B");
    if (c >= '1' && c <= '9') fail("a backreference");
    if (c == 'k') fail("a named backreference \\k");
    if (c == 'p' || c == 'P') fail("a Unicode property escape \\p{...}");
    if (c == 'c') fail("a control escape \\c");
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) fail("the escape \\" + std::string(1, static_cast<char>(c)));
    ++pos_;
    return {{c, c}};  // an escaped punctuation character stands for itself
  }
  char32_t hex(int n) {
    char32_t v = 0;
    for (int i = 0; i < n; ++i) {
      if (!more() || !std::isxdigit(static_cast<int>(peek() < 0x80 ? peek() : 0))) fail("a \\x or \\u escape without its hex digits");
      const char32_t d = peek();
      v = v * 16 + (d <= '9' ? d - '0' : (d | 0x20) - 'a' + 10);
      ++pos_;
    }
    if (v >= 0xD800 && v <= 0xDFFF) fail("a surrogate escape");
    hex_last_ = v;
    return v;
  }

  std::string path_;
  std::size_t max_repeat_;
  std::vector<char32_t> cps_;  // the pattern's code points
  std::size_t pos_ = 0, end_ = 0;
  int depth_ = 0;
  int groups_ = 0;  // open parentheses
  char32_t hex_last_ = 0;
};

// Thompson construction from `from` to `to`; counted repeats copy their operand, so the NFA
// size is capped (max_states) as the DFA's is.
inline void build_nfa(ByteNfa& nfa, const Regex& r, int from, int to, std::size_t max_states, const std::string& path) {
  if (nfa.edges.size() > 16 * max_states) throw automaton_error(path, "pattern", max_states);
  switch (r.kind) {
    case Regex::Kind::chars: add_json_chars(nfa, from, r.chars, to); return;
    case Regex::Kind::alt:
      for (const Regex& k : r.kids) build_nfa(nfa, k, from, to, max_states, path);
      return;
    case Regex::Kind::cat: {
      int at = from;
      for (std::size_t i = 0; i < r.kids.size(); ++i) {
        const int next = i + 1 == r.kids.size() ? to : nfa.add_state();
        build_nfa(nfa, r.kids[i], at, next, max_states, path);
        at = next;
      }
      if (r.kids.empty()) nfa.eps[static_cast<std::size_t>(from)].push_back(to);
      return;
    }
    case Regex::Kind::repeat: {
      int at = from;
      for (std::size_t i = 0; i < r.min; ++i) {
        const int next = nfa.add_state();
        build_nfa(nfa, r.kids[0], at, next, max_states, path);
        at = next;
      }
      if (r.max < 0) {  // a loop through a fresh state, so the operand's own ends stay apart
        const int loop = nfa.add_state(), back = nfa.add_state();
        nfa.eps[static_cast<std::size_t>(at)].push_back(loop);
        build_nfa(nfa, r.kids[0], loop, back, max_states, path);
        nfa.eps[static_cast<std::size_t>(back)].push_back(loop);
        nfa.eps[static_cast<std::size_t>(loop)].push_back(to);
        return;
      }
      nfa.eps[static_cast<std::size_t>(at)].push_back(to);
      for (long long i = static_cast<long long>(r.min); i < r.max; ++i) {
        const int next = nfa.add_state();
        build_nfa(nfa, r.kids[0], at, next, max_states, path);
        nfa.eps[static_cast<std::size_t>(next)].push_back(to);
        at = next;
      }
      return;
    }
  }
}

// The DFA of the string contents (between the quotes) that `regex` matches; `what` names the
// keyword in errors ("pattern", "format \"date\"").
inline ByteDfa regex_dfa(std::string_view regex, const std::string& path, const std::string& what, const GrammarLimits& limits) {
  const Regex r = RegexParser(regex, path, limits.max_repeat).parse();
  ByteNfa nfa;
  const int start = nfa.add_state(), accept = nfa.add_state();
  build_nfa(nfa, r, start, accept, limits.max_pattern_states, path);
  return determinize(nfa, start, accept, limits.max_pattern_states, path, what);
}

}  // namespace kylin::constrain::detail
