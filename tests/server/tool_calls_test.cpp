// Qwen3 tool-call parsing: well-formed blocks become calls, malformed ones stay text, and the
// streaming hold never releases any part of a <tool_call> tag as content.
#include <doctest/doctest.h>

#include "kylin/server/tool_calls.hpp"

using kylin::server::parse_tool_calls;
using kylin::server::ToolCallHold;

TEST_CASE("a Qwen3 <tool_call> block becomes one call with its arguments as a JSON string") {
  const auto r = parse_tool_calls(
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>");
  REQUIRE(r.calls.size() == 1);
  CHECK(r.calls[0].name == "get_weather");
  CHECK(r.calls[0].arguments == "{\"city\":\"Paris\",\"days\":3}");
  CHECK(r.content.empty());
}

TEST_CASE("several calls keep their order and the text around them is the content") {
  const auto r = parse_tool_calls(
      "Let me check both.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": [1, 2]}}\n</tool_call>");
  REQUIRE(r.calls.size() == 2);
  CHECK(r.calls[0].name == "a");
  CHECK(r.calls[0].arguments == "{}");
  CHECK(r.calls[1].name == "b");
  CHECK(r.calls[1].arguments == "{\"x\":[1,2]}");
  CHECK(r.content == "Let me check both.");
}

TEST_CASE("malformed JSON inside <tool_call> is left in the content, untouched") {
  const std::string text = "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": }\n</tool_call>";
  const auto r = parse_tool_calls(text);
  CHECK(r.calls.empty());
  CHECK(r.content == text);
}

TEST_CASE("a malformed block beside a valid one stays as text while the valid one is parsed") {
  const auto r = parse_tool_calls(
      "<tool_call>\nnot json\n</tool_call>\n<tool_call>\n{\"name\": \"ok\", \"arguments\": {\"k\": \"v\"}}\n</tool_call>");
  REQUIRE(r.calls.size() == 1);
  CHECK(r.calls[0].name == "ok");
  CHECK(r.content == "<tool_call>\nnot json\n</tool_call>");
}

TEST_CASE("a call without a name, or with non-object arguments, is not a call") {
  CHECK(parse_tool_calls("<tool_call>{\"arguments\": {}}</tool_call>").calls.empty());
  CHECK(parse_tool_calls("<tool_call>{\"name\": \"f\", \"arguments\": 3}</tool_call>").calls.empty());
  CHECK(parse_tool_calls("<tool_call>[1, 2]</tool_call>").calls.empty());
}

TEST_CASE("string arguments pass through; an unclosed final block is still parsed") {
  const auto r = parse_tool_calls("<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}\n");
  REQUIRE(r.calls.size() == 1);
  CHECK(r.calls[0].arguments == "{\"a\": 1}");
}

TEST_CASE("text without tool calls is returned as is") {
  CHECK(parse_tool_calls("  just an answer \n").content == "  just an answer \n");
  CHECK(parse_tool_calls("").calls.empty());
}

TEST_CASE("the streaming hold releases text before a tag and holds a tag split across pieces") {
  ToolCallHold hold;
  CHECK(hold.push("Hello <tool") == "Hello ");
  CHECK_FALSE(hold.holding());
  CHECK(hold.push("_call>\n{\"name\"") == "");
  CHECK(hold.holding());
  CHECK(hold.push(": \"f\"}</tool_call> trailing") == "");
  CHECK(hold.text().substr(hold.released()) == "<tool_call>\n{\"name\": \"f\"}</tool_call> trailing");
}

TEST_CASE("the streaming hold releases a '<' that turns out not to start a tag") {
  ToolCallHold hold;
  CHECK(hold.push("a <") == "a ");
  CHECK(hold.push("b") == "<b");
  CHECK(hold.push("<tool_x") == "<tool_x");
  CHECK_FALSE(hold.holding());
}

TEST_CASE("a call cut short (an unclosed block that does not parse) is never content; text before it stays (issue 39)") {
  const auto one = parse_tool_calls("Checking.\n<tool_call>\n{\"name\":");
  CHECK(one.calls.empty());
  CHECK(one.content == "Checking.");
  CHECK(one.unfinished);
  const auto after = parse_tool_calls("<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\":");
  REQUIRE(after.calls.size() == 1);
  CHECK(after.content.empty());
  CHECK(after.unfinished);
  // a closed malformed block is the model's text and stays visible, as before
  const auto closed = parse_tool_calls("<tool_call>\nnot json\n</tool_call>");
  CHECK(closed.content == "<tool_call>\nnot json\n</tool_call>");
  CHECK_FALSE(closed.unfinished);
}
