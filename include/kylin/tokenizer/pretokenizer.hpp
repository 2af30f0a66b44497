// The pre-tokenizer splits of Qwen's tokenizer.json, hand-written over code points: exactly the
// Qwen2/Qwen3 regex or the Qwen3.5 one (below), with leftmost-first alternation and backtracking
// resolved by hand (tested against PCRE2). One splitter serves both: they differ only in \p{M}.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "kylin/tokenizer/unicode.hpp"

namespace kylin {

// The Split regex of a tokenizer.json; any other regex is refused at load.
enum class SplitPattern {
  qwen2,   // Qwen2, Qwen2.5, Qwen3: a combining mark ends a word
  qwen35,  // Qwen3.5, Qwen3.6: combining marks stay with their letters
};

}  // namespace kylin

namespace kylin::detail {

inline constexpr std::string_view qwen2_split_pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// huggingface/transformers src/transformers/models/qwen3_5/tokenization_qwen3_5.py (Qwen3_5Tokenizer,
// PRETOKENIZE_REGEX); Qwen3.5's tokenizer.json carries the same. llama.cpp's pre-tokenizer "qwen35".
inline constexpr std::string_view qwen35_split_pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The pattern a tokenizer.json's Split regex spells (byte for byte), or nullopt.
inline std::optional<SplitPattern> split_pattern_of(std::string_view regex) {
  if (regex == qwen2_split_pattern) return SplitPattern::qwen2;
  if (regex == qwen35_split_pattern) return SplitPattern::qwen35;
  return std::nullopt;
}

inline std::string_view split_pattern_regex(SplitPattern pattern) {
  return pattern == SplitPattern::qwen35 ? qwen35_split_pattern : qwen2_split_pattern;
}

// The two patterns differ only in their word class, `word_`: \p{L} in Qwen2's, [\p{L}\p{M}] in
// Qwen3.5's, whose punctuation run [^\s\p{L}\p{M}\p{N}] leaves the marks out in turn. The optional
// prefix [^\r\n\p{L}\p{N}] is the same in both; in Qwen3.5's a mark there is also a word
// character, so a word that starts with a mark ends at the same place whether the mark is taken
// as the prefix or not.
class Splitter {
 public:
  Splitter(std::string_view text, SplitPattern pattern)
      : s_(text), word_(pattern == SplitPattern::qwen35 ? letter_or_mark : letter) {}

  // Calls emit(std::string_view piece) for each match, in order; the pieces tile the text.
  template <class Emit>
  void run(Emit&& emit) const {
    std::size_t pos = 0;
    while (pos < s_.size()) {
      const std::size_t end = match_at(pos);
      emit(s_.substr(pos, end - pos));
      pos = end;
    }
  }

 private:
  struct Cp {
    char32_t cp;
    std::uint8_t flags;
    std::size_t len;  // 0 at the end of the text
  };
  static constexpr std::uint8_t letter = unicode_tables::letter, mark = unicode_tables::mark,
                                number = unicode_tables::number, space = unicode_tables::space,
                                letter_or_mark = letter | mark;

  Cp at(std::size_t i) const {
    if (i >= s_.size()) return {0, 0, 0};
    const auto b = static_cast<unsigned char>(s_[i]);
    if (b < 0x80) return {b, ascii_flags(b), 1};
    std::size_t len = 0;
    const char32_t cp = decode_utf8(s_, i, len);
    return {cp, code_point_flags(cp), len};
  }
  static std::uint8_t ascii_flags(unsigned char b) {
    if ((b | 0x20) >= 'a' && (b | 0x20) <= 'z') return letter | unicode_tables::word;
    if (b >= '0' && b <= '9') return number | unicode_tables::word;
    if (b == ' ' || (b >= 0x09 && b <= 0x0D)) return space;
    return b == '_' ? unicode_tables::word : 0;
  }
  // [^\s\p{L}\p{N}] or [^\s\p{L}\p{M}\p{N}]
  bool is_other(const Cp& c) const { return c.len != 0 && (c.flags & (word_ | number | space)) == 0; }
  static bool is_newline(char32_t cp) { return cp == '\r' || cp == '\n'; }
  // Case-insensitive ASCII letter test; U+017F (long s) case-folds to 's' as in Oniguruma/PCRE2.
  static bool is_ci(char32_t cp, char lower) {
    return cp == static_cast<char32_t>(lower) || cp == static_cast<char32_t>(lower - 32) ||
           (lower == 's' && cp == 0x17F);
  }

  std::size_t skip_while(std::size_t i, std::uint8_t flag) const {
    for (Cp c = at(i); c.len != 0 && (c.flags & flag); c = at(i)) i += c.len;
    return i;
  }

  // Alternative 1: the contraction at pos, or 0.
  std::size_t contraction(std::size_t pos) const {
    const Cp c1 = at(pos + 1);
    if (c1.len == 0) return 0;
    const std::size_t p2 = pos + 1 + c1.len;
    if (is_ci(c1.cp, 's') || is_ci(c1.cp, 't') || is_ci(c1.cp, 'm') || is_ci(c1.cp, 'd')) return p2;
    const Cp c2 = at(p2);
    if (c2.len == 0) return 0;
    if ((is_ci(c1.cp, 'r') || is_ci(c1.cp, 'v')) && is_ci(c2.cp, 'e')) return p2 + c2.len;
    if (is_ci(c1.cp, 'l') && is_ci(c2.cp, 'l')) return p2 + c2.len;
    return 0;
  }

  // End of the match that starts at pos.
  std::size_t match_at(std::size_t pos) const {
    const Cp c0 = at(pos);
    if (c0.cp == '\'')
      if (std::size_t end = contraction(pos)) return end;
    if (c0.flags & word_) return skip_while(pos, word_);
    const Cp c1 = at(pos + c0.len);
    if (!is_newline(c0.cp) && !(c0.flags & number) && (c1.flags & word_) && c1.len != 0)
      return skip_while(pos + c0.len, word_);
    if (c0.flags & number) return pos + c0.len;
    // ` ?[^\s\p{L}\p{N}]+[\r\n]*` (Qwen3.5: `[^\s\p{L}\p{M}\p{N}]`)
    std::size_t q = pos;
    if (c0.cp == ' ' && is_other(c1)) q = pos + 1;
    if (is_other(at(q))) {
      Cp c = at(q);
      while (is_other(c)) c = at(q += c.len);
      while (c.len != 0 && is_newline(c.cp)) c = at(q += c.len);
      return q;
    }
    // c0 is whitespace: `\s*[\r\n]+`, then `\s+(?!\S)`, then `\s+`.
    std::size_t end = pos, last_newline_end = 0, last_start = pos;
    for (Cp c = c0; c.len != 0 && (c.flags & space); c = at(end)) {
      last_start = end;
      end += c.len;
      if (is_newline(c.cp)) last_newline_end = end;
    }
    if (last_newline_end != 0) return last_newline_end;
    if (end == s_.size() || last_start == pos) return end;
    return last_start;
  }

  std::string_view s_;
  std::uint8_t word_;  // unicode_tables flags of a word character
};

}  // namespace kylin::detail
