// kylin-server --model-draft / --mtp / --lookup end to end: greedy answers are the same with speculation
// and with a request's "speculative": false, whole and streamed; `timings` report the tokens
// drafted and accepted and /metrics counts them; a bad "speculative" is a 400 naming it; a draft
// of another tokenizer stops the server at startup with an error naming it. Each case states its property.
#include <chrono>
#include <string>
#include <thread>

#include "common/process.hpp"
#include "common/temp_model.hpp"
#include "server_process.hpp"

using namespace kylin::test;
using kylin::json::Value;

namespace speculative_http_test {

const std::string draft_dir = std::string(KYLIN_TEST_DATA) + "/models/e2e-qwen3-chat";  // another random model, the same tokenizer

ServerProcess& server() {
  static ServerProcess s({"--ctx", "1024", "--parallel", "2", "--model-draft", draft_dir, "--draft-max", "4", "--draft-p-min", "0"});
  return s;
}

std::string chat(const std::string& extra) {
  return R"({"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 30, "temperature": 0,
            "chat_template_kwargs": {"enable_thinking": false})" + extra + "}";
}

std::string content(const Value& r) { return at(at(at(r, "choices").as_array().at(0), "message"), "content").as_string(); }

double sample(const std::string& text, const std::string& series) {
  const auto at_line = text.find("\n" + series + " ");
  if (at_line == std::string::npos) return -1;
  return std::stod(text.substr(at_line + series.size() + 2));
}

std::string metrics(const ServerProcess& s) {
  auto c = s.client();
  auto r = c.Get("/metrics");
  REQUIRE(r);
  return r->body;
}

TEST_CASE("--model-draft: greedy answers equal those of \"speculative\": false; timings count drafts, /metrics sums them") {
  const Value spec = kylin::test::post_ok(server(), "/v1/chat/completions", chat(""));
  const Value plain = kylin::test::post_ok(server(), "/v1/chat/completions", chat(R"(, "speculative": false)"));
  CHECK(content(spec) == content(plain));
  const Value &ts = at(spec, "timings"), &tp = at(plain, "timings");
  CHECK(at(ts, "draft_n").as_int() > 0);
  CHECK(at(ts, "draft_n_accepted").as_int() <= at(ts, "draft_n").as_int());
  CHECK(at(tp, "draft_n").as_int() == 0);
  CHECK(at(tp, "draft_n_accepted").as_int() == 0);
  const Value completion = kylin::test::post_ok(server(), "/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 20, "temperature": 0})");
  const Value completion_plain =
      kylin::test::post_ok(server(), "/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 20, "temperature": 0, "speculative": false})");
  CHECK(at(at(completion, "choices").as_array().at(0), "text").as_string() ==
        at(at(completion_plain, "choices").as_array().at(0), "text").as_string());
  // streamed with speculation: the same text, the timings on the last chunk
  std::string streamed;
  std::int64_t streamed_drafts = -1;
  for (const Value& chunk : kylin::test::post_stream(server(), "/v1/chat/completions", chat(R"(, "stream": true)"))) {
    for (const Value& choice : at(chunk, "choices").as_array())
      if (const Value* d = at(choice, "delta").find("content"); d != nullptr && d->is_string()) streamed += d->as_string();
    if (const Value* t = chunk.find("timings")) streamed_drafts = at(*t, "draft_n").as_int();
  }
  CHECK(streamed == content(plain));
  CHECK(streamed_drafts > 0);
  const auto drafted = at(ts, "draft_n").as_int() + at(at(completion, "timings"), "draft_n").as_int() + streamed_drafts;
  // A request's statistics reach /metrics once its last byte is out (routes.cpp's RequestRecord),
  // which the client may see first: wait for the streamed one's, a bounded number of reads.
  std::string text = metrics(server());
  for (int i = 0; i < 1000 && sample(text, "kylin_draft_tokens_total") < static_cast<double>(drafted); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    text = metrics(server());
  }
  CHECK(sample(text, "kylin_draft_tokens_total") == static_cast<double>(drafted));
  CHECK(sample(text, "kylin_draft_accepted_tokens_total") >= at(ts, "draft_n_accepted").as_int());
  CHECK(sample(text, "kylin_draft_accepted_tokens_total") <= sample(text, "kylin_draft_tokens_total"));
}

TEST_CASE("a \"speculative\" that is not a boolean is a 400 naming it") {
  const Value r = kylin::test::post_400(server(), "/v1/chat/completions", chat(R"(, "speculative": "no")"));
  CHECK(at(at(r, "error"), "param").as_string() == "speculative");
}

TEST_CASE("--lookup without a draft model: greedy answers as without, prompt lookup drafts counted") {
  ServerProcess lookup({"--ctx", "1024", "--lookup", "3", "--draft-max", "4"});
  const std::string body = R"({"prompt": "a b c d a b c d a b c d a b", "max_tokens": 24, "temperature": 0)";
  const Value spec = kylin::test::post_ok(lookup, "/v1/completions", body + "}");
  const Value plain = kylin::test::post_ok(lookup, "/v1/completions", body + R"(, "speculative": false})");
  CHECK(at(at(spec, "choices").as_array().at(0), "text").as_string() == at(at(plain, "choices").as_array().at(0), "text").as_string());
  CHECK(at(at(spec, "timings"), "draft_n").as_int() > 0);
  CHECK(at(at(plain, "timings"), "draft_n").as_int() == 0);
}

TEST_CASE("--mtp: two slots decoding together, greedy answers as with \"speculative\": false, the head's drafts in timings and /metrics") {
  ServerProcess mtp({"--ctx", "1024", "--parallel", "2", "--mtp", "3"}, {}, ServedModel{"e2e-qwen35-fullvocab", "qwen35"});
  const std::string body = R"({"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 24, "temperature": 0,
            "chat_template_kwargs": {"enable_thinking": false})";
  const Value plain = kylin::test::post_ok(mtp, "/v1/chat/completions", body + R"(, "speculative": false})");
  // two at once: their drafts are verified in the same batched steps
  Value a, b;
  std::thread other([&] { b = kylin::test::post_ok(mtp, "/v1/chat/completions", body + "}"); });
  a = kylin::test::post_ok(mtp, "/v1/chat/completions", body + "}");
  other.join();
  CHECK(content(a) == content(plain));
  CHECK(content(b) == content(plain));
  CHECK(at(at(a, "timings"), "draft_n").as_int() > 0);
  CHECK(at(at(plain, "timings"), "draft_n").as_int() == 0);
  const double drafted = static_cast<double>(at(at(a, "timings"), "draft_n").as_int() + at(at(b, "timings"), "draft_n").as_int());
  std::string text = metrics(mtp);
  for (int i = 0; i < 1000 && sample(text, "kylin_draft_tokens_total") < drafted; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    text = metrics(mtp);
  }
  CHECK(sample(text, "kylin_draft_tokens_total") == drafted);
}

TEST_CASE("--mtp on a checkpoint without an MTP head, or beside --model-draft, stops kylin-server at startup naming --mtp") {
  for (const std::vector<std::string>& extra : {std::vector<std::string>{"--mtp"}, std::vector<std::string>{"--mtp", "2", "--model-draft", draft_dir}}) {
    std::string cmd = server_binary.string() + " --model " + draft_dir + " --port 1";
    for (const std::string& a : extra) cmd += " " + a;
    const ProcessResult r = run_shell(cmd + " 2>&1");
    CHECK(r.exit_code != 0);
    CHECK(r.out.find("--mtp") != std::string::npos);
  }
}

TEST_CASE("a draft model of another tokenizer stops kylin-server at startup, naming the draft and the difference") {
  const TempModel bytes("small-qwen3", TestTokenizer::bytes);
  const TempModel target("e2e-qwen3-fullvocab", TestTokenizer::qwen3);
  const ProcessResult r = run_shell(server_binary.string() + " --model " + target.dir().string() + " --model-draft " + bytes.dir().string() +
                                        " --port " + std::to_string(free_port()) + " 2>&1",
                                    server_binary.string());
  CHECK(r.exit_code == 1);
  CHECK(r.out.find(bytes.dir().string()) != std::string::npos);
  CHECK(r.out.find("256 token ids, the target's 151669") != std::string::npos);
}

}  // namespace speculative_http_test
