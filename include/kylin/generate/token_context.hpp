// TokenContext: the tokens of one generation so far (the prompt, then what was generated), as the
// speculative drafts and the caches kept in step with them read it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>

namespace kylin {

// The context of a generation: the prompt, then the generated tokens.
struct TokenContext {
  std::span<const int> prompt, generated;
  std::size_t size() const { return prompt.size() + generated.size(); }
  int operator[](std::size_t i) const { return i < prompt.size() ? prompt[i] : generated[i - prompt.size()]; }
  // Length of the longest common prefix of `tokens` and this context.
  std::size_t common_prefix(std::span<const int> tokens) const {
    const std::size_t n = std::min(tokens.size(), size());
    std::size_t i = 0;
    while (i < n && tokens[i] == (*this)[i]) ++i;
    return i;
  }
};

}  // namespace kylin
