// Running built binaries from tests: a shell command line in, exit code and stdout out.
// A missing binary fails the calling test (REQUIRE), never skips it.
#pragma once

#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace kylin::test {

inline const std::string kylin_bin = std::string(KYLIN_BIN_DIR) + "/kylin";

struct ProcessResult {
  int exit_code;    // -1 when the process did not exit normally
  std::string out;  // its stdout (add " 2>&1" to the command for stderr too)
};

inline ProcessResult run_shell(const std::string& command, const std::string& required_binary = kylin_bin) {
  REQUIRE_MESSAGE(std::filesystem::exists(required_binary), "build it first: " << required_binary);
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buffer[65536];
  while (std::size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) out.append(buffer, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace kylin::test
