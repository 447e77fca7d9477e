import { afterAll, beforeAll, expect, it } from '@jest/globals';
import { ToolPack } from '@runplane/contracts';
import { executeTool, HoldingsLibrary, ToolFailure } from '@runplane/holdings';
import OpenAI from 'openai';
import type { ChatCompletionMessageParam, ChatCompletionTool } from 'openai/resources/chat/completions';
import { describeWithSharedData } from '../../../test/support/shared-data.js';
import { startScriptedModel, type ScriptedModel } from '../src/index.js';

/**
 * The demo path: the `openai` client streams from the scripted model (no scenario = research
 * policy), tool calls are reassembled from deltas and executed on the real files, results go back
 * as ToolMessageContent JSON, until the model stops.
 */
describeWithSharedData('research policy end to end over streaming HTTP', (dir) => {
  let model: ScriptedModel;
  let client: OpenAI;
  const library = new HoldingsLibrary({ dir, dataSet: 'shared' });
  const tools: ChatCompletionTool[] = Object.entries(ToolPack).map(([name, spec]) => ({
    type: 'function',
    function: { name, description: spec.description, parameters: { type: 'object', properties: {} } },
  }));

  beforeAll(async () => {
    model = await startScriptedModel({ policy: 'research' });
    client = new OpenAI({ baseURL: model.url, apiKey: 'test', maxRetries: 0, timeout: 10_000 });
  });
  afterAll(async () => {
    await model.close();
  });

  async function turn(messages: ChatCompletionMessageParam[]) {
    const stream = await client.chat.completions.create({
      model: 'scripted-research',
      messages,
      tools,
      stream: true,
      stream_options: { include_usage: true },
    });
    let content = '';
    let contentChunks = 0;
    let finish: string | null = null;
    let usage: unknown = null;
    const calls: Array<{ id: string; name: string; arguments: string }> = [];
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      const choice = chunk.choices[0];
      if (!choice) continue;
      if (choice.delta.content) {
        content += choice.delta.content;
        contentChunks++;
      }
      for (const d of choice.delta.tool_calls ?? []) {
        const c = (calls[d.index] ??= { id: '', name: '', arguments: '' });
        c.id ||= d.id ?? '';
        c.name ||= d.function?.name ?? '';
        c.arguments += d.function?.arguments ?? '';
      }
      finish = choice.finish_reason ?? finish;
    }
    return { content, contentChunks, finish, usage, calls };
  }

  it('answers the default question in three model turns with the figures from the files', async () => {
    const messages: ChatCompletionMessageParam[] = [
      { role: 'system', content: 'Answer from the tools.' },
      { role: 'user', content: 'Compare the holdings of SPY and QQQ: verify the disclosure date of each file and identify gaps in coverage' },
    ];
    const finishes: string[] = [];
    let answer = '';
    let contentChunks = 0;
    for (let i = 0; i < 5; i++) {
      const t = await turn(messages);
      finishes.push(t.finish ?? 'none');
      expect(t.usage).toMatchObject({ prompt_tokens: expect.any(Number), completion_tokens: expect.any(Number) });
      if (t.finish !== 'tool_calls') {
        answer = t.content;
        contentChunks = t.contentChunks;
        break;
      }
      messages.push({
        role: 'assistant',
        content: null,
        tool_calls: t.calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } })),
      });
      for (const c of t.calls) {
        let content: unknown;
        try {
          content = { status: 'succeeded', result: await executeTool(library, c.name, JSON.parse(c.arguments)) };
        } catch (e) {
          if (!(e instanceof ToolFailure)) throw e;
          content = { status: 'failed', error: { code: e.code, message: e.message } };
        }
        messages.push({ role: 'tool', tool_call_id: c.id, content: JSON.stringify(content) });
      }
    }

    expect(finishes).toEqual(['tool_calls', 'tool_calls', 'stop']);
    expect(model.stats().perPath['/v1/chat/completions']).toBe(3);
    expect(contentChunks).toBeGreaterThan(10);
    expect(answer).toContain('503 securities plus a cash line');
    expect(answer).toContain('101 securities');
    expect(answer).toContain('4 days apart');
    expect(answer).toContain('88 securities in common');
    expect(answer).toContain("95.2% of QQQ's weight is held in SPY");
    expect(answer).toContain("51.4% of SPY's weight is held in QQQ");
    expect(answer).toContain('SPY lacks 13 QQQ names');
    expect(answer).toContain('100.25%');
  });
});
