/**
 * The lease side of a handover (a drain, K6, K10), on a real nats-server: a lease released
 * `handover` is taken again only at the next epoch, by compare-and-set, exactly once; a lease
 * released `stopping` or `finished` is never taken again; recovery marks a lost holder's lease
 * `handover` only on the revision it read.
 */
import { afterAll, beforeAll, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { EventLog, LeaseStore } from '@runplane/eventlog';
import { describeEachNatsServer, natsServersUnderTest, SUITE_NATS } from '../../../test/support/nats-server.js';

const servers = await natsServersUnderTest();
const tag = randomBytes(4).toString('hex');
const a = { service: 'runtime', instance: 'runtime-a' };
const b = { service: 'runtime', instance: 'runtime-b' };
const c = { service: 'runtime', instance: 'runtime-c' };

describeEachNatsServer(servers, (server) => {
  let log: EventLog;
  let leases: LeaseStore;
  beforeAll(async () => {
    log = await EventLog.connect({ ...SUITE_NATS, natsUrl: server.url, stream: `RPTEST_LH_${tag}`, prefix: `tlh${tag}` });
    leases = await LeaseStore.open(log);
  });
  afterAll(async () => {
    await leases.destroy();
    await log.destroyStream();
    await log.close();
  });

  it('given a lease released handover at epoch 1, when two replicas take it at once, then exactly one holds it, at epoch 2', async () => {
    const runId = `r1${tag}`;
    const held = await leases.acquire(runId, a, 5_000);
    if ('held' in held) throw new Error('not taken');
    await leases.release(held, a, 'handover');
    const entry = (await leases.get(runId))!;
    expect(entry.value).toMatchObject({ state: 'released', reason: 'handover', epoch: 1 });
    const [x, y] = await Promise.all([leases.resume(entry, b, 5_000), leases.resume(entry, c, 5_000)]);
    const winners = [x, y].filter((r) => !('held' in r));
    expect(winners).toHaveLength(1);
    expect(winners[0]).toMatchObject({ epoch: 2 });
    expect((await leases.get(runId))!.value).toMatchObject({ state: 'held', epoch: 2 });
    // a fresh acquire never takes it at epoch 1 again
    expect(await leases.acquire(runId, c, 5_000)).toMatchObject({ held: false });
  });

  it('given a lease released stopping or finished, when a replica tries to resume it, then it is refused', async () => {
    for (const reason of ['stopping', 'finished'] as const) {
      const runId = `r2${reason}${tag}`;
      const held = await leases.acquire(runId, a, 5_000);
      if ('held' in held) throw new Error('not taken');
      await leases.release(held, a, reason);
      const entry = (await leases.get(runId))!;
      expect(await leases.resume(entry, b, 5_000)).toMatchObject({ held: false });
    }
  });

  it('given a held lease whose holder recorded its handover and was lost, when recovery marks it handover on a stale revision, then it is refused; on the current one it holds', async () => {
    const runId = `r3${tag}`;
    const held = await leases.acquire(runId, a, 5_000);
    if ('held' in held) throw new Error('not taken');
    const stale = (await leases.get(runId))!;
    await leases.renew(held, a);
    await expect(leases.handOver(stale)).rejects.toThrow();
    const current = (await leases.get(runId))!;
    await leases.handOver(current);
    expect((await leases.get(runId))!.value).toMatchObject({ state: 'released', reason: 'handover', epoch: 1, holder: a });
  });
});
