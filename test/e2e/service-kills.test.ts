/**
 * kill -9 of each control-plane service other than the runtime mid-Run, then a restart (docs/recovery.md,
 * K4, K5, K9, K10, K11): tools during a call, publication with an SSE observer attached, lifecycle
 * before settling, the projector, admission right after a 201, recovery while a lease is held. One
 * test per row; each asserts from the log (and the effect file for tools) that the Run settles
 * exactly once, nothing is executed twice (model requests per key, tool executions) and nothing
 * committed before the kill is lost. Short timings keep the file fast; tests run serially on one
 * stack, each on its own conversation.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { StoredEvent } from '@runplane/contracts';
import type { ServiceName } from '@runplane/devstack';
import {
  effectsOf,
  kill9,
  lostFacts,
  modelRequestsFor,
  ofType,
  outcomeOf,
  reportRow,
  sleep,
  waitForSettled,
  waitForType,
} from '../support/faults.js';
import { eventually, startTestStack, type TestStack } from '../support/stack.js';

const LEASE_TTL_MS = 1_500;
const CLAIM_TTL_MS = 2_000;
const dir = mkdtempSync(join(tmpdir(), 'rp-kills-'));
const effectFile = join(dir, 'effects.log');
let t: TestStack;

beforeAll(async () => {
  t = await startTestStack('kills', {
    RUNPLANE_TEST_TOOLS: 'record_effect',
    RUNPLANE_RECORD_EFFECT_FILE: effectFile,
    RUNPLANE_LEASE_TTL_MS: String(LEASE_TTL_MS),
    RUNPLANE_RECOVERY_SWEEP_MS: '100',
    RUNPLANE_ACK_WAIT_MS: '1500',
    RUNPLANE_TOOL_CLAIM_TTL_MS: String(CLAIM_TTL_MS),
    RUNPLANE_TOOL_CLAIM_SWEEP_MS: '300',
    RUNPLANE_TOOL_TIMEOUT_MS: '20000',
  });
}, 120_000);
afterAll(async () => {
  await t?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const answer = (key: string) => ({ reply: { content: `The answer for ${key}.\n\nIt has two paragraphs, both committed.` } });

/** Binds the scenario and posts the question; resolves with the Run id. */
async function ask(key: string, steps: unknown[]): Promise<string> {
  await t.setScenario({ steps, then: 'error' }, key);
  const admitted = await t.client.postMessage(`conv-${key}`, { clientMessageId: key, content: `[${key}] What does DIA hold?` });
  expect(admitted.status).toBe(201);
  return admitted.body.runId;
}

interface Expect {
  outcome: string;
  modelRequests: number;
  tools: number;
  passages: number;
}

/** The three outcomes of every row, checked from the log; prints the row of the fault matrix. */
async function check(fault: string, key: string, runId: string, before: StoredEvent[], killedAt: number, want: Expect): Promise<StoredEvent[]> {
  const settledEvents = await waitForSettled(t, runId, 60_000);
  const settleMs = Date.now() - killedAt;
  await sleep(2 * LEASE_TTL_MS); // room for a stale or repeated write to show up
  const final = await t.log.readRun(runId);
  const o = outcomeOf(final);
  const lost = lostFacts(before, final);
  const effects = effectsOf(effectFile, runId).length;
  const asked = await modelRequestsFor(t, key);
  reportRow({
    fault,
    runs: 1,
    settled: `${o.settlements} x ${o.outcome ?? '-'}`,
    duplicates: Math.max(0, effects - want.tools) + Math.max(0, asked - want.modelRequests) + o.duplicateEventIds.length,
    lost: lost.length,
    settleMs,
  });
  expect(settledEvents.length).toBeGreaterThan(0);
  expect({ settlements: o.settlements, outcome: o.outcome }).toEqual({ settlements: 1, outcome: want.outcome });
  expect(asked).toBe(want.modelRequests);
  expect(o.turnsRequested).toBe(want.modelRequests);
  expect(o.dispatched).toBe(want.tools);
  expect(o.receipts).toBe(want.tools);
  expect(effects).toBe(want.tools);
  expect(o.passages).toBe(want.passages);
  expect(o.duplicateEventIds).toEqual([]);
  expect(lost).toEqual([]);
  return final;
}

async function restart(name: ServiceName): Promise<void> {
  await t.stack.startService(name);
}

describe('kill -9 of a control-plane service mid-Run, then a restart', () => {
  it('tools during a call: the call gets unknown once its claim expires, is never re-run, and the Run settles once', async () => {
    const key = `kill-tools-${t.tag}`;
    // the call runs for 15 s (under the 20 s tool timeout), so the kill lands during it: with 3 s, a
    // CI run on a loaded machine killed the process after the call had returned and been receipted
    const runId = await ask(key, [
      { reply: { content: '', toolCalls: [{ name: 'record_effect', arguments: { tag: key, sleepMs: 15_000 } }] } },
      answer(key),
    ]);
    await eventually(async () => (effectsOf(effectFile, runId).length > 0 ? true : null), 30_000, 'the tool to start');
    const before = await t.log.readRun(runId);
    const killedAt = await kill9(t, 'tools');
    await restart('tools');
    // the answer was made without the call's result: partial, the unknown call listed (K9), whatever the answer says
    const final = await check('kill -9 tools during a call', key, runId, before, killedAt, {
      outcome: 'partial',
      modelRequests: 2,
      tools: 1,
      passages: 2,
    });
    expect(ofType(final, 'tool.call.receipt')[0]!.data).toMatchObject({ status: 'unknown', error: { code: 'executor_lost' } });
    expect(ofType(final, 'run.settled')[0]!.data.unanswered).toEqual([
      { part: expect.stringMatching(/^the result of record_effect\(/), reason: expect.stringMatching(/^its outcome is unknown/) },
    ]);
  }, 120_000);

  it('publication with an SSE observer attached: the observer reconnects from its Last-Event-ID, sees no gap or repeat, and the Run completes once', async () => {
    const key = `kill-pub-${t.tag}`;
    const runId = await ask(key, [{ ...answer(key), delayMs: 2_500 }]);
    const seen: number[] = [];
    const first = t.client.streamEvents(runId, { onEvent: (e) => seen.push(e.seq) }).catch(() => ({ lastEventId: seen.at(-1) ?? 0, ended: 'cut' }));
    await waitForType(t, runId, 'model.turn.requested');
    await eventually(async () => (seen.length >= 2 ? true : null), 10_000, 'the observer to see the first events');
    const before = await t.log.readRun(runId);
    const killedAt = await kill9(t, 'publication');
    const cut = await first;
    await restart('publication');
    const resumed = await t.client.streamEvents(runId, { lastEventId: cut.lastEventId, onEvent: (e) => seen.push(e.seq) });
    expect(resumed.ended).not.toBe('aborted');
    const final = await check('kill -9 publication with an SSE observer attached', key, runId, before, killedAt, {
      outcome: 'completed',
      modelRequests: 1,
      tools: 0,
      passages: 2,
    });
    // the observer saw every stored event exactly once, in order, across the reconnect
    expect(seen).toEqual(final.filter((e) => e.seq <= Math.max(...seen)).map((e) => e.seq));
    expect(seen).toContain(final.find((e) => e.event.type === 'run.settled')!.seq);
  }, 120_000);

  it('lifecycle before settling: killed during the Run, restarted after answer.published, it settles the Run exactly once', async () => {
    const key = `kill-life-${t.tag}`;
    const runId = await ask(key, [{ ...answer(key), delayMs: 1_500 }]);
    await waitForType(t, runId, 'model.turn.requested');
    const killedAt = await kill9(t, 'lifecycle');
    const before = await waitForType(t, runId, 'answer.published');
    expect(ofType(before, 'run.execution.finished')).toHaveLength(1);
    expect(ofType(before, 'run.settled')).toHaveLength(0); // really killed before settling
    await restart('lifecycle');
    await check('kill -9 lifecycle before settling (restarted after answer.published)', key, runId, before, killedAt, {
      outcome: 'completed',
      modelRequests: 1,
      tools: 0,
      passages: 2,
    });
  }, 120_000);

  it('projector: the Run settles without it, and after the restart the projection catches up to the settled Run', async () => {
    const key = `kill-proj-${t.tag}`;
    const runId = await ask(key, [{ ...answer(key), delayMs: 1_500 }]);
    await waitForType(t, runId, 'model.turn.requested');
    const before = await t.log.readRun(runId);
    const killedAt = await kill9(t, 'projector');
    const final = await check('kill -9 projector mid-Run', key, runId, before, killedAt, {
      outcome: 'completed',
      modelRequests: 1,
      tools: 0,
      passages: 2,
    });
    await restart('projector');
    const view = await eventually(
      async () => {
        const v = await t.client.getRun(runId);
        return v?.status === 'settled' ? v : null;
      },
      30_000,
      'the projection to catch up',
    );
    expect(view).toMatchObject({ outcome: 'completed', passages: 2, lastSeq: final.at(-1)!.seq });
  }, 120_000);

  it('admission right after a 201: the Run goes on without it; after the restart the same message is the same Run, nothing new', async () => {
    const key = `kill-adm-${t.tag}`;
    const runId = await ask(key, [{ ...answer(key), delayMs: 500 }]);
    const before = await t.log.readRun(runId);
    const killedAt = await kill9(t, 'admission');
    await restart('admission');
    await check('kill -9 admission right after a 201', key, runId, before, killedAt, {
      outcome: 'completed',
      modelRequests: 1,
      tools: 0,
      passages: 2,
    });
    const again = await t.client.postMessage(`conv-${key}`, { clientMessageId: key, content: `[${key}] What does DIA hold?` });
    expect(again.status).toBe(200);
    expect(again.body.runId).toBe(runId);
    expect(ofType(await t.log.readRun(runId), 'run.admitted')).toHaveLength(1);
  }, 120_000);

  it('recovery while a lease is held: the restarted recovery does not fence the healthy Run, which completes once', async () => {
    const key = `kill-recov-${t.tag}`;
    const runId = await ask(key, [{ ...answer(key), delayMs: 2 * LEASE_TTL_MS + 1_000 }]);
    const requested = await waitForType(t, runId, 'lease.granted');
    const killedAt = await kill9(t, 'recovery');
    await restart('recovery');
    const final = await check('kill -9 recovery while a lease is held', key, runId, requested, killedAt, {
      outcome: 'completed',
      modelRequests: 1,
      tools: 0,
      passages: 2,
    });
    expect(ofType(final, 'run.fenced').filter((f) => f.data.reason !== 'settling')).toHaveLength(0);
    expect(ofType(final, 'lease.granted')).toHaveLength(1);
  }, 120_000);
});
