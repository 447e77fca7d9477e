/**
 * Model turns recorded exactly (K5, K11), through the real runtime, NATS and the scripted model
 * over HTTP: the scripted model streams raw chunk scripts (a function name repeated in every
 * chunk, two calls under one index, arguments as an object, a length-cut turn with a complete
 * looking call, mixed argument types), and the log shows exactly the calls the model made, what
 * was proposed and dispatched, and why execution stopped.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { ofType } from '../support/faults.js';
import { startTestStack, type TestStack } from '../support/stack.js';

let t: TestStack;
beforeAll(async () => {
  t = await startTestStack('asm');
}, 120_000);
afterAll(async () => {
  await t?.stop();
});

type Raw = { delta?: Record<string, unknown>; finishReason?: string | null; usage?: Record<string, unknown> };
const call = (index: number, fn: Record<string, unknown>, id?: string): Raw => ({
  delta: { tool_calls: [{ index, ...(id !== undefined && { id, type: 'function' }), function: fn }] },
});
const usage: Raw = { usage: { prompt_tokens: 20, completion_tokens: 7, total_tokens: 27 } };

/** Runs one Run whose first model turn is the raw chunk script; later turns answer plainly. */
async function runWith(name: string, chunks: Raw[]) {
  const key = `${name}-${t.tag}`;
  await t.setScenario({ steps: [{ rawChunks: chunks }, { reply: { content: `Done (${key}).` } }], then: 'error' }, key);
  const { body } = await t.client.postMessage(`conv-asm-${name}`, { clientMessageId: key, content: `[${key}] What do SPY and QQQ hold?` });
  return t.waitForSettlement(body.runId, 60_000);
}

describe('a streamed reply is recorded as exactly the calls the model made', () => {
  it('control: two well-formed calls with argument fragments are two proposals and two dispatches', async () => {
    const events = await runWith('ctl', [
      call(0, { name: 'get_holdings', arguments: '' }, 'call_a'),
      call(0, { arguments: '{"fund":' }),
      call(0, { arguments: '"SPY"}' }),
      call(1, { name: 'get_holdings', arguments: '{"fund":"QQQ"}' }, 'call_b'),
      { finishReason: 'tool_calls' },
      usage,
    ]);
    const turn1 = ofType(events, 'model.turn.completed')[0]!.data;
    expect(turn1.toolCalls.map((c) => [c.name, c.argumentsText])).toEqual([
      ['get_holdings', '{"fund":"SPY"}'],
      ['get_holdings', '{"fund":"QQQ"}'],
    ]);
    expect(turn1.usage).toEqual({ promptTokens: 20, completionTokens: 7, totalTokens: 27 });
    expect(ofType(events, 'tool.call.proposed')).toHaveLength(2);
    expect(ofType(events, 'tool.call.dispatched')).toHaveLength(2);
    expect(ofType(events, 'run.settled')[0]!.data.outcome).toBe('completed');
  }, 90_000);

  it('a function name repeated in every chunk is one name', async () => {
    const events = await runWith('rep', [
      call(0, { name: 'get_holdings', arguments: '{"fund":' }, 'call_a'),
      call(0, { name: 'get_holdings', arguments: '"SPY"}' }),
      call(0, { name: 'get_holdings' }),
      { finishReason: 'tool_calls' },
    ]);
    const proposed = ofType(events, 'tool.call.proposed');
    expect(proposed.map((p) => [p.data.name, p.data.argumentsText])).toEqual([['get_holdings', '{"fund":"SPY"}']]);
    expect(ofType(events, 'tool.call.receipt')[0]!.data.status).toBe('succeeded');
  }, 90_000);

  it('two calls sent under the same index with different ids are two calls, each with its own id and arguments', async () => {
    const events = await runWith('idx', [
      call(0, { name: 'get_holdings', arguments: '{"fund":"SPY"}' }, 'call_a'),
      call(0, { name: 'get_holdings', arguments: '{"fund":"QQQ"}' }, 'call_b'),
      { finishReason: 'tool_calls' },
    ]);
    const proposed = ofType(events, 'tool.call.proposed');
    expect(proposed.map((p) => p.data.argumentsText)).toEqual(['{"fund":"SPY"}', '{"fund":"QQQ"}']);
    expect(new Set(proposed.map((p) => p.data.toolCallId)).size).toBe(2);
    expect(ofType(events, 'tool.call.receipt').map((r) => r.data.status)).toEqual(['succeeded', 'succeeded']);
  }, 90_000);

  it('arguments sent as a JSON object are recorded as its JSON text, never "[object Object]"', async () => {
    const events = await runWith('obj', [call(0, { name: 'get_holdings', arguments: { fund: 'SPY' } }, 'call_a'), { finishReason: 'tool_calls' }]);
    expect(ofType(events, 'tool.call.proposed')[0]!.data.argumentsText).toBe('{"fund":"SPY"}');
    expect(JSON.stringify(events)).not.toContain('[object Object]');
    expect(ofType(events, 'tool.call.receipt')[0]!.data.status).toBe('succeeded');
  }, 90_000);

  it('arguments mixing an object with text are an invalid reply: recorded as a failed turn, nothing proposed', async () => {
    const events = await runWith('mix', [
      call(0, { name: 'get_holdings', arguments: '{"fund":' }, 'call_a'),
      call(0, { arguments: { fund: 'SPY' } }),
      { finishReason: 'tool_calls' },
    ]);
    expect(ofType(events, 'model.turn.failed')[0]!.data.error).toMatchObject({ kind: 'invalid-response' });
    expect(ofType(events, 'tool.call.proposed')).toHaveLength(0);
    expect(JSON.stringify(events)).not.toContain('[object Object]');
  }, 90_000);

  it('a turn cut by the length limit never has its calls proposed or dispatched, even one that looks complete; it is asked again as a new, charged turn (K5, K7, K9)', async () => {
    const events = await runWith('len', [call(0, { name: 'get_holdings', arguments: '{"fund":"SPY"}' }, 'call_a'), { finishReason: 'length' }]);
    const turn1 = ofType(events, 'model.turn.completed')[0]!.data;
    expect(turn1).toMatchObject({ finishReason: 'length', toolCalls: [{ name: 'get_holdings', argumentsText: '{"fund":"SPY"}' }] });
    expect(ofType(events, 'tool.call.proposed')).toHaveLength(0);
    expect(ofType(events, 'tool.call.dispatched')).toHaveLength(0);
    // the cut turn is never the answer: turn 2 retries it, and its reply is the answer
    expect(ofType(events, 'model.turn.requested').map((r) => r.data.retryOf)).toEqual([undefined, 1]);
    expect(ofType(events, 'run.execution.finished')[0]!.data).toMatchObject({ reason: 'answered', answerTurn: 2 });
  }, 90_000);
});
