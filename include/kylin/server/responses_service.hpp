// The Responses API on the front (server/front.hpp): POST /v1/responses (whole or streamed as
// typed events), GET and DELETE /v1/responses/{id}, POST /v1/responses/input_tokens. A stored
// response (`store`, the default) keeps its conversation, so `previous_response_id` continues it
// without the client resending it; the rendered prompt then starts with the earlier one, whose
// KV prefix a slot still holds.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/server/responses_api.hpp"

namespace kylin::server {

namespace responses {

// The events' texts joined. Each event takes the next sequence number as it is made, so they are
// made here in order: a braced list is evaluated left to right, the operands of + are not.
inline std::string in_order(std::initializer_list<std::string> events) {
  std::string out;
  for (const std::string& e : events) out += e;
  return out;
}

// The typed events of one streamed response, or its whole object; stored once finished.
class ResponseAnswer final : public Answer {
 public:
  ResponseAnswer(bool stream, ResponseContext c, std::shared_ptr<const ResponsesRequest> request, ResponseStore* store,
                 json::Value conversation)
      : Answer(stream), c_(std::move(c)), request_(std::move(request)), store_(store), conversation_(std::move(conversation)),
        calls_(c_.dialect, c_.max_calls) {
    c_.request = request_.get();
  }

  std::string start() override {
    json::Value created = event("response.created"), progress = event("response.in_progress");
    created.set("response", response_object(c_, json::Array{}, nullptr));
    progress.set("response", response_object(c_, json::Array{}, nullptr));
    return in_order({emit(std::move(created)), emit(std::move(progress))});
  }

  std::string piece(std::size_t, const Piece& p) override {
    if (!stream) return {};
    if (p.channel == Channel::reasoning) return in_order({open(Kind::reasoning), delta(std::string(p.text))});
    if (c_.tools) return apply(calls_.push(p.text));
    return p.text.empty() ? std::string() : in_order({open(Kind::message), delta(std::string(p.text))});
  }

  // Held text and calls come out here: a message item of the text outside calls, then calls.
  std::string end(std::size_t, const Generation&) override { return c_.tools ? in_order({apply(calls_.finish()), close()}) : close(); }

  std::string finish(std::span<const Generation> all) override {
    const Generation& g = all.front();
    if (!stream) {
      const json::Value response = response_object(c_, output_items(g, c_), &g);
      keep(response);
      return json::dump(response);
    }
    std::string out;
    if (!made_message_ && !made_call_) out += in_order({open(Kind::message), close()});  // an empty answer is an empty message
    const json::Value response = response_object(c_, items_, &g);
    keep(response);
    json::Value done = event(response.find("status")->as_string() == "completed" ? "response.completed" : "response.incomplete");
    done.set("response", response);
    return out + emit(std::move(done));
  }

  std::string error_events(const Failure& f) const override {
    json::Value e = json::Object{};
    e.set("type", "error");
    e.set("code", f.code.empty() ? json::Value() : json::Value(f.code));
    e.set("message", shown(f.message, 4096));  // bounded as error_body's
    e.set("param", f.param.empty() ? json::Value() : json::Value(shown(f.param, 256)));
    e.set("sequence_number", seq_);
    return "event: error\ndata: " + json::dump(e) + "\n\n";
  }

 private:
  enum class Kind { none, reasoning, message, call };

  static json::Value event(std::string_view type) {
    json::Value e = json::Object{};
    e.set("type", type);
    return e;
  }
  std::string emit(json::Value e) {
    e.set("sequence_number", seq_++);
    return "event: " + e.find("type")->as_string() + "\ndata: " + json::dump(e) + "\n\n";
  }
  // An event about the open item (item_id, output_index; content_index for its one part).
  json::Value about(std::string_view type, bool part = true) const {
    json::Value e = event(type);
    e.set("item_id", id_);
    e.set("output_index", static_cast<std::int64_t>(items_.size()));
    if (part) e.set("content_index", 0);
    return e;
  }

  std::string open(Kind kind) {
    if (open_ == kind) return {};
    std::string out = close();
    open_ = kind;
    text_.clear();
    id_ = new_id(kind == Kind::reasoning ? "rs" : "msg");
    made_message_ |= kind == Kind::message;
    json::Value added = event("response.output_item.added");
    added.set("output_index", static_cast<std::int64_t>(items_.size()));
    added.set("item", kind == Kind::reasoning ? reasoning_item(id_, json::Array{}, json::Array{}) : message_item(id_, "in_progress", json::Array{}));
    json::Value part = about("response.content_part.added");
    part.set("part", text_part(kind == Kind::reasoning ? "reasoning_text" : "output_text", ""));
    return in_order({std::move(out), emit(std::move(added)), emit(std::move(part))});
  }

  std::string delta(std::string text) {
    json::Value d = about(open_ == Kind::reasoning ? "response.reasoning_text.delta" : "response.output_text.delta");
    d.set("delta", text);
    if (open_ == Kind::message) d.set("logprobs", json::Array{});
    text_ += text;
    return emit(std::move(d));
  }

  std::string close() {
    if (open_ == Kind::call) return call_done();
    if (open_ == Kind::none) return {};
    const bool reasoning = open_ == Kind::reasoning;
    const std::string part_type = reasoning ? "reasoning_text" : "output_text";
    json::Value done = about(reasoning ? "response.reasoning_text.done" : "response.output_text.done");
    done.set("text", text_);
    if (!reasoning) done.set("logprobs", json::Array{});
    json::Value part = about("response.content_part.done");
    part.set("part", text_part(part_type, text_));
    std::string out = in_order({emit(std::move(done)), emit(std::move(part))});
    json::Value summary = json::Array{};
    if (reasoning && request_->reasoning_summary) {
      out += summary_events();
      summary.push_back(text_part("summary_text", text_));
    }
    const json::Value item = reasoning ? reasoning_item(id_, json::Array{text_part(part_type, text_)}, std::move(summary))
                                       : message_item(id_, "completed", json::Array{text_part(part_type, text_)});
    json::Value item_done = event("response.output_item.done");
    item_done.set("output_index", static_cast<std::int64_t>(items_.size()));
    item_done.set("item", item);
    out += emit(std::move(item_done));
    items_.push_back(item);
    open_ = Kind::none;
    return out;
  }

  // reasoning.summary asked for: the reasoning text is its summary, sent as one summary part.
  std::string summary_events() {
    json::Value part = json::Object{};
    part.set("type", "summary_text");
    part.set("text", "");
    std::string out;
    for (const char* type : {"response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
                             "response.reasoning_summary_text.done", "response.reasoning_summary_part.done"}) {
      json::Value e = about(type, false);
      e.set("summary_index", 0);
      const std::string_view t = type;
      if (t.ends_with("part.added")) e.set("part", part);
      if (t.ends_with("text.delta")) e.set("delta", text_);
      if (t.ends_with("text.done")) e.set("text", text_);
      if (t.ends_with("part.done")) e.set("part", text_part("summary_text", text_));
      out += emit(std::move(e));
    }
    return out;
  }

  // A step of the answer: its text into the message item, each call as a function_call item
  // (output_item.added once its name is known, an arguments delta per piece, .done at its end).
  std::string apply(const ToolCallStep& step) {
    std::string out;
    if (!step.content.empty()) out += in_order({open(Kind::message), delta(step.content)});
    for (const ToolCallDelta& d : step.deltas) {
      if (d.start) out += call_added(d);
      if (!d.arguments.empty()) {
        json::Value e = about("response.function_call_arguments.delta", false);
        e.set("delta", d.arguments);
        out += emit(std::move(e));
      }
      if (d.end) out += call_done();
    }
    return out;
  }

  std::string call_added(const ToolCallDelta& d) {
    std::string out = close();
    open_ = Kind::call;
    made_call_ = true;
    call_ = d.index;
    id_ = new_id("fc");
    call_id_ = new_id("call");
    json::Value added = event("response.output_item.added");
    added.set("output_index", static_cast<std::int64_t>(items_.size()));
    added.set("item", function_call_item(id_, call_id_, {d.name, ""}, "in_progress", false));
    return out + emit(std::move(added));
  }

  std::string call_done() {
    const ToolCall& call = calls_.call(call_);
    json::Value done = about("response.function_call_arguments.done", false);
    done.set("name", call.name);
    done.set("arguments", call.arguments);
    const json::Value item = function_call_item(id_, call_id_, call, "completed", true);
    json::Value item_done = event("response.output_item.done");
    item_done.set("output_index", static_cast<std::int64_t>(items_.size()));
    item_done.set("item", item);
    std::string out = in_order({emit(std::move(done)), emit(std::move(item_done))});
    items_.push_back(item);
    open_ = Kind::none;
    return out;
  }

  // store: the response, and its conversation for previous_response_id.
  void keep(const json::Value& response) {
    if (store_ == nullptr) return;
    json::Value conversation = conversation_;
    conversation.push_back(assistant_message(*response.find("output")));
    store_->put(c_.head.id, {response, std::move(conversation)});
  }

  ResponseContext c_;
  std::shared_ptr<const ResponsesRequest> request_;
  ResponseStore* store_;         // null: store false
  json::Value conversation_;     // the messages before this answer (no instructions)
  std::int64_t seq_ = 0;
  json::Value items_ = json::Array{};  // the finished output items, in order
  Kind open_ = Kind::none;
  std::string id_, text_;        // the open item's id and text
  std::string call_id_;          // the open function_call's call_id
  std::size_t call_ = 0;         // and its index among the calls
  bool made_message_ = false, made_call_ = false;
  ToolCallStream calls_;
};

inline OutputRules rules_of(const ResponsesRequest& r, ToolCallFormat format) {
  OutputRules rules{.format = r.chat.response_format,
                    .tool_choice = r.chat.tool_choice,
                    .tools = &r.chat.chat.tools,
                    .max_calls = r.chat.parallel_tool_calls ? any_number_of_calls : 1,
                    .thinking = r.chat.chat.enable_thinking,
                    .tool_format = format,
                    .schema_param = "text.format.schema",
                    .tool_schema_param = "parameters"};
  if (const json::Value* m = r.echo.find("max_tool_calls")) rules.max_calls = std::min(rules.max_calls, static_cast<std::size_t>(m->as_int()));
  return rules;
}

}  // namespace responses

namespace responses {

// Every function_call_output answers a function call made before it in the conversation, as
// OpenAI requires (its 400 says "No tool call found for function call output with call_id ...").
inline void check_call_outputs(const json::Value& conversation) {
  std::vector<std::string> calls;  // call ids so far
  for (const json::Value& m : conversation.as_array()) {
    if (const json::Value* list = m.find("tool_calls"); list && list->is_array())
      for (const json::Value& c : list->as_array())
        if (const json::Value* id = c.find("id"); id && id->is_string()) calls.push_back(id->as_string());
    const json::Value* answered = m.find("tool_call_id");
    if (answered && answered->is_string() && std::find(calls.begin(), calls.end(), answered->as_string()) == calls.end())
      throw invalid("input", "No tool call found for function call output with call_id '" + shown(answered->as_string()) +
                                 "': give the function_call item before its output (or continue, with previous_response_id, the "
                                 "response that made the call)");
  }
}

}  // namespace responses

// The conversation a request continues (its previous response's, when it names one) followed by
// its input, and the chat messages to render: instructions first.
inline json::Value Service::response_conversation(ResponsesRequest& r) const {
  json::Value conversation = json::Array{};
  if (!r.previous_response_id.empty()) {
    const auto previous = stored_.get(r.previous_response_id);
    if (!previous)
      throw ApiError(status::bad_request, "previous response '" + shown(r.previous_response_id) + "' is not stored (never made, deleted, "
                     "made with store false, or evicted from the bounded store)", "previous_response_id", "previous_response_not_found");
    conversation = previous->messages;
    for (const json::Value& m : conversation.as_array())  // a stored conversation keeps no image data
      if (const json::Value* c = m.find("content"); c && c->is_array())
        throw invalid("previous_response_id", "the stored conversation has images, which the store does not keep; send the whole "
                                              "conversation with its images in 'input'");
  }
  for (const json::Value& m : r.input.as_array()) conversation.push_back(m);
  responses::check_call_outputs(conversation);
  json::Value messages = json::Array{};
  if (!r.instructions.empty()) messages.push_back(responses::message("system", r.instructions));
  for (const json::Value& m : conversation.as_array()) messages.push_back(m);
  if (messages.size() == 0) throw invalid("input", "the conversation is empty: give 'input'");
  r.chat.messages = std::move(messages);
  return conversation;
}

inline Started Service::create_response(std::string_view text, const std::shared_ptr<ClientWatch>& watch) {
  return guarded(error_body, [&]() -> Started {
    require_task(options_.task, ServerTask::generate, "/v1/responses");
    auto r = std::make_shared<ResponsesRequest>(parse_responses_request(text, engine_.default_sampling(), ResponsesEndpoint::create, stored_items()));
    check_model(r->chat.model);
    apply_chat_defaults(r->chat);
    json::Value conversation = response_conversation(*r);
    const ToolCallFormat format = template_tool_format(engine_);
    const OutputRules rules = responses::rules_of(*r, format);
    PromptIds prompt = chat_prompt(r->chat, rules, "input");
    const bool starts_reasoning = prompt.start == Channel::reasoning;
    Prepared p = prepare(r->chat, std::move(prompt), rules, responses::new_id("resp"), "input");
    const SamplingParams sampling = apply_overrides(engine_.default_sampling(), r->chat.sampling);
    const Tokenizer& t = engine_.tokenizer();
    responses::ResponseContext c{.head = p.head,
                                 .request = nullptr,
                                 .temperature = sampling.temperature,
                                 .top_p = sampling.top_p,
                                 .tools = r->tools_in_prompt,
                                 .dialect = {format, r->chat.chat.tools},
                                 .max_calls = rules.max_calls,
                                 .starts_reasoning = starts_reasoning,
                                 .think_open = t.token_to_id("<think>").value_or(-1),
                                 .think_close = t.token_to_id("</think>").value_or(-1)};
    auto out = std::make_shared<responses::ResponseAnswer>(r->chat.stream, std::move(c), r, r->store ? &stored_ : nullptr,
                                                           std::move(conversation));
    return answer(std::move(p), std::move(out), watch);
  });
}

inline Reply Service::response(std::string_view id) const {
  return guarded(error_body, [&] {
    const auto stored = stored_.get(std::string(id));
    if (!stored) throw ApiError(status::not_found, "response '" + shown(id) + "' not found", "response_id", "response_not_found");
    return Reply{status::ok, json::dump(stored->response)};
  });
}

inline Reply Service::delete_response(std::string_view id) {
  return guarded(error_body, [&] {
    if (!stored_.erase(std::string(id)))
      throw ApiError(status::not_found, "response '" + shown(id) + "' not found", "response_id", "response_not_found");
    json::Value out = json::Object{};
    out.set("id", std::string(id));
    out.set("object", "response");
    out.set("deleted", true);
    return Reply{status::ok, json::dump(out)};
  });
}

// The prompt /v1/responses would run for the same body, counted.
inline Reply Service::response_input_tokens(std::string_view text) {
  return guarded(error_body, [&] {
    require_task(options_.task, ServerTask::generate, "/v1/responses/input_tokens");
    ResponsesRequest r = parse_responses_request(text, engine_.default_sampling(), ResponsesEndpoint::input_tokens, stored_items());
    check_model(r.chat.model);
    apply_chat_defaults(r.chat);
    (void)response_conversation(r);
    const PromptIds prompt = chat_prompt(r.chat, responses::rules_of(r, template_tool_format(engine_)), "input", PromptImages::counted);
    json::Value out = json::Object{};
    out.set("object", "response.input_tokens");
    out.set("input_tokens", static_cast<std::int64_t>(prompt.ids.size()));
    return Reply{status::ok, json::dump(out)};
  });
}

}  // namespace kylin::server
