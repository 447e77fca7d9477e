/**
 * `runplane_consumer_redeliveries_total{durable}` (docs/metrics.md) counts a redelivery the server
 * makes when a handler does not acknowledge within the ack wait, and `..._deliveries_total` counts
 * both deliveries; a first delivery alone leaves the redelivery count at 0. A durable consumer of
 * libs/eventlog on the suite's nats-server, the metrics read from the registry a service's
 * `/metrics` serves.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { makeEvent, type StoredEvent } from '@runplane/contracts';
import { DurableConsumer, EventLog, ownerFilter } from '@runplane/eventlog';
import { metricsRegistry } from '../src/metrics.js';
import { SHARED_NATS } from '../../../test/support/nats-server.js';

const tag = randomBytes(4).toString('hex');
let log: EventLog;

const admitted = (runId: string) =>
  makeEvent(
    'run.admitted',
    { runId, conversationId: `c-${runId}`, correlationId: 'm1', causationId: null },
    'admission',
    {
      message: { messageId: 'm1', clientMessageId: 'cm1', content: 'q', contentSha256: 'a'.repeat(64) },
      grant: { tools: ['list_funds'], model: 'm' },
      limits: { maxModelRequests: 2, maxToolCalls: 2, deadlineAt: new Date(Date.now() + 60_000).toISOString() },
    },
    new Date(),
  );

/** The value of `metric{durable="<durable>"}` in the registry's text, 0 when absent. */
async function counterOf(metric: string, durable: string): Promise<number> {
  const text = await metricsRegistry.metrics();
  const line = text.split('\n').find((l) => l.startsWith(`${metric}{durable="${durable}"} `));
  return line ? Number(line.split(' ').at(-1)) : 0;
}

/** Resolves once `check()` is true, polling every 20 ms; rejects naming `what` after `timeoutMs`. */
async function until(check: () => Promise<boolean> | boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

beforeAll(async () => {
  log = await EventLog.connect({ ...SHARED_NATS, stream: `RPTEST_REDELIV_${tag}`, prefix: `trd${tag}`, name: 'redelivery-metrics' });
});
afterAll(async () => {
  await log?.destroyStream();
  await log?.close();
});

describe('the consumer redelivery metric', () => {
  it('rises when a handler does not acknowledge within the ack wait, and the delivery count counts both deliveries', async () => {
    const runId = `r${tag}`;
    const stored = await log.append(admitted(runId), 0);
    const deliveries: { seq: number; deliveryCount: number; redelivered: boolean }[] = [];
    const consumer = new DurableConsumer(
      log,
      // an ack wait shorter than the handler's first heartbeat (1 s): the server redelivers while the handler still runs
      { durable: 'slow', filter: ownerFilter(log.space, 'admission'), ackWaitMs: 300 },
      async (s: StoredEvent, d) => {
        deliveries.push({ seq: s.seq, deliveryCount: d.deliveryCount, redelivered: d.redelivered });
        // the first delivery is held (not acknowledged) until the server has sent it again
        if (d.deliveryCount === 1) await until(async () => (await counterOf('runplane_consumer_redeliveries_total', durable)) >= 1, 'the redelivery');
      },
      { warn: () => undefined, error: () => undefined },
    );
    const durable = consumer.durableName;
    expect(await counterOf('runplane_consumer_redeliveries_total', durable)).toBe(0);
    await consumer.start();
    try {
      await until(() => deliveries.length >= 2, 'the redelivered message at its handler');
    } finally {
      await consumer.stop();
    }
    expect(deliveries.slice(0, 2)).toEqual([
      { seq: stored.seq, deliveryCount: 1, redelivered: false },
      { seq: stored.seq, deliveryCount: 2, redelivered: true },
    ]);
    expect(await counterOf('runplane_consumer_redeliveries_total', durable)).toBeGreaterThanOrEqual(1);
    expect(await counterOf('runplane_consumer_deliveries_total', durable)).toBeGreaterThanOrEqual(2);
    const info = await log.jsm.consumers.info(log.space.stream, durable);
    // the server sent the one message twice (its consumer sequence counts every delivery)
    expect(info.delivered.consumer_seq).toBeGreaterThanOrEqual(2);
    expect(info.delivered.stream_seq).toBe(stored.seq);
  });

  it('counts the acknowledgements that went out in the same write as an earlier one (runplane_consumer_acks_coalesced_total)', async () => {
    const coalesced = async () => {
      const line = (await metricsRegistry.metrics()).split('\n').find((l) => l.startsWith('runplane_consumer_acks_coalesced_total '));
      return line ? Number(line.split(' ').at(-1)) : NaN;
    };
    const before = await coalesced();
    expect(before).toBeGreaterThanOrEqual(0);
    // ten Runs stored before the consumer starts: one pull brings them all, their handlers finish
    // within the 5 ms window, and their acknowledgements go out together
    for (let i = 0; i < 10; i++) await log.append(admitted(`r${tag}-many${i}`), 0);
    let handled = 0;
    const consumer = new DurableConsumer(
      log,
      { durable: 'many', filter: ownerFilter(log.space, 'admission') },
      async (s: StoredEvent) => {
        if (s.event.runId.includes('-many')) handled++;
      },
      { warn: () => undefined, error: () => undefined },
    );
    await consumer.start();
    try {
      await until(() => handled >= 10, 'the ten deliveries at their handler');
      await until(async () => (await log.jsm.consumers.info(log.space.stream, consumer.durableName)).num_ack_pending === 0, 'every acknowledgement');
    } finally {
      await consumer.stop();
    }
    expect(await coalesced()).toBeGreaterThan(before);
  });
});
