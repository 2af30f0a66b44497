// The hand-written splits equal their regexes (Qwen2's and Qwen3.5's), run by PCRE2 with UTF and
// UCP, over fixed edge cases, the reference texts and many random strings: drawn from code points
// of every relevant class, and from the whole code space.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <doctest/doctest.h>
#include <pcre2.h>

#include <random>
#include <string>
#include <vector>

#include "common/sanitizer.hpp"
#include "kylin/tokenizer/nfc.hpp"
#include "kylin/tokenizer/pretokenizer.hpp"
#include "tokenizer_test_util.hpp"

using kylin::SplitPattern;

namespace {

std::vector<std::string> split_kylin(std::string_view text, SplitPattern pattern = SplitPattern::qwen2) {
  std::vector<std::string> pieces;
  kylin::detail::Splitter(text, pattern).run([&](std::string_view p) { pieces.emplace_back(p); });
  return pieces;
}

class Pcre2Regex {
 public:
  explicit Pcre2Regex(std::string_view pattern) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                          &error, &offset, nullptr);
    REQUIRE(code_ != nullptr);
    data_ = pcre2_match_data_create_from_pattern(code_, nullptr);
  }
  Pcre2Regex(const Pcre2Regex&) = delete;
  Pcre2Regex& operator=(const Pcre2Regex&) = delete;
  ~Pcre2Regex() {
    pcre2_match_data_free(data_);
    pcre2_code_free(code_);
  }
  // The first match at or after `pos` as [begin, end), or false.
  bool find(std::string_view text, std::size_t pos, std::size_t& begin, std::size_t& end) const {
    if (pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), pos, 0, data_, nullptr) < 0)
      return false;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data_);
    begin = ov[0];
    end = ov[1];
    return true;
  }

 private:
  pcre2_code* code_ = nullptr;
  pcre2_match_data* data_ = nullptr;
};

// A Split(pattern, Isolated) run by PCRE2: all matches, and the unmatched gaps between them.
class Pcre2Split {
 public:
  explicit Pcre2Split(SplitPattern pattern = SplitPattern::qwen2) : regex_(kylin::detail::split_pattern_regex(pattern)) {}
  std::vector<std::string> operator()(std::string_view text) const {
    std::vector<std::string> pieces;
    std::size_t pos = 0, last = 0, begin = 0, end = 0;
    while (pos < text.size() && regex_.find(text, pos, begin, end)) {
      if (begin > last) pieces.emplace_back(text.substr(last, begin - last));
      REQUIRE(end > begin);  // the patterns never match empty
      pieces.emplace_back(text.substr(begin, end - begin));
      pos = last = end;
    }
    if (last < text.size()) pieces.emplace_back(text.substr(last));
    return pieces;
  }

 private:
  Pcre2Regex regex_;
};

std::string utf8(char32_t cp) {
  std::string s;
  kylin::detail::append_utf8(s, cp);
  return s;
}

// Code points from every class the patterns distinguish, and the corner cases between them.
const std::vector<char32_t> alphabet = {
    'a', 'Z', 's', 'S', 't', 'T', 'r', 'R', 'e', 'E', 'v', 'V', 'm', 'M', 'l', 'L', 'd', 'D', 'x',  // contractions
    '\'', '0', '7', ' ', ' ', ' ', '\t', '\r', '\n', '\n', '\v', '\f', '!', '.', ',', '-', '_', '"', '(', '$',
    0x17F,    // long s: case-folds to 's'
    0x212A,   // Kelvin sign (a letter)
    0x85,     // NEL: White_Space
    0xA0,     // no-break space
    0x1680, 0x2003, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000,  // other White_Space
    // Not White_Space in Unicode 14 (format characters). U+180E is left out: PCRE2 still counts
    // it in \s (its \h list predates Unicode 6.3), Oniguruma and HF do not; see the test below.
    0x200B, 0xFEFF,
    0x200D, 0x200C,          // ZWJ, ZWNJ
    0x301, 0x308, 0x93F, 0x94D,  // combining marks (Mn, Mc: neither L nor N)
    0xE9, 0xDF, 0x3B1, 0x416, 0x5D0, 0x627, 0x915, 0x4E2D, 0x3042, 0xAC00, 0x1100,  // letters, many scripts
    0x2167, 0xBD, 0xB2, 0x2460, 0x661, 0x966, 0xFF11,  // Nl, No, Nd of other scripts
    0x1F600, 0x1F44D, 0x1F3FD, 0x2728, 0xFF01, 0x3002, 0xBF, 0x2019,  // symbols and punctuation
    0x10FFFF, 0xE000,  // unassigned / private use
};

// More marks, for the pattern in which they join words: nonspacing (Mn), spacing (Mc) and
// enclosing (Me), in several scripts, and the letters they follow.
const std::vector<char32_t> mark_alphabet = [] {
  std::vector<char32_t> a = alphabet;
  for (char32_t cp : {0x300, 0x327, 0x36F, 0x483, 0x488, 0x5B8, 0x5C1, 0x64E, 0x651, 0x670, 0x93E, 0x94D, 0x981,
                      0xE31, 0xE49, 0xEB4, 0xF71, 0x1AB0, 0x1DC0, 0x20D0, 0x20DD, 0x20E3, 0x302A, 0x3099, 0xFE0F,
                      0xFE20, 0x1D165, 0xE0100})
    a.push_back(cp);
  for (char32_t cp : {0xE19, 0xE33, 0x5E9, 0x645, 0x928, 0x2764, 0x31, 0x23}) a.push_back(cp);
  return a;
}();

std::string random_text(std::mt19937& rng, const std::vector<char32_t>& from, std::size_t max_length) {
  std::uniform_int_distribution<std::size_t> pick(0, from.size() - 1), length(1, max_length);
  std::string text;
  for (std::size_t k = length(rng); k > 0; --k) text += utf8(from[pick(rng)]);
  return text;
}

// Runs of the split on `texts` that differ from PCRE2, the first few reported.
int pcre2_mismatches(SplitPattern pattern, const std::vector<std::string>& texts) {
  const Pcre2Split pcre2(pattern);
  int mismatches = 0;
  for (const auto& text : texts) {
    const auto expected = pcre2(text);
    const auto got = split_kylin(text, pattern);
    if (got != expected && ++mismatches <= 5) {
      CAPTURE(text);
      CHECK(got == expected);
    }
  }
  return mismatches;
}

}  // namespace

TEST_CASE("the Qwen2 split equals PCRE2 on hand-picked edge cases") {
  const Pcre2Split pcre2;
  const std::vector<std::string> cases = {
      "", "a", " ", "  ", "   x", "x   ", "x   y", "\n", "\r\n\r\n", "a\r\n  b", "  \n  ", " \t\n x",
      "I'm", "DON'T", "we'RE", "'ll'", "'", "''s", "'x", "'ſ", "'Ve", "it's'", "123", "1,000.5",
      "!!!\n\nx", " !a", " !!", "a!!", "\t!x", "\xc2\xa0x", "x\xc2\xa0", "\xe3\x80\x80\xe3\x80\x80x",
      "caf\x65\xcc\x81", "\xcc\x81x", "x \xcc\x81", "\xe2\x80\x8d\xf0\x9f\x91\xa8", "Ⅻ½²", "  ?\r\n",
  };
  for (const auto& text : cases) {
    CAPTURE(text);
    CHECK(split_kylin(text) == pcre2(text));
  }
}

TEST_CASE("the Qwen3.5 split equals PCRE2 on hand-picked cases around combining marks") {
  const Pcre2Split pcre2(SplitPattern::qwen35);
  const std::vector<std::string> cases = {
      "e\u0301", "\u0301", "\u0301\u0301a", " \u0301", "  \u0301", "\t\u0301", "\n\u0301", "\r\n\u0301x",
      "\u00a0\u0301", "\u3000\u0301b", "a\u0301!", "!\u0301", "!!\u0301a", "!\u0301\u0301!", " !\u0301",
      "1\u0301", "\u03011", "\u0301 1", "'s\u0301", "'\u0301", "'\u0301s", "x'\u0301ll", "\u20dd", "a\u20dd\u20dd",
      "\u0301\n", " \u0301\n\n", "\u0301 ", "\u0301  x", "\u2764\ufe0f", "1\ufe0f\u20e3", "#\ufe0f\u20e3!",
      "x\u200d\u0301", "_\u0301", "नमस्ते दुनिया", "น้ำ", "ไม่เป็นไร", "مُحَمَّدٌ", "שָׁלוֹם", "молоко́",
      "Ⅻ\u0301", "½\u0301", "\U0001f44d\U0001f3fd", "ſ\u0301", "\U000e0100",
  };
  for (const auto& text : cases) {
    CAPTURE(text);
    CHECK(split_kylin(text, SplitPattern::qwen35) == pcre2(text));
  }
}

TEST_CASE("both splits equal PCRE2 on the NFC form of every Qwen3 and Qwen3.5 reference text") {
  std::vector<std::string> texts;
  for (const char* file : {"/reference/qwen35-synthetic-tokenizer.jsonl", "/reference/qwen3-tokenizer.jsonl",
                           "/reference/qwen3-tokenizer-extra.jsonl"})
    for (const auto& c : kylin::test::read_cases(std::string(KYLIN_TEST_DATA) + file)) texts.push_back(kylin::nfc(c.text));
  REQUIRE(texts.size() >= 270);
  CHECK(pcre2_mismatches(SplitPattern::qwen2, texts) == 0);
  CHECK(pcre2_mismatches(SplitPattern::qwen35, texts) == 0);
}

TEST_CASE("the Qwen2 split equals PCRE2 on 20,000 random strings over all character classes") {
  std::mt19937 rng(12345);
  std::vector<std::string> texts;
  for (int n = 0; n < 20000; ++n) texts.push_back(random_text(rng, alphabet, 24));
  CHECK(pcre2_mismatches(SplitPattern::qwen2, texts) == 0);
}

TEST_CASE("the Qwen3.5 split equals PCRE2 on 20,000 random strings rich in combining marks") {
  std::mt19937 rng(54321);
  std::vector<std::string> texts;
  for (int n = 0; n < 20000; ++n) texts.push_back(random_text(rng, mark_alphabet, 24));
  CHECK(pcre2_mismatches(SplitPattern::qwen35, texts) == 0);
  CHECK(pcre2_mismatches(SplitPattern::qwen2, texts) == 0);
}

// PCRE2 10.42 knows Unicode 15.0, the tables (like HF's Oniguruma 6.9.8) 14.0: a code point
// whose classes differ between the two (one new in 15.0, or U+180E in PCRE2's \s) is redrawn.
TEST_CASE("both splits equal PCRE2 on random strings drawn from the whole code space") {
  const Pcre2Regex letter(R"(\A\p{L})"), mark(R"(\A\p{M})"), number(R"(\A\p{N})"), space(R"(\A\s)");
  namespace t = kylin::detail::unicode_tables;
  auto same_classes = [&](char32_t cp) {
    const std::string s = utf8(cp);
    std::size_t b = 0, e = 0;
    const std::uint8_t pcre2 = (letter.find(s, 0, b, e) ? t::letter : 0) | (mark.find(s, 0, b, e) ? t::mark : 0) |
                               (number.find(s, 0, b, e) ? t::number : 0) | (space.find(s, 0, b, e) ? t::space : 0);
    return pcre2 == (kylin::detail::code_point_flags(cp) & (t::letter | t::mark | t::number | t::space));
  };
  std::mt19937 rng(2718);
  std::uniform_int_distribution<std::uint32_t> source(0, 9), any(0, 0x10FFFF - 0x800), bmp(0x80, 0xFFFF - 0x800);
  std::uniform_int_distribution<std::size_t> pick(0, mark_alphabet.size() - 1), length(1, 16);
  auto draw = [&]() -> char32_t {
    const std::uint32_t s = source(rng);
    if (s < 4) return mark_alphabet[pick(rng)];
    const std::uint32_t cp = s < 7 ? bmp(rng) : any(rng);
    return cp >= 0xD800 ? cp + 0x800 : cp;  // no surrogates
  };
  int drawn = 0, redrawn = 0;
  std::vector<std::string> texts;
  for (int n = 0; n < kylin::test::repetitions(20000, 2000); ++n) {
    std::string text;
    for (std::size_t k = length(rng); k > 0; --k) {
      char32_t cp = draw();
      for (++drawn; !same_classes(cp); ++drawn, ++redrawn) cp = draw();
      text += utf8(cp);
    }
    texts.push_back(std::move(text));
  }
  CHECK(redrawn * 200 < drawn);  // the versions differ in well under 0.5 % of the draws
  CHECK(pcre2_mismatches(SplitPattern::qwen35, texts) == 0);
  CHECK(pcre2_mismatches(SplitPattern::qwen2, texts) == 0);
}

TEST_CASE("without combining marks in the text the two splits are the same") {
  std::mt19937 rng(99);
  for (int n = 0; n < 5000; ++n) {
    const std::string text = random_text(rng, alphabet, 24);
    bool marks = false;
    for (std::size_t i = 0, len = 0; i < text.size(); i += len)
      marks |= (kylin::detail::code_point_flags(kylin::detail::decode_utf8(text, i, len)) &
                kylin::detail::unicode_tables::mark) != 0;
    if (marks) continue;
    CAPTURE(text);
    CHECK(split_kylin(text, SplitPattern::qwen35) == split_kylin(text, SplitPattern::qwen2));
  }
}

TEST_CASE("the pieces of both splits tile the text") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::size_t> pick(0, mark_alphabet.size() - 1);
  std::string text;
  for (int k = 0; k < 5000; ++k) text += utf8(mark_alphabet[pick(rng)]);
  for (SplitPattern pattern : {SplitPattern::qwen2, SplitPattern::qwen35}) {
    std::string joined;
    for (const auto& p : split_kylin(text, pattern)) {
      CHECK(!p.empty());
      joined += p;
    }
    CHECK(joined == text);
  }
}

TEST_CASE("a Split regex selects its pattern byte for byte; any other regex selects none") {
  using kylin::detail::split_pattern_of;
  CHECK(split_pattern_of(kylin::detail::qwen2_split_pattern) == SplitPattern::qwen2);
  CHECK(split_pattern_of(kylin::detail::qwen35_split_pattern) == SplitPattern::qwen35);
  std::string near(kylin::detail::qwen35_split_pattern);
  near.erase(near.find(R"(\p{M})"), 5);  // no \p{M} in the word class, still in the punctuation run
  CHECK(!split_pattern_of(near).has_value());
  CHECK(!split_pattern_of("").has_value());
  CHECK(!split_pattern_of(std::string(kylin::detail::qwen2_split_pattern) + " ").has_value());
}

TEST_CASE("U+180E MONGOLIAN VOWEL SEPARATOR is not whitespace (Unicode >= 6.3, as in Oniguruma)") {
  // As "other" it joins the punctuation run; as whitespace it would stand alone.
  for (SplitPattern pattern : {SplitPattern::qwen2, SplitPattern::qwen35}) {
    CHECK(split_kylin("!\xe1\xa0\x8e!", pattern) == std::vector<std::string>{"!\xe1\xa0\x8e!"});
    CHECK(split_kylin("a\xe1\xa0\x8e b", pattern) == std::vector<std::string>{"a", "\xe1\xa0\x8e", " b"});
  }
}
