// kylin::StreamDecoder: turns generated ids into text as they come, emitting only complete
// UTF-8: a character split across tokens is held back until its last byte arrives. Invalid
// bytes become U+FFFD right away; the concatenated output equals Tokenizer::decode of all ids.
#pragma once

#include <string>

#include "kylin/tokenizer/tokenizer.hpp"

namespace kylin {

class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, DecodeOptions options = {})
      : tokenizer_(&tokenizer), options_(options) {}

  // The text that became complete with this token (often empty for the bytes of a CJK char).
  // Throws kylin::Error for an id outside the vocabulary.
  std::string push(int id) {
    if (options_.skip_special && tokenizer_->is_special(id)) return {};
    pending_ += tokenizer_->token_bytes(id);
    const std::size_t keep = incomplete_tail();
    std::string text;
    detail::append_utf8_lossy(text, std::string_view(pending_).substr(0, pending_.size() - keep));
    pending_.erase(0, pending_.size() - keep);
    return text;
  }

  // What is left at the end of the stream, incomplete sequences as U+FFFD.
  std::string flush() {
    std::string text;
    detail::append_utf8_lossy(text, pending_);
    pending_.clear();
    return text;
  }

  // Bytes held back, waiting for the rest of a character.
  std::size_t pending_bytes() const { return pending_.size(); }

 private:
  // Length of a valid but unfinished UTF-8 sequence at the end of pending_ (0 if none).
  // Lossy decoding always restarts at a lead byte, so decoding the head alone is exact.
  std::size_t incomplete_tail() const {
    const std::size_t n = pending_.size();
    for (std::size_t k = 1; k <= 3 && k <= n; ++k) {
      const auto b = static_cast<unsigned char>(pending_[n - k]);
      if (b < 0x80) return 0;
      if (b >= 0xC0) {
        std::size_t prefix = 0;
        if (detail::utf8_sequence_length(pending_, n - k, &prefix) == 0 && prefix == k) return k;
        return 0;
      }
    }
    return 0;
  }

  const Tokenizer* tokenizer_;
  DecodeOptions options_;
  std::string pending_;
};

}  // namespace kylin
