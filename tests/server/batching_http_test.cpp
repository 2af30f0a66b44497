// kylin-server --parallel N runs concurrent requests together, one batched forward per step
// (continuous batching): each request's answer is the one it gets when it runs by itself (greedy
// and seeded sampling, chat and completions, whole and streamed, a long prompt prefilled in
// chunks between the others' tokens), clients that leave mid-stream do not disturb the others,
// and the generations really overlap (/health counts them). Each case states its property.
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "common/sanitizer.hpp"
#include "raw_socket.hpp"
#include "server_process.hpp"

using namespace kylin::test;
using kylin::json::Value;

namespace batching_http_test {

struct Request {
  std::string path, body;
  bool stream = false;
};

std::string words(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += (i % 7 == 0 ? "river " : i % 3 == 0 ? "stone " : "light ");
  return s;
}

std::vector<Request> mixed_requests() {
  const std::string no_think = R"("chat_template_kwargs": {"enable_thinking": false})";
  auto chat = [&](const std::string& content, const std::string& extra) {
    return R"({"messages": [{"role": "user", "content": ")" + content + R"("}], )" + no_think + ", " + extra + "}";
  };
  return {
      {"/v1/chat/completions", chat("Tell me a story.", R"("max_tokens": 40, "temperature": 0)"), false},
      {"/v1/chat/completions", chat("Name three colours.", R"("max_tokens": 60, "temperature": 0.8, "seed": 11, "stream": true)"), true},
      {"/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 30, "temperature": 0, "stream": true})", true},
      {"/v1/completions", R"({"prompt": "The weather today", "max_tokens": 50, "temperature": 1, "seed": 5})", false},
      {"/v1/chat/completions", chat("Summarise: " + words(700), R"("max_tokens": 20, "temperature": 0)"), false},  // 3 chunks
      {"/v1/chat/completions", chat("Count to ten.", R"("max_tokens": 70, "temperature": 0.7, "top_k": 40, "seed": 3)"), false},
  };
}

// The answer's text: content (chat) or text (completions), whole or from the streamed deltas.
std::string answer(const ServerProcess& server, const Request& r) {
  auto c = server.client();
  auto res = post_json(c, r.path, r.body);
  REQUIRE(res);
  INFO(res->body);
  REQUIRE(res->status == 200);
  const bool chat = r.path == "/v1/chat/completions";
  if (!r.stream) {
    const Value body = parse_json(res->body);
    const Value& choice = at(body, "choices").as_array().at(0);
    return chat ? at(at(choice, "message"), "content").as_string() : at(choice, "text").as_string();
  }
  std::string text;
  const auto payloads = sse_payloads(res->body);
  REQUIRE_FALSE(payloads.empty());
  CHECK(payloads.back() == "[DONE]");
  for (std::size_t i = 0; i + 1 < payloads.size(); ++i) {
    const Value chunk = parse_json(payloads[i]);
    for (const Value& choice : at(chunk, "choices").as_array()) {
      const Value* piece = chat ? at(choice, "delta").find("content") : choice.find("text");
      if (piece != nullptr && piece->is_string()) text += piece->as_string();
    }
  }
  return text;
}

Value health(const ServerProcess& server) {
  auto c = server.client();
  auto h = c.Get("/health");
  REQUIRE(h);
  return parse_json(h->body);
}

// /health once no generation is active or queued, or after `limit` (whatever it then says): a
// client that leaves is noticed by the transport and its generation stopped at the next step,
// which may come after the other requests have their answers.
Value health_once_idle(const ServerProcess& server, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto until = std::chrono::steady_clock::now() + limit;
  for (;;) {
    Value h = health(server);
    if ((at(h, "active").as_int() == 0 && at(h, "queued").as_int() == 0) || std::chrono::steady_clock::now() > until) return h;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string raw_post(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

TEST_CASE("concurrent requests on --parallel 4 give the answers they give alone, beside clients that leave mid-stream") {
  const std::vector<Request> requests = mixed_requests();
  std::vector<std::string> alone;
  {
    ServerProcess server({"--ctx", "16384", "--parallel", "4"});
    for (const Request& r : requests) alone.push_back(answer(server, r));
  }
  ServerProcess server({"--ctx", "16384", "--parallel", "4", "--queue", "16"});
  // Two clients that leave: one reads a few streamed chunks, one never reads its long answer. They
  // ask 15000 tokens each, far more than all requests here make before the two are stopped (~2100
  // on a Zen 5 VM), so a fast host cannot meet the bound below by finishing them.
  std::vector<RawSocket> leaving;
  for (int i = 0; i < 2; ++i) {
    leaving.emplace_back(server.port());
    leaving.back().send(raw_post("/v1/completions", R"({"prompt": "Far away", "max_tokens": 15000, "temperature": 0, "stream": )" +
                                                        std::string(i == 0 ? "true" : "false") + "}"));
  }
  std::vector<std::future<std::string>> together;
  for (const Request& r : requests) together.push_back(std::async(std::launch::async, [&server, r] { return answer(server, r); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (auto& s : leaving) s.close();
  for (std::size_t i = 0; i < requests.size(); ++i) {
    CAPTURE(i);
    CAPTURE(requests[i].body.substr(0, 120));
    CHECK(together[i].get() == alone[i]);
  }
  // The two who left were stopped: the server goes idle, and all requests together generated
  // fewer tokens than those two would have alone (15000 each).
  const Value h = health_once_idle(server);
  MESSAGE("tokens generated by all requests, two of 15000 tokens abandoned after 300 ms: ", at(h, "generated_tokens").as_int());
  CHECK(at(h, "generated_tokens").as_int() < 30000);
  CHECK(at(h, "active").as_int() == 0);
  CHECK(at(h, "queued").as_int() == 0);
}

TEST_CASE("four long requests run at once: /health counts four active generations, none queued") {
  ServerProcess server({"--ctx", "2048", "--parallel", "4"});
  // long enough that all four overlap; a sanitizer build's slower steps need fewer tokens for that
  const std::string body = R"({"prompt": "A list of numbers:", "max_tokens": )" + std::to_string(kylin::test::sanitized ? 120 : 400) +
                           R"(, "temperature": 0})";
  std::vector<std::future<std::string>> running;
  for (int i = 0; i < 4; ++i)
    running.push_back(std::async(std::launch::async, [&server, &body] { return answer(server, {"/v1/completions", body, false}); }));
  std::int64_t most = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (most < 4 && std::chrono::steady_clock::now() < deadline) {
    const Value h = health(server);
    most = std::max(most, at(h, "active").as_int());
    if (most < 4) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(most == 4);
  std::vector<std::string> texts;
  for (auto& r : running) texts.push_back(r.get());
  for (const std::string& t : texts) CHECK(t == texts[0]);  // the same greedy request, batched with itself
}

}  // namespace batching_http_test
