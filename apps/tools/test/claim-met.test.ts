/**
 * A tools wake that meets a claim a peer holds is never dropped (issue [8], K5), against the real
 * JetStream, deterministically: two tools workers (DispatchController, as built in dist/, each
 * with its own connection, so its own claim holder) on one Run whose turn proposed two calls.
 * - worker A is woken by the first proposal while it is the only one in the log, decides to
 *   dispatch it, takes its claim and is held there (FAULT INJECTION:
 *   `faultDispatchPauseFile`, i.e. RUNPLANE_FAULT_TOOLS_DISPATCH_PAUSE_FILE);
 * - the second proposal is appended, and worker B, behind a real durable consumer, is woken by
 *   both proposals: it reads both, decides to dispatch both, and meets A's claim on the first;
 * - A is let go: it appends the dispatch it decided (the first call only: its read was older).
 * Then the second call must still be dispatched and executed once; before the fix B's wakes
 * returned silently on A's claim and the second call was never dispatched.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kvm } from '@nats-io/kv';
import { subjectTokenOf, type Owner, type StoredEvent } from '@runplane/contracts';
import { consumerFilters, DurableConsumer, EventLog, RetryLater } from '@runplane/eventlog';
import { History } from '../../../test/support/history.js';
// the built worker: its tool threads load dist/tool-worker.js
import { DispatchController, type ToolsSettings } from '../dist/dispatch.controller.js';
import { ClaimStore } from '../dist/claims.js';

const natsUrl = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
const tag = randomBytes(4).toString('hex');
const space = { stream: `RPTEST_CM_${tag}`, prefix: `tcm${tag}` };
const dir = mkdtempSync(join(tmpdir(), 'rp-claim-met-'));
const pauseFile = join(dir, 'pause');
const effectFile = join(dir, 'effects.log');
const settings: ToolsSettings = {
  timeoutMs: 20_000,
  claimTtlMs: 6_000,
  sweepMs: 60_000,
  abandonMs: 0,
  threads: 1,
  testTools: ['record_effect'],
  recordEffectFile: effectFile,
};

let logA: EventLog;
let logB: EventLog;
let a: DispatchController;
let b: DispatchController;
let consumer: DurableConsumer | null = null;

beforeAll(async () => {
  logA = await EventLog.connect({ natsUrl, ...space, name: 'tools' });
  logB = await EventLog.connect({ natsUrl, ...space, name: 'tools' });
  a = new DispatchController(logA, { ...settings, faultDispatchPauseFile: pauseFile });
  b = new DispatchController(logB, settings);
});
afterAll(async () => {
  rmSync(pauseFile, { force: true });
  await consumer?.stop();
  await a?.onApplicationShutdown();
  await b?.onApplicationShutdown();
  if (logA) {
    await (await new Kvm(logA.nc).open(ClaimStore.bucketFor(logA))).destroy().catch(() => undefined);
    await logA.destroyStream();
    await logA.close();
  }
  await logB?.close();
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

/** Appends a History's events to the real log in order (each conditional on its subject's last sequence). */
async function appendAll(log: EventLog, events: StoredEvent[], lasts: Partial<Record<Owner, number>>): Promise<StoredEvent[]> {
  const out: StoredEvent[] = [];
  for (const { event } of events) {
    const token = subjectTokenOf(event);
    const r = await log.append(event, lasts[token] ?? 0);
    lasts[token] = r.seq;
    out.push(r.stored);
  }
  return out;
}

const effectLines = (runId: string) =>
  existsSync(effectFile)
    ? readFileSync(effectFile, 'utf8')
        .split('\n')
        .filter((l) => l.startsWith(`${runId} `))
    : [];

describe('a tools wake that meets a peer’s claim', () => {
  it('is not dropped: the call proposed after the peer’s read is dispatched and executed once (K5)', async () => {
    const runId = `cm${tag}`;
    const args = (t: string) => JSON.stringify({ tag: t });
    const h = new History(runId, `conv-${tag}`)
      .admitted({ tools: ['record_effect'] })
      .turn(1, {
        calls: [
          { id: 'c1', name: 'record_effect', args: args('c1') },
          { id: 'c2', name: 'record_effect', args: args('c2') },
        ],
      })
      .proposed(1, 'c1', 'record_effect', args('c1'))
      .proposed(1, 'c2', 'record_effect', args('c2'));
    const lasts: Partial<Record<Owner, number>> = {};
    const upToFirst = await appendAll(logA, h.events.slice(0, -1), lasts);
    const firstProposal = upToFirst[upToFirst.length - 1]!;
    expect(firstProposal.event.type).toBe('tool.call.proposed');

    // A: woken by the first proposal alone, takes its claim and is held before appending the dispatch
    writeFileSync(pauseFile, '');
    const claims = await new Kvm(logA.nc).create(ClaimStore.bucketFor(logA), { history: 1 });
    const aWake = a.onProposed(firstProposal);
    aWake.catch(() => undefined);
    await until(async () => (await claims.get(`${runId}.c1`))?.operation === 'PUT', 20_000, "A's claim on c1");

    // the second proposal lands after A's read; B, behind the durable consumer, is woken by both
    await appendAll(logA, h.events.slice(-1), lasts);
    const handled: { seq: number; outcome: string }[] = [];
    consumer = new DurableConsumer(
      logB,
      { durable: 'tools', filter: consumerFilters(logB.space, 'tools')[0]!, ackWaitMs: 30_000 },
      async (stored) => {
        if (stored.event.type !== 'tool.call.proposed') return;
        try {
          await b.onProposed(stored);
          handled.push({ seq: stored.seq, outcome: 'done' });
        } catch (e) {
          handled.push({ seq: stored.seq, outcome: e instanceof RetryLater ? 'retry-later' : String(e) });
          throw e;
        }
      },
      { warn: () => undefined, error: (f, m) => console.error(m, f) },
    );
    await consumer.start();
    // both proposals have been handled by B at least once while A holds the claim on c1
    await until(() => new Set(handled.map((x) => x.seq)).size === 2, 30_000, 'B to handle both proposals');
    const dispatchedMeanwhile = (await logA.readRun(runId)).filter((e) => e.event.type === 'tool.call.dispatched');
    expect(dispatchedMeanwhile).toHaveLength(0); // nothing can be dispatched while A holds c1's claim

    // A is let go: it appends the dispatch it decided from its older read (c1 only) and executes c1
    rmSync(pauseFile);
    await aWake;

    // c2 is dispatched too (by B, on a redelivered or retried wake), and each call has one receipt
    const events = await until(
      async () => {
        const all = await logA.readRun(runId);
        const receipts = all.filter((e) => e.event.type === 'tool.call.receipt');
        return receipts.length >= 2 ? all : null;
      },
      20_000,
      'a receipt for both calls (c2 left undispatched is the lost wake-up)',
    );
    const ofType = (type: string) => events.filter((e) => e.event.type === type).map((e) => (e.event.data as { toolCallId: string }).toolCallId);
    expect(ofType('tool.call.dispatched').sort()).toEqual(['c1', 'c2']);
    expect(ofType('tool.call.receipt').sort()).toEqual(['c1', 'c2']);
    const receipts = events.filter((e) => e.event.type === 'tool.call.receipt').map((e) => (e.event.data as { status: string }).status);
    expect(receipts).toEqual(['succeeded', 'succeeded']);
    // c1 by A, c2 by B: each executed exactly once (K5)
    const dispatchers = events
      .filter((e) => e.event.type === 'tool.call.dispatched')
      .map((e) => [(e.event.data as { toolCallId: string }).toolCallId, e.event.writer?.instance]);
    expect(Object.fromEntries(dispatchers)).toEqual({ c1: logA.writer.instance, c2: logB.writer.instance });
    await until(() => effectLines(runId).length >= 2, 10_000, 'the effect lines');
    expect(
      effectLines(runId)
        .map((l) => l.split(' ')[1])
        .sort(),
    ).toEqual(['c1', 'c2']);
    console.log(`claim-met: B's handlings of the proposals: ${JSON.stringify(handled)}`);
  }, 90_000);
});
