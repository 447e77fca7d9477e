/**
 * Clocks, the no-progress limit, metrics and the CLI's exit codes (K7, K8, K9), against the real
 * services, JetStream and PostgreSQL. The stack admits every Run with a 3 s no-progress limit
 * (`RUNPLANE_NO_PROGRESS_SECONDS`) and sweeps every 100 ms.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { RunEvent, StoredEvent } from '@runplane/contracts';
import { eventually, startTestStack, type TestStack } from '../support/stack.js';

const NO_PROGRESS_SECONDS = 3;
let t: TestStack;

beforeAll(async () => {
  t = await startTestStack('clocks', {
    RUNPLANE_NO_PROGRESS_SECONDS: String(NO_PROGRESS_SECONDS),
    RUNPLANE_RECOVERY_SWEEP_MS: '100',
    RUNPLANE_LEASE_TTL_MS: '3000',
  });
}, 120_000);
afterAll(async () => {
  await t?.stop();
});

const ofType = <T extends RunEvent['type']>(events: StoredEvent[], type: T) =>
  events.filter((e) => e.event.type === type).map((e) => e.event as Extract<RunEvent, { type: T }>);

async function ask(key: string, steps: unknown[]): Promise<{ runId: string; admittedAt: number }> {
  await t.setScenario({ steps }, key);
  const admittedAt = Date.now();
  const admitted = await t.client.postMessage(`conv-${key}`, { clientMessageId: key, content: `[${key}] What does DIA hold?` });
  expect(admitted.status).toBe(201);
  return { runId: admitted.body.runId, admittedAt };
}

describe('the no-progress limit (K7)', () => {
  it('a model stream of keep-alive chunks only ends the Run no-progress within a bounded time; a slow but steady stream of text is not ended', async () => {
    // 80 empty deltas 200 ms apart: 16 s of a live stream without a character of text
    const keepAlive = [
      { rawChunks: [...Array.from({ length: 80 }, () => ({ delta: { content: '' } })), { finishReason: 'stop' }], chunkDelayMs: 200 },
    ];
    // 7 paragraphs 1.2 s apart: ~8.4 s, longer than the limit, with progress all along
    const paragraphs = Array.from({ length: 7 }, (_, i) => `Paragraph ${i + 1} of a slow but steady answer.`).join('\n\n');
    const steady = [{ reply: { content: paragraphs, finishReason: 'stop' }, paragraphDelayMs: 1_200 }];
    const [silent, control] = await Promise.all([ask(`keepalive-${t.tag}`, keepAlive), ask(`steady-${t.tag}`, steady)]);

    const silentEvents = await t.waitForSettlement(silent.runId, 30_000);
    const settleMs = Date.now() - silent.admittedAt;
    const settled = ofType(silentEvents, 'run.settled');
    expect(settled).toHaveLength(1);
    expect(settled[0]!.data.outcome).toBe('failed');
    expect(settled[0]!.data.reason).toMatch(/^no-progress: no answer was produced: no progress for \d+ s \(limit 3 s\)/);
    const fences = ofType(silentEvents, 'run.fenced');
    expect(fences.map((f) => f.data.reason)).toEqual(['no-progress', 'no-progress']);
    expect(fences[0]!.data.uncertain).toEqual([{ kind: 'model-turn', turn: 1 }]); // the keep-alive turn never completed before the fence
    // bounded: the limit, plus sweeps and appends; well before the 16 s stream would have ended by itself
    expect(settleMs).toBeLessThan(NO_PROGRESS_SECONDS * 1000 + 6_000);
    expect(ofType(silentEvents, 'model.turn.completed')).toHaveLength(0);

    const controlEvents = await t.waitForSettlement(control.runId, 60_000);
    const controlSettled = ofType(controlEvents, 'run.settled')[0]!;
    expect(controlSettled.data.outcome).toBe('completed');
    expect(ofType(controlEvents, 'run.fenced').some((f) => f.data.reason === 'no-progress')).toBe(false);
    expect(Date.parse(controlSettled.occurredAt) - control.admittedAt).toBeGreaterThan(NO_PROGRESS_SECONDS * 1000); // it did outlive the limit
    expect(ofType(controlEvents, 'model.output.paragraph').length).toBeGreaterThanOrEqual(6);
  }, 90_000);
});
