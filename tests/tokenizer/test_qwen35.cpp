// The synthetic Qwen3.5-style tokenizer (tests/data/qwen35-tokenizer/SYNTHETIC.md: Qwen3's BPE,
// Qwen3.5's Split regex, the 33 real added tokens at 248044..248076) encodes every reference case
// like HF tokenizers; its regex alone selects the Qwen3.5 split; and decoding covers the
// checkpoint's 248,320-row vocabulary as it does Qwen3's padded one.
#include <doctest/doctest.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "kylin/tokenizer/nfc.hpp"
#include "kylin/tokenizer/stream_decoder.hpp"

#include "common/read_text.hpp"
#include "tokenizer_test_util.hpp"

namespace qwen35_test {

const std::string model_dir = std::string(KYLIN_TEST_DATA) + "/models/e2e-qwen35-fullvocab";

const kylin::Tokenizer& qwen35() {
  static const kylin::Tokenizer tokenizer = kylin::Tokenizer::from_dir(model_dir);
  return tokenizer;
}

std::vector<kylin::test::Case> cases() {
  return kylin::test::read_cases(std::string(KYLIN_TEST_DATA) + "/reference/qwen35-synthetic-tokenizer.jsonl");
}

using kylin::test::read_text;

// The tokenizer.json as written, with its Split regex (as JSON) replaced by `regex`.
kylin::Tokenizer with_regex(std::string_view regex) {
  std::string json = read_text(model_dir + "/tokenizer.json");
  const std::string from = kylin::json::dump(kylin::json::Value(kylin::detail::qwen35_split_pattern));
  const std::size_t at = json.find(from);
  REQUIRE(at != std::string::npos);
  json.replace(at, from.size(), kylin::json::dump(kylin::json::Value(std::string(regex))));
  return kylin::Tokenizer(kylin::detail::parse_tokenizer_json(simdjson::padded_string(json), "edited tokenizer.json"));
}

std::string error_text_of_decode(const std::vector<int>& ids) {
  return kylin::test::error_text([&] { (void)qwen35().decode(ids); });
}

}  // namespace qwen35_test

using qwen35_test::qwen35;

TEST_CASE("every case of reference/qwen35-synthetic-tokenizer.jsonl encodes to the ids of HF tokenizers") {
  const auto cases = qwen35_test::cases();
  REQUIRE(cases.size() == 150);
  for (const auto& c : cases) {
    CAPTURE(c.text);
    CHECK(qwen35().encode(c.text) == c.ids);  // add_special_tokens false, as the cases were made
  }
}

TEST_CASE("decoding the Qwen3.5 reference ids gives back the NFC form of the text, also streamed") {
  for (const auto& c : qwen35_test::cases()) {
    CAPTURE(c.text);
    CHECK(qwen35().decode(c.ids) == kylin::nfc(c.text));
    kylin::StreamDecoder stream(qwen35());
    std::string joined;
    for (int id : c.ids) joined += stream.push(id);
    CHECK(joined + stream.flush() == kylin::nfc(c.text));
  }
}

TEST_CASE("the Split regex alone selects the split: with Qwen2's regex the same file encodes as Qwen3's tokenizer") {
  // The synthetic file's BPE is Qwen3's (ids 0..151642, the same merges), so with Qwen2's regex
  // written in, every text encodes as Qwen3's own tokenizer does once added tokens are out of play.
  const kylin::Tokenizer qwen2_regex = qwen35_test::with_regex(kylin::detail::qwen2_split_pattern);
  const kylin::EncodeOptions plain{.parse_added = false};
  int differ = 0;
  for (const auto& c : qwen35_test::cases()) {
    CAPTURE(c.text);
    CHECK(qwen2_regex.encode(c.text, plain) == kylin::test::qwen3().encode(c.text, plain));
    differ += qwen2_regex.encode(c.text, plain) != qwen35().encode(c.text, plain);
  }
  // Where a Qwen3 token spans a letter and its mark (Thai, Arabic harakat, Hebrew niqqud), the
  // Qwen3.5 regex keeps them in one word and BPE finds that token.
  CHECK(differ >= 10);
  CHECK(qwen35().encode("\u0e19\u0e49\u0e33").size() < qwen2_regex.encode("\u0e19\u0e49\u0e33").size());  // Thai "water"
}

TEST_CASE("a Split regex that is neither known pattern is refused, naming the pattern") {
  std::string near(kylin::detail::qwen35_split_pattern);
  near.replace(near.find(R"(\p{N}|)"), 6, R"(\p{N}+|)");  // digits in runs
  const std::string what = kylin::test::error_text([&] { (void)qwen35_test::with_regex(near); });
  CHECK(what.find("[kylin.tokenizer] edited tokenizer.json") != std::string::npos);
  CHECK(what.find("pre_tokenizer") != std::string::npos);
  CHECK(what.find("neither the Qwen2 nor the Qwen3.5 pattern") != std::string::npos);
  CHECK(what.find(near) != std::string::npos);
}

TEST_CASE("the synthetic tokenizer has 248,044 BPE ids and the 33 real added tokens at 248044..248076") {
  CHECK(qwen35().vocab_size() == 248077);
  CHECK(qwen35().added_tokens().size() == 33);
  CHECK(qwen35().token_to_id("<|endoftext|>") == 248044);
  CHECK(qwen35().token_to_id("<|im_start|>") == 248045);
  CHECK(qwen35().token_to_id("<|audio_pad|>") == 248076);
  CHECK(qwen35().is_special(248046));   // <|im_end|>
  CHECK(!qwen35().is_special(248058));  // <tool_call>
  CHECK(!qwen35().is_special(248068));  // <think>
  CHECK(qwen35().id_to_token(248043) == std::optional<std::string_view>("<|synthetic_unused_248043|>"));
  // A placeholder is ordinary vocabulary: its text is plain text and decodes back as spelled.
  CHECK(qwen35().decode(std::vector<int>{151643}) == "<|synthetic_unused_151643|>");
  CHECK(qwen35().encode("<|synthetic_unused_151643|>").size() > 1);
}

TEST_CASE("the 248,320-row checkpoint: every tokenizer id decodes, its padding rows are a named error") {
  const auto config = kylin::json::parse(qwen35_test::read_text(qwen35_test::model_dir + "/config.json"));
  const std::int64_t rows = config.find("text_config")->find("vocab_size")->as_int();
  REQUIRE(rows > qwen35().vocab_size());
  CHECK_NOTHROW(qwen35().check_model_vocab(rows));
  const std::string small = kylin::test::error_text([] { qwen35().check_model_vocab(248076); });
  CHECK(small.find("ids up to 248076 (vocab size 248077)") != std::string::npos);

  int decodable = 0;  // token_bytes throws for an id that is not in the vocabulary
  for (int id = 0; id < qwen35().vocab_size(); ++id) decodable += !qwen35().token_bytes(id).empty();
  CHECK(decodable == qwen35().vocab_size());
  int padding_refused = 0;
  for (auto id = static_cast<int>(qwen35().vocab_size()); id < rows; ++id) {
    const std::string what = qwen35_test::error_text_of_decode({id});
    padding_refused += what.find("token id " + std::to_string(id) + " is not in the vocabulary (vocab size 248077)") !=
                       std::string::npos;
  }
  CHECK(padding_refused == rows - qwen35().vocab_size());
}

TEST_CASE("random Qwen3.5 ids stream to the same text as decode(), skip_special drops the special ones") {
  std::mt19937 rng(35);
  std::uniform_int_distribution<int> id(0, qwen35().vocab_size() - 1);
  for (int n = 0; n < 300; ++n) {
    std::vector<int> ids(1 + n % 17);
    for (int& i : ids) i = id(rng);
    kylin::StreamDecoder stream(qwen35());
    std::string joined;
    for (int i : ids) joined += stream.push(i);
    joined += stream.flush();
    CHECK(joined == qwen35().decode(ids));
    CHECK(kylin::detail::find_invalid_utf8(joined) == std::string::npos);
  }
  const auto ids = qwen35().encode("<|im_start|>user\n<think>x</think><|im_end|>");
  CHECK(ids.front() == 248045);
  CHECK(qwen35().decode(ids, {.skip_special = true}) == "user\n<think>x</think>");
}
