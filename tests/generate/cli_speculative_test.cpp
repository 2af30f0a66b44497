// `kylin run/chat/generate --draft DIR [--draft-max K] [--lookup N]` and `--mtp [K]` as processes: greedy
// output equals the output without them (a draft of another random model, the model drafting for itself,
// prompt lookup, the checkpoint's MTP head), the stats show the drafts, and a draft of another tokenizer is
// refused naming it; `kylin bench --mtp` reports the head's cost.
#include <doctest/doctest.h>

#include <cmath>
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

namespace cli_speculative_test {

// e2e-qwen35-fullvocab: a Qwen3.5 checkpoint with its MTP head and the synthetic Qwen3.5 tokenizer
const std::string mtp_model = std::string(KYLIN_TEST_DATA) + "/models/e2e-qwen35-fullvocab";

TEST_CASE("--mtp: kylin generate, run and chat give the greedy output of a plain run, the stats count the head's drafts; misuse is one line naming the flag") {
  const std::string base = kylin_bin + " generate --model " + mtp_model + " --prompt 'Once upon a time, once upon' --greedy -n 20 -t 2 --format json";
  const auto plain = json_of(run_shell(base + " 2>&1"));
  for (const char* flags : {" --mtp", " --mtp 1", " --mtp 4 --lookup 2"}) {
    CAPTURE(flags);
    const auto spec = json_of(run_shell(base + flags + " 2>&1"));
    CHECK(kylin::json::dump(*spec.find("tokens")) == kylin::json::dump(*plain.find("tokens")));
    CHECK(spec.find("draft_tokens")->as_int() > 0);
  }
  const std::string run = kylin_bin + " run --model " + mtp_model + " -p 'Tell me a story.' --greedy --no-think -n 16 -t 2";
  const auto run_plain = run_shell(run + " 2>/dev/null");
  REQUIRE(run_plain.exit_code == 0);
  const auto run_mtp = run_shell(run + " --mtp 2 2>/dev/null");
  CHECK(run_mtp.exit_code == 0);
  CHECK(run_mtp.out == run_plain.out);
  const auto stats = run_shell(run + " --mtp 2>&1 >/dev/null");
  CHECK(stats.out.find("drafts ") != std::string::npos);
  const std::string chat = "printf 'Hi\\nName a colour.\\n/quit\\n' | " + kylin_bin + " chat --model " + mtp_model + " --greedy --no-think -n 10 -t 2";
  const auto chat_plain = run_shell(chat + " 2>/dev/null");
  REQUIRE(chat_plain.exit_code == 0);
  const auto chat_mtp = run_shell(chat + " --mtp 3 2>/dev/null");
  CHECK(chat_mtp.exit_code == 0);
  CHECK(chat_mtp.out == chat_plain.out);
  // a checkpoint without the head, the head beside a draft model, K out of range
  for (const std::string& bad : {kylin_bin + " run --model " + chat_model + " -p hi -n 2 --mtp", run + " --mtp --draft " + chat_model, run + " --mtp 0"}) {
    CAPTURE(bad);
    const auto r = run_shell(bad + " 2>&1");
    CHECK(r.exit_code != 0);
    CHECK(r.out.find("mtp") != std::string::npos);
  }
}

TEST_CASE("kylin bench --mtp: the MTP step's cost against a target step, the cost model at acceptance 0.5..0.9, greedy output checked against plain") {
  const auto r = run_shell(kylin_bin + " bench --model " + mtp_model + " --mtp 3 -p 0 -n 9 -r 1 -t 2 --format json 2>&1");
  const auto out = json_of(r);
  const kylin::json::Value* spec = out.find("speculative");
  REQUIRE(spec != nullptr);
  CHECK(spec->find("draft")->as_string() == "mtp");
  CHECK(spec->find("draft_max")->as_int() == 3);
  const double mtp_cost = spec->find("draft_step_ratio")->as_double();
  // a measured time ratio: only its sign is a property of the code (a sanitizer or a busy core moves it freely)
  CHECK(mtp_cost > 0);
  CHECK(std::isfinite(mtp_cost));
  const auto& cost = spec->find("cost_model")->as_array();
  REQUIRE(cost.size() == 8);
  for (const auto& row : cost) {
    const double k = static_cast<double>(row.find("k")->as_int()), rk = row.find("verify_ratio")->as_double();
    // at acceptance 0.8 a pass emits (1 - 0.8^(k+1)) / 0.2 tokens, and costs k MTP steps beside the verification
    CHECK(row.find("speedup_a8")->as_double() == doctest::Approx((1 - std::pow(0.8, k + 1)) / 0.2 / rk));
    CHECK(row.find("speedup_with_draft_a8")->as_double() == doctest::Approx((1 - std::pow(0.8, k + 1)) / 0.2 / (rk + k * mtp_cost)));
  }
  CHECK(spec->find("tg_spec_tok_s")->as_double() > 0);
}

}  // namespace cli_speculative_test
