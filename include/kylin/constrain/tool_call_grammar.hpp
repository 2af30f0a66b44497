// Grammars of Qwen3's (Hermes-style) tool calls, `<tool_call>\n{"name": "N", "arguments": ARGS}\n</tool_call>`
// blocks separated by "\n" as the chat template writes them, N one of the offered tools and ARGS
// a sentence of that tool's argument grammar; and the union of two grammars (calls or an answer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kylin/constrain/grammar.hpp"
#include "kylin/core/json.hpp"

namespace kylin::constrain {

// One callable tool: its name and the grammar of its arguments (for instance
// json_schema_grammar of its parameters schema, or json_object_grammar when it has none).
struct ToolGrammar {
  std::string name;
  Grammar arguments;
};

// "No upper bound" on a number of tool calls: the one spelling of it, here and in kylin-server.
inline constexpr std::size_t any_number_of_calls = SIZE_MAX;

// How many calls the answer holds: at least `min`, at most `max`.
struct ToolCallCount {
  std::size_t min = 1;
  std::size_t max = any_number_of_calls;
};

// The answer is `count` tool calls and nothing else (OpenAI's tool_choice "required" or a named
// function, Anthropic's "any" or "tool"). The tags are bytes here: build the TokenTrie with
// <tool_call> and </tool_call> as text so the model can write them as its single tokens.
inline Grammar tool_calls_grammar(std::span<const ToolGrammar> tools, ToolCallCount count = {}, GrammarLimits limits = {}) {
  if (tools.empty()) throw detail::grammar_error("tool calls", "no tool to call");
  if (count.min == 0 || count.max < count.min)
    throw detail::grammar_error("tool calls", "the call count must be at least 1 and max at least min");
  detail::GrammarBuilder b(limits);
  const int call = b.new_rule("tool-call");
  for (const ToolGrammar& t : tools) {
    // The template writes the name raw between quotes; JSON escaping keeps odd names valid JSON.
    std::vector<Element> seq = detail::literal("<tool_call>\n{\"name\": " + json::dump(json::Value(t.name)) + ", \"arguments\": ");
    seq.push_back(Element::ref(b.include(t.arguments)));
    const std::vector<Element> close = detail::literal("}\n</tool_call>");
    seq.insert(seq.end(), close.begin(), close.end());
    b.add_alt(call, seq);
  }
  const long long max = count.max == any_number_of_calls ? -1 : static_cast<long long>(count.max);
  return b.finish(b.repeat("tool-calls", {Element::ref(call)}, detail::literal("\n"), count.min, max));
}

// root ::= a | b: a sentence of either grammar.
inline Grammar either(const Grammar& a, const Grammar& b, GrammarLimits limits = {}) {
  detail::GrammarBuilder builder(limits);
  const int root = builder.new_rule("either");
  builder.add_alt(root, {Element::ref(builder.include(a))});
  builder.add_alt(root, {Element::ref(builder.include(b))});
  return builder.finish(root);
}

}  // namespace kylin::constrain
