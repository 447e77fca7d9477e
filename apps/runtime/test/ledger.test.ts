/**
 * The budget ledger (K7) and finalization-only (K9), given/when/then on the runtime's decider:
 * every request is reserved and charged (retries included), unknown usage is a flagged estimate,
 * research stops at limits minus the final-output reserve, the reserve buys exactly one last
 * request without tools, a Run that makes no progress stops reporting no answer, and a child's
 * grant carves tokens out of what research has left. Also the shared limiter and `Retry-After`.
 */
import { describe, expect, it } from '@jest/globals';
import { decide, type ModelTurnResult } from '../src/decide.js';
import { asDecided, finalizationInstruction, MAX_FRUITLESS_TURNS } from '../src/ledger.js';
import { ModelRateLimiter, retryAfterMs } from '../src/model-limiter.js';
import { planCalls } from '../src/parking.js';
import { budgetOf, estimateInputTokens, foldRun } from '@runplane/run-facts';

/** The facts of `h` without its last `n` events (what a decision read before it appended them). */
const foldWithout = (h: History, n: number) => foldRun(h.runId, h.events.slice(0, -n));
import { spec } from '../../../test/support/decider-spec.js';
import { History } from '../../../test/support/history.js';

const runtime = spec(decide);
const wake = { type: 'Wake', model: 'm' } as const;
const ended = (turn: number, result: ModelTurnResult) => ({ type: 'ModelTurnEnded', turn, result }) as const;
const RESERVE = { finalOutputReserve: { modelRequests: 1, outputTokens: 200 } };
const rateLimited = (h: History, turn: number, extra: Record<string, unknown> = {}) =>
  h
    .add('model.turn.requested', turn, { turn, model: 'm', ...extra })
    .add('model.turn.failed', turn, { turn, error: { kind: 'http', status: 429, message: 'slow down', retryAfterMs: 1000 } });
const finishedWith = (reason: string, detail: unknown = expect.any(String)) =>
  ({ type: 'run.execution.finished', data: { reason, detail, answerTurn: null } }) as never;

describe('the ledger fold: measured, estimated, reserved, carved (K7)', () => {
  it('given turns with and without usage, then tokens are measured where reported and a flagged estimate elsewhere, never 0 measured', () => {
    const h = new History().admitted({ limits: { maxInputTokens: 10_000, maxOutputTokens: 1_000, ...RESERVE } });
    h.turn(1, { content: 'x' }); // usage 10/5 (History's default)
    h.add('model.turn.requested', 2, { turn: 2, model: 'm', maxTokens: 800, inputTokensEstimate: 700 });
    h.add('model.turn.completed', 2, { turn: 2, content: 'a'.repeat(40), toolCalls: [], finishReason: 'stop', usage: null });
    rateLimited(h, 3, { maxTokens: 790, inputTokensEstimate: 710 }); // an HTTP error: nothing generated, input estimate only
    h.add('model.turn.requested', 4, { turn: 4, model: 'm', maxTokens: 780, inputTokensEstimate: 720 }); // in flight: its reservation
    const b = budgetOf(h.facts);
    expect(b.unknownUsageTurns).toBe(3);
    expect(b.inputTokens).toMatchObject({ measured: 10, estimated: 700 + 710 + 720, limit: 10_000 });
    expect(b.outputTokens).toMatchObject({ measured: 5, estimated: 10 + 0 + 780, reserve: 200, limit: 1_000 });
    expect(b.outputTokens.researchLeft).toBe(1_000 - 200 - (5 + 790));
    expect(b.modelRequests).toMatchObject({ used: 4, limit: 8, reserve: 1, researchLeft: 3 });
  });

  it('given a Run without token limits, then the token lines have no limit and nothing is reserved', () => {
    const b = budgetOf(new History().admitted().turn(1, { content: 'x' }).facts);
    expect(b.inputTokens.limit).toBeNull();
    expect(b.outputTokens.researchLeft).toBeNull();
    expect(b.modelRequests.reserve).toBe(0);
  });
});

describe('runtime decide: every request is reserved and charged (K7)', () => {
  it('given token limits and a reserve, when woken, then turn 1 sends max_tokens = output limit minus reserve, with its input estimate', () => {
    const h = new History().admitted({ limits: { maxInputTokens: 50_000, maxOutputTokens: 1_000, ...RESERVE } });
    runtime
      .given(h)
      .when(wake)
      .then([{ type: 'model.turn.requested', data: { turn: 1, model: 'm', maxTokens: 800, inputTokensEstimate: estimateInputTokens(h.facts) } }]);
  });

  it("given the runtime's per-request cap (what the model accepts), when woken, then max_tokens is the smaller of the cap and what remains", () => {
    const h = new History().admitted({ limits: { maxOutputTokens: 64_000, ...RESERVE } });
    runtime
      .given(h)
      .when({ ...wake, maxTokensPerRequest: 16_384 })
      .then([{ type: 'model.turn.requested', data: { turn: 1, model: 'm', maxTokens: 16_384 } }]);
    runtime
      .given(new History().admitted({ limits: { maxOutputTokens: 1_000, ...RESERVE } }))
      .when({ ...wake, maxTokensPerRequest: 16_384 })
      .then([{ type: 'model.turn.requested', data: { turn: 1, model: 'm', maxTokens: 800 } }]);
  });

  it('given a 429 on turn 1, when woken, then a NEW turn retries it (retryOf), charged: its max_tokens is what remains', () => {
    const h = new History().admitted({ limits: { maxOutputTokens: 1_000, ...RESERVE } });
    rateLimited(h, 1, { maxTokens: 800 });
    runtime
      .given(h)
      .when(wake)
      .then([{ type: 'model.turn.requested', data: { turn: 2, model: 'm', maxTokens: 800, retryOf: 1 } }]);
  });

  it('given 4 model requests with a reserve of 1 and 3 rate-limited turns (no material), when woken, then it stops naming the budget: no 4th research request', () => {
    const h = new History().admitted({ maxModelRequests: 4, limits: RESERVE });
    for (const t of [1, 2, 3]) rateLimited(h, t);
    runtime
      .given(h)
      .when(wake)
      .then([
        finishedWith(
          'model-request-limit',
          expect.stringMatching(/3 of 4 model requests used; research budget spent \(1 kept for finalization\); no answer was produced/),
        ),
      ]);
  });

  it('given 4 model requests with a reserve of 1 and 2 rate-limited turns, when woken, then the 3rd research request is still made', () => {
    const h = new History().admitted({ maxModelRequests: 4, limits: RESERVE });
    for (const t of [1, 2]) rateLimited(h, t);
    runtime
      .given(h)
      .when(wake)
      .then([{ type: 'model.turn.requested', data: { turn: 3, model: 'm', retryOf: 2 } }]);
  });

  it('given the research output tokens spent and no reserve, when woken, then it stops with token-limit', () => {
    const h = new History().admitted({ limits: { maxOutputTokens: 5 } });
    h.researched(1); // 5 completion tokens measured
    runtime
      .given(h)
      .when(wake)
      .then([finishedWith('token-limit', expect.stringMatching(/research output token budget spent: 5/))]);
  });

  it('given an input limit the next request would pass, when woken, then it stops with token-limit before sending it', () => {
    const h = new History().admitted({ limits: { maxInputTokens: 100 } });
    runtime
      .given(h)
      .when(wake)
      .then([finishedWith('token-limit', expect.stringMatching(/exceeds 100/))]);
  });

  it(`given ${MAX_FRUITLESS_TURNS} empty replies in a row and budget left, when woken, then it stops no-progress, reporting that no answer was produced (K9)`, () => {
    const h = new History().admitted({ maxModelRequests: 10 });
    for (let t = 1; t <= MAX_FRUITLESS_TURNS; t++) h.turn(t, { content: ' ' });
    runtime
      .given(h)
      .when(wake)
      .then([finishedWith('no-progress', expect.stringMatching(/^no answer was produced: 3 replies in a row made no progress/))]);
  });

  it(`given ${MAX_FRUITLESS_TURNS} empty replies with rate-limited requests between them, when woken, then the failed requests are skipped, not counted: no-progress`, () => {
    const h = new History().admitted({ maxModelRequests: 10 });
    h.turn(1, { content: '' });
    rateLimited(h, 2);
    h.turn(3, { content: '' });
    h.turn(4, { content: '', finishReason: 'length' });
    runtime
      .given(h)
      .when(wake)
      .then([finishedWith('no-progress')]);
    const onlyFailures = new History().admitted({ maxModelRequests: 10 });
    for (const t of [1, 2, 3, 4]) rateLimited(onlyFailures, t);
    runtime
      .given(onlyFailures)
      .when(wake)
      .then([{ type: 'model.turn.requested', data: { turn: 5, model: 'm', retryOf: 4 } }]);
  });

  it('given empty replies interrupted by a turn with a valid tool call, when woken, then the streak restarts: it retries', () => {
    const h = new History().admitted({ maxModelRequests: 10 });
    h.turn(1, { content: '' });
    h.researched(2);
    h.turn(3, { content: '' });
    h.turn(4, { content: '' });
    runtime
      .given(h)
      .when(wake)
      .then([{ type: 'model.turn.requested', data: { turn: 5, model: 'm', retryOf: 4 } }]);
  });
});

describe('runtime decide: finalization-only, one way (K7, K9)', () => {
  const spent = () => {
    const h = new History().admitted({ maxModelRequests: 4, limits: { maxOutputTokens: 10_000, ...RESERVE } });
    for (const t of [1, 2, 3]) h.researched(t);
    return h;
  };

  it('given research used its 3 requests (reserve 1) with material, when woken, then finalization starts and ONE request without tools is made, bounded by the reserve', () => {
    runtime
      .given(spent())
      .when(wake)
      .then([
        {
          type: 'run.finalization.started',
          data: {
            reason: 'model-request-limit',
            detail: expect.stringMatching(/3 of 4 model requests used/),
            unfinished: [{ part: 'research not finished', reason: expect.stringMatching(/ordinary research stopped/) }],
          },
        } as never,
        { type: 'model.turn.requested', data: { turn: 4, model: 'm', maxTokens: 200, purpose: 'finalization' } },
      ]);
  });

  const finalizing = () => {
    const h = spent();
    h.add('run.finalization.started', 'finalization', {
      reason: 'model-request-limit',
      detail: '3 of 4 model requests used',
      unfinished: [{ part: 'research not finished', reason: 'budget' }],
    });
    return h.add('model.turn.requested', 4, { turn: 4, model: 'm', maxTokens: 200, purpose: 'finalization' });
  };

  it('given the finalization recorded with its request, then the request tells the model the recorded reason, not a spent budget by default', () => {
    const h = finalizing();
    const appended = h.events.slice(-2); // run.finalization.started and model.turn.requested, one batch
    const decidedFrom = foldWithout(h, 2);
    expect(decidedFrom.finalization).toBeNull();
    const said = finalizationInstruction(asDecided(decidedFrom, appended)).content;
    expect(said).toContain('Research has stopped: model-request-limit (3 of 4 model requests used)');
    expect(said).not.toContain('its budget is spent');
  });

  it('given the finalization request in flight, when it answers, then the answer stops the Run listing the unfinished scope (settles partial)', () => {
    runtime
      .given(finalizing())
      .when(ended(4, { ok: true, turn: { content: 'From what I have: SPY holds AAPL.', toolCalls: [], finishReason: 'stop', usage: null } }))
      .then([
        { type: 'model.turn.completed', data: expect.objectContaining({ turn: 4 }) },
        {
          type: 'run.execution.finished',
          data: {
            reason: 'answered',
            detail: 'finalization answer in turn 4',
            answerTurn: 4,
            unfinished: [{ part: 'research not finished', reason: 'budget' }],
          },
        },
      ]);
  });

  it('given the finalization request in flight, when it asks for tools, then nothing is proposed: its text is the answer (no return to research)', () => {
    const calls = [{ toolCallId: 'x', name: 'get_holdings', argumentsText: '{}' }];
    runtime
      .given(finalizing())
      .when(ended(4, { ok: true, turn: { content: 'Partial answer.', toolCalls: calls, finishReason: 'tool_calls', usage: null } }))
      .then([
        { type: 'model.turn.completed', data: expect.objectContaining({ turn: 4 }) },
        expect.objectContaining({ type: 'run.execution.finished', data: expect.objectContaining({ reason: 'answered', answerTurn: 4 }) }) as never,
      ]);
  });

  it('given the finalization request in flight, when it fails with a 429, then the Run stops (the reserve is not retried)', () => {
    runtime
      .given(finalizing())
      .when(ended(4, { ok: false, error: { kind: 'http', status: 429, message: 'slow down' } }))
      .then([
        { type: 'model.turn.failed', data: expect.objectContaining({ turn: 4 }) },
        finishedWith('model-error', expect.stringMatching(/^finalization turn 4/)),
      ]);
  });

  it('given an empty finalization reply recorded (a crash before the stop), when woken, then it stops without an answer and never requests again', () => {
    const h = finalizing().add('model.turn.completed', 4, { turn: 4, content: '', toolCalls: [], finishReason: 'stop', usage: null });
    runtime
      .given(h)
      .when(wake)
      .then([finishedWith('empty-output', expect.stringMatching(/^finalization turn 4 returned no text; research had stopped/))]);
  });

  it('given finalization started but its request not recorded (a crash between appends), when woken, then the one finalization request is made', () => {
    const h = spent().add('run.finalization.started', 'finalization', {
      reason: 'model-request-limit',
      detail: 'x',
      unfinished: [{ part: 'research not finished', reason: 'budget' }],
    });
    runtime
      .given(h)
      .when(wake)
      .then([{ type: 'model.turn.requested', data: { turn: 4, model: 'm', maxTokens: 200, purpose: 'finalization' } }]);
  });

  it('given the deadline closer than the finalization lead, material and the reserve, when woken, then finalization starts (deadline) instead of more research', () => {
    const h = new History().admitted({ deadlineAt: '2026-01-01T00:01:00.000Z', limits: RESERVE });
    h.researched(1);
    const lead = { ...wake, finalizationLeadMs: 60_000 };
    const [started, request] = runtime
      .given(h)
      .when(lead, new Date('2026-01-01T00:00:30.000Z'))
      .then([
        expect.objectContaining({ type: 'run.finalization.started' }) as never,
        expect.objectContaining({ type: 'model.turn.requested' }) as never,
      ]);
    expect(started!.data).toMatchObject({ reason: 'deadline', detail: expect.stringMatching(/^30 s left before the deadline/) });
    expect(request!.data).toMatchObject({ turn: 2, purpose: 'finalization' });
    // further from the deadline, research goes on
    runtime
      .given(h)
      .when(lead, new Date('2025-12-31T23:58:00.000Z'))
      .then([{ type: 'model.turn.requested', data: { turn: 2, model: 'm' } }]);
  });

  it('given a short Run (2 minutes), when woken, then the lead is at most a quarter of its time: 41 s before the deadline it still researches, 16 s before it finalizes', () => {
    const h = new History().admitted({ deadlineAt: '2025-12-31T23:02:01.000Z', limits: RESERVE }); // admitted 23:00:01
    h.researched(1);
    const lead = { ...wake, finalizationLeadMs: 60_000 };
    runtime
      .given(h)
      .when(lead, new Date('2025-12-31T23:01:20.000Z'))
      .then([{ type: 'model.turn.requested', data: { turn: 2, model: 'm' } }]);
    runtime
      .given(h)
      .when(lead, new Date('2025-12-31T23:01:45.000Z'))
      .then([
        expect.objectContaining({ type: 'run.finalization.started' }) as never,
        expect.objectContaining({ type: 'model.turn.requested' }) as never,
      ]);
  });

  it('given the deadline close but no material yet (or no reserve), when woken, then research goes on: nothing to finalize from', () => {
    const lead = { ...wake, finalizationLeadMs: 60_000 };
    const at = new Date('2026-01-01T00:00:30.000Z');
    runtime
      .given(new History().admitted({ deadlineAt: '2026-01-01T00:01:00.000Z', limits: RESERVE }))
      .when(lead, at)
      .then([{ type: 'model.turn.requested', data: { turn: 1, model: 'm' } }]);
    runtime
      .given(new History().admitted({ deadlineAt: '2026-01-01T00:01:00.000Z' }).researched(1))
      .when(lead, at)
      .then([{ type: 'model.turn.requested', data: { turn: 2, model: 'm' } }]);
  });

  it('given the output tokens for research spent but the reserve left, when woken, then finalization starts with token-limit', () => {
    const h = new History().admitted({ limits: { maxOutputTokens: 205, ...RESERVE } });
    h.researched(1); // 5 measured: 205 - 200 reserve - 5 = 0 left for research
    const [started, request] = runtime
      .given(h)
      .when(wake)
      .then([
        expect.objectContaining({ type: 'run.finalization.started' }) as never,
        expect.objectContaining({ type: 'model.turn.requested' }) as never,
      ]);
    expect(started!.data).toMatchObject({ reason: 'token-limit' });
    expect(request!.data).toMatchObject({ purpose: 'finalization', maxTokens: 200 });
  });
});

describe('the deadline bounds a model request, and a request never sent costs nothing (K7)', () => {
  const deadlineAt = '2030-01-01T00:00:40.000Z';
  const past = new Date('2030-01-01T00:00:41.000Z');
  const before = new Date('2030-01-01T00:00:20.000Z');
  const limited = () => new History().admitted({ deadlineAt, limits: { maxInputTokens: 100_000, maxOutputTokens: 20_000, ...RESERVE } });
  const notSent = { kind: 'not-sent', status: null, message: "not sent: the rate-limit pause (3599959 ms) ends after the Run's deadline" } as const;

  it('given turn 2 requested with a 16000-token reservation, when it was never sent (pause beyond the deadline), then it is recorded not-sent and the Run stops deadline, not token-limit', () => {
    const h = limited().turn(1, { content: '' });
    h.add('model.turn.requested', 2, { turn: 2, model: 'm', maxTokens: 16_000, inputTokensEstimate: 900 });
    runtime
      .given(h)
      .when(ended(2, { ok: false, error: notSent }), before)
      .then([
        { type: 'model.turn.failed', data: { turn: 2, error: notSent } },
        finishedWith('deadline', expect.stringMatching(/turn 2 was never sent to the model .*rate-limit pause.*deadline 2030-01-01T00:00:40/)),
      ]);
  });

  it('given a not-sent turn recorded, then the ledger charges it nothing: no tokens, no model request, no unknown usage', () => {
    const h = limited().turn(1, { content: '' }); // usage 10/5
    h.add('model.turn.requested', 2, { turn: 2, model: 'm', maxTokens: 16_000, inputTokensEstimate: 900 });
    h.add('model.turn.failed', 2, { turn: 2, error: notSent });
    const b = budgetOf(h.facts);
    expect(b.modelRequests.used).toBe(1);
    expect(b.unknownUsageTurns).toBe(0);
    expect(b.outputTokens).toMatchObject({ measured: 5, estimated: 0 });
    expect(b.inputTokens).toMatchObject({ measured: 10, estimated: 0 });
  });

  it('given a research turn in flight, when it is cut by the deadline (timeout), then it is recorded failed timeout and the Run stops deadline: nothing new starts', () => {
    const h = limited().add('model.turn.requested', 1, { turn: 1, model: 'm', maxTokens: 16_000 });
    h.add('model.output.paragraph', '1/0', { turn: 1, index: 0, text: 'First.', sha256: 'a'.repeat(64) });
    const cut = { kind: 'timeout', status: null, message: "request cut after 20000 ms by the Run's deadline" } as const;
    runtime
      .given(h)
      .when(ended(1, { ok: false, error: cut }), past)
      .then([
        { type: 'model.turn.failed', data: { turn: 1, error: cut } },
        finishedWith('deadline', expect.stringMatching(/^turn 1 failed \(request cut after 20000 ms/)),
      ]);
  });

  it('given a turn cut by the model timeout before the deadline, when it ends, then it is only recorded: the next wake retries within budget', () => {
    const h = limited().add('model.turn.requested', 1, { turn: 1, model: 'm', maxTokens: 16_000 });
    const cut = { kind: 'timeout', status: null, message: 'request cut after 5000 ms by the model timeout' } as const;
    runtime
      .given(h)
      .when(ended(1, { ok: false, error: cut }), before)
      .then([
        { type: 'model.turn.failed', data: expect.objectContaining({ turn: 1, error: cut, retry: expect.objectContaining({ failuresInARow: 1 }) }) },
      ]);
    h.add('model.turn.failed', 1, { turn: 1, error: cut });
    runtime
      .given(h)
      .when(wake, before)
      .then([{ type: 'model.turn.requested', data: expect.objectContaining({ turn: 2, retryOf: 1 }) }]);
    runtime
      .given(h)
      .when(wake, past)
      .then([finishedWith('deadline')]);
  });

  it('given the finalization request cut by the deadline, when it ends, then the Run stops deadline (not model-error)', () => {
    const h = limited();
    h.researched(1);
    h.add('run.finalization.started', 'finalization', {
      reason: 'deadline',
      detail: '5 s left',
      unfinished: [{ part: 'research not finished', reason: 'x' }],
    });
    h.add('model.turn.requested', 2, { turn: 2, model: 'm', maxTokens: 200, purpose: 'finalization' });
    const cut = { kind: 'timeout', status: null, message: "request cut after 5000 ms by the Run's deadline" } as const;
    runtime
      .given(h)
      .when(ended(2, { ok: false, error: cut }), past)
      .then([
        { type: 'model.turn.failed', data: { turn: 2, error: cut } },
        finishedWith('deadline', expect.stringMatching(/^finalization turn 2 failed/)),
      ]);
  });
});

describe("a child's grant carves tokens and keeps the parent's reserve (K7)", () => {
  it('given token limits and a reserve, when a turn spawns a child, then it gets half of what research has left, with a reserve out of its own share', () => {
    const h = new History().admitted({
      tools: ['list_funds', 'spawn_subagent'],
      maxModelRequests: 8,
      limits: { maxInputTokens: 10_000, maxOutputTokens: 2_000, ...RESERVE },
    });
    h.turn(1, { content: 'x' }); // 10 in / 5 out measured
    h.add('model.turn.requested', 2, { turn: 2, model: 'm' });
    const call = { toolCallId: 's', name: 'spawn_subagent', argumentsText: '{"question":"Q?"}' };
    const plan = planCalls(h.facts, 2, [call], new Date('2026-01-01T00:00:00.000Z')).get('s')!;
    expect(plan.kind).toBe('child');
    if (plan.kind !== 'child') return;
    // model requests: (8 - 1 reserve - 2 turns) / 2 = 2; tokens: half of research's remainder before turn 2
    expect(plan.limits).toMatchObject({
      maxModelRequests: 2,
      maxInputTokens: Math.floor((10_000 - 10) / 2),
      maxOutputTokens: Math.floor((2_000 - 200 - 5) / 2),
      finalOutputReserve: { modelRequests: 1, outputTokens: 200 },
    });
  });
});

describe('Retry-After and the shared per-model limiter (K7)', () => {
  it('reads Retry-After as delta-seconds, as an HTTP date, and retry-after-ms first', () => {
    const now = Date.parse('2026-01-01T00:00:00.000Z');
    expect(retryAfterMs({ 'retry-after': '2' }, now)).toBe(2_000);
    expect(retryAfterMs({ 'retry-after': '0' }, now)).toBe(0);
    expect(retryAfterMs({ 'retry-after': 'Thu, 01 Jan 2026 00:00:03 GMT' }, now)).toBe(3_000);
    expect(retryAfterMs(new Headers({ 'retry-after-ms': '150', 'retry-after': '9' }), now)).toBe(150);
    expect(retryAfterMs({ 'retry-after': 'soon' }, now)).toBeUndefined();
    expect(retryAfterMs({}, now)).toBeUndefined();
  });

  it('a pause delays every later request, and a request whose wait would pass its deadline is not sent', async () => {
    const limiter = new ModelRateLimiter({ maxConcurrent: 2 });
    limiter.pauseUntil(Date.now() + 300);
    const started = Date.now();
    const sent = await limiter.schedule(
      async () => Date.now() - started,
      Date.now() + 10_000,
      () => -1,
    );
    expect(sent).toBeGreaterThanOrEqual(280);
    limiter.pauseUntil(Date.now() + 5_000);
    const late = await limiter.schedule(
      async () => 'sent',
      Date.now() + 1_000,
      (wait) => `not sent (${wait > 0 ? 'pause' : 'deadline'})`,
    );
    expect(late).toBe('not sent (pause)');
  });
});
