// Attacks on kylin-server through its --cache-dir (issue 39, second round): FIFOs and symlinks
// where slot files and prompt-cache entries are read, forged slot files with valid checksums,
// errors that would name the cache directory, a full disk, and entries of another weight format
// (issue 38). Each case states its property; none asserts a duration.
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "common/temp_dir.hpp"
#include "kylin/generate/kv_file.hpp"
#include "server_process.hpp"

using namespace kylin::test;
using kylin::json::Value;

namespace attack_files_test {

const std::string lighthouse =
    "You are the assistant of a lighthouse museum. Answer in one sentence, name the lighthouse when you can, and never "
    "invent opening hours. The museum is open every day except Monday.";

std::vector<std::string> cache_args(const TempDir& dir, std::vector<std::string> more = {}) {
  std::vector<std::string> args{"--cache-dir", dir.path().string(), "--cache-size", "256MiB"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

struct Answer {
  int status = 0;
  Value body;
};

// A request that must come back at all: the client waits a generous minute, so a server blocked
// in open() fails the test instead of hanging it.
Answer post(ServerProcess& server, const std::string& target, const std::string& body) {
  auto c = server.client(std::chrono::seconds(60));
  auto r = post_json(c, target, body);
  REQUIRE_MESSAGE(r, "no answer to ", target, " within a minute");
  return {r->status, parse_json(r->body)};
}

std::string completion(const std::string& question, int max_tokens = 4) {
  Value body = kylin::json::Object{};
  body.set("prompt", lighthouse + " Question: " + question);
  body.set("max_tokens", max_tokens);
  body.set("temperature", 0);
  return kylin::json::dump(body);
}

std::int64_t cached_tokens(const Answer& a) {
  return at(at(at(a.body, "usage"), "prompt_tokens_details"), "cached_tokens").as_int();
}

std::string message_of(const Answer& a) { return at(at(a.body, "error"), "message").as_string(); }

void wait_for_entries(const TempDir& dir, std::size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (dir.files(".kvc").size() < n && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(dir.files(".kvc").size() >= n);
}

// After an attack the server still serves: nothing queued, a completion answered.
void still_serves(ServerProcess& server) {
  auto c = server.client();
  auto h = c.Get("/health");
  REQUIRE(h);
  CHECK(at(parse_json(h->body), "queued").as_int() == 0);
  CHECK(post(server, "/v1/completions", completion("Who keeps the light?")).status == 200);
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST_CASE("a FIFO named as a slot file or a prompt-cache entry is refused or skipped; generation never blocks on it") {
  TempDir dir;
  ServerProcess server(cache_args(dir));
  REQUIRE(::mkfifo((dir / "x.bin").c_str(), 0600) == 0);
  const Answer restored = post(server, "/slots/0?action=restore", R"({"filename": "x.bin"})");
  CHECK(restored.status == 400);
  CHECK(message_of(restored).find("not a regular file") != std::string::npos);
  still_serves(server);

  // A FIFO under this model's key: every prompt of 16+ tokens lists the key's entries.
  wait_for_entries(dir, 1);
  const std::string key = dir.files(".kvc").front().filename().string().substr(0, 16);
  REQUIRE(::mkfifo((dir / (key + "-0123456789abcdef.kvc")).c_str(), 0600) == 0);
  const Answer a = post(server, "/v1/completions", completion("Which lighthouse is the oldest?"));
  CHECK(a.status == 200);
  still_serves(server);
}

TEST_CASE("a symlink in the cache directory is never followed, even to a valid slot file outside it") {
  TempDir dir;
  ServerProcess server(cache_args(dir));
  REQUIRE(post(server, "/v1/completions", completion("Which lighthouse is the tallest?")).status == 200);
  REQUIRE(post(server, "/slots/0?action=save", R"({"filename": "a.bin"})").status == 200);
  TempDir outside;
  fs::rename(dir / "a.bin", outside / "a.bin");
  fs::create_symlink(outside / "a.bin", dir / "link.bin");
  fs::create_symlink("/etc/passwd", dir / "passwd.bin");
  for (const char* name : {"link.bin", "passwd.bin"}) {
    CAPTURE(name);
    const Answer a = post(server, "/slots/0?action=restore", std::string(R"({"filename": ")") + name + "\"}");
    CHECK(a.status == 400);
    CHECK(message_of(a).find("symbolic link") != std::string::npos);
  }
  // Saving onto the link's name replaces the link; the file outside stays as it was.
  const std::string before = read_file(outside / "a.bin");
  REQUIRE(post(server, "/slots/0?action=save", R"({"filename": "link.bin"})").status == 200);
  CHECK_FALSE(fs::is_symlink(dir / "link.bin"));
  CHECK(read_file(outside / "a.bin") == before);
}

TEST_CASE("a forged slot file with a valid checksum holding NaN or infinity is refused; the checksum is no authentication") {
  TempDir dir;
  ServerProcess server(cache_args(dir));
  REQUIRE(post(server, "/v1/completions", completion("Is the museum open on Monday?")).status == 200);
  REQUIRE(post(server, "/slots/0?action=save", R"({"filename": "good.bin"})").status == 200);
  std::string bytes = read_file(dir / "good.bin");
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data() + 40, 8);  // n_tokens (docs/PROMPT_CACHE.md)
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::string forged = bytes;
    std::memcpy(forged.data() + 64 + 4 * n + 4 * 7, &bad, 4);
    const std::uint64_t sum = kylin::xxh64(std::as_bytes(std::span(forged.data(), forged.size() - 8)));
    std::memcpy(forged.data() + forged.size() - 8, &sum, 8);
    std::ofstream(dir / "forged.bin", std::ios::binary | std::ios::trunc).write(forged.data(), static_cast<std::streamsize>(forged.size()));
    const Answer a = post(server, "/slots/0?action=restore", R"({"filename": "forged.bin"})");
    CHECK(a.status == 400);
    CHECK(message_of(a).find("non-finite") != std::string::npos);
  }
  CHECK(post(server, "/slots/0?action=restore", R"({"filename": "good.bin"})").status == 200);
}

TEST_CASE("slot errors name the file as the client gave it, never the cache directory's path") {
  TempDir dir;
  ServerProcess server(cache_args(dir));
  const Answer missing = post(server, "/slots/0?action=restore", R"({"filename": "nothing-here"})");
  CHECK(missing.status == 400);
  CHECK(at(at(missing.body, "error"), "param").as_string() == "filename");
  CHECK(message_of(missing).find("nothing-here") != std::string::npos);
  CHECK(message_of(missing).find(dir.path().string()) == std::string::npos);
  CHECK(message_of(missing).find("/tmp") == std::string::npos);
  std::ofstream(dir / "junk.bin") << "not a kv file";
  const Answer junk = post(server, "/slots/0?action=restore", R"({"filename": "junk.bin"})");
  CHECK(junk.status == 400);
  CHECK(message_of(junk).find(dir.path().string()) == std::string::npos);
}

TEST_CASE("a slot save the disk cannot hold is 507 Insufficient Storage, leaves no file, and the server goes on") {
  TempDir dir;
  // 16 KiB per file (the log too): a slot of ~60 tokens is ~30 KiB in this model's f32 KV.
  ServerProcess server(cache_args(dir, {"--no-access-log"}), {}, {}, {.max_file_bytes = 16 << 10});
  REQUIRE(post(server, "/v1/completions", completion("How far does the beam reach?", 8)).status == 200);
  const Answer a = post(server, "/slots/0?action=save", R"({"filename": "big.bin"})");
  CHECK(a.status == 507);
  CHECK(at(at(a.body, "error"), "param").as_string() == "filename");
  CHECK(message_of(a).find(dir.path().string()) == std::string::npos);
  for (const auto& e : fs::directory_iterator(dir.path())) CHECK(e.path().filename().string().find("big.bin") == std::string::npos);
  REQUIRE(post(server, "/slots/0?action=erase", "").status == 200);
  CHECK(post(server, "/slots/0?action=save", R"({"filename": "small.bin"})").status == 200);  // an empty slot fits
}

TEST_CASE("servers of another weight format share a cache directory without loading each other's entries or slot files (issue 38)") {
  TempDir dir;
  const std::string question = "Which lighthouse is the oldest?";
  {
    ServerProcess stored(cache_args(dir));
    REQUIRE(post(stored, "/v1/completions", completion(question)).status == 200);
    REQUIRE(post(stored, "/slots/0?action=save", R"({"filename": "stored.bin"})").status == 200);
    wait_for_entries(dir, 1);
  }
  {
    ServerProcess q4(cache_args(dir, {"--weights", "q4"}));
    const Answer a = post(q4, "/v1/completions", completion(question));
    REQUIRE(a.status == 200);
    CHECK(cached_tokens(a) == 0);
    const Answer restore = post(q4, "/slots/0?action=restore", R"({"filename": "stored.bin"})");
    CHECK(restore.status == 400);
    CHECK(message_of(restore).find("another model") != std::string::npos);
    REQUIRE(post(q4, "/slots/0?action=save", R"({"filename": "q4.bin"})").status == 200);
    wait_for_entries(dir, 2);  // its own entry beside the stored-weights one
    CHECK(q4.log().find("prompt cache") == std::string::npos);
  }
  ServerProcess again(cache_args(dir));
  const Answer a = post(again, "/v1/completions", completion(question));
  CHECK(cached_tokens(a) > 0);  // its own entry
  CHECK(post(again, "/slots/0?action=restore", R"({"filename": "q4.bin"})").status == 400);
  CHECK(post(again, "/slots/0?action=restore", R"({"filename": "stored.bin"})").status == 200);
  CHECK(again.log().find("prompt cache") == std::string::npos);
}

}  // namespace attack_files_test
