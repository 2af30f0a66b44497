// Token log-probabilities (OpenAI's logprobs / top_logprobs) and logit_bias for one request: a
// LogprobRecorder sees each step's logit row before sampling and each sampled token, on the
// inference thread, and its entries become OpenAI's chat and legacy-completions logprobs shapes.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kylin/core/json.hpp"
#include "kylin/generate/sampler_vocab.hpp"
#include "kylin/generate/session.hpp"
#include "kylin/tokenizer/tokenizer.hpp"
#include "kylin/tokenizer/unicode.hpp"

namespace kylin::server {

inline constexpr int max_top_logprobs = 20;  // OpenAI's chat limit; the legacy API's is 5

// What a request asks of the logit rows: additive biases, tokens never to sample, and logprobs
// with `top` alternatives.
struct LogprobRequest {
  bool logprobs = false;
  int top = 0;
  std::vector<std::pair<int, float>> logit_bias;  // (token id, bias in [-100, 100])
  std::vector<int> masked;                        // ids set to -inf (ignore_eos: the EOS and end-of-turn ids)
  bool active() const { return logprobs || !logit_bias.empty() || !masked.empty(); }
};

struct TokenLogprob {
  int id = 0;
  float logprob = 0;
  int n_top = 0;
  std::array<std::pair<int, float>, max_top_logprobs> top{};  // (id, logprob), most likely first
};

// The values are the log-softmax of the row after logit_bias and before the sampler's penalties
// and temperature: the model's distribution as the request shaped it, the same for any sampling
// settings (as OpenAI's are), over the ids the sampler may draw (SampleableIds).
class LogprobRecorder {
 public:
  LogprobRecorder(LogprobRequest request, const SampleableIds& sampleable, std::int64_t expected_tokens)
      : request_(std::move(request)), sampleable_(sampleable) {
    if (request_.logprobs) entries_.reserve(static_cast<std::size_t>(std::clamp<std::int64_t>(expected_tokens, 1, 4096)));
  }
  // The recorder keeps a reference to `sampleable` (the engine's, alive as long as it is).
  LogprobRecorder(LogprobRequest, SampleableIds&&, std::int64_t) = delete;

  void see_row(std::span<float> row) {
    for (const auto& [id, bias] : request_.logit_bias)
      if (static_cast<std::size_t>(id) < row.size()) row[static_cast<std::size_t>(id)] += bias;
    for (int id : request_.masked)
      if (static_cast<std::size_t>(id) < row.size()) row[static_cast<std::size_t>(id)] = -std::numeric_limits<float>::infinity();
    if (!request_.logprobs) return;
    const std::size_t end = std::min(row.size(), sampleable_.end());
    row_.resize(end);  // allocates on the first row only
    std::copy(row.begin(), row.begin() + static_cast<std::ptrdiff_t>(end), row_.begin());
    for (int h : sampleable_.holes()) row_[static_cast<std::size_t>(h)] = -std::numeric_limits<float>::infinity();
    float max = -std::numeric_limits<float>::infinity();
    for (float x : row_) max = std::max(max, x);
    double sum = 0;
    for (float x : row_) sum += std::exp(static_cast<double>(x - max));
    log_norm_ = static_cast<double>(max) + std::log(sum);
    keep_top();
  }

  void see_token(int id) {
    if (!request_.logprobs) return;
    TokenLogprob t;
    t.id = id;
    t.logprob = static_cast<std::size_t>(id) < row_.size() ? logprob(row_[static_cast<std::size_t>(id)]) : minimum;
    t.n_top = n_top_;
    std::copy_n(top_.begin(), n_top_, t.top.begin());
    entries_.push_back(t);
  }

  // The entries recorded since the last take(): the tokens of one streamed chunk.
  std::span<const TokenLogprob> take() {
    const std::size_t from = taken_;
    taken_ = entries_.size();
    return std::span<const TokenLogprob>(entries_).subspan(from);
  }
  const std::vector<TokenLogprob>& all() const { return entries_; }
  bool logprobs() const { return request_.logprobs; }

  // OpenAI reports -9999 where a probability underflows; JSON has no -inf.
  static constexpr float minimum = -9999.0f;

 private:
  float logprob(float logit) const {
    const double v = static_cast<double>(logit) - log_norm_;
    return std::isfinite(v) ? std::max(static_cast<float>(v), minimum) : minimum;
  }

  // The request's `top` largest logits, by insertion into a short sorted array: one compare per
  // id in the common case.
  void keep_top() {
    n_top_ = 0;
    const int k = request_.top;
    if (k == 0) return;
    std::array<std::pair<int, float>, max_top_logprobs> best{};
    for (std::size_t i = 0; i < row_.size(); ++i) {
      const float x = row_[i];
      if (n_top_ == k && !(x > best[static_cast<std::size_t>(k - 1)].second)) continue;
      int j = n_top_ < k ? n_top_++ : k - 1;
      for (; j > 0 && best[static_cast<std::size_t>(j - 1)].second < x; --j) best[static_cast<std::size_t>(j)] = best[static_cast<std::size_t>(j - 1)];
      best[static_cast<std::size_t>(j)] = {static_cast<int>(i), x};
    }
    for (int j = 0; j < n_top_; ++j) top_[static_cast<std::size_t>(j)] = {best[static_cast<std::size_t>(j)].first, logprob(best[static_cast<std::size_t>(j)].second)};
  }

  LogprobRequest request_;
  const SampleableIds& sampleable_;
  std::vector<float> row_;  // [sampleable end] the biased row of the step
  double log_norm_ = 0;     // log of the row's softmax denominator
  int n_top_ = 0;
  std::array<std::pair<int, float>, max_top_logprobs> top_{};
  std::vector<TokenLogprob> entries_;
  std::size_t taken_ = 0;
};

// A recorder wired into `o` (on_logits, on_token) when the request asks for logprobs or a
// logit_bias; null otherwise, and then generation pays nothing per token.
inline std::shared_ptr<LogprobRecorder> attach_logprobs(GenerateOptions& o, const LogprobRequest& request,
                                                        const SampleableIds& sampleable) {
  if (!request.active()) return nullptr;
  auto recorder = std::make_shared<LogprobRecorder>(request, sampleable, o.max_new_tokens);
  o.on_logits = [recorder](std::span<float> row) { recorder->see_row(row); };
  o.on_token = [recorder](int id) { recorder->see_token(id); };
  return recorder;
}

// OpenAI's token text: the token's UTF-8, or "bytes:\xNN..." for a token that holds part of a
// character (the bytes field has them exactly).
inline std::string logprob_token_text(const Tokenizer& tokenizer, int id) {
  const std::string& bytes = tokenizer.token_bytes(id);
  if (kylin::detail::find_invalid_utf8(bytes) == std::string::npos) return bytes;
  static constexpr char hex[] = "0123456789abcdef";
  std::string out = "bytes:";
  for (unsigned char c : bytes) out += {'\\', 'x', hex[c >> 4], hex[c & 15]};
  return out;
}

namespace detail {

inline json::Value token_bytes_json(const Tokenizer& tokenizer, int id) {
  json::Value out = json::Array{};
  for (unsigned char c : tokenizer.token_bytes(id)) out.push_back(static_cast<std::int64_t>(c));
  return out;
}

inline json::Value chat_token_logprob(const Tokenizer& tokenizer, int id, float logprob) {
  json::Value t = json::Object{};
  t.set("token", logprob_token_text(tokenizer, id));
  t.set("logprob", static_cast<double>(logprob));
  t.set("bytes", token_bytes_json(tokenizer, id));
  return t;
}

// Characters (code points) in a token's bytes: its share of text_offset.
inline std::int64_t code_points(std::string_view bytes) {
  return std::count_if(bytes.begin(), bytes.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

}  // namespace detail

// choices[].logprobs of a chat answer or chunk: {"content": [{token, logprob, bytes,
// top_logprobs: [{token, logprob, bytes}]}], "refusal": null}.
inline json::Value chat_logprobs(const Tokenizer& tokenizer, std::span<const TokenLogprob> entries) {
  json::Value content = json::Array{};
  for (const TokenLogprob& e : entries) {
    json::Value t = detail::chat_token_logprob(tokenizer, e.id, e.logprob);
    json::Value top = json::Array{};
    for (int j = 0; j < e.n_top; ++j) {
      const auto& [id, lp] = e.top[static_cast<std::size_t>(j)];
      top.push_back(detail::chat_token_logprob(tokenizer, id, lp));
    }
    t.set("top_logprobs", std::move(top));
    content.push_back(std::move(t));
  }
  json::Value out = json::Object{};
  out.set("content", std::move(content));
  out.set("refusal", json::Value());
  return out;
}

// choices[].logprobs of /v1/completions: parallel lists tokens, token_logprobs, top_logprobs
// ({token: logprob}) and text_offset, the code-point offset of each token in the completion text
// (`offset` carries it from chunk to chunk of a stream).
inline json::Value completion_logprobs(const Tokenizer& tokenizer, std::span<const TokenLogprob> entries, std::int64_t& offset) {
  json::Value tokens = json::Array{}, logprobs = json::Array{}, tops = json::Array{}, offsets = json::Array{};
  for (const TokenLogprob& e : entries) {
    tokens.push_back(logprob_token_text(tokenizer, e.id));
    logprobs.push_back(static_cast<double>(e.logprob));
    json::Value top = json::Object{};
    for (int j = 0; j < e.n_top; ++j) {
      const auto& [id, lp] = e.top[static_cast<std::size_t>(j)];
      top.set(logprob_token_text(tokenizer, id), static_cast<double>(lp));
    }
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += detail::code_points(tokenizer.token_bytes(e.id));
  }
  json::Value out = json::Object{};
  out.set("tokens", std::move(tokens));
  out.set("token_logprobs", std::move(logprobs));
  out.set("top_logprobs", std::move(tops));
  out.set("text_offset", std::move(offsets));
  return out;
}

}  // namespace kylin::server
