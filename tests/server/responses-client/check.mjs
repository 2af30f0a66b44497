// The Responses API clients agent builders use, against a running kylin-server (KYLIN_SERVER_URL,
// e.g. http://127.0.0.1:8080/v1), on a random-weight model: tool_choice and text.format constrain
// it so that it still makes valid calls and JSON.
// - openai: responses.create and responses.stream agree (greedy); a forced function call, its output
//   fed back with previous_response_id; text.format json_schema valid under ajv; retrieve, delete.
// - @openai/agents: an agent whose tool is called (forced on the first turn) and whose result is fed
//   back until the agent's final answer.
// - @ai-sdk/openai (the Responses API model): generateText and streamText with a tool, called on the
//   first step and its result fed back on the second.
// Exits non-zero on any mismatch.
import { createOpenAI } from "@ai-sdk/openai";
import { Agent, OpenAIResponsesModel, run, setTracingDisabled, tool as agentTool } from "@openai/agents";
import { generateText, stepCountIs, streamText, tool } from "ai";
import Ajv from "ajv";
import OpenAI from "openai";
import { z } from "zod";

const baseURL = process.env.KYLIN_SERVER_URL;
if (!baseURL) {
  console.error("set KYLIN_SERVER_URL");
  process.exit(2);
}
const apiKey = "unused";
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120_000 });

function check(cond, what) {
  if (!cond) {
    console.error(`FAIL: ${what}`);
    process.exit(1);
  }
  console.log(`ok: ${what}`);
}

const model = (await client.models.list()).data[0].id;
const noThink = { reasoning: { effort: "none" } };
const cities = ["Paris", "London"];
const weatherParams = {
  type: "object",
  properties: { city: { type: "string", enum: cities } },
  required: ["city"],
  additionalProperties: false,
};

// --- openai: responses.create / responses.stream
const ask = { model, input: "Say hello", max_output_tokens: 10, temperature: 0, ...noThink };
const whole = await client.responses.create(ask);
check(whole.object === "response" && whole.id.startsWith("resp_"), "responses.create returns a response object");
check(whole.usage.output_tokens === 10 && whole.status === "incomplete", "max_output_tokens cuts the response: incomplete");
const stream = client.responses.stream(ask);
let deltas = "";
const types = new Set();
for await (const event of stream) {
  types.add(event.type);
  if (event.type === "response.output_text.delta") deltas += event.delta;
}
const streamed = await stream.finalResponse();
check(deltas === whole.output_text && streamed.output_text === whole.output_text, "responses.stream's text equals responses.create's (greedy)");
check(["response.created", "response.output_item.added", "response.output_text.done"].every((t) => types.has(t)), "typed stream events");

const tools = [{ type: "function", name: "get_weather", description: "Weather in a city", parameters: weatherParams, strict: true }];
const called = await client.responses.create({
  model,
  input: "What is the weather in Paris?",
  tools,
  tool_choice: { type: "function", name: "get_weather" },
  max_output_tokens: 60,
  ...noThink,
});
const call = called.output.find((item) => item.type === "function_call");
check(call && call.name === "get_weather" && cities.includes(JSON.parse(call.arguments).city), "forced function call with valid arguments");
// the follow-up sends the tools again, as agent clients do: its prompt then shares the first one's up to the
// assistant's turn (a hybrid model resumes there, from the state kept before that turn)
const followUp = await client.responses.create({
  model,
  previous_response_id: called.id,
  input: [{ type: "function_call_output", call_id: call.call_id, output: JSON.stringify({ weather: "sunny" }) }],
  tools,
  max_output_tokens: 8,
  ...noThink,
});
check(followUp.output.some((item) => item.type === "message"), "the call's output fed back with previous_response_id is answered");
check(followUp.usage.input_tokens_details.cached_tokens > 0, "the continued conversation reuses the stored prefix");

const schema = { type: "object", properties: { adult: { type: "boolean" } }, required: ["adult"], additionalProperties: false };
const json = await client.responses.create({
  model,
  input: "A person",
  text: { format: { type: "json_schema", name: "person", schema, strict: true } },
  max_output_tokens: 60,
  ...noThink,
});
const validate = new Ajv().compile(schema);
check(validate(JSON.parse(json.output_text)), "text.format json_schema output validates under ajv");
check((await client.responses.retrieve(json.id)).output_text === json.output_text, "responses.retrieve returns the stored response");
await client.responses.delete(json.id);
let gone = false;
try {
  await client.responses.retrieve(json.id);
} catch (e) {
  gone = e.status === 404;
}
check(gone, "a deleted response is gone (404)");

// --- @openai/agents: the tool is called on the first turn and its result fed back
setTracingDisabled(true);
const toolCalls = [];
const getWeather = agentTool({
  name: "get_weather",
  description: "Weather in a city",
  parameters: z.object({ city: z.enum(cities) }),
  execute: async ({ city }) => {
    toolCalls.push(city);
    return `sunny in ${city}`;
  },
});
const agent = new Agent({
  name: "weather",
  instructions: "Answer weather questions with the tool.",
  model: new OpenAIResponsesModel(client, model),
  tools: [getWeather],
  modelSettings: { toolChoice: "get_weather", maxTokens: 60, reasoning: { effort: "none" } },
  resetToolChoice: true,
});
const result = await run(agent, "What is the weather in London?", { maxTurns: 4 });
check(toolCalls.length === 1 && cities.includes(toolCalls[0]), "@openai/agents: the tool was called once with valid input");
check(result.newItems.some((i) => i.type === "tool_call_output_item"), "@openai/agents: the tool's result went back to the model");
check(typeof result.finalOutput === "string", "@openai/agents: the agent finished with a final answer");

// --- @ai-sdk/openai: generateText / streamText with a tool, called then fed back
const openai = createOpenAI({ baseURL, apiKey });
const sdkCalls = [];
const weatherTool = tool({
  description: "Weather in a city",
  inputSchema: z.object({ city: z.enum(cities) }),
  execute: async ({ city }) => {
    sdkCalls.push(city);
    return { weather: "sunny", city };
  },
});
const sdkRequest = {
  model: openai(model),
  prompt: "What is the weather in Paris?",
  tools: { get_weather: weatherTool },
  toolChoice: { type: "tool", toolName: "get_weather" },
  prepareStep: async ({ stepNumber }) => (stepNumber > 0 ? { toolChoice: "none" } : undefined),
  stopWhen: stepCountIs(2),
  maxOutputTokens: 60,
  maxRetries: 0,
  // kylin maps reasoning effort none to Qwen3's thinking off; the SDK sends `reasoning` only to
  // a model it treats as a reasoning model
  providerOptions: { openai: { forceReasoning: true, reasoningEffort: "none", parallelToolCalls: false } },
};
const generated = await generateText(sdkRequest);
check(generated.steps.length === 2 && generated.steps[0].toolCalls.length === 1, "@ai-sdk/openai generateText: a tool call on step 1");
check(generated.steps[0].toolResults[0].output.weather === "sunny", "@ai-sdk/openai generateText: the tool ran");
check(typeof generated.text === "string" && generated.steps[1].finishReason !== "error", "@ai-sdk/openai generateText: step 2 answered");
const streamedText = streamText(sdkRequest);
let streamedCalls = 0;
for await (const part of streamedText.fullStream) {
  if (part.type === "tool-call") streamedCalls += 1;
  if (part.type === "error") check(false, `@ai-sdk/openai streamText: ${part.error}`);
}
check(streamedCalls === 1 && (await streamedText.steps).length === 2, "@ai-sdk/openai streamText: a tool call, then an answer");
check(sdkCalls.length === 2 && sdkCalls.every((c) => cities.includes(c)), "@ai-sdk/openai: valid tool inputs");
console.log("responses clients check passed");
