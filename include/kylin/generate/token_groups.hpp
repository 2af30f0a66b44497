// Groups of independent token-id inputs (texts to embed, documents to rerank) for one batched
// forward each, so that the temporary caches and outputs stay bounded however many inputs come.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kylin::detail {

// Calls fn(begin, end, tokens) for consecutive groups [begin, end) of inputs holding at most
// max_tokens tokens in all (an input longer than that forms a group alone), in input order.
template <class Fn>
void for_each_token_group(std::span<const std::vector<int>> inputs, std::int64_t max_tokens, Fn fn) {
  for (std::size_t begin = 0; begin < inputs.size();) {
    std::size_t end = begin;
    std::int64_t tokens = 0;
    while (end < inputs.size() && (end == begin || tokens + static_cast<std::int64_t>(inputs[end].size()) <= max_tokens))
      tokens += static_cast<std::int64_t>(inputs[end++].size());
    fn(begin, end, tokens);
    begin = end;
  }
}

}  // namespace kylin::detail
