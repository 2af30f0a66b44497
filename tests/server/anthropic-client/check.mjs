// The official @anthropic-ai/sdk client against kylin-server's /v1/messages (random-weight
// checkpoint: shapes and consistency are checked, not meaning). Each check states its property.
import Anthropic from "@anthropic-ai/sdk";
import assert from "node:assert/strict";

const client = new Anthropic({ baseURL: process.env.KYLIN_SERVER_URL, apiKey: "unused", maxRetries: 0 });
const model = process.env.KYLIN_MODEL_NAME ?? "e2e-qwen3";  // the served model (the directory name)
const greedy = { model, max_tokens: 24, temperature: 0, messages: [{ role: "user", content: "Say hello." }] };

// A non-streamed message has Anthropic's shape, and output_tokens is what max_tokens allowed.
const message = await client.messages.create(greedy);
assert.equal(message.type, "message");
assert.equal(message.role, "assistant");
assert.match(message.id, /^msg_/);
assert.equal(message.model, model);
assert.ok(["end_turn", "max_tokens"].includes(message.stop_reason), message.stop_reason);
assert.equal(message.content[0].type, "text");
assert.ok(message.usage.input_tokens > 0);
assert.ok(message.usage.output_tokens > 0 && message.usage.output_tokens <= 24);
if (message.stop_reason === "max_tokens") assert.equal(message.usage.output_tokens, 24);
console.log("non-streamed message ok");

// count_tokens counts the prompt the message was generated from: input_tokens (computed) plus the
// prompt caching counts (read from the KV prefix, created), as Anthropic splits them.
const promptOf = (u) => u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens;
const counted = await client.messages.countTokens({ model, messages: greedy.messages });
assert.equal(counted.input_tokens, promptOf(message.usage));
console.log("count_tokens ok");

// A streamed greedy message: the SDK's stream helper accumulates the events into the same message.
const stream = client.messages.stream(greedy);
const names = [];
let deltas = "";
stream.on("streamEvent", (event) => {
  names.push(event.type);
  if (event.type === "content_block_delta" && event.delta.type === "text_delta") deltas += event.delta.text;
});
const final = await stream.finalMessage();
assert.equal(names[0], "message_start");
assert.equal(names.at(-1), "message_stop");
assert.equal(names.at(-2), "message_delta");
assert.equal(final.content[0].type, "text");
assert.equal(final.content[0].text, message.content[0].text, "streamed text equals the non-streamed text");
assert.equal(deltas, final.content[0].text);
assert.equal(final.stop_reason, message.stop_reason);
assert.equal(final.usage.output_tokens, message.usage.output_tokens);
console.log("streamed message ok");

// A tool round trip: tools are accepted, a tool_use / tool_result history is rendered and answered.
const tools = [{
  name: "get_weather",
  description: "Current weather in a city",
  input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
}];
const first = await client.messages.create({ ...greedy, tools, tool_choice: { type: "auto" } });
assert.ok(["end_turn", "max_tokens", "tool_use"].includes(first.stop_reason));
for (const block of first.content) assert.ok(["text", "tool_use"].includes(block.type), block.type);
const history = [
  { role: "user", content: "What is the weather in Paris?" },
  { role: "assistant", content: [
    { type: "text", text: "Let me look." },
    { type: "tool_use", id: "toolu_01", name: "get_weather", input: { city: "Paris" } },
  ] },
  { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_01", content: "sunny, 21 C" }] },
];
const second = await client.messages.create({ ...greedy, tools, messages: history });
assert.equal(second.type, "message");
// the tool result is in the prompt: it costs more tokens than the same history without it
const without = await client.messages.countTokens({ model, tools, messages: history.slice(0, 1) });
const withResult = await client.messages.countTokens({ model, tools, messages: history });
assert.ok(withResult.input_tokens > without.input_tokens + 5);
assert.equal(withResult.input_tokens, promptOf(second.usage));
console.log("tool round trip ok");

// tool_choice any forces a call: a tool_use block whose input has the schema's required city
// (its length bounded: one call, the city at most 10 characters and no other property, so the
// unseeded random-weight answer ends well within max_tokens whatever it samples).
const bounded = [{ ...tools[0], input_schema: { ...tools[0].input_schema, properties: { city: { type: "string", maxLength: 10 } }, additionalProperties: false } }];
const forced = await client.messages.create({ ...greedy, max_tokens: 200, temperature: 1, tools: bounded,
                                              tool_choice: { type: "any", disable_parallel_tool_use: true } });
assert.equal(forced.stop_reason, "tool_use");
const use = forced.content.find((b) => b.type === "tool_use");
assert.ok(use, "a tool_use block");
assert.equal(use.name, "get_weather");
assert.equal(typeof use.input.city, "string");
console.log("forced tool use ok");

// Refused requests come back as the SDK's typed errors with Anthropic's error body.
await assert.rejects(client.messages.create({ ...greedy, tools, tool_choice: { type: "tool", name: "get_time" } }), (e) => {
  assert.ok(e instanceof Anthropic.BadRequestError);
  assert.equal(e.error.type, "error");
  assert.equal(e.error.error.type, "invalid_request_error");
  assert.match(e.error.error.message, /tool_choice/);
  return true;
});
await assert.rejects(client.messages.create({ ...greedy, model: "claude-nope" }), Anthropic.NotFoundError);
console.log("errors ok");
// KYLIN_IMAGE_FILE (a PNG; a model with a vision tower): a base64 image block is answered, and count_tokens
// counts its tokens as the message's usage does.
if (process.env.KYLIN_IMAGE_FILE) {
  const { readFileSync } = await import("node:fs");
  const data = readFileSync(process.env.KYLIN_IMAGE_FILE).toString("base64");
  const messages = [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data } }, { type: "text", text: "Say hello." }] }];
  const seen = await client.messages.create({ ...greedy, messages });
  assert.equal(seen.content[0].type, "text");
  assert.ok(promptOf(seen.usage) > promptOf(message.usage) + 60, `the image's tokens are counted (${promptOf(seen.usage)})`);
  const imageCount = await client.messages.countTokens({ model, messages });
  assert.equal(imageCount.input_tokens, promptOf(seen.usage));
  console.log("image ok");
}
console.log("anthropic client check passed");
