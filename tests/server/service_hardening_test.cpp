// Issue 75's findings through the Service, without a transport: a Responses answer its client
// left is stored incomplete (streamed and whole, the cut landing at a scripted step), n counted
// against the queue bound, /infill's n and input_extra, and the small refusals (an empty
// previous_response_id, an output without its call, a long id, a count past 64 bits). The cut is
// scripted through SchedulerOptions::on_step, so no case depends on timing.
#include <doctest/doctest.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "kylin/server/openai_service.hpp"
#include "kylin/server/responses_service.hpp"

namespace service_hardening_test {

using namespace kylin::server;
using kylin::json::Value;

kylin::Engine& engine() {
  static auto e = kylin::Engine::load(std::string(KYLIN_TEST_DATA) + "/models/e2e-qwen3-chat",
                                      {.threads = 1, .max_pass_rows = 512, .context_length = 1024});
  return *e;
}

// What each step of the shared scheduler calls (on the inference thread), set per test case.
std::mutex hook_mutex;
std::function<void(std::span<const StepRow>)> hook;

void on_step(std::function<void(std::span<const StepRow>)> f) {
  std::lock_guard lock(hook_mutex);
  hook = std::move(f);
}

Scheduler& scheduler() {
  static Scheduler s(engine(), [] {
    SchedulerOptions o;
    o.slots = 2;
    o.max_queued = 4;
    o.on_step = [](std::span<const StepRow> rows) {
      std::lock_guard lock(hook_mutex);
      if (hook) hook(rows);
    };
    return o;
  }());
  return s;
}

Service& service() {
  static Service s(engine(), scheduler(), "m");
  return s;
}

Value json_of(const Reply& r) { return kylin::json::parse(r.body); }
const Value& error_of(const Value& v) { return *v.find("error"); }
std::string param_of(const Reply& r) {
  const Value body = json_of(r);
  const Value* p = error_of(body).find("param");
  return p && p->is_string() ? p->as_string() : "";
}
std::string message_of(const Reply& r) {
  const Value body = json_of(r);
  return error_of(body).find("message")->as_string();
}

// A stored response, once it is stored (the generation ends on the inference thread after the
// client left); bounded only against a hang.
Value stored(const std::string& id) {
  for (const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5); std::chrono::steady_clock::now() < deadline;) {
    const Reply r = service().response(id);
    if (r.status == status::ok) return json_of(r);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  FAIL("response " << id << " was never stored");
  return {};
}

const char* story = R"("input": "Tell me a long story.", "reasoning": {"effort": "none"}, "temperature": 0)";


TEST_CASE("a whole Responses answer whose client left is stored incomplete (client_disconnected), cut at the next step") {
  // Uncut, the greedy answer runs to its limit, so a cut is what shortens it.
  const Value full = json_of(service().create_response(std::string("{") + story + R"(, "max_output_tokens": 40})").reply);
  REQUIRE(full.find("status")->as_string() == "incomplete");
  REQUIRE(full.find("usage")->find("output_tokens")->as_int() == 40);
  auto watch = std::make_shared<ClientWatch>();
  int steps = 0;
  on_step([&](std::span<const StepRow>) {
    if (++steps == 10) watch->mark_gone();  // as the transport does when the socket closes
  });
  const Started s = service().create_response(std::string("{") + story + R"(, "max_output_tokens": 400})", watch);
  on_step(nullptr);
  REQUIRE(s.reply.status == status::ok);  // what the transport would have dropped
  const Value r = json_of(s.reply);
  CHECK(r.find("status")->as_string() == "incomplete");
  CHECK(r.find("incomplete_details")->find("reason")->as_string() == "client_disconnected");
  const std::int64_t tokens = r.find("usage")->find("output_tokens")->as_int();
  CHECK(tokens >= 9);
  CHECK(tokens <= 11);  // the token of the step that saw the client leave, at most one more
  const Value& last = r.find("output")->as_array().back();
  CHECK(last.find("status")->as_string() == "incomplete");
  const Value kept = stored(r.find("id")->as_string());
  CHECK(kept.find("status")->as_string() == "incomplete");
  CHECK(kept.find("incomplete_details")->find("reason")->as_string() == "client_disconnected");
}

TEST_CASE("a streamed Responses answer cut after 5 deltas is stored incomplete, never completed; a continuation still works") {
  Started s = service().create_response(std::string("{") + story + R"(, "max_output_tokens": 400, "stream": true})");
  REQUIRE(s.stream != nullptr);
  std::string id, events;
  auto deltas = [&] {
    int n = 0;
    for (std::size_t at = events.find("event: response.output_text.delta"); at != std::string::npos;
         at = events.find("event: response.output_text.delta", at + 1))
      ++n;
    return n;
  };
  for (std::string part; deltas() < 5 && s.stream->pop(part, std::chrono::seconds(60));) events += part;
  if (const std::size_t q = events.find("\"resp_"); q != std::string::npos) id = events.substr(q + 1, events.find('"', q + 1) - q - 1);
  REQUIRE(deltas() >= 5);
  REQUIRE_FALSE(id.empty());
  s.stream.reset();  // the transport lets go of the stream when its client is gone
  const Value kept = stored(id);
  CHECK(kept.find("status")->as_string() == "incomplete");
  CHECK(kept.find("incomplete_details")->find("reason")->as_string() == "client_disconnected");
  const std::int64_t tokens = kept.find("usage")->find("output_tokens")->as_int();
  CHECK(tokens >= 5);
  CHECK(tokens < 400);
  const Started next = service().create_response(R"({"previous_response_id": ")" + id + R"(", "input": "Go on.", "max_output_tokens": 2})");
  CHECK(next.reply.status == status::ok);
}

TEST_CASE("n counts against the queue bound: more choices than slots + queue is a 400 naming n; as many fit") {
  const std::string chat = R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "chat_template_kwargs": {"enable_thinking": false}, "n": )";
  const Reply over = service().chat(chat + "7}").reply;  // 2 slots + 4 places
  CHECK(over.status == status::bad_request);
  CHECK(param_of(over) == "n");
  CHECK(message_of(over).find("at most 6 choices") != std::string::npos);
  const Reply six = service().chat(chat + "6}").reply;
  REQUIRE(six.status == status::ok);
  CHECK(json_of(six).find("choices")->size() == 6);
}

TEST_CASE("/infill: n > 1 is refused by name; input_extra is trimmed to fit, newest chunks kept; a FIM part too long names its field") {
  const Reply two = service().infill(R"({"input_prefix": "def f(", "input_suffix": "):\n", "n": 2})").reply;
  CHECK(two.status == status::bad_request);
  CHECK(param_of(two) == "n");
  // 40 chunks of ~100 tokens in a 1024-token context: most must go, the newest stay.
  std::string extra = "[";
  for (int i = 0; i < 40; ++i) {
    std::string text;
    for (int k = 0; k < 25; ++k) text += std::string("x") + std::to_string(i) + "_" + std::to_string(k) + " = " + std::to_string(k) + "\\n";
    extra += std::string(i ? ", " : "") + R"({"filename": "f)" + std::to_string(i) + R"(.py", "text": ")" + text + "\"}";
  }
  extra += "]";
  const Reply trimmed = service().infill(R"({"input_prefix": "def f(", "input_suffix": "):\n", "n_predict": 4, "temperature": 0, "input_extra": )" +
                                         extra + "}").reply;
  REQUIRE(trimmed.status == status::ok);
  const std::int64_t evaluated = json_of(trimmed).find("tokens_evaluated")->as_int();
  CHECK(evaluated + 4 <= 1024);
  CHECK(evaluated > 512);  // what fits was kept, not everything dropped
  // The prompt it ran: the last chunks, whole, in their order (checked on the prompt builder).
  const kylin::Tokenizer& t = engine().tokenizer();
  const auto fim = fim_tokens(t);
  REQUIRE(fim.has_value());
  std::vector<FimFile> files;
  for (int i = 0; i < 3; ++i) files.push_back({"f" + std::to_string(i) + ".py", std::string(200, 'a' + i)});
  std::size_t kept = 0;
  const std::vector<int> all = infill_context(t, *fim, files, true);
  const std::vector<int> two_last = infill_context(t, *fim, {files[1], files[2]}, true);
  CHECK(infill_context(t, *fim, files, true, ContextBudget{static_cast<std::int64_t>(two_last.size()), 1000}, &kept) == two_last);
  CHECK(kept == 2);
  CHECK(infill_context(t, *fim, files, true, ContextBudget{static_cast<std::int64_t>(all.size()), 1000}, &kept) == all);
  CHECK(kept == 3);
  // The prefix alone past the context: a 400 naming it (the extra context is not to blame).
  std::string long_prefix;
  for (int k = 0; k < 700; ++k) long_prefix += "y" + std::to_string(k) + " ";
  const Reply too_long = service().infill(R"({"input_prefix": ")" + long_prefix + R"(", "input_suffix": "):\n", "input_extra": )" + extra + "}").reply;
  CHECK(too_long.status == status::bad_request);
  CHECK(param_of(too_long) == "input_prefix");
  CHECK(message_of(too_long).find("input_extra is trimmed") != std::string::npos);
  const Reply long_suffix = service().infill(R"({"input_prefix": "a", "input_suffix": ")" + long_prefix + R"("})").reply;
  CHECK(param_of(long_suffix) == "input_suffix");
}

TEST_CASE("the small refusals: an empty previous_response_id, an output without its call, a long id cut, counts past 64 bits") {
  const Reply empty = service().create_response(R"({"input": "x", "previous_response_id": ""})").reply;
  CHECK(empty.status == status::bad_request);
  CHECK(param_of(empty) == "previous_response_id");
  const Reply orphan = service().create_response(
      R"({"input": [{"type": "function_call_output", "call_id": "call_nowhere", "output": "42"}], "max_output_tokens": 1})").reply;
  CHECK(orphan.status == status::bad_request);
  CHECK(param_of(orphan) == "input");
  CHECK(message_of(orphan).find("call_nowhere") != std::string::npos);
  // with its call before it, the output is answered
  const Reply answered = service().create_response(R"({"input": [{"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "42"}], "max_output_tokens": 1})").reply;
  CHECK(answered.status == status::ok);
  const std::string long_id(100000, 'r');
  for (const Reply& r : {service().response(long_id), service().delete_response(long_id),
                         service().create_response(R"({"input": "x", "previous_response_id": ")" + long_id + "\"}").reply,
                         service().chat(R"({"model": ")" + long_id + R"(", "messages": [{"role": "user", "content": "x"}]})").reply}) {
    CHECK(r.status >= 400);
    CHECK(r.body.size() < 2000);
    CHECK(r.body.find("100000 bytes") != std::string::npos);
  }
  const Reply huge = service().create_response(R"({"input": "x", "max_output_tokens": 1e20})").reply;
  CHECK(param_of(huge) == "max_output_tokens");
  CHECK(message_of(huge).find(">= 1") != std::string::npos);
  CHECK(message_of(huge).find("-2^63") == std::string::npos);
  const Reply chat_huge = service().chat(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1e20})").reply;
  CHECK(message_of(chat_huge).find(">= 1") != std::string::npos);
  const Reply n_huge = service().chat(R"({"messages": [{"role": "user", "content": "x"}], "n": -1e20})").reply;
  CHECK(param_of(n_huge) == "n");
  CHECK(message_of(n_huge).find(">= 1") != std::string::npos);
}

}  // namespace service_hardening_test
