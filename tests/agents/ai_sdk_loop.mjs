// The Vercel AI SDK's two-round tool loop, run by test_ai_sdk.py: `generateText` or
// `streamText` with one tool and `stopWhen: stepCountIs(3)`, on `createOpenAI({baseURL})
// .chat(model)` (Chat Completions), `createOpenAI({baseURL})(model)` (its default, the
// Responses API: provider "openai-responses") or `createAnthropic({baseURL})(model)`
// (Messages).
//
//     AI_SDK_DIR=…/ai-sdk node tests/agents/ai_sdk_loop.mjs '{"provider": …}'
//
// The one argument is JSON: provider ("openai" or "anthropic"), mode ("generate" or
// "stream"), baseURL, apiKey, model, system, prompt, the tool's name, description and
// JSON schema, and optionally toolResult, the text the tool answers (else the short
// result of recording.tool_result). The packages are installed (pinned, by
// scripts/test.sh) in AI_SDK_DIR, outside the repository, and loaded from there. Prints
// {"text", "steps"} as JSON.

import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const spec = JSON.parse(process.argv[2]);
const from = createRequire(join(process.env.AI_SDK_DIR, "package.json"));
const load = (name) => import(pathToFileURL(from.resolve(name)).href);
const { generateText, streamText, tool, jsonSchema, stepCountIs } = await load("ai");

let model;
if (spec.provider === "openai") {
  const { createOpenAI } = await load("@ai-sdk/openai");
  model = createOpenAI({ baseURL: spec.baseURL, apiKey: spec.apiKey }).chat(spec.model);
} else if (spec.provider === "openai-responses") {
  const { createOpenAI } = await load("@ai-sdk/openai");
  model = createOpenAI({ baseURL: spec.baseURL, apiKey: spec.apiKey })(spec.model);
} else {
  const { createAnthropic } = await load("@ai-sdk/anthropic");
  model = createAnthropic({ baseURL: spec.baseURL, apiKey: spec.apiKey })(spec.model);
}

const tools = {
  [spec.toolName]: tool({
    description: spec.toolDescription,
    inputSchema: jsonSchema(spec.toolSchema),
    // The same result as recording.tool_result in Python, or the one given.
    execute: async ({ ort, hinweis }) =>
      spec.toolResult ?? `Störung in ${ort} behoben; Notiz «${hinweis}» gespeichert.`,
  }),
};
const call = {
  model, tools, system: spec.system, prompt: spec.prompt, stopWhen: stepCountIs(3), maxRetries: 0,
};

let text, steps;
if (spec.mode === "generate") {
  const result = await generateText(call);
  text = result.text;
  steps = result.steps.length;
} else {
  let failure;
  const result = streamText({ ...call, onError: ({ error }) => { failure = error; } });
  for await (const _ of result.fullStream) {
    // every part read, as a UI would
  }
  if (failure) throw failure;
  text = await result.text;
  steps = (await result.steps).length;
}
process.stdout.write(JSON.stringify({ text, steps }));
