// GBNF (llama.cpp's grammar format) -> Grammar. Rules `name ::= body`; a body runs until the
// next `name ::=`; "literals", [classes] and [^negated] over code points, `.`, (groups), rule
// names, postfix * + ? {m} {m,} {m,n}; # comments. The start rule is `root`.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/constrain/grammar.hpp"
#include "kylin/core/utf8.hpp"

namespace kylin::constrain {

namespace detail {

class GbnfParser {
 public:
  GbnfParser(std::string_view src, GrammarLimits limits) : src_(src), b_(limits) {}

  Grammar parse() {
    skip_space();
    while (i_ < src_.size()) {
      const std::string name = identifier();
      skip_space();
      if (!src_.substr(i_).starts_with("::=")) fail("expected ::= after rule name \"" + name + "\"");
      i_ += 3;
      const int r = rule(name);
      if (defined_.count(name)) fail("rule \"" + name + "\" is defined twice");
      defined_[name] = true;
      alternatives(r, 0);
      skip_space();
    }
    auto root = rules_.find("root");
    if (root == rules_.end() || !defined_.count("root")) throw grammar_error("gbnf", "no rule named root");
    for (const auto& [name, r] : rules_)
      if (!defined_.count(name)) throw grammar_error("gbnf rule " + name, "referenced but never defined");
    return b_.finish(root->second);
  }

 private:
  [[noreturn]] void fail(const std::string& message) const {
    std::size_t line = 1;
    for (std::size_t k = 0; k < i_ && k < src_.size(); ++k) line += src_[k] == '\n';
    throw grammar_error("gbnf line " + std::to_string(line), message);
  }

  void skip_space() {
    while (i_ < src_.size()) {
      if (src_[i_] == '#')
        while (i_ < src_.size() && src_[i_] != '\n') ++i_;
      else if (src_[i_] == ' ' || src_[i_] == '\t' || src_[i_] == '\n' || src_[i_] == '\r')
        ++i_;
      else
        break;
    }
  }
  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }
  std::string identifier() {
    const std::size_t start = i_;
    while (i_ < src_.size() && name_char(src_[i_])) ++i_;
    if (i_ == start) fail("expected a rule name");
    return std::string(src_.substr(start, i_ - start));
  }
  // At `name ::=`: the next rule starts, so the current body ends.
  bool at_definition() const {
    std::size_t k = i_;
    while (k < src_.size() && name_char(src_[k])) ++k;
    if (k == i_) return false;
    while (k < src_.size() && (src_[k] == ' ' || src_[k] == '\t' || src_[k] == '\n' || src_[k] == '\r')) ++k;
    return src_.substr(k).starts_with("::=");
  }

  int rule(const std::string& name) {
    auto it = rules_.find(name);
    if (it != rules_.end()) return it->second;
    const int r = b_.new_rule(name);
    rules_[name] = r;
    return r;
  }

  void alternatives(int r, int depth) {
    if (depth > b_.limits().max_depth) fail("groups nested deeper than " + std::to_string(b_.limits().max_depth));
    while (true) {
      b_.add_alt(r, sequence(depth));
      skip_space();
      if (i_ < src_.size() && src_[i_] == '|') {
        ++i_;
        continue;
      }
      return;
    }
  }

  std::vector<Element> sequence(int depth) {
    std::vector<Element> seq;
    while (true) {
      skip_space();
      if (i_ >= src_.size() || src_[i_] == '|' || src_[i_] == ')' || at_definition()) return seq;
      std::vector<Element> item = atom(depth);
      postfix(item);
      seq.insert(seq.end(), item.begin(), item.end());
    }
  }

  std::vector<Element> atom(int depth) {
    const char c = src_[i_];
    if (c == '"') {
      ++i_;
      std::string bytes;
      while (i_ < src_.size() && src_[i_] != '"') kylin::detail::append_utf8(bytes, character());
      if (i_ >= src_.size()) fail("unterminated string literal");
      ++i_;
      return literal(bytes);
    }
    if (c == '[') return char_class(b_, "class@" + std::to_string(i_), class_ranges());
    if (c == '.') {
      ++i_;
      return char_class(b_, "any-char", {{0, 0x10FFFF}});
    }
    if (c == '(') {
      ++i_;
      const int r = b_.new_rule("group@" + std::to_string(i_));
      alternatives(r, depth + 1);
      if (i_ >= src_.size() || src_[i_] != ')') fail("expected )");
      ++i_;
      return {Element::ref(r)};
    }
    if (name_char(c)) return {Element::ref(rule(identifier()))};
    fail(std::string("unexpected character '") + c + "'");
  }

  void postfix(std::vector<Element>& item) {
    if (i_ >= src_.size()) return;
    std::size_t min = 0;
    long long max = -1;
    const char c = src_[i_];
    if (c == '*') ++i_;
    else if (c == '+') ++i_, min = 1;
    else if (c == '?') ++i_, max = 1;
    else if (c == '{') {
      ++i_;
      min = number();
      max = static_cast<long long>(min);
      if (i_ < src_.size() && src_[i_] == ',') {
        ++i_;
        max = i_ < src_.size() && src_[i_] == '}' ? -1 : static_cast<long long>(number());
      }
      if (i_ >= src_.size() || src_[i_] != '}') fail("expected } closing a repetition");
      ++i_;
    } else {
      return;
    }
    item = {Element::ref(b_.repeat("repeat@" + std::to_string(i_), item, {}, min, max))};
  }

  // A repetition count, at most max_repeat (refused here, naming the line, however many digits).
  std::size_t number() {
    const std::size_t start = i_;
    while (i_ < src_.size() && src_[i_] >= '0' && src_[i_] <= '9') ++i_;
    const std::string_view digits = src_.substr(start, i_ - start);
    if (digits.empty()) fail("expected a repetition count");
    std::size_t n = 0;
    for (char d : digits) n = std::min<std::size_t>(n * 10 + static_cast<std::size_t>(d - '0'), b_.limits().max_repeat + 1);
    if (n > b_.limits().max_repeat)
      fail("repetition count " + std::string(digits.substr(0, 24)) + (digits.size() > 24 ? "..." : "") + " is above the limit of " +
           std::to_string(b_.limits().max_repeat));
    return n;
  }

  std::vector<std::pair<char32_t, char32_t>> class_ranges() {
    ++i_;  // [
    const bool negated = i_ < src_.size() && src_[i_] == '^';
    if (negated) ++i_;
    std::vector<std::pair<char32_t, char32_t>> ranges;
    while (i_ < src_.size() && src_[i_] != ']') {
      const char32_t lo = character();
      char32_t hi = lo;
      if (i_ + 1 < src_.size() && src_[i_] == '-' && src_[i_ + 1] != ']') {
        ++i_;
        hi = character();
      }
      if (hi < lo) fail("character range out of order");
      ranges.push_back({lo, hi});
    }
    if (i_ >= src_.size()) fail("unterminated character class");
    ++i_;
    return negated ? complement(ranges) : ranges;
  }

  // One code point of a literal or class: an escape or a UTF-8 sequence.
  char32_t character() {
    if (src_[i_] == '\\') {
      if (++i_ >= src_.size()) fail("escape at end of input");
      const char e = src_[i_++];
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/': return static_cast<char32_t>(e);
        default: fail(std::string("unknown escape \\") + e);
      }
    }
    const auto lead = static_cast<unsigned char>(src_[i_]);
    const int len = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 0;
    if (len == 0 || i_ + static_cast<std::size_t>(len) > src_.size()) fail("invalid UTF-8 in grammar");
    char32_t cp = len == 1 ? lead : lead & (0x3F >> (len - 1));
    for (int k = 1; k < len; ++k) {
      const auto cont = static_cast<unsigned char>(src_[i_ + static_cast<std::size_t>(k)]);
      if ((cont & 0xC0) != 0x80) fail("invalid UTF-8 in grammar");
      cp = (cp << 6) | (cont & 0x3F);
    }
    i_ += static_cast<std::size_t>(len);
    return cp;
  }
  char32_t hex(int n) {
    char32_t v = 0;
    for (int k = 0; k < n; ++k, ++i_) {
      if (i_ >= src_.size()) fail("truncated hex escape");
      const char c = src_[i_];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) fail("bad hex digit in escape");
      v = v * 16 + static_cast<char32_t>(d);
    }
    if (v > 0x10FFFF) fail("code point above U+10FFFF");
    return v;
  }

  std::string_view src_;
  std::size_t i_ = 0;
  GrammarBuilder b_;
  std::map<std::string, int> rules_;     // name -> rule, defined or only referenced so far
  std::map<std::string, bool> defined_;  // names with a definition
};

}  // namespace detail

// kylin::Error (request) naming the line for a syntax error, or the rule for an undefined,
// left-recursive or oversized one.
inline Grammar parse_gbnf(std::string_view text, GrammarLimits limits = {}) {
  return detail::GbnfParser(text, limits).parse();
}

}  // namespace kylin::constrain
