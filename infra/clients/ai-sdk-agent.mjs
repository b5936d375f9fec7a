// ai-sdk-agent.mjs: an agent built with the Vercel AI SDK (`ai` and
// `@ai-sdk/mcp`, default settings) calling a tool through the gateway, for
// the dev stack's test. Needs Node >= 22 (the AI SDK's own requirement):
//
//   MCP_BEARER_KEY=<key> node22 infra/clients/ai-sdk-agent.mjs '<json>'
//
// <json> is {"url": "http://…/mcp", "tool": "…", "input": {…}}. The model is
// a scripted one (the SDK's own test model): its first step asks for the
// tool with the input, its second answers with text. Everything between
// is the SDK's: the MCP client (server/discover, tools/list, tools/call), the
// tool's schema, the call, and the result handed back to the model. The
// script prints one JSON object: {"tools": [...], "toolResults": [...],
// "secondPrompt": [...the messages the model got back...]}; a failure exits 1
// with the error on stderr.
import { generateText, stepCountIs } from 'ai';
import { MockLanguageModelV4 } from 'ai/test';
import { createMCPClient } from '@ai-sdk/mcp';

const { url, tool, input = {} } = JSON.parse(process.argv[2] ?? '{}');
if (!url || !tool) {
  console.error('usage: MCP_BEARER_KEY=<key> node ai-sdk-agent.mjs \'{"url": "…", "tool": "…", "input": {…}}\'');
  process.exit(2);
}

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};
const model = new MockLanguageModelV4({
  doGenerate: [
    {
      content: [{ type: 'tool-call', toolCallId: 'call-1', toolName: tool, input: JSON.stringify(input) }],
      finishReason: { unified: 'tool-calls', raw: 'tool_calls' },
      usage,
      warnings: [],
    },
    {
      content: [{ type: 'text', text: 'done' }],
      finishReason: { unified: 'stop', raw: 'stop' },
      usage,
      warnings: [],
    },
  ],
});

let mcp;
try {
  mcp = await createMCPClient({
    transport: { type: 'http', url, headers: { Authorization: `Bearer ${process.env.MCP_BEARER_KEY}` } },
  });
  const tools = await mcp.tools();
  const result = await generateText({ model, tools, stopWhen: stepCountIs(2), prompt: `call ${tool}` });
  console.log(JSON.stringify({
    tools: Object.keys(tools),
    toolResults: result.steps.flatMap((s) => s.toolResults),
    secondPrompt: model.doGenerateCalls[1]?.prompt ?? null,
  }));
} catch (err) {
  console.error(err?.stack ?? String(err));
  process.exitCode = 1;
} finally {
  await mcp?.close();
}
