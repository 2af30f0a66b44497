// A model directory for an Engine made of a test checkpoint (its files symlinked) and a tokenizer:
// the real Qwen3 one for the 151,936-row checkpoints, else a byte-level one small enough for the
// checkpoint's vocabulary, so every test checkpoint can generate through a Session.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "kylin/core/json.hpp"
#include "kylin/tokenizer/bpe.hpp"
#include "kylin/tokenizer/pretokenizer.hpp"

namespace kylin::test {

// Which tokenizer a TempModel gets.
enum class TestTokenizer {
  qwen3,          // tests/data/qwen3-tokenizer (151,669 ids, the chat template)
  bytes,          // the 256 byte tokens, nothing else
  bytes_im_end,   // the 256 byte tokens and <|im_end|> (id 256, special: Qwen's end of turn, so an EOS)
  bytes_im_text,  // the same, but <|im_end|> not special
  bytes_padded,   // the 256 byte tokens and plain added tokens <|x256|> .. <|x511|>: every id of a 512-row model is a token
};

// tokenizer.json of the byte-level kinds: ids 0..255 are the bytes, no merges.
inline std::string byte_tokenizer_json(TestTokenizer kind) {
  json::Object vocab;
  for (int b = 0; b < 256; ++b) vocab.emplace_back(detail::bytes_to_token_text(std::string(1, static_cast<char>(b))), b);
  json::Object model{{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", json::Array{}}};
  json::Array added;
  if (kind == TestTokenizer::bytes_padded)
    for (int id = 256; id < 512; ++id) added.emplace_back(json::Object{{"id", id}, {"content", "<|x" + std::to_string(id) + "|>"}, {"special", false}});
  else if (kind != TestTokenizer::bytes)
    added.emplace_back(json::Object{{"id", 256}, {"content", "<|im_end|>"}, {"special", kind == TestTokenizer::bytes_im_end}});
  json::Object split{{"type", "Split"}, {"pattern", json::Object{{"Regex", std::string(detail::qwen2_split_pattern)}}},
                     {"behavior", "Isolated"}, {"invert", false}};
  json::Object byte_level{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  json::Object root{{"added_tokens", std::move(added)},
                    {"normalizer", json::Object{{"type", "NFC"}}},
                    {"pre_tokenizer", json::Object{{"type", "Sequence"}, {"pretokenizers", json::Array{std::move(split), std::move(byte_level)}}}},
                    {"decoder", json::Object{{"type", "ByteLevel"}}},
                    {"model", std::move(model)}};
  return json::dump(json::Value(std::move(root)));
}

class TempModel {
 public:
  TempModel(const std::string& checkpoint, TestTokenizer tokenizer) {
    std::string pattern = (std::filesystem::temp_directory_path() / "kylin-model-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = pattern;
    const std::filesystem::path data = KYLIN_TEST_DATA;
    for (const auto& entry : std::filesystem::directory_iterator(data / "models" / checkpoint)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("tokenizer", 0) != 0) std::filesystem::create_symlink(std::filesystem::absolute(entry.path()), dir_ / name);
    }
    if (tokenizer == TestTokenizer::qwen3) {
      for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
        std::filesystem::create_symlink(std::filesystem::absolute(data / "qwen3-tokenizer" / f), dir_ / f);
    } else {
      std::ofstream(dir_ / "tokenizer.json", std::ios::binary) << byte_tokenizer_json(tokenizer);
    }
  }
  TempModel(const TempModel&) = delete;
  TempModel& operator=(const TempModel&) = delete;
  ~TempModel() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
};

}  // namespace kylin::test
