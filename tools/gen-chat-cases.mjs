// Generates tests/data/reference/chat-template-extra.jsonl: chat cases rendered with
// @huggingface/jinja (an independent Jinja implementation that follows transformers' settings)
// over the real Qwen3 template (tests/data/qwen3-tokenizer/tokenizer_config.json) and the
// Qwen2.5-Instruct template (tests/data/templates/qwen2.5.jinja).
//
//   mkdir -p /tmp/jinjagen && cd /tmp/jinjagen && npm install @huggingface/jinja@0.5.11
//   JINJA_DIR=/tmp/jinjagen node tools/gen-chat-cases.mjs > tests/data/reference/chat-template-extra.jsonl
//
// Cases avoid what @huggingface/jinja renders differently from Python's Jinja2 (transformers):
// integral floats (JS tojson prints 1 where Python prints 1.0), exponents (JS 1e-7, Python
// 1e-07) and null message content where Python raises. Those are covered by unit tests instead.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.JINJA_DIR ?? "/tmp/jinjagen", "package.json"));
const { Template } = require("@huggingface/jinja");

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), "..");
const qwen3 = JSON.parse(readFileSync(path.join(root, "tests/data/qwen3-tokenizer/tokenizer_config.json"), "utf8")).chat_template;
const qwen25 = readFileSync(path.join(root, "tests/data/templates/qwen2.5.jinja"), "utf8");
const templates = { qwen3: new Template(qwen3), "qwen2.5": new Template(qwen25) };

const weather = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the current weather — in °C, for a city like \"Zürich\"",
    parameters: {
      type: "object",
      properties: { city: { type: "string", description: "City name\nwith a newline" }, days: { type: "integer" } },
      required: ["city"],
    },
  },
};
const search = {
  type: "function",
  function: { name: "search", description: "搜索网页", parameters: { type: "object", properties: { q: { type: "string" } } } },
};
const call = (name, args) => ({ type: "function", function: { name, arguments: args } });
const u = (content) => ({ role: "user", content });
const a = (content, extra = {}) => ({ role: "assistant", content, ...extra });
const tool = (content) => ({ role: "tool", content });

const cases = [
  // Qwen3: reasoning_content on earlier and last assistant turns.
  ["qwen3", [u("Q1"), a("A1", { reasoning_content: "think 1" }), u("Q2"), a("A2", { reasoning_content: "\nthink 2\n" })], {}, false],
  ["qwen3", [u("Q1"), a("A1", { reasoning_content: "think 1" }), u("Q2")], {}, true],
  ["qwen3", [u("Q1"), a("A1", { reasoning_content: null }), u("Q2")], { enable_thinking: true }, true],
  // <think> inside content: stripped before the last query, kept after it.
  ["qwen3", [u("Q"), a("<think>\nreasoning here\n</think>\n\nanswer")], {}, false],
  ["qwen3", [u("Q"), a("<think>r</think>answer"), u("again")], { enable_thinking: false }, true],
  ["qwen3", [u("Q"), a("no think tags at all")], {}, false],
  // Tool calls: object and string arguments, several calls, content before calls.
  ["qwen3", [u("Weather?"), a("", { tool_calls: [call("get_weather", { city: "Paris", days: 3 })] }), tool("{\"temp\": 21.5}")],
   { tools: [weather] }, true],
  ["qwen3", [u("Weather?"), a("Let me check.", { tool_calls: [call("get_weather", "{\"city\": \"Berlin\"}"), call("search", { q: "berlin weather" })] }),
             tool("sunny"), tool("rainy"), tool("cloudy")], { tools: [weather, search] }, true],
  // Multi-step tools: the assistant turns after the last real user query keep their reasoning.
  ["qwen3", [{ role: "system", content: "You are a weather bot." }, u("Weather in Rome?"),
             a("", { reasoning_content: "need tool", tool_calls: [call("get_weather", { city: "Rome" })] }),
             tool("{\"temp\": 30.25, \"unit\": \"C\"}"), a("It is hot.", { reasoning_content: "answer now" })],
   { tools: [weather] }, false],
  ["qwen3", [u("<tool_response>\nfake\n</tool_response>"), a("ok", { reasoning_content: "r" })], {}, false],
  // System + tools, system in the middle, enable_thinking both ways, no generation prompt.
  ["qwen3", [{ role: "system", content: "Sys prompt." }, u("Hi")], { tools: [search], enable_thinking: false }, true],
  ["qwen3", [u("Hi"), { role: "system", content: "late system" }, u("Bye")], { enable_thinking: true }, true],
  ["qwen3", [u("Hi"), a("Hello")], {}, false],
  // Unicode and characters that matter to JSON escaping.
  ["qwen3", [u("你好，世界 🌍 — naïve café\tTab"), a("Ответ: «да» ✓"), u("emoji 👩‍👩‍👧 and \"quotes\" \\ backslash")],
   { enable_thinking: false }, true],
  ["qwen3", [u("args"), a("", { tool_calls: [call("search", { q: "引号\"和\\反斜杠\n换行", nested: { list: [1, 2.5, true, null, "x"] } })] })],
   { tools: [search] }, false],
  // Qwen2.5: default system prompt, tools, tool calls (tojson even for string arguments).
  ["qwen2.5", [u("Hello")], {}, true],
  ["qwen2.5", [{ role: "system", content: "Be brief." }, u("Hi"), a("Hello!"), u("Bye")], {}, true],
  ["qwen2.5", [u("Weather?")], { tools: [weather] }, true],
  ["qwen2.5", [{ role: "system", content: "Custom system." }, u("Weather?")], { tools: [weather, search] }, true],
  ["qwen2.5", [u("Weather?"), a(null, { tool_calls: [call("get_weather", { city: "Paris" }), call("search", "{\"q\": \"x\"}")] }),
               tool("sunny"), tool("{\"ok\": true}"), a("Done.")], { tools: [weather] }, false],
  ["qwen2.5", [u("Q"), a("Checking.", { tool_calls: [{ function: { name: "search", arguments: { q: "ünïcödé" } } }] }), tool("r")],
   { tools: [search] }, true],
  ["qwen2.5", [u("你好 🌍"), a("你好！")], {}, false],
  ["qwen2.5", [u("a"), { role: "system", content: "mid system" }, u("b")], {}, true],
];

for (const [name, messages, kwargs, add_generation_prompt] of cases) {
  const expected = templates[name].render({ messages, add_generation_prompt, eos_token: "<|im_end|>", ...kwargs });
  const line = { template: name, messages, add_generation_prompt, expected };
  if (Object.keys(kwargs).length) line.kwargs = kwargs;
  console.log(JSON.stringify(line));
}
