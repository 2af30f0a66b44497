// POST /tokenize, /detokenize and /apply-template in llama.cpp's shapes (its server README), so
// tools that count tokens or inspect the prompt before sending can use kylin-server:
//   /tokenize {"content", "add_special": false, "parse_special": true, "with_pieces": false}
//     -> {"tokens": [id, ...]} or, with_pieces, {"tokens": [{"id", "piece"}, ...]} (piece: the
//     token's text, or its bytes as numbers when they are not whole UTF-8);
//   /detokenize {"tokens": [id, ...]} -> {"content"};
//   /apply-template {"messages", "tools", "chat_template_kwargs", "add_generation_prompt": true,
//     "continue_final_message": false, "reasoning_effort"} -> {"prompt"}: the text
//     /v1/chat/completions would run (one <|image_pad|> per image part), with "image_tokens" and
//     "prompt_tokens" when the messages have images (each image's pad expanded to its tokens).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kylin/server/front.hpp"
#include "kylin/tokenizer/unicode.hpp"

namespace kylin::server {

inline Reply Service::tokenize(std::string_view text) const {
  const json::Value body = detail::parse_body(text);
  const json::Value* content = detail::field(body, "content");
  const char* param = "content";
  if (content == nullptr) content = detail::field(body, "text"), param = "text";
  if (content == nullptr || !content->is_string()) throw invalid(param, "'content' (or 'text') must be a string");
  EncodeOptions options;
  options.parse_special = detail::bool_field(body, "parse_special").value_or(true);
  options.add_special_tokens = detail::bool_field(body, "add_special").value_or(false);
  const bool pieces = detail::bool_field(body, "with_pieces").value_or(false);
  std::vector<int> ids;
  try {
    ids = engine_.tokenizer().encode(content->as_string(), options);
  } catch (const Error& e) {
    throw invalid(param, client_text(e));
  }
  json::Value tokens = json::Array{};
  for (int id : ids) {
    if (!pieces) {
      tokens.push_back(id);
      continue;
    }
    const std::string& bytes = engine_.tokenizer().token_bytes(id);
    json::Value piece;
    if (kylin::detail::find_invalid_utf8(bytes) == std::string::npos) {
      piece = bytes;
    } else {
      piece = json::Array{};
      for (unsigned char c : bytes) piece.push_back(static_cast<std::int64_t>(c));
    }
    json::Value t = json::Object{};
    t.set("id", id);
    t.set("piece", std::move(piece));
    tokens.push_back(std::move(t));
  }
  json::Value out = json::Object{};
  out.set("tokens", std::move(tokens));
  return {status::ok, json::dump(out)};
}

inline Reply Service::detokenize(std::string_view text) const {
  const json::Value body = detail::parse_body(text);
  const json::Value* tokens = detail::field(body, "tokens");
  if (tokens == nullptr || !tokens->is_array()) throw invalid("tokens", "'tokens' must be an array of token ids");
  std::vector<int> ids;
  const std::int64_t vocab = engine_.tokenizer().vocab_size();
  for (const auto& t : tokens->as_array()) {
    if (!t.is_int() || t.as_int() < 0 || t.as_int() >= vocab)
      throw invalid("tokens", "token ids must be integers in [0, " + std::to_string(vocab) + ")");
    ids.push_back(static_cast<int>(t.as_int()));
  }
  json::Value out = json::Object{};
  out.set("content", engine_.tokenizer().decode(ids));
  return {status::ok, json::dump(out)};
}

// The chat request's messages, tools and kwargs, rendered as /v1/chat/completions renders them
// (add_generation_prompt true unless the body says false; continue_final_message), under the
// server's template defaults. Other chat fields are not checked.
inline Reply Service::apply_template(std::string_view text) const {
  require_task(options_.task, ServerTask::generate, "/apply-template");
  const json::Value body = detail::parse_body(text);
  ChatRequest r;
  r.messages = detail::normalize_messages(body.find("messages"), r.images);
  detail::parse_chat_options(body, r);
  detail::parse_prompt_end(body, r);
  apply_chat_defaults(r);
  check_chat_template();
  refuse_images_untaken(r);
  RenderedPrompt prompt;
  try {
    prompt = render(r);
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    throw ApiError(status::bad_request, client_text(e), "messages");
  }
  json::Value out = json::Object{};
  if (!r.images.empty()) {  // the prompt holds one pad per image; its tokens hold each image's count
    const PromptIds unexpanded = tokenize(prompt);
    const PromptIds ids = with_images(unexpanded, r.images, PromptImages::counted);
    out.set("image_tokens", static_cast<std::int64_t>(ids.ids.size() - unexpanded.ids.size() + r.images.size()));
    out.set("prompt_tokens", static_cast<std::int64_t>(ids.ids.size()));
  }
  out.set("prompt", std::move(prompt.text));
  return {status::ok, json::dump(out)};
}

}  // namespace kylin::server
