/**
 * The lease keeper across a NATS restart, with the fault really injected (K6, K10: a NATS restart
 * is not an expiry). A renewal written to the server just before it died gets no answer: the
 * client waits for it until its request timeout (5 s). The keeper must not wait with it: once the
 * connection is back it renews the lease at once, so that recovery, which gives a holder one TTL
 * plus the reconnection grace after its own reconnection, finds the lease renewed.
 *
 * Given a lease held on a nats-server of this file's own, when the server is frozen (SIGSTOP)
 * until a renewal is in flight, killed (SIGKILL) and started again on the same store, then the
 * lease is renewed in the bucket while that renewal is still unanswered, and the lease is still
 * held (no `lost`). Before the fix the next renewal waited for the stale one's timeout.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { LeaseKeeper } from '../src/lease-keeper.js';
import { emptyFacts } from '@runplane/run-facts';
import { EventLog, LeaseStore, type HeldLease } from '@runplane/eventlog';
import { currentNatsServerBinary, nextReconnect, SUITE_NATS, TestNatsServer } from '../../../test/support/nats-server.js';
import { waitFor } from '../../../test/support/wait.js';

const tag = randomBytes(4).toString('hex');
/** Renewed every 2 s: the test waits for one renewal to be in flight, and the next tick is far enough to tell apart. */
const TTL_MS = 6_000;

let server: TestNatsServer;
let log: EventLog;
let leases: LeaseStore;
let keeper: LeaseKeeper | undefined;

beforeAll(async () => {
  server = await TestNatsServer.start({ bin: currentNatsServerBinary().bin });
  log = await EventLog.connect({ natsUrl: server.url, ...SUITE_NATS, stream: `RPTEST_LK_${tag}`, prefix: `tlk${tag}` });
  leases = await LeaseStore.open(log);
}, 60_000);

afterAll(async () => {
  keeper?.stop();
  await log?.close().catch(() => undefined);
  await server?.cleanup();
});

describe('the lease keeper across a NATS restart (K6, K10)', () => {
  it('given a renewal in flight when nats-server is killed, when it is started again, then the lease is renewed at once, while that renewal is still unanswered, and still held', async () => {
    /** Every renewal the keeper started, and whether NATS answered it (either way). */
    const renewals: { startedAt: number; answered: boolean }[] = [];
    const renew = leases.renew.bind(leases);
    leases.renew = (lease: HeldLease, holder: { service: string; instance: string }) => {
      const r = { startedAt: Date.now(), answered: false };
      renewals.push(r);
      return renew(lease, holder).finally(() => (r.answered = true));
    };
    const lost: string[] = [];
    keeper = new LeaseKeeper(log, leases, TTL_MS);
    keeper.bind({ wake: () => undefined, lost: (runId) => lost.push(runId) });
    const runId = `run-${tag}`;
    const taken = await keeper.take(runId, emptyFacts(runId));
    expect(taken?.epoch).toBe(1);

    // a renewal that NATS answered: the keeper renews on its own
    await waitFor('a first renewal answered', () => renewals.some((r) => r.answered));
    // FAULT: frozen, so that the next renewal is written to the server and never answered; then killed
    await server.freeze();
    const frozenAt = Date.now();
    const stale = await waitFor('a renewal in flight on the frozen server', () => renewals.find((r) => r.startedAt >= frozenAt));
    const revisionBefore = keeper.holding(runId)!.revision;
    await server.kill();
    const reconnected = nextReconnect(log.nc, 30_000);
    await server.restart();
    await reconnected;

    // renewed in the bucket, by this holder, at this epoch, while the stale renewal still waits for its answer
    const renewed = await waitFor('the lease renewed after the restart', async () => {
      const e = await leases.get(runId).catch(() => null);
      return e && e.revision > revisionBefore ? e : null;
    });
    expect(stale.answered).toBe(false);
    expect(renewed.value).toMatchObject({ state: 'held', epoch: 1, holder: { instance: log.writer.instance } });
    // the stale renewal, once it times out, neither loses the lease nor undoes the newer revision
    await waitFor('the stale renewal answered (timed out)', () => stale.answered, 15_000);
    await waitFor('the keeper holding the renewed revision', () => (keeper!.holding(runId)?.revision ?? 0) >= renewed.revision);
    expect(lost).toEqual([]);
    expect(keeper.heldRuns()).toEqual([runId]);
    expect((await leases.get(runId))?.value.state).toBe('held');
  }, 60_000);

  it('given a renewal of this holder that landed just before the release, when the Run parks, then the lease is released parked (not left held for recovery); given a fence meanwhile, then it is not released', async () => {
    // renewed every 20 s: nothing but the test moves the lease here
    const quiet = new LeaseKeeper(log, leases, 60_000);
    quiet.bind({ wake: () => undefined, lost: () => undefined });
    try {
      const raced = `run-raced-${tag}`;
      const held = await quiet.take(raced, emptyFacts(raced));
      // the renewal's answer never reached the keeper: the bucket's revision moved on, the keeper's did not
      await leases.renew(held!, log.writer);
      const wakeBy = new Date(Date.now() + 60_000).toISOString();
      expect(await quiet.release(raced, 'parked', wakeBy)).toBe(true);
      expect((await leases.get(raced))?.value).toMatchObject({ state: 'released', reason: 'parked', epoch: 1, wakeBy });
      expect(quiet.holding(raced)).toBeUndefined();

      const fenced = `run-fenced-${tag}`;
      await quiet.take(fenced, emptyFacts(fenced));
      await leases.fence((await leases.get(fenced))!);
      expect(await quiet.release(fenced, 'parked', wakeBy)).toBe(false);
      expect((await leases.get(fenced))?.value.state).toBe('fenced');
    } finally {
      quiet.stop();
    }
  }, 30_000);
});
