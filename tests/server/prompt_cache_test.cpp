// kylin-server with --cache-dir (issue 20): prompt prefixes survive a restart, a damaged entry
// changes no answer, two servers share one directory, and slot save/restore/erase keep their
// files inside the directory (path traversal refused).
#include <atomic>
#include <fstream>
#include <string>
#include <vector>

#include "common/temp_dir.hpp"
#include "server_process.hpp"

using namespace kylin::test;
using kylin::json::Value;

namespace {

const std::string system_text =
    "You are the assistant of a lighthouse museum. Answer in one sentence, name the lighthouse when you can, and never "
    "invent opening hours. The museum is open every day except Monday.";

std::string completion_body(const std::string& question) {
  Value body = kylin::json::Object{};
  body.set("prompt", system_text + " Question: " + question);
  body.set("max_tokens", 8);
  body.set("temperature", 0);
  return kylin::json::dump(body);
}

struct Answer {
  std::string text;
  std::int64_t cached = 0;
};

Answer ask(ServerProcess& server, const std::string& question) {
  auto c = server.client();
  auto r = post_json(c, "/v1/completions", completion_body(question));
  REQUIRE(r);
  INFO(r->body);
  REQUIRE(r->status == 200);
  const Value v = parse_json(r->body);
  return {at(at(v, "choices").as_array().at(0), "text").as_string(),
          at(at(at(v, "usage"), "prompt_tokens_details"), "cached_tokens").as_int()};
}

// Waits until the background writer has put `n` entries in the directory.
void wait_for_entries(const TempDir& dir, std::size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (dir.files(".kvc").size() < n && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
  REQUIRE(dir.files(".kvc").size() >= n);
}

std::vector<std::string> with_cache(const TempDir& dir) { return {"--cache-dir", dir.path().string(), "--cache-size", "256MiB"}; }

std::pair<int, Value> post_slot(ServerProcess& server, const std::string& target, const std::string& body) {
  auto c = server.client();
  auto r = post_json(c, target, body);
  REQUIRE(r);
  return {r->status, parse_json(r->body)};
}

}  // namespace

TEST_CASE("restart round trip: after a restart the same request loads the stored prefix and answers the same") {
  TempDir dir;
  Answer first;
  {
    ServerProcess server(with_cache(dir));
    first = ask(server, "Which lighthouse is the tallest?");
    CHECK(first.cached == 0);
    wait_for_entries(dir, 1);
  }
  ServerProcess again(with_cache(dir));
  const Answer second = ask(again, "Which lighthouse is the tallest?");
  CHECK(second.text == first.text);
  CHECK(second.cached > 0);
  // Another question after the same long prefix reuses the shared part of the stored prompt.
  CHECK(ask(again, "When was it built?").cached > 20);
  CHECK(again.log().find("prompt cache") == std::string::npos);
}

TEST_CASE("a damaged entry is ignored with a warning and deleted; the answer is the one without a cache") {
  TempDir dir;
  Answer first;
  {
    ServerProcess server(with_cache(dir));
    first = ask(server, "Is the museum open on Monday?");
    wait_for_entries(dir, 1);
  }
  const fs::path entry = dir.files(".kvc").front();
  {
    std::fstream f(entry, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(entry) / 2));
    f.put('\x7f');
  }
  ServerProcess again(with_cache(dir));
  const Answer second = ask(again, "Is the museum open on Monday?");
  CHECK(second.text == first.text);
  CHECK(second.cached == 0);
  CHECK(again.log().find("checksum mismatch") != std::string::npos);
}

TEST_CASE("two servers sharing one cache directory store the same and different prefixes without damaging any") {
  TempDir dir;
  std::vector<std::string> questions = {"Who keeps the light?", "How far does the beam reach?"};
  {
    ServerProcess a(with_cache(dir)), b(with_cache(dir));
    std::atomic<int> ok{0};
    std::vector<std::thread> clients;
    for (ServerProcess* s : {&a, &b})
      for (const auto& q : questions)
        clients.emplace_back([s, q, &ok] {  // no doctest assertions off the test's thread
          auto c = s->client();
          auto r = post_json(c, "/v1/completions", completion_body(q));
          if (r && r->status == 200) ++ok;
        });
    for (auto& t : clients) t.join();
    CHECK(ok == 4);
    wait_for_entries(dir, 2);
  }
  ServerProcess third(with_cache(dir));
  for (const auto& q : questions) CHECK(ask(third, q).cached > 0);
  CHECK(third.log().find("prompt cache") == std::string::npos);
  for (const auto& e : fs::directory_iterator(dir.path())) CHECK(e.path().filename().string().find(".tmp.") == std::string::npos);
}

TEST_CASE("slot save, erase and restore round-trip a slot's state through a file inside the cache directory") {
  TempDir dir;
  ServerProcess server(with_cache(dir));
  const Answer first = ask(server, "Which lighthouse is the oldest?");
  auto [saved_status, saved] = post_slot(server, "/slots/0?action=save", R"({"filename": "museum-1.bin"})");
  REQUIRE(saved_status == 200);
  CHECK(at(saved, "id_slot").as_int() == 0);
  CHECK(at(saved, "filename").as_string() == "museum-1.bin");
  const std::int64_t n_saved = at(saved, "n_saved").as_int();
  CHECK(n_saved > 20);
  CHECK(at(saved, "n_written").as_int() == static_cast<std::int64_t>(fs::file_size(dir / "museum-1.bin")));
  CHECK(at(at(saved, "timings"), "save_ms").is_number());

  auto [erased_status, erased] = post_slot(server, "/slots/0?action=erase", "");
  CHECK(erased_status == 200);
  CHECK(at(erased, "n_erased").as_int() == n_saved);

  auto [restored_status, restored] = post_slot(server, "/slots/0?action=restore", R"({"filename": "museum-1.bin"})");
  REQUIRE(restored_status == 200);
  CHECK(at(restored, "n_restored").as_int() == n_saved);
  const Answer again = ask(server, "Which lighthouse is the oldest?");
  CHECK(again.text == first.text);
  CHECK(again.cached > 20);

  // A damaged or missing file is a 400 naming the problem.
  {
    std::fstream f(dir / "museum-1.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x01');
  }
  auto [bad_status, bad] = post_slot(server, "/slots/0?action=restore", R"({"filename": "museum-1.bin"})");
  CHECK(bad_status == 400);
  CHECK(at(at(bad, "error"), "message").as_string().find("damaged") != std::string::npos);
  CHECK(post_slot(server, "/slots/0?action=restore", R"({"filename": "nothing-here"})").first == 400);
}

TEST_CASE("slot file names that could leave the cache directory, bad ids and bad actions are refused with 400") {
  TempDir dir;
  ServerProcess server(with_cache(dir));
  // a name beside the cache directory that nothing else uses (a fixed one, e.g. ../x, may exist there already)
  const std::string outside = dir.path().filename().string() + "-escaped";
  for (const std::string& name : std::vector<std::string>{"../" + outside, "/etc/passwd", "a/b", "", "..", ".hidden", "x\\u0000y", "a\\\\b", std::string(300, 'a'),
                                 std::string("0123456789abcdef-0123456789abcdef.kvc")}) {
    CAPTURE(name);
    for (const char* action : {"save", "restore"}) {
      auto [status, body] = post_slot(server, std::string("/slots/0?action=") + action, R"({"filename": ")" + name + "\"}");
      CHECK(status == 400);
      CHECK(at(at(body, "error"), "param").as_string() == "filename");
    }
  }
  CHECK(post_slot(server, "/slots/0?action=save", R"({"filename": 5})").first == 400);
  CHECK(post_slot(server, "/slots/1?action=save", R"({"filename": "ok"})").first == 400);  // one slot only
  CHECK(post_slot(server, "/slots/x?action=save", R"({"filename": "ok"})").first == 400);
  CHECK(post_slot(server, "/slots/0?action=delete", R"({"filename": "ok"})").first == 400);
  CHECK(post_slot(server, "/slots/0", R"({"filename": "ok"})").first == 400);
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) files += e.is_regular_file() ? 1 : 0;
  CHECK(files == 0);
  CHECK_FALSE(fs::exists(dir.path().parent_path() / outside));
}

TEST_CASE("without --cache-dir the slot endpoints answer 501 naming the flag") {
  ServerProcess server;
  auto [status, body] = post_slot(server, "/slots/0?action=save", R"({"filename": "a"})");
  CHECK(status == 501);
  CHECK(at(at(body, "error"), "message").as_string().find("--cache-dir") != std::string::npos);
}
