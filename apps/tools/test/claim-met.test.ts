/**
 * A tools wake is never lost to a claim (K5; docs/tool-effects.md "A live executor's claim"), against the real JetStream,
 * deterministically. Two tools workers (DispatchController as built in dist/, each with its own
 * connection, so its own claim holder) and a Run whose turn proposed c1 and c2. Worker A is woken
 * by c1 while it is the only proposal in the log, decides to dispatch it, takes its claim and is
 * held there (FAULT INJECTION: `faultDispatchPauseFile`, i.e.
 * RUNPLANE_FAULT_TOOLS_DISPATCH_PAUSE_FILE); then c2 is appended.
 * - A alone, let go: it appends the dispatch it decided (c1), reads the Run again and dispatches c2
 *   itself, while c1 still executes. Before the fix nothing ever dispatched c2.
 * - Worker B, behind a real durable consumer, woken by both proposals while A holds c1's claim:
 *   it reads both, decides to dispatch both and meets A's claim; it must not acknowledge the wake
 *   (redelivered), and once A is let go every call is dispatched and executed once. Before the fix
 *   B acknowledged both wakes at once and, A's read being older, c2 was never dispatched.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kvm } from '@nats-io/kv';
import type { Owner, StoredEvent } from '@runplane/contracts';
import { consumerFilters, DurableConsumer, EventLog, partitionOf, RetryLater } from '@runplane/eventlog';
import { History } from '../../../test/support/history.js';
// the built worker: its tool threads load dist/tool-worker.js
import type { DispatchController } from '../dist/dispatch.controller.js';
import { ClaimStore } from '../dist/claims.js';
import { SHARED_NATS_URL } from '../../../test/support/nats-server.js';
import { appendAll, effectLines, recordingWorkerSettings, twoWorkers, type TwoWorkers } from './recording-workers.js';

const natsUrl = SHARED_NATS_URL;
const tag = randomBytes(4).toString('hex');
const space = { stream: `RPTEST_CM_${tag}`, prefix: `tcm${tag}` };
const dir = mkdtempSync(join(tmpdir(), 'rp-claim-met-'));
const pauseFile = join(dir, 'pause');
const effectFile = join(dir, 'effects.log');
const settings = recordingWorkerSettings(effectFile);

let logA: EventLog;
let logB: EventLog;
let a: DispatchController;
let b: DispatchController;
let workers: TwoWorkers | undefined;
let consumer: DurableConsumer | null = null;

beforeAll(async () => {
  workers = await twoWorkers(natsUrl, space, { ...settings, faultDispatchPauseFile: pauseFile }, settings);
  ({ logA, logB, a, b } = workers);
});
afterAll(async () => {
  rmSync(pauseFile, { force: true });
  await consumer?.stop();
  await workers?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Polls `fn` every 50 ms until it returns something, for up to `ms`. */
async function until<T>(fn: () => Promise<T | null | undefined> | T | null | undefined, ms: number, what: string): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== null && v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const effectsOf = (runId: string) => effectLines(effectFile, runId);

/** Checks that each of c1 and c2 was dispatched once, got one `succeeded` receipt and was executed once (K5). */
async function expectEachDispatchedAndExecutedOnce(runId: string): Promise<StoredEvent[]> {
  const events = await until(
    async () => {
      const all = await logA.readRun(runId);
      return all.filter((e) => e.event.type === 'tool.call.receipt').length >= 2 ? all : null;
    },
    20_000,
    'a receipt for both calls (c2 left undispatched is the lost wake-up)',
  );
  const ids = (type: string) => events.filter((e) => e.event.type === type).map((e) => (e.event.data as { toolCallId: string }).toolCallId);
  expect(ids('tool.call.dispatched').sort()).toEqual(['c1', 'c2']);
  expect(ids('tool.call.receipt').sort()).toEqual(['c1', 'c2']);
  expect(events.filter((e) => e.event.type === 'tool.call.receipt').map((e) => (e.event.data as { status: string }).status)).toEqual([
    'succeeded',
    'succeeded',
  ]);
  await until(() => effectsOf(runId).length >= 2, 10_000, 'the effect lines');
  expect(
    effectsOf(runId)
      .map((l) => l.split(' ')[1])
      .sort(),
  ).toEqual(['c1', 'c2']);
  return events;
}

/**
 * A Run whose turn proposed c1 and c2, where worker A was woken by c1 alone, took c1's claim and is
 * held before appending its dispatch; c2 is appended after A's read. Resolves with A's wake (still
 * running, in an object) once c2 is in the log.
 */
async function peerHoldsAfterAnOlderRead(runId: string, c1Args: Record<string, unknown> = {}) {
  const args = (t: string, extra: Record<string, unknown> = {}) => JSON.stringify({ tag: t, ...extra });
  const h = new History(runId, `conv-${runId}`)
    .admitted({ tools: ['record_effect'] })
    .turn(1, {
      calls: [
        { id: 'c1', name: 'record_effect', args: args('c1', c1Args) },
        { id: 'c2', name: 'record_effect', args: args('c2') },
      ],
    })
    .proposed(1, 'c1', 'record_effect', args('c1', c1Args))
    .proposed(1, 'c2', 'record_effect', args('c2'));
  const lasts: Partial<Record<Owner, number>> = {};
  const upToFirst = await appendAll(logA, h.events.slice(0, -1), lasts);
  const firstProposal = upToFirst[upToFirst.length - 1]!;
  expect(firstProposal.event.type).toBe('tool.call.proposed');
  writeFileSync(pauseFile, '');
  const claims = await new Kvm(logA.nc).create(ClaimStore.bucketFor(logA), { history: 1 });
  const aWake = a.onProposed(firstProposal);
  aWake.catch(() => undefined);
  await until(async () => (await claims.get(`${runId}.c1`))?.operation === 'PUT', 20_000, "A's claim on c1");
  await appendAll(logA, h.events.slice(-1), lasts);
  return { aWake };
}

describe('a tools wake after a read that missed later proposals', () => {
  it('reads the Run again after its dispatch and dispatches the later proposal itself, before its first execution ends', async () => {
    const runId = `own${tag}`;
    // c1 runs for 1.5 s: c2 must be dispatched meanwhile, not after it
    const { aWake } = await peerHoldsAfterAnOlderRead(runId, { sleepMs: 1500 });
    rmSync(pauseFile);
    await aWake;
    const events = await expectEachDispatchedAndExecutedOnce(runId);
    const types = events.map((e) => `${e.event.type} ${(e.event.data as { toolCallId?: string }).toolCallId ?? ''}`.trim());
    expect(types.indexOf('tool.call.dispatched c2')).toBeLessThan(types.indexOf('tool.call.receipt c1'));
    expect(events.filter((e) => e.event.type === 'tool.call.dispatched').every((e) => e.event.writer?.instance === logA.writer.instance)).toBe(true);
  }, 60_000);
});

describe('a tools wake that meets a peer’s claim', () => {
  it('is never acknowledged while the claim keeps it from deciding, and every call is dispatched and executed once (K5)', async () => {
    const runId = `cm${tag}`;
    const { aWake } = await peerHoldsAfterAnOlderRead(runId);

    // B, behind the durable consumer, is woken by both proposals while A holds c1's claim
    const handled: { seq: number; outcome: string; dispatchedInLog: number }[] = [];
    consumer = new DurableConsumer(
      logB,
      { durable: 'tools', filter: consumerFilters(logB.space, 'tools', partitionOf(runId, logB.space.partitions)), ackWaitMs: 30_000 },
      async (stored) => {
        if (stored.event.type !== 'tool.call.proposed' || stored.event.runId !== runId) return; // the other test's Run too is on the stream
        let outcome = 'done';
        try {
          await b.onProposed(stored);
        } catch (e) {
          outcome = e instanceof RetryLater ? 'retry-later' : String(e);
          throw e;
        } finally {
          const dispatchedInLog = (await logB.readRun(stored.event.runId)).filter((e) => e.event.type === 'tool.call.dispatched').length;
          handled.push({ seq: stored.seq, outcome, dispatchedInLog });
        }
      },
      { warn: () => undefined, error: (f, m) => console.error(m, f) },
    );
    await consumer.start();
    await until(() => new Set(handled.map((x) => x.seq)).size === 2, 30_000, 'B to handle both proposals');
    // nothing can be dispatched while A holds c1's claim, and B acknowledged neither wake meanwhile
    expect((await logA.readRun(runId)).filter((e) => e.event.type === 'tool.call.dispatched')).toHaveLength(0);
    const whileHeld = handled.slice();
    expect(whileHeld.map((x) => x.outcome)).toEqual(whileHeld.map(() => 'retry-later'));

    // A is let go: it appends the dispatch it decided from its older read, and every call is dispatched once
    rmSync(pauseFile);
    await aWake;
    await expectEachDispatchedAndExecutedOnce(runId);
    console.log(`claim-met: B's handlings of the proposals: ${JSON.stringify(handled)}`);
  }, 90_000);
});
