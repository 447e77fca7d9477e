/**
 * Given a streamed reply's chunks, when assembled, then the turn is exactly what the model sent
 * (K5, K11): each malformed variant of a streamed model turn, plus the well-formed controls.
 */
import { describe, expect, it } from '@jest/globals';
import { TurnAssembler, type StreamChunk } from '../src/turn-assembly.js';

type Delta = NonNullable<NonNullable<StreamChunk['choices']>[number]['delta']>;
const c = (delta: Delta, finish: string | null = null): StreamChunk => ({ choices: [{ delta, finish_reason: finish }] });
const call = (index: number, fn: { name?: unknown; arguments?: unknown }, id?: string) => ({
  tool_calls: [{ index, ...(id !== undefined && { id }), function: fn }],
});

function assemble(chunks: StreamChunk[], turn = 2) {
  const a = new TurnAssembler();
  const texts = chunks.map((ch) => a.push(ch));
  return { result: a.result(turn), texts };
}

describe('well-formed streams (controls)', () => {
  it('given text in pieces and a usage chunk, then one content, its deltas in order, the finish reason and the usage', () => {
    const { result, texts } = assemble([
      c({ content: '' }),
      c({ content: 'Hel' }),
      c({ content: 'lo' }),
      c({}, 'stop'),
      { choices: [], usage: { prompt_tokens: 10, completion_tokens: 2, total_tokens: 12 } },
    ]);
    expect(texts).toEqual(['', 'Hel', 'lo', '', '']);
    expect(result).toEqual({
      ok: true,
      turn: { content: 'Hello', toolCalls: [], finishReason: 'stop', usage: { promptTokens: 10, completionTokens: 2, totalTokens: 12 } },
    });
  });

  it('given two calls, each named once with argument fragments (the OpenAI shape), then two calls with their own ids and arguments', () => {
    const { result } = assemble([
      c(call(0, { name: 'get_holdings', arguments: '' }, 'call_a')),
      c(call(0, { arguments: '{"fund":' })),
      c(call(0, { arguments: '"DIA"}' })),
      c(call(1, { name: 'list_funds', arguments: '' }, 'call_b')),
      c(call(1, { arguments: '{}' })),
      c({}, 'tool_calls'),
    ]);
    expect(result).toEqual({
      ok: true,
      turn: {
        content: '',
        finishReason: 'tool_calls',
        usage: null,
        toolCalls: [
          { toolCallId: 't2-0-call_a', name: 'get_holdings', argumentsText: '{"fund":"DIA"}' },
          { toolCallId: 't2-1-call_b', name: 'list_funds', argumentsText: '{}' },
        ],
      },
    });
  });

  it('given a name sent in fragments, then they are joined', () => {
    const { result } = assemble([
      c(call(0, { name: 'get_', arguments: '' }, 'x')),
      c(call(0, { name: 'holdings', arguments: '{}' })),
      c({}, 'tool_calls'),
    ]);
    expect(result.ok && result.turn.toolCalls.map((t) => t.name)).toEqual(['get_holdings']);
  });
});

describe('malformed streams', () => {
  it('given the function name repeated in every chunk, then it is one name, not the name several times', () => {
    const { result } = assemble([
      c(call(0, { name: 'get_holdings', arguments: '{"fund":' }, 'call_a')),
      c(call(0, { name: 'get_holdings', arguments: '"DIA"}' })),
      c(call(0, { name: 'get_holdings' })),
      c({}, 'tool_calls'),
    ]);
    expect(result.ok && result.turn.toolCalls).toEqual([{ toolCallId: 't2-0-call_a', name: 'get_holdings', argumentsText: '{"fund":"DIA"}' }]);
  });

  it('given two calls sent under the same index with different ids, then they are two calls, each with its own arguments', () => {
    const { result } = assemble([
      c(call(0, { name: 'get_holdings', arguments: '{"fund":"DIA"}' }, 'call_a')),
      c(call(0, { name: 'get_holdings', arguments: '{"fund":' }, 'call_b')),
      c(call(0, { arguments: '"SPY"}' })),
      c({}, 'tool_calls'),
    ]);
    expect(result.ok && result.turn.toolCalls).toEqual([
      { toolCallId: 't2-0-call_a', name: 'get_holdings', argumentsText: '{"fund":"DIA"}' },
      { toolCallId: 't2-1-call_b', name: 'get_holdings', argumentsText: '{"fund":"SPY"}' },
    ]);
  });

  it('given the same call (same id, function and arguments) repeated under a second index, then it is one call, executed once (K5)', () => {
    const { result } = assemble([
      c(call(0, { name: 'record_effect', arguments: '{"tag":"ship-order-7"}' }, 'call_SAME')),
      c(call(1, { name: 'record_effect', arguments: '{"tag":"ship-order-7"}' }, 'call_SAME')),
      c(call(2, { name: 'list_funds', arguments: '{}' }, 'call_other')),
      c({}, 'tool_calls'),
    ]);
    expect(result.ok && result.turn.toolCalls).toEqual([
      { toolCallId: 't2-0-call_SAME', name: 'record_effect', argumentsText: '{"tag":"ship-order-7"}' },
      { toolCallId: 't2-1-call_other', name: 'list_funds', argumentsText: '{}' },
    ]);
  });

  it('given one id for two different calls under two indexes, then the reply is invalid: which one the model meant is not known', () => {
    const { result } = assemble([
      c(call(0, { name: 'record_effect', arguments: '{"tag":"a"}' }, 'call_SAME')),
      c(call(1, { name: 'record_effect', arguments: '{"tag":"b"}' }, 'call_SAME')),
      c({}, 'tool_calls'),
    ]);
    expect(result).toEqual({
      ok: false,
      error: { kind: 'invalid-response', status: null, message: 'tool calls 0 and 1 share the id "call_SAME" with different arguments' },
    });
  });

  it("given arguments sent as a JSON object instead of a string, then they are recorded as that object's JSON text", () => {
    const { result } = assemble([c(call(0, { name: 'get_holdings', arguments: { fund: 'DIA', top: 10 } }, 'call_a')), c({}, 'tool_calls')]);
    expect(result.ok && result.turn.toolCalls[0]!.argumentsText).toBe('{"fund":"DIA","top":10}');
    expect(JSON.stringify(result)).not.toContain('[object Object]');
  });

  it('given an arguments object mixed with text fragments, then the reply is invalid, never "[object Object]"', () => {
    const { result } = assemble([
      c(call(0, { name: 'get_holdings', arguments: '{"fund":' }, 'call_a')),
      c(call(0, { arguments: { fund: 'DIA' } })),
      c({}, 'tool_calls'),
    ]);
    expect(result).toEqual({
      ok: false,
      error: { kind: 'invalid-response', status: null, message: expect.stringMatching(/mixes an arguments object/) },
    });
  });

  it('given arguments of another type (a number), then the reply is invalid', () => {
    const { result } = assemble([c(call(0, { name: 'get_holdings', arguments: 42 }, 'call_a')), c({}, 'tool_calls')]);
    expect(result.ok).toBe(false);
  });

  it('given a call that never gets a name, then the reply is invalid', () => {
    const { result } = assemble([c(call(0, { arguments: '{}' }, 'call_a')), c({}, 'tool_calls')]);
    expect(result).toEqual({ ok: false, error: { kind: 'invalid-response', status: null, message: 'tool call 0 has no function name' } });
  });

  it('given a tool call delta without an index, then the reply is invalid', () => {
    const { result } = assemble([c({ tool_calls: [{ id: 'x', function: { name: 'list_funds', arguments: '{}' } }] }), c({}, 'tool_calls')]);
    expect(result.ok).toBe(false);
  });

  it('given a stream that ends without a finish reason, then the reply is invalid', () => {
    expect(assemble([c({ content: 'Hi' })]).result).toEqual({
      ok: false,
      error: { kind: 'invalid-response', status: null, message: 'stream ended without a finish reason' },
    });
  });
});

describe('a reply past the reservation (K7: max_tokens is the ledger reservation, whatever the provider does with it)', () => {
  it('given 3 output tokens reserved (12 characters) and 20 characters streamed, then the content is cut at 12, the turn ends length without usage, and the assembler says stop reading', () => {
    const a = new TurnAssembler({ maxOutputTokens: 3 });
    const texts = [a.push(c({ content: 'abcdefgh' })), a.push(c({ content: 'ijklmnop' }))];
    expect(a.overReservation).toBe(true);
    // what comes after the cut, the usage chunk included, is not taken
    expect(a.push(c({ content: 'qrst' }, 'stop'))).toBe('');
    a.push({ choices: [], usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 } });
    expect(texts).toEqual(['abcdefgh', 'ijkl']);
    expect(a.result(1)).toEqual({ ok: true, turn: { content: 'abcdefghijkl', toolCalls: [], finishReason: 'length', usage: null } });
  });

  it('given tool call arguments that pass the reservation, then the turn ends length (its calls are never dispatched) and a call cut before its name is dropped', () => {
    const a = new TurnAssembler({ maxOutputTokens: 4 });
    a.push(c({ content: 'Look up:' })); // 8 of the 16 characters
    a.push(c(call(0, { name: 'get_holdings', arguments: '{"fund":"DIA"}' }, 'call_a'))); // the name passes the 16
    a.push(c(call(1, { name: 'compare', arguments: '{}' }, 'call_b')));
    expect(a.overReservation).toBe(true);
    const result = a.result(1);
    expect(result.ok).toBe(true);
    if (!result.ok) return;
    expect(result.turn.finishReason).toBe('length');
    expect(result.turn.content).toBe('Look up:');
    expect(result.turn.toolCalls).toEqual([{ toolCallId: 't1-0-call_a', name: 'get_hold', argumentsText: '' }]);
    expect(result.turn.usage).toBeNull();

    // arguments that arrive before the call's name, and pass the reservation: the nameless call is dropped
    const b = new TurnAssembler({ maxOutputTokens: 1 });
    b.push(c(call(0, { arguments: '{"fund":"DIA"}' }, 'call_c')));
    expect(b.overReservation).toBe(true);
    expect(b.result(1)).toEqual({ ok: true, turn: { content: '', toolCalls: [], finishReason: 'length', usage: null } });
  });

  it('given a reply exactly at the reservation, then nothing is cut: it ends as the model said, with its usage', () => {
    const a = new TurnAssembler({ maxOutputTokens: 2 });
    a.push(c({ content: 'abcd' }));
    a.push(c({ content: 'efgh' }, 'stop'));
    a.push({ choices: [], usage: { prompt_tokens: 4, completion_tokens: 2, total_tokens: 6 } });
    expect(a.overReservation).toBe(false);
    expect(a.result(1)).toEqual({
      ok: true,
      turn: { content: 'abcdefgh', toolCalls: [], finishReason: 'stop', usage: { promptTokens: 4, completionTokens: 2, totalTokens: 6 } },
    });
  });
});
