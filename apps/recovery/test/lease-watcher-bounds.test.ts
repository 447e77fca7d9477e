/**
 * Recovery's lease watcher keeps state per Run only while the Run has a lease key (the parked-Runs goal of docs/performance.md: RSS
 * that grew for as long as recovery ran): what it noted about a Run (a late holder spared, a grant
 * or a fence recorded, and the Run's fold) goes when the lease key is removed, on a real nats-server.
 */
import { afterAll, beforeAll, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { EventLog, HeartbeatStore, heartbeatKey, LeaseStore, type ConnectionGrace } from '@runplane/eventlog';
import { RunCommandHandler } from '@runplane/service-kit/command-handler';
import { LeaseWatcher } from '../src/lease-watcher.service.js';
import { describeEachNatsServer, natsServersUnderTest, SUITE_NATS } from '../../../test/support/nats-server.js';

const servers = await natsServersUnderTest();
const tag = randomBytes(4).toString('hex');
const holder = { service: 'runtime', instance: `runtime-${tag}` };
/**
 * The lease TTL, which is also the window in which an expired lease of a beating holder is late
 * (spared) before it is fenced: 1 s was missed in CI when no sweep ran inside it on a loaded
 * machine (the lease went from held straight to fenced, never spared).
 */
const TTL_MS = 3_000;

/** The sizes of the watcher's per-Run state (private fields, read the same way whatever their type). */
const sizes = (w: LeaseWatcher) => {
  const f = w as unknown as { leases: { size: number }; recorded: { size: number }; spared: { size: number }; commands: { folds: { size: number } } };
  return { leases: f.leases.size, recorded: f.recorded.size, spared: f.spared.size, folds: f.commands.folds.size };
};

async function until(check: () => boolean, timeoutMs = 30_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > end) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 50));
  }
}

describeEachNatsServer(servers, (server) => {
  let log: EventLog;
  let leases: LeaseStore;
  let beats: HeartbeatStore;
  let watcher: LeaseWatcher;
  beforeAll(async () => {
    log = await EventLog.connect({ ...SUITE_NATS, natsUrl: server.url, stream: `RPTEST_LWB_${tag}`, prefix: `tlwb${tag}` });
    leases = await LeaseStore.open(log);
    beats = await HeartbeatStore.open(log);
    watcher = new LeaseWatcher(log, new RunCommandHandler(log, 'recovery'), leases, beats, { leaseTtlMs: TTL_MS, sweepMs: 100 });
    // no reconnection grace: the leases of this test expire on their own TTL
    (watcher as unknown as { grace: ConnectionGrace }).grace.reconnected(0);
    await watcher.onApplicationBootstrap();
  });
  afterAll(async () => {
    await watcher.onApplicationShutdown();
    await leases.destroy();
    await beats.destroy();
    await log.destroyStream();
    await log.close();
  });

  it('given expired leases whose holder still beats (spared as late), when their keys are removed, then the watcher keeps nothing of those Runs (nor their folds)', async () => {
    await beats.kv.put(heartbeatKey(holder), JSON.stringify({ ...holder, ttlMs: 60_000 }));
    const runs = Array.from({ length: 5 }, (_, i) => `r${i}${tag}`);
    for (const runId of runs) {
      const held = await leases.acquire(runId, holder, TTL_MS);
      if ('held' in held) throw new Error('not taken');
    }
    // expired after one TTL, late (the holder beats) for one more TTL: each spared once
    await until(() => sizes(watcher).spared === runs.length);
    expect(sizes(watcher).leases).toBe(runs.length);
    // past one more TTL they are gone: fenced, which reads each Run (its fold is kept)
    await until(() => sizes(watcher).folds === runs.length);
    for (const runId of runs) await leases.forget(runId);
    await until(() => sizes(watcher).leases === 0);
    expect(sizes(watcher)).toEqual({ leases: 0, recorded: 0, spared: 0, folds: 0 });
  });
  it('given Runs parked (their leases released parked), when they settle, then their keys and what the watcher kept of them are gone at once, not at a clean-up pass; a held lease is left to the sweep', async () => {
    const runs = Array.from({ length: 3 }, (_, i) => `p${i}${tag}`);
    for (const runId of runs) {
      const held = await leases.acquire(runId, holder, 60_000);
      if (!('epoch' in held)) throw new Error('not taken');
      await leases.release(held, holder, 'parked', new Date(Date.now() + 3_600_000).toISOString());
    }
    const heldRun = `h${tag}`;
    if (!('epoch' in (await leases.acquire(heldRun, holder, 60_000)))) throw new Error('not taken');
    await until(() => sizes(watcher).leases === runs.length + 1);
    for (const runId of runs) await watcher.settled(runId);
    await watcher.settled(heldRun);
    for (const runId of runs) expect(await leases.get(runId)).toBeNull();
    expect(await leases.get(heldRun)).not.toBeNull();
    expect(sizes(watcher).leases).toBe(1);
    await leases.forget(heldRun);
    await until(() => sizes(watcher).leases === 0);
  });
});
