// Encoding matches the reference ids of the shared Qwen3 tokenizer cases, and decoding them
// gives the NFC form of the text back.
#include <doctest/doctest.h>

#include "kylin/tokenizer/nfc.hpp"
#include "tokenizer_test_util.hpp"

using kylin::test::qwen3;

TEST_CASE("every case of reference/qwen3-tokenizer.jsonl encodes to its reference ids") {
  const auto cases = kylin::test::read_cases(std::string(KYLIN_TEST_DATA) + "/reference/qwen3-tokenizer.jsonl");
  REQUIRE(cases.size() >= 50);
  for (const auto& c : cases) {
    CAPTURE(c.text);
    CHECK(qwen3().encode(c.text) == c.ids);
  }
}

TEST_CASE("decoding the reference ids gives back the NFC form of the text") {
  const auto cases = kylin::test::read_cases(std::string(KYLIN_TEST_DATA) + "/reference/qwen3-tokenizer.jsonl");
  for (const auto& c : cases) {
    CAPTURE(c.text);
    CHECK(qwen3().decode(c.ids) == kylin::nfc(c.text));
  }
}

TEST_CASE("the Qwen3 tokenizer has 151,643 BPE tokens plus 26 added tokens up to id 151668") {
  CHECK(qwen3().vocab_size() == 151669);
  CHECK(qwen3().added_tokens().size() == 26);
  CHECK(qwen3().token_to_id("<|im_start|>") == 151644);
  CHECK(qwen3().token_to_id("Ġthe") == 279);
  CHECK(qwen3().id_to_token(279) == std::optional<std::string_view>("Ġthe"));
  CHECK(qwen3().id_to_token(151668) == std::optional<std::string_view>("</think>"));
  CHECK(!qwen3().id_to_token(151669).has_value());
  CHECK(!qwen3().token_to_id("no such token").has_value());
  CHECK(qwen3().is_special(151645));
  CHECK(!qwen3().is_special(151667));  // <think> is an added token but not special
}
