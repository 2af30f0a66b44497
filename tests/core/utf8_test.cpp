// append_utf8: the shared encoder writes the shortest UTF-8 form at every length boundary, and
// the tokenizer's strict decoder reads each of its outputs back as the same code point.
#include <doctest/doctest.h>

#include <string>

#include "kylin/core/utf8.hpp"
#include "kylin/tokenizer/unicode.hpp"

TEST_CASE("append_utf8 writes 1-4 bytes exactly at the encoding boundaries") {
  struct Case {
    char32_t cp;
    std::string bytes;
  };
  const Case cases[] = {{U'\0', std::string(1, '\0')}, {0x7F, "\x7F"},          {0x80, "\xC2\x80"},
                        {0x7FF, "\xDF\xBF"},           {0x800, "\xE0\xA0\x80"},  {0xFFFF, "\xEF\xBF\xBF"},
                        {0x10000, "\xF0\x90\x80\x80"}, {0x10FFFF, "\xF4\x8F\xBF\xBF"}, {0x4E2D, "\xE4\xB8\xAD"}};
  for (const auto& c : cases) {
    CAPTURE(static_cast<unsigned>(c.cp));
    std::string out = "x";
    kylin::detail::append_utf8(out, c.cp);
    CHECK(out == "x" + c.bytes);
  }
}

TEST_CASE("every scalar value written by append_utf8 is valid UTF-8 that decodes back to itself") {
  for (char32_t cp = 0; cp <= 0x10FFFF; cp += (cp < 0x3000 ? 1 : 97)) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;  // surrogates are not scalar values
    std::string s;
    kylin::detail::append_utf8(s, cp);
    REQUIRE(kylin::detail::find_invalid_utf8(s) == std::string::npos);
    std::size_t len = 0;
    CHECK(kylin::detail::decode_utf8(s, 0, len) == cp);
    CHECK(len == s.size());
  }
}
