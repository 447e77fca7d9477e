/**
 * A retry waits (K7): a transient failure of a model request (connection, timeout, 429,
 * 5xx) records its backoff on `model.turn.failed` (exponential in the failures in a row, with the
 * adapter's jitter, capped, at least the provider's Retry-After); a wake before it ends requests
 * nothing, one after it requests the retry (a new, charged turn); a retry that would start after
 * the deadline is not made and the Run stops with the reason; a stop is never delayed.
 */
import { describe, expect, it } from '@jest/globals';
import { decide, type ModelTurnResult } from '../src/decide.js';
import { retryDelayMs, retryWaitMs } from '../src/ledger.js';
import { budgetOf } from '@runplane/run-facts';
import { spec } from '../../../test/support/decider-spec.js';
import { History } from '../../../test/support/history.js';

const runtime = spec(decide);
const wake = { type: 'Wake', model: 'm' } as const;
const POLICY = { minMs: 1_000, maxMs: 30_000 };
const ended = (turn: number, result: ModelTurnResult, random = 0.5) =>
  ({ type: 'ModelTurnEnded', turn, result, retryBackoff: POLICY, random }) as const;
const refused = { kind: 'connection', status: null, message: 'Connection error. (ECONNREFUSED)' } as const;
const deadlineAt = '2030-01-01T00:01:00.000Z';
const T0 = Date.parse('2030-01-01T00:00:00.000Z');
const at = (ms: number) => new Date(T0 + ms);
const RESERVE = { finalOutputReserve: { modelRequests: 1, outputTokens: 200 } };
const run = (maxModelRequests = 8) => new History().admitted({ deadlineAt, maxModelRequests, limits: RESERVE });
/** Turn `turn` requested and failed, its backoff ending `notBeforeMs` after T0. */
const failedTurn = (h: History, turn: number, failuresInARow: number, delayMs: number, notBeforeMs: number) =>
  h
    .add('model.turn.requested', turn, { turn, model: 'm', ...(turn > 1 ? { retryOf: turn - 1 } : {}) })
    .add('model.turn.failed', turn, { turn, error: refused, retry: { failuresInARow, delayMs, notBefore: at(notBeforeMs).toISOString() } });

describe('the backoff is decided with the failure and recorded on it (K7)', () => {
  it('given turn 1 in flight, when its request is refused (connection), then the failure records the backoff: 1 failure, min * (1 + jitter), from the decision clock', () => {
    const h = run().add('model.turn.requested', 1, { turn: 1, model: 'm' });
    runtime
      .given(h)
      .when(ended(1, { ok: false, error: refused }, 0.5), at(0))
      .then([
        {
          type: 'model.turn.failed',
          data: { turn: 1, error: refused, retry: { failuresInARow: 1, delayMs: 1_500, notBefore: at(1_500).toISOString() } },
        },
      ]);
  });

  it('given failures in a row, when the next one fails, then the delays grow (doubling) up to the cap', () => {
    const h = new History().admitted({ maxModelRequests: 20 }).add('model.turn.requested', 1, { turn: 1, model: 'm' }); // a far deadline
    const delays: number[] = [];
    let clock = 0;
    for (let turn = 1; turn <= 7; turn++) {
      const [failed] = runtime
        .given(h)
        .when(ended(turn, { ok: false, error: refused }, 0.25), at(clock))
        .then([{ type: 'model.turn.failed', data: expect.objectContaining({ turn }) }]);
      const retry = (failed!.data as { retry: { failuresInARow: number; delayMs: number; notBefore: string } }).retry;
      expect(retry.failuresInARow).toBe(turn);
      delays.push(retry.delayMs);
      h.add('model.turn.failed', turn, failed!.data as never);
      clock = Date.parse(retry.notBefore) - T0;
      h.add('model.turn.requested', turn + 1, { turn: turn + 1, model: 'm', retryOf: turn });
    }
    expect(delays).toEqual([1_250, 2_500, 5_000, 10_000, 20_000, 30_000, 30_000]);
  });

  it('a 503 with a longer Retry-After waits the Retry-After; a shorter one the backoff', () => {
    const h = run().add('model.turn.requested', 1, { turn: 1, model: 'm' });
    const busy = (retryAfterMs: number) => ({ kind: 'http', status: 503, message: 'overloaded', retryAfterMs }) as const;
    runtime
      .given(h)
      .when(ended(1, { ok: false, error: busy(5_000) }, 0), at(0))
      .then([
        {
          type: 'model.turn.failed',
          data: expect.objectContaining({ retry: { failuresInARow: 1, delayMs: 5_000, notBefore: at(5_000).toISOString() } }),
        },
      ]);
    runtime
      .given(h)
      .when(ended(1, { ok: false, error: busy(200) }, 0), at(0))
      .then([{ type: 'model.turn.failed', data: expect.objectContaining({ retry: expect.objectContaining({ delayMs: 1_000 }) }) }]);
  });

  it('the jitter is the draw the adapter passed in: 0 gives the floor, ~1 nearly twice it; the same draw decides the same', () => {
    expect(retryDelayMs(1, POLICY, 0)).toBe(1_000);
    expect(retryDelayMs(1, POLICY, 0.999)).toBe(1_999);
    expect(retryDelayMs(3, POLICY, 0)).toBe(4_000);
    expect(retryDelayMs(60, POLICY, 0.5)).toBe(30_000);
    expect(retryDelayMs(2, { minMs: 0, maxMs: 0 }, 0.5)).toBe(0);
  });

  it('no backoff is recorded for a failure that is not retried or not transient: the finalization turn, a 401, a malformed reply', () => {
    const fin = run()
      .researched(1)
      .add('run.finalization.started', 'finalization', { reason: 'model-request-limit', detail: 'spent', unfinished: [{ part: 'p', reason: 'r' }] })
      .add('model.turn.requested', 2, { turn: 2, model: 'm', purpose: 'finalization' });
    runtime
      .given(fin)
      .when(ended(2, { ok: false, error: refused }), at(0))
      .then([
        { type: 'model.turn.failed', data: { turn: 2, error: refused } },
        { type: 'run.execution.finished', data: expect.objectContaining({ reason: 'model-error' }) },
      ]);
    const h = run().add('model.turn.requested', 1, { turn: 1, model: 'm' });
    const denied = { kind: 'http', status: 401, message: 'bad key' } as const;
    runtime
      .given(h)
      .when(ended(1, { ok: false, error: denied }), at(0))
      .then([
        { type: 'model.turn.failed', data: { turn: 1, error: denied } },
        { type: 'run.execution.finished', data: expect.objectContaining({ reason: 'model-error' }) },
      ]);
    const malformed = { kind: 'invalid-response', status: null, message: 'stream ended without a finish reason' } as const;
    runtime
      .given(h)
      .when(ended(1, { ok: false, error: malformed }), at(0))
      .then([{ type: 'model.turn.failed', data: { turn: 1, error: malformed } }]);
  });
});

describe('an outage does not burn the token budget (K7)', () => {
  it('given a refused request and a stream cut mid-way, then each is a charged model request; the refused one charges no output tokens, the cut one its reservation (it may have generated)', () => {
    const h = new History().admitted({ limits: { maxInputTokens: 100_000, maxOutputTokens: 20_000, ...RESERVE } });
    const cut = { kind: 'connection', status: null, message: 'the streamed reply was cut by the network (terminated: other side closed)' } as const;
    h.add('model.turn.requested', 1, { turn: 1, model: 'm', maxTokens: 16_000, inputTokensEstimate: 900 });
    h.add('model.turn.failed', 1, { turn: 1, error: cut });
    h.add('model.turn.requested', 2, { turn: 2, model: 'm', maxTokens: 16_000, inputTokensEstimate: 900, retryOf: 1 });
    h.add('model.turn.failed', 2, { turn: 2, error: { ...refused, refused: true } });
    const b = budgetOf(h.facts);
    expect(b.modelRequests.used).toBe(2);
    expect(b.inputTokens.estimated).toBe(1_800);
    expect(b.outputTokens.estimated).toBe(16_000);
  });
});

describe('no request before the backoff ends; after it, the retry (K7)', () => {
  it('given a refused request whose backoff ends at +1.5 s, when woken at +1 s, then nothing; at +1.5 s, then the retry, a new turn charged to the budget', () => {
    const h = failedTurn(run(), 1, 1, 1_500, 1_500);
    runtime.given(h).when(wake, at(1_000)).thenNothing();
    expect(retryWaitMs(h.facts, at(1_000))).toBe(500);
    runtime
      .given(h)
      .when(wake, at(1_500))
      .then([{ type: 'model.turn.requested', data: { turn: 2, model: 'm', retryOf: 1 } }]);
    expect(retryWaitMs(h.facts, at(1_500))).toBe(0);
    expect(budgetOf(h.add('model.turn.requested', 2, { turn: 2, model: 'm', retryOf: 1 }).facts).modelRequests.used).toBe(2);
  });

  it('given the research budget spent by failed requests with material and the reserve, when woken in the backoff, then nothing; after it, finalization', () => {
    const h = run(4).researched(1);
    failedTurn(h, 2, 1, 1_000, 1_000);
    failedTurn(h, 3, 2, 2_000, 3_000);
    runtime.given(h).when(wake, at(2_000)).thenNothing();
    runtime
      .given(h)
      .when(wake, at(3_000))
      .then([
        { type: 'run.finalization.started', data: expect.objectContaining({ reason: 'model-request-limit' }) },
        { type: 'model.turn.requested', data: expect.objectContaining({ turn: 4, purpose: 'finalization' }) },
      ]);
  });

  it('given the research budget spent by failed requests and nothing to answer from, when woken in the backoff, then it stops at once: a stop is not delayed', () => {
    const h = run(3);
    failedTurn(h, 1, 1, 1_000, 1_000);
    failedTurn(h, 2, 2, 2_000, 3_000);
    runtime
      .given(h)
      .when(wake, at(2_000))
      .then([
        {
          type: 'run.execution.finished',
          data: expect.objectContaining({ reason: 'model-request-limit', detail: expect.stringMatching(/no answer was produced/) }),
        },
      ]);
  });

  it('given a failure whose retry would start after the deadline, when woken, then no retry: the Run stops model-error naming the failure and the deadline', () => {
    const h = run(20);
    failedTurn(h, 1, 1, 1_000, 1_000);
    failedTurn(h, 2, 2, 2_000, 3_000);
    failedTurn(h, 3, 3, 58_000, 61_000); // past the deadline at +60 s
    expect(retryWaitMs(h.facts, at(3_000))).toBe(0); // the adapter does not wait for it
    runtime
      .given(h)
      .when(wake, at(3_000))
      .then([
        {
          type: 'run.execution.finished',
          data: expect.objectContaining({
            reason: 'model-error',
            detail: expect.stringMatching(
              /^turn 3 failed \(Connection error\. \(ECONNREFUSED\)\), 3 failed request\(s\) in a row; its retry.*after the deadline 2030-01-01T00:01:00/,
            ),
            answerTurn: null,
          }),
        },
      ]);
  });

  it('given a transient failure at the deadline, when it ends, then no backoff: the Run stops deadline (as before)', () => {
    const h = run().add('model.turn.requested', 1, { turn: 1, model: 'm' });
    runtime
      .given(h)
      .when(ended(1, { ok: false, error: refused }), at(61_000))
      .then([
        { type: 'model.turn.failed', data: { turn: 1, error: refused } },
        { type: 'run.execution.finished', data: expect.objectContaining({ reason: 'deadline' }) },
      ]);
  });
});
