// Other servers' shapes beside OpenAI's, end to end: llama.cpp's native POST /completion and GET
// /props, text-embeddings-inference's POST /rerank (query + texts), and CORS with several origins
// and llama.cpp's localhost pattern. Each case states its property; /completion answers are
// checked against /v1/completions on the same prompt and settings.
#include <string>
#include <vector>

#include "kylin/server/cors.hpp"
#include "server_process.hpp"

using namespace kylin::test;
using kylin::json::Value;

namespace llama_compat_http_test {

ServerProcess& server() {
  static ServerProcess s({"--ctx", "1024", "--parallel", "2"});
  return s;
}

const std::string prompt = "I believe the meaning of life is";

std::string openai_text(const std::string& extra) {
  const Value r = post_ok(server(), "/v1/completions", R"({"prompt": ")" + prompt + R"(", "max_tokens": 6, "temperature": 0)" + extra + "}");
  return at(at(r, "choices").as_array().at(0), "text").as_string();
}

Value completion(const std::string& extra) {
  return post_ok(server(), "/completion", R"({"prompt": ")" + prompt + R"(", "n_predict": 6, "temperature": 0)" + extra + "}");
}

std::vector<int> ids_of(const Value& array) {
  std::vector<int> out;
  for (const Value& v : array.as_array()) out.push_back(static_cast<int>(v.as_int()));
  return out;
}

std::vector<int> tokenize(const std::string& text) {
  return ids_of(at(post_ok(server(), "/tokenize", R"({"content": )" + kylin::json::dump(Value(text)) + "}"), "tokens"));
}

std::string error_param(const std::string& body) {
  const Value e = post_400(server(), "/completion", body);
  return at(at(e, "error"), "param").as_string();
}

TEST_CASE("/completion: llama.cpp's answer fields, the same text as /v1/completions on the same prompt and settings") {
  const Value r = completion("");
  CHECK(at(r, "content").as_string() == openai_text(""));
  CHECK(at(r, "stop").as_bool());
  CHECK(at(r, "stop_type").as_string() == "limit");
  CHECK(at(r, "tokens_predicted").as_int() == 6);
  CHECK(at(at(r, "timings"), "predicted_n").as_int() == 6);
  CHECK(at(r, "tokens_evaluated").as_int() == static_cast<std::int64_t>(tokenize(prompt).size()));
  CHECK(at(r, "prompt").as_string() == prompt);
  CHECK_FALSE(at(r, "truncated").as_bool());
  CHECK(at(r, "has_new_line").as_bool() == (at(r, "content").as_string().find('\n') != std::string::npos));
  CHECK(at(r, "tokens").size() == 0);  // only with return_tokens
  CHECK(at(at(r, "generation_settings"), "n_predict").as_int() == 6);
  CHECK(at(at(r, "generation_settings"), "temperature").as_double() == 0);
  const Value t = completion(R"(, "return_tokens": true)");
  const Value text = post_ok(server(), "/detokenize", R"({"tokens": )" + kylin::json::dump(at(t, "tokens")) + "}");
  CHECK(at(t, "tokens").size() == 6);
  CHECK(at(text, "content").as_string() == at(r, "content").as_string());
  // token ids and text mixed in one prompt are the string's prompt
  std::vector<int> head = tokenize("I believe the");
  Value mixed = kylin::json::Array{};
  for (int id : head) mixed.push_back(id);
  mixed.push_back(" meaning of life is");
  const Value m = post_ok(server(), "/completion", R"({"prompt": )" + kylin::json::dump(mixed) + R"(, "n_predict": 6, "temperature": 0})");
  CHECK(at(m, "content").as_string() == at(r, "content").as_string());
}

TEST_CASE("/completion streamed: one object per piece with its token ids, then the whole one with stop true; no [DONE]") {
  auto c = server().client();
  auto res = post_json(c, "/completion", R"({"prompt": ")" + prompt + R"(", "n_predict": 6, "temperature": 0, "stream": true, "n_probs": 2})");
  REQUIRE(res);
  REQUIRE(res->status == 200);
  const std::vector<std::string> payloads = sse_payloads(res->body);
  REQUIRE(payloads.size() >= 2);
  CHECK(payloads.back() != "[DONE]");
  std::string content;
  std::size_t tokens = 0;
  for (std::size_t i = 0; i + 1 < payloads.size(); ++i) {
    const Value chunk = parse_json(payloads[i]);
    CHECK_FALSE(at(chunk, "stop").as_bool());
    content += at(chunk, "content").as_string();
    tokens += at(chunk, "tokens").size();
    CHECK(at(chunk, "completion_probabilities").size() == at(chunk, "tokens").size());
  }
  const Value last = parse_json(payloads.back());
  CHECK(at(last, "stop").as_bool());
  tokens += at(last, "tokens").size();  // ids whose text never came out (an incomplete character at the end)
  CHECK(at(at(last, "timings"), "predicted_n").as_int() == 6);
  CHECK(tokens == 6);
  CHECK(content == at(completion(""), "content").as_string());
}

TEST_CASE("/completion: n_probs gives each token's logprob and its top alternatives, the greedy token first") {
  const Value r = completion(R"(, "n_probs": 3, "return_tokens": true)");
  const Value& probs = at(r, "completion_probabilities");
  REQUIRE(probs.size() == 6);
  for (std::size_t i = 0; i < probs.size(); ++i) {
    const Value& p = probs.as_array()[i];
    CHECK(at(p, "id").as_int() == at(r, "tokens").as_array()[i].as_int());
    CHECK(at(p, "logprob").as_double() <= 0);
    REQUIRE(at(p, "top_logprobs").size() == 3);
    const Value& best = at(p, "top_logprobs").as_array()[0];
    CHECK(at(best, "id").as_int() == at(p, "id").as_int());  // temperature 0: the most likely one
    CHECK(at(best, "bytes").is_array());
  }
}

TEST_CASE("/completion: stop words, grammar, json_schema, ignore_eos and llama.cpp's logit_bias pairs are honoured") {
  const std::string text = at(completion(""), "content").as_string();
  std::vector<std::size_t> starts;  // of the answer's characters: the stop word is whole characters
  for (std::size_t i = 0; i < text.size(); ++i)
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) starts.push_back(i);
  REQUIRE(starts.size() >= 4);
  const std::string word = text.substr(starts[1], starts[3] - starts[1]);
  const Value w = completion(R"(, "stop": [)" + kylin::json::dump(Value(word)) + "]");
  CHECK(at(w, "stop_type").as_string() == "word");
  CHECK(at(w, "stopping_word").as_string() == word);
  CHECK(at(w, "content").as_string() == text.substr(0, text.find(word)));
  const Value g = completion(R"(, "grammar": "root ::= \"yes\" | \"no\"")");
  CHECK((at(g, "content").as_string() == "yes" || at(g, "content").as_string() == "no"));
  CHECK(at(g, "stop_type").as_string() == "eos");
  const Value j = completion(R"(, "n_predict": 40, "json_schema": {"type": "object", "properties": {"a": {"enum": [1, 2]}}, "required": ["a"], "additionalProperties": false})");
  const Value parsed = parse_json(at(j, "content").as_string());
  CHECK((at(parsed, "a").as_int() == 1 || at(parsed, "a").as_int() == 2));
  // both EOS ids of the model first: the answer ends at once, unless ignore_eos masks them
  const std::string eos = R"(, "logit_bias": [[151643, 100], [151645, 100]])";
  CHECK(at(completion(eos), "tokens_predicted").as_int() == 0);
  CHECK(at(completion(eos + R"(, "ignore_eos": true)"), "tokens_predicted").as_int() == 6);
  // a bias of false bans the token: the greedy answer's first token never comes
  const std::vector<int> first = ids_of(at(completion(R"(, "return_tokens": true)"), "tokens"));
  const Value banned = completion(R"(, "return_tokens": true, "logit_bias": [[)" + std::to_string(first.at(0)) + ", false]]");
  for (int id : ids_of(at(banned, "tokens"))) CHECK(id != first.at(0));
}

TEST_CASE("/completion: response_fields keeps the listed fields, a/b as nested b") {
  const Value r = completion(R"(, "response_fields": ["content", "generation_settings/n_predict", "nothing"])");
  CHECK(r.size() == 2);
  CHECK(at(r, "content").is_string());
  CHECK(at(r, "generation_settings/n_predict").as_int() == 6);
}

TEST_CASE("/completion: what kylin cannot honour is a 400 naming the field; repeat_penalty over the whole context is honoured") {
  const std::string head = R"({"prompt": "x", "n_predict": 2, )";
  CHECK(error_param(head + R"("mirostat": 2})") == "mirostat");
  CHECK(error_param(head + R"("typical_p": 0.5})") == "typical_p");
  CHECK(error_param(head + R"("presence_penalty": 0.5})") == "presence_penalty");
  CHECK(error_param(head + R"("repeat_penalty": 1.1})") == "repeat_penalty");
  CHECK(error_param(head + R"("samplers": ["top_k"]})") == "samplers");
  CHECK(error_param(head + R"("id_slot": 1})") == "id_slot");
  CHECK(error_param(R"({"prompt": ["a", "b"]})") == "prompt");  // two prompts
  CHECK(error_param(R"({"prompt": []})") == "prompt");
  CHECK(error_param(R"({"prompt": [[1, 2], [3]]})") == "prompt");
  CHECK(error_param(R"({"prompt": "x", "n_predict": 0})") == "n_predict");
  CHECK(error_param(R"({"prompt": "x", "ignore_eos": true})") == "n_predict");
  CHECK(error_param(R"({"prompt": "x", "logit_bias": [["hello", 1]]})") == "logit_bias");
  CHECK(error_param(R"({"prompt": "x", "grammar": "root ::= \"a\"", "json_schema": {}})") == "json_schema");
  CHECK(at(completion(R"(, "repeat_penalty": 1.3, "repeat_last_n": -1)"), "content").as_string() ==
        openai_text(R"(, "repetition_penalty": 1.3)"));
  // neutral values of the options kylin does not run are accepted
  CHECK(at(completion(R"(, "mirostat": 0, "typical_p": 1, "repeat_penalty": 1, "cache_prompt": false, "id_slot": -1, "seed": -1)"), "content")
            .as_string() == openai_text(""));
}

TEST_CASE("GET /props: the defaults in force (context, slots, sampling, template), llama.cpp's shape") {
  const Value p = parse_json(server().client().Get("/props")->body);
  CHECK(at(p, "total_slots").as_int() == 2);
  CHECK(at(at(p, "default_generation_settings"), "n_ctx").as_int() == 1024);
  CHECK(at(at(at(p, "default_generation_settings"), "params"), "temperature").as_double() == 1);  // no generation_config.json: 1
  CHECK(at(p, "chat_template").as_string().find("<|im_start|>") != std::string::npos);
  CHECK(at(p, "chat_template_kwargs").size() == 0);
  CHECK(at(p, "model_alias").as_string() == server().model_id());
}

TEST_CASE("TEI's /rerank shape: query and texts in, [{index, score, text}] out, the Jina shape's scores and order") {
  ServerProcess rerank({"--ctx", "256", "--task", "rerank"});
  const std::string texts = R"(["The giant panda is a bear.", "hi", "Pandas eat bamboo in China."])";
  const Value jina = post_ok(rerank, "/rerank", R"({"query": "What is a panda?", "documents": )" + texts + "}");
  const Value tei = post_ok(rerank, "/rerank", R"({"query": "What is a panda?", "texts": )" + texts + R"(, "return_text": true})");
  REQUIRE(tei.is_array());
  REQUIRE(tei.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    const Value& a = at(jina, "results").as_array()[i];
    const Value& b = tei.as_array()[i];
    CHECK(at(b, "index").as_int() == at(a, "index").as_int());
    CHECK(at(b, "score").as_double() == at(a, "relevance_score").as_double());
    CHECK(at(b, "text").as_string() == at(at(a, "document"), "text").as_string());
  }
  const Value bare = post_ok(rerank, "/rerank", R"({"query": "q", "texts": ["a", "b"]})");
  CHECK(bare.as_array()[0].find("text") == nullptr);  // TEI's return_text defaults to false
  for (const auto& body_param : std::vector<std::pair<std::string, std::string>>{
           {R"({"query": "q", "texts": ["a"], "raw_scores": true})", "raw_scores"},
           {R"({"query": "q", "texts": ["a"], "truncate": true})", "truncate"},
           {R"({"query": "q", "texts": ["a"], "documents": ["a"]})", "texts"},
           {R"({"query": "q", "texts": [1]})", "texts"}}) {
    const auto& [body, param] = body_param;
    CAPTURE(body_param.first);
    CHECK(at(at(post_400(rerank, "/rerank", body), "error"), "param").as_string() == param);
  }
}

// The Access-Control-Allow-Origin and Vary headers of GET /health from `origin` ("-": none).
std::pair<std::string, std::string> cors_of(const ServerProcess& s, const std::string& origin, const std::string& method = "GET") {
  auto c = s.client();
  httplib::Headers h;
  if (!origin.empty()) h.emplace("Origin", origin);
  if (method == "OPTIONS") h.emplace("Access-Control-Request-Method", "POST");
  auto r = method == "OPTIONS" ? c.Options("/v1/chat/completions", h) : c.Get("/health", h);
  REQUIRE(r);
  const std::string allow = r->has_header("Access-Control-Allow-Origin") ? r->get_header_value("Access-Control-Allow-Origin") : "-";
  return {allow, r->has_header("Vary") ? r->get_header_value("Vary") : "-"};
}

TEST_CASE("--cors-origin: several origins (repeated or comma-separated) and localhost are each answered with their own origin") {
  ServerProcess s({"--ctx", "256", "--cors-origin", "https://a.example,https://b.example", "--cors-origin", "localhost"});
  CHECK(cors_of(s, "https://a.example") == std::pair<std::string, std::string>{"https://a.example", "Origin"});
  CHECK(cors_of(s, "https://b.example").first == "https://b.example");
  CHECK(cors_of(s, "http://localhost:5173").first == "http://localhost:5173");
  CHECK(cors_of(s, "http://127.0.0.1:3000").first == "http://127.0.0.1:3000");
  CHECK(cors_of(s, "http://[::1]:8000").first == "http://[::1]:8000");
  CHECK(cors_of(s, "https://evil.example") == std::pair<std::string, std::string>{"-", "Origin"});
  CHECK(cors_of(s, "http://localhost.evil.example").first == "-");
  CHECK(cors_of(s, "").first == "-");
  CHECK(cors_of(s, "https://b.example", "OPTIONS").first == "https://b.example");
  ServerProcess any({"--ctx", "256", "--cors-origin", "*"});
  CHECK(cors_of(any, "https://anything.example") == std::pair<std::string, std::string>{"*", "-"});
  CHECK_THROWS_WITH_AS(ServerProcess({"--cors-origin", "https://a.example/"}), doctest::Contains("not an origin"), std::runtime_error);
}

TEST_CASE("CorsPolicy: localhost is http(s) on localhost, 127.0.0.1 or [::1] with any port, nothing else") {
  using kylin::server::CorsPolicy;
  for (const char* o : {"http://localhost", "https://localhost:8443", "http://127.0.0.1:1", "http://[::1]", "http://[::1]:65535"})
    CHECK_MESSAGE(CorsPolicy::is_local(o), o);
  for (const char* o : {"ftp://localhost", "http://localhost.example", "http://localhost:", "http://localhost:80a", "http://127.0.0.2",
                        "localhost", "http://[::2]:80", "http://localhost:123456"})
    CHECK_FALSE_MESSAGE(CorsPolicy::is_local(o), o);
  const CorsPolicy none;
  CHECK_FALSE(none.enabled());
  CHECK(none.allow_origin("https://a.example").empty());
}

}  // namespace llama_compat_http_test
