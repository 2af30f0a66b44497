// `kylin chat-template` renders each stdin JSON line to one JSON string line, matching the
// shared Qwen3 reference. The built CLI must exist: a missing binary fails this test.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kylin/core/json.hpp"

namespace {

// Quoted shell command "bin" args < in > out (ostringstream: GCC 12 -Wrestrict misfires on string +).
std::string shell(const std::filesystem::path& bin, const std::string& args, const std::filesystem::path& in,
                  const std::filesystem::path& out) {
  std::ostringstream cmd;
  cmd << '"' << bin.string() << "\" " << args << " < \"" << in.string() << "\" > \"" << out.string() << "\" 2>&1";
  return cmd.str();
}

std::vector<std::string> read_lines(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

}  // namespace

TEST_CASE("kylin chat-template prints the reference rendering of every shared Qwen3 case") {
  const std::filesystem::path bin = KYLIN_BIN_DIR "/kylin";
  REQUIRE_MESSAGE(std::filesystem::exists(bin), "build the kylin_cli target first: " << bin);
  const std::string input = KYLIN_TEST_DATA "/reference/qwen3-chat-template.jsonl";
  const auto out = std::filesystem::temp_directory_path() / "kylin-chat-cli-test.out";
  const std::string model_arg = "chat-template --model \"" KYLIN_TEST_DATA "/qwen3-tokenizer\"";
  const std::string cmd = shell(bin, model_arg, input, out);
  REQUIRE(std::system(cmd.c_str()) == 0);
  const auto cases = read_lines(input);
  const auto got = read_lines(out);
  REQUIRE(got.size() == cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    CAPTURE(i);
    const auto expected = kylin::json::parse(cases[i]).find("expected")->as_string();
    CHECK(kylin::json::parse(got[i]).as_string() == expected);
  }
  std::filesystem::remove(out);
}

TEST_CASE("kylin chat-template honours add_generation_prompt false and tools at the top level, and fails on bad input") {
  const std::filesystem::path bin = KYLIN_BIN_DIR "/kylin";
  REQUIRE(std::filesystem::exists(bin));
  const auto dir = std::filesystem::temp_directory_path();
  const auto in = dir / "kylin-chat-cli-in.jsonl", out = dir / "kylin-chat-cli-out.jsonl";
  std::ofstream(in) << R"({"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": false})" << "\n"
                    << R"({"messages": [{"role": "user", "content": "Hi"}], "tools": [{"name": "f"}]})" << "\n";
  const std::string model_arg = "chat-template --model \"" KYLIN_TEST_DATA "/qwen3-tokenizer\"";
  REQUIRE(std::system(shell(bin, model_arg, in, out).c_str()) == 0);
  const auto got = read_lines(out);
  REQUIRE(got.size() == 2);
  CHECK(kylin::json::parse(got[0]).as_string() == "<|im_start|>user\nHi<|im_end|>\n");
  CHECK(kylin::json::parse(got[1]).as_string().find("<tools>\n{\"name\": \"f\"}\n</tools>") != std::string::npos);
  std::ofstream(in) << "{not json\n";
  CHECK(std::system(shell(bin, model_arg, in, out).c_str()) != 0);
  std::filesystem::remove(in);
  std::filesystem::remove(out);
}
