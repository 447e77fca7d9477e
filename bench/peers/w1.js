// Workload W1, as the peers run it: one Run = model turn, tool call, model turn, tool call, model
// turn, answered by the scripted model's research policy for "What does DIA hold?". The model
// requests are the ones Runplane's runtime sends (same system prompt, tools from the same
// contract, streamed through the `openai` client with retries off); the tools are the same
// functions Runplane's tools service runs (@runplane/holdings on the same data folder).
import OpenAI from 'openai';
import { ToolPack } from '@runplane/contracts';
import { HoldingsLibrary, executeTool, resolveDataFolder } from '@runplane/holdings';
// the runtime's own system prompt and tool definitions, so the peers send exactly its requests
import { SYSTEM_PROMPT, toolDefinitions as runtimeToolDefinitions } from '@runplane/app-runtime';

/** Function-tool definitions for every tool of the pack, built by the runtime's own function. */
const toolDefinitions = () => runtimeToolDefinitions(Object.keys(ToolPack));

/**
 * The W1 building blocks bound to one model endpoint and data folder.
 * @param {{ modelUrl: string, model?: string }} opts
 */
export function createW1(opts) {
  const client = new OpenAI({ baseURL: opts.modelUrl, apiKey: 'runplane-scripted', maxRetries: 0, timeout: 120_000 });
  const library = new HoldingsLibrary(resolveDataFolder(process.env));
  const tools = toolDefinitions();
  const model = opts.model ?? 'runplane-scripted-research';

  /** One streamed chat completion; returns what a durable step records. Throws on HTTP errors. */
  async function modelTurn(messages) {
    const stream = await client.chat.completions.create({ model, messages, tools, stream: true, stream_options: { include_usage: true } });
    let content = '';
    let finishReason = '';
    const calls = new Map();
    for await (const chunk of stream) {
      for (const choice of chunk.choices) {
        const d = choice.delta;
        if (d?.content) content += d.content;
        for (const tc of d?.tool_calls ?? []) {
          const slot = calls.get(tc.index) ?? { id: '', name: '', arguments: '' };
          if (tc.id) slot.id = tc.id;
          if (tc.function?.name) slot.name += tc.function.name;
          if (tc.function?.arguments) slot.arguments += tc.function.arguments;
          calls.set(tc.index, slot);
        }
        if (choice.finish_reason) finishReason = choice.finish_reason;
      }
    }
    return { content, finishReason, toolCalls: [...calls.entries()].sort(([a], [b]) => a - b).map(([, c]) => c) };
  }

  /** Runs one tool call; a tool failure is a result (as Runplane's receipts record it), not an exception. */
  async function runTool(name, argumentsText) {
    try {
      return { status: 'succeeded', result: await executeTool(library, name, JSON.parse(argumentsText || '{}')) };
    } catch (e) {
      return { status: 'failed', error: { code: e?.code ?? 'error', message: String(e?.message ?? e) } };
    }
  }

  return { modelTurn, runTool };
}

/**
 * One W1 Run: model turns and tool calls, each wrapped in the peer's durable `step(name, fn)`.
 * @returns {{ turns: number, toolCalls: number, answer: string }}
 */
export async function runW1(w1, question, step) {
  const messages = [
    { role: 'system', content: SYSTEM_PROMPT },
    { role: 'user', content: question },
  ];
  let toolCalls = 0;
  for (let turn = 1; turn <= 8; turn++) {
    const reply = await step(`model-${turn}`, () => w1.modelTurn(messages));
    if (reply.toolCalls.length === 0) return { turns: turn, toolCalls, answer: reply.content };
    messages.push({
      role: 'assistant',
      content: reply.content === '' ? null : reply.content,
      tool_calls: reply.toolCalls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } })),
    });
    for (const c of reply.toolCalls) {
      const out = await step(`tool-${turn}-${c.name}-${c.id}`, () => w1.runTool(c.name, c.arguments));
      toolCalls++;
      messages.push({ role: 'tool', tool_call_id: c.id, content: JSON.stringify(out) });
    }
  }
  throw new Error('W1: no answer after 8 model turns');
}
