/**
 * The runtime's advertised per-Run limits at their edges (K7; docs/operations.md,
 * docs/configuration.md): one below, at and one above each of `RUNPLANE_MAX_MODEL_REQUESTS`,
 * `RUNPLANE_MAX_OUTPUT_TOKENS`, `RUNPLANE_MAX_INPUT_TOKENS`, `RUNPLANE_RUN_DEADLINE_SECONDS`
 * (the deadline recorded at admission) and `RUNPLANE_WAIT_TTL_SECONDS` (capped by the deadline).
 */
import { afterEach, describe, expect, it, jest } from '@jest/globals';
import { decide } from '../src/decide.js';
import { ModelRateLimiter } from '../src/model-limiter.js';
import { estimateInputTokens } from '@runplane/run-facts';
import { spec } from '../../../test/support/decider-spec.js';
import { History } from '../../../test/support/history.js';

const runtime = spec(decide);
const wake = { type: 'Wake', model: 'm' } as const;
const NO_RESERVE = { finalOutputReserve: { modelRequests: 0, outputTokens: 0 } };
/** `n` turns whose requests failed with a 429: charged, fruitless, not the model's fault (no streak stop). */
const failedTurns = (h: History, n: number) => {
  for (let t = 1; t <= n; t++) {
    h.add('model.turn.requested', t, { turn: t, model: 'm' }).add('model.turn.failed', t, {
      turn: t,
      error: { kind: 'http', status: 429, message: 'slow down' },
    });
  }
  return h;
};
/** `n` research turns, each a tool call with its result: 5 completion tokens each (History's usage). */
const researched = (h: History, n: number) => {
  for (let t = 1; t <= n; t++) h.researched(t);
  return h;
};
const requested = (turn: number, extra: Record<string, unknown> = {}) =>
  ({ type: 'model.turn.requested', data: { turn, model: 'm', ...extra } }) as never;
const finished = (reason: string) => ({ type: 'run.execution.finished', data: { reason, detail: expect.any(String), answerTurn: null } }) as never;

describe('RUNPLANE_MAX_MODEL_REQUESTS: N model requests per Run, never N+1', () => {
  const limited = () => new History().admitted({ maxModelRequests: 3, limits: NO_RESERVE });
  it('given N-1 requests used, when woken, then the Nth is made', () => {
    runtime
      .given(failedTurns(limited(), 2))
      .when(wake)
      .then([requested(3, { retryOf: 2 })]);
  });
  it('given N requests used, when woken, then it stops model-request-limit', () => {
    runtime
      .given(failedTurns(limited(), 3))
      .when(wake)
      .then([finished('model-request-limit')]);
  });
  it("given N+1 recorded (a stale holder's request before its fence), when woken, then it still stops", () => {
    runtime
      .given(failedTurns(limited(), 4))
      .when(wake)
      .then([finished('model-request-limit')]);
  });
});

describe('RUNPLANE_MAX_OUTPUT_TOKENS: a request never asks for more than what is left; none when nothing is', () => {
  // two research turns of 5 completion tokens each: 10 used
  const spent = (limit: number) => researched(new History().admitted({ limits: { maxOutputTokens: limit, ...NO_RESERVE } }), 2);
  it('given 1 token left (limit 11), when woken, then the next request asks for exactly 1', () => {
    runtime
      .given(spent(11))
      .when(wake)
      .then([requested(3, { maxTokens: 1 })]);
  });
  it('given 0 left (limit 10: used exactly), when woken, then it stops token-limit', () => {
    runtime
      .given(spent(10))
      .when(wake)
      .then([finished('token-limit')]);
  });
  it('given 1 over (limit 9: a reply that overshot), when woken, then it stops token-limit', () => {
    runtime
      .given(spent(9))
      .when(wake)
      .then([finished('token-limit')]);
  });
});

describe('RUNPLANE_MAX_INPUT_TOKENS: the next request is sent only when its estimate fits', () => {
  const estimate = estimateInputTokens(new History().admitted().facts);
  const limited = (limit: number) => new History().admitted({ limits: { maxInputTokens: limit, ...NO_RESERVE } });
  it('given a limit one above the estimate, or exactly the estimate, when woken, then turn 1 is requested', () => {
    runtime
      .given(limited(estimate + 1))
      .when(wake)
      .then([requested(1, { inputTokensEstimate: estimate })]);
    runtime
      .given(limited(estimate))
      .when(wake)
      .then([requested(1, { inputTokensEstimate: estimate })]);
  });
  it('given a limit one below the estimate, when woken, then it stops token-limit before sending anything', () => {
    runtime
      .given(limited(estimate - 1))
      .when(wake)
      .then([finished('token-limit')]);
  });
});

describe('the Run deadline: nothing new starts at or after it', () => {
  const deadlineAt = '2026-01-01T00:10:00.000Z';
  const h = () => new History().admitted({ deadlineAt, limits: NO_RESERVE });
  it('1 ms before: the request is made; at it and 1 ms after: it stops deadline', () => {
    runtime
      .given(h())
      .when(wake, new Date(Date.parse(deadlineAt) - 1))
      .then([requested(1)]);
    runtime
      .given(h())
      .when(wake, new Date(deadlineAt))
      .then([finished('deadline')]);
    runtime
      .given(h())
      .when(wake, new Date(Date.parse(deadlineAt) + 1))
      .then([finished('deadline')]);
  });
});

describe("RUNPLANE_WAIT_TTL_SECONDS: a question stays answerable for the TTL, never past the Run's deadline", () => {
  // the turn that asks completes at History's clock (seq 3 -> 23:00:03); TTL 60 s -> 23:01:03
  const asked = (deadlineAt: string) =>
    new History()
      .admitted({ tools: ['list_funds', 'ask_human'], deadlineAt })
      .turn(1, { calls: [{ id: 'q', name: 'ask_human', args: '{"question":"Which?"}' }] });
  const opened = (expiresAt: string) => ({ type: 'wait.opened', data: expect.objectContaining({ toolCallId: 'q', expiresAt }) }) as never;
  const ttlEnd = '2025-12-31T23:01:03.000Z';
  it.each([
    ['1 ms after the TTL ends', '2025-12-31T23:01:03.001Z', ttlEnd],
    ['exactly when the TTL ends', ttlEnd, ttlEnd],
    ['1 ms before the TTL ends', '2025-12-31T23:01:02.999Z', '2025-12-31T23:01:02.999Z'],
  ])('given the deadline %s, then the wait expires at the earlier of the two', (_name, deadlineAt, expiresAt) => {
    runtime
      .given(asked(deadlineAt))
      .when({ ...wake, waitTtlMs: 60_000 }, new Date('2025-12-31T23:00:04.000Z'))
      .then([opened(expiresAt)]);
  });
});

describe('RUNPLANE_MODEL_MAX_CONCURRENT and RUNPLANE_MODEL_MIN_INTERVAL_MS: the shared limiter at its edges', () => {
  afterEach(() => {
    jest.useRealTimers();
  });

  it('given a concurrency of 2, the first 2 requests run at once and the 3rd starts only when one ends', async () => {
    const limiter = new ModelRateLimiter({ maxConcurrent: 2 });
    const gates: (() => void)[] = [];
    const started: number[] = [];
    let running = 0;
    let most = 0;
    const job = (i: number) => async () => {
      started.push(i);
      most = Math.max(most, ++running);
      await new Promise<void>((resolve) => gates.push(resolve));
      running--;
      return i;
    };
    const far = Date.now() + 60_000;
    const results = [1, 2, 3].map((i) => limiter.schedule(job(i), far, () => -1));
    const until = async (cond: () => boolean) => {
      for (const end = Date.now() + 10_000; !cond();) {
        if (Date.now() > end) throw new Error('timed out waiting for the limiter');
        await new Promise((r) => setImmediate(r));
      }
    };
    await until(() => started.length === 2);
    // the third waits while two are in flight (it is queued, not started, however long we look)
    for (let k = 0; k < 50; k++) await new Promise((r) => setImmediate(r));
    expect(started).toEqual([1, 2]);
    gates.shift()!();
    await until(() => started.length === 3);
    // release the rest (the second and the third)
    for (const release of gates.splice(0)) release();
    expect(await Promise.all(results)).toEqual([1, 2, 3]);
    expect(most).toBe(2);
  });

  it('given room under the limits, a request starts without waiting for any timer to fire', async () => {
    // every timer of the process held (promise jobs still run): a limiter that schedules its starts
    // through timers (as bottleneck did, about 5 ms per request) would never start the jobs here
    jest.useFakeTimers({ doNotFake: ['queueMicrotask', 'nextTick'] });
    for (const limiter of [new ModelRateLimiter({ maxConcurrent: 2 }), new ModelRateLimiter({ maxConcurrent: 2, minIntervalMs: 200 })]) {
      let started = 0;
      const result = limiter.schedule(
        async () => {
          started++;
          return 'sent';
        },
        Date.now() + 60_000,
        () => 'late',
      );
      for (let k = 0; k < 20 && started === 0; k++) await Promise.resolve();
      expect(started).toBe(1);
      expect(await result).toBe('sent');
    }
  });

  /**
   * A limiter of one slot, held by a first request until `release()`, and a second request
   * scheduled behind it (its deadline and signal as given); `sent` says whether the second ran.
   */
  const behindBusySlot = (deadlineMs: number, signal?: AbortSignal) => {
    const limiter = new ModelRateLimiter({ maxConcurrent: 1 });
    let release!: () => void;
    const busy = limiter.schedule(
      () => new Promise<string>((resolve) => (release = () => resolve('first'))),
      Date.now() + 60_000,
      () => 'late',
    );
    const second = { limiter, busy, release: () => release(), sent: false, queued: Promise.resolve('') };
    second.queued = limiter.schedule(
      async () => {
        second.sent = true;
        return 'sent';
      },
      deadlineMs,
      () => 'late',
      signal,
    );
    return second;
  };

  it('given every slot busy, a request whose deadline passes in the queue is answered late then, unsent, not when a slot frees', async () => {
    const t = behindBusySlot(Date.now() + 100);
    // answered while the first request still holds the only slot
    expect(await t.queued).toBe('late');
    t.release();
    expect(await t.busy).toBe('first');
    expect(t.sent).toBe(false);
  });

  it('given every slot busy, a request whose caller aborts while it waits is answered at once, unsent', async () => {
    const abort = new AbortController();
    const t = behindBusySlot(Date.now() + 60_000, abort.signal);
    abort.abort();
    expect(await t.queued).toBe('late');
    t.release();
    expect(await t.busy).toBe('first');
    // the slot it would have taken is free for the next request, which runs
    expect(
      await t.limiter.schedule(
        async () => 'next',
        Date.now() + 60_000,
        () => 'late',
      ),
    ).toBe('next');
    expect(t.sent).toBe(false);
  });

  it('given a minimum interval and a pause, the requests the pause held start that far apart when it ends, not together', async () => {
    const limiter = new ModelRateLimiter({ maxConcurrent: 3, minIntervalMs: 100 });
    const pauseEnd = Date.now() + 300;
    limiter.pauseUntil(pauseEnd);
    const starts: number[] = [];
    const far = Date.now() + 60_000;
    await Promise.all(
      [1, 2, 3, 4].map(() =>
        limiter.schedule(
          async () => starts.push(Date.now()),
          far,
          () => -1,
        ),
      ),
    );
    starts.sort((a, b) => a - b);
    expect(starts).toHaveLength(4);
    // the limiter lets the first through when the pause ends and each next one no earlier than 100
    // ms after the one before, so the k-th (from 0) no earlier than 100·k ms after the pause's end;
    // measured from there, not between two jobs' own clocks: on a loaded machine a job's clock may
    // read some milliseconds after it was let through (a collection, the process descheduled), which
    // only makes it later here, but made one gap between two jobs' clocks 92 ms in a CI rehearsal
    // (a timer may fire a few milliseconds early: 5 ms of slack)
    starts.forEach((at, k) => expect(at - pauseEnd).toBeGreaterThanOrEqual(100 * k - 5));
  });

  it('given a minimum interval, two request starts are at least that far apart', async () => {
    const limiter = new ModelRateLimiter({ maxConcurrent: 8, minIntervalMs: 200 });
    const scheduledAt = Date.now();
    const far = scheduledAt + 60_000;
    const starts = await Promise.all(
      [1, 2].map(() =>
        limiter.schedule(
          async () => Date.now(),
          far,
          () => -1,
        ),
      ),
    );
    // the limiter spaces its own starts: the second may start no earlier than 200 ms after the first
    // was let through, which was no earlier than the scheduling (the first job's own clock may read
    // later than its start on a loaded machine, so the gap between the two jobs' clocks can be less)
    expect(starts[1]! - scheduledAt).toBeGreaterThanOrEqual(195); // timer granularity
  });
});
