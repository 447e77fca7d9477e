/**
 * A rollout keeps Runs running (K5, K6, K9, K10; docs/operations.md "Rollouts keep Runs running"): two runtime and two tools replicas.
 * - A wake (a receipt) delivered to the replica that does not hold the Run's lease reaches the
 *   holder at once (a nudge), not at its next renewal tick: the time from each receipt to the next
 *   `model.turn.requested` is measured over many Runs and printed.
 * - A rolling restart of every runtime and tools replica (SIGTERM one at a time, a replacement
 *   started and ready before the next) while 30 slow Runs stream: none is interrupted, no model
 *   request or tool execution is repeated, every Run settles once, and every handover is a fact in
 *   the log (`run.handed_over`, then a grant at the next epoch) that `runplane timeline` shows.
 * - A drain that passes its bound (a model request that does not finish in time) settles that Run
 *   `interrupted` honestly, while a Run at a safe point on the same replica is handed over.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { StoredEvent } from '@runplane/contracts';
import { natsEnvOf, repoRoot, type ServiceName } from '@runplane/devstack';
import { effectsOf, modelRequestsFor, ofType, outcomeOf, waitForSettled, waitForType } from '../support/faults.js';
import { eventually, startTestStack, type TestStack } from '../support/stack.js';

const LEASE_TTL_MS = 30_000; // renewal tick every 10 s: what a wake on the other replica waited for before the nudge
const DRAIN_SECONDS = 6;
const dir = mkdtempSync(join(tmpdir(), 'rp-drain-'));
const effectFile = join(dir, 'effects.log');
let t: TestStack;

beforeAll(async () => {
  t = await startTestStack(
    'drain',
    {
      RUNPLANE_TEST_TOOLS: 'record_effect',
      RUNPLANE_RECORD_EFFECT_FILE: effectFile,
      RUNPLANE_LEASE_TTL_MS: String(LEASE_TTL_MS),
      RUNPLANE_RECOVERY_SWEEP_MS: '200',
      RUNPLANE_DRAIN_SECONDS: String(DRAIN_SECONDS),
      RUNPLANE_MODEL_MAX_CONCURRENT: '64',
      RUNPLANE_TOOL_TIMEOUT_MS: '20000',
      RUNPLANE_TOOL_THREADS: '16',
      // two replicas of each: as deployed, each owns some of 8 partitions and hands them over when it drains
      RUNPLANE_PARTITIONS: '8',
    },
    { replicas: { runtime: 2, tools: 2 } },
  );
}, 180_000);
afterAll(async () => {
  await t?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** Binds the scenario to the key and posts the question; resolves with the Run id. */
async function ask(key: string, steps: unknown[]): Promise<string> {
  await t.setScenario({ steps, then: 'error' }, key);
  const admitted = await t.client.postMessage(`conv-${key}`, { clientMessageId: key, content: `[${key}] What does DIA hold?` });
  expect(admitted.status).toBe(201);
  return admitted.body.runId;
}

const toolTurn = (key: string, n: number, sleepMs: number, paragraphDelayMs = 0) => ({
  reply: { content: `Looking at part ${n} of ${key}.\n\n`, toolCalls: [{ name: 'record_effect', arguments: { tag: `${key}-${n}`, sleepMs } }] },
  paragraphDelayMs,
});
const slowAnswer = (key: string, paragraphDelayMs: number) => ({
  reply: { content: `The answer for ${key}.\n\nSecond paragraph.\n\nThird paragraph.\n\nFourth paragraph.` },
  paragraphDelayMs,
});

const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;

/** SIGTERM of one replica (the drain within its bound; SIGKILL only past the bound plus 4 s), timed. */
async function stopOne(name: ServiceName, p = t.stack.replicas.get(name)![0]!): Promise<number> {
  const at = Date.now();
  await p.stop((DRAIN_SECONDS + 4) * 1000);
  expect(p.child.signalCode).not.toBe('SIGKILL'); // it drained and exited on its own
  return Date.now() - at;
}

/** Tool calls dispatched and still without a receipt, over the given Runs. */
async function dispatchedWithoutReceipt(runIds: string[]): Promise<{ runId: string; toolCallId: string }[]> {
  const out: { runId: string; toolCallId: string }[] = [];
  for (const runId of runIds) {
    const events = await t.log.readRun(runId);
    const done = new Set(ofType(events, 'tool.call.receipt').map((r) => r.data.toolCallId));
    for (const d of ofType(events, 'tool.call.dispatched')) if (!done.has(d.data.toolCallId)) out.push({ runId, toolCallId: d.data.toolCallId });
  }
  return out;
}

describe('a wake on the replica that does not hold the lease', () => {
  it('reaches the holder at once: receipt to the next model request well under the renewal tick', async () => {
    const runs = await Promise.all(
      Array.from({ length: 24 }, async (_, i) => {
        const key = `nudge-${i}-${t.tag}`;
        return { key, runId: await ask(key, [toolTurn(key, 1, 0), { reply: { content: `Done ${key}.` } }]) };
      }),
    );
    const latencies: number[] = [];
    for (const { runId } of runs) {
      const events = await waitForSettled(t, runId, 90_000);
      const receipt = ofType(events, 'tool.call.receipt')[0]!;
      const next = ofType(events, 'model.turn.requested').find((e) => e.data.turn === 2)!;
      expect(outcomeOf(events).outcome).toBe('completed');
      latencies.push(Date.parse(next.occurredAt) - Date.parse(receipt.occurredAt));
    }
    latencies.sort((a, b) => a - b);
    const figures = { runs: latencies.length, p50: pct(latencies, 50), p90: pct(latencies, 90), max: latencies.at(-1)!, tickMs: LEASE_TTL_MS / 3 };
    process.stdout.write(`WAKE-TO-HOLDER receipt -> next model.turn.requested (ms): ${JSON.stringify(figures)}\n`);
    // about half of the receipts land on the replica that does not hold the lease: without the
    // nudge they wait for the holder's renewal tick (up to 10 s), p90 near 8 s; the bound is loose
    // for a loaded machine (the nudge itself is a core NATS round trip)
    expect(figures.p90).toBeLessThan(LEASE_TTL_MS / 6);
  }, 180_000);
});

describe('a rolling restart of every runtime and tools replica while 30 slow Runs stream', () => {
  it('interrupts nothing, repeats no model request or tool execution, settles every Run once, and records each handover', async () => {
    const runs: { key: string; runId: string }[] = [];
    /** Admits `n` Runs: three tool turns (each streamed slowly, then a tool call of 2 s) and a slowly streamed answer, ~15 s each. */
    const admit = async (n: number) => {
      for (let i = 0; i < n; i++) {
        const key = `roll-${runs.length}-${t.tag}`;
        const steps = [1, 2, 3].map((k) => toolTurn(key, k, 2_000, 1_200));
        runs.push({ key, runId: await ask(key, [...steps, slowAnswer(key, 900)]) });
      }
    };
    await admit(10);
    await waitForType(t, runs[0]!.runId, 'tool.call.dispatched');
    const took: Record<string, number> = {};
    const pendingAtStop: { runId: string; toolCallId: string }[] = [];
    for (const [i, name] of (['runtime', 'tools', 'runtime', 'tools'] as const).entries()) {
      const old = t.stack.replicas.get(name)![0]!;
      if (name === 'tools') pendingAtStop.push(...(await dispatchedWithoutReceipt(runs.map((r) => r.runId))));
      took[`${name}-${old.child.pid}`] = await stopOne(name, old);
      await t.stack.startService(name); // ready (its line printed) before the next one stops
      if (i < 2) await admit(10); // 30 Runs in three waves, all streaming through the restarts
    }
    const finals = new Map<string, StoredEvent[]>();
    for (const { runId } of runs) finals.set(runId, await waitForSettled(t, runId, 120_000));
    const outcomes: Record<string, number> = {};
    let handovers = 0;
    let handedRun: string | null = null;
    for (const { key, runId } of runs) {
      const events = await t.log.readRun(runId);
      const o = outcomeOf(events);
      outcomes[o.outcome ?? '-'] = (outcomes[o.outcome ?? '-'] ?? 0) + 1;
      expect({ runId, settlements: o.settlements, outcome: o.outcome, fenced: o.fenced }).toEqual({
        runId,
        settlements: 1,
        outcome: 'completed',
        fenced: 0,
      });
      expect(o.duplicateEventIds).toEqual([]);
      // nothing repeated: the model asked exactly the turns the log recorded, each tool executed once
      expect(await modelRequestsFor(t, key)).toBe(4);
      expect(o.turnsRequested).toBe(4);
      expect(effectsOf(effectFile, runId)).toHaveLength(3);
      expect(o.dispatched).toBe(3);
      expect(o.receipts).toBe(3);
      // every call finished (a tools replica drained what it had dispatched): none unknown
      expect(ofType(events, 'tool.call.receipt').map((r) => r.data.status)).toEqual(['succeeded', 'succeeded', 'succeeded']);
      // each handover closes its epoch and the Run is taken at the next one
      for (const h of ofType(events, 'run.handed_over')) {
        handovers++;
        handedRun ??= runId;
        expect(h.data.reason).toBe('drain');
        expect(ofType(events, 'lease.granted').some((g) => g.data.epoch === h.data.epoch + 1)).toBe(true);
        expect(events.filter((e) => e.event.writer?.epoch === h.data.epoch && e.seq > events.find((x) => x.event === h)!.seq)).toEqual([]);
      }
    }
    process.stdout.write(
      `ROLLING-RESTART runs=${runs.length} outcomes=${JSON.stringify(outcomes)} handovers=${handovers} toolCallsInFlightAtToolsStops=${pendingAtStop.length} stopMs=${JSON.stringify(took)}\n`,
    );
    expect(runs).toHaveLength(30);
    expect(outcomes).toEqual({ completed: 30 });
    expect(handovers).toBeGreaterThan(0);
    const timeline = spawnSync(process.execPath, [join(repoRoot(), 'apps/cli/dist/main.js'), 'timeline', handedRun!], {
      env: { ...t.env, ...natsEnvOf(t.users, 'ops') },
      encoding: 'utf8',
      timeout: 30_000,
    });
    expect(timeline.status).toBe(0);
    expect(timeline.stdout).toMatch(/run\.handed_over .*HANDED OVER by runtime\/\w+ \(drain, epoch \d+ closed at a safe point/);
  }, 400_000);
});

describe('a drain past its bound', () => {
  it('settles the Run whose model request did not finish in time interrupted, and hands over the one at a safe point', async () => {
    const slowKey = `bound-slow-${t.tag}`;
    const safeKey = `bound-safe-${t.tag}`;
    // a model request that takes far longer than the drain bound, and a Run waiting on a tool call (a
    // safe point) for longer than a fresh runtime takes to start under the suite's load (with 4 s the
    // call ended before the drain began, and the Run completed with nothing to hand over: CI 2026-12-01)
    const slow = await ask(slowKey, [{ reply: { content: 'Too late.' }, delayMs: (DRAIN_SECONDS + 20) * 1000 }]);
    const safe = await ask(safeKey, [toolTurn(safeKey, 1, 12_000), { reply: { content: `Done ${safeKey}.` } }]);
    await waitForType(t, slow, 'model.turn.requested');
    await waitForType(t, safe, 'tool.call.dispatched');
    // stop every runtime replica now holding a Run (a fresh one takes over what is handed over)
    const old = [...t.stack.replicas.get('runtime')!];
    await t.stack.startService('runtime');
    await Promise.all(old.map((p) => p.stop((DRAIN_SECONDS + 4) * 1000)));
    const slowEvents = await waitForSettled(t, slow, 60_000);
    const safeEvents = await waitForSettled(t, safe, 60_000);
    const s = outcomeOf(slowEvents);
    expect({ settlements: s.settlements, outcome: s.outcome }).toEqual({ settlements: 1, outcome: 'interrupted' });
    expect(ofType(slowEvents, 'run.fenced')[0]!.data).toMatchObject({ reason: 'runtime-stopped', uncertain: [{ kind: 'model-turn', turn: 1 }] });
    expect(ofType(slowEvents, 'run.handed_over')).toEqual([]);
    const a = outcomeOf(safeEvents);
    expect({ settlements: a.settlements, outcome: a.outcome }).toEqual({ settlements: 1, outcome: 'completed' });
    expect(ofType(safeEvents, 'run.handed_over')).toHaveLength(1);
    expect(effectsOf(effectFile, safe)).toHaveLength(1);
    await eventually(async () => ((await modelRequestsFor(t, safeKey)) === 2 ? true : null), 5_000, 'two model requests of the safe Run');
  }, 180_000);
});
