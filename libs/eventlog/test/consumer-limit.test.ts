/**
 * The Run stream's consumer limit. nats-server 2.15 holds a stream that names none to 1,000
 * consumers, shared by every service's partition durables and every open event stream (a
 * hostile-tenant trial's 3,000 event streams on one Run left other users' streams empty). Given
 * the event log, when it creates the Run stream, then the stream names
 * RUN_STREAM_MAX_CONSUMERS; given a stream created without it (an earlier release), when the admin
 * provisions, then it is raised in place.
 */
import { afterAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { EventLog, provisionBus, RUN_STREAM_MAX_CONSUMERS, runStreamConfig } from '@runplane/eventlog';
import { SHARED_NATS } from '../../../test/support/nats-server.js';

const tag = randomBytes(4).toString('hex');
const logs: EventLog[] = [];
afterAll(async () => {
  for (const log of logs) {
    await log.destroyStream().catch(() => undefined);
    await log.close();
  }
});

describe("the Run stream's consumer limit", () => {
  it('given a new Run stream, then it names RUN_STREAM_MAX_CONSUMERS, above the server default of 1,000', async () => {
    const log = await EventLog.connect({ ...SHARED_NATS, stream: `RPTEST_MC_NEW_${tag}`, prefix: `tmcn${tag}`, name: 'mc-new' });
    logs.push(log);
    expect(RUN_STREAM_MAX_CONSUMERS).toBeGreaterThan(1_000);
    expect((await log.jsm.streams.info(log.space.stream)).config.max_consumers).toBe(RUN_STREAM_MAX_CONSUMERS);
  });

  it('given a Run stream created without a limit (an earlier release), when the admin provisions, then the limit is raised in place, the stream kept', async () => {
    const space = { stream: `RPTEST_MC_OLD_${tag}`, prefix: `tmco${tag}`, partitions: 2 };
    const admin = logs[0]!;
    const { max_consumers: _none, ...earlier } = runStreamConfig(space, { replicas: 1, duplicateWindowMs: 120_000 });
    await admin.jsm.streams.add(earlier);
    const log = await EventLog.connect({ ...SHARED_NATS, ...space, name: 'mc-old' });
    logs.push(log);
    expect((await log.jsm.streams.info(space.stream)).config.max_consumers).toBe(-1);
    await provisionBus(log, []);
    const after = await log.jsm.streams.info(space.stream);
    expect(after.config.max_consumers).toBe(RUN_STREAM_MAX_CONSUMERS);
    expect(after.config.deny_delete).toBe(true);
  });
});
