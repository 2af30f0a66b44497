// kylin-server end to end for logprobs, logit_bias and the refused parameters: the logprobs a
// greedy request returns are the log-softmax of the logits `kylin logits` prints for the same
// tokens; streamed chunks carry the same logprobs as the whole answer. Each case states its property.
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/process.hpp"
#include "common/reference.hpp"
#include "kylin/generate/engine.hpp"
#include "kylin/server/logprobs.hpp"
#include "server_process.hpp"

using namespace kylin::test;
using kylin::json::Value;

namespace logprobs_http_test {

const std::string checkpoint = std::string(KYLIN_TEST_DATA) + "/models/e2e-qwen3-fullvocab";

ServerProcess& server() {
  static ServerProcess s({"--ctx", "1024"});
  return s;
}

const kylin::Tokenizer& tokenizer() {
  static const kylin::Tokenizer t = kylin::Tokenizer::from_dir(std::string(KYLIN_TEST_DATA) + "/qwen3-tokenizer");
  return t;
}

Value post_ok(const std::string& path, const std::string& body) { return kylin::test::post_ok(server(), path, body); }
std::vector<Value> post_stream(const std::string& path, const std::string& body) {
  return kylin::test::post_stream(server(), path, body);
}
Value error_of(const std::string& path, const std::string& body) { return at(post_400(server(), path, body), "error"); }

// log-softmax, in double, of the last position's logits of `ids` as `kylin logits` prints them,
// over the ids the sampler may draw.
std::vector<double> reference_log_softmax(const std::vector<int>& ids) {
  std::string list;
  for (int id : ids) {
    if (!list.empty()) list += ',';
    list += std::to_string(id);
  }
  const auto r = run_shell(kylin_bin + " logits --threads 2 --model \"" + checkpoint + "\" --tokens " + list);
  REQUIRE(r.exit_code == 0);
  const Value row = at(parse_json(r.out), "logits").as_array().at(0);
  const kylin::SampleableIds sampleable = kylin::sampleable_ids(tokenizer());
  std::vector<double> out(row.size(), -INFINITY);
  double max = -INFINITY, sum = 0;
  for (std::size_t i = 0; i < row.size(); ++i)
    if (sampleable.contains(static_cast<int>(i))) out[i] = row.as_array()[i].as_double(), max = std::max(max, out[i]);
  for (double x : out) sum += std::exp(x - max);
  for (double& x : out) x -= max + std::log(sum);
  return out;
}

std::string ids_json(const std::vector<int>& ids) {
  std::string s = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(ids[i]);
  }
  return s + "]";
}

const Value& first_choice(const Value& r) { return at(r, "choices").as_array().at(0); }

// The same token texts and bytes, and logprobs within 1e-4: a second request reuses the first's
// cached prompt, and a prefill split differently rounds the logits differently (about 1e-6).
void check_same_logprobs(const Value& a, const Value& b) {
  if (a.is_number()) {
    REQUIRE(b.is_number());
    CHECK(std::abs(a.as_double() - b.as_double()) < 1e-4);
  } else if (a.is_array()) {
    REQUIRE(b.is_array());
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) check_same_logprobs(a.as_array()[i], b.as_array()[i]);
  } else if (a.is_object()) {
    REQUIRE(b.is_object());
    REQUIRE(a.size() == b.size());
    for (const auto& entry : a.as_object()) {
      const std::string& key = entry.first;
      CAPTURE(key);
      REQUIRE(b.find(key) != nullptr);
      check_same_logprobs(entry.second, *b.find(key));
    }
  } else {
    CHECK(kylin::json::dump(a) == kylin::json::dump(b));
  }
}


TEST_CASE("greedy /v1/completions logprobs equal the log-softmax of `kylin logits` for each chosen token; top 5 match") {
  std::vector<int> ids = tokenizer().encode("The capital of France is");
  const Value r = post_ok("/v1/completions", R"({"prompt": )" + ids_json(ids) + R"(, "max_tokens": 4, "temperature": 0, "logprobs": 5})");
  const Value& lp = at(first_choice(r), "logprobs");
  const auto& tokens = at(lp, "tokens").as_array();
  const auto& values = at(lp, "token_logprobs").as_array();
  const auto& tops = at(lp, "top_logprobs").as_array();
  REQUIRE(tokens.size() == static_cast<std::size_t>(at(at(r, "usage"), "completion_tokens").as_int()));
  REQUIRE(values.size() == tokens.size());
  REQUIRE(tops.size() == tokens.size());
  double worst = 0;
  for (std::size_t k = 0; k <= tokens.size() && k < 4; ++k) {
    const std::vector<double> ref = reference_log_softmax(ids);
    const int best = static_cast<int>(std::max_element(ref.begin(), ref.end()) - ref.begin());
    if (k == tokens.size()) {  // the answer ended early: greedy drew an end-of-sequence token
      CHECK((best == tokenizer().token_to_id("<|im_end|>") || best == tokenizer().token_to_id("<|endoftext|>")));
      break;
    }
    CAPTURE(k);
    CHECK(tokens[k].as_string() == kylin::server::logprob_token_text(tokenizer(), best));
    worst = kylin::test::worse(worst, std::abs(values[k].as_double() - ref[static_cast<std::size_t>(best)]));
    // The 5 alternatives are the 5 largest reference values, with the same logprobs.
    std::vector<std::pair<double, int>> sorted;
    for (std::size_t i = 0; i < ref.size(); ++i) sorted.emplace_back(ref[i], static_cast<int>(i));
    std::partial_sort(sorted.begin(), sorted.begin() + 5, sorted.end(), std::greater<>());
    REQUIRE(tops[k].size() == 5);
    for (int j = 0; j < 5; ++j) {
      const Value* v = tops[k].find(kylin::server::logprob_token_text(tokenizer(), sorted[static_cast<std::size_t>(j)].second));
      REQUIRE(v != nullptr);
      CHECK(std::abs(v->as_double() - sorted[static_cast<std::size_t>(j)].first) < 1e-4);
    }
    ids.push_back(best);
  }
  MESSAGE("largest |logprob - log_softmax(kylin logits)|: " << worst);
  CHECK(worst < 1e-5);
}

TEST_CASE("chat logprobs have OpenAI's shape, count the generated tokens, and the streamed chunks carry the same ones") {
  const std::string common = R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "temperature": 0,
      "logprobs": true, "top_logprobs": 3)";
  const Value whole = post_ok("/v1/chat/completions", common + "}");
  const auto& content = at(at(first_choice(whole), "logprobs"), "content").as_array();
  REQUIRE(content.size() == static_cast<std::size_t>(at(at(whole, "usage"), "completion_tokens").as_int()));
  for (const Value& t : content) {
    CHECK(at(t, "token").is_string());
    CHECK(at(t, "logprob").as_double() <= 0);
    CHECK(at(t, "bytes").is_array());
    REQUIRE(at(t, "top_logprobs").size() == 3);
    // Greedy: the chosen token is the most likely one.
    CHECK(at(at(t, "top_logprobs").as_array()[0], "logprob").as_double() == at(t, "logprob").as_double());
  }
  std::vector<Value> streamed;
  for (const Value& chunk : post_stream("/v1/chat/completions", common + R"(, "stream": true})")) {
    for (const Value& choice : at(chunk, "choices").as_array())
      if (const Value* lp = choice.find("logprobs"); lp && !lp->is_null())
        for (const Value& t : at(*lp, "content").as_array()) streamed.push_back(t);
  }
  REQUIRE(streamed.size() == content.size());
  for (std::size_t i = 0; i < content.size(); ++i) check_same_logprobs(streamed[i], content[i]);
}

TEST_CASE("streamed /v1/completions chunks carry their tokens' logprobs: together they equal the whole answer's") {
  const std::string common = R"({"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "logprobs": 2)";
  const Value whole = at(first_choice(post_ok("/v1/completions", common + "}")), "logprobs");
  const std::vector<std::string> keys = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
  std::vector<Value> lists(keys.size(), Value(kylin::json::Array{}));
  for (const Value& chunk : post_stream("/v1/completions", common + R"(, "stream": true})")) {
    if (const Value* lp = first_choice(chunk).find("logprobs"); lp && !lp->is_null())
      for (std::size_t k = 0; k < keys.size(); ++k)
        for (const Value& v : at(*lp, keys[k]).as_array()) lists[k].push_back(v);
  }
  for (std::size_t k = 0; k < keys.size(); ++k) {
    CAPTURE(keys[k]);
    check_same_logprobs(lists[k], at(whole, keys[k]));
  }
  // text_offset: each token starts where the characters of the ones before it end.
  const auto& tokens = at(whole, "tokens").as_array();
  const auto& offsets = at(whole, "text_offset").as_array();
  REQUIRE_FALSE(tokens.empty());
  CHECK(offsets[0].as_int() == 0);
  for (std::size_t i = 0; i + 1 < tokens.size(); ++i)
    if (tokens[i].as_string().rfind("bytes:", 0) != 0)
      CHECK(offsets[i + 1].as_int() - offsets[i].as_int() == kylin::server::detail::code_points(tokens[i].as_string()));
}

TEST_CASE("logit_bias is applied: +100 forces a token, -100 bans the greedy choice") {
  const int forced = tokenizer().encode(" banana").at(0);
  const Value r = post_ok("/v1/completions", R"({"prompt": "Hello", "max_tokens": 3, "temperature": 0, "logprobs": 0,
      "logit_bias": {")" + std::to_string(forced) + R"(": 100}})");
  const std::string piece = tokenizer().token_bytes(forced);
  CHECK(at(first_choice(r), "text").as_string() == piece + piece + piece);
  for (const Value& v : at(at(first_choice(r), "logprobs"), "token_logprobs").as_array()) CHECK(v.as_double() > -1e-3);

  const Value plain = post_ok("/v1/completions", R"({"prompt": "Hello", "max_tokens": 1, "temperature": 0, "logprobs": 0})");
  const std::string first = at(at(first_choice(plain), "logprobs"), "tokens").as_array().at(0).as_string();
  int first_id = -1;  // the id whose text the answer named
  for (int id = 0; id < tokenizer().vocab_size() && first_id < 0; ++id)
    if (kylin::server::logprob_token_text(tokenizer(), id) == first) first_id = id;
  REQUIRE(first_id >= 0);
  const Value banned = post_ok("/v1/completions", R"({"prompt": "Hello", "max_tokens": 1, "temperature": 0, "logprobs": 0,
      "logit_bias": {")" + std::to_string(first_id) + R"(": -100}})");
  CHECK(at(at(first_choice(banned), "logprobs"), "tokens").as_array().at(0).as_string() != first);
  CHECK(at(error_of("/v1/completions", R"({"prompt": "x", "logit_bias": {"999999": 1}})"), "param").as_string() == "logit_bias");
  CHECK(at(error_of("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"999999": 1}})"),
           "param").as_string() == "logit_bias");
}

TEST_CASE("tool_choice none leaves the tools out of the prompt; unsupported parameters are a 400 naming them") {
  const std::string msg = R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1)";
  const std::string tools = R"(, "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}])";
  const auto prompt_tokens = [](const Value& r) { return at(at(r, "usage"), "prompt_tokens").as_int(); };
  const Value without = post_ok("/v1/chat/completions", msg + "}");
  const Value with = post_ok("/v1/chat/completions", msg + tools + "}");
  const Value none = post_ok("/v1/chat/completions", msg + tools + R"(, "tool_choice": "none"})");
  CHECK(prompt_tokens(with) > prompt_tokens(without));
  CHECK(prompt_tokens(none) == prompt_tokens(without));
  for (const auto& [extra_, param] : std::vector<std::pair<std::string, std::string>>{
           {R"(, "n": 0)", "n"},
           {R"(, "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "string", "pattern": "a(?=b)c"}}})",
            "response_format.json_schema.schema"},
           {tools + R"(, "tool_choice": {"type": "function", "function": {"name": "get_time"}})", "tool_choice"},
           {R"(, "logprobs": true, "top_logprobs": 21)", "top_logprobs"}}) {
    const std::string& extra = extra_;
    CAPTURE(extra);
    const Value e = error_of("/v1/chat/completions", msg + extra + "}");
    CHECK(at(e, "param").as_string() == param);
    CHECK(at(e, "type").as_string() == "invalid_request_error");
  }
  for (const auto& [extra_, param] : std::vector<std::pair<std::string, std::string>>{
           {R"(, "echo": true)", "echo"}, {R"(, "suffix": 5)", "suffix"}, {R"(, "best_of": 2)", "best_of"},
           {R"(, "logprobs": 6)", "logprobs"}}) {
    const std::string& extra = extra_;
    CAPTURE(extra);
    CHECK(at(error_of("/v1/completions", R"({"prompt": "x")" + extra + "}"), "param").as_string() == param);
  }
}

}  // namespace logprobs_http_test
