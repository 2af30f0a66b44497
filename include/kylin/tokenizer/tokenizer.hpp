// kylin::Tokenizer: Qwen's byte-level BPE tokenizer, identical to HF tokenizers on its
// tokenizer.json: added tokens -> NFC -> Qwen2 or Qwen3.5 split -> byte level -> BPE
// (-> post-processor on request); decode is the ByteLevel decoder. Invalid UTF-8 input is
// rejected (kylin::Error naming the byte offset).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kylin/core/error.hpp"
#include "kylin/tokenizer/added_tokens.hpp"
#include "kylin/tokenizer/bpe.hpp"
#include "kylin/tokenizer/nfc.hpp"
#include "kylin/tokenizer/post_processor.hpp"
#include "kylin/tokenizer/pretokenizer.hpp"
#include "kylin/tokenizer/text_range.hpp"
#include "kylin/tokenizer/tokenizer_files.hpp"

namespace kylin {

struct EncodeOptions {
  // false: added tokens marked special (<|im_start|>, <|endoftext|>, ...) in the text are
  // encoded as plain text, like HF's split_special_tokens=True.
  bool parse_special = true;
  // false: no added token at all is recognized (neither <|im_end|> nor <think>, <tool_call>):
  // the safe choice for untrusted text spliced into a prompt.
  bool parse_added = true;
  // true: the post_processor's special tokens around the ids (HF's add_special_tokens=True; a
  // Qwen3-Embedding tokenizer appends <|endoftext|>). Off by default: chat prompts carry their own.
  bool add_special_tokens = false;
};

struct DecodeOptions {
  bool skip_special = false;  // drop added tokens marked special, as HF's skip_special_tokens
};

class Tokenizer {
 public:
  // tokenizer.json in `dir`, else vocab.json + merges.txt (+ tokenizer_config.json).
  static Tokenizer from_dir(const std::filesystem::path& dir) {
    if (std::filesystem::exists(dir / "tokenizer.json")) return Tokenizer(detail::load_tokenizer_json(dir / "tokenizer.json"));
    if (std::filesystem::exists(dir / "vocab.json") && std::filesystem::exists(dir / "merges.txt"))
      return Tokenizer(detail::load_vocab_merges(dir));
    throw Error(ErrorCategory::tokenizer, dir.string(), "no tokenizer.json, nor vocab.json + merges.txt");
  }
  static Tokenizer from_file(const std::filesystem::path& tokenizer_json) {
    return Tokenizer(detail::load_tokenizer_json(tokenizer_json));
  }

  explicit Tokenizer(TokenizerSpec spec)
      : source_(std::move(spec.source)), nfc_(spec.nfc), split_(spec.split), ignore_merges_(spec.ignore_merges) {
    check_ids(spec);
    build_vocab(spec);
    build_merges(spec);
    added_ = std::move(spec.added_tokens);
    for (const AddedToken& t : added_) {
      if (t.id >= vocab_size()) resize(t.id + 1);
      tokens_[t.id] = t.content;
      token_bytes_[t.id] = decoded_bytes(t.content);
      present_[t.id] = true;
      special_[t.id] = t.special;
      if (t.normalized && nfc_) {
        if (auto bad = detail::find_invalid_utf8(t.content); bad != std::string::npos)
          throw Error(ErrorCategory::tokenizer, source_, "added token " + std::to_string(t.id) + " is not UTF-8");
        normalized_matcher_.add(t, nfc(t.content));
      } else {
        raw_matcher_.add(t, t.content);
      }
    }
    post_processor_ = PostProcessor(spec.post_processor, source_, [&](int id) {
      return id >= 0 && id < vocab_size() && present_[static_cast<std::size_t>(id)];
    });
  }
  Tokenizer(Tokenizer&& other) noexcept = default;

  std::vector<int> encode(std::string_view text, EncodeOptions options = {}) const {
    std::vector<int> ids = encode_with_plain(text, {}, options);
    return options.add_special_tokens ? post_processor_.process(ids) : ids;
  }
  // A pair of texts through the pair template (with add_special_tokens; else `a`'s ids then `b`'s).
  std::vector<int> encode_pair(std::string_view a, std::string_view b, EncodeOptions options = {}) const {
    const std::vector<int> ia = encode_with_plain(a, {}, options), ib = encode_with_plain(b, {}, options);
    if (options.add_special_tokens) return post_processor_.process(ia, ib);
    std::vector<int> ids = ia;
    ids.insert(ids.end(), ib.begin(), ib.end());
    return ids;
  }
  const PostProcessor& post_processor() const { return post_processor_; }

  // Like encode(text), except that no added token (special or not) is recognized in a byte of
  // `plain` (sorted, disjoint ranges of `text`): a chat prompt's message content is encoded as
  // the text it spells, while the template's own <|im_start|> stays a control token. The text
  // between added tokens is encoded as one piece either way, so a prompt whose content spells
  // no added token gets the same ids as encode(text).
  std::vector<int> encode_with_plain(std::string_view text, std::span<const TextRange> plain,
                                    EncodeOptions options = {}) const {
    if (auto bad = detail::find_invalid_utf8(text); bad != std::string_view::npos) {
      static constexpr char hex[] = "0123456789abcdef";
      const auto b = static_cast<unsigned char>(text[bad]);
      throw Error(ErrorCategory::tokenizer, "encode",
                  "invalid UTF-8 at byte offset " + std::to_string(bad) + " (byte 0x" + hex[b >> 4] + hex[b & 15] + ")");
    }
    check_ranges(text, plain);
    std::vector<int> ids;
    std::vector<detail::Segment> segments;
    if (options.parse_added) raw_matcher_.split(text, options.parse_special, segments, plain);
    else segments.push_back({-1, text});
    for (const auto& segment : segments) {
      if (segment.id >= 0) {
        ids.push_back(segment.id);
      } else if (!segment.text.empty()) {
        const auto offset = static_cast<std::size_t>(segment.text.data() - text.data());
        std::vector<TextRange> local;  // `plain` relative to the segment
        detail::add_ranges_within(local, plain, offset, offset + segment.text.size(), 0);
        encode_normalizing(segment.text, local, options, ids);
      }
    }
    return ids;
  }

  std::string decode(std::span<const int> ids, DecodeOptions options = {}) const {
    std::string bytes;
    for (int id : ids)
      if (!(options.skip_special && is_special(id))) bytes += token_bytes(id);
    std::string text;
    detail::append_utf8_lossy(text, bytes);
    return text;
  }

  // The bytes a token stands for (the ByteLevel decoder's output before UTF-8 repair).
  const std::string& token_bytes(int id) const {
    check_id(id);
    return token_bytes_[static_cast<std::size_t>(id)];
  }
  std::optional<int> token_to_id(std::string_view token) const {
    for (const AddedToken& t : added_)
      if (t.content == token) return t.id;
    auto it = vocab_.find(token);
    return it == vocab_.end() ? std::nullopt : std::optional<int>(it->second);
  }
  // The token as the vocabulary spells it (byte-level form, "Ġthe"), or nullopt.
  std::optional<std::string_view> id_to_token(int id) const {
    if (id < 0 || id >= vocab_size() || !present_[static_cast<std::size_t>(id)]) return std::nullopt;
    return std::string_view(tokens_[static_cast<std::size_t>(id)]);
  }
  bool is_special(int id) const { return id >= 0 && id < vocab_size() && special_[static_cast<std::size_t>(id)]; }
  // Largest id + 1, added tokens included.
  int vocab_size() const { return static_cast<int>(tokens_.size()); }
  const std::vector<AddedToken>& added_tokens() const { return added_; }

  // For model loaders: every token id must index a row of the embedding.
  void check_model_vocab(std::int64_t model_vocab_size, std::string_view model = "config.json") const {
    if (vocab_size() > model_vocab_size)
      throw Error(ErrorCategory::tokenizer, std::string(model),
                  "tokenizer " + source_ + " has ids up to " + std::to_string(vocab_size() - 1) + " (vocab size " +
                      std::to_string(vocab_size()) + ") but the model's vocab_size is " + std::to_string(model_vocab_size));
  }

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  void resize(int n) {
    const auto size = static_cast<std::size_t>(n);
    tokens_.resize(size);
    token_bytes_.resize(size);
    present_.resize(size, false);
    special_.resize(size, false);
  }

  // ByteLevel decoder: each character back to its byte; a token with a character outside the
  // byte map decodes to its own UTF-8 (HF does the same).
  static std::string decoded_bytes(std::string_view token) {
    std::string bytes;
    for (std::size_t i = 0; i < token.size();) {
      std::size_t len = 1;
      const int b = detail::utf8_sequence_length(token, i) == 0 ? -1 : detail::char_to_byte(detail::decode_utf8(token, i, len));
      if (b < 0) return std::string(token);
      bytes += static_cast<char>(b);
      i += len;
    }
    return bytes;
  }

  // Before anything is allocated: the id tables are dense arrays indexed by id, so one hostile
  // id (2^30 in an added token) would otherwise allocate tens of GB before any other check.
  // Real vocabularies are dense; the slack admits holes like a model's padded vocab_size.
  void check_ids(const TokenizerSpec& spec) const {
    std::int64_t max_id = -1;
    auto check = [&](std::int64_t id, const char* what) {
      if (id < 0 || id > detail::MergeTable::max_id)
        throw Error(ErrorCategory::tokenizer, source_, std::string(what) + " id " + std::to_string(id) +
                                                           " is out of range (ids must be in 0.." +
                                                           std::to_string(detail::MergeTable::max_id) + ")");
      max_id = std::max(max_id, id);
    };
    for (const auto& entry : spec.vocab) check(entry.second, "vocab");
    for (const AddedToken& t : spec.added_tokens) check(t.id, "added token");
    const auto count = static_cast<std::int64_t>(spec.vocab.size() + spec.added_tokens.size());
    if (max_id >= 2 * count + max_id_slack)
      throw Error(ErrorCategory::tokenizer, source_, "token id " + std::to_string(max_id) + " is far beyond the " +
                                                         std::to_string(count) + " tokens defined (ids must be dense)");
  }
  static constexpr std::int64_t max_id_slack = 65536;

  void build_vocab(const TokenizerSpec& spec) {
    int max_id = -1;
    for (const auto& [token, id] : spec.vocab) max_id = std::max(max_id, id);
    resize(max_id + 1);  // max_id <= MergeTable::max_id (check_ids)
    vocab_.reserve(spec.vocab.size());
    for (const auto& [token, id] : spec.vocab) {
      const auto i = static_cast<std::size_t>(id);
      if (present_[i])
        throw Error(ErrorCategory::tokenizer, source_, "id " + std::to_string(id) + " is used by '" + tokens_[i] +
                                                           "' and '" + token + "'");
      present_[i] = true;
      tokens_[i] = token;
      token_bytes_[i] = decoded_bytes(token);
      vocab_.emplace(token, id);
    }
    for (int b = 0; b < 256; ++b) {
      auto it = vocab_.find(detail::bytes_to_token_text(std::string(1, static_cast<char>(b))));
      if (it == vocab_.end())
        throw Error(ErrorCategory::tokenizer, source_, "byte " + std::to_string(b) + " has no token: not a byte-level vocabulary");
      byte_ids_[static_cast<std::size_t>(b)] = it->second;
    }
  }

  void build_merges(const TokenizerSpec& spec) {
    if (vocab_size() > detail::MergeTable::max_id || spec.merges.size() > detail::MergeTable::max_rank)
      throw Error(ErrorCategory::tokenizer, source_, "vocabulary or merge list too large (at most " +
                                                         std::to_string(detail::MergeTable::max_id) + " ids, " +
                                                         std::to_string(detail::MergeTable::max_rank) + " merges)");
    merges_.reserve(spec.merges.size());
    for (const auto& [a, b] : spec.merges) {
      auto ia = vocab_.find(a), ib = vocab_.find(b), iab = vocab_.find(a + b);
      if (ia == vocab_.end() || ib == vocab_.end() || iab == vocab_.end())
        throw Error(ErrorCategory::tokenizer, source_, "merge #" + std::to_string(merges_.size()) + " '" + a + " " + b +
                                                           "' uses a token missing from the vocabulary");
      merges_.insert(ia->second, ib->second, iab->second);
    }
  }

  void check_id(int id) const {
    if (id < 0 || id >= vocab_size() || !present_[static_cast<std::size_t>(id)])
      throw Error(ErrorCategory::tokenizer, "decode",
                  "token id " + std::to_string(id) + " is not in the vocabulary (vocab size " + std::to_string(vocab_size()) + ")");
  }

  static void check_ranges(std::string_view text, std::span<const TextRange> plain) {
    for (std::size_t i = 0; i < plain.size(); ++i)
      if (plain[i].begin >= plain[i].end || plain[i].end > text.size() || (i > 0 && plain[i].begin < plain[i - 1].end))
        throw Error(ErrorCategory::tokenizer, "encode",
                    "plain-text range #" + std::to_string(i) + " is empty, unsorted or beyond the text's " +
                        std::to_string(text.size()) + " bytes");
  }

  // A text segment between raw-matched added tokens: NFC, then normalized added tokens (none
  // inside `plain`, ranges of the segment), then BPE.
  void encode_normalizing(std::string_view text, std::span<const TextRange> plain, const EncodeOptions& options,
                          std::vector<int>& ids) const {
    std::string normalized;
    std::vector<TextRange> moved;  // `plain` in the normalized text
    if (nfc_ && !detail::is_nfc_quick(text)) {
      normalized = plain.empty() ? detail::nfc_full(text) : nfc_pieces(text, plain, moved);
      text = normalized;
      plain = moved;
    }
    if (!options.parse_added || normalized_matcher_.empty()) return encode_words(text, ids);
    std::vector<detail::Segment> segments;
    normalized_matcher_.split(text, options.parse_special, segments, plain);
    for (const auto& segment : segments) {
      if (segment.id >= 0) ids.push_back(segment.id);
      else encode_words(segment.text, ids);
    }
  }

  // NFC of each piece between range edges, so the ranges can follow the text; differs from
  // nfc_full(text) only where a character would compose across an edge.
  static std::string nfc_pieces(std::string_view text, std::span<const TextRange> plain, std::vector<TextRange>& moved) {
    std::string out;
    std::size_t pos = 0;
    auto piece = [&](std::size_t end) {
      if (end > pos) out += detail::nfc_full(text.substr(pos, end - pos));
      pos = end;
    };
    for (const TextRange& r : plain) {
      piece(r.begin);
      const std::size_t begin = out.size();
      piece(r.end);
      detail::add_range(moved, begin, out.size());
    }
    piece(text.size());
    return out;
  }

  void encode_words(std::string_view text, std::vector<int>& ids) const {
    detail::Splitter(text, split_).run([&](std::string_view word) { encode_word(word, ids); });
  }

  void encode_word(std::string_view word, std::vector<int>& ids) const {
    if (word.size() == 1) {
      ids.push_back(byte_ids_[static_cast<unsigned char>(word[0])]);
      return;
    }
    const bool cacheable = word.size() <= detail::WordCache::max_word_bytes;
    if (cacheable && cache_.lookup(word, ids)) return;
    const std::size_t first = ids.size();
    auto whole = ignore_merges_ ? vocab_.find(detail::bytes_to_token_text(word)) : vocab_.end();
    if (whole != vocab_.end()) ids.push_back(whole->second);
    else if (word.size() <= detail::bpe_small_word) detail::bpe_merge_small_word(word, byte_ids_, merges_, ids);
    else detail::bpe_merge_word(word, byte_ids_, merges_, ids);
    if (cacheable) cache_.store(word, ids.data() + first, ids.size() - first);
  }

  std::string source_;
  bool nfc_ = true;
  SplitPattern split_ = SplitPattern::qwen2;
  bool ignore_merges_ = false;
  std::vector<std::string> tokens_;       // [vocab_size] byte-level spelling; "" for holes
  std::vector<std::string> token_bytes_;  // [vocab_size] decoded bytes
  std::vector<bool> present_;             // [vocab_size]
  std::vector<bool> special_;             // [vocab_size]
  std::unordered_map<std::string, int, Hash, std::equal_to<>> vocab_;
  std::array<int, 256> byte_ids_{};
  detail::MergeTable merges_;
  std::vector<AddedToken> added_;
  detail::AddedTokenMatcher raw_matcher_, normalized_matcher_;
  detail::WordCache cache_;
  PostProcessor post_processor_;
};

}  // namespace kylin
