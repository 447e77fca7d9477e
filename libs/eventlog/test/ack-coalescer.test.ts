/**
 * The acknowledgements of finished deliveries go out together (consumer.ts AckCoalescer), against
 * the suite's real nats-server: a held acknowledgement is not seen by the server until the window
 * ends or a flush sends it, every held one is then acknowledged (none redelivered), and a window of
 * 0 acknowledges at once.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { AckPolicy, jetstream, jetstreamManager, type JetStreamManager, type JsMsg } from '@nats-io/jetstream';
import { AckCoalescer } from '../src/consumer.js';
import { suiteNatsOptions } from '../../../test/support/nats-server.js';
import { waitFor } from '../../../test/support/wait.js';

const stream = `ACKC_${randomBytes(4).toString('hex')}`;
let nc: NatsConnection;
let jsm: JetStreamManager;

beforeAll(async () => {
  nc = await connect(suiteNatsOptions());
  jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: stream, subjects: [`${stream}.>`] });
});
afterAll(async () => {
  await jsm.streams.delete(stream).catch(() => undefined);
  await nc.close();
});

/** Publishes `n` messages and returns them as fetched (unacknowledged) by a new durable consumer. */
async function delivered(durable: string, n: number): Promise<JsMsg[]> {
  const js = jetstream(nc);
  for (let i = 0; i < n; i++) await js.publish(`${stream}.${durable}`, `m${i}`);
  await jsm.consumers.add(stream, {
    durable_name: durable,
    ack_policy: AckPolicy.Explicit,
    ack_wait: 30_000_000_000,
    filter_subject: `${stream}.${durable}`,
  });
  const consumer = await js.consumers.get(stream, durable);
  const out: JsMsg[] = [];
  for await (const m of await consumer.fetch({ max_messages: n, expires: 2_000 })) out.push(m);
  return out;
}

const ackPending = async (durable: string) => (await jsm.consumers.info(stream, durable)).num_ack_pending;

describe('AckCoalescer', () => {
  it('given finished deliveries held, when the window has not ended, then the server still counts them unacknowledged; flush acknowledges every one', async () => {
    const msgs = await delivered('held', 5);
    expect(msgs).toHaveLength(5);
    const acks = new AckCoalescer(60_000);
    for (const m of msgs) acks.later(m);
    await nc.flush();
    expect(await ackPending('held')).toBe(5);
    acks.flush();
    await nc.flush();
    await waitFor('every held acknowledgement stored', async () => (await ackPending('held')) === 0, 5_000);
    expect(acks.coalesced).toBe(4);
    const info = await jsm.consumers.info(stream, 'held');
    expect(info.num_redelivered).toBe(0);
    expect(info.ack_floor.stream_seq).toBe(msgs.at(-1)!.seq);
  });

  it('given a short window, when it ends, then the held acknowledgements are sent without a flush', async () => {
    const msgs = await delivered('timed', 3);
    const acks = new AckCoalescer(20);
    for (const m of msgs) acks.later(m);
    await waitFor('the window to send the acknowledgements', async () => (await ackPending('timed')) === 0, 5_000);
    expect(acks.coalesced).toBe(2);
  });

  it('given a window of 0, when a delivery finishes, then it is acknowledged at once', async () => {
    const [m] = await delivered('now', 1);
    const acks = new AckCoalescer(0);
    acks.later(m!);
    await waitFor('the acknowledgement stored', async () => (await ackPending('now')) === 0, 5_000);
    expect(acks.coalesced).toBe(0);
  });
});
