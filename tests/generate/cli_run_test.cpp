// The main job end to end: `kylin run` / `kylin chat` / `kylin generate --prompt` as processes,
// on the full-vocabulary checkpoint with the real Qwen3 tokenizer files.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

#include "common/process.hpp"
#include "kylin/generate/session.hpp"

namespace {

const std::string model_dir = std::string(KYLIN_TEST_DATA) + "/models/e2e-qwen3-chat";
using kylin::test::kylin_bin;

using Run = kylin::test::ProcessResult;

// stdout only; the command line redirects stderr where it needs it.
Run run(const std::string& command) { return kylin::test::run_shell(command); }

std::string read_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return {};
  std::string s;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  std::fclose(f);
  return s;
}

}  // namespace

TEST_CASE("kylin run --greedy --no-think prints exactly the detokenized greedy continuation of the templated prompt") {
  const std::string prompt = "Tell me about kylins.";
  const Run r = run(kylin_bin + " run --model " + model_dir + " -p '" + prompt + "' --greedy --no-think -n 20 -t 2 2>/dev/null");
  CHECK(r.exit_code == 0);

  // Expected through the library: rendered template -> tokens -> argmax continuation -> text.
  auto engine = kylin::Engine::load(model_dir, {.threads = 2, .max_pass_rows = 512, .context_length = 256});
  kylin::json::Value msg = kylin::json::Object{};
  msg.set("role", "user");
  msg.set("content", prompt);
  kylin::Session session(*engine);
  const std::string rendered =
      session.render_chat(kylin::json::Array{msg}, {.enable_thinking = false, .tools = {}, .extra_kwargs = {}});
  CHECK(rendered == "<|im_start|>user\n" + prompt + "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  const std::vector<int> ids = engine->tokenizer().encode(rendered);
  auto cache = engine->model().new_cache(256);
  auto logits = engine->model().logits_last(ids, cache);
  std::vector<int> continuation;
  const auto n_tokens = static_cast<std::ptrdiff_t>(engine->tokenizer().vocab_size());  // the rows past it are no token
  for (int i = 0; i < 20; ++i) {
    const int id = static_cast<int>(std::max_element(logits.begin(), logits.begin() + n_tokens) - logits.begin());
    if (engine->is_eos(id)) break;
    continuation.push_back(id);
    logits = engine->model().logits_last(std::vector<int>{id}, cache);
  }
  CHECK(r.out == engine->tokenizer().decode(continuation) + "\n");
}

TEST_CASE("seeded sampling gives identical output across two processes") {
  const std::string cmd = kylin_bin + " run --model " + model_dir + " -p 'Hi' --no-think --temp 0.9 --top-k 50 --seed 42 -n 24 2>/dev/null";
  const Run a = run(cmd), b = run(cmd);
  CHECK(a.exit_code == 0);
  CHECK(b.exit_code == 0);
  CHECK(a.out.size() > 1);
  CHECK(a.out == b.out);
  const Run c = run(kylin_bin + " run --model " + model_dir + " -p 'Hi' --no-think --temp 0.9 --top-k 50 --seed 43 -n 24 2>/dev/null");
  CHECK(c.out != a.out);
}

TEST_CASE("kylin run prints a stats line on stderr and fails with one line on a bad model directory") {
  const std::string err = (std::filesystem::temp_directory_path() / "kylin_run_stats.txt").string();
  const Run r = run(kylin_bin + " run --model " + model_dir + " -p 'Hello' --greedy --no-think -n 4 2>" + err);
  CHECK(r.exit_code == 0);
  const std::string stats = read_file(err);
  CHECK(stats.find("prompt") != std::string::npos);
  CHECK(stats.find("tok/s") != std::string::npos);
  CHECK(stats.find("stop: max_tokens") != std::string::npos);
  const Run bad = run(kylin_bin + " run --model /nonexistent/dir -p 'x' 2>" + err);
  CHECK(bad.exit_code != 0);
  CHECK(read_file(err).find("[kylin.load] /nonexistent/dir: no such model directory") != std::string::npos);
}

TEST_CASE("kylin run --kv-dtype f16 answers with an f16 cache; an unknown KV dtype is refused naming the choices") {
  const std::string err = (std::filesystem::temp_directory_path() / "kylin_run_kv.txt").string();
  const Run r = run(kylin_bin + " run --model " + model_dir + " -p 'Hello' --greedy --no-think -n 4 --kv-dtype f16 2>" + err);
  CHECK(r.exit_code == 0);
  CHECK(!r.out.empty());
  const Run bad = run(kylin_bin + " run --model " + model_dir + " -p 'Hello' --kv-dtype q8 2>" + err);
  CHECK(bad.exit_code != 0);
  const std::string msg = read_file(err);
  CHECK(msg.find("--kv-dtype") != std::string::npos);
  CHECK(msg.find("f16") != std::string::npos);
}

TEST_CASE("kylin chat through a pipe: multi-turn history reuses the cache, /reset clears it, /quit exits 0") {
  const std::string err = (std::filesystem::temp_directory_path() / "kylin_chat_stats.txt").string();
  const Run r = run("printf 'Hello\\nAnd more\\n/reset\\nAgain\\n/quit\\nnever read\\n' | " + kylin_bin + " chat --model " +
                    model_dir + " --greedy --no-think -n 6 2>" + err);
  CHECK(r.exit_code == 0);
  const std::string stats = read_file(err);
  std::vector<std::string> lines;
  for (std::size_t pos = 0; (pos = stats.find("[kylin] load", pos)) != std::string::npos; ++pos)
    lines.push_back(stats.substr(pos, stats.find('\n', pos) - pos));
  REQUIRE(lines.size() == 3);
  CHECK(lines[0].find("(cached 0,") != std::string::npos);
  CHECK(lines[1].find("(cached 0,") == std::string::npos);  // second turn reuses the first
  CHECK(lines[2].find("(cached 0,") != std::string::npos);  // after /reset
  CHECK(stats.find("conversation reset") != std::string::npos);
}

TEST_CASE("kylin generate --prompt continues raw text without the chat template") {
  const Run r = run(kylin_bin + " generate --model " + model_dir + " --prompt 'abc' --greedy -n 8 --format json 2>/dev/null");
  CHECK(r.exit_code == 0);
  const auto v = kylin::json::parse(r.out);
  REQUIRE(v.find("tokens") != nullptr);
  CHECK(v.find("tokens")->size() == 8);
  CHECK(v.find("stop_reason")->as_string() == "max_tokens");
}

TEST_CASE("kylin generate --temperature 1e-45 exits 0 with the greedy tokens, on the --tokens and --prompt paths") {
  const std::string common = kylin_bin + " generate --model " + model_dir + " -n 8 --ignore-eos --format json -t 2 ";
  const int n_tokens = kylin::Tokenizer::from_dir(model_dir).vocab_size();
  {  // after token 1116 this random checkpoint's largest logit is a row past the tokenizer
    auto model = kylin::Model::load(model_dir, {.threads = 2});
    auto cache = model.new_cache(16);
    const auto logits = model.logits_last(std::vector<int>{1116}, cache);
    REQUIRE(std::max_element(logits.begin(), logits.end()) - logits.begin() >= n_tokens);
  }
  for (const std::string input : {"--tokens 1116", "--prompt 'Hello, world'"}) {
    INFO(input);
    const Run tiny = run(common + input + " --temperature 1e-45 --top-p 0.9 2>/dev/null");
    const Run greedy = run(common + input + " --greedy 2>/dev/null");
    REQUIRE(tiny.exit_code == 0);
    REQUIRE(greedy.exit_code == 0);
    const kylin::json::Value got = kylin::json::parse(tiny.out), want = kylin::json::parse(greedy.out);
    const kylin::json::Value* tokens = got.find("tokens");
    REQUIRE(tokens != nullptr);
    REQUIRE(tokens->size() == 8);
    for (const auto& id : tokens->as_array()) CHECK((id.as_int() >= 0 && id.as_int() < n_tokens));
    REQUIRE(want.find("tokens") != nullptr);
    CHECK(*tokens == *want.find("tokens"));
  }
}

TEST_CASE("Ctrl-C (SIGINT) in kylin chat stops the current answer, and the program goes on to the next line") {
  REQUIRE(std::filesystem::exists(kylin_bin));
  const std::string work = (std::filesystem::temp_directory_path() / "kylin_chat_sigint").string();
  run("bash " + std::string(KYLIN_SOURCE_DIR) + "/tests/generate/chat_sigint.sh " + kylin_bin + " " + model_dir + " " + work);
  CHECK(read_file(work + "/rc") == "0\n");
  const std::string err = read_file(work + "/err");
  std::size_t cancelled = 0;
  for (std::size_t pos = 0; (pos = err.find("stop: cancelled", pos)) != std::string::npos; ++pos) ++cancelled;
  CHECK(cancelled == 2);  // both answers were interrupted, and the program kept reading lines
  std::filesystem::remove_all(work);
}

TEST_CASE("kylin embed prints Engine::embed's vectors exactly (json and text), with --prompt-name and --dimensions; a chat model is refused") {
  const std::string embedding_dir = std::string(KYLIN_TEST_DATA) + "/models/e2e-qwen3-embedding";
  const Run r = run(kylin_bin + " embed --model " + embedding_dir +
                    " --prompt-name query --dimensions 16 -t 1 'What is the capital of China?' 'Explain gravity'");
  REQUIRE(r.exit_code == 0);
  auto engine = kylin::Engine::load(embedding_dir, {.threads = 1, .context_length = 256});
  const std::vector<std::string> texts{"What is the capital of China?", "Explain gravity"};
  const kylin::EmbedResult want = engine->embed(texts, {.prompt_name = "query", .dimensions = 16});
  const kylin::json::Value got = kylin::json::parse(r.out);
  REQUIRE(got.find("embeddings") != nullptr);
  CHECK(got.find("prompt_tokens")->as_int() == want.prompt_tokens);
  REQUIRE(got.find("embeddings")->size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto& row = got.find("embeddings")->as_array()[i].as_array();
    REQUIRE(row.size() == 16);
    for (std::size_t j = 0; j < 16; ++j) CHECK(static_cast<float>(row[j].as_double()) == want.embeddings[i][j]);
  }
  const Run text = run(kylin_bin + " embed --model " + embedding_dir + " --format text -t 1 a b");
  CHECK(text.exit_code == 0);
  CHECK(std::count(text.out.begin(), text.out.end(), '\n') == 2);
  const Run refused = run(kylin_bin + " embed --model " + model_dir + " -t 1 a 2>&1");
  CHECK(refused.exit_code != 0);
  CHECK(refused.out.find("cannot embed") != std::string::npos);
}
