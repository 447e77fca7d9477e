/**
 * The heartbeat worker runs its start-up collection as its process says (kit memory.ts,
 * `RUNPLANE_STARTUP_COLLECTION`): a process that turned its collections off starts a worker that
 * skips it too, against the real NATS server of the suite.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { destroyBus, EventLog, HeartbeatStore, ProcessHeartbeat } from '@runplane/eventlog';
import { setStartupCollection } from '@runplane/kit/memory';
import { SHARED_NATS } from '../../../test/support/nats-server.js';

const tag = randomBytes(4).toString('hex');
let log: EventLog;
const beats: ProcessHeartbeat[] = [];

beforeAll(async () => {
  log = await EventLog.connect({ ...SHARED_NATS, stream: `RPTEST_HBGC_${tag}`, prefix: `thbgc${tag}`, name: 'heartbeat-startup-collection' });
  await HeartbeatStore.open(log); // the bucket the worker beats into
});
afterEach(() => setStartupCollection(true));
afterAll(async () => {
  for (const beat of beats) await beat.stop();
  if (log) {
    await destroyBus(log);
    await log.close();
  }
});

describe('the heartbeat worker and the start-up collection', () => {
  const start = async (instance: string) => {
    const beat = await ProcessHeartbeat.start(SHARED_NATS, log.space, { service: 'tools', instance }, 3_000);
    beats.push(beat);
    return beat;
  };

  it('given the process default, when the worker starts, then it runs its collection', async () => {
    expect(await (await start(`on-${tag}`)).startupCollection).toBe(true);
  });

  it('given the process turned its collections off, when the worker starts, then it skips its own', async () => {
    setStartupCollection(false);
    expect(await (await start(`off-${tag}`)).startupCollection).toBe(false);
  });
});
