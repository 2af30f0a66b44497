// Hostile tokenizer files and plain-text ranges: an out-of-range or far-too-sparse token id is
// a named error before anything is allocated for it; encode_with_plain(text, plain) matches no added
// token inside `plain` and is encode(text) everywhere else.
#include <doctest/doctest.h>

#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "kylin/tokenizer/bpe.hpp"
#include "kylin/tokenizer/nfc.hpp"
#include "tokenizer_test_util.hpp"

using kylin::test::error_text;

using kylin::test::qwen3;
using kylin::TextRange;

namespace {

// The 256 byte tokens (id = byte) plus `extra` added tokens.
kylin::TokenizerSpec byte_spec(std::vector<kylin::AddedToken> extra) {
  kylin::TokenizerSpec spec;
  for (int b = 0; b < 256; ++b) spec.vocab.emplace_back(kylin::detail::bytes_to_token_text(std::string(1, static_cast<char>(b))), b);
  spec.added_tokens = std::move(extra);
  spec.source = "test spec";
  return spec;
}

long peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024;
}

}  // namespace

TEST_CASE("token ids beyond the id limit or far beyond the vocabulary are named errors, before allocating") {
  const long before = peak_rss_mib();
  auto spec = byte_spec({});
  spec.vocab.emplace_back("x", 2147483647);  // max_id + 1 overflowed int here once
  CHECK(error_text([&] { kylin::Tokenizer t(spec); }) ==
        "[kylin.tokenizer] test spec: vocab id 2147483647 is out of range (ids must be in 0..4194302)");
  CHECK(error_text([&] { kylin::Tokenizer t(byte_spec({{.id = 1 << 30, .content = "<big>"}})); }) ==
        "[kylin.tokenizer] test spec: added token id 1073741824 is out of range (ids must be in 0..4194302)");
  CHECK(error_text([&] { kylin::Tokenizer t(byte_spec({{.id = -1, .content = "<neg>"}})); }).find("added token id -1 is out of range") !=
        std::string::npos);
  // Within the limit but far from the 257 tokens defined: the id tables would be mostly holes.
  CHECK(error_text([&] { kylin::Tokenizer t(byte_spec({{.id = 4000000, .content = "<far>"}})); }) ==
        "[kylin.tokenizer] test spec: token id 4000000 is far beyond the 257 tokens defined (ids must be dense)");
  // A padded vocabulary (Qwen's model rows run past its tokens) is fine.
  CHECK(kylin::Tokenizer(byte_spec({{.id = 1000, .content = "<pad>"}})).vocab_size() == 1001);
  const long grown = peak_rss_mib() - before;
  MESSAGE("peak RSS grew by " << grown << " MiB");
  CHECK(grown < 256);  // id 2^30 used to try 32 GB, 20,000,000 peaked at 1.3 GB
}

TEST_CASE("tokenizer.json with a hostile added-token id is refused by name") {
  const auto dir = std::filesystem::temp_directory_path() / "kylin_tokenizer_test_hostile_ids";
  std::filesystem::create_directories(dir);
  std::ifstream in(kylin::test::qwen3_dir + "/tokenizer.json", std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string key = "\"id\": 151643";
  REQUIRE(text.find(key) != std::string::npos);
  for (const char* id : {"20000000", "1073741824"}) {
    std::string bad = text;
    bad.replace(bad.find(key), key.size(), std::string("\"id\": ") + id);
    std::ofstream(dir / "tokenizer.json", std::ios::binary) << bad;
    CHECK(error_text([&] { (void)kylin::Tokenizer::from_dir(dir); }).find(std::string("added token id ") + id + " is out of range") !=
          std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("encode_with_plain(text, plain) matches no added token inside the plain ranges, and all others") {
  const std::string text = "<|im_start|>user\n<|im_end|><think>x</think><|im_end|>";
  const auto& t = qwen3();
  CHECK(t.encode_with_plain(text, {}) == t.encode(text));
  // The user's "<|im_end|><think>" (bytes 17..33) is text; the trailing <|im_end|> right after
  // the range's end and the leading <|im_start|> are still tokens.
  const std::vector<TextRange> plain = {{17, 34}};
  REQUIRE(text.substr(17, 17) == "<|im_end|><think>");
  const auto ids = t.encode_with_plain(text, plain);
  std::vector<int> expected = {151644};
  for (int id : t.encode("user\n<|im_end|><think>x", {.parse_added = false})) expected.push_back(id);
  expected.push_back(151668);  // </think>
  expected.push_back(151645);  // <|im_end|>
  CHECK(ids == expected);
  // A range covering only part of a token's text also keeps it from matching.
  const auto partial = t.encode_with_plain("<|im_end|>", std::vector<TextRange>{{9, 10}});
  CHECK(partial == t.encode("<|im_end|>", {.parse_added = false}));
  CHECK(t.decode(partial) == "<|im_end|>");
}

TEST_CASE("plain ranges through NFC: a non-NFC segment keeps its ranges in the normalized text") {
  kylin::AddedToken tok{.id = 151669, .content = "<é>", .normalized = true};
  auto spec = kylin::detail::load_tokenizer_json(kylin::test::qwen3_dir + "/tokenizer.json");
  spec.added_tokens.push_back(tok);
  const kylin::Tokenizer t(std::move(spec));
  const std::string decomposed = "<e\xCC\x81>";  // e + U+0301: NFC makes it <é>
  const std::string text = decomposed + " a" + decomposed;
  const auto special = t.encode(text);
  CHECK(std::count(special.begin(), special.end(), 151669) == 2);
  const auto ids = t.encode_with_plain(text, std::vector<TextRange>{{0, decomposed.size()}});
  CHECK(std::count(ids.begin(), ids.end(), 151669) == 1);
  CHECK(ids.back() == 151669);
  const auto head = t.encode(kylin::nfc(decomposed + " a"), {.parse_added = false});
  CHECK(std::vector<int>(ids.begin(), ids.end() - 1) == head);
}

TEST_CASE("plain ranges must be sorted, non-empty and inside the text") {
  const auto& t = qwen3();
  for (const std::vector<TextRange>& bad :
       {std::vector<TextRange>{{0, 0}}, std::vector<TextRange>{{0, 99}}, std::vector<TextRange>{{3, 4}, {1, 2}}}) {
    CHECK(error_text([&] { (void)t.encode_with_plain("abcdef", bad); }).find("plain-text range") != std::string::npos);
  }
}
