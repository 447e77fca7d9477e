/**
 * Nothing is dropped for its size (K9, K11) and the context budget bounds every request (K7): the
 * runtime's size rules (apps/runtime/src/sizes.ts) and the narrowing of the latest turn in
 * buildMessages, each at one below, at, one above and far above its limit.
 */
import { describe, expect, it } from '@jest/globals';
import {
  BROKER_MAX_PAYLOAD_BYTES,
  cutToJsonBytes,
  jsonBytes,
  passagesPrefixLength,
  sha256Hex,
  TOOL_ARGUMENTS_MAX_BYTES,
  TURN_CONTENT_MAX_BYTES,
  TURN_PASSAGES_MAX,
  TURN_TOOL_CALLS_MAX_BYTES,
  type EventData,
  type RunEvent,
} from '@runplane/contracts';
import { boundTurn } from '../src/sizes.js';
import { buildMessages } from '../src/messages.js';
import { decide, type ModelTurnResult } from '../src/decide.js';
import { sizeOf } from '../src/context.js';
import { toolPairingError, type WireMessage } from '@runplane/app-scripted-model';
import { spec } from '../../../test/support/decider-spec.js';
import { History } from '../../../test/support/history.js';

const runtime = spec(decide);
const wake = { type: 'Wake', model: 'm' } as const;
const ended = (turn: number, result: ModelTurnResult) => ({ type: 'ModelTurnEnded', turn, result }) as const;
const usage = { promptTokens: 3, completionTokens: 2, totalTokens: 5 };
const reply = (content: string, extra: Partial<Extract<ModelTurnResult, { ok: true }>['turn']> = {}): ModelTurnResult => ({
  ok: true,
  turn: { content, toolCalls: [], finishReason: 'stop', usage, ...extra },
});
const inFlight = () => new History().admitted().add('model.turn.requested', 1, { turn: 1, model: 'm' });
/** A text whose JSON string takes exactly `bytes` bytes (quotes included). */
const textOf = (bytes: number, ch = 'a') => ch.repeat(bytes - 2);
/** Arguments text whose JSON string takes exactly `bytes` bytes. */
const argsOf = (bytes: number) => `{"fund":"SPY","pad":"${'x'.repeat(bytes - 2 - '{\\"fund\\":\\"SPY\\",\\"pad\\":\\"\\"}'.length)}"}`;
const completedOf = (events: RunEvent[]): EventData<'model.turn.completed'> =>
  events.find((e): e is Extract<RunEvent, { type: 'model.turn.completed' }> => e.type === 'model.turn.completed')!.data;
/** A narrowed tool message as the model reads it. */
type Narrowed = {
  narrowed: { note: string; shownCharacters: number; totalCharacters: number; sha256?: string; resultRef?: unknown };
  excerpt: string;
};
const wire = (e: RunEvent) => Buffer.byteLength(JSON.stringify(e), 'utf8');

describe('sizes: JSON byte measure and cut', () => {
  it('measures the bytes of the JSON string, escapes and multi-byte characters included', () => {
    expect(jsonBytes('ab')).toBe(4);
    expect(jsonBytes('a"b\n')).toBe(2 + 1 + 2 + 1 + 2);
    expect(jsonBytes('\u0001')).toBe(2 + 6);
    expect(jsonBytes('é€😀')).toBe(2 + 2 + 3 + 4);
  });

  it('cuts to the longest prefix within the limit, never inside a surrogate pair or an escape', () => {
    const text = 'a"😀é\u0001b';
    for (let limit = 2; limit <= jsonBytes(text) + 1; limit++) {
      const kept = cutToJsonBytes(text, limit);
      expect(text.startsWith(kept)).toBe(true);
      expect(jsonBytes(kept)).toBeLessThanOrEqual(limit);
      if (kept.length < text.length) {
        const next = text.codePointAt(kept.length)! > 0xffff ? 2 : 1;
        expect(jsonBytes(text.slice(0, kept.length + next))).toBeGreaterThan(limit);
      }
      expect(kept).not.toMatch(/[\uD800-\uDBFF]$/);
    }
  });

  it('counts passages as splitPassages does: the prefix holding the first N', () => {
    expect(passagesPrefixLength('a\n\nb\n\nc', 3)).toBeNull();
    expect(passagesPrefixLength('a\n\nb\n\nc', 2)).toBe('a\n\nb\n\n'.length);
    expect(passagesPrefixLength('a\n\n\n\n  \n\nb', 1)).toBe('a\n\n\n\n  \n\n'.length);
  });
});

describe('runtime decide, ModelTurnEnded: the turn text is recorded within its size limit (K9, K11)', () => {
  it('one below and at the limit: recorded whole, and an answer', () => {
    for (const bytes of [TURN_CONTENT_MAX_BYTES - 1, TURN_CONTENT_MAX_BYTES]) {
      const content = textOf(bytes);
      const events = runtime
        .given(inFlight())
        .when(ended(1, reply(content)))
        .then([
          { type: 'model.turn.completed', data: { turn: 1, content, toolCalls: [], finishReason: 'stop', usage } },
          { type: 'run.execution.finished', data: { reason: 'answered', detail: expect.any(String), answerTurn: 1 } as never },
        ]);
      expect(completedOf(events).cut).toBeUndefined();
    }
  });

  it('one above the limit: recorded cut with the whole size and digest, not an answer; the next wake retries within budget', () => {
    const content = textOf(TURN_CONTENT_MAX_BYTES + 1);
    const [done] = runtime
      .given(inFlight())
      .when(ended(1, reply(content)))
      .then([{ type: 'model.turn.completed', data: expect.objectContaining({ turn: 1, content: content.slice(0, -1) }) }]);
    expect(completedOf([done!]).cut).toEqual([
      {
        field: 'content',
        reason: 'size-limit',
        bytes: TURN_CONTENT_MAX_BYTES + 1,
        sha256: sha256Hex(content),
        keptCharacters: content.length - 1,
        limitBytes: TURN_CONTENT_MAX_BYTES,
      },
    ]);
    const h = inFlight();
    h.add('model.turn.completed', 1, completedOf([done!]));
    runtime
      .given(h)
      .when(wake)
      .then([{ type: 'model.turn.requested', data: expect.objectContaining({ turn: 2, retryOf: 1 }) }]);
  });

  it('far above (4 MiB, and a megabyte of quotes): the record fits the broker; a Run that keeps overflowing stops truncated-output, saying why', () => {
    for (const content of [textOf(4 * 1024 * 1024), '"'.repeat(1024 * 1024)]) {
      const events = runtime
        .given(inFlight())
        .when(ended(1, reply(content)))
        .then([{ type: 'model.turn.completed', data: expect.anything() }]);
      expect(wire(events[0]!)).toBeLessThan(BROKER_MAX_PAYLOAD_BYTES / 2);
      expect(jsonBytes(completedOf(events).content)).toBeLessThanOrEqual(TURN_CONTENT_MAX_BYTES);
    }
    // three cut replies in a row: the Run stops, and the stop says the text was over the size limit
    const h = new History().admitted();
    for (let turn = 1; turn <= 3; turn++) {
      h.add('model.turn.requested', turn, { turn, model: 'm' });
      h.add('model.turn.completed', turn, {
        turn,
        ...boundTurn({ content: textOf(TURN_CONTENT_MAX_BYTES * 2), toolCalls: [], finishReason: 'stop', usage }),
      });
    }
    const [stop] = runtime
      .given(h)
      .when(wake)
      .then([{ type: 'run.execution.finished', data: expect.anything() }]);
    const data = stop!.data as EventData<'run.execution.finished'>;
    expect(['truncated-output', 'no-progress']).toContain(data.reason);
    expect(data.detail).toMatch(/over the size limit of 262144 bytes/);
  });

  it('more passages than the limit: the text is cut after the last passage kept', () => {
    const para = (n: number) => Array.from({ length: n }, (_, i) => `p${i}`).join('\n\n');
    expect(
      completedOf(
        runtime
          .given(inFlight())
          .when(ended(1, reply(para(TURN_PASSAGES_MAX))))
          .then([
            { type: 'model.turn.completed', data: expect.anything() },
            { type: 'run.execution.finished', data: expect.anything() },
          ]),
      ).cut,
    ).toBeUndefined();
    const [done] = runtime
      .given(inFlight())
      .when(ended(1, reply(para(TURN_PASSAGES_MAX + 1))))
      .then([{ type: 'model.turn.completed', data: expect.anything() }]);
    const data = completedOf([done!]);
    expect(data.content).toBe(`${para(TURN_PASSAGES_MAX)}\n\n`);
    expect(data.cut).toEqual([expect.objectContaining({ field: 'content', limitPassages: TURN_PASSAGES_MAX })]);
  });

  it('a streamed paragraph over the limit is not recorded on its own (the turn record says what was kept); one at the limit is', () => {
    const at = textOf(TURN_CONTENT_MAX_BYTES);
    const over = textOf(TURN_CONTENT_MAX_BYTES + 1);
    const events = runtime
      .given(inFlight())
      .when({
        type: 'ParagraphsStreamed',
        turn: 1,
        paragraphs: [
          { index: 0, text: at },
          { index: 1, text: over },
        ],
      })
      .then([{ type: 'model.output.paragraph', data: expect.objectContaining({ index: 0 }) }]);
    expect(wire(events[0]!)).toBeLessThan(BROKER_MAX_PAYLOAD_BYTES);
  });
});

describe('runtime decide, ModelTurnEnded: tool-call arguments within their size limit (K5, K8, K11)', () => {
  const call = (args: string, id = 't1-0-a') => ({ toolCallId: id, name: 'get_holdings', argumentsText: args });

  it('one below and at the limit: recorded whole and proposed', () => {
    for (const bytes of [TOOL_ARGUMENTS_MAX_BYTES - 1, TOOL_ARGUMENTS_MAX_BYTES]) {
      const c = call(argsOf(bytes));
      expect(jsonBytes(c.argumentsText)).toBe(bytes);
      runtime
        .given(inFlight())
        .when(ended(1, reply('', { toolCalls: [c], finishReason: 'tool_calls' })))
        .then([
          { type: 'model.turn.completed', data: { turn: 1, content: '', toolCalls: [c], finishReason: 'tool_calls', usage } },
          { type: 'tool.call.proposed', data: { ...c, turn: 1 } },
        ]);
    }
  });

  it('one above and far above (2 MiB): recorded cut, never proposed; the model reads arguments_too_large with the call paired, and the Run goes on', () => {
    for (const bytes of [TOOL_ARGUMENTS_MAX_BYTES + 1, 2 * 1024 * 1024]) {
      const c = call(argsOf(bytes));
      const ok = call('{"fund":"QQQ"}', 't1-1-b');
      const events = runtime
        .given(inFlight())
        .when(ended(1, reply('', { toolCalls: [c, ok], finishReason: 'tool_calls' })))
        .then([
          { type: 'model.turn.completed', data: expect.objectContaining({ turn: 1 }) },
          { type: 'tool.call.proposed', data: { ...ok, turn: 1 } },
        ]);
      expect(wire(events[0]!)).toBeLessThan(BROKER_MAX_PAYLOAD_BYTES / 2);
      const data = completedOf(events);
      expect(data.toolCalls[0]!.argumentsText).toBe(c.argumentsText.slice(0, data.cut![0]!.keptCharacters));
      expect(data.cut).toEqual([
        {
          field: 'arguments',
          toolCallId: c.toolCallId,
          reason: 'size-limit',
          bytes,
          sha256: sha256Hex(c.argumentsText),
          keptCharacters: expect.any(Number),
          limitBytes: TOOL_ARGUMENTS_MAX_BYTES,
        },
      ]);
      // the ordinary call's receipt arrives: the next turn is requested (the cut call needs no receipt)
      const h = inFlight();
      for (const e of events) h.add(e.type, e.type === 'model.turn.completed' ? 1 : ok.toolCallId, e.data);
      h.dispatched(ok.toolCallId, ok.name).receipt(ok.toolCallId, ok.name, 'succeeded', { rows: 1 });
      runtime
        .given(h)
        .when(wake)
        .then([{ type: 'model.turn.requested', data: expect.objectContaining({ turn: 2 }) }]);
      const messages = buildMessages(h.facts, new Map([[ok.toolCallId, { rows: 1 }]]));
      expect(toolPairingError(messages as WireMessage[])).toBeNull();
      const tool = messages.find((m) => m.role === 'tool' && m.tool_call_id === c.toolCallId)!;
      expect(JSON.parse(tool.content as string)).toEqual({
        status: 'failed',
        error: {
          code: 'arguments_too_large',
          message: expect.stringContaining(`(${bytes} bytes of JSON) are over the limit of ${TOOL_ARGUMENTS_MAX_BYTES} bytes`),
        },
      });
    }
  });

  it("calls past the turn's total are recorded cut, whatever their own size", () => {
    const n = Math.floor(TURN_TOOL_CALLS_MAX_BYTES / TOOL_ARGUMENTS_MAX_BYTES) + 2;
    const calls = Array.from({ length: n }, (_, i) => call(argsOf(TOOL_ARGUMENTS_MAX_BYTES - 100), `t1-${i}-a`));
    const events = runtime
      .given(inFlight())
      .when(ended(1, reply('', { toolCalls: calls, finishReason: 'tool_calls' })))
      .then(expect.anything() as never);
    const data = completedOf(events);
    const proposed = events.filter((e) => e.type === 'tool.call.proposed').length;
    expect(proposed).toBeGreaterThan(0);
    expect(proposed + data.cut!.length).toBe(n);
    expect(wire(events[0]!)).toBeLessThan(BROKER_MAX_PAYLOAD_BYTES / 2);
  });

  it('a parking call with cut arguments never parks (no wait is opened)', () => {
    const h = new History().admitted({ tools: ['get_holdings', 'ask_human'] }).add('model.turn.requested', 1, { turn: 1, model: 'm' });
    const ask = { toolCallId: 't1-0-a', name: 'ask_human', argumentsText: JSON.stringify({ question: 'q'.repeat(TOOL_ARGUMENTS_MAX_BYTES) }) };
    runtime
      .given(h)
      .when(ended(1, reply('', { toolCalls: [ask], finishReason: 'tool_calls' })))
      .then([{ type: 'model.turn.completed', data: expect.objectContaining({ cut: [expect.objectContaining({ field: 'arguments' })] }) }]);
  });
});

describe('runtime decide, ModelTurnEnded: a reply the log refused is recorded as unrecordable, at once (K9, K11)', () => {
  it('given turn 1 in flight, when its record was refused for its size, then the failure is recorded and execution stops model-error (never retried)', () => {
    const error = { kind: 'unrecordable', status: null, message: 'the reply of turn 1 could not be recorded: max_payload size exceeded' } as const;
    runtime
      .given(inFlight())
      .when(ended(1, { ok: false, error }))
      .then([
        { type: 'model.turn.failed', data: { turn: 1, error } },
        {
          type: 'run.execution.finished',
          data: { reason: 'model-error', detail: expect.stringContaining('max_payload'), answerTurn: null } as never,
        },
      ]);
  });

  it('a failure message far above its limit is recorded cut, saying so', () => {
    const [failed] = runtime
      .given(inFlight())
      .when(ended(1, { ok: false, error: { kind: 'http', status: 500, message: '<html>'.repeat(200_000) } }))
      .then([{ type: 'model.turn.failed', data: expect.anything() }]);
    expect((failed!.data as EventData<'model.turn.failed'>).error.message).toMatch(/\[cut for its size: \d+ more characters\]$/);
    expect(wire(failed!)).toBeLessThan(10_000);
  });
});

describe('context budget: the latest turn is bounded too (K7)', () => {
  /** A Run whose latest turn has one call with a result of `chars` characters of JSON, and a second small call. */
  function latest(resultChars: number) {
    const big = { rows: 'r'.repeat(resultChars - '{"rows":""}'.length) };
    const h = new History()
      .admitted()
      .turn(1, {
        calls: [
          { id: 'big', name: 'get_holdings', args: '{"fund":"SPY","top":500}' },
          { id: 'small', name: 'list_funds' },
        ],
      })
      .proposed(1, 'big', 'get_holdings', '{"fund":"SPY","top":500}')
      .dispatched('big', 'get_holdings')
      .receipt('big', 'get_holdings', 'succeeded', big)
      .proposed(1, 'small', 'list_funds')
      .dispatched('small', 'list_funds')
      .receipt('small', 'list_funds', 'succeeded', { funds: ['SPY'] });
    return {
      facts: h.facts,
      results: new Map<string, unknown>([
        ['big', big],
        ['small', { funds: ['SPY'] }],
      ]),
      big,
    };
  }

  it('at and one above the size of the whole request: sent whole; one below: narrowed to fit, with the note, the digest and the pairing', () => {
    const { facts, results, big } = latest(60_000);
    const whole = buildMessages(facts, results);
    const size = sizeOf(whole);
    expect(buildMessages(facts, results, size)).toEqual(whole);
    expect(buildMessages(facts, results, size + 1)).toEqual(whole);
    const below = buildMessages(facts, results, size - 1);
    expect(sizeOf(below)).toBeLessThanOrEqual(size - 1);
    expect(toolPairingError(below as WireMessage[])).toBeNull();
    const narrowed = JSON.parse(below.find((m) => m.role === 'tool' && m.tool_call_id === 'big')!.content as string) as Narrowed;
    expect(narrowed.narrowed).toMatchObject({ sha256: sha256Hex(JSON.stringify(big)), totalCharacters: expect.any(Number) });
    expect(narrowed.narrowed.note).toMatch(/only its first \d+ are shown, \d+ were left out/);
    // the small result stays whole
    expect(below.find((m) => m.role === 'tool' && m.tool_call_id === 'small')).toEqual(
      whole.find((m) => m.role === 'tool' && m.tool_call_id === 'small'),
    );
  });

  it('far below (a result 100 times the budget): the request fits, the big result is an excerpt with its note, every call keeps its message', () => {
    const budget = 8_000;
    const { facts, results } = latest(800_000);
    const messages = buildMessages(facts, results, budget);
    expect(sizeOf(messages)).toBeLessThanOrEqual(budget);
    expect(toolPairingError(messages as WireMessage[])).toBeNull();
    const narrowed = JSON.parse(messages.find((m) => m.role === 'tool' && m.tool_call_id === 'big')!.content as string) as Narrowed;
    expect(narrowed.excerpt.length).toBeGreaterThan(1_000);
    expect(narrowed.narrowed.shownCharacters).toBe(narrowed.excerpt.length);
  });

  it("the latest reply's own text over the budget is narrowed too, its tool calls and their results kept; a cut call's arguments are sent as a short note", () => {
    const args = argsOf(TOOL_ARGUMENTS_MAX_BYTES * 4);
    const h = new History().admitted().add('model.turn.requested', 1, { turn: 1, model: 'm' });
    const [done] = runtime
      .given(h)
      .when(
        ended(
          1,
          reply('t'.repeat(50_000), { toolCalls: [{ toolCallId: 'cut', name: 'get_holdings', argumentsText: args }], finishReason: 'tool_calls' }),
        ),
      )
      .then([{ type: 'model.turn.completed', data: expect.anything() }]);
    h.add('model.turn.completed', 1, done!.data as EventData<'model.turn.completed'>);
    const messages = buildMessages(h.facts, new Map(), 10_000);
    expect(sizeOf(messages)).toBeLessThanOrEqual(10_000);
    expect(toolPairingError(messages as WireMessage[])).toBeNull();
    const assistant = messages.find((m) => m.role === 'assistant')!;
    expect(assistant.content).toMatch(/^t+\n\n\[narrowed to fit the context budget\] This earlier reply is 50000 characters/);
    const sent = (assistant as { tool_calls: { function: { arguments: string } }[] }).tool_calls[0]!.function.arguments;
    expect(JSON.parse(sent)).toEqual({ cut: expect.stringContaining('not executed'), excerpt: args.slice(0, 200) });
  });

  it('a result stored by reference is narrowed with its stored reference named', () => {
    const big = { rows: 'z'.repeat(50_000) };
    const ref = { bucket: 'rp_results', key: sha256Hex(JSON.stringify(big)), sha256: sha256Hex(JSON.stringify(big)), bytes: 50_011 };
    const h = new History()
      .admitted()
      .turn(1, { calls: [{ id: 'big', name: 'get_holdings' }] })
      .proposed(1, 'big', 'get_holdings')
      .dispatched('big', 'get_holdings')
      .add('tool.call.receipt', 'big', { toolCallId: 'big', name: 'get_holdings', status: 'succeeded', resultRef: ref, durationMs: 1 });
    const messages = buildMessages(h.facts, new Map([['big', big]]), 10_000);
    expect(sizeOf(messages)).toBeLessThanOrEqual(10_000);
    const narrowed = JSON.parse(messages.find((m) => m.role === 'tool')!.content as string) as Narrowed;
    expect(narrowed.narrowed.resultRef).toEqual(ref);
    expect(narrowed.narrowed.note).toContain(`stored as rp_results/${ref.key}`);
  });
});
