/**
 * A tool call's outcome, in hand, is recorded however long the log takes to take it, while its
 * executor still holds the claim (K5). Given up on the first failure, a NATS hiccup (a timeout, a
 * write racing on a cluster) turned a result the process held into an `unknown` receipt: its
 * handler failed, the call was not run again (rightly), and a sweep recorded it `unknown` once the
 * claim expired. A trial on a 3-node cluster lost four results that way.
 *
 * Given a tools worker (the DispatchController as built in dist/) whose command handler fails the
 * first two records of an outcome with a NATS timeout (the fault injected at the handler, the one
 * place every record goes through), when it executes a call, then the call's receipt is
 * `succeeded`, the tool ran once, and its claim is removed.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kvm } from '@nats-io/kv';
import { errors } from '@nats-io/transport-node';
import type { Owner } from '@runplane/contracts';
import { EventLog } from '@runplane/eventlog';
import { RunCommandHandler } from '@runplane/service-kit/command-handler';
import { DispatchController } from '../dist/dispatch.controller.js';
import { ClaimStore } from '../dist/claims.js';
import { History } from '../../../test/support/history.js';
import { SHARED_NATS_URL, SUITE_NATS } from '../../../test/support/nats-server.js';
import { waitFor } from '../../../test/support/wait.js';
import { appendAll, effectLines, recordingWorkerSettings } from './recording-workers.js';

const tag = randomBytes(4).toString('hex');
const space = { stream: `RPTEST_RR_${tag}`, prefix: `trr${tag}` };
const dir = mkdtempSync(join(tmpdir(), 'rp-record-retry-'));
const effectFile = join(dir, 'effects.log');
// a sweep every second: without the retry, the claim left behind is swept `unknown` within the test
const settings = { ...recordingWorkerSettings(effectFile), claimTtlMs: 3_000, sweepMs: 1_000 };

/**
 * A command handler whose first `failures` decisions that would append a receipt fail with a NATS
 * timeout instead of being appended (the fault injected where every record of an outcome goes).
 */
class FlakyRecords extends RunCommandHandler {
  failed = 0;
  constructor(
    log: EventLog,
    private readonly failures: number,
  ) {
    super(log, 'tools');
  }
  override handle(...[runId, decideFn, opts]: Parameters<RunCommandHandler['handle']>): ReturnType<RunCommandHandler['handle']> {
    return super.handle(
      runId,
      (facts, now) => {
        const events = decideFn(facts, now);
        if (events.some((e) => e.type === 'tool.call.receipt') && this.failed < this.failures) {
          this.failed++;
          throw new errors.TimeoutError();
        }
        return events;
      },
      opts,
    );
  }
}

let log: EventLog;
let commands: FlakyRecords;
let worker: DispatchController;

beforeAll(async () => {
  log = await EventLog.connect({ ...SUITE_NATS, natsUrl: SHARED_NATS_URL, ...space, name: 'tools' });
  commands = new FlakyRecords(log, 2);
  worker = new DispatchController(log, commands, settings);
  await worker.onModuleInit();
}, 60_000);
afterAll(async () => {
  await worker?.onApplicationShutdown();
  await (await new Kvm(log.nc).open(ClaimStore.bucketFor(log))).destroy().catch(() => undefined);
  await log?.destroyStream();
  await log?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("a tool call's outcome recorded through a NATS hiccup (K5)", () => {
  it('given the first two records of the outcome failing with a NATS timeout, when the call has run, then its receipt is succeeded, the tool ran once and its claim is removed', async () => {
    const runId = `rr${tag}`;
    const args = JSON.stringify({ tag: 'r1' });
    const h = new History(runId, `conv-${runId}`)
      .admitted({ tools: ['record_effect'] })
      .turn(1, { calls: [{ id: 'r1', name: 'record_effect', args }] })
      .proposed(1, 'r1', 'record_effect', args);
    const lasts: Partial<Record<Owner, number>> = {};
    const stored = await appendAll(log, h.events, lasts);
    await worker.onProposed(stored[stored.length - 1]!);

    const events = await waitFor(
      'the receipt of r1',
      async () => {
        const all = await log.readRun(runId);
        return all.some((e) => e.event.type === 'tool.call.receipt') ? all : null;
      },
      30_000,
    );
    expect(commands.failed).toBe(2);
    const receipts = events.filter((e) => e.event.type === 'tool.call.receipt').map((e) => (e.event.data as { status: string }).status);
    expect(receipts).toEqual(['succeeded']);
    expect(effectLines(effectFile, runId)).toHaveLength(1);
    const store = await ClaimStore.open(log, settings.claimTtlMs);
    await waitFor('the claim removed', async () => {
      const e = await store.kv.get(ClaimStore.keyOf(runId, 'r1')).catch(() => null);
      return !e || e.operation !== 'PUT';
    });
  }, 60_000);
});
