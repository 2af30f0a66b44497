// Service::messages and Service::count_message_tokens: the Anthropic endpoints on the same
// render, tokenize and queue path as /v1/chat/completions. Every error leaves in Anthropic's
// shape ({"type": "error", "error": {type, message}}), streamed ones as an `error` event.
#pragma once

#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>

#include "kylin/server/anthropic_stream.hpp"
#include "kylin/server/service.hpp"

namespace kylin::server {

namespace anthropic {

// Runs `body`, answering an exception as Anthropic does (the OpenAI path's statuses and texts,
// current_failure(), in the other shape; the offending parameter named in the message).
template <class F>
auto guarded(F&& body) -> decltype(body()) {
  using Out = decltype(body());
  try {
    return body();
  } catch (...) {
    const Failure f = current_failure();
    Reply r{f.status, json::dump(error_json(f.status, f.param.empty() ? f.message : f.param + ": " + f.message))};
    if constexpr (std::is_same_v<Out, Reply>) return r;
    else return Out{r, nullptr};
  }
}

// A reply of the OpenAI path (success or error) in Anthropic's error shape when it is an error.
inline Reply reshape(Reply r) {
  if (r.status != status::ok) r.body = json::dump(error_from_openai(r.status, r.body));
  return r;
}

}  // namespace anthropic

inline Reply Service::count_message_tokens(std::string_view text) {
  return anthropic::guarded([&] {
    require_task(options_.task, ServerTask::generate, "/v1/messages/count_tokens");
    MessagesRequest r = parse_messages_request(text, engine_.default_sampling(), MessagesEndpoint::count_tokens);
    check_model(r.chat.model);
    check_prompt_bytes(json::dump(r.chat.messages).size(), "messages");
    if (!engine_.has_chat_template()) throw ApiError(status::bad_request, "this model has no chat template");
    auto [ids, channel] = tokenize(render(r.chat));
    json::Value out = json::Object{};
    out.set("input_tokens", static_cast<std::int64_t>(ids.size()));
    return Reply{status::ok, json::dump(out)};
  });
}

inline Started Service::messages(std::string_view text, const std::shared_ptr<ClientWatch>& watch) {
  return anthropic::guarded([&]() -> Started {
    require_task(options_.task, ServerTask::generate, "/v1/messages");
    MessagesRequest r = parse_messages_request(text, engine_.default_sampling(), MessagesEndpoint::create);
    check_model(r.chat.model);
    check_prompt_bytes(json::dump(r.chat.messages).size(), "messages");
    if (!engine_.has_chat_template()) throw ApiError(status::bad_request, "this model has no chat template");
    const OutputRules rules{.format = {},
                            .tool_choice = r.chat.tool_choice,
                            .tools = &r.chat.chat.tools,
                            .max_calls = r.chat.parallel_tool_calls ? std::size_t{0} : std::size_t{1},
                            .thinking = r.chat.chat.enable_thinking,
                            .tool_schema_param = "input_schema"};
    ConstraintFactory::check_cost(rules);  // schemas too large to compile: refused before any rendering
    RenderedPrompt prompt;
    try {
      prompt = render(r.chat);
    } catch (const ApiError&) {
      throw;
    } catch (const Error& e) {
      throw ApiError(status::bad_request, client_text(e), "messages");
    }
    auto [ids, channel] = tokenize(prompt);
    const auto input_tokens = static_cast<std::int64_t>(ids.size());
    Prepared p = prepare(r.chat, std::move(ids), channel, "messages");
    p.head.id = anthropic::new_id("msg");
    const bool tools = r.tools_in_prompt;
    const std::size_t max_calls = r.chat.parallel_tool_calls ? any_number_of_calls : 1;
    constrain(*p.job, rules);
    // The decoded output, only needed to tell which stop sequence matched.
    auto output = [this](const Generation& g) {
      return g.stop_reason == StopReason::stop_string ? engine_.tokenizer().decode(g.tokens) : std::string();
    };
    if (!r.chat.stream) {
      auto promise = std::make_shared<std::promise<Reply>>();
      auto future = promise->get_future();
      p.job->on_done = [this, promise, head = p.head, tools, max_calls, stops = r.chat.stop, output](Generation&& g, std::optional<Failure> error) {
        promise->set_value(anthropic::reshape(result(std::move(g), error, [&](Generation& done) {
          return json::dump(anthropic::message_response(head, done, tools, output(done), stops, max_calls));
        })));
      };
      watch_client(watch, p.job);
      return {anthropic::reshape(submit_and_wait(p.job, std::move(future))), nullptr};
    }
    auto stream = open_stream(p.job);
    std::weak_ptr<EventStream> weak = stream;
    auto events = std::make_shared<anthropic::MessageStream>(p.head, tools, input_tokens, max_calls);
    p.job->on_piece = [weak, events](const Piece& piece) {
      auto s = weak.lock();
      if (!s) return false;
      events->push(piece);
      if (std::string out = events->take(); !out.empty()) s->push(std::move(out));
      return true;
    };
    p.job->on_done = [this, weak, events, stops = r.chat.stop, output](Generation&& g, std::optional<Failure> error) {
      auto s = weak.lock();
      if (!s) return;
      if (error || aborted(g)) {
        const Reply failed = error ? failure(*error) : shutdown_reply();
        s->push(anthropic::event("error", anthropic::error_from_openai(failed.status, failed.body)));
      } else {
        events->finish(g, output(g), stops);
        s->push(events->take());
      }
      s->close();
    };
    stream->push(events->take());  // message_start
    watch_client(watch, p.job);
    submit(p.job);
    return {{}, stream};
  });
}

}  // namespace kylin::server
