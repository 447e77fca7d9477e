/**
 * The tools service decides from the fold it keeps from its deliveries, and a proposal handed out
 * again from the start of the log is not executed twice (K5; libs/service-kit `RunFolds`), against
 * the real JetStream. Worker A (DispatchController as built in dist/) is handed a Run's events in
 * order as its whole-Run consumer would be: its fold starts at `run.admitted` (one direct get: how
 * far the Run was then) and it dispatches, executes and records the proposal stored after that
 * without reading the Run's log. Worker C, on a connection of its own, is then handed the same
 * events again from `run.admitted` (a new durable consumer replaying the log): the proposal was
 * stored before C saw the Run begin, so its decision reads the log, finds the dispatch and the
 * receipt, and runs nothing.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Owner, StoredEvent } from '@runplane/contracts';
import type { EventLog } from '@runplane/eventlog';
import { runReads } from '@runplane/service-kit/command-handler';
import { countDirectGets } from '../../../test/support/direct-gets.js';
import { History } from '../../../test/support/history.js';
import type { DispatchController } from '../dist/dispatch.controller.js';
import { SHARED_NATS_URL } from '../../../test/support/nats-server.js';
import { appendAll, effectLines, recordingWorkerSettings, twoWorkers, type TwoWorkers } from './recording-workers.js';

const natsUrl = SHARED_NATS_URL;
const tag = randomBytes(4).toString('hex');
const space = { stream: `RPTEST_RP_${tag}`, prefix: `trp${tag}` };
const dir = mkdtempSync(join(tmpdir(), 'rp-replay-'));
const effectFile = join(dir, 'effects.log');
const settings = recordingWorkerSettings(effectFile);

let logA: EventLog;
let logC: EventLog;
let a: DispatchController;
let c: DispatchController;
let workers: TwoWorkers | undefined;

beforeAll(async () => {
  workers = await twoWorkers(natsUrl, space, settings, settings);
  ({ logA, logB: logC, a, b: c } = workers);
});
afterAll(async () => {
  await workers?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Hands `events` to a worker in order, as its whole-Run consumer does: each told to its log's folds, the proposals to the worker. */
async function deliver(log: EventLog, worker: DispatchController, events: StoredEvent[]): Promise<void> {
  for (const s of events) await log.deliveries.handle(s, () => (s.event.type === 'tool.call.proposed' ? worker.onProposed(s) : Promise.resolve()));
}

const effectsOf = (runId: string) => effectLines(effectFile, runId);

describe('tools: a proposal decided from the kept fold, and the same proposal replayed from the start of the log', () => {
  it('given the Run delivered in order, then the call is dispatched, executed and recorded with no read of the log; given it replayed to a fresh worker, then that worker reads the log and executes nothing (K5)', async () => {
    const runId = `replay${tag}`;
    const args = JSON.stringify({ tag: 'c1' });
    const h = new History(runId, `conv-${runId}`)
      .admitted({ tools: ['record_effect'] })
      .turn(1, { calls: [{ id: 'c1', name: 'record_effect', args }] })
      .proposed(1, 'c1', 'record_effect', args);
    const lasts: Partial<Record<Owner, number>> = {};

    // live: the runtime's first turn is stored before run.admitted reaches A (the runtime was
    // quicker); A's fold starts at run.admitted (one direct get: how far the Run was then) and is
    // kept from the deliveries that follow; the proposal was stored after that point
    const gets = countDirectGets(logA);
    const logReads = runReads.log;
    const stored = await appendAll(logA, h.events.slice(0, -1), lasts);
    try {
      await deliver(logA, a, stored.slice(0, 1));
      const proposal = await appendAll(logA, h.events.slice(-1), lasts);
      stored.push(...proposal);
      await deliver(logA, a, stored.slice(1));
    } finally {
      gets.restore();
    }
    expect(runReads.log - logReads).toBe(0);
    expect(gets.count).toBe(1);
    const afterLive = await logA.readRun(runId);
    expect(afterLive.map((e) => e.event.type).slice(-2)).toEqual(['tool.call.dispatched', 'tool.call.receipt']);
    expect(effectsOf(runId)).toHaveLength(1);

    // replayed: every event, the proposal too, was stored before run.admitted reached C, so C's
    // decision on the proposal reads the log, which holds the dispatch and the receipt
    const replayReads = runReads.log;
    await deliver(logC, c, stored);
    expect(runReads.log - replayReads).toBeGreaterThan(0);
    const afterReplay = await logA.readRun(runId);
    expect(afterReplay.map((e) => e.seq)).toEqual(afterLive.map((e) => e.seq)); // nothing appended
    expect(effectsOf(runId)).toHaveLength(1); // executed once
  }, 60_000);
});
