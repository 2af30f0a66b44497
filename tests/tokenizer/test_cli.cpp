// The built `kylin tokenize` / `kylin detokenize` commands work on a directory holding only
// tokenizer files and print what the library computes. A missing binary fails the test.
#include <doctest/doctest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "common/process.hpp"
#include "tokenizer_test_util.hpp"

namespace {

using kylin::test::kylin_bin;

struct Run {
  int status;
  std::string out;
};

// Runs `kylin <args>` through the shell; stdout only.
Run run_kylin(const std::string& args, const std::string& stdin_file = "") {
  const auto r = kylin::test::run_shell("'" + kylin_bin + "' " + args +
                                        (stdin_file.empty() ? "" : " < '" + stdin_file + "'") + " 2>/dev/null");
  return {r.exit_code, r.out};
}

std::string model_arg() { return "--model '" + kylin::test::qwen3_dir + "'"; }

}  // namespace

TEST_CASE("the kylin CLI binary has been built") {
  REQUIRE_MESSAGE(std::filesystem::exists(kylin_bin), "build the kylin_cli target first: " << kylin_bin);
}

TEST_CASE("kylin tokenize prints comma-separated ids, or {\"ids\": [...]} with --format json") {
  REQUIRE(std::filesystem::exists(kylin_bin));
  Run plain = run_kylin("tokenize " + model_arg() + " 'Hello world!'");
  CHECK(plain.status == 0);
  CHECK(plain.out == "9707,1879,0\n");
  Run json = run_kylin("tokenize " + model_arg() + " --format json '<|im_start|>user'");
  CHECK(json.status == 0);
  CHECK(json.out == "{\"ids\": [151644, 872]}\n");
}

TEST_CASE("kylin tokenize --jsonl prints one id array per JSON string line, matching the library") {
  REQUIRE(std::filesystem::exists(kylin_bin));
  const std::string input = (std::filesystem::temp_directory_path() / "kylin_tokenize_jsonl_input.txt").string();
  {
    std::FILE* f = std::fopen(input.c_str(), "wb");
    REQUIRE(f != nullptr);
    std::fputs("\"Hello\"\n\"\\u4f60\\u597d\\n\"\n\"<think>x</think>\"\n", f);
    std::fclose(f);
  }
  Run run = run_kylin("tokenize " + model_arg() + " --jsonl", input);
  CHECK(run.status == 0);
  const auto& t = kylin::test::qwen3();
  auto line = [&](std::string_view text) {
    std::string s = "[";
    for (int id : t.encode(text)) s += (s.size() > 1 ? ", " : "") + std::to_string(id);
    return s + "]\n";
  };
  CHECK(run.out == line("Hello") + line("你好\n") + line("<think>x</think>"));
  std::filesystem::remove(input);
}

TEST_CASE("kylin detokenize prints the text of the ids; a bad id fails with a nonzero status") {
  REQUIRE(std::filesystem::exists(kylin_bin));
  Run run = run_kylin("detokenize " + model_arg() + " 9707,1879,0");
  CHECK(run.status == 0);
  CHECK(run.out == "Hello world!\n");
  CHECK(run_kylin("detokenize " + model_arg() + " 151669").status != 0);
  CHECK(run_kylin("detokenize " + model_arg() + " 1,x").status != 0);
}
