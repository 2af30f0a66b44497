// Fill-in-the-middle prompts for models trained with <|fim_prefix|>, <|fim_suffix|> and
// <|fim_middle|> (Qwen2.5-Coder, Qwen3-Coder). /v1/completions' `suffix` uses the Qwen2.5-Coder
// model card's format, <|fim_prefix|>PREFIX<|fim_suffix|>SUFFIX<|fim_middle|>; llama.cpp's /infill
// its repository-level form (llama.cpp's format_prompt_infill in tools/server): <|repo_name|>
// "myproject\n", each input_extra chunk as <|file_sep|> FILENAME "\n" TEXT, then <|file_sep|>
// "filename\n" before the prefix. The texts are tokenized on their own, between the tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/tokenizer/tokenizer.hpp"

namespace kylin::server {

struct FimTokens {
  int prefix = -1, suffix = -1, middle = -1;
  std::optional<int> repo_name, file_sep;  // the repository-level tokens, when the tokenizer has them
};

// The tokenizer's FIM tokens; nullopt when it lacks any of the three.
inline std::optional<FimTokens> fim_tokens(const Tokenizer& t) {
  const auto pre = t.token_to_id("<|fim_prefix|>"), suf = t.token_to_id("<|fim_suffix|>"), mid = t.token_to_id("<|fim_middle|>");
  if (!pre || !suf || !mid) return std::nullopt;
  return FimTokens{*pre, *suf, *mid, t.token_to_id("<|repo_name|>"), t.token_to_id("<|file_sep|>")};
}

// One input_extra chunk of /infill: a file of the project.
struct FimFile {
  std::string filename;
  std::string text;
};

// How the client's texts are tokenized: as plain text (control-token spellings stay text, the
// server's default) or with the tokenizer's added tokens recognized.
inline EncodeOptions fim_text_options(bool plain) {
  EncodeOptions o;
  o.parse_special = !plain;
  o.parse_added = !plain;
  return o;
}

// <|fim_prefix|> prefix <|fim_suffix|> suffix <|fim_middle|>, `prefix` already tokenized (a
// completion prompt may come as ids).
inline std::vector<int> fim_prompt(const Tokenizer& t, const FimTokens& fim, const std::vector<int>& prefix, std::string_view suffix,
                                   bool plain) {
  std::vector<int> ids{fim.prefix};
  ids.insert(ids.end(), prefix.begin(), prefix.end());
  ids.push_back(fim.suffix);
  const std::vector<int> s = t.encode(suffix, fim_text_options(plain));
  ids.insert(ids.end(), s.begin(), s.end());
  ids.push_back(fim.middle);
  return ids;
}

// The FIM part of llama.cpp's /infill prompt: <|file_sep|> "filename\n" (when the tokenizer has
// the repository tokens), then <|fim_prefix|> input_prefix prompt <|fim_suffix|> input_suffix
// <|fim_middle|>. Never trimmed: what the client is editing.
inline std::vector<int> infill_fim(const Tokenizer& t, const FimTokens& fim, std::string_view input_prefix, std::string_view prompt,
                                   std::string_view input_suffix, bool plain) {
  const EncodeOptions text = fim_text_options(plain);
  std::vector<int> ids;
  if (fim.file_sep) {
    ids.push_back(*fim.file_sep);
    const std::vector<int> name = t.encode("filename\n", text);
    ids.insert(ids.end(), name.begin(), name.end());
  }
  std::vector<int> prefix = t.encode(input_prefix, text);
  const std::vector<int> typed = t.encode(prompt, text);
  prefix.insert(prefix.end(), typed.begin(), typed.end());
  const std::vector<int> middle = fim_prompt(t, fim, prefix, input_suffix, plain);
  ids.insert(ids.end(), middle.begin(), middle.end());
  return ids;
}

// The project's files before the FIM part: <|repo_name|> "myproject\n", then each input_extra
// chunk as <|file_sep|> FILENAME "\n" TEXT (a "--- snippet ---" line without the repository
// tokens), in at most `budget` tokens. Like llama.cpp's format_prompt_infill, which keeps the
// extra context's last n_ctx - n_batch - 2 n_predict tokens, the end is kept and the beginning
// dropped; here by whole chunks, the last ones (editors send the nearest last), and the header
// only when it fits. Chunks are looked at newest first and tokenized only while they may fit:
// one of more than (budget left) x `bytes_per_token` bytes cannot. No budget: every chunk.
// `kept`: how many chunks made it.
struct ContextBudget {
  std::int64_t tokens = 0;
  std::size_t bytes_per_token = 1;  // the most bytes of text one token can cover
};
inline std::vector<int> infill_context(const Tokenizer& t, const FimTokens& fim, const std::vector<FimFile>& extra, bool plain,
                                       std::optional<ContextBudget> budget = std::nullopt, std::size_t* kept = nullptr) {
  const EncodeOptions text = fim_text_options(plain);
  auto append = [&](std::vector<int>& ids, std::string_view s) {
    const std::vector<int> more = t.encode(s, text);
    ids.insert(ids.end(), more.begin(), more.end());
  };
  std::vector<int> header;
  if (fim.repo_name) header.push_back(*fim.repo_name), append(header, "myproject\n");
  std::int64_t left = budget ? budget->tokens - static_cast<std::int64_t>(header.size()) : INT64_MAX;
  std::vector<std::vector<int>> chunks;  // [kept] newest first
  for (auto f = extra.rbegin(); f != extra.rend() && left > 0; ++f) {
    if (budget && (f->filename.size() + f->text.size()) / budget->bytes_per_token > static_cast<std::size_t>(left)) break;
    std::vector<int> ids;
    if (fim.file_sep) ids.push_back(*fim.file_sep), append(ids, f->filename + "\n");
    else append(ids, "\n\n--- snippet ---\n\n");
    append(ids, f->text);
    if (static_cast<std::int64_t>(ids.size()) > left) break;
    left -= static_cast<std::int64_t>(ids.size());
    chunks.push_back(std::move(ids));
  }
  if (kept) *kept = chunks.size();
  if (left < 0) return {};  // not even the header fits
  for (auto c = chunks.rbegin(); c != chunks.rend(); ++c) header.insert(header.end(), c->begin(), c->end());
  return header;
}

// llama.cpp's /infill prompt, untrimmed: the project's files, then the FIM part.
inline std::vector<int> infill_prompt(const Tokenizer& t, const FimTokens& fim, std::string_view input_prefix, std::string_view prompt,
                                      std::string_view input_suffix, const std::vector<FimFile>& extra, bool plain) {
  std::vector<int> ids = infill_context(t, fim, extra, plain);
  const std::vector<int> middle = infill_fim(t, fim, input_prefix, prompt, input_suffix, plain);
  ids.insert(ids.end(), middle.begin(), middle.end());
  return ids;
}

}  // namespace kylin::server
