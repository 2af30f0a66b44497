// Loading: the vocab.json + merges.txt fallback gives the same encodings as tokenizer.json;
// merges in "a b" and ["a", "b"] forms are the same; the Split regex picks the Qwen2 or Qwen3.5
// split; unsupported pipelines (another regex among them) are refused by name.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "kylin/tokenizer/bpe.hpp"
#include "tokenizer_test_util.hpp"

using kylin::test::error_text;

namespace fs = std::filesystem;

namespace {

// A fresh, empty scratch directory for one test.
fs::path scratch(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("kylin_tokenizer_test_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// A tiny byte-level tokenizer.json: the 256 byte tokens (id = byte), then "he", "ll", "hell".
std::string tiny_tokenizer_json(bool string_merges, const std::string& pre_tokenizer) {
  kylin::json::Object vocab;
  for (int b = 0; b < 256; ++b)
    vocab.emplace_back(kylin::detail::bytes_to_token_text(std::string(1, static_cast<char>(b))), b);
  vocab.emplace_back("he", 256);
  vocab.emplace_back("ll", 257);
  vocab.emplace_back("hell", 258);
  kylin::json::Array merges;
  for (auto [a, b] : {std::pair{"h", "e"}, {"l", "l"}, {"he", "ll"}}) {
    if (string_merges) merges.emplace_back(std::string(a) + " " + b);
    else merges.emplace_back(kylin::json::Array{a, b});
  }
  kylin::json::Object model{{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", std::move(merges)}};
  return "{\"added_tokens\": [{\"id\": 259, \"content\": \"<eos>\", \"special\": true}], \"normalizer\": {\"type\": \"NFC\"},"
         " \"pre_tokenizer\": " + pre_tokenizer + ", \"decoder\": {\"type\": \"ByteLevel\"}, \"model\": " +
         kylin::json::dump(kylin::json::Value(std::move(model))) + "}";
}

std::string split_pre_tokenizer(std::string_view regex) {
  std::string pattern = kylin::json::dump(kylin::json::Value(std::string(regex)));
  return "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": " + pattern +
         "}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false,"
         " \"trim_offsets\": false, \"use_regex\": false}]}";
}

}  // namespace

TEST_CASE("merges given as \"a b\" strings and as [\"a\", \"b\"] pairs load to the same tokenizer") {
  const fs::path dir = scratch("merge_forms");
  write(dir / "strings.json", tiny_tokenizer_json(true, split_pre_tokenizer(kylin::detail::qwen2_split_pattern)));
  write(dir / "pairs.json", tiny_tokenizer_json(false, split_pre_tokenizer(kylin::detail::qwen2_split_pattern)));
  const auto strings = kylin::Tokenizer::from_file(dir / "strings.json");
  const auto pairs = kylin::Tokenizer::from_file(dir / "pairs.json");
  for (const char* text : {"hello", "hell hello<eos>", "shelled", "h e l l"}) {
    CAPTURE(text);
    CHECK(strings.encode(text) == pairs.encode(text));
  }
  CHECK(strings.encode("hello<eos>") == std::vector<int>{258, 'o', 259});
  CHECK(strings.vocab_size() == 260);
  fs::remove_all(dir);
}

TEST_CASE("the Split regex of tokenizer.json selects the split, Qwen2's or Qwen3.5's") {
  const fs::path dir = scratch("split_patterns");
  for (auto pattern : {kylin::SplitPattern::qwen2, kylin::SplitPattern::qwen35}) {
    write(dir / "tokenizer.json", tiny_tokenizer_json(true, split_pre_tokenizer(kylin::detail::split_pattern_regex(pattern))));
    CHECK(kylin::detail::load_tokenizer_json(dir / "tokenizer.json").split == pattern);
  }
  fs::remove_all(dir);
}

TEST_CASE("a Split regex other than the two known patterns is refused with an error naming it") {
  const fs::path dir = scratch("unknown_split");
  // GPT-2's pattern, as Llama-style byte-level tokenizers carry it
  const std::string gpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  write(dir / "tokenizer.json", tiny_tokenizer_json(true, split_pre_tokenizer(gpt2)));
  const std::string what = error_text([&] { (void)kylin::Tokenizer::from_dir(dir); });
  CHECK(what.find("[kylin.tokenizer] " + (dir / "tokenizer.json").string()) != std::string::npos);
  CHECK(what.find("unsupported pre_tokenizer: Split pattern is neither the Qwen2 nor the Qwen3.5 pattern: " + gpt2) !=
        std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("a pre_tokenizer other than Split + ByteLevel is refused with an error naming it") {
  const fs::path dir = scratch("bad_pre_tokenizer");
  write(dir / "tokenizer.json",
        tiny_tokenizer_json(true, "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}"));
  const std::string what = error_text([&] { (void)kylin::Tokenizer::from_dir(dir); });
  CHECK(what.find("[kylin.tokenizer]") != std::string::npos);
  CHECK(what.find("pre_tokenizer") != std::string::npos);
  write(dir / "tokenizer.json", "{\"model\": ");
  CHECK(error_text([&] { (void)kylin::Tokenizer::from_dir(dir); }).find("invalid JSON") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("vocab.json + merges.txt + tokenizer_config.json encode every reference case like tokenizer.json") {
  const fs::path dir = scratch("fallback");
  const auto spec = kylin::detail::load_tokenizer_json(kylin::test::qwen3_dir + "/tokenizer.json");
  kylin::json::Object vocab;
  for (const auto& [token, id] : spec.vocab) vocab.emplace_back(token, id);
  write(dir / "vocab.json", kylin::json::dump(kylin::json::Value(std::move(vocab))));
  std::string merges = "#version: 0.2\n";
  for (const auto& [a, b] : spec.merges) merges += a + " " + b + "\n";
  write(dir / "merges.txt", merges);
  fs::copy_file(kylin::test::qwen3_dir + "/tokenizer_config.json", dir / "tokenizer_config.json");

  const auto fallback = kylin::Tokenizer::from_dir(dir);
  CHECK(fallback.vocab_size() == kylin::test::qwen3().vocab_size());
  CHECK(fallback.added_tokens().size() == 26);
  for (const char* file : {"/reference/qwen3-tokenizer.jsonl", "/reference/qwen3-tokenizer-extra.jsonl"})
    for (const auto& c : kylin::test::read_cases(std::string(KYLIN_TEST_DATA) + file)) {
      if (c.line.find("variant") && c.line.find("variant")->as_string() != "plain") continue;
      CAPTURE(c.text);
      CHECK(fallback.encode(c.text) == c.ids);
    }

  write(dir / "merges.txt", "#version: 0.2\nĠ Ġ\nbad\n");
  CHECK(error_text([&] { (void)kylin::Tokenizer::from_dir(dir); }).find("'bad' is not two tokens") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("a directory without tokenizer files is a kylin::Error naming the directory") {
  const fs::path dir = scratch("empty");
  CHECK(error_text([&] { (void)kylin::Tokenizer::from_dir(dir); }).find(dir.string()) != std::string::npos);
  fs::remove_all(dir);
}
