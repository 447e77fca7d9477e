/**
 * Where a process beats its heartbeat (heartbeats.ts `HeartbeatPlacement`, bus.ts
 * `HEARTBEAT_PLACEMENT`): the runtime on a worker thread (recovery judges its leases by it, K10),
 * every other service on its main thread through its own connection. Against the suite's real
 * NATS server: a main-thread heartbeat writes its key, keeps writing it every third of its TTL
 * and deletes it when stopped, and membership built on it hands partitions over as the worker's does.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { Kvm } from '@nats-io/kv';
import {
  BUS_SERVICES,
  destroyBus,
  EventLog,
  HEARTBEAT_PLACEMENT,
  heartbeatBucketFor,
  HeartbeatStore,
  PartitionOwnership,
  ProcessHeartbeat,
} from '@runplane/eventlog';
import { SHARED_NATS } from '../../../test/support/nats-server.js';
import { waitFor } from '../../../test/support/wait.js';

const tag = randomBytes(4).toString('hex');
const TTL = 900;
let log: EventLog;

beforeAll(async () => {
  log = await EventLog.connect({ ...SHARED_NATS, stream: `RPTEST_HBP_${tag}`, prefix: `thbp${tag}`, partitions: 4, name: 'heartbeat-placement' });
  await HeartbeatStore.open(log);
});
afterAll(async () => {
  if (log) {
    await destroyBus(log);
    await log.close();
  }
});

describe('heartbeat placement', () => {
  it('only the runtime, whose leases recovery judges by its heartbeat (K10), beats on a thread of its own', () => {
    expect(BUS_SERVICES.filter((s) => HEARTBEAT_PLACEMENT[s] === 'thread')).toEqual(['runtime']);
  });

  it('given a main-thread heartbeat, when it starts, then its key vouches for the process, is written again every third of the TTL, and is deleted on stop', async () => {
    const kv = await new Kvm(log.nc).open(heartbeatBucketFor(log.space));
    const writer = { service: 'lifecycle', instance: `m-${tag}` };
    const beat = await ProcessHeartbeat.onMainThread(log.nc, log.space, writer, TTL);
    expect(beat.placement).toBe('main');
    const key = `lifecycle.m-${tag}`;
    const first = await kv.get(key);
    expect(first && HeartbeatStore.parse(first)?.value).toEqual({ service: 'lifecycle', instance: `m-${tag}`, ttlMs: TTL });
    // written again (every 300 ms): two more revisions within a TTL and a half
    await waitFor('two more beats', async () => ((await kv.get(key))?.revision ?? 0) >= first!.revision + 2, 1_400);
    await beat.stop();
    const after = await kv.get(key);
    expect(after === null || after.operation !== 'PUT').toBe(true);
  });

  it('given two replicas beating on their main threads, when one stops, then the other owns every partition at once', async () => {
    const other = await EventLog.connect({
      ...SHARED_NATS,
      stream: log.space.stream,
      prefix: log.space.prefix,
      partitions: 4,
      name: 'heartbeat-placement-2',
    });
    try {
      const a = await PartitionOwnership.start(log, 'publication', 'main-thread', TTL);
      const b = await PartitionOwnership.start(other, 'publication', 'main-thread', TTL);
      await waitFor('the partitions shared', () => a.partitions().length === 2 && b.partitions().length === 2, 5_000);
      expect([...a.partitions(), ...b.partitions()].sort()).toEqual([0, 1, 2, 3]);
      await a.stop();
      await waitFor('the stopped replica handing its partitions over', () => b.partitions().length === 4, 5_000);
      await b.stop();
    } finally {
      await other.close();
    }
  });
});
