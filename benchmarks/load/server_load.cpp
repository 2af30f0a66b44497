// A bounded load on a running kylin-server (loopback): C clients each stream R chat completions
// at once and the run reports, as JSON, requests ok/failed, aggregate generated tokens/s, time to
// first token and inter-token latency (p50/p99). benchmarks/server_load.sh runs it against
// --parallel 1 and --parallel 8 servers; the numbers are in docs/SERVER.md.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "kylin/core/json.hpp"

namespace {

using Clock = std::chrono::steady_clock;
double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct Sample {
  bool ok = false;
  std::int64_t tokens = 0;
  double ttft_ms = 0;
  std::vector<double> gaps_ms;  // between content chunks
};

// One streamed request: content chunk times, the usage chunk's completion_tokens.
Sample stream_one(const std::string& host, int port, const std::string& body) {
  Sample s;
  httplib::Client c(host, port);
  c.set_read_timeout(std::chrono::seconds(600));
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.set_header("Content-Type", "application/json");
  req.body = body;
  std::string pending;
  const auto t0 = Clock::now();
  Clock::time_point last{};
  bool done = false;
  req.content_receiver = [&](const char* data, std::size_t n, std::uint64_t, std::uint64_t) {
    pending.append(data, n);
    for (std::size_t end; (end = pending.find("\n\n")) != std::string::npos; pending.erase(0, end + 2)) {
      const std::string event = pending.substr(0, end);
      if (event.rfind("data: ", 0) != 0) continue;
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") {
        done = true;
        continue;
      }
      const kylin::json::Value v = kylin::json::parse(payload);
      if (const auto* u = v.find("usage"); u != nullptr && u->is_object()) s.tokens = u->find("completion_tokens")->as_int();
      for (const auto& choice : v.find("choices")->as_array()) {
        const auto* content = choice.find("delta")->find("content");
        if (content == nullptr || !content->is_string() || content->as_string().empty()) continue;
        const auto now = Clock::now();
        if (last == Clock::time_point{}) s.ttft_ms = ms(now - t0);
        else s.gaps_ms.push_back(ms(now - last));
        last = now;
      }
    }
    return true;
  };
  auto r = c.send(req);
  s.ok = r && r->status == 200 && done && s.tokens > 0;
  return s;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5))];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Stream chat completions from C concurrent clients against kylin-server; print JSON stats");
  std::string host = "127.0.0.1";
  int port = 8080, clients = 16, requests = 1, max_tokens = 64;
  app.add_option("--host", host);
  app.add_option("--port", port)->required();
  app.add_option("--clients", clients)->check(CLI::Range(1, 256));
  app.add_option("--requests", requests, "Requests per client, one after another")->check(CLI::Range(1, 100));
  app.add_option("--max-tokens", max_tokens)->check(CLI::Range(1, 4096));
  CLI11_PARSE(app, argc, argv);

  std::mutex m;
  std::vector<Sample> samples;
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i)
    threads.emplace_back([&, i] {
      for (int r = 0; r < requests; ++r) {
        kylin::json::Value body = kylin::json::parse(R"({"temperature": 0, "stream": true, "stream_options": {"include_usage": true},
            "chat_template_kwargs": {"enable_thinking": false}})");
        kylin::json::Value message = kylin::json::Object{};
        message.set("role", "user");
        message.set("content", "Client " + std::to_string(i) + ", request " + std::to_string(r) +
                                   ": tell me about the history of rivers and bridges.");
        body.set("messages", kylin::json::Array{std::move(message)});
        body.set("max_tokens", static_cast<std::int64_t>(max_tokens));
        Sample s = stream_one(host, port, kylin::json::dump(body));
        std::lock_guard lock(m);
        samples.push_back(std::move(s));
      }
    });
  for (auto& t : threads) t.join();
  const double seconds = ms(Clock::now() - t0) / 1000.0;

  std::int64_t ok = 0, tokens = 0;
  std::vector<double> ttft, gaps;
  for (const Sample& s : samples) {
    if (!s.ok) continue;
    ++ok;
    tokens += s.tokens;
    ttft.push_back(s.ttft_ms);
    gaps.insert(gaps.end(), s.gaps_ms.begin(), s.gaps_ms.end());
  }
  kylin::json::Value out = kylin::json::Object{};
  out.set("clients", static_cast<std::int64_t>(clients));
  out.set("requests", static_cast<std::int64_t>(samples.size()));
  out.set("ok", ok);
  out.set("failed", static_cast<std::int64_t>(samples.size()) - ok);
  out.set("generated_tokens", tokens);
  out.set("seconds", seconds);
  out.set("aggregate_tok_s", static_cast<double>(tokens) / seconds);
  out.set("ttft_ms_p50", percentile(ttft, 0.5));
  out.set("ttft_ms_p99", percentile(ttft, 0.99));
  out.set("itl_ms_p50", percentile(gaps, 0.5));
  out.set("itl_ms_p99", percentile(gaps, 0.99));
  std::printf("%s\n", kylin::json::dump(out).c_str());
  return ok == static_cast<std::int64_t>(samples.size()) ? 0 : 1;
}
