/**
 * A Run whose deadline passes while nobody executes it (K10): with the runtime stopped, an
 * admitted Run is fenced by recovery at its deadline and settled `failed` by the lifecycle with
 * the deadline reason, exactly once, even though recovery itself restarted before the deadline
 * (the deadline is kept in the `<prefix>_deadlines` bucket, not in memory); a runtime started
 * afterwards does not execute it. Its own stack: the short Run deadline applies to every Run of
 * the stack, which the slow model turns of recovery.test.ts would not survive.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Kvm } from '@nats-io/kv';
import type { RunEvent, StoredEvent } from '@runplane/contracts';
import { reportRow } from '../support/faults.js';
import { eventually, settledProjection, startTestStack, type TestStack } from '../support/stack.js';

const LEASE_TTL_MS = 1_500;
// long enough for recovery to be stopped and started again before it passes on a loaded 2-core machine
// (at 6 s the restart outlasted it by 0.4 s in CI, beside the suite's other workers)
const DEADLINE_SECONDS = 10;
let t: TestStack;

beforeAll(async () => {
  t = await startTestStack('deadl', {
    RUNPLANE_LEASE_TTL_MS: String(LEASE_TTL_MS),
    RUNPLANE_RECOVERY_SWEEP_MS: '100',
    RUNPLANE_ACK_WAIT_MS: '2000',
    RUNPLANE_RUN_DEADLINE_SECONDS: String(DEADLINE_SECONDS),
  });
}, 120_000);
afterAll(async () => {
  await t?.stop();
});

const ofType = <T extends RunEvent['type']>(events: StoredEvent[], type: T) =>
  events.filter((e) => e.event.type === type).map((e) => e.event as Extract<RunEvent, { type: T }>);

/** Resolves at the wall-clock moment `at` (ms since the epoch), at once when it has passed. */
const sleepUntil = (at: number) => new Promise((r) => setTimeout(r, Math.max(0, at - Date.now())));

/**
 * The Runs of the two cases that wait for a live runtime's deadline, admitted together on first use
 * (by the first case, once its runtime is back) so their deadlines run out at the same time as the
 * first case's last wait (each case checks only its own Run); resolves with the run id and the
 * moment before its admission, per key.
 */
let deadlineRuns: Promise<Record<'held' | 'streaming', { key: string; runId: string; admittedAt: number }>> | null = null;
function startDeadlineRuns() {
  deadlineRuns ??= (async () => {
    const held = `held-${t.tag}`;
    await t.setScenario({ steps: [{ reply: { content: `the late answer of ${held}` }, delayMs: DEADLINE_SECONDS * 1000 + 3 * LEASE_TTL_MS }] }, held);
    const streaming = `streaming-${t.tag}`;
    const paragraphs = Array.from({ length: STREAMED_PARAGRAPHS }, (_, i) => `Paragraph ${i + 1} of ${streaming}.`);
    // headers at once, then a paragraph a second: 19 s of streaming, well past the 10 s deadline (the client's own timeout covers only the headers)
    await t.setScenario({ steps: [{ reply: { content: paragraphs.join('\n\n') }, paragraphDelayMs: 1_000 }] }, streaming);
    const post = async (key: string) => {
      const admittedAt = Date.now();
      const { body } = await t.client.postMessage(`conv-deadline-${key}`, { clientMessageId: key, content: `[${key}] What does DIA hold?` });
      return { key, runId: body.runId, admittedAt };
    };
    const [h, s] = await Promise.all([post(held), post(streaming)]);
    return { held: h, streaming: s };
  })();
  return deadlineRuns;
}
const STREAMED_PARAGRAPHS = 20;

async function modelRequestsFor(key: string): Promise<number> {
  const res = await fetch(`${t.stack.modelUrl.replace(/\/v1$/, '/_scripted')}/stats`);
  const body = (await res.json()) as { perKey?: Record<string, number> };
  return body.perKey?.[key] ?? 0;
}

describe('a deadline passing while nobody executes the Run (K10)', () => {
  it('with no runtime running, the Run is fenced at its deadline and settled failed with the reason, once, across a recovery restart; a runtime started later does not execute it', async () => {
    const key = `deadline-${t.tag}`;
    const deadlines = await new Kvm(t.log.nc).open(`${t.env.RUNPLANE_SUBJECT_PREFIX}_deadlines`);
    await t.stack.stopService('runtime');
    try {
      const { body } = await t.client.postMessage('conv-deadline', { clientMessageId: key, content: `[${key}] What does DIA hold?` });
      const admittedAt = Date.now();
      const admitted = ofType(await t.log.readRun(body.runId), 'run.admitted')[0]!;
      const deadlineAt = admitted.data.limits.deadlineAt;
      // recovery recorded the deadline durably
      await eventually(async () => ((await deadlines.get(body.runId))?.operation === 'PUT' ? true : null), 5_000, 'the deadline entry');
      expect((await deadlines.get(body.runId))!.json()).toEqual({ deadlineAt });

      // recovery restarts: the process that saw the admission is gone before the deadline, so the fence must
      // come from the new process, which knows the deadline only from the bucket (how long the new one takes
      // to start on a loaded machine does not matter to that)
      await t.stack.stopService('recovery');
      expect(Date.now()).toBeLessThan(Date.parse(deadlineAt)); // the old recovery really was gone before the deadline
      await t.stack.startService('recovery');

      const events = await t.waitForSettlement(body.runId, 30_000);
      const settleMs = Date.now() - admittedAt;
      const settled = ofType(events, 'run.settled');
      expect(settled).toHaveLength(1);
      expect(settled[0]!.data.outcome).toBe('failed');
      expect(settled[0]!.data.reason).toMatch(/deadline passed while nobody executed the Run/);
      expect(settled[0]!.data.reason).toContain(deadlineAt);
      const fences = ofType(events, 'run.fenced');
      expect(fences.map((f) => f.data.fencedSubject).sort()).toEqual(['runtime', 'tools']);
      expect(fences.every((f) => f.data.reason === 'deadline' && f.data.epoch === 0 && f.data.holder === null)).toBe(true);
      expect(ofType(events, 'model.turn.requested')).toHaveLength(0);
      // a generous bound: the deadline, plus the lease TTL (1.5 s) as grace, plus a 0.1 s sweep
      expect(settleMs).toBeLessThan(DEADLINE_SECONDS * 1000 + 10_000);
      reportRow({
        fault: `deadline (${DEADLINE_SECONDS} s) passes while no runtime runs (time counted from the deadline)`,
        runs: 1,
        settled: '1 x failed (deadline)',
        duplicates: 0,
        lost: 0,
        settleMs: settleMs - DEADLINE_SECONDS * 1000,
      });
      // the entry is forgotten once the Run is fenced
      await eventually(async () => ((await deadlines.get(body.runId))?.operation === 'PUT' ? null : true), 5_000, 'the deadline entry forgotten');

      // a runtime started afterwards receives run.admitted but does not execute the Run (checked 2 lease
      // TTLs after its start, while the next Run below runs on it)
      await t.stack.startService('runtime');
      const runtimeStartedAt = Date.now();
      // the two cases below admit their Runs now, on this runtime, so their deadlines run out while this case waits for the next Run's
      startDeadlineRuns().catch(() => {}); // a failure to admit them is reported by those cases

      // a Run that completes well within its deadline is not touched, and its entry is forgotten (one scripted
      // turn, no tools: a full research Run took more than the 10 s deadline in CI beside the suite's other workers)
      const nextKey = `${key}-next`;
      await t.setScenario({ steps: [{ reply: { content: `the quick answer of ${nextKey}` } }] }, nextKey);
      const next = await t.client.postMessage('conv-deadline', { clientMessageId: nextKey, content: `[${nextKey}] What does DIA hold?` });
      const nextEvents = await t.waitForSettlement(next.body.runId, 60_000);
      expect(ofType(nextEvents, 'run.settled')[0]!.data.outcome).toBe('completed');

      await sleepUntil(runtimeStartedAt + 2 * LEASE_TTL_MS);
      expect(await modelRequestsFor(key)).toBe(0);
      const after = await t.log.readRun(body.runId);
      expect(ofType(after, 'model.turn.requested')).toHaveLength(0);
      expect(ofType(after, 'run.settled')).toHaveLength(1);

      // past the next Run's own deadline by two lease TTLs (the grace recovery gives, with its 0.1 s sweep): still not fenced
      await sleepUntil(Date.parse(ofType(nextEvents, 'run.admitted')[0]!.data.limits.deadlineAt) + 2 * LEASE_TTL_MS);
      const nextAfter = await t.log.readRun(next.body.runId);
      expect(ofType(nextAfter, 'run.fenced').filter((f) => f.data.reason !== 'settling')).toHaveLength(0);
      expect((await deadlines.get(next.body.runId))?.operation).not.toBe('PUT'); // purged (or never kept)
    } finally {
      // the later cases need a runtime, whatever happened above
      if (!t.stack.services.has('runtime')) await t.stack.startService('runtime');
    }
  }, 120_000);

  it('a Run a live runtime holds is left to it past the deadline: a model turn slower than the deadline ends AT the deadline (K7), is recorded, not fenced away', async () => {
    const { key, runId } = (await startDeadlineRuns()).held;
    const body = { runId };
    const events = await t.waitForSettlement(body.runId, 60_000);
    expect(ofType(events, 'run.fenced').filter((f) => f.data.reason !== 'settling')).toHaveLength(0);
    // the request's timeout was the time left to the deadline, not the model timeout: it failed at the deadline, before the reply came
    const failed = ofType(events, 'model.turn.failed');
    expect(failed).toHaveLength(1);
    expect(failed[0]!.data.error.kind).toBe('timeout');
    const deadlineAt = Date.parse(ofType(events, 'run.admitted')[0]!.data.limits.deadlineAt);
    expect(Date.parse(failed[0]!.occurredAt)).toBeLessThan(deadlineAt + 3 * LEASE_TTL_MS);
    expect(ofType(events, 'run.execution.finished')[0]!.data.reason).toBe('deadline');
    expect(ofType(events, 'lease.granted')).toHaveLength(1);
    const settled = ofType(events, 'run.settled');
    expect(settled).toHaveLength(1);
    expect(settled[0]!.data.reason).not.toMatch(/nobody executed/);
    expect(await modelRequestsFor(key)).toBe(1);
  }, 90_000);

  it('a reply that is still STREAMING at the deadline is cut there (K7): its streamed paragraphs stay, the Run stops deadline and settles partial, never completed, within the deadline plus a few seconds', async () => {
    // admitted together with the held Run of the case above, during the first case (a paragraph a second, 20 of them)
    const { key, runId, admittedAt } = (await startDeadlineRuns()).streaming;
    const body = { runId };
    const events = await t.waitForSettlement(body.runId, 60_000);
    // from just before its admission to its settlement as recorded (this case may read it later than it happened)
    const settledMs = Date.parse(ofType(events, 'run.settled')[0]!.occurredAt) - admittedAt;
    const deadlineAt = Date.parse(ofType(events, 'run.admitted')[0]!.data.limits.deadlineAt);
    const failed = ofType(events, 'model.turn.failed');
    expect(failed).toHaveLength(1);
    expect(failed[0]!.data.error).toMatchObject({ kind: 'timeout', message: expect.stringMatching(/Run's deadline/) });
    expect(Date.parse(failed[0]!.occurredAt)).toBeLessThan(deadlineAt + 2_000);
    expect(ofType(events, 'model.turn.completed')).toHaveLength(0);
    const streamed = ofType(events, 'model.output.paragraph');
    expect(streamed.length).toBeGreaterThanOrEqual(2);
    expect(streamed.length).toBeLessThan(STREAMED_PARAGRAPHS);
    expect(ofType(events, 'run.execution.finished')[0]!.data.reason).toBe('deadline');
    expect(ofType(events, 'model.turn.requested')).toHaveLength(1); // nothing new started past the deadline
    const settled = ofType(events, 'run.settled');
    expect(settled).toHaveLength(1);
    expect(settled[0]!.data.outcome).toBe('partial'); // the committed paragraphs are kept (K9); never `completed`
    expect(Date.parse(settled[0]!.occurredAt)).toBeLessThan(deadlineAt + 4_000);
    expect(settledMs).toBeLessThan(DEADLINE_SECONDS * 1000 + 5_000);
    expect(await modelRequestsFor(key)).toBe(1);
  }, 90_000);

  // last in this file: its hour-long Retry-After pauses this runtime's model limiter for every later Run
  it('a 429 whose Retry-After ends after the deadline (K7): the retry is never made, charges nothing, and the Run settles failed naming the deadline, not the token budget', async () => {
    const key = `retry-after-${t.tag}`;
    await t.setScenario({ steps: [{ error: { status: 429, message: 'slow down', retryAfter: 3_600 } }], then: 'repeat-last' }, key);
    const { body } = await t.client.postMessage('conv-deadline', { clientMessageId: key, content: `[${key}] What does DIA hold?` });
    const events = await t.waitForSettlement(body.runId, 60_000);
    expect(await modelRequestsFor(key)).toBe(1); // the model received the first request only
    // the backoff recorded with the 429 is its Retry-After, and it ends after the deadline: no retry is requested at all (K7)
    const failed = ofType(events, 'model.turn.failed').map((f) => f.data);
    expect(failed.map((f) => f.error.kind)).toEqual(['http']);
    expect(failed[0]!.retry?.delayMs).toBeGreaterThanOrEqual(3_600_000);
    expect(ofType(events, 'model.turn.requested')).toHaveLength(1);
    const finished = ofType(events, 'run.execution.finished')[0]!.data;
    expect(finished.reason).toBe('model-error');
    expect(finished.detail).toMatch(/turn 1 failed \(.*slow down.*\).*its retry, backed off \d+ ms .* would start after the deadline/);
    const settled = ofType(events, 'run.settled');
    expect(settled).toHaveLength(1);
    expect(settled[0]!.data.outcome).toBe('failed');
    expect(settled[0]!.data.reason).toMatch(/deadline/);
    expect(settled[0]!.data.reason).not.toMatch(/token budget/);
    // the Run projection: one model request, and no request of unknown usage (the one never sent used nothing)
    const view = await settledProjection(t, body.runId);
    expect(view).toMatchObject({ modelRequests: 1, unknownUsageTurns: 1 }); // the 429 reply: usage not reported
  }, 90_000);
});
