/**
 * A retry waits (K7), against the real processes, NATS JetStream and PostgreSQL, with the
 * scripted model as an HTTP server this file stops and starts itself (an outage):
 * - the endpoint killed mid-stream and back 3 s later: the Run retries a few times, each retry
 *   after the backoff recorded on the failure (growing), and settles `completed`, its budget not
 *   spent on the blip;
 * - an endpoint that never comes back: the Run still ends honestly before its deadline (`failed`,
 *   naming the connection failure), its requests spaced by the growing backoff.
 * Backoff 500 ms doubling to 4 s, a 20 s deadline, 8 model requests (1 kept for finalization), no
 * finalization lead (so the blip Run is not moved into finalization by the clock).
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { startScriptedModel, type ScriptedModel } from '@runplane/app-scripted-model';
import type { StoredEvent } from '@runplane/contracts';
import { ofType, reportRow, sleep, until } from '../support/faults.js';
import { startTestStack, type TestStack } from '../support/stack.js';

const RETRY_MIN_MS = 500;
const RETRY_MAX_MS = 4_000;
const DEADLINE_SECONDS = 20;
const OUTAGE_MS = 3_000;

let t: TestStack;
let model: ScriptedModel | null;
let port: number;

beforeAll(async () => {
  model = await startScriptedModel({ port: 0 });
  port = model.port;
  t = await startTestStack(
    'retry',
    {
      RUNPLANE_MODEL_RETRY_MIN_MS: String(RETRY_MIN_MS),
      RUNPLANE_MODEL_RETRY_MAX_MS: String(RETRY_MAX_MS),
      RUNPLANE_RUN_DEADLINE_SECONDS: String(DEADLINE_SECONDS),
      RUNPLANE_FINALIZATION_LEAD_SECONDS: '0',
      RUNPLANE_MAX_MODEL_REQUESTS: '8',
      RUNPLANE_FINAL_RESERVE_MODEL_REQUESTS: '1',
      RUNPLANE_RECOVERY_SWEEP_MS: '200',
    },
    { modelBaseUrl: model.url },
  );
}, 120_000);
afterAll(async () => {
  await t?.stop();
  await model?.close();
});

async function ask(key: string): Promise<string> {
  const { body } = await t.client.postMessage(`conv-${key}`, { clientMessageId: key, content: `[${key}] What does SPY hold?` });
  return body.runId;
}

const at = (e: { occurredAt: string }) => Date.parse(e.occurredAt);

/**
 * Checks that every failed request recorded its backoff and that the Run's next request came no
 * earlier than it; @returns the recorded delays, in order.
 */
function checkSpacing(events: StoredEvent[]): number[] {
  const requested = ofType(events, 'model.turn.requested');
  const failed = ofType(events, 'model.turn.failed');
  for (const f of failed) {
    const retry = f.data.retry;
    expect(retry).toBeDefined();
    const next = requested.find((r) => r.data.turn === f.data.turn + 1);
    if (next) expect(at(next)).toBeGreaterThanOrEqual(Date.parse(retry!.notBefore));
  }
  return failed.map((f) => f.data.retry!.delayMs);
}

describe('a retry waits: a short outage costs a few attempts, not the budget (K7)', () => {
  it('the endpoint killed mid-stream and back 3 s later: a few spaced retries, then the Run completes', async () => {
    const key = `blip-${t.tag}`;
    model!.setScenario(
      {
        steps: [
          { reply: { content: '', toolCalls: [{ name: 'list_funds', arguments: {} }] } },
          // the endpoint dies while this reply streams (after its first paragraph)
          { reply: { content: 'SPY holds large US companies.\n\nThe rest never arrives.' }, paragraphDelayMs: 60_000 },
        ],
      },
      key,
    );
    const runId = await ask(key);
    await until(t, runId, (ev) => ofType(ev, 'model.output.paragraph').some((p) => p.data.turn === 2), 30_000, 'turn 2 streaming');
    const downAt = Date.now();
    await model!.close(); // the streaming reply is cut, and every new connection refused
    model = null;
    await sleep(OUTAGE_MS); // the outage itself
    model = await startScriptedModel({
      port,
      scenario: { steps: [{ reply: { content: `SPY holds about 500 large US companies (${key}).` } }], then: 'repeat-last' },
    });
    const upAt = Date.now();

    const events = await t.waitForSettlement(runId, 60_000);
    const requested = ofType(events, 'model.turn.requested');
    const failed = ofType(events, 'model.turn.failed');
    const settled = ofType(events, 'run.settled')[0]!.data;
    const summary = {
      outcome: settled.outcome,
      requests: requested.map((r) => `${r.data.turn}@${at(r) - downAt}ms`),
      failed: failed.map((f) => `${f.data.turn}:${f.data.error.kind}:${f.data.retry?.delayMs ?? '-'}`),
    };
    process.stdout.write(`RETRY-BLIP ${JSON.stringify(summary)}\n`);

    expect(settled.outcome).toBe('completed');
    // the killed turn and the refused retries: a few (at least the cut turn; a runtime late by 2 s or
    // more on a loaded machine may make its first retry after the model is back), every one a
    // connection failure with its backoff recorded
    expect(failed.length).toBeGreaterThanOrEqual(1);
    expect(failed.length).toBeLessThanOrEqual(4);
    expect(failed.every((f) => f.data.error.kind === 'connection')).toBe(true);
    expect(requested.filter((r) => at(r) >= downAt && at(r) < upAt).length).toBeLessThanOrEqual(4);
    // spaced, and the spacing grows
    const delays = checkSpacing(events);
    for (let i = 1; i < delays.length; i++) expect(delays[i]!).toBeGreaterThan(delays[i - 1]!);
    expect(delays[0]!).toBeGreaterThanOrEqual(RETRY_MIN_MS);
    // every attempt was charged, and the budget was not spent on the blip
    expect(settled.usage.modelRequests).toBe(requested.length);
    expect(requested.length).toBeLessThan(8);
    expect(ofType(events, 'run.finalization.started')).toHaveLength(0);
    reportRow({
      fault: `model endpoint killed mid-stream, back after ${OUTAGE_MS} ms`,
      runs: 1,
      settled: `1 x ${settled.outcome}, ${failed.length} failed requests, backoffs ${delays.join('/')} ms`,
      duplicates: 0,
      lost: 0,
      settleMs: at(ofType(events, 'run.settled')[0]!) - upAt,
    });
  }, 90_000);

  it('an endpoint that never comes back: the Run ends failed before its deadline, naming the connection failure, its requests spaced', async () => {
    await model?.close(); // dead for good
    model = null;
    const key = `dead-${t.tag}`;
    const runId = await ask(key);
    const events = await t.waitForSettlement(runId, 60_000);
    const requested = ofType(events, 'model.turn.requested');
    const failed = ofType(events, 'model.turn.failed');
    const settledEvent = ofType(events, 'run.settled')[0]!;
    const settled = settledEvent.data;
    const deadlineAt = ofType(events, 'run.admitted')[0]!.data.limits.deadlineAt;
    const finished = ofType(events, 'run.execution.finished')[0]!.data;
    process.stdout.write(
      `RETRY-DEAD ${JSON.stringify({ outcome: settled.outcome, finished: finished.reason, requests: requested.map((r) => at(r) - at(requested[0]!)), reason: settled.reason })}\n`,
    );

    expect(settled.outcome).toBe('failed');
    expect(settled.reason).toMatch(/Connection error/);
    // it stopped on its own (the budget spent, or a retry that would pass the deadline), not fenced at the deadline
    expect(['model-request-limit', 'model-error']).toContain(finished.reason);
    // the runtime stopped before the deadline; the settlement follows within the lifecycle's own latency
    expect(at(ofType(events, 'run.execution.finished')[0]!)).toBeLessThanOrEqual(Date.parse(deadlineAt));
    expect(at(settledEvent)).toBeLessThanOrEqual(Date.parse(deadlineAt) + 5_000);
    expect(ofType(events, 'run.fenced').every((f) => f.data.reason === 'settling')).toBe(true);
    expect(requested.length).toBeLessThanOrEqual(8);
    expect(failed).toHaveLength(requested.length);
    // refused: nothing reached the provider, so no output tokens are charged for them (not a token-limit stop)
    expect(failed.every((f) => f.data.error.kind === 'connection' && f.data.error.refused === true)).toBe(true);
    // spaced by the growing backoff (until its cap), never in a burst
    const delays = checkSpacing(events);
    expect(delays.length).toBeGreaterThanOrEqual(3);
    for (let i = 1; i < delays.length; i++) {
      if (delays[i - 1]! < RETRY_MAX_MS) expect(delays[i]!).toBeGreaterThan(delays[i - 1]!);
      else expect(delays[i]!).toBe(RETRY_MAX_MS);
    }
    expect(at(requested.at(-1)!) - at(requested[0]!)).toBeGreaterThanOrEqual(delays.slice(0, -1).reduce((a, b) => a + b, 0));
    reportRow({
      fault: 'model endpoint dead for good',
      runs: 1,
      settled: `1 x ${settled.outcome} (${finished.reason}), ${requested.length} requests over ${at(requested.at(-1)!) - at(requested[0]!)} ms`,
      duplicates: 0,
      lost: 0,
      settleMs: Date.parse(deadlineAt) - at(settledEvent),
    });
  }, 90_000);
});
