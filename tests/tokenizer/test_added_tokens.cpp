// Added tokens follow HF's rules: leftmost-longest match, single_word, normalized (matched
// after NFC), special tokens as plain text on request; and long inputs encode without blow-up.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <string>

#include "kylin/tokenizer/nfc.hpp"
#include "tokenizer_test_util.hpp"

using kylin::test::qwen3;

namespace {

bool contains(const std::vector<int>& ids, int id) { return std::find(ids.begin(), ids.end(), id) != ids.end(); }

// The Qwen3 tokenizer with `extra` added tokens appended after id 151668 and `edit` applied.
kylin::Tokenizer qwen3_with(std::vector<kylin::AddedToken> extra, void (*edit)(kylin::AddedToken&) = nullptr) {
  auto spec = kylin::detail::load_tokenizer_json(kylin::test::qwen3_dir + "/tokenizer.json");
  if (edit)
    for (auto& t : spec.added_tokens) edit(t);
  for (auto& t : extra) spec.added_tokens.push_back(std::move(t));
  return kylin::Tokenizer(std::move(spec));
}

}  // namespace

TEST_CASE("parse_special=false encodes special-token text as plain text but still matches <think>") {
  const std::string text = "<|im_start|>user\n<think>hi</think><|im_end|>";
  const auto ids = qwen3().encode(text, {.parse_special = false});
  CHECK(!contains(ids, 151644));
  CHECK(!contains(ids, 151645));
  CHECK(contains(ids, 151667));  // <think> is not special
  CHECK(qwen3().decode(ids) == text);
  CHECK(qwen3().encode("<|im_start|>", {.parse_special = false}) == std::vector<int>{27, 91, 318, 4906, 91, 29});
}

TEST_CASE("parse_added=false matches no added token: the text's own BPE") {
  const std::string text = "<|im_start|>user\n<think>hi</think><tool_call>";
  const auto ids = qwen3().encode(text, {.parse_added = false});
  for (int id : ids) CHECK(id < 151643);
  CHECK(qwen3().decode(ids) == text);
  // "<|im_start|>" as plain text: "<", "|", "im", "_start", "|", ">".
  CHECK(qwen3().encode("<|im_start|>", {.parse_added = false}) == std::vector<int>{27, 91, 318, 4906, 91, 29});
}

TEST_CASE("among added tokens starting at the same place the longest wins, and the leftmost start first") {
  auto tok = qwen3_with({{.id = 151669, .content = "<a>"}, {.id = 151670, .content = "<a>b"}, {.id = 151671, .content = "a>bc"}});
  CHECK(tok.encode("<a>bc") == std::vector<int>{151670, 66});
  CHECK(tok.encode("x<a>") == std::vector<int>{87, 151669});
  CHECK(tok.vocab_size() == 151672);
}

TEST_CASE("single_word tokens match only without a word character on either side") {
  auto tok = qwen3_with({{.id = 151669, .content = "zz", .single_word = true}});
  CHECK(tok.encode("a zz b") == std::vector<int>{64, 220, 151669, 293});
  CHECK(!contains(tok.encode("azz"), 151669));
  CHECK(!contains(tok.encode("zzé"), 151669));   // é is a word character (a letter)
  CHECK(!contains(tok.encode("zz_"), 151669));   // so is the connector _
  CHECK(contains(tok.encode("(zz)"), 151669));
  CHECK(contains(tok.encode("zz"), 151669));
}

TEST_CASE("normalized tokens match the NFC text; non-normalized ones only the raw text") {
  const std::string composed = "caf\xc3\xa9", decomposed = "cafe\xcc\x81";
  auto normalized = qwen3_with({{.id = 151669, .content = composed, .normalized = true}});
  CHECK(normalized.encode(decomposed + "!") == std::vector<int>{151669, 0});
  CHECK(normalized.encode(composed + "!") == std::vector<int>{151669, 0});
  auto raw = qwen3_with({{.id = 151669, .content = composed, .normalized = false}});
  CHECK(raw.encode(composed + "!") == std::vector<int>{151669, 0});
  CHECK(!contains(raw.encode(decomposed + "!"), 151669));
}

TEST_CASE("lstrip swallows whitespace only back to the previous added token") {
  auto tok = qwen3_with({}, [](kylin::AddedToken& t) { t.lstrip = t.content == "<|im_end|>"; });
  CHECK(tok.encode("<|im_start|>  \n <|im_end|>") == std::vector<int>{151644, 151645});
  CHECK(tok.encode("x \t<|im_end|>") == std::vector<int>{87, 151645});
}

TEST_CASE("1 MB of 'a' (a single pre-token) encodes to 8-letter tokens and decodes back") {
  const std::string text(1 << 20, 'a');
  const auto ids = qwen3().encode(text);
  CHECK(ids.size() == (1u << 17));
  CHECK(std::all_of(ids.begin(), ids.end(), [](int id) { return id == 69440; }));
  CHECK(qwen3().decode(ids) == text);
}

TEST_CASE("1 MB of digits encodes to one token per digit") {
  std::string text(1 << 20, '0');
  for (std::size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>('0' + i % 10);
  const auto ids = qwen3().encode(text);
  REQUIRE(ids.size() == text.size());
  for (std::size_t i = 0; i < 20; ++i) CHECK(ids[i] == 15 + static_cast<int>(i % 10));
  CHECK(qwen3().decode(ids) == text);
}

TEST_CASE("decode(encode(text)) is NFC(text) for random mixed-script text") {
  const std::vector<std::string> pieces = {"a", "Z", " ", "  ", "\n", "\r\n", "\t", "'s", "'LL", "1", "42", "!",
                                           "...", "é", "e\xcc\x81", "中", "文", "ア", "한", "\xe1\x84\x80\xe1\x85\xa1",
                                           "ش", "ह", "ि", "😀", "👍🏽", "\xe2\x80\x8d", "\xc2\xa0", "<|im_end|>", "<think>"};
  std::mt19937 rng(2024);
  std::uniform_int_distribution<std::size_t> pick(0, pieces.size() - 1);
  for (int n = 0; n < 500; ++n) {
    std::string text;
    for (int k = 0; k < 1 + n % 40; ++k) text += pieces[pick(rng)];
    CAPTURE(text);
    CHECK(qwen3().decode(qwen3().encode(text)) == kylin::nfc(text));
  }
}
