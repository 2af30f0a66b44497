// kylin-server's retrieval endpoints end to end: /v1/embeddings on the Qwen3-Embedding layout
// (e2e-qwen3-embedding) against its float64 reference, float and base64; /v1/rerank and /rerank
// with --task rerank against the Qwen3-Reranker reference; each bad request a 400 naming its parameter.
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kylin/io/checkpoint.hpp"
#include "server_process.hpp"

using namespace kylin::test;
using kylin::json::Value;

namespace {

Value reference(const std::string& name) {
  const std::string path = std::string(KYLIN_TEST_DATA) + "/reference/" + name;
  return kylin::json::parse(kylin::io::read_text_file(path), path);
}

ServerProcess& embed_server() {  // no --task: an embedding model's directory serves embeddings
  static ServerProcess server({"--ctx", "64"}, {}, {.name = "e2e-qwen3-embedding", .id = "e2e-qwen3-embedding"});
  return server;
}

ServerProcess& rerank_server() {
  static ServerProcess server({"--ctx", "256", "--task", "rerank"});
  return server;
}

std::pair<int, Value> post(ServerProcess& server, const std::string& path, const Value& body) {
  auto c = server.client();
  auto r = post_json(c, path, kylin::json::dump(body));
  REQUIRE(r);
  INFO(r->body);
  return {r->status, parse_json(r->body)};
}

Value post_ok(ServerProcess& server, const std::string& path, const Value& body) {
  const auto answer = post(server, path, body);  // no structured binding: clang 14 cannot capture one in INFO
  INFO(kylin::json::dump(answer.second));
  REQUIRE(answer.first == 200);
  return answer.second;
}

// A 400 whose error names `param`.
void check_bad(ServerProcess& server, const std::string& path, const Value& body, const std::string& param) {
  const auto answer = post(server, path, body);
  INFO(kylin::json::dump(body), " -> ", kylin::json::dump(answer.second));
  CHECK(answer.first == 400);
  const Value& e = at(answer.second, "error");
  CHECK(at(e, "type").as_string() == "invalid_request_error");
  REQUIRE(at(e, "param").is_string());
  CHECK(at(e, "param").as_string() == param);
}

Value object(std::initializer_list<std::pair<const char*, Value>> fields) {
  Value v = kylin::json::Object{};
  for (const auto& [k, x] : fields) v.set(k, x);
  return v;
}

double cosine_distance(const std::vector<double>& a, const Value& b) {
  REQUIRE(a.size() == b.size());
  double dot = 0, na = 0, nb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double y = b.as_array()[i].as_double();
    dot += a[i] * y, na += a[i] * a[i], nb += y * y;
  }
  return 1 - dot / std::sqrt(na * nb);
}

std::vector<double> floats(const Value& embedding) {
  std::vector<double> out;
  for (const auto& x : embedding.as_array()) out.push_back(x.as_double());
  return out;
}

std::vector<float> decode_base64_floats(const std::string& text) {
  auto sextet = [](char c) -> std::uint32_t {
    if (c >= 'A' && c <= 'Z') return static_cast<std::uint32_t>(c - 'A');
    if (c >= 'a' && c <= 'z') return static_cast<std::uint32_t>(c - 'a' + 26);
    if (c >= '0' && c <= '9') return static_cast<std::uint32_t>(c - '0' + 52);
    return c == '+' ? 62u : 63u;
  };
  std::vector<unsigned char> bytes;
  REQUIRE(text.size() % 4 == 0);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    std::uint32_t chunk = 0;
    int pad = 0;
    for (std::size_t k = 0; k < 4; ++k) chunk = chunk << 6 | (text[i + k] == '=' ? (++pad, 0u) : sextet(text[i + k]));
    for (int k = 0; k < 3 - pad; ++k) bytes.push_back(static_cast<unsigned char>(chunk >> (16 - 8 * k)));
  }
  REQUIRE(bytes.size() % 4 == 0);
  std::vector<float> out;
  for (std::size_t i = 0; i < bytes.size(); i += 4)
    out.push_back(std::bit_cast<float>(std::uint32_t(bytes[i]) | std::uint32_t(bytes[i + 1]) << 8 | std::uint32_t(bytes[i + 2]) << 16 |
                                       std::uint32_t(bytes[i + 3]) << 24));
  return out;
}

Value texts_of(const Value& cases) {
  Value texts = kylin::json::Array{};
  for (const auto& c : cases.as_array()) texts.push_back(at(c, "text"));
  return texts;
}

}  // namespace

TEST_CASE("embeddings: every reference case within 1e-5 cosine distance, in input order, OpenAI's shape and usage") {
  const Value ref = reference("e2e-qwen3-embedding.json");
  const Value& cases = at(ref, "cases");
  const Value v = post_ok(embed_server(), "/v1/embeddings", object({{"model", "e2e-qwen3-embedding"}, {"input", texts_of(cases)}}));
  CHECK(at(v, "object").as_string() == "list");
  CHECK(at(v, "model").as_string() == "e2e-qwen3-embedding");
  const auto& data = at(v, "data").as_array();
  REQUIRE(data.size() == cases.size());
  std::int64_t tokens = 0;
  for (std::size_t i = 0; i < data.size(); ++i) {
    CAPTURE(i);
    CHECK(at(data[i], "object").as_string() == "embedding");
    CHECK(at(data[i], "index").as_int() == static_cast<std::int64_t>(i));
    CHECK(cosine_distance(floats(at(cases.as_array()[i], "embedding")), at(data[i], "embedding")) < 1e-5);
    tokens += static_cast<std::int64_t>(at(cases.as_array()[i], "ids").size());
  }
  CHECK(at(at(v, "usage"), "prompt_tokens").as_int() == tokens);
  CHECK(at(at(v, "usage"), "total_tokens").as_int() == tokens);
}

TEST_CASE("embeddings: base64 is the float values' little-endian float32 bytes; dimensions=16 matches the reference's embedding_dim16") {
  const Value cases = at(reference("e2e-qwen3-embedding.json"), "cases");
  const Value input = texts_of(cases);
  const Value plain = post_ok(embed_server(), "/v1/embeddings", object({{"input", input}, {"dimensions", 16}}));
  const Value b64 = post_ok(embed_server(), "/v1/embeddings", object({{"input", input}, {"dimensions", 16}, {"encoding_format", "base64"}}));
  for (std::size_t i = 0; i < cases.size(); ++i) {
    CAPTURE(i);
    const Value& values = at(at(plain, "data").as_array()[i], "embedding");
    const std::vector<float> decoded = decode_base64_floats(at(at(b64, "data").as_array()[i], "embedding").as_string());
    REQUIRE(decoded.size() == 16);
    REQUIRE(values.size() == 16);
    for (std::size_t j = 0; j < 16; ++j) CHECK(decoded[j] == static_cast<float>(values.as_array()[j].as_double()));
    CHECK(cosine_distance(floats(at(cases.as_array()[i], "embedding_dim16")), values) < 1e-5);
  }
}

TEST_CASE("embeddings: token-id inputs (one array; arrays of arrays) give the text inputs' embeddings; a single string is one input") {
  const Value cases = at(reference("e2e-qwen3-embedding.json"), "cases");
  const Value& first = cases.as_array()[0];
  Value ids = kylin::json::Array{};
  for (const auto& c : cases.as_array()) ids.push_back(at(c, "ids"));
  const Value by_ids = post_ok(embed_server(), "/v1/embeddings", object({{"input", ids}}));
  const Value by_text = post_ok(embed_server(), "/v1/embeddings", object({{"input", texts_of(cases)}}));
  CHECK(kylin::json::dump(at(by_ids, "data")) == kylin::json::dump(at(by_text, "data")));
  const Value one_ids = post_ok(embed_server(), "/v1/embeddings", object({{"input", at(first, "ids")}}));
  const Value one_text = post_ok(embed_server(), "/v1/embeddings", object({{"input", at(first, "text")}}));
  REQUIRE(at(one_ids, "data").size() == 1);
  CHECK(kylin::json::dump(at(one_ids, "data")) == kylin::json::dump(at(one_text, "data")));
  CHECK(at(at(one_ids, "usage"), "prompt_tokens").as_int() == static_cast<std::int64_t>(at(first, "ids").size()));
}

TEST_CASE("embeddings: bad requests are 400s naming the parameter (empty, too many, too long, format, dimensions, ids, shape)") {
  ServerProcess& s = embed_server();
  check_bad(s, "/v1/embeddings", object({}), "input");
  check_bad(s, "/v1/embeddings", object({{"input", kylin::json::Array{}}}), "input");
  check_bad(s, "/v1/embeddings", object({{"input", ""}}), "input");
  check_bad(s, "/v1/embeddings", object({{"input", kylin::json::Array{"a", ""}}}), "input");
  check_bad(s, "/v1/embeddings", object({{"input", kylin::json::Array{"a", 1}}}), "input");
  check_bad(s, "/v1/embeddings", object({{"input", kylin::json::Array{1, 151936}}}), "input");
  check_bad(s, "/v1/embeddings", object({{"input", kylin::json::Array{kylin::json::Array{1}, kylin::json::Array{}}}}), "input");
  check_bad(s, "/v1/embeddings", object({{"input", kylin::json::Array(2049, Value("a"))}}), "input");
  std::string words;
  for (int i = 0; i < 100; ++i) words += " w" + std::to_string(i);  // > 64 tokens, the server's --ctx
  check_bad(s, "/v1/embeddings", object({{"input", words}}), "input");
  check_bad(s, "/v1/embeddings", object({{"input", "a"}, {"encoding_format", "int8"}}), "encoding_format");
  check_bad(s, "/v1/embeddings", object({{"input", "a"}, {"dimensions", 0}}), "dimensions");
  check_bad(s, "/v1/embeddings", object({{"input", "a"}, {"dimensions", 33}}), "dimensions");
  check_bad(s, "/v1/embeddings", object({{"input", "a"}, {"prompt_name", "nope"}}), "prompt_name");
  auto [status, v] = post(s, "/v1/embeddings", object({{"input", "a"}, {"model", "other"}}));
  CHECK(status == 404);
}

TEST_CASE("task: an embedding server refuses chat and rerank, a rerank server refuses embeddings, each naming the --task to use") {
  auto [chat_status, chat] = post(embed_server(), "/v1/chat/completions",
                                  object({{"messages", kylin::json::Array{object({{"role", "user"}, {"content", "hi"}})}}}));
  CHECK(chat_status == 400);
  CHECK(at(at(chat, "error"), "message").as_string().find("--task generate") != std::string::npos);
  auto [rr_status, rr] = post(embed_server(), "/v1/rerank", object({{"query", "q"}, {"documents", kylin::json::Array{"d"}}}));
  CHECK(rr_status == 400);
  CHECK(at(at(rr, "error"), "message").as_string().find("--task rerank") != std::string::npos);
  auto [e_status, e] = post(rerank_server(), "/v1/embeddings", object({{"input", "a"}}));
  CHECK(e_status == 400);
  CHECK(at(at(e, "error"), "message").as_string().find("--task embed and an embedding model") != std::string::npos);
  auto [c_status, c] = post(rerank_server(), "/v1/completions", object({{"prompt", "a"}}));
  CHECK(c_status == 400);
  CHECK_THROWS_WITH_AS(ServerProcess({"--task", "embed"}), doctest::Contains("cannot embed"), std::runtime_error);
}

TEST_CASE("rerank: scores within 1e-5 of the reference, sorted by score with original indices; documents as strings or {text}") {
  const Value ref = reference("e2e-qwen3-fullvocab-rerank.json");
  Value documents = kylin::json::Array{};
  std::int64_t tokens = 0;
  for (std::size_t i = 0; i < at(ref, "cases").size(); ++i) {
    const Value& c = at(ref, "cases").as_array()[i];
    documents.push_back(i % 2 == 0 ? at(c, "document") : object({{"text", at(c, "document")}}));
    tokens += static_cast<std::int64_t>(at(c, "ids").size());
  }
  const Value body = object({{"model", "e2e-qwen3"}, {"query", at(ref, "query")}, {"documents", documents}});
  for (const char* path : {"/v1/rerank", "/rerank"}) {
    CAPTURE(path);
    const Value v = post_ok(rerank_server(), path, body);
    CHECK(at(v, "model").as_string() == "e2e-qwen3");
    const auto& results = at(v, "results").as_array();
    REQUIRE(results.size() == at(ref, "cases").size());
    for (std::size_t k = 0; k < results.size(); ++k) {
      const auto index = static_cast<std::size_t>(at(results[k], "index").as_int());
      REQUIRE(index < at(ref, "cases").size());
      const Value& c = at(ref, "cases").as_array()[index];
      CHECK(std::abs(at(results[k], "relevance_score").as_double() - at(c, "score").as_double()) < 1e-5);
      CHECK(at(at(results[k], "document"), "text").as_string() == at(c, "document").as_string());
      if (k > 0) CHECK(at(results[k - 1], "relevance_score").as_double() >= at(results[k], "relevance_score").as_double());
    }
    CHECK(at(at(v, "usage"), "prompt_tokens").as_int() == tokens);
  }
}

TEST_CASE("rerank: top_n keeps the best N; return_documents false leaves the text out") {
  const Value ref = reference("e2e-qwen3-fullvocab-rerank.json");
  Value documents = kylin::json::Array{};
  for (const auto& c : at(ref, "cases").as_array()) documents.push_back(at(c, "document"));
  const Value all = post_ok(rerank_server(), "/v1/rerank", object({{"query", at(ref, "query")}, {"documents", documents}}));
  const Value top = post_ok(rerank_server(), "/v1/rerank",
                            object({{"query", at(ref, "query")}, {"documents", documents}, {"top_n", 1}, {"return_documents", false}}));
  REQUIRE(at(top, "results").size() == 1);
  const Value& best = at(top, "results").as_array()[0];
  CHECK(at(best, "index").as_int() == at(at(all, "results").as_array()[0], "index").as_int());
  CHECK(best.find("document") == nullptr);
}

TEST_CASE("rerank: bad requests are 400s naming the parameter (query, documents, top_n, a document past the context)") {
  ServerProcess& s = rerank_server();
  const Value docs = kylin::json::Array{"a"};
  check_bad(s, "/v1/rerank", object({{"documents", docs}}), "query");
  check_bad(s, "/v1/rerank", object({{"query", ""}, {"documents", docs}}), "query");
  check_bad(s, "/v1/rerank", object({{"query", "q"}}), "documents");
  check_bad(s, "/v1/rerank", object({{"query", "q"}, {"documents", kylin::json::Array{}}}), "documents");
  check_bad(s, "/v1/rerank", object({{"query", "q"}, {"documents", kylin::json::Array{"a", 3}}}), "documents");
  check_bad(s, "/v1/rerank", object({{"query", "q"}, {"documents", kylin::json::Array(2049, Value("a"))}}), "documents");
  check_bad(s, "/v1/rerank", object({{"query", "q"}, {"documents", docs}, {"top_n", 0}}), "top_n");
  std::string words;
  for (int i = 0; i < 300; ++i) words += " w" + std::to_string(i);  // > 256 tokens, the server's --ctx
  auto [status, v] = post(s, "/v1/rerank", object({{"query", "q"}, {"documents", kylin::json::Array{"a", words}}}));
  CHECK(status == 400);
  CHECK(at(at(v, "error"), "param").as_string() == "documents");
  CHECK(at(at(v, "error"), "code").as_string() == "context_length_exceeded");
  CHECK(at(at(v, "error"), "message").as_string().find("document 1 has") != std::string::npos);
}
