// Added tokens (<|im_start|>, <think>, ...): found in the text before BPE, leftmost then longest
// match first, with HF's AddedToken flags: single_word (no word character on either side),
// lstrip/rstrip (swallow the whitespace on that side), normalized (matched after NFC), special.
#pragma once

#include <algorithm>
#include <array>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/tokenizer/text_range.hpp"
#include "kylin/tokenizer/unicode.hpp"

namespace kylin {

struct AddedToken {
  int id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool single_word = false;
};

}  // namespace kylin

namespace kylin::detail {

// A piece of the input: an added token's id, or text (id < 0) for the normalizer and BPE.
struct Segment {
  int id;
  std::string_view text;
};

inline char32_t last_code_point(std::string_view s) {
  std::size_t i = s.size();
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
  if (i > 0) --i;
  std::size_t len = 0;
  return decode_utf8(s, i, len);
}

inline bool is_white_space(char32_t cp) { return (code_point_flags(cp) & unicode_tables::space) != 0; }
inline bool is_word_char(char32_t cp) { return (code_point_flags(cp) & unicode_tables::word) != 0; }

// Matches a set of added tokens as HF's AddedVocabulary::find_matches does over one sentence.
class AddedTokenMatcher {
 public:
  // `contents[i]` is what is searched for tokens[i] (its NFC form when normalized).
  void add(const AddedToken& token, std::string content) {
    if (content.empty()) return;
    first_byte_[static_cast<unsigned char>(content[0])] = true;
    entries_.push_back({&token, std::move(content)});
    std::stable_sort(entries_.begin(), entries_.end(),
                     [](const Entry& a, const Entry& b) { return a.content.size() > b.content.size(); });
  }
  bool empty() const { return entries_.empty(); }

  // Splits `sentence` into segments; tokens with special=true are skipped unless parse_special.
  // No token is matched that shares a byte with `plain` (sorted ranges of the sentence): there
  // the search goes on at the next byte, so a token right after a plain range is still found.
  void split(std::string_view sentence, bool parse_special, std::vector<Segment>& out,
             std::span<const TextRange> plain = {}) const {
    std::size_t offset = 0;  // end of the last emitted segment
    for (std::size_t pos = 0; pos < sentence.size();) {
      const Entry* hit = longest_at(sentence, pos);
      if (hit == nullptr || (!plain.empty() && overlaps(plain, pos, pos + hit->content.size()))) {
        ++pos;
        continue;
      }
      std::size_t start = pos, stop = pos + hit->content.size();
      pos = stop;  // a rejected match still consumes its text, as with HF's non-overlapping search
      const AddedToken& t = *hit->token;
      if (t.special && !parse_special) continue;
      if (t.single_word && ((start > 0 && is_word_char(last_code_point(sentence.substr(0, start)))) ||
                            (stop < sentence.size() && is_word_char(first_code_point(sentence, stop)))))
        continue;
      if (t.lstrip) start = std::max(offset, start - trailing_space(sentence.substr(0, start)));
      if (t.rstrip) stop += leading_space(sentence.substr(stop));
      if (offset < start) out.push_back({-1, sentence.substr(offset, start - offset)});
      out.push_back({t.id, sentence.substr(start, stop - start)});
      offset = pos = std::max(pos, stop);
    }
    if (offset < sentence.size() || sentence.empty()) out.push_back({-1, sentence.substr(offset)});
  }

 private:
  struct Entry {
    const AddedToken* token;
    std::string content;
  };

  const Entry* longest_at(std::string_view s, std::size_t pos) const {
    if (!first_byte_[static_cast<unsigned char>(s[pos])]) return nullptr;
    for (const Entry& e : entries_)  // longest first
      if (s.compare(pos, e.content.size(), e.content) == 0) return &e;
    return nullptr;
  }
  static char32_t first_code_point(std::string_view s, std::size_t i) {
    std::size_t len = 0;
    return decode_utf8(s, i, len);
  }
  // Bytes of whitespace at the end / start of s.
  static std::size_t trailing_space(std::string_view s) {
    std::size_t n = 0;
    while (n < s.size() && is_white_space(last_code_point(s.substr(0, s.size() - n)))) {
      std::size_t i = s.size() - n - 1;
      while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
      n = s.size() - i;
    }
    return n;
  }
  static std::size_t leading_space(std::string_view s) {
    std::size_t n = 0;
    while (n < s.size()) {
      std::size_t len = 0;
      if (!is_white_space(decode_utf8(s, n, len))) break;
      n += len;
    }
    return n;
  }

  std::vector<Entry> entries_;
  std::array<bool, 256> first_byte_{};
};

}  // namespace kylin::detail
