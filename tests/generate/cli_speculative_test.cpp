// `kylin run/chat/generate --draft DIR [--draft-max K] [--lookup N]` as processes: greedy output
// equals the output without them (a draft of another random model, the model drafting for itself,
// prompt lookup), the stats show the drafts, and a draft of another tokenizer is refused naming it.
#include <doctest/doctest.h>

#include <string>

#include "common/process.hpp"
#include "common/temp_model.hpp"
#include "kylin/core/json.hpp"

namespace cli_speculative_test {

using kylin::test::kylin_bin;
using kylin::test::run_shell;

const std::string chat_model = std::string(KYLIN_TEST_DATA) + "/models/e2e-qwen3-chat";

kylin::json::Value json_of(const kylin::test::ProcessResult& r) {
  INFO(r.out);
  REQUIRE(r.exit_code == 0);
  return kylin::json::parse(r.out, "kylin generate");
}

TEST_CASE("kylin generate --tokens/--prompt with --draft or --lookup: the greedy tokens of a plain run, drafts reported") {
  const kylin::test::TempModel target("e2e-qwen3-fullvocab", kylin::test::TestTokenizer::qwen3);
  for (const char* input : {" --tokens 9707,11,1879,0,9707,11", " --prompt 'Once upon a time, once upon'"}) {
    CAPTURE(input);
    const std::string base = kylin_bin + " generate --model " + target.dir().string() + input + " --greedy -n 24 -t 2 --format json";
    const auto plain = json_of(run_shell(base + " 2>&1"));
    for (const std::string& flags : {" --draft " + chat_model + " --draft-max 4 --draft-p-min 0",
                                    " --draft " + target.dir().string() + " --draft-max 3 --draft-p-min 0", std::string(" --lookup 2")}) {
      CAPTURE(flags);
      const auto spec = json_of(run_shell(base + flags + " 2>&1"));
      CHECK(kylin::json::dump(*spec.find("tokens")) == kylin::json::dump(*plain.find("tokens")));
      CHECK(spec.find("draft_tokens")->as_int() > 0);
      if (flags.find(target.dir().string()) != std::string::npos)  // the model drafting for itself: all accepted
        CHECK(spec.find("draft_accepted")->as_int() == spec.find("draft_tokens")->as_int());
    }
  }
  // several sequences cannot speculate together: one line saying so
  const auto two = run_shell(kylin_bin + " generate --model " + target.dir().string() + " --tokens 1,2 --tokens 3,4 --lookup 2 2>&1");
  CHECK(two.exit_code != 0);
  CHECK(two.out.find("one --tokens list") != std::string::npos);
}

TEST_CASE("kylin run and chat --draft: the answer of a plain run, the stats line counts drafts; another tokenizer is refused by name") {
  const kylin::test::TempModel other("e2e-qwen3-fullvocab", kylin::test::TestTokenizer::qwen3);
  const std::string run = kylin_bin + " run --model " + chat_model + " -p 'Tell me a story.' --greedy --no-think -n 30 -t 2";
  const auto plain = run_shell(run + " 2>/dev/null");
  REQUIRE(plain.exit_code == 0);
  const auto spec = run_shell(run + " --draft " + other.dir().string() + " --draft-p-min 0 2>/dev/null");
  CHECK(spec.exit_code == 0);
  CHECK(spec.out == plain.out);
  const auto stats = run_shell(run + " --draft " + chat_model + " --draft-p-min 0 2>&1 >/dev/null");
  CHECK(stats.out.find("drafts ") != std::string::npos);
  CHECK(stats.out.find(" accepted") != std::string::npos);
  const std::string chat = "printf 'Hi\\nName a colour.\\n/quit\\n' | " + kylin_bin + " chat --model " + chat_model + " --greedy --no-think -n 12 -t 2";
  const auto chat_plain = run_shell(chat + " 2>/dev/null");
  REQUIRE(chat_plain.exit_code == 0);
  const auto chat_spec = run_shell(chat + " --draft " + other.dir().string() + " --lookup 2 --draft-p-min 0 2>/dev/null");
  CHECK(chat_spec.exit_code == 0);
  CHECK(chat_spec.out == chat_plain.out);
  const kylin::test::TempModel bytes("small-qwen3", kylin::test::TestTokenizer::bytes);
  const auto refused = run_shell(run + " --draft " + bytes.dir().string() + " 2>&1");
  CHECK(refused.exit_code != 0);
  CHECK(refused.out.find(bytes.dir().string()) != std::string::npos);
  CHECK(refused.out.find("token ids") != std::string::npos);
}

}  // namespace cli_speculative_test
