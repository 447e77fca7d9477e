/**
 * Every proposed call is dispatched (or denied) whatever the number of tools replicas (partitioned ownership,
 * K5): a short soak with three tools processes and several runtimes on one stack, Runs admitted at
 * a steady rate, each Run's model proposing several `record_effect` calls per turn at once (two
 * turns of parallel calls), so that the proposals of one turn wake different tools replicas close
 * together and their claims meet. Asserted per Run, from the log and where the effect happens:
 * - every proposed call has exactly one `tool.call.dispatched` or a receipt that was never
 *   dispatched (denied / failed), and every dispatched call exactly one receipt;
 * - no Run sits with a call nobody dispatched: every Run settles `completed`, none `failed` at its
 *   deadline;
 * - each dispatched call was executed exactly once (`record_effect` lines, K5).
 * The counts are printed (`TOOLS-SOAK | ...`), with how often a wake met another's claim
 * (`runplane_tool_claim_met_total` of each tools replica).
 * Short by default (45 s at 1.5 Runs/s); for a manual soak set RUNPLANE_SOAK_SECONDS,
 * RUNPLANE_SOAK_RUNS_PER_SECOND, RUNPLANE_SOAK_TOOLS and RUNPLANE_SOAK_RUNTIMES.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { StoredEvent } from '@runplane/contracts';
import { effectsOf, sleep } from '../support/faults.js';
import { startTestStack, type TestStack } from '../support/stack.js';

const SECONDS = Number(process.env.RUNPLANE_SOAK_SECONDS ?? 45);
const RATE = Number(process.env.RUNPLANE_SOAK_RUNS_PER_SECOND ?? 1.5);
const TOOLS = Number(process.env.RUNPLANE_SOAK_TOOLS ?? 3);
const RUNTIMES = Number(process.env.RUNPLANE_SOAK_RUNTIMES ?? 2);
/** Calls the model proposes at once in each of its two tool turns. */
const CALLS_PER_TURN = [4, 3] as const;
/** How long every Run has to settle after the last admission (a lost call would sit until the Run's deadline). */
const SETTLE_MS = 90_000;

const dir = mkdtempSync(join(tmpdir(), 'rp-tools-soak-'));
const effectFile = join(dir, 'effects.log');
let t: TestStack;

beforeAll(async () => {
  t = await startTestStack(
    'toolsoak',
    // as deployed, 8 partitions: each of the replicas owns some of them
    { RUNPLANE_TEST_TOOLS: 'record_effect', RUNPLANE_RECORD_EFFECT_FILE: effectFile, RUNPLANE_PARTITIONS: '8' },
    { replicas: { tools: TOOLS, runtime: RUNTIMES } },
  );
}, 180_000);
afterAll(async () => {
  await t?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** Binds the Run's scenario: two turns of parallel record_effect calls, then the answer. */
async function script(key: string): Promise<void> {
  const turn = (n: number, count: number) => ({
    reply: {
      content: '',
      toolCalls: Array.from({ length: count }, (_, i) => ({ name: 'record_effect', arguments: { tag: `${key}-t${n}-${i}` } })),
    },
  });
  await t.setScenario(
    {
      steps: [...CALLS_PER_TURN.map((count, i) => turn(i + 1, count)), { reply: { content: `Recorded every effect for ${key}.` } }],
      then: 'error',
    },
    key,
  );
}

/** Sum of `runplane_tool_claim_met_total` over the tools replicas, by outcome. */
async function claimMet(): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const p of t.stack.replicas.get('tools') ?? []) {
    const text = await (await fetch(`${p.url}/metrics`)).text();
    for (const m of text.matchAll(/^runplane_tool_claim_met_total\{[^}]*outcome="([a-z]+)"[^}]*\} (\d+)/gm))
      out[m[1]!] = (out[m[1]!] ?? 0) + Number(m[2]);
  }
  return out;
}

interface RunCheck {
  runId: string;
  proposed: number;
  dispatched: number;
  receipts: number;
  problems: string[];
  outcome: string;
  dispatchers: string[];
}

/** Checks one Run's calls from its events and the effect file. */
function check(runId: string, events: StoredEvent[]): RunCheck {
  const idsOf = (type: string) =>
    events.filter((e) => e.event.type === type).map((e) => (e.event.data as { toolCallId: string; status?: string }).toolCallId);
  const proposed = idsOf('tool.call.proposed');
  const dispatched = idsOf('tool.call.dispatched');
  const receipts = events.filter((e) => e.event.type === 'tool.call.receipt').map((e) => e.event.data as { toolCallId: string; status: string });
  const effects = effectsOf(effectFile, runId).map((l) => l.split(' ')[1]!);
  const problems: string[] = [];
  for (const id of proposed) {
    const d = dispatched.filter((x) => x === id).length;
    const r = receipts.filter((x) => x.toolCallId === id);
    const e = effects.filter((x) => x === id).length;
    if (d > 1) problems.push(`${id} dispatched ${d} times`);
    if (r.length !== 1) problems.push(`${id} has ${r.length} receipts`);
    if (d === 0 && !r.some((x) => x.status === 'denied' || x.status === 'failed')) problems.push(`${id} proposed, never dispatched nor denied`);
    if (d === 1 && e !== 1) problems.push(`${id} executed ${e} times`);
    if (r.some((x) => x.status === 'unknown')) problems.push(`${id} unknown`);
  }
  const settled = events.find((e) => e.event.type === 'run.settled');
  const outcome = settled ? (settled.event.data as { outcome: string; reason: string }).outcome : 'unsettled';
  if (outcome !== 'completed') problems.push(`settled ${outcome}${settled ? `: ${(settled.event.data as { reason: string }).reason}` : ''}`);
  const dispatchers = events.filter((e) => e.event.type === 'tool.call.dispatched').map((e) => e.event.writer?.instance ?? '?');
  return { runId, proposed: proposed.length, dispatched: dispatched.length, receipts: receipts.length, problems, outcome, dispatchers };
}

describe(`tools at ${TOOLS} replicas (and ${RUNTIMES} runtimes)`, () => {
  it('dispatch every proposed call once, execute it once, and no Run waits for a call nobody dispatched', async () => {
    const total = Math.max(1, Math.round(SECONDS * RATE));
    const started = Date.now();
    const admitted: { runId: string; at: number }[] = [];
    const submissions: Promise<void>[] = [];
    for (let i = 0; i < total; i++) {
      const due = started + (i * 1000) / RATE;
      if (due > Date.now()) await sleep(due - Date.now());
      const key = `soak-${t.tag}-${i}`;
      submissions.push(
        (async () => {
          await script(key);
          const res = await t.client.postMessage(`conv-${key}`, { clientMessageId: key, content: `[${key}] record the effects` });
          expect(res.status).toBe(201);
          admitted.push({ runId: res.body.runId, at: Date.now() });
        })(),
      );
    }
    await Promise.all(submissions);
    const submittedMs = Date.now() - started;

    // every Run settles (a call left undispatched would keep its Run waiting until the deadline)
    const settleBy = Date.now() + SETTLE_MS;
    const checks: RunCheck[] = [];
    const settleMs: number[] = [];
    for (const { runId, at } of admitted) {
      let events = await t.log.readRun(runId);
      while (!events.some((e) => e.event.type === 'run.settled') && Date.now() < settleBy) {
        await sleep(200);
        events = await t.log.readRun(runId);
      }
      const settled = events.find((e) => e.event.type === 'run.settled');
      if (settled) settleMs.push(Date.parse(settled.event.occurredAt) - at);
      checks.push(check(runId, events));
    }
    settleMs.sort((x, y) => x - y);
    const sum = (f: (c: RunCheck) => number) => checks.reduce((n, c) => n + f(c), 0);
    const byReplica = new Map<string, number>();
    for (const c of checks) for (const d of c.dispatchers) byReplica.set(d, (byReplica.get(d) ?? 0) + 1);
    const bad = checks.filter((c) => c.problems.length > 0);
    const met = await claimMet();
    process.stdout.write(
      `TOOLS-SOAK | tools ${TOOLS} | runtimes ${RUNTIMES} | runs ${checks.length} in ${Math.round(submittedMs / 1000)} s | ` +
        `proposed ${sum((c) => c.proposed)} | dispatched ${sum((c) => c.dispatched)} | receipts ${sum((c) => c.receipts)} | ` +
        `completed ${checks.filter((c) => c.outcome === 'completed').length} | with problems ${bad.length} | ` +
        `dispatches per tools replica ${[...byReplica.values()].join('/')} | claim met ${JSON.stringify(met)} | ` +
        `settle p50 ${settleMs[Math.floor(settleMs.length / 2)] ?? '-'} ms, max ${settleMs[settleMs.length - 1] ?? '-'} ms |\n`,
    );
    for (const c of bad.slice(0, 10)) process.stdout.write(`TOOLS-SOAK problem | ${c.runId} | ${c.problems.join('; ')}\n`);
    expect(bad.map((c) => `${c.runId}: ${c.problems.join('; ')}`)).toEqual([]);
    expect(checks).toHaveLength(total);
    const perRun = CALLS_PER_TURN.reduce((n, c) => n + c, 0);
    expect(sum((c) => c.proposed)).toBe(total * perRun);
    expect(sum((c) => c.dispatched)).toBe(total * perRun);
  }, 600_000);
});
