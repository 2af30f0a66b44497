// ChatTemplate: loading from a model directory (string or named-list chat_template, token
// objects, chat_template.jinja) and the variables transformers passes to the template.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "kylin/chat/chat_template.hpp"

namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) : path(fs::temp_directory_path() / ("kylin-chat-" + name)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  void write(const std::string& file, const std::string& text) const { std::ofstream(path / file, std::ios::binary) << text; }
};

kylin::json::Value one_user(const char* text) {
  return kylin::json::parse(std::string(R"([{"role": "user", "content": ")") + text + "\"}]");
}

}  // namespace

TEST_CASE("a chat_template list selects the template named 'default'; token objects give their content") {
  TempDir dir("list");
  dir.write("tokenizer_config.json", R"({
    "bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>",
    "chat_template": [{"name": "tool_use", "template": "TOOLS"},
                      {"name": "default", "template": "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"}]})");
  const auto t = kylin::ChatTemplate::from_dir(dir.path);
  CHECK(t.render(one_user("hi")) == "<s>hi</s>");
  CHECK(t.bos_token() == "<s>");
  CHECK(t.eos_token() == "</s>");
}

TEST_CASE("chat_template.jinja in the directory takes precedence over tokenizer_config.json") {
  TempDir dir("jinja");
  dir.write("tokenizer_config.json", R"({"chat_template": "from config"})");
  dir.write("chat_template.jinja", "from file {{ messages|length }}\n");
  CHECK(kylin::ChatTemplate::from_dir(dir.path).render(one_user("x")) == "from file 1");
}

TEST_CASE("a directory without a chat template is a load error naming the file") {
  TempDir dir("none");
  dir.write("tokenizer_config.json", R"({"eos_token": "</s>"})");
  CHECK_THROWS_WITH_AS(kylin::ChatTemplate::from_dir(dir.path), doctest::Contains("no chat_template"), kylin::Error);
  CHECK_THROWS_AS(kylin::ChatTemplate::from_dir(dir.path / "missing"), kylin::Error);
  dir.write("tokenizer_config.json", R"({"chat_template": [{"name": "rag", "template": "x"}]})");
  CHECK_THROWS_WITH_AS(kylin::ChatTemplate::from_dir(dir.path), doctest::Contains("'default'"), kylin::Error);
}

TEST_CASE("template variables: tools is none when absent, kwargs are visible, add_generation_prompt defaults to false") {
  const kylin::ChatTemplate t(
      "{{ tools is none }} {{ tools is defined }} {{ documents is none }} {{ add_generation_prompt }} "
      "{{ enable_thinking is defined }} {{ custom }} {{ tools|length if tools else 0 }}");
  CHECK(t.render(one_user("x")) == "True True True False False  0");
  kylin::RenderOptions o;
  o.add_generation_prompt = true;
  o.kwargs = kylin::json::parse(R"({"enable_thinking": false, "custom": "c"})");
  o.tools = kylin::json::parse(R"([{"type": "function"}])");
  CHECK(t.render(one_user("x"), o) == "False True True True True c 1");
  o.kwargs.set("tools", kylin::json::parse("[]"));
  CHECK_THROWS_AS(t.render(one_user("x"), o), kylin::Error);  // tools given twice
  o.tools = kylin::json::Value();
  CHECK(t.render(one_user("x"), o) == "False True True True True c 0");  // tools from kwargs
}

TEST_CASE("messages must be an array of objects") {
  const kylin::ChatTemplate t("{{ messages }}");
  CHECK_THROWS_AS(t.render(kylin::json::parse(R"({"role": "user"})")), kylin::Error);
  CHECK_THROWS_AS(t.render(kylin::json::parse(R"(["user"])")), kylin::Error);
}

TEST_CASE("Qwen3 template: a null assistant content fails like Python does, not silently") {
  const auto t = kylin::ChatTemplate::from_dir(KYLIN_TEST_DATA "/qwen3-tokenizer");
  const auto messages = kylin::json::parse(
      R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": null,
          "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {}}}]}])");
  // Python: TypeError: argument of type 'NoneType' is not iterable ('</think>' in message.content)
  CHECK_THROWS_WITH_AS(t.render(messages), doctest::Contains("argument of type 'NoneType' is not iterable"), kylin::Error);
}

TEST_CASE("tojson keeps Python's float spelling (1.0, 1e-07), where @huggingface/jinja would print 1 and 1e-7") {
  const kylin::ChatTemplate t("{{ messages[0].arguments | tojson }}");
  const auto messages = kylin::json::parse(R"([{"arguments": {"a": 1.0, "b": 1e-7, "c": 2.50, "d": 1e16, "e": -0.0}}])");
  CHECK(t.render(messages) == R"({"a": 1.0, "b": 1e-07, "c": 2.5, "d": 1e+16, "e": -0.0})");
}
