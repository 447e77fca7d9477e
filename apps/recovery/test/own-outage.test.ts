/**
 * Recovery cut off from NATS judges no lease (K6, K10: late is not gone). While recovery's own
 * connection is down its view of the renewals is stale, and a fence decided on it, acted on once
 * the connection is back, can land before a live holder reconnecting a moment later renews (seen in
 * CI: a 1.2 s lease fenced during a 1.8 s NATS restart, its runtime alive and back a second later).
 *
 * The sweep runs against the suite's real nats-server; what it is told of its own connection is
 * driven through its `ConnectionGrace` (`disconnected()`, `reconnected()`), the calls the client's
 * `disconnect` and `reconnect` status events make (libs/eventlog/test/connection-grace.test.ts
 * follows a real server killed and restarted). Given a lease whose holder neither renews nor beats
 * (expired, heartbeat stale: gone by every other rule), when recovery's connection is down, then
 * sweep after sweep leaves it held; when the connection is back, then it is fenced once the grace
 * after the reconnection has run out, not before.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { EventLog, HeartbeatStore, heartbeatKey, LeaseStore, RECONNECT_GRACE_MS, type ConnectionGrace } from '@runplane/eventlog';
import { RunCommandHandler } from '@runplane/service-kit/command-handler';
import { LeaseWatcher } from '../src/lease-watcher.service.js';
import { SHARED_NATS } from '../../../test/support/nats-server.js';
import { waitFor } from '../../../test/support/wait.js';

const tag = randomBytes(4).toString('hex');
const TTL_MS = 600;
const SWEEP_MS = 50;
const holder = { service: 'runtime', instance: `runtime-${tag}` };
const runId = `o${tag}`;

let log: EventLog;
let leases: LeaseStore;
let beats: HeartbeatStore;
let watcher: LeaseWatcher;
const graceOf = (w: LeaseWatcher) => (w as unknown as { grace: ConnectionGrace }).grace;
const sweeps = (w: LeaseWatcher) => (w as unknown as { leases: Map<string, unknown> }).leases;

beforeAll(async () => {
  log = await EventLog.connect({ ...SHARED_NATS, stream: `RPTEST_OO_${tag}`, prefix: `too${tag}` });
  leases = await LeaseStore.open(log);
  beats = await HeartbeatStore.open(log);
  watcher = new LeaseWatcher(log, new RunCommandHandler(log, 'recovery'), leases, beats, { leaseTtlMs: TTL_MS, sweepMs: SWEEP_MS });
  // no grace from the start: only the connection as the test drives it holds the judge back
  graceOf(watcher).reconnected(0);
  await watcher.onApplicationBootstrap();
}, 60_000);
afterAll(async () => {
  await watcher?.onApplicationShutdown();
  await leases?.destroy();
  await beats?.destroy();
  await log?.destroyStream();
  await log?.close();
});

describe("recovery's lease sweep while its own connection is down (K10)", () => {
  it('given a lease whose holder stopped renewing and beating, when recovery is cut off, then it stays held sweep after sweep; when recovery is back, then it is fenced after the grace, not before', async () => {
    await beats.kv.put(heartbeatKey(holder), JSON.stringify({ ...holder, ttlMs: TTL_MS }));
    graceOf(watcher).disconnected();
    const taken = await leases.acquire(runId, holder, TTL_MS);
    if (!('epoch' in taken)) throw new Error('the lease was not taken');
    await waitFor('recovery follows the lease', () => sweeps(watcher).has(runId), 10_000);

    // cut off for five TTLs (about 60 sweeps): expired and its heartbeat stale, but not judged
    await sleep(5 * TTL_MS);
    expect((await leases.get(runId))?.value).toMatchObject({ state: 'held', epoch: 1 });

    const backAt = Date.now();
    graceOf(watcher).reconnected(backAt);
    const fencedAt = await waitFor(
      'the gone holder fenced after the grace',
      async () => ((await leases.get(runId))?.value.state === 'fenced' ? Date.now() : null),
      RECONNECT_GRACE_MS + 3 * TTL_MS + 10_000,
      SWEEP_MS,
    );
    expect(fencedAt - backAt).toBeGreaterThanOrEqual(RECONNECT_GRACE_MS + TTL_MS);
  }, 60_000);
});
