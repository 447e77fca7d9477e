/**
 * A running tool call's claim across a NATS restart, with the fault really injected (K5, K10: a
 * NATS restart is not an expiry). A claim renewal written to the server just before it died gets
 * no answer: the client waits for it until its request timeout (5 s). The executor must not wait
 * with it: once the connection is back it renews the claim at once, so that a peer's claim sweep
 * (which gives a claim one TTL plus the reconnection grace after its own reconnection) does not
 * record the call `unknown` while it still runs.
 *
 * Given a tools worker (the DispatchController as built in dist/) executing a slow call under its
 * claim on a nats-server of this file's own, when the server is frozen (SIGSTOP) until a claim
 * renewal is in flight, killed (SIGKILL) and started again on the same store, then the claim is
 * renewed in the bucket while that renewal is still unanswered; the call then succeeds, executed
 * once, and its claim is removed.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Owner } from '@runplane/contracts';
import { ClaimStore, type HeldClaim } from '../dist/claims.js';
import { History } from '../../../test/support/history.js';
import { currentNatsServerBinary, nextReconnect, TestNatsServer } from '../../../test/support/nats-server.js';
import { waitFor } from '../../../test/support/wait.js';
import { appendAll, effectLines, recordingWorkerSettings, twoWorkers, type TwoWorkers } from './recording-workers.js';

const tag = randomBytes(4).toString('hex');
const space = { stream: `RPTEST_CR_${tag}`, prefix: `tcr${tag}` };
const dir = mkdtempSync(join(tmpdir(), 'rp-claim-renewal-'));
const effectFile = join(dir, 'effects.log');
/** Renewed every 2 s: one renewal is caught in flight, and the next interval is far enough to tell apart. */
const settings = { ...recordingWorkerSettings(effectFile), claimTtlMs: 6_000 };

let server: TestNatsServer;
let workers: TwoWorkers | undefined;

beforeAll(async () => {
  server = await TestNatsServer.start({ bin: currentNatsServerBinary().bin });
  workers = await twoWorkers(server.url, space, settings, settings);
}, 60_000);
afterAll(async () => {
  await workers?.close().catch(() => undefined);
  await server?.cleanup();
  rmSync(dir, { recursive: true, force: true });
});

describe("a running call's claim across a NATS restart (K5, K10)", () => {
  it('given a claim renewal in flight when nats-server is killed, when it is started again, then the claim is renewed at once, while that renewal is still unanswered; the call succeeds, executed once', async () => {
    const { logA, a } = workers!;
    // every claim renewal the worker starts, and whether it was answered (either way): the real store's, watched
    const renewals: { startedAt: number; answered: boolean }[] = [];
    // restored in `finally`; called with the store it was called on
    // eslint-disable-next-line @typescript-eslint/unbound-method
    const renew = ClaimStore.prototype.renew;
    ClaimStore.prototype.renew = function (this: ClaimStore, held: HeldClaim, runId: string, toolCallId: string) {
      const r = { startedAt: Date.now(), answered: false };
      renewals.push(r);
      return renew.call(this, held, runId, toolCallId).finally(() => (r.answered = true));
    };
    try {
      const runId = `cr${tag}`;
      // runs until the test has seen what it waits for (the file), at most 18 s (under the worker's 20 s call timeout)
      const done = join(dir, 'c1.done');
      const args = JSON.stringify({ tag: 'c1', sleepMs: 18_000, untilFile: done });
      const h = new History(runId, `conv-${runId}`)
        .admitted({ tools: ['record_effect'] })
        .turn(1, { calls: [{ id: 'c1', name: 'record_effect', args }] })
        .proposed(1, 'c1', 'record_effect', args);
      const lasts: Partial<Record<Owner, number>> = {};
      const stored = await appendAll(logA, h.events, lasts);
      const woken = a.onProposed(stored[stored.length - 1]!);
      woken.catch(() => undefined);
      const store = await ClaimStore.open(logA, settings.claimTtlMs);
      const key = ClaimStore.keyOf(runId, 'c1');
      const entry = async () => (await store.kv.get(key).catch(() => null)) ?? null;

      await waitFor('a first claim renewal answered', () => renewals.some((r) => r.answered));
      const before = await waitFor('the claim as renewed', entry);
      // FAULT: frozen, so that the next renewal is written to the server and never answered; then killed
      await server.freeze();
      const frozenAt = Date.now();
      const stale = await waitFor('a claim renewal in flight on the frozen server', () => renewals.find((r) => r.startedAt >= frozenAt));
      await server.kill();
      const reconnected = nextReconnect(logA.nc, 30_000);
      await server.restart();
      await reconnected;

      // another renewal, started after the freeze, answered and stored while the stale one still waits for its answer
      await waitFor('the claim renewed after the restart', async () => {
        const e = await entry();
        const renewedSince = renewals.some((r) => r !== stale && r.startedAt >= frozenAt && r.answered);
        return renewedSince && e?.operation === 'PUT' && e.revision > before.revision;
      });
      expect(stale.answered).toBe(false);
      writeFileSync(done, '');

      // the call runs to its end: one receipt, succeeded, executed once, and its claim removed
      const events = await waitFor(
        'the receipt of c1',
        async () => {
          const all = await logA.readRun(runId);
          return all.some((e) => e.event.type === 'tool.call.receipt') ? all : null;
        },
        40_000,
      );
      const receipts = events.filter((e) => e.event.type === 'tool.call.receipt').map((e) => (e.event.data as { status: string }).status);
      expect(receipts).toEqual(['succeeded']);
      expect(effectLines(effectFile, runId)).toHaveLength(1);
      await waitFor('the claim removed', async () => {
        const e = await entry();
        return !e || e.operation !== 'PUT';
      });
    } finally {
      ClaimStore.prototype.renew = renew;
    }
  }, 90_000);
});
