/**
 * Nothing is dropped for its size (K9, K11) and the context budget bounds every model request,
 * the latest turn included (K7), against the real processes, NATS JetStream (its default 1 MiB
 * `max_payload`), PostgreSQL and the scripted model, asserting on the events on the stream, the
 * settlement and the requests the model really received (`/_scripted/stats` bodies):
 * - tool-call arguments far above the broker's message size: the turn is recorded cut (what was
 *   kept, the whole size and digest), the call is never executed, the model reads
 *   `arguments_too_large` as its result with the call paired, and the Run goes on to its answer
 *   and settles at once, not at the no-progress limit;
 * - a reply text over its limit (256 KiB): recorded cut with its digest, not an answer, retried as
 *   a new turn, which answers;
 * - a tool result far above the inline limit and the context budget: stored by reference, and the
 *   next request fits the budget, the result narrowed to an excerpt with a note naming its digest
 *   and stored reference, every call still paired with its result.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import {
  BROKER_MAX_PAYLOAD_BYTES,
  jsonBytes,
  sha256Hex,
  TOOL_ARGUMENTS_MAX_BYTES,
  TURN_CONTENT_MAX_BYTES,
  type RunEvent,
  type StoredEvent,
} from '@runplane/contracts';
import { toolPairingError, type WireMessage } from '@runplane/app-scripted-model';
import { startTestStack, type TestStack } from '../support/stack.js';

const MAX_CHARS = 20_000;
/** The no-progress limit of these Runs, s: a Run left with an unrecorded turn would wait this long. */
const NO_PROGRESS_SECONDS = 300;
/** The inline limit of a receipt's result (apps/tools decide.ts `INLINE_RESULT_LIMIT`). */
const INLINE_RESULT_LIMIT = 16 * 1024;

let t: TestStack;
beforeAll(async () => {
  t = await startTestStack('sizes', {
    RUNPLANE_CONTEXT_MAX_CHARS: String(MAX_CHARS),
    RUNPLANE_NO_PROGRESS_SECONDS: String(NO_PROGRESS_SECONDS),
    // output tokens for the replies over the size limits (2 MiB of arguments: ~524,000 tokens by chars/4), in the grant and
    // in one request: below that the runtime cuts a reply at its reservation first (K7) and the size rules are never reached
    RUNPLANE_MAX_OUTPUT_TOKENS: '1000000',
    RUNPLANE_MODEL_MAX_TOKENS: '1000000',
  });
}, 120_000);
afterAll(async () => {
  await t?.stop();
});

type Body = { messages: WireMessage[] };
const ofType = <T extends RunEvent['type']>(events: StoredEvent[], type: T) =>
  events.filter((e) => e.event.type === type).map((e) => e.event) as Extract<RunEvent, { type: T }>[];
const textOf = (m: WireMessage): string => (typeof m.content === 'string' ? m.content : JSON.stringify(m.content ?? ''));

/** The chat requests the scripted model received whose user message contains `key`, in order. */
async function requestsWith(key: string): Promise<Body[]> {
  const res = await fetch(`${t.stack.modelUrl.replace(/\/v1$/, '/_scripted')}/stats`);
  const stats = (await res.json()) as { bodies: Body[] };
  return stats.bodies.filter((b) => typeof b === 'object' && b.messages?.some((m) => m.role === 'user' && textOf(m).includes(key)));
}

describe('sizes (K9, K11): a payload over the broker size is recorded cut, and the Run goes on', () => {
  it('tool-call arguments far above max_payload: the turn is recorded cut, the call never runs, the model reads arguments_too_large, and the Run settles at once', async () => {
    const key = 'sizes-huge-args';
    const argumentsText = JSON.stringify({ fund: 'SPY', pad: 'x'.repeat(2 * BROKER_MAX_PAYLOAD_BYTES) });
    const answer = 'The holdings lookup was refused because its arguments were too large, so no SPY figures are given here.';
    await t.setScenario(
      {
        steps: [
          // usage as reported (the estimate from 2 MiB of text would spend the Run's token budget: another limit, tested elsewhere)
          {
            reply: {
              content: '',
              toolCalls: [{ name: 'get_holdings', arguments: argumentsText }],
              finishReason: 'tool_calls',
              usage: { promptTokens: 500, completionTokens: 50 },
            },
          },
          { reply: { content: answer, finishReason: 'stop' } },
        ],
        then: 'error',
      },
      key,
    );
    const started = Date.now();
    const posted = await t.client.postMessage('conv-sizes-args', { clientMessageId: key, content: `[${key}] What does SPY hold?` });
    expect(posted.status).toBe(201);
    const runId = posted.body.runId;
    const events = await t.waitForSettlement(runId, 120_000);
    const elapsedMs = Date.now() - started;

    // the turn is on the stream, cut: what was kept, the whole size and digest, the limit
    const [turn1] = ofType(events, 'model.turn.completed').filter((e) => e.data.turn === 1);
    expect(turn1).toBeDefined();
    const call = turn1!.data.toolCalls[0]!;
    expect(turn1!.data.cut).toEqual([
      {
        field: 'arguments',
        toolCallId: call.toolCallId,
        reason: 'size-limit',
        bytes: jsonBytes(argumentsText),
        sha256: sha256Hex(argumentsText),
        keptCharacters: call.argumentsText.length,
        limitBytes: TOOL_ARGUMENTS_MAX_BYTES,
      },
    ]);
    expect(argumentsText.startsWith(call.argumentsText)).toBe(true);
    // never executed: no proposal, no dispatch, no receipt
    expect(ofType(events, 'tool.call.proposed')).toHaveLength(0);
    expect(ofType(events, 'tool.call.dispatched')).toHaveLength(0);
    // the Run went on: turn 2 answered, settled on that answer, not by a fence of the no-progress limit
    const finished = ofType(events, 'run.execution.finished')[0]!.data;
    expect(finished).toMatchObject({ reason: 'answered', answerTurn: 2 });
    const settled = ofType(events, 'run.settled')[0]!.data;
    // the call the runtime refused is a result the Run never had (K9): listed, whatever the answer says
    expect(settled.outcome).toBe('partial');
    expect(settled.unanswered?.map((u) => u.part)).toContainEqual(expect.stringContaining(`[${call.toolCallId}]`));
    expect(ofType(events, 'run.fenced').every((f) => f.data.reason === 'settling')).toBe(true);
    expect(elapsedMs).toBeLessThan((NO_PROGRESS_SECONDS * 1000) / 3);

    // what the model received for turn 2: the call paired with its result, which says why it did not run
    const bodies = await requestsWith(key);
    expect(bodies).toHaveLength(2);
    const second = bodies[1]!.messages;
    expect(toolPairingError(second)).toBeNull();
    const result = second.find((m) => m.role === 'tool' && (m as { tool_call_id?: string }).tool_call_id === call.toolCallId);
    expect(JSON.parse(textOf(result!))).toMatchObject({ status: 'failed', error: { code: 'arguments_too_large' } });
  });
});

describe('sizes (K9): a reply text over its limit is recorded cut, and is not an answer', () => {
  it('a 300,000-character reply (over the 256 KiB text limit): turn 1 recorded cut with its digest, retried as turn 2, which answers', async () => {
    const key = 'sizes-long-reply';
    const long = 'z'.repeat(300_000);
    const answer = 'SPY is an S&P 500 index fund; this shorter answer replaces a reply that was too long to record.';
    await t.setScenario(
      {
        steps: [
          { reply: { content: long, finishReason: 'stop', usage: { promptTokens: 500, completionTokens: 50 } } },
          { reply: { content: answer, finishReason: 'stop' } },
        ],
        then: 'error',
      },
      key,
    );
    const started = Date.now();
    const posted = await t.client.postMessage('conv-sizes-reply', { clientMessageId: key, content: `[${key}] Describe SPY` });
    expect(posted.status).toBe(201);
    const events = await t.waitForSettlement(posted.body.runId, 120_000);
    const [turn1, turn2] = ofType(events, 'model.turn.completed');
    expect(turn1!.data.cut).toEqual([
      {
        field: 'content',
        reason: 'size-limit',
        bytes: jsonBytes(long),
        sha256: sha256Hex(long),
        keptCharacters: turn1!.data.content.length,
        limitBytes: TURN_CONTENT_MAX_BYTES,
      },
    ]);
    expect(jsonBytes(turn1!.data.content)).toBeLessThanOrEqual(TURN_CONTENT_MAX_BYTES);
    expect(ofType(events, 'model.turn.requested')[1]!.data).toMatchObject({ turn: 2, retryOf: 1 });
    expect(turn2!.data.content).toBe(answer);
    expect(ofType(events, 'run.execution.finished')[0]!.data).toMatchObject({ reason: 'answered', answerTurn: 2 });
    expect(ofType(events, 'answer.published')[0]!.data.sourceTurn).toBe(2);
    expect(ofType(events, 'run.settled')[0]!.data.outcome).not.toBe('failed');
    expect(Date.now() - started).toBeLessThan((NO_PROGRESS_SECONDS * 1000) / 3);
  });
});

describe('context budget (K7): the latest turn is bounded too', () => {
  it('a tool result far above the inline limit and the budget: stored by reference, and the next request fits the budget with an excerpt, a note and its digest', async () => {
    const key = 'sizes-big-result';
    await t.setScenario(
      {
        steps: [
          { reply: { content: '', toolCalls: [{ name: 'get_holdings', arguments: { fund: 'SPY', top: 500 } }], finishReason: 'tool_calls' } },
          { reply: { content: 'SPY holds about 500 securities; only the heaviest were read.', finishReason: 'stop' } },
        ],
        then: 'error',
      },
      key,
    );
    const posted = await t.client.postMessage('conv-sizes-result', { clientMessageId: key, content: `[${key}] List what SPY holds` });
    expect(posted.status).toBe(201);
    const events = await t.waitForSettlement(posted.body.runId, 120_000);

    const receipt = ofType(events, 'tool.call.receipt')[0]!.data;
    expect(receipt.status).toBe('succeeded');
    expect(receipt.resultRef).toBeDefined();
    expect(receipt.resultRef!.bytes).toBeGreaterThan(INLINE_RESULT_LIMIT);
    expect(receipt.resultRef!.bytes).toBeGreaterThan(MAX_CHARS);

    const bodies = await requestsWith(key);
    expect(bodies).toHaveLength(2);
    for (const b of bodies) expect(b.messages.reduce((n, m) => n + JSON.stringify(m).length, 0)).toBeLessThanOrEqual(MAX_CHARS);
    const second = bodies[1]!.messages;
    expect(toolPairingError(second)).toBeNull();
    const tool = second.find((m) => m.role === 'tool' && (m as { tool_call_id?: string }).tool_call_id === receipt.toolCallId)!;
    const narrowed = JSON.parse(textOf(tool)) as { narrowed: { note: string; sha256: string; resultRef: unknown }; excerpt: string };
    expect(narrowed.narrowed.sha256).toBe(receipt.resultRef!.sha256);
    expect(narrowed.narrowed.resultRef).toEqual(receipt.resultRef);
    expect(narrowed.narrowed.note).toMatch(/only its first \d+ are shown, \d+ were left out/);
    expect(narrowed.excerpt.length).toBeGreaterThan(1_000);
    expect(ofType(events, 'run.settled')[0]!.data.outcome).not.toBe('failed');
  });
});
