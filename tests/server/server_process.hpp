// Test harness: runs the built kylin-server on a free loopback port with the e2e checkpoint
// (a temp model dir of symlinks), waits for /health, and kills it in every path. Also SSE
// parsing and small HTTP helpers over httplib's Client.
#pragma once

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kylin/core/json.hpp"

namespace kylin::test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

inline const fs::path server_binary = KYLIN_BIN_DIR "/kylin-server";

inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw std::runtime_error("cannot find a free loopback port");
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Which checkpoint a test server runs: a directory of tests/data/models (a symlinked copy of it is
// served; the Qwen3 tokenizer is added when it has none).
struct ServedModel {
  std::string name = "e2e-qwen3-fullvocab";
  std::string id = "e2e-qwen3";  // the copy's directory name, which is the server's model id
};

// A model directory holding the checkpoint and a tokenizer; its name is the model id.
class TempModelDir {
 public:
  explicit TempModelDir(const ServedModel& model = {}) {
    std::string pattern = (fs::temp_directory_path() / "kylin-server-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    root_ = pattern;
    dir_ = root_ / model.id;
    fs::create_directory(dir_);
    const fs::path data = KYLIN_TEST_DATA;
    for (const auto& entry : fs::directory_iterator(data / "models" / model.name))
      fs::create_symlink(fs::absolute(entry.path()), dir_ / entry.path().filename());
    if (!fs::exists(dir_ / "tokenizer.json"))
      for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
        fs::create_symlink(fs::absolute(data / "qwen3-tokenizer" / f), dir_ / f);
  }
  TempModelDir(const TempModelDir&) = delete;
  TempModelDir& operator=(const TempModelDir&) = delete;
  ~TempModelDir() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  const fs::path& path() const { return dir_; }
  const fs::path& root() const { return root_; }

 private:
  fs::path root_, dir_;
};

// Resource limits the server process starts under (setrlimit before exec).
struct ProcessLimits {
  // RLIMIT_FSIZE: a write past it fails with EFBIG (SIGXFSZ is ignored), as on a full disk; the
  // server's log counts too.
  std::optional<rlim_t> max_file_bytes;
};

class ServerProcess {
 public:
  // Starts kylin-server with `args` added to --model/--port/--threads; throws if it does not
  // answer /health within the timeout (it is killed then).
  // `asan_options` are appended to ASAN_OPTIONS in the server's environment (sanitizer builds).
  explicit ServerProcess(std::vector<std::string> args = {}, std::string asan_options = {}, const ServedModel& served = {},
                         const ProcessLimits& limits = {})
      : model_(served), port_(free_port()) {
    if (!fs::exists(server_binary)) throw std::runtime_error("kylin-server is not built: " + server_binary.string());
    log_ = model_.root() / "server.log";
    std::vector<std::string> argv_s = {server_binary.string(), "--model", model_.path().string(), "--port",
                                       std::to_string(port_), "--threads", "2"};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (auto& a : argv_s) argv.push_back(a.data());
      argv.push_back(nullptr);
      // dup2, not freopen: freopen would flush the parent's buffered stdout a second time.
      const int log_fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int null_fd = ::open("/dev/null", O_WRONLY);
      if (log_fd < 0 || null_fd < 0 || ::dup2(log_fd, STDERR_FILENO) < 0 || ::dup2(null_fd, STDOUT_FILENO) < 0) ::_exit(126);
      if (!asan_options.empty()) {
        const char* current = std::getenv("ASAN_OPTIONS");
        const std::string options = (current && *current ? std::string(current) + ":" : std::string()) + asan_options;
        ::setenv("ASAN_OPTIONS", options.c_str(), 1);
      }
      if (limits.max_file_bytes) {
        const rlimit fsize{*limits.max_file_bytes, *limits.max_file_bytes};
        if (::signal(SIGXFSZ, SIG_IGN) == SIG_ERR || ::setrlimit(RLIMIT_FSIZE, &fsize) != 0) ::_exit(125);
      }
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    wait_ready();
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;
  ~ServerProcess() { kill_now(); }

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string model_id() const { return model_.path().filename().string(); }
  const fs::path& model_dir() const { return model_.path(); }
  httplib::Client client(std::chrono::seconds read_timeout = 120s) const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(read_timeout);
    c.set_connection_timeout(5s);
    return c;
  }
  std::string log() const {
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  // Sends `sig` and waits up to `timeout`; the exit status (as from waitpid) or nullopt.
  std::optional<int> signal_and_wait(int sig, std::chrono::milliseconds timeout) {
    ::kill(pid_, sig);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return status;
      }
      std::this_thread::sleep_for(10ms);
    }
    return std::nullopt;
  }

  // VmRSS of the server in KiB.
  long rss_kib() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
    return -1;
  }

 private:
  void wait_ready() {
    const auto deadline = std::chrono::steady_clock::now() + 120s;  // sanitizer builds load slowly
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("kylin-server exited during startup:\n" + log());
      }
      httplib::Client c("127.0.0.1", port_);
      c.set_connection_timeout(1s);
      if (auto r = c.Get("/health"); r && r->status == 200) return;
      std::this_thread::sleep_for(50ms);
    }
    kill_now();
    throw std::runtime_error("kylin-server did not become healthy:\n" + log());
  }

  void kill_now() {
    if (pid_ <= 0) return;
    if (int status = 0; ::waitpid(pid_, &status, WNOHANG) == pid_) {  // it died during the test: say why
      std::cerr << "kylin-server exited during the test (wait status " << status << "); its log:\n" << log() << '\n';
      pid_ = -1;
      return;
    }
    if (!signal_and_wait(SIGTERM, 10s)) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    pid_ = -1;
  }

  TempModelDir model_;
  int port_;
  fs::path log_;
  pid_t pid_ = -1;
};

// The `data:` payloads of an SSE body, in order ("[DONE]" included as is).
inline std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < body.size()) {
    std::size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    const std::string event = body.substr(pos, end - pos);
    if (event.rfind("data: ", 0) == 0) out.push_back(event.substr(6));
    pos = end + 2;
  }
  return out;
}

inline json::Value parse_json(const std::string& text) { return json::parse(text, "response"); }

inline const json::Value& at(const json::Value& v, std::string_view key) {
  const json::Value* f = v.find(key);
  if (f == nullptr) throw std::runtime_error("missing key '" + std::string(key) + "' in " + json::dump(v));
  return *f;
}

inline httplib::Result post_json(httplib::Client& c, const std::string& path, const std::string& body,
                                 const httplib::Headers& headers = {}) {
  return c.Post(path.c_str(), headers, body, "application/json");
}

// POSTs a JSON body to `server`; the answer must be 200. Returns its parsed body.
inline json::Value post_ok(const ServerProcess& server, const std::string& path, const std::string& body) {
  auto c = server.client();
  auto r = post_json(c, path, body);
  REQUIRE(r);
  INFO(r->body);
  REQUIRE(r->status == 200);
  return parse_json(r->body);
}

// The JSON payloads of a streamed answer (200 required), [DONE] required and left out.
inline std::vector<json::Value> post_stream(const ServerProcess& server, const std::string& path, const std::string& body) {
  auto c = server.client();
  auto r = post_json(c, path, body);
  REQUIRE(r);
  REQUIRE(r->status == 200);
  const auto payloads = sse_payloads(r->body);
  REQUIRE_FALSE(payloads.empty());
  CHECK(payloads.back() == "[DONE]");
  std::vector<json::Value> out;
  for (std::size_t i = 0; i + 1 < payloads.size(); ++i) out.push_back(parse_json(payloads[i]));
  return out;
}

// POSTs a JSON body to `server`; the answer must be 400. Returns its parsed body.
inline json::Value post_400(const ServerProcess& server, const std::string& path, const std::string& body) {
  auto c = server.client();
  auto r = post_json(c, path, body);
  REQUIRE(r);
  INFO(r->body);
  CHECK(r->status == 400);
  return parse_json(r->body);
}

}  // namespace kylin::test
