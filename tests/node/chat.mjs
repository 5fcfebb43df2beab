// The official `openai` Node SDK as a client of shrink-proxy; tests/test_node_sdk.py runs it.
//
//   node tests/node/chat.mjs PROXY_URL [openai|azure|error]
//
// Prints one JSON object with what the SDK saw, so the Python test can check it together with
// what the fake upstream recorded. Exits non-zero (message on stderr) if the SDK throws
// unexpectedly: a proxy that breaks a real client must fail the test.
import OpenAI, { AzureOpenAI } from "openai";

const [base, mode = "openai"] = process.argv.slice(2);
if (!base) {
  console.error("usage: node chat.mjs PROXY_URL [openai|azure|error]");
  process.exit(2);
}
const messages = [{ role: "user", content: "Say hello" }];
const common = { maxRetries: 0, timeout: 20_000 };

async function chat(client, model) {
  const { data, response } = await client.chat.completions
    .create({ model, messages })
    .withResponse();
  const stream = await client.chat.completions.create({ model, messages, stream: true });
  let text = "";
  let chunks = 0;
  let finishReason = null;
  for await (const chunk of stream) {
    chunks += 1;
    const choice = chunk.choices[0];
    text += choice?.delta?.content ?? "";
    finishReason = choice?.finish_reason ?? finishReason;
  }
  return {
    nonStream: {
      id: data.id,
      content: data.choices[0].message.content,
      finishReason: data.choices[0].finish_reason,
      requestId: response.headers.get("x-request-id"),
      tokensBefore: response.headers.get("x-shrink-tokens-before"),
    },
    stream: { text, chunks, finishReason },
  };
}

async function main() {
  if (mode === "openai") {
    const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "sk-node-dummy", ...common });
    return chat(client, "fake-model");
  }
  if (mode === "azure") {
    const client = new AzureOpenAI({
      endpoint: base,
      apiKey: "azure-node-dummy",
      apiVersion: "2024-10-21",
      deployment: "node-deployment",
      ...common,
    });
    return chat(client, "node-deployment");
  }
  if (mode === "error") {
    const client = new OpenAI({
      baseURL: `${base}/v1`,
      apiKey: "sk-node-dummy",
      defaultHeaders: { "x-fake-status": "429" },
      ...common,
    });
    try {
      await client.chat.completions.create({ model: "fake-model", messages });
    } catch (err) {
      return {
        error: {
          class: err.constructor.name,
          status: err.status ?? null,
          code: err.code ?? null,
          type: err.type ?? null,
        },
      };
    }
    throw new Error("the SDK did not throw for an upstream 429");
  }
  throw new Error(`unknown mode ${mode}`);
}

try {
  console.log(JSON.stringify(await main()));
} catch (err) {
  console.error(`chat.mjs: ${err?.constructor?.name}: ${err?.message}`);
  process.exit(1);
}
