// The retrieval endpoints: POST /v1/embeddings (OpenAI's shape, float or base64) and POST
// /v1/rerank (the Jina/Cohere shape; with `texts` instead of `documents`, Hugging Face
// text-embeddings-inference's: [{"index", "score", "text"}]). Bodies are validated and tokenized
// on the calling thread; the forward passes run on the scheduler's inference thread, like generations.
#pragma once

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kylin/server/service.hpp"

namespace kylin::server {

// Most inputs (embeddings) or documents (rerank) in one request: bounds the work one request queues.
inline constexpr std::size_t max_retrieval_inputs = 2048;

enum class EncodingFormat { float32, base64 };

using TextInputs = std::vector<std::string>;
using TokenInputs = std::vector<std::vector<int>>;  // [inputs][tokens]

struct EmbeddingsRequest {
  std::string model;
  std::variant<TextInputs, TokenInputs> input;
  std::optional<std::int64_t> dimensions;
  EncodingFormat encoding = EncodingFormat::float32;
  std::string prompt_name;  // kylin's extension: a sentence-transformers prompt for text inputs
};

struct RerankRequest {
  std::string model;
  std::string query;
  std::vector<std::string> documents;  // [documents]
  RerankOptions options;         // top_n; instruction (kylin's extension)
  bool return_documents = true;  // as Jina's API: each result carries its document's text
  bool tei = false;              // TEI's shape: `texts` in, a bare array out (`return_text`, default false)
};

namespace detail {

inline std::string string_field(const json::Value& body, std::string_view name) {
  const json::Value* v = field(body, name);
  if (v == nullptr) return {};
  if (!v->is_string()) throw invalid(std::string(name), "'" + std::string(name) + "' must be a string");
  return v->as_string();
}

inline void check_input_count(std::size_t n, const std::string& param) {
  if (n == 0) throw invalid(param, "'" + param + "' is empty");
  if (n > max_retrieval_inputs)
    throw invalid(param, "'" + param + "' has " + std::to_string(n) + " items; at most " + std::to_string(max_retrieval_inputs) +
                             " per request");
}

inline std::vector<int> token_input(const json::Value& array, std::int64_t vocab, const std::string& where) {
  std::vector<int> ids;  // [tokens]
  for (const auto& id : array.as_array()) {
    if (!id.is_int() || id.as_int() < 0 || id.as_int() >= vocab)
      throw invalid("input", where + ": token ids must be integers in [0, " + std::to_string(vocab) + ")");
    ids.push_back(static_cast<int>(id.as_int()));
  }
  if (ids.empty()) throw invalid("input", where + " is empty");
  return ids;
}

// OpenAI's four shapes: a string, strings, token ids, arrays of token ids.
inline std::variant<TextInputs, TokenInputs> parse_embedding_input(const json::Value* input, std::int64_t vocab) {
  const std::string shape = "'input' must be a string, an array of strings, an array of token ids or an array of arrays of token ids";
  if (input == nullptr) throw invalid("input", "'input' is required");
  if (input->is_string()) {
    if (input->as_string().empty()) throw invalid("input", "'input' is an empty string");
    return TextInputs{input->as_string()};
  }
  if (!input->is_array()) throw invalid("input", shape);
  const auto& items = input->as_array();
  check_input_count(items.size(), "input");
  if (items[0].is_int()) return TokenInputs{token_input(*input, vocab, "input")};
  TextInputs texts;    // [inputs] when input 0 is a string
  TokenInputs tokens;  // [inputs][tokens] when input 0 is an array
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::string where = "input " + std::to_string(i);
    if (items[0].is_string() && items[i].is_string()) {
      if (items[i].as_string().empty()) throw invalid("input", where + " is an empty string");
      texts.push_back(items[i].as_string());
    } else if (items[0].is_array() && items[i].is_array()) {
      tokens.push_back(token_input(items[i], vocab, where));
    } else {
      throw invalid("input", shape + " (" + where + " is neither, or not like input 0)");
    }
  }
  if (items[0].is_string()) return texts;
  return tokens;
}

inline EmbeddingsRequest parse_embeddings_request(std::string_view text, std::int64_t vocab, std::int64_t hidden) {
  const json::Value body = parse_body(text);
  EmbeddingsRequest r;
  r.model = string_field(body, "model");
  r.input = parse_embedding_input(field(body, "input"), vocab);
  r.dimensions = int_field(body, "dimensions");
  if (r.dimensions && (*r.dimensions < 1 || *r.dimensions > hidden))
    throw invalid("dimensions", "'dimensions' must be in [1, " + std::to_string(hidden) + "], the size of this model's embeddings");
  const std::string format = string_field(body, "encoding_format");
  if (format == "base64") r.encoding = EncodingFormat::base64;
  else if (!format.empty() && format != "float") throw invalid("encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
  r.prompt_name = string_field(body, "prompt_name");
  if (!r.prompt_name.empty() && std::holds_alternative<TokenInputs>(r.input))
    throw invalid("prompt_name", "'prompt_name' applies to text inputs only; token inputs run as given");
  return r;
}

inline std::string document_text(const json::Value& d, std::size_t i) {
  if (d.is_string()) return d.as_string();
  if (const json::Value* t = d.is_object() ? field(d, "text") : nullptr; t != nullptr && t->is_string()) return t->as_string();
  throw invalid("documents", "document " + std::to_string(i) + " must be a string or an object with a string 'text'");
}

// TEI's POST /rerank body (text-embeddings-inference's openapi): query, texts, return_text;
// raw_scores and truncate only where they change nothing (kylin's scores are P(yes), and a text
// too long for the context is a 400).
inline void parse_tei_rerank(const json::Value& body, const json::Value& texts, RerankRequest& r) {
  if (field(body, "documents") != nullptr) throw invalid("texts", "give 'documents' (Jina/Cohere) or 'texts' (TEI), not both");
  if (!texts.is_array()) throw invalid("texts", "'texts' must be an array of strings");
  check_input_count(texts.size(), "texts");
  for (std::size_t i = 0; i < texts.size(); ++i) {
    if (!texts.as_array()[i].is_string()) throw invalid("texts", "text " + std::to_string(i) + " must be a string");
    r.documents.push_back(texts.as_array()[i].as_string());
  }
  if (bool_field(body, "raw_scores").value_or(false))
    throw invalid("raw_scores", "'raw_scores' is not supported: a Qwen3-Reranker's score is P(yes), there is no raw logit to give");
  if (bool_field(body, "truncate").value_or(false))
    throw invalid("truncate", "'truncate' is not supported: kylin refuses a text longer than the context instead of cutting it");
  r.tei = true;
  r.return_documents = bool_field(body, "return_text").value_or(false);
}

inline RerankRequest parse_rerank_request(std::string_view text) {
  const json::Value body = parse_body(text);
  RerankRequest r;
  r.model = string_field(body, "model");
  r.query = string_field(body, "query");
  if (r.query.empty()) throw invalid("query", "'query' must be a non-empty string");
  if (const json::Value* texts = field(body, "texts")) {
    parse_tei_rerank(body, *texts, r);
    if (field(body, "instruction") != nullptr) r.options.instruction = string_field(body, "instruction");
    return r;
  }
  const json::Value* documents = field(body, "documents");
  if (documents == nullptr || !documents->is_array())
    throw invalid("documents", "'documents' must be an array of strings or of {\"text\": ...} objects");
  check_input_count(documents->size(), "documents");
  for (std::size_t i = 0; i < documents->size(); ++i) r.documents.push_back(document_text(documents->as_array()[i], i));
  r.options.top_n = int_field(body, "top_n");
  if (r.options.top_n && *r.options.top_n < 1) throw invalid("top_n", "'top_n' must be at least 1");
  if (field(body, "instruction") != nullptr) r.options.instruction = string_field(body, "instruction");
  r.return_documents = bool_field(body, "return_documents").value_or(true);
  return r;
}

// Every input fits in the context (checked here to answer with the parameter and the code).
inline void check_context(std::span<const std::vector<int>> ids, std::int64_t context, const std::string& param,
                          const std::string& item) {
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (static_cast<std::int64_t>(ids[i].size()) > context)
      throw ApiError(status::bad_request,
                     item + " " + std::to_string(i) + " has " + std::to_string(ids[i].size()) + " tokens; this model's context is " +
                         std::to_string(context),
                     param, "context_length_exceeded");
}

inline json::Value usage(std::int64_t prompt_tokens) {
  json::Value u = json::Object{};
  u.set("prompt_tokens", prompt_tokens);
  u.set("total_tokens", prompt_tokens);
  return u;
}

}  // namespace detail

// Little-endian float32 bytes in base64: what OpenAI's clients decode for encoding_format "base64".
inline std::string base64_floats(std::span<const float> values) {
  static constexpr std::string_view alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<unsigned char> bytes;  // [values * 4]
  bytes.reserve(values.size() * 4);
  for (float v : values)
    for (int k = 0; k < 4; ++k) bytes.push_back(static_cast<unsigned char>(std::bit_cast<std::uint32_t>(v) >> (8 * k)));
  std::string out;
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const std::size_t n = std::min<std::size_t>(3, bytes.size() - i);
    std::uint32_t chunk = 0;  // 24 bits, zero-padded
    for (std::size_t k = 0; k < 3; ++k) chunk = chunk << 8 | (k < n ? bytes[i + k] : 0u);
    for (std::size_t k = 0; k < 4; ++k) out.push_back(k <= n ? alphabet[(chunk >> (18 - 6 * k)) & 63] : '=');
  }
  return out;
}

inline json::Value embeddings_response(const EmbedResult& r, EncodingFormat encoding, const std::string& model) {
  json::Value data = json::Array{};
  for (std::size_t i = 0; i < r.embeddings.size(); ++i) {
    json::Value item = json::Object{};
    item.set("object", "embedding");
    item.set("index", static_cast<std::int64_t>(i));
    if (encoding == EncodingFormat::base64) {
      item.set("embedding", base64_floats(r.embeddings[i]));
    } else {
      json::Value values = json::Array{};
      for (float v : r.embeddings[i]) values.push_back(detail::compact(v));
      item.set("embedding", std::move(values));
    }
    data.push_back(std::move(item));
  }
  json::Value out = json::Object{};
  out.set("object", "list");
  out.set("data", std::move(data));
  out.set("model", model);
  out.set("usage", detail::usage(r.prompt_tokens));
  return out;
}

// TEI's answer: [{"index", "score", "text"?}], best first.
inline json::Value tei_rerank_response(const Reranking& r, const RerankRequest& request) {
  json::Value out = json::Array{};
  for (const RerankResult& x : r.results) {
    json::Value item = json::Object{};
    item.set("index", x.index);
    item.set("score", x.score);
    if (request.return_documents) item.set("text", request.documents[static_cast<std::size_t>(x.index)]);
    out.push_back(std::move(item));
  }
  return out;
}

inline json::Value rerank_response(const Reranking& r, const RerankRequest& request, const std::string& model) {
  if (request.tei) return tei_rerank_response(r, request);
  json::Value results = json::Array{};
  for (const RerankResult& x : r.results) {
    json::Value item = json::Object{};
    item.set("index", x.index);
    item.set("relevance_score", x.score);
    if (request.return_documents) {
      json::Value document = json::Object{};
      document.set("text", request.documents[static_cast<std::size_t>(x.index)]);
      item.set("document", std::move(document));
    }
    results.push_back(std::move(item));
  }
  json::Value out = json::Object{};
  out.set("model", model);
  out.set("results", std::move(results));
  out.set("usage", detail::usage(r.prompt_tokens));
  return out;
}

// The model is not thread-safe: `work` runs as a job on the inference thread, and this thread
// waits for it. A job skipped before it ran (abort(), or its client left) answers 503.
inline Reply Service::run_engine_task(std::function<void()> work, const std::shared_ptr<ClientWatch>& watch) {
  auto job = std::make_shared<Job>();
  job->engine_task = std::move(work);
  auto promise = std::make_shared<std::promise<Reply>>();
  auto future = promise->get_future();
  job->on_done = [promise](Generation&& g, std::optional<Failure> error) {
    if (error) promise->set_value(failure(*error));
    else if (g.stop_reason == StopReason::cancelled) promise->set_value(shutdown_reply());
    else promise->set_value({status::ok, {}});
  };
  watch_client(watch, job);
  return submit_and_wait({job}, std::move(future));
}

inline Reply Service::embeddings(std::string_view text, const std::shared_ptr<ClientWatch>& watch) {
  require_task(options_.task, ServerTask::embed, "/v1/embeddings");
  EmbeddingsRequest r = detail::parse_embeddings_request(text, engine_.model().vocab_size(), engine_.model().hidden_size());
  check_model(r.model);
  auto ids = std::make_shared<TokenInputs>();  // [inputs][tokens]
  if (const auto* texts = std::get_if<TextInputs>(&r.input)) {
    for (const auto& t : *texts) check_prompt_bytes(t.size(), "input");
    try {
      *ids = embedding_ids(engine_.tokenizer(), engine_.embedding_info(), *texts, {.prompt_name = r.prompt_name, .dimensions = std::nullopt});
    } catch (const Error& e) {
      throw invalid(e.context() == "prompt_name" ? "prompt_name" : "input", client_text(e));
    }
  } else {
    *ids = std::move(std::get<TokenInputs>(r.input));
  }
  detail::check_context(*ids, engine_.context_length(), "input", "input");
  auto result = std::make_shared<EmbedResult>();
  const EmbedOptions o{.prompt_name = "", .dimensions = r.dimensions};
  Reply reply = run_engine_task([this, ids, result, o] { *result = engine_.embed_tokens(*ids, o); }, watch);
  if (reply.status == status::ok) reply.body = json::dump(embeddings_response(*result, r.encoding, served_name(r.model)));
  return reply;
}

inline Reply Service::rerank(std::string_view text, const std::shared_ptr<ClientWatch>& watch) {
  require_task(options_.task, ServerTask::rerank, "/v1/rerank");
  RerankRequest r = detail::parse_rerank_request(text);
  check_model(r.model);
  r.options.content_tokens = options_.content_tokens;  // as chat content: plain text unless --special-tokens-in-content
  // A query or instruction too long for any document is blamed on itself, not on document 0.
  check_prompt_bytes(r.query.size() + r.options.instruction.size(), r.options.instruction.size() > r.query.size() ? "instruction" : "query");
  const char* documents = r.tei ? "texts" : "documents";  // the field the request gave them in
  for (const auto& d : r.documents) check_prompt_bytes(r.query.size() + r.options.instruction.size() + d.size(), documents);
  auto ids = std::make_shared<TokenInputs>();  // [documents][tokens]
  try {
    check_rerank_query(engine_.tokenizer(), r.query, r.options, engine_.context_length());
  } catch (const Error& e) {
    throw ApiError(status::bad_request, e.message(), e.context(), "context_length_exceeded");
  }
  try {
    // No context bound here: check_context answers with the parameter and code.
    *ids = rerank_ids(engine_.tokenizer(), r.query, r.documents, r.options, std::numeric_limits<std::int64_t>::max());
  } catch (const Error& e) {
    throw invalid(e.context() == "query" || e.context() == "instruction" ? e.context() : documents, client_text(e));
  }
  detail::check_context(*ids, engine_.context_length(), documents, r.tei ? "text" : "document");
  const RerankAnswerIds answer = rerank_answer_ids(engine_.tokenizer());
  auto result = std::make_shared<Reranking>();
  Reply reply = run_engine_task(
      [this, ids, result, answer, top_n = r.options.top_n] { *result = rerank_scores(engine_.model(), answer, *ids, top_n); }, watch);
  if (reply.status == status::ok) reply.body = json::dump(rerank_response(*result, r, served_name(r.model)));
  return reply;
}

}  // namespace kylin::server
