// The official openai npm client against a running kylin-server (KYLIN_SERVER_URL, e.g.
// http://127.0.0.1:8080/v1): a non-streaming and a streaming chat completion, greedy, must agree,
// with logprobs too (and the legacy completions' logprobs lists); json_schema and forced tool-call
// answers validate under ajv;
// models.list must name the served model; with KYLIN_EMBED_URL (a server with --task embed),
// embeddings.create in the client's default base64 and in float must agree. Exits non-zero on any mismatch.
import Ajv from "ajv";
import OpenAI from "openai";

const baseURL = process.env.KYLIN_SERVER_URL;
if (!baseURL) {
  console.error("set KYLIN_SERVER_URL");
  process.exit(2);
}
const client = new OpenAI({ baseURL, apiKey: process.env.KYLIN_API_KEY ?? "unused", maxRetries: 0, timeout: 60_000 });

function check(cond, what) {
  if (!cond) {
    console.error(`FAIL: ${what}`);
    process.exit(1);
  }
}

const models = await client.models.list();
check(models.data.length === 1 && typeof models.data[0].id === "string", "models.list returns the served model");
const model = models.data[0].id;

// KYLIN_NO_THINKING: a model that thinks by default (Qwen3.5's template opens <think>) answers without it here
const request = {
  model,
  messages: [
    { role: "system", content: "You are terse." },
    { role: "user", content: [{ type: "text", text: "Say hello" }] },
  ],
  max_tokens: 12,
  temperature: 0,
  seed: 7,
  ...(process.env.KYLIN_NO_THINKING ? { chat_template_kwargs: { enable_thinking: false } } : {}),
};

const full = await client.chat.completions.create(request);
check(full.object === "chat.completion", "object is chat.completion");
check(full.model === model, "model echoes the served id");
check(full.choices.length === 1 && full.choices[0].message.role === "assistant", "one assistant choice");
const text = full.choices[0].message.content;
check(typeof text === "string" && text.length > 0, "non-empty content");
check(["stop", "length"].includes(full.choices[0].finish_reason), "finish_reason stop or length");
check(full.usage.prompt_tokens > 0 && full.usage.completion_tokens > 0, "usage counts tokens");
check(full.usage.total_tokens === full.usage.prompt_tokens + full.usage.completion_tokens, "total = prompt + completion");

const stream = await client.chat.completions.create({ ...request, stream: true, stream_options: { include_usage: true } });
let streamed = "";
let finish = null;
let usage = null;
let chunks = 0;
for await (const chunk of stream) {
  check(chunk.object === "chat.completion.chunk", "chunk object is chat.completion.chunk");
  chunks++;
  if (chunk.usage) usage = chunk.usage;
  for (const choice of chunk.choices) {
    if (choice.delta?.content) streamed += choice.delta.content;
    if (choice.finish_reason) finish = choice.finish_reason;
  }
}
check(chunks >= 3, "role, content and finish chunks arrive");
check(streamed === text, `streamed text ${JSON.stringify(streamed)} equals non-streamed ${JSON.stringify(text)}`);
check(finish === full.choices[0].finish_reason, "same finish_reason streamed");
check(usage && usage.completion_tokens === full.usage.completion_tokens, "usage chunk matches");

// logprobs through the client, whole and streamed: OpenAI's shapes, one entry per generated token,
// the chunks' entries joined equal to the whole answer's (within 1e-4: the second request reuses
// the cached prompt, which rounds the logits slightly differently).
const lpRequest = { ...request, logprobs: true, top_logprobs: 3 };
const lpFull = await client.chat.completions.create(lpRequest);
const lpContent = lpFull.choices[0].logprobs?.content;
check(Array.isArray(lpContent) && lpContent.length === lpFull.usage.completion_tokens, "logprobs.content has one entry per token");
for (const t of lpContent) {
  check(typeof t.token === "string" && typeof t.logprob === "number" && t.logprob <= 0, "token and logprob <= 0");
  check(Array.isArray(t.bytes) && t.bytes.every((b) => Number.isInteger(b) && b >= 0 && b < 256), "bytes are byte values");
  check(t.top_logprobs.length === 3 && t.top_logprobs[0].logprob === t.logprob, "greedy: the chosen token is the top one");
}
const lpText = Buffer.from(lpContent.flatMap((t) => t.bytes)).toString("utf8");
check(lpText.endsWith(lpFull.choices[0].message.content), "the tokens' bytes spell the answer");
const lpStream = await client.chat.completions.create({ ...lpRequest, stream: true });
const lpStreamed = [];
for await (const chunk of lpStream)
  for (const choice of chunk.choices) if (choice.logprobs?.content) lpStreamed.push(...choice.logprobs.content);
check(lpStreamed.length === lpContent.length, "streamed chunks carry every token's logprobs");
check(lpStreamed.every((t, i) => t.token === lpContent[i].token && Math.abs(t.logprob - lpContent[i].logprob) < 1e-4),
      "streamed logprobs equal the whole answer's");
const legacy = await client.completions.create({ model, prompt: "Say hello", max_tokens: 4, temperature: 0, logprobs: 2 });
const lp = legacy.choices[0].logprobs;
check(lp.tokens.length === legacy.usage.completion_tokens && lp.token_logprobs.length === lp.tokens.length &&
      lp.top_logprobs.length === lp.tokens.length && lp.text_offset.length === lp.tokens.length, "completions logprobs lists");
check(lp.top_logprobs.every((top) => Object.keys(top).length === 2) && lp.text_offset[0] === 0, "2 alternatives, offsets from 0");

// Constrained answers, validated by ajv (an independent JSON-schema validator): a json_schema
// response_format and a forced tool call, sampled from the random-weight model.
const ajv = new Ajv({ strict: true });
const schema = {
  type: "object",
  properties: { city: { type: "string", maxLength: 12 }, rank: { type: "integer" }, tags: { type: "array", items: { enum: ["x", "y"] }, maxItems: 3 } },
  required: ["city", "rank"],
  additionalProperties: false,
};
const valid = ajv.compile(schema);
const noThink = { chat_template_kwargs: { enable_thinking: false } };
for (const seed of [1, 2]) {
  const r = await client.chat.completions.create({
    ...request, ...noThink, max_tokens: 300, temperature: 1, seed,
    response_format: { type: "json_schema", json_schema: { name: "city", strict: true, schema } },
  });
  const content = r.choices[0].message.content;
  check(r.choices[0].finish_reason === "stop", `json_schema answer ends (seed ${seed})`);
  check(valid(JSON.parse(content)), `json_schema answer validates under ajv (seed ${seed}): ${content} ${ajv.errorsText(valid.errors)}`);
}
const weather = { type: "object", properties: { city: { type: "string", maxLength: 10 }, unit: { enum: ["c", "f"] } }, required: ["city"], additionalProperties: false };
const validWeather = ajv.compile(weather);
const forced = await client.chat.completions.create({
  ...request, ...noThink, max_tokens: 300, temperature: 1, seed: 3,
  tools: [{ type: "function", function: { name: "get_weather", parameters: weather } }], tool_choice: "required",
});
const calls = forced.choices[0].message.tool_calls ?? [];
check(forced.choices[0].finish_reason === "tool_calls" && calls.length >= 1, "tool_choice required gives tool calls");
for (const c of calls)
  check(c.function.name === "get_weather" && validWeather(JSON.parse(c.function.arguments)), `call arguments validate: ${c.function.arguments}`);

let refusedParam = null;
try {
  await client.chat.completions.create({
    ...request,
    response_format: { type: "json_schema", json_schema: { name: "d", schema: { type: "string", pattern: "a(?=b)c" } } },  // lookahead: outside the pattern subset
  });
} catch (e) {
  refusedParam = e instanceof OpenAI.BadRequestError ? e.param : null;
}
check(refusedParam === "response_format.json_schema.schema", "a schema kylin cannot enforce is a BadRequestError naming it");
console.log("constrained answers ok");

let rejected = false;
try {
  await client.chat.completions.create({ ...request, messages: [{ role: "wizard", content: "x" }] });
} catch (e) {
  rejected = e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === "messages[0].role";
}
check(rejected, "a bad role is a BadRequestError naming messages[0].role");

if (process.env.KYLIN_EMBED_URL) {
  const embed = new OpenAI({ baseURL: process.env.KYLIN_EMBED_URL, apiKey: "unused", maxRetries: 0, timeout: 60_000 });
  const input = ["The capital of China is Beijing.", "Gravity is a force."];
  const b64 = await embed.embeddings.create({ model: "e2e-qwen3-embedding", input, dimensions: 16 });  // the client asks for base64
  const flt = await embed.embeddings.create({ model: "e2e-qwen3-embedding", input, dimensions: 16, encoding_format: "float" });
  check(b64.data.length === 2 && flt.data.length === 2, "one embedding per input");
  for (let i = 0; i < 2; i++) {
    const a = b64.data[i].embedding, b = flt.data[i].embedding;
    check(b64.data[i].index === i && a.length === 16 && b.length === 16, `embedding ${i}: index and 16 dimensions`);
    check(a.every((x, j) => x === Math.fround(b[j])), `embedding ${i}: base64 decodes to the float values`);
    check(Math.abs(a.reduce((s, x) => s + x * x, 0) - 1) < 1e-5, `embedding ${i}: unit length`);
  }
  check(b64.usage.prompt_tokens > 0 && b64.usage.total_tokens === b64.usage.prompt_tokens, "embeddings usage");
}

// KYLIN_IMAGE_FILE (a PNG; a model with a vision tower): an image_url data URL part, whole and streamed alike,
// its tokens counted in usage (more than the text alone).
if (process.env.KYLIN_IMAGE_FILE) {
  const { readFileSync } = await import("node:fs");
  const url = `data:image/png;base64,${readFileSync(process.env.KYLIN_IMAGE_FILE).toString("base64")}`;
  const imageRequest = {
    ...request,
    messages: [{ role: "user", content: [{ type: "image_url", image_url: { url, detail: "auto" } }, { type: "text", text: "Say hello" }] }],
  };
  const seen = await client.chat.completions.create(imageRequest);
  const answer = seen.choices[0].message.content;
  check(typeof answer === "string" && answer.length > 0, "an answer about the image");
  check(seen.usage.prompt_tokens > full.usage.prompt_tokens + 60, `the image's tokens are counted (${seen.usage.prompt_tokens})`);
  let streamedImage = "";
  for await (const chunk of await client.chat.completions.create({ ...imageRequest, stream: true }))
    for (const choice of chunk.choices) if (choice.delta?.content) streamedImage += choice.delta.content;
  check(streamedImage === answer, "the image answer streamed equals it whole");
  console.log(`image ok: ${seen.usage.prompt_tokens} prompt tokens`);
}

console.log(`ok: ${JSON.stringify(text)} (${chunks} chunks)`);
