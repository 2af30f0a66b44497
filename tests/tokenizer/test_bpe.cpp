// The allocation-free BPE loop for short words gives the same ids as the heap loop (HF's
// algorithm) on random words, over the real Qwen3 merges; and the merge table finds every merge.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <unordered_map>

#include "kylin/tokenizer/bpe.hpp"
#include "kylin/tokenizer/tokenizer_files.hpp"
#include "tokenizer_test_util.hpp"

namespace {

struct Merges {
  kylin::detail::MergeTable table;
  std::array<int, 256> byte_ids{};
  std::size_t count = 0;
};

const Merges& qwen3_merges() {
  static const Merges merges = [] {
    const auto spec = kylin::detail::load_tokenizer_json(kylin::test::qwen3_dir + "/tokenizer.json");
    std::unordered_map<std::string, int> vocab(spec.vocab.begin(), spec.vocab.end());
    Merges m;
    m.table.reserve(spec.merges.size());
    for (const auto& [a, b] : spec.merges) m.table.insert(vocab.at(a), vocab.at(b), vocab.at(a + b));
    for (int b = 0; b < 256; ++b)
      m.byte_ids[static_cast<std::size_t>(b)] = vocab.at(kylin::detail::bytes_to_token_text(std::string(1, static_cast<char>(b))));
    m.count = spec.merges.size();
    return m;
  }();
  return merges;
}

}  // namespace

TEST_CASE("the merge table returns each merge's rank and merged id") {
  const auto spec = kylin::detail::load_tokenizer_json(kylin::test::qwen3_dir + "/tokenizer.json");
  std::unordered_map<std::string, int> vocab(spec.vocab.begin(), spec.vocab.end());
  const auto& m = qwen3_merges();
  for (std::size_t rank = 0; rank < spec.merges.size(); rank += 97) {
    const auto& [a, b] = spec.merges[rank];
    CHECK(m.table.rank(vocab.at(a), vocab.at(b)) == static_cast<int>(rank));
    CHECK(m.table.merged_id(static_cast<int>(rank)) == vocab.at(a + b));
  }
  CHECK(m.table.rank(vocab.at("Ġ"), vocab.at("Ġ")) == 0);
  CHECK(m.table.rank(151000, 151001) == kylin::detail::MergeTable::none);
}

TEST_CASE("short-word BPE equals the heap BPE on 20,000 random words up to 64 bytes") {
  const auto& m = qwen3_merges();
  std::mt19937 rng(31337);
  const std::string letters = "etaoinshrdlucmfwypvbgkqjxz ETAOIN'.,0123456789";
  std::uniform_int_distribution<std::size_t> length(2, kylin::detail::bpe_small_word), pick(0, letters.size() - 1);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int n = 0; n < 20000; ++n) {
    std::string word;
    for (std::size_t k = length(rng); k > 0; --k)
      word += n % 4 == 3 ? static_cast<char>(byte(rng)) : letters[pick(rng)];  // some raw bytes too
    std::vector<int> small, heap;
    kylin::detail::bpe_merge_small_word(word, m.byte_ids, m.table, small);
    kylin::detail::bpe_merge_word(word, m.byte_ids, m.table, heap);
    if (small != heap) {
      CAPTURE(word);
      REQUIRE(small == heap);
    }
  }
}
