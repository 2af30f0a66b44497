// Decoding: ids -> bytes -> text with U+FFFD repair; the stream decoder emits only complete
// UTF-8 and adds up to decode(); bad ids and invalid input raise kylin::Error, never crash.
#include <doctest/doctest.h>

#include <random>
#include <string>

#include "kylin/tokenizer/stream_decoder.hpp"
#include "tokenizer_test_util.hpp"

using kylin::test::qwen3;

namespace {

// error_text that also checks the category is tokenizer
std::string tokenizer_error_text(auto&& f) {
  try {
    f();
  } catch (const kylin::Error& e) {
    CHECK(e.category() == kylin::ErrorCategory::tokenizer);
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("streaming every reference case adds up to decode(), and every piece is valid UTF-8") {
  for (const char* file : {"/reference/qwen3-tokenizer.jsonl", "/reference/qwen3-tokenizer-extra.jsonl"})
    for (const auto& c : kylin::test::read_cases(std::string(KYLIN_TEST_DATA) + file)) {
      CAPTURE(c.text);
      kylin::StreamDecoder stream(qwen3());
      std::string joined;
      for (int id : c.ids) {
        std::string piece = stream.push(id);
        CHECK(kylin::detail::find_invalid_utf8(piece) == std::string::npos);
        joined += piece;
      }
      joined += stream.flush();
      CHECK(joined == qwen3().decode(c.ids));
    }
}

TEST_CASE("a character split across tokens is held back until its last byte, then emitted whole") {
  const auto ids = qwen3().encode("𓀀");  // one 4-byte character in three byte-level tokens
  REQUIRE(ids.size() >= 2);
  kylin::StreamDecoder stream(qwen3());
  for (std::size_t i = 0; i + 1 < ids.size(); ++i) {
    CHECK(stream.push(ids[i]).empty());
    CHECK(stream.pending_bytes() > 0);
  }
  CHECK(stream.push(ids.back()) == "𓀀");
  CHECK(stream.pending_bytes() == 0);
  CHECK(stream.flush().empty());
}

TEST_CASE("flush() emits an unfinished character as U+FFFD, and decode() does the same") {
  const auto ids = qwen3().encode("a𓀀");
  REQUIRE(ids.size() >= 3);
  const std::vector<int> head(ids.begin(), ids.end() - 1);
  kylin::StreamDecoder stream(qwen3());
  std::string out;
  for (int id : head) out += stream.push(id);
  out += stream.flush();
  CHECK(out == "a\xef\xbf\xbd");
  CHECK(qwen3().decode(head) == out);
}

TEST_CASE("random id sequences stream to the same text as decode() (invalid bytes included)") {
  std::mt19937 rng(99);
  std::uniform_int_distribution<int> id(0, 151642);
  for (int n = 0; n < 300; ++n) {
    std::vector<int> ids(1 + n % 17);
    for (int& i : ids) i = id(rng);
    kylin::StreamDecoder stream(qwen3());
    std::string joined;
    for (int i : ids) joined += stream.push(i);
    joined += stream.flush();
    CHECK(joined == qwen3().decode(ids));
    CHECK(kylin::detail::find_invalid_utf8(joined) == std::string::npos);
  }
}

TEST_CASE("skip_special drops special tokens only, in decode and in the stream") {
  const auto ids = qwen3().encode("<|im_start|>user\n<think>x</think><|im_end|>");
  CHECK(qwen3().decode(ids, {.skip_special = true}) == "user\n<think>x</think>");
  kylin::StreamDecoder stream(qwen3(), {.skip_special = true});
  std::string joined;
  for (int id : ids) joined += stream.push(id);
  CHECK(joined == "user\n<think>x</think>");
}

TEST_CASE("an id outside the vocabulary is a kylin::Error naming the id and the vocab size") {
  const std::vector<int> bad = {9707, 151669};
  const std::string what = tokenizer_error_text([&] { (void)qwen3().decode(bad); });
  CHECK(what.find("151669") != std::string::npos);
  CHECK(what.find("vocab size 151669") != std::string::npos);
  CHECK(tokenizer_error_text([&] { (void)qwen3().decode(std::vector<int>{-1}); }).find("-1") != std::string::npos);
  kylin::StreamDecoder stream(qwen3());
  CHECK(tokenizer_error_text([&] { (void)stream.push(1 << 30); }).find(std::to_string(1 << 30)) != std::string::npos);
}

TEST_CASE("invalid UTF-8 input to encode is a kylin::Error naming the byte offset") {
  const std::string what = tokenizer_error_text([] { (void)qwen3().encode("abc\xff rest"); });
  CHECK(what.find("invalid UTF-8 at byte offset 3") != std::string::npos);
  CHECK(what.find("0xff") != std::string::npos);
  CHECK(tokenizer_error_text([] { (void)qwen3().encode("\xed\xa0\x80"); }).find("offset 0") != std::string::npos);
  CHECK(tokenizer_error_text([] { (void)qwen3().encode("ok \xe4\xbd"); }).find("offset 3") != std::string::npos);
}

TEST_CASE("check_model_vocab accepts an embedding at least as large and names both sizes otherwise") {
  CHECK_NOTHROW(qwen3().check_model_vocab(151936));
  CHECK_NOTHROW(qwen3().check_model_vocab(151669));
  const std::string what = tokenizer_error_text([] { qwen3().check_model_vocab(151643, "config.json"); });
  CHECK(what.find("151643") != std::string::npos);
  CHECK(what.find("151669") != std::string::npos);
  CHECK(what.find("151668") != std::string::npos);
}
