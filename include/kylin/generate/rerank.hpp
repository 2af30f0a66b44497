// Reranking with a Qwen3-Reranker (a plain Qwen3ForCausalLM): each document's relevance is
// P("yes") of the softmax over the last position's "no" and "yes" logits, after the prompt of
// the Qwen3-Reranker model card. Documents run through the batched forward in groups.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/chat/chat_template.hpp"
#include "kylin/core/error.hpp"
#include "kylin/generate/token_groups.hpp"
#include "kylin/model/model.hpp"
#include "kylin/tokenizer/tokenizer.hpp"

namespace kylin {

struct RerankOptions {
  std::string instruction = "Given a web search query, retrieve relevant passages that answer the query";
  std::optional<std::int64_t> top_n = std::nullopt;  // keep the best N (N >= 1); absent: all
  // plain: text in the instruction, query and documents that spells <|im_end|>, </think> etc.
  // stays text, so a document cannot close the turn and write the answer itself; special:
  // transformers' tokenization of the whole prompt (the model card's code).
  ContentTokens content_tokens = ContentTokens::plain;
};

struct RerankResult {
  std::int64_t index = 0;  // into the documents as given
  double score = 0;        // P(yes) in [0, 1]
};

struct Reranking {
  std::vector<RerankResult> results;  // by score descending (ties: lower index first), cut to top_n
  std::int64_t prompt_tokens = 0;     // ids run through the model, over all documents
};

// The ids whose logits decide: the answer can only be "yes" or "no".
struct RerankAnswerIds {
  int yes = 0;
  int no = 0;
};

inline RerankAnswerIds rerank_answer_ids(const Tokenizer& tokenizer) {
  auto id = [&](std::string_view token) {
    const std::optional<int> found = tokenizer.token_to_id(token);
    if (!found)
      throw Error(ErrorCategory::tokenizer, "reranking", "the tokenizer has no token '" + std::string(token) +
                                                             "'; a Qwen3-Reranker answers with the single tokens 'yes' and 'no'");
    return *found;
  };
  return {id("yes"), id("no")};
}

// The prompt, byte for byte as the Qwen3-Reranker model card builds it: the chat turns written
// out, the assistant's turn opened with an empty think block. `from_request` holds the byte ranges
// of the instruction, query and document, which ContentTokens::plain tokenizes as text.
inline RenderedPrompt rerank_rendered_prompt(std::string_view instruction, std::string_view query, std::string_view document) {
  RenderedPrompt p;
  p.text =
      "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. "
      "Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n<Instruct>: ";
  auto add = [&](std::string_view part) {
    detail::add_range(p.from_request, p.text.size(), p.text.size() + part.size());
    p.text.append(part);
  };
  add(instruction);
  p.text += "\n<Query>: ";
  add(query);
  p.text += "\n<Document>: ";
  add(document);
  p.text += "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
  return p;
}

inline std::string rerank_prompt(std::string_view instruction, std::string_view query, std::string_view document) {
  return rerank_rendered_prompt(instruction, query, document).text;
}

namespace detail {

inline std::string document_name(std::size_t i) { return "document " + std::to_string(i); }

inline std::vector<int> rerank_encode(const Tokenizer& tokenizer, const RenderedPrompt& p, ContentTokens content) {
  return content == ContentTokens::plain ? tokenizer.encode_with_plain(p.text, p.from_request) : tokenizer.encode(p.text);
}

// The logits of `ids` (each a document's prompt) at their last positions, one batched forward;
// returns each one's P(yes).
inline void score_group(Model& model, RerankAnswerIds answer, std::span<const std::vector<int>> ids, std::int64_t first_index,
                        std::vector<RerankResult>& out) {
  const auto V = static_cast<std::size_t>(model.vocab_size());
  std::vector<KVCache> caches;  // [group]; reserved: SequenceInputs refer to them
  caches.reserve(ids.size());
  for (const auto& p : ids) caches.push_back(model.new_cache(static_cast<std::int64_t>(p.size())));
  std::vector<float> logits(ids.size() * V);  // [group, vocab]
  std::vector<SequenceInput> batch;           // [group]
  for (std::size_t i = 0; i < ids.size(); ++i)
    batch.push_back({ids[i], caches[i], {.logits = std::span<float>(logits).subspan(i * V, V), .positions = Positions::last}});
  model.forward(batch);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const double yes = logits[i * V + static_cast<std::size_t>(answer.yes)];
    const double no = logits[i * V + static_cast<std::size_t>(answer.no)];
    // softmax([no, yes])[1], written so that neither exponential can overflow
    const double m = std::max(yes, no);
    const double e_yes = std::exp(yes - m), e_no = std::exp(no - m);
    out.push_back({first_index + static_cast<std::int64_t>(i), e_yes / (e_yes + e_no)});
  }
}

}  // namespace detail

// The tokens of the prompt around a document: template, instruction and query with an empty document.
inline std::int64_t rerank_prompt_tokens(const Tokenizer& tokenizer, std::string_view query, const RerankOptions& o) {
  return static_cast<std::int64_t>(detail::rerank_encode(tokenizer, rerank_rendered_prompt(o.instruction, query, ""), o.content_tokens).size());
}

// A query and instruction that leave no room for a document in `context_length` tokens: an Error
// (request) whose context is "query" or "instruction", whichever has more tokens, not document 0.
inline void check_rerank_query(const Tokenizer& tokenizer, std::string_view query, const RerankOptions& o, std::int64_t context_length) {
  const std::int64_t n = rerank_prompt_tokens(tokenizer, query, o);
  if (n < context_length) return;
  auto tokens_of = [&](std::string_view text) {
    const TextRange all{0, text.size()};
    return tokenizer.encode_with_plain(text, std::span(&all, 1)).size();
  };
  const bool instruction = tokens_of(o.instruction) > tokens_of(query);
  throw Error(ErrorCategory::request, instruction ? "instruction" : "query",
              "the prompt around the documents (template, instruction and query) has " + std::to_string(n) +
                  " tokens, leaving no room for a document in the context length of " + std::to_string(context_length));
}

// Each document's prompt ids (the prompt carries its own special tokens; the instruction, query and
// documents are text under ContentTokens::plain). Everything a request can get wrong is refused
// here, before any forward pass.
inline std::vector<std::vector<int>> rerank_ids(const Tokenizer& tokenizer, std::string_view query,
                                                std::span<const std::string> documents, const RerankOptions& o,
                                                std::int64_t context_length) {
  if (documents.empty()) throw Error(ErrorCategory::request, "documents", "no documents to rerank");
  if (query.empty()) throw Error(ErrorCategory::request, "query", "is empty");
  if (o.top_n && *o.top_n < 1) throw Error(ErrorCategory::request, "top_n", std::to_string(*o.top_n) + " is not at least 1");
  check_rerank_query(tokenizer, query, o, context_length);
  std::vector<std::vector<int>> ids;  // [documents][tokens]
  for (std::size_t i = 0; i < documents.size(); ++i) {
    try {
      ids.push_back(detail::rerank_encode(tokenizer, rerank_rendered_prompt(o.instruction, query, documents[i]), o.content_tokens));
    } catch (const Error& e) {
      throw Error(ErrorCategory::request, detail::document_name(i), e.what());
    }
    const auto n = static_cast<std::int64_t>(ids.back().size());
    if (n > context_length)
      throw Error(ErrorCategory::request, detail::document_name(i), "its prompt has " + std::to_string(n) +
                                                                        " tokens, more than the context length of " +
                                                                        std::to_string(context_length));
  }
  return ids;
}

// Scores prompt ids (from rerank_ids) in groups of up to max_pass_rows tokens (a longer prompt
// alone), so the temporary caches and logits stay small however many documents come; then sorts.
inline Reranking rerank_scores(Model& model, RerankAnswerIds answer, std::span<const std::vector<int>> ids,
                               std::optional<std::int64_t> top_n) {
  Reranking r;
  detail::for_each_token_group(ids, model.max_pass_rows(), [&](std::size_t begin, std::size_t end, std::int64_t tokens) {
    detail::score_group(model, answer, ids.subspan(begin, end - begin), static_cast<std::int64_t>(begin), r.results);
    r.prompt_tokens += tokens;
  });
  std::stable_sort(r.results.begin(), r.results.end(), [](const RerankResult& a, const RerankResult& b) { return a.score > b.score; });
  if (top_n && *top_n < static_cast<std::int64_t>(r.results.size())) r.results.resize(static_cast<std::size_t>(*top_n));
  return r;
}

}  // namespace kylin
