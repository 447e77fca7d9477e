/**
 * NATS restarts with the fault really injected (K5, K6, K10; docs/recovery.md "A NATS restart"): the whole stack runs
 * against a nats-server this file starts itself (its own port and store, so a restart keeps the
 * stream and the buckets), and the server is stopped and started again, about 1.5 s down, at
 * several offsets across a Run: during a slow model turn, right when the turn's outcome is
 * appended, during a tool call, and right when the tool's receipt is appended. The outage is
 * longer than the lease TTL, so renewals are really missed. Each Run must settle exactly once,
 * `completed` (a NATS outage is not an expiry), with the model asked exactly as often as its
 * script says, each tool executed once, and every fact committed before the outage still there.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { effectsOf, lostFacts, modelRequestsFor, outcomeOf, reportRow, sleep, until, waitForSettled, waitForType } from '../support/faults.js';
import { TestNatsServer } from '../support/nats-server.js';
import { eventually, startTestStack, testNatsServerBinary, type TestStack } from '../support/stack.js';

const DOWN_MS = 1_500;
const LEASE_TTL_MS = 1_200;
const dir = mkdtempSync(join(tmpdir(), 'rp-natsrestart-'));
const effectFile = join(dir, 'effects.log');

let server: TestNatsServer;
let t: TestStack;

beforeAll(async () => {
  t = await startTestStack(
    'natsrst',
    {
      RUNPLANE_TEST_TOOLS: 'record_effect',
      RUNPLANE_RECORD_EFFECT_FILE: effectFile,
      RUNPLANE_LEASE_TTL_MS: String(LEASE_TTL_MS),
      RUNPLANE_RECOVERY_SWEEP_MS: '100',
      RUNPLANE_ACK_WAIT_MS: '2000',
      RUNPLANE_TOOL_CLAIM_TTL_MS: '3000',
      RUNPLANE_TOOL_CLAIM_SWEEP_MS: '300',
      RUNPLANE_TOOL_TIMEOUT_MS: '30000',
    },
    // a server of this file's own, with the stack's users and permissions, that it can restart
    { nats: async (config, auth) => (server = await TestNatsServer.start({ bin: testNatsServerBinary(), config, auth })).url },
  );
}, 120_000);

afterAll(async () => {
  await t?.stop();
  await server?.cleanup();
  rmSync(dir, { recursive: true, force: true });
});

interface Case {
  name: string;
  /** Scripted steps bound to the case's key. */
  steps: (key: string) => unknown[];
  /** Model requests the script makes (1: answer only; 2: a tool call, then the answer). */
  modelRequests: number;
  tools: number;
  /** Waits for the moment to take NATS down. */
  offset: (runId: string) => Promise<void>;
}

const answer = (key: string) => ({ reply: { content: `The answer for ${key}.\n\nIt has two paragraphs, both committed.` } });
const toolThenAnswer = (sleepMs: number) => (key: string) => [
  { reply: { content: '', toolCalls: [{ name: 'record_effect', arguments: { tag: key, sleepMs } }] } },
  answer(key),
];
/** Resolves `ms` after the tool of the Run started executing (its line in the effect file). */
const afterToolStart = (ms: number) => async (runId: string) => {
  const deadline = Date.now() + 30_000;
  while (effectsOf(effectFile, runId).length === 0) {
    if (Date.now() > deadline) throw new Error('the tool never started');
    await sleep(50);
  }
  await sleep(ms);
};
/** Resolves `ms` after the Run's first model turn was requested. */
const afterTurnRequested = (ms: number) => async (runId: string) => {
  await waitForType(t, runId, 'model.turn.requested');
  await sleep(ms);
};

const cases: Case[] = [
  {
    name: 'during a slow model turn (the reply comes after NATS is back)',
    steps: (key) => [{ ...answer(key), delayMs: 4_500 }],
    modelRequests: 1,
    tools: 0,
    offset: afterTurnRequested(300),
  },
  {
    name: "right when the turn's outcome is appended (the reply arrives while NATS is down)",
    steps: (key) => [{ ...answer(key), delayMs: 2_500 }],
    modelRequests: 1,
    tools: 0,
    offset: afterTurnRequested(2_200),
  },
  {
    name: 'right after the model request was sent (a short turn ends while NATS is down)',
    steps: (key) => [{ ...answer(key), delayMs: 400 }],
    modelRequests: 1,
    tools: 0,
    offset: afterTurnRequested(0),
  },
  {
    name: 'during a tool call (the tool ends after NATS is back)',
    steps: toolThenAnswer(4_500),
    modelRequests: 2,
    tools: 1,
    offset: afterToolStart(300),
  },
  {
    name: "right when the tool's receipt is appended (the tool ends while NATS is down)",
    steps: toolThenAnswer(2_000),
    modelRequests: 2,
    tools: 1,
    offset: afterToolStart(1_700),
  },
];

describe('a NATS restart of ~1.5 s at several offsets of a Run (K5, K6, K10)', () => {
  for (const [i, c] of cases.entries()) {
    it(`${c.name}: settles once, completed; the model asked ${cases[i]!.modelRequests} time(s); each tool run once; nothing committed lost`, async () => {
      const key = `natsrst${i}-${t.tag}`;
      await t.setScenario({ steps: c.steps(key), then: 'error' }, key);
      const admitted = await t.client.postMessage(`conv-${key}`, { clientMessageId: key, content: `[${key}] What does DIA hold?` });
      expect(admitted.status).toBe(201);
      const runId = admitted.body.runId;
      await c.offset(runId);
      const before = await t.log.readRun(runId);
      const { downAt, upAt } = await server.bounce(DOWN_MS);
      const events = await waitForSettled(t, runId, 60_000);
      const settleMs = Date.now() - downAt;
      // give a stale write (a renewal wake, a redelivery) time to show up before the final read
      await sleep(2 * LEASE_TTL_MS);
      const final = await until(t, runId, () => true, 30_000, 'a final read');
      const o = outcomeOf(final);
      const lost = lostFacts(before, final);
      const effects = effectsOf(effectFile, runId).length;
      const asked = await modelRequestsFor(t, key);
      reportRow({
        fault: `NATS down ${upAt - downAt} ms ${c.name}`,
        runs: 1,
        settled: `${o.settlements} x ${o.outcome ?? '-'}`,
        duplicates: Math.max(0, effects - c.tools) + Math.max(0, asked - c.modelRequests) + o.duplicateEventIds.length,
        lost: lost.length,
        settleMs,
      });
      expect(events.length).toBeGreaterThan(0);
      expect({ settlements: o.settlements, outcome: o.outcome, reason: o.reason, fenced: o.fenced }).toMatchObject({
        settlements: 1,
        outcome: 'completed',
        fenced: 0,
      });
      expect(asked).toBe(c.modelRequests);
      expect(o.turnsRequested).toBe(c.modelRequests);
      expect(o.turnsCompleted).toBe(c.modelRequests);
      expect(o.dispatched).toBe(c.tools);
      expect(o.receipts).toBe(c.tools);
      expect(effects).toBe(c.tools);
      expect(o.passages).toBe(2);
      expect(o.published).toBe(1);
      expect(o.duplicateEventIds).toEqual([]);
      expect(lost).toEqual([]);
    }, 120_000);
  }
});

describe('health while nats-server is frozen (it used to answer 200 on /healthz for 40 s)', () => {
  it('given SIGSTOP on nats-server, then every service (the projector too) answers /readyz and /healthz 503 naming NATS within a few seconds while /livez stays 200; after SIGCONT, 200 again', async () => {
    const services = [...t.stack.services.entries()];
    expect(services.map(([name]) => name)).toContain('projector');
    const statusOf = async (url: string) => (await fetch(url, { signal: AbortSignal.timeout(10_000) })).status;
    for (const [, p] of services) expect(await statusOf(`${p.url}/readyz`)).toBe(200);
    await server.freeze();
    try {
      // every service and path asked at once (each answer waits for its checks' 2 s bound), each answer timed
      const answers = await Promise.all(
        services.flatMap(([name, p]) =>
          ['/readyz', '/healthz'].map(async (path) => {
            const started = Date.now();
            const res = await fetch(`${p.url}${path}`, { signal: AbortSignal.timeout(10_000) });
            const body = (await res.json()) as { code?: string; detail?: string; checks?: Record<string, { status: string }> };
            return { name, path, res, body, ms: Date.now() - started };
          }),
        ),
      );
      for (const { name, path, res, body } of answers) {
        expect({ name, path, status: res.status, code: body.code }).toEqual({ name, path, status: 503, code: 'dependency_unavailable' });
        expect(body.detail).toMatch(/NATS/);
        // every service, the projector too, answers the kit's body: each check's result in `checks`
        expect(body.checks?.nats?.status).toBe('down');
        if (name === 'projector') expect(body.checks?.postgres?.status).toBe('up');
      }
      for (const [name, p] of services) expect({ name, livez: await statusOf(`${p.url}/livez`) }).toEqual({ name, livez: 200 });
      // each answer comes within the 2 s check bound (two checks in parallel per request), with a margin for a loaded machine
      expect(answers.filter((a) => a.ms >= 4_000).map(({ name, path, ms }) => ({ name, path, ms }))).toEqual([]);
    } finally {
      server.thaw();
    }
    await Promise.all(
      services.map(([name, p]) => eventually(async () => ((await statusOf(`${p.url}/readyz`)) === 200 ? true : null), 30_000, `${name} ready again`)),
    );
  }, 120_000);
});
