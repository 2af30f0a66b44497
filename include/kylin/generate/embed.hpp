// Embeddings of a sentence-transformers model (Qwen3-Embedding), as its encode() computes them:
// prompt + text through the tokenizer and its post-processor, the batched forward for final hidden
// states, pooling (last token, mean or CLS), optional Matryoshka truncation, L2 normalisation.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kylin/core/error.hpp"
#include "kylin/generate/token_groups.hpp"
#include "kylin/io/sentence_transformers.hpp"
#include "kylin/model/model.hpp"
#include "kylin/tokenizer/tokenizer.hpp"

namespace kylin {

struct EmbedOptions {
  // "" = the directory's default_prompt_name (none when it has none); else a key of
  // config_sentence_transformers.json "prompts", prepended to every text. Text inputs only.
  std::string prompt_name = "";
  std::optional<std::int64_t> dimensions = std::nullopt;  // Matryoshka: the first N values, re-normalised; N in [1, hidden]
};

struct EmbedResult {
  std::vector<std::vector<float>> embeddings;  // [inputs][dimensions or hidden], L2-normalised
  std::int64_t prompt_tokens = 0;              // ids run through the model, over all inputs (OpenAI usage)
};

namespace detail {

inline std::string input_name(std::size_t i) { return "input " + std::to_string(i); }

// Everything checked before anything runs, each error naming the input.
inline void check_embed_inputs(std::span<const std::vector<int>> inputs, std::int64_t vocab, std::int64_t context_length) {
  if (inputs.empty()) throw Error(ErrorCategory::request, "input", "no inputs to embed");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const auto n = static_cast<std::int64_t>(inputs[i].size());
    if (n == 0) throw Error(ErrorCategory::request, input_name(i), "is empty");
    if (n > context_length)
      throw Error(ErrorCategory::request, input_name(i), std::to_string(n) + " tokens exceed the context length of " +
                                                             std::to_string(context_length));
    for (int id : inputs[i])
      if (id < 0 || id >= vocab)
        throw Error(ErrorCategory::request, input_name(i), "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                                               std::to_string(vocab) + ")");
  }
}

inline std::int64_t embed_width(const EmbedOptions& o, std::int64_t hidden) {
  if (!o.dimensions) return hidden;
  if (*o.dimensions < 1 || *o.dimensions > hidden)
    throw Error(ErrorCategory::request, "dimensions", std::to_string(*o.dimensions) + " is outside [1, " + std::to_string(hidden) + "]");
  return *o.dimensions;
}

// One input's pooled vector from its final hidden states `rows` ([n, hidden] for mean and CLS
// pooling, [1, hidden] for last-token pooling), cut to `width` values and L2-normalised. A zero
// vector stays zero, as torch's F.normalize leaves it.
inline std::vector<float> pool(io::Pooling pooling, std::span<const float> rows, std::int64_t hidden, std::int64_t width) {
  const auto H = static_cast<std::size_t>(hidden), W = static_cast<std::size_t>(width), n = rows.size() / H;
  std::vector<double> v(W);  // [width]
  if (pooling == io::Pooling::mean) {
    for (std::size_t r = 0; r < n; ++r)
      for (std::size_t j = 0; j < W; ++j) v[j] += rows[r * H + j];
    for (double& x : v) x /= static_cast<double>(n);
  } else {  // last token (its only row) or CLS (the first row)
    for (std::size_t j = 0; j < W; ++j) v[j] = rows[j];
  }
  double norm = 0;
  for (double x : v) norm += x * x;
  norm = std::sqrt(norm);
  std::vector<float> out(W);  // [width]
  for (std::size_t j = 0; j < W; ++j) out[j] = norm > 0 ? static_cast<float>(v[j] / norm) : 0.0f;
  return out;
}

// `inputs` as one batched forward, each in its own cache of exactly its length.
inline void embed_group(Model& model, io::Pooling pooling, std::span<const std::vector<int>> inputs, std::int64_t width,
                        EmbedResult& result) {
  const std::int64_t H = model.hidden_size();
  const bool all = pooling != io::Pooling::last_token;
  std::vector<KVCache> caches;  // [inputs]; reserved: SequenceInputs refer to them
  caches.reserve(inputs.size());
  std::vector<std::size_t> first_row;  // [inputs] each input's first row of `hidden`
  std::size_t rows = 0;
  for (const auto& ids : inputs) {
    caches.push_back(model.new_cache(static_cast<std::int64_t>(ids.size())));
    first_row.push_back(rows);
    rows += all ? ids.size() : 1;
  }
  std::vector<float> hidden(rows * static_cast<std::size_t>(H));  // [rows, hidden]
  std::vector<SequenceInput> batch;  // [inputs]
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::size_t n = all ? inputs[i].size() : 1;
    batch.push_back({inputs[i], caches[i],
                     {.hidden = std::span<float>(hidden).subspan(first_row[i] * static_cast<std::size_t>(H), n * static_cast<std::size_t>(H)),
                      .positions = all ? Positions::all : Positions::last}});
  }
  model.forward(batch);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::size_t n = all && pooling == io::Pooling::mean ? inputs[i].size() : 1;
    const auto row = std::span<const float>(hidden).subspan(first_row[i] * static_cast<std::size_t>(H), n * static_cast<std::size_t>(H));
    result.embeddings.push_back(pool(pooling, row, H, width));
  }
}

}  // namespace detail

// Each text's ids: the prompt (options.prompt_name, else the default prompt) prepended, then the
// tokenizer with its post-processor (Qwen3-Embedding appends <|endoftext|>, whose state is pooled).
inline std::vector<std::vector<int>> embedding_ids(const Tokenizer& tokenizer, const io::EmbeddingInfo& info,
                                                   std::span<const std::string> texts, const EmbedOptions& o) {
  const std::string& name = o.prompt_name.empty() ? info.default_prompt_name : o.prompt_name;
  const std::string* prompt = nullptr;
  if (!name.empty() && !(prompt = info.prompt(name)))
    throw Error(ErrorCategory::request, "prompt_name", "'" + name + "' is not a prompt of this model (" + info.prompt_names() + ")");
  std::vector<std::vector<int>> ids;  // [texts][tokens]
  for (std::size_t i = 0; i < texts.size(); ++i) {
    if (texts[i].empty()) throw Error(ErrorCategory::request, detail::input_name(i), "is empty");
    try {
      ids.push_back(tokenizer.encode(prompt ? *prompt + texts[i] : texts[i], {.add_special_tokens = true}));
    } catch (const Error& e) {
      throw Error(ErrorCategory::request, detail::input_name(i), e.what());
    }
  }
  return ids;
}

// Embeddings of token-id inputs, in groups of up to max_pass_rows tokens (one longer input alone),
// so that the temporary caches stay small however many inputs come.
inline EmbedResult embed_ids(Model& model, const io::EmbeddingInfo& info, std::int64_t context_length,
                             std::span<const std::vector<int>> inputs, const EmbedOptions& o) {
  detail::check_embed_inputs(inputs, model.vocab_size(), context_length);
  const std::int64_t width = detail::embed_width(o, model.hidden_size());
  EmbedResult result;
  detail::for_each_token_group(inputs, model.max_pass_rows(), [&](std::size_t begin, std::size_t end, std::int64_t tokens) {
    detail::embed_group(model, info.pooling, inputs.subspan(begin, end - begin), width, result);
    result.prompt_tokens += tokens;
  });
  return result;
}

}  // namespace kylin
