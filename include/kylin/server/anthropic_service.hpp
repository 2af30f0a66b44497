// Service::messages and Service::count_message_tokens: the Anthropic endpoints, an adapter over
// the same front (server/front.hpp) as /v1/chat/completions. Every error leaves in Anthropic's
// shape ({"type": "error", "error": {type, message}}), streamed ones as an `error` event.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "kylin/server/anthropic_stream.hpp"
#include "kylin/server/front.hpp"

namespace kylin::server {

namespace anthropic {

// The message object, or its named SSE events (message_start once the prompt ran, so that its
// usage counts the cached tokens).
class MessageAnswer final : public Answer {
 public:
  MessageAnswer(bool stream, ResponseHead head, bool tools, std::size_t max_calls, std::int64_t prompt_tokens,
                std::vector<std::string> stops, const Tokenizer& tokenizer, ToolCallDialect dialect = {})
      : Answer(stream), head_(std::move(head)), tools_(tools), max_calls_(max_calls), prompt_tokens_(prompt_tokens),
        stops_(std::move(stops)), tokenizer_(tokenizer), dialect_(std::move(dialect)) {}

  std::string prefilled(std::size_t, std::int64_t cached_tokens) override {
    if (!stream || events_) return {};
    events_.emplace(head_, tools_, prompt_tokens_, max_calls_, cached_tokens, dialect_);
    return events_->take();
  }

  std::string piece(std::size_t choice, const Piece& p) override {
    if (!stream) return {};
    std::string out = prefilled(choice, 0);  // (already open once the prompt ran)
    events_->push(p);
    return out + events_->take();
  }

  std::string end(std::size_t, const Generation& g) override {
    std::string out = events_ ? "" : prefilled(0, g.stats.cached_tokens);
    events_->finish(g, output(g), stops_);
    return out + events_->take();
  }

  std::string finish(std::span<const Generation> all) override {
    if (stream) return {};  // message_stop came with the end
    return json::dump(message_response(head_, all.front(), tools_, output(all.front()), stops_, max_calls_, dialect_));
  }

  std::string error_body(const Failure& f) const override { return anthropic::error_body(f); }
  std::string error_events(const Failure& f) const override { return event("error", json::parse(error_body(f))); }

 private:
  // The decoded output, only needed to tell which stop sequence matched.
  std::string output(const Generation& g) const {
    return g.stop_reason == StopReason::stop_string ? tokenizer_.decode(g.tokens) : std::string();
  }

  ResponseHead head_;
  bool tools_;
  std::size_t max_calls_;
  std::int64_t prompt_tokens_;
  std::vector<std::string> stops_;
  const Tokenizer& tokenizer_;
  ToolCallDialect dialect_;
  std::optional<MessageStream> events_;
};

inline OutputRules message_rules(const MessagesRequest& r, ToolCallFormat format) {
  return {.format = {},
          .tool_choice = r.chat.tool_choice,
          .tools = &r.chat.chat.tools,
          .max_calls = r.chat.parallel_tool_calls ? any_number_of_calls : 1,
          .thinking = r.chat.chat.enable_thinking,
          .tool_format = format,
          .tool_schema_param = "input_schema"};
}

}  // namespace anthropic

inline Reply Service::count_message_tokens(std::string_view text) {
  return guarded(anthropic::error_body, [&] {
    require_task(options_.task, ServerTask::generate, "/v1/messages/count_tokens");
    MessagesRequest r = parse_messages_request(text, engine_.default_sampling(), MessagesEndpoint::count_tokens);
    check_model(r.chat.model);
    apply_chat_defaults(r.chat);
    const PromptIds prompt = chat_prompt(r.chat, {}, "messages", PromptImages::counted);
    json::Value out = json::Object{};
    out.set("input_tokens", static_cast<std::int64_t>(prompt.ids.size()));
    return Reply{status::ok, json::dump(out)};
  });
}

inline Started Service::messages(std::string_view text, const std::shared_ptr<ClientWatch>& watch) {
  return guarded(anthropic::error_body, [&]() -> Started {
    require_task(options_.task, ServerTask::generate, "/v1/messages");
    MessagesRequest r = parse_messages_request(text, engine_.default_sampling(), MessagesEndpoint::create);
    check_model(r.chat.model);
    apply_chat_defaults(r.chat);
    const ToolCallFormat format = template_tool_format(engine_);
    const OutputRules rules = anthropic::message_rules(r, format);
    Prepared p = prepare(r.chat, chat_prompt(r.chat, rules, "messages"), rules, anthropic::new_id("msg"), "messages");
    auto out = std::make_shared<anthropic::MessageAnswer>(r.chat.stream, p.head, r.tools_in_prompt, rules.max_calls, p.prompt_tokens,
                                                          r.chat.stop, engine_.tokenizer(), ToolCallDialect{format, r.chat.chat.tools});
    return answer(std::move(p), std::move(out), watch);
  });
}

}  // namespace kylin::server
