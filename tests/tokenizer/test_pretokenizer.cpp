// The hand-written Qwen2 split equals the regex itself, run by PCRE2 with UTF and UCP, over
// fixed edge cases and many random strings drawn from code points of every relevant class.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <doctest/doctest.h>
#include <pcre2.h>

#include <random>
#include <string>
#include <vector>

#include "kylin/tokenizer/pretokenizer.hpp"

namespace {

std::vector<std::string> split_kylin(std::string_view text) {
  std::vector<std::string> pieces;
  kylin::detail::Qwen2Splitter(text).run([&](std::string_view p) { pieces.emplace_back(p); });
  return pieces;
}

class Pcre2Split {
 public:
  Pcre2Split() {
    int error = 0;
    PCRE2_SIZE offset = 0;
    const auto pattern = kylin::detail::qwen2_split_pattern;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                          &error, &offset, nullptr);
    REQUIRE(code_ != nullptr);
    data_ = pcre2_match_data_create_from_pattern(code_, nullptr);
  }
  ~Pcre2Split() {
    pcre2_match_data_free(data_);
    pcre2_code_free(code_);
  }
  // All matches, and the unmatched gaps between them (Isolated split keeps both).
  std::vector<std::string> operator()(std::string_view text) const {
    std::vector<std::string> pieces;
    std::size_t pos = 0, last = 0;
    while (pos < text.size()) {
      int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), pos, 0, data_, nullptr);
      if (rc < 0) break;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data_);
      if (ov[0] > last) pieces.emplace_back(text.substr(last, ov[0] - last));
      REQUIRE(ov[1] > ov[0]);  // the pattern never matches empty
      pieces.emplace_back(text.substr(ov[0], ov[1] - ov[0]));
      pos = last = ov[1];
    }
    if (last < text.size()) pieces.emplace_back(text.substr(last));
    return pieces;
  }

 private:
  pcre2_code* code_ = nullptr;
  pcre2_match_data* data_ = nullptr;
};

std::string utf8(char32_t cp) {
  std::string s;
  kylin::detail::append_utf8(s, cp);
  return s;
}

// Code points from every class the pattern distinguishes, and the corner cases between them.
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

TEST_CASE("the Qwen2 split equals PCRE2 on 20,000 random strings over all character classes") {
  const Pcre2Split pcre2;
  std::mt19937 rng(12345);
  std::uniform_int_distribution<std::size_t> pick(0, alphabet.size() - 1), length(1, 24);
  int mismatches = 0;
  for (int n = 0; n < 20000; ++n) {
    std::string text;
    for (std::size_t k = length(rng); k > 0; --k) text += utf8(alphabet[pick(rng)]);
    const auto expected = pcre2(text);
    const auto got = split_kylin(text);
    if (got != expected && ++mismatches <= 5) {
      CAPTURE(text);
      CHECK(got == expected);
    }
  }
  CHECK(mismatches == 0);
}

TEST_CASE("the pieces of the Qwen2 split tile the text") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::size_t> pick(0, alphabet.size() - 1);
  std::string text;
  for (int k = 0; k < 5000; ++k) text += utf8(alphabet[pick(rng)]);
  std::string joined;
  for (const auto& p : split_kylin(text)) {
    CHECK(!p.empty());
    joined += p;
  }
  CHECK(joined == text);
}

TEST_CASE("U+180E MONGOLIAN VOWEL SEPARATOR is not whitespace (Unicode >= 6.3, as in Oniguruma)") {
  // As "other" it joins the punctuation run; as whitespace it would stand alone.
  CHECK(split_kylin("!\xe1\xa0\x8e!") == std::vector<std::string>{"!\xe1\xa0\x8e!"});
  CHECK(split_kylin("a\xe1\xa0\x8e b") == std::vector<std::string>{"a", "\xe1\xa0\x8e", " b"});
}
