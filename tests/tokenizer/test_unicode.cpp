// NFC equals python3's unicodedata (Unicode 14.0) on every decomposable code point and on
// random mark sequences; UTF-8 validation and lossy repair follow the Unicode standard.
#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include "kylin/core/json.hpp"
#include "kylin/tokenizer/nfc.hpp"

TEST_CASE("NFC equals unicodedata.normalize('NFC') on every case of qwen3-tokenizer-nfc.jsonl") {
  std::ifstream in(std::string(KYLIN_TEST_DATA) + "/reference/qwen3-tokenizer-nfc.jsonl", std::ios::binary);
  REQUIRE(in);
  std::string line;
  int cases = 0, failures = 0;
  while (std::getline(in, line)) {
    const auto v = kylin::json::parse(line);
    const std::string& text = v.find("text")->as_string();
    const std::string& expected = v.find("nfc")->as_string();
    ++cases;
    if (kylin::nfc(text) != expected && ++failures <= 10) {
      CAPTURE(text);
      CHECK(kylin::nfc(text) == expected);
    }
    // The quick check may only say "already NFC" when it is.
    if (kylin::detail::is_nfc_quick(text)) CHECK(text == expected);
  }
  CHECK(cases > 6000);
  CHECK(failures == 0);
}

TEST_CASE("the generated Unicode tables are Unicode 14.0 (the version of Oniguruma 6.9.8 in HF tokenizers)") {
  CHECK(std::string(kylin::detail::unicode_tables::unicode_version) == "14.0.0");
}

TEST_CASE("UTF-8 validation rejects overlongs, surrogates, > U+10FFFF and truncation, at the right offset") {
  using kylin::detail::find_invalid_utf8;
  constexpr auto ok = std::string_view::npos;
  CHECK(find_invalid_utf8("") == ok);
  CHECK(find_invalid_utf8("h\xc3\xa9llo \xe4\xbd\xa0 \xf0\x9f\x98\x80") == ok);
  CHECK(find_invalid_utf8("ab\xc0\xaf") == 2);        // overlong '/'
  CHECK(find_invalid_utf8("\xe0\x80\xaf") == 0);      // overlong 3-byte
  CHECK(find_invalid_utf8("x\xed\xa0\x80") == 1);     // surrogate U+D800
  CHECK(find_invalid_utf8("\xf4\x90\x80\x80") == 0);  // U+110000
  CHECK(find_invalid_utf8("abc\xe4\xbd") == 3);       // truncated at the end
  CHECK(find_invalid_utf8("\x80") == 0);              // lone continuation byte
  CHECK(find_invalid_utf8("ok\xff") == 2);
}

TEST_CASE("lossy UTF-8 repair puts one U+FFFD per maximal invalid subpart (as from_utf8_lossy)") {
  auto lossy = [](std::string_view s) {
    std::string out;
    kylin::detail::append_utf8_lossy(out, s);
    return out;
  };
  const std::string r = "\xef\xbf\xbd";
  CHECK(lossy("abc") == "abc");
  CHECK(lossy("a\xe4\xbd") == "a" + r);          // truncated 3-byte sequence: one replacement
  CHECK(lossy("\xe4\xbdx") == r + "x");
  CHECK(lossy("\x80\x80") == r + r);            // each lone continuation byte
  CHECK(lossy("\xf0\x9f\x98") == r);
  CHECK(lossy("\xc0\xaf") == r + r);            // C0 is never valid: two subparts
  CHECK(lossy("\xed\xa0\x80") == r + r + r);    // a surrogate's bytes are three subparts
  CHECK(lossy("\xf0\x9f\x98\x80") == "\xf0\x9f\x98\x80");
}
