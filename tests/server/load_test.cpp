// Bounded load on loopback: 200 chat requests from 8 concurrent clients. Every request must
// complete or be refused with 429/503, and the server's VmRSS must come back near its baseline.
// Prints requests/s and p50/p99 latency (the numbers in docs/SERVER.md, "Load test").
#include <algorithm>
#include <mutex>
#include <thread>

#include "server_process.hpp"

using namespace kylin::test;

TEST_CASE("200 requests from 8 clients all complete or get 429/503, and memory returns near its baseline") {
  constexpr int clients = 8, per_client = 25;
  // Under AddressSanitizer freed memory waits in a quarantine (256 MB) that would read as growth.
  ServerProcess server({"--ctx", "1024", "--queue", "16"}, "quarantine_size_mb=0:thread_local_quarantine_size_kb=0");
  auto warm = server.client();
  const std::string body = R"({"messages": [{"role": "user", "content": "Write one short line about the sea"}],
                               "max_tokens": 4, "temperature": 0.7, "seed": 1})";
  for (int i = 0; i < 3; ++i) REQUIRE(post_json(warm, "/v1/chat/completions", body));
  const long baseline = server.rss_kib();
  REQUIRE(baseline > 0);

  std::mutex mutex;
  std::vector<double> latencies_ms;
  int ok = 0, refused = 0, other = 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < clients; ++t)
    threads.emplace_back([&, t] {
      auto c = server.client();
      for (int i = 0; i < per_client; ++i) {
        const bool stream = (t + i) % 2 == 0;
        const std::string b = body.substr(0, body.size() - 1) + (stream ? R"(, "stream": true})" : "}");
        const auto start = std::chrono::steady_clock::now();
        auto r = post_json(c, "/v1/chat/completions", b);
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        std::lock_guard lock(mutex);
        if (r && r->status == 200 && (!stream || r->body.ends_with("data: [DONE]\n\n"))) ++ok, latencies_ms.push_back(ms);
        else if (r && (r->status == 429 || r->status == 503)) ++refused;
        else ++other;
      }
    });
  for (auto& th : threads) th.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  CHECK(other == 0);
  CHECK(ok + refused == clients * per_client);
  CHECK(ok > 0);
  std::sort(latencies_ms.begin(), latencies_ms.end());
  auto pct = [&](double p) { return latencies_ms[static_cast<std::size_t>(p * static_cast<double>(latencies_ms.size() - 1))]; };
  MESSAGE("load: ", ok, " ok, ", refused, " refused in ", seconds, " s = ", (ok + refused) / seconds,
          " req/s; latency p50 ", pct(0.5), " ms, p99 ", pct(0.99), " ms");

  // Memory: allocator caches may keep a little, a leak per request would not fit in 64 MiB.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const long after = server.rss_kib();
  MESSAGE("VmRSS baseline ", baseline, " KiB, after load ", after, " KiB");
  CHECK(after < baseline + 64 * 1024);
  auto h = warm.Get("/health");
  REQUIRE(h);
  CHECK(h->status == 200);
}
