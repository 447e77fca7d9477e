/**
 * Recovery cut off from NATS judges no lease (K6, K10: late is not gone), on a nats-server of this
 * file's own, killed and started again. While recovery's connection is down its view of the
 * renewals is stale, and a fence it wrote then would wait in its client's buffer and land on its
 * reconnection, before a live holder that reconnected a moment later could renew (seen in CI: a
 * 1.2 s lease fenced 1.2 s into a 1.8 s NATS restart, its runtime alive).
 *
 * Given a lease renewed every third of its TTL by a holder that beats, on its own connection, when
 * nats-server is down for longer than the TTL and the holder renews only after recovery has
 * reconnected, then the lease is still held by it; and when the holder then stops (gone), it is
 * fenced once the grace after the reconnection has run out.
 *
 * What it does not show: here recovery's own reads during the outage time out, and the older rule
 * (an unanswered request restarts the grace) held the fence back too, so this file passes without
 * the rule it guards; libs/eventlog/test/connection-grace.test.ts fails without it.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { EventLog, HeartbeatStore, heartbeatKey, LeaseStore, RECONNECT_GRACE_MS, type ConnectionGrace, type HeldLease } from '@runplane/eventlog';
import { RunCommandHandler } from '@runplane/service-kit/command-handler';
import { LeaseWatcher } from '../src/lease-watcher.service.js';
import { currentNatsServerBinary, nextReconnect, SUITE_NATS, TestNatsServer } from '../../../test/support/nats-server.js';
import { waitFor } from '../../../test/support/wait.js';

const tag = randomBytes(4).toString('hex');
const TTL_MS = 2_000;
/** Longer than the TTL (the restart in CI that fenced a live holder, whose lease TTL was 1.2 s, lasted 1.8 s). */
const OUTAGE_MS = 3_000;
const holder = { service: 'runtime', instance: `runtime-${tag}` };
const runId = `o${tag}`;

let server: TestNatsServer;
let recoveryLog: EventLog;
let holderLog: EventLog;
let watcher: LeaseWatcher;

beforeAll(async () => {
  server = await TestNatsServer.start({ bin: currentNatsServerBinary().bin });
  const space = { ...SUITE_NATS, natsUrl: server.url, stream: `RPTEST_OO_${tag}`, prefix: `too${tag}` };
  recoveryLog = await EventLog.connect({ ...space, name: 'recovery' });
  holderLog = await EventLog.connect({ ...space, name: 'holder' });
  watcher = new LeaseWatcher(
    recoveryLog,
    new RunCommandHandler(recoveryLog, 'recovery'),
    await LeaseStore.open(recoveryLog),
    await HeartbeatStore.open(recoveryLog),
    { leaseTtlMs: TTL_MS, sweepMs: 100 },
  );
  // no grace from the start: only the outage may hold the judge back
  (watcher as unknown as { grace: ConnectionGrace }).grace.reconnected(0);
  await watcher.onApplicationBootstrap();
}, 60_000);
afterAll(async () => {
  await watcher?.onApplicationShutdown();
  await recoveryLog?.close().catch(() => undefined);
  await holderLog?.close().catch(() => undefined);
  await server?.cleanup();
});

describe("recovery's lease sweep across its own NATS outage (K10)", () => {
  it('given a beating holder renewing every third of the TTL, when NATS is down longer than the TTL and the holder renews only after recovery is back, then the lease stays held; when the holder then stops, it is fenced after the grace', async () => {
    const leases = await LeaseStore.open(holderLog);
    const beats = await HeartbeatStore.open(holderLog);
    const beat = () => beats.kv.put(heartbeatKey(holder), JSON.stringify({ ...holder, ttlMs: TTL_MS }));
    await beat();
    const taken = await leases.acquire(runId, holder, TTL_MS);
    if (!('epoch' in taken)) throw new Error('the lease was not taken');
    let lease: HeldLease = taken;
    let refused: unknown = null;
    /** Beats and renews every third of the TTL until the returned function is called (and awaited). */
    const keepRenewing = (): (() => Promise<void>) => {
      let on = true;
      const loop = (async () => {
        while (on) {
          await sleep(TTL_MS / 3);
          if (!on) return;
          try {
            await beat();
            lease = await leases.renew(lease, holder);
          } catch (e) {
            refused ??= e;
          }
        }
      })();
      return async () => {
        on = false;
        await loop;
      };
    };
    let stop = keepRenewing();
    const recoveryHasIt = () => (watcher as unknown as { leases: Map<string, unknown> }).leases.has(runId);
    await waitFor('recovery follows the lease', recoveryHasIt, 10_000);
    await sleep(TTL_MS);
    await stop();
    expect(refused).toBeNull();
    // a full TTL left when the server goes: only the outage may make the lease look expired
    await beat();
    lease = await leases.renew(lease, holder);

    // FAULT: nats-server killed for longer than the TTL; the holder renews again only after
    // recovery has reconnected (it is the slower of the two to come back)
    await server.kill();
    await sleep(OUTAGE_MS);
    // both clients reconnect on their own schedules; the holder, like the runtime's lease keeper,
    // renews once its own connection is back (a request written while it was down gets no answer)
    const recoveryBack = nextReconnect(recoveryLog.nc, 30_000);
    const holderBack = nextReconnect(holderLog.nc, 30_000);
    await server.restart();
    await Promise.all([recoveryBack, holderBack]);
    await sleep(300);
    await waitFor(
      'a beat after the outage',
      () =>
        beat()
          .then(() => true)
          .catch(() => false),
      10_000,
      100,
    );
    lease = await leases.renew(lease, holder);

    // renewed for two more TTLs and the grace: never fenced
    stop = keepRenewing();
    await sleep(2 * TTL_MS + RECONNECT_GRACE_MS);
    await stop();
    expect(refused).toBeNull();
    // a full TTL left when the server goes: only the outage may make the lease look expired
    await beat();
    lease = await leases.renew(lease, holder);
    expect((await leases.get(runId))?.value).toMatchObject({ state: 'held', epoch: 1, holder });

    // the holder is gone now (no renewal, no beat): fenced within the grace, the TTL and a few sweeps
    const fenced = await waitFor(
      'the gone holder fenced',
      async () => ((await leases.get(runId))?.value.state === 'fenced' ? true : null),
      RECONNECT_GRACE_MS + 3 * TTL_MS + 5_000,
      100,
    );
    expect(fenced).toBe(true);
  }, 90_000);
});
