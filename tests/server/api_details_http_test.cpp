// The API details clients trip on, end to end: --served-model-name aliases, n > 1 as sequences of
// one batch, system_fingerprint, a GBNF `grammar` on chat and completions, fill in the middle
// (`suffix` and /infill, exact prompt ids), /apply-template. Each case states its property.
#include <string>
#include <vector>

#include "common/temp_model.hpp"
#include "kylin/server/fill_in_middle.hpp"
#include "server_process.hpp"

using namespace kylin::test;
using kylin::json::Value;

namespace api_details_http_test {

ServerProcess& server() {
  static ServerProcess s({"--ctx", "1024", "--parallel", "4"});
  return s;
}

const kylin::Tokenizer& qwen3_tokenizer() {
  static const kylin::Tokenizer t = kylin::Tokenizer::from_dir(std::string(KYLIN_TEST_DATA) + "/qwen3-tokenizer");
  return t;
}

std::string chat(const std::string& extra) {
  return R"({"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 8,
            "chat_template_kwargs": {"enable_thinking": false})" + extra + "}";
}

const Value& choice(const Value& r, std::size_t i) { return at(r, "choices").as_array().at(i); }
std::string content(const Value& c) { return at(at(c, "message"), "content").as_string(); }

std::string error_param(const ServerProcess& s, const std::string& path, const std::string& body) {
  const Value e = post_400(s, path, body);
  const Value& p = at(at(e, "error"), "param");
  return p.is_string() ? p.as_string() : "";
}

TEST_CASE("--served-model-name: every alias is listed and answered under its own name; other names are a 404") {
  ServerProcess s({"--ctx", "512", "--served-model-name", "gpt-4o-mini", "--served-model-name", "qwen"});
  auto c = s.client();
  const Value models = parse_json(c.Get("/v1/models")->body);
  std::vector<std::string> ids;
  for (const Value& m : at(models, "data").as_array()) ids.push_back(at(m, "id").as_string());
  CHECK(ids == std::vector<std::string>{"gpt-4o-mini", "qwen"});
  const Value r = post_ok(s, "/v1/chat/completions", R"({"model": "qwen", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1})");
  CHECK(at(r, "model").as_string() == "qwen");
  const Value unnamed = post_ok(s, "/v1/completions", R"({"prompt": "x", "max_tokens": 1})");
  CHECK(at(unnamed, "model").as_string() == "gpt-4o-mini");
  for (const char* name : {"e2e-qwen3", "gpt-4"}) {
    auto bad = post_json(c, "/v1/chat/completions", std::string(R"({"model": ")") + name + R"(", "messages": [{"role": "user", "content": "x"}]})");
    REQUIRE(bad);
    CHECK(bad->status == 404);
  }
}

TEST_CASE("n > 1: choice i is the single answer seeded seed + i; usage counts the prompt once; streamed chunks carry the index") {
  const Value three = post_ok(server(), "/v1/chat/completions", chat(R"(, "n": 3, "seed": 7, "temperature": 1)"));
  REQUIRE(at(three, "choices").size() == 3);
  std::int64_t completion = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(at(choice(three, i), "index").as_int() == static_cast<std::int64_t>(i));
    const Value one = post_ok(server(), "/v1/chat/completions", chat(R"(, "seed": )" + std::to_string(7 + i) + R"(, "temperature": 1)"));
    CHECK(content(choice(three, i)) == content(choice(one, 0)));
    completion += at(at(one, "usage"), "completion_tokens").as_int();
    if (i == 0) CHECK(at(at(three, "usage"), "prompt_tokens").as_int() == at(at(one, "usage"), "prompt_tokens").as_int());
  }
  CHECK(at(at(three, "usage"), "completion_tokens").as_int() == completion);
  CHECK(content(choice(three, 0)) != content(choice(three, 1)));  // 8 tokens at temperature 1 of 151k: differ unless the seed is ignored
  std::vector<std::string> streamed(3);
  for (const Value& chunk : post_stream(server(), "/v1/chat/completions", chat(R"(, "n": 3, "seed": 7, "temperature": 1, "stream": true)")))
    for (const Value& ch : at(chunk, "choices").as_array())
      if (const Value* d = at(ch, "delta").find("content"); d != nullptr && d->is_string())
        streamed.at(static_cast<std::size_t>(at(ch, "index").as_int())) += d->as_string();
  for (std::size_t i = 0; i < 3; ++i) CHECK(streamed[i] == content(choice(three, i)));
  const Value texts = post_ok(server(), "/v1/completions", R"({"prompt": "Once", "max_tokens": 4, "n": 2, "seed": 1})");
  CHECK(at(texts, "choices").size() == 2);
}

TEST_CASE("system_fingerprint: on chat and completion objects and chunks, stable for a server, another for another model") {
  const Value a = post_ok(server(), "/v1/chat/completions", chat(R"(, "max_tokens": 1)"));
  const std::string fp = at(a, "system_fingerprint").as_string();
  CHECK(fp.rfind("fp_", 0) == 0);
  CHECK(fp.size() == 19);
  CHECK(at(post_ok(server(), "/v1/completions", R"({"prompt": "x", "max_tokens": 1})"), "system_fingerprint").as_string() == fp);
  for (const Value& chunk : post_stream(server(), "/v1/chat/completions", chat(R"(, "max_tokens": 2, "stream": true)")))
    CHECK(at(chunk, "system_fingerprint").as_string() == fp);
  // another weight format of the same files, another model under the same name: other fingerprints
  ServerProcess q8({"--ctx", "512", "--weights", "q8"});
  const std::string fp_q8 = at(post_ok(q8, "/v1/chat/completions", chat(R"(, "max_tokens": 1)")), "system_fingerprint").as_string();
  ServerProcess other({"--ctx", "512", "--task", "generate"}, {}, ServedModel{.name = "e2e-qwen3-embedding", .id = "e2e-qwen3"});
  const std::string fp_other = at(post_ok(other, "/v1/completions", R"({"prompt": "x", "max_tokens": 1})"), "system_fingerprint").as_string();
  CHECK(fp_q8 != fp);
  CHECK(fp_other != fp);
  CHECK(fp_other != fp_q8);
}

TEST_CASE("grammar (GBNF) constrains chat and completion answers; a grammar that does not parse is a 400 naming it") {
  const std::string g = R"(, "grammar": "root ::= (\"yes\" | \"no\") \"!\"", "temperature": 1, "seed": 3, "max_tokens": 20)";
  for (int i = 0; i < 3; ++i) {
    const std::string answer = content(choice(post_ok(server(), "/v1/chat/completions", chat(g + R"(, "seed": )" + std::to_string(i))), 0));
    CHECK((answer == "yes!" || answer == "no!"));
  }
  const Value text = post_ok(server(), "/v1/completions", R"({"prompt": "Answer:", "max_tokens": 20)" + g + "}");
  const std::string t = at(choice(text, 0), "text").as_string();
  CHECK((t == "yes!" || t == "no!"));
  CHECK(error_param(server(), "/v1/chat/completions", chat(R"(, "grammar": "root ::= (\"a\"")")) == "grammar");
  CHECK(error_param(server(), "/v1/completions", R"({"prompt": "x", "grammar": "root ::= undefined-rule"})") == "grammar");
}

// The Qwen2.5-Coder model card's FIM format: <|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>,
// with the ids of its tokenizer_config (151659, 151661, 151660).
TEST_CASE("fill in the middle: the prompt ids are the model card's format, and /v1/completions with suffix runs exactly them") {
  const kylin::Tokenizer& t = qwen3_tokenizer();
  const auto fim = kylin::server::fim_tokens(t);
  REQUIRE(fim.has_value());
  CHECK(fim->prefix == 151659);
  CHECK(fim->suffix == 151661);
  CHECK(fim->middle == 151660);
  const std::string prefix = "def add(a, b):\n", suffix = "\n    return c\n";
  std::vector<int> expected{151659};
  for (int id : t.encode(prefix)) expected.push_back(id);
  expected.push_back(151661);
  for (int id : t.encode(suffix)) expected.push_back(id);
  expected.push_back(151660);
  CHECK(kylin::server::fim_prompt(t, *fim, t.encode(prefix), suffix, true) == expected);
  // a client's "<|fim_middle|>" in plain mode is text, not the control token
  CHECK(kylin::server::fim_prompt(t, *fim, {}, "<|fim_middle|>", true).size() > 3);
  const Value r = post_ok(server(), "/v1/completions",
                          R"({"prompt": "def add(a, b):\n", "suffix": "\n    return c\n", "max_tokens": 3, "temperature": 0})");
  CHECK(at(at(r, "usage"), "prompt_tokens").as_int() == static_cast<std::int64_t>(expected.size()));
  Value ids = kylin::json::Array{};
  for (int id : expected) ids.push_back(id);
  const Value same = post_ok(server(), "/v1/completions", R"({"prompt": )" + kylin::json::dump(ids) + R"(, "max_tokens": 3, "temperature": 0})");
  CHECK(at(choice(r, 0), "text").as_string() == at(choice(same, 0), "text").as_string());
}

TEST_CASE("a tokenizer without the FIM tokens has none, so suffix and /infill are refused for its model") {
  const TempModel bytes("small-qwen3", TestTokenizer::bytes);
  CHECK_FALSE(kylin::server::fim_tokens(kylin::Tokenizer::from_dir(bytes.dir())).has_value());
}

// llama.cpp's repository-level infill (format_prompt_infill): <|repo_name|>myproject\n, each extra
// file as <|file_sep|>NAME\nTEXT, <|file_sep|>filename\n, then the FIM prompt.
TEST_CASE("/infill: llama.cpp's repository-level prompt, its /completion answer shape") {
  const kylin::Tokenizer& t = qwen3_tokenizer();
  const auto fim = kylin::server::fim_tokens(t);
  REQUIRE(fim.has_value());
  const std::vector<int> ids = kylin::server::infill_prompt(t, *fim, "def f(", "x", "):\n", {{"util.py", "import os\n"}}, true);
  // each text tokenized on its own (input_prefix and prompt too, as llama.cpp does), between the tokens
  std::vector<int> expected;
  const auto token = [&](const char* name) { expected.push_back(*t.token_to_id(name)); };
  const auto text = [&](const std::string& s) {
    for (int id : t.encode(s)) expected.push_back(id);
  };
  token("<|repo_name|>"), text("myproject\n"), token("<|file_sep|>"), text("util.py\n"), text("import os\n");
  token("<|file_sep|>"), text("filename\n"), token("<|fim_prefix|>"), text("def f("), text("x"), token("<|fim_suffix|>");
  text("):\n"), token("<|fim_middle|>");
  CHECK(ids == expected);
  const Value r = post_ok(server(), "/infill", R"({"input_prefix": "def f(", "prompt": "x", "input_suffix": "):\n",
      "input_extra": [{"filename": "util.py", "text": "import os\n"}], "n_predict": 3, "temperature": 0})");
  CHECK(at(r, "tokens_evaluated").as_int() == static_cast<std::int64_t>(ids.size()));
  CHECK(at(r, "tokens_predicted").as_int() == 3);
  CHECK(at(r, "stop_type").as_string() == "limit");
  CHECK(at(r, "content").is_string());
  CHECK(error_param(server(), "/infill", R"({"input_prefix": 5})") == "input_prefix");
}

TEST_CASE("/apply-template returns the prompt /v1/chat/completions runs: its tokens are the usage's prompt_tokens") {
  const std::string messages = R"("messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])";
  const Value p = post_ok(server(), "/apply-template", "{" + messages + R"(, "chat_template_kwargs": {"enable_thinking": false}})");
  const std::string prompt = at(p, "prompt").as_string();
  CHECK(prompt.rfind("<|im_start|>system\nBe brief.<|im_end|>\n", 0) == 0);
  CHECK(prompt.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  const Value tokens = post_ok(server(), "/tokenize", kylin::json::dump([&] {
                                 Value b = kylin::json::Object{};
                                 b.set("content", prompt);
                                 return b;
                               }()));
  const Value r = post_ok(server(), "/v1/chat/completions",
                          "{" + messages + R"(, "max_tokens": 1, "chat_template_kwargs": {"enable_thinking": false}})");
  CHECK(static_cast<std::int64_t>(at(tokens, "tokens").size()) == at(at(r, "usage"), "prompt_tokens").as_int());
}

}  // namespace api_details_http_test
