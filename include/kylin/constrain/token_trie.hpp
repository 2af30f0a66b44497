// TokenTrie: the tokenizer's vocabulary as a byte trie laid out in preorder, built once per
// tokenizer. A constraint walks it with the parser state and skips a whole subtree at the first
// byte the grammar rejects, so tokens sharing a rejected prefix cost one step together.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/tokenizer/tokenizer.hpp"

namespace kylin::constrain {

struct TokenTrie {
  struct Node {
    std::uint8_t byte;       // the byte that leads here from the parent
    std::uint16_t depth;     // 1 for children of the root
    std::int32_t skip;       // index just past this node's subtree
    std::int32_t ids_begin;  // [ids_begin, ids_end) into ids: tokens whose bytes end here
    std::int32_t ids_end;
  };
  std::vector<Node> nodes;    // [n_nodes] preorder
  std::vector<int> ids;       // [n_text_tokens] grouped by node
  std::vector<int> eos;       // [n_eos] ids that end generation
  int think_open = -1, think_close = -1;
  std::size_t vocab = 0;      // logit row length this trie masks
  std::size_t max_depth = 0;  // longest token in bytes
  std::string bytes;                   // every text token's bytes, concatenated
  std::vector<std::uint32_t> offsets;  // [vocab + 1] token id's bytes at [offsets[id], offsets[id+1])
  std::vector<char> is_text;           // [vocab] the token is in the trie

  std::string_view token(int id) const {
    return std::string_view(bytes).substr(offsets[static_cast<std::size_t>(id)],
                                          offsets[static_cast<std::size_t>(id) + 1] - offsets[static_cast<std::size_t>(id)]);
  }

  // Every token with bytes that is not an added token (specials, <think>, tool tags: those are
  // never text a grammar produces unless listed in `added_as_text`, e.g. <tool_call> for a grammar
  // of Qwen3 tool calls); `eos` are the ids allowed once the value is complete.
  static TokenTrie build(const Tokenizer& tokenizer, std::vector<int> eos, std::size_t model_vocab,
                         const std::vector<int>& added_as_text = {}) {
    TokenTrie t;
    t.vocab = model_vocab;
    t.eos = std::move(eos);
    t.think_open = tokenizer.token_to_id("<think>").value_or(-1);
    t.think_close = tokenizer.token_to_id("</think>").value_or(-1);
    std::vector<char> added(static_cast<std::size_t>(tokenizer.vocab_size()), 0);  // [tokenizer vocab]
    for (const AddedToken& a : tokenizer.added_tokens())
      if (a.id >= 0 && a.id < tokenizer.vocab_size()) added[static_cast<std::size_t>(a.id)] = 1;
    for (int id : added_as_text)
      if (id >= 0 && id < tokenizer.vocab_size() && id != t.think_open && id != t.think_close) added[static_cast<std::size_t>(id)] = 0;
    std::vector<int> order;  // [n_text_tokens] ids sorted by bytes
    const int n = std::min(tokenizer.vocab_size(), static_cast<int>(model_vocab));
    for (int id = 0; id < n; ++id)
      if (!added[static_cast<std::size_t>(id)] && tokenizer.id_to_token(id) && !tokenizer.token_bytes(id).empty())
        order.push_back(id);
    t.is_text.assign(model_vocab, 0);
    t.offsets.assign(model_vocab + 1, 0);
    for (std::size_t id = 0; id < model_vocab; ++id) {
      t.offsets[id] = static_cast<std::uint32_t>(t.bytes.size());
      if (id < static_cast<std::size_t>(n) && !added[id] && tokenizer.id_to_token(static_cast<int>(id)))
        t.bytes += tokenizer.token_bytes(static_cast<int>(id));
    }
    t.offsets[model_vocab] = static_cast<std::uint32_t>(t.bytes.size());
    for (int id : order) t.is_text[static_cast<std::size_t>(id)] = 1;
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      const int c = tokenizer.token_bytes(a).compare(tokenizer.token_bytes(b));
      return c != 0 ? c < 0 : a < b;
    });
    std::vector<int> path;  // [depth] node index of each byte of the previous token
    const std::string* prev = nullptr;
    for (int id : order) {
      const std::string& s = tokenizer.token_bytes(id);
      std::size_t common = 0;
      if (prev)
        while (common < prev->size() && common < s.size() && (*prev)[common] == s[common]) ++common;
      for (std::size_t d = common; d < path.size(); ++d) t.nodes[static_cast<std::size_t>(path[d])].skip = static_cast<std::int32_t>(t.nodes.size());
      path.resize(common);
      for (std::size_t d = common; d < s.size(); ++d) {
        path.push_back(static_cast<int>(t.nodes.size()));
        const auto here = static_cast<std::int32_t>(t.ids.size());
        t.nodes.push_back({static_cast<std::uint8_t>(s[d]), static_cast<std::uint16_t>(d + 1), 0, here, here});
      }
      t.ids.push_back(id);  // identical bytes sort together, so a node's ids stay contiguous
      t.nodes[static_cast<std::size_t>(path.back())].ids_end = static_cast<std::int32_t>(t.ids.size());
      t.max_depth = std::max(t.max_depth, s.size());
      prev = &s;
    }
    for (int p : path) t.nodes[static_cast<std::size_t>(p)].skip = static_cast<std::int32_t>(t.nodes.size());
    return t;
  }
};

}  // namespace kylin::constrain
