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
    // every claim renewal the worker starts, and when it settled (answered, or given up at the
    // client's request timeout): the real store's, watched
    const renewals: { startedAt: number; settledAt: number | null }[] = [];
    // restored in `finally`; called with the store it was called on
    // eslint-disable-next-line @typescript-eslint/unbound-method
    const renew = ClaimStore.prototype.renew;
    ClaimStore.prototype.renew = function (this: ClaimStore, held: HeldClaim, runId: string, toolCallId: string) {
      const r: (typeof renewals)[number] = { startedAt: Date.now(), settledAt: null };
      renewals.push(r);
      return renew.call(this, held, runId, toolCallId).finally(() => (r.settledAt = Date.now()));
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

      await waitFor('a first claim renewal answered', () => renewals.some((r) => r.settledAt !== null));
      const before = await waitFor('the claim as renewed', entry);
      // FAULT: frozen, so that the next renewal is written to the server and never answered; then killed
      await server.freeze();
      const frozenAt = Date.now();
      const stale = await waitFor('a claim renewal in flight on the frozen server', () => renewals.find((r) => r.startedAt >= frozenAt));
      await server.kill();
      const reconnected = nextReconnect(logA.nc, 30_000);
      await server.restart();
      await reconnected;

      // another renewal, started after the stale one, answered and stored
      const renewed = await waitFor('the claim renewed after the restart', async () => {
        const e = await entry();
        const since = renewals.find((r) => r !== stale && r.startedAt >= stale.startedAt && r.settledAt !== null);
        return since && e?.operation === 'PUT' && e.revision > before.revision ? since : null;
      });
      // ... and started while the stale one still waited for its answer: the executor did not wait
      // with it (told by the order of the two, not by when this test looked: under load the look
      // can come after the stale request's 5 s timeout even when the renewal was at once)
      expect({ renewedBeforeTheStaleSettled: stale.settledAt === null || renewed.startedAt < stale.settledAt }).toEqual({
        renewedBeforeTheStaleSettled: true,
      });
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
