/**
 * A durable consumer stopped or released while it is consuming again (the client ended its stream
 * of messages, and the request that starts a new one is slow, as during a NATS outage) does not
 * come back to life behind its caller: no handler runs after `stop()` returned, and a released
 * consumer pulls nothing (before the fix, the released one handed one new message back over a
 * thousand times a second, and the stopped one handled a message after `stop()`). Against the suite's real nats-server.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { makeEvent, type StoredEvent } from '@runplane/contracts';
import { deliveryCounts, DurableConsumer, EventLog, ownerFilter, type ConsumerSource } from '../src/index.js';
import { SHARED_NATS } from '../../../test/support/nats-server.js';
import { waitFor } from '../../../test/support/wait.js';
import { admittedEvent as admitted } from '../../../test/support/events.js';

const tag = randomBytes(4).toString('hex');
let log: EventLog;
const quiet = { warn: () => undefined, error: () => undefined };
/** How long a stopped consumer is watched for a delivery it must not get, ms. */
const WATCH_MS = 700;

/**
 * The log as a consumer sees it, with its second and later `js.consumers.get` held until `open()`
 * (a JetStream request during an outage); `entered` resolves when one is held.
 */
function heldSource(): { source: ConsumerSource; entered: Promise<void>; open: () => void } {
  let calls = 0;
  let entered!: () => void;
  let open!: () => void;
  const enteredP = new Promise<void>((r) => (entered = r));
  const gate = new Promise<void>((r) => (open = r));
  const consumers = {
    get: async (...a: Parameters<EventLog['js']['consumers']['get']>) => {
      if (++calls >= 2) {
        entered();
        await gate;
      }
      return log.js.consumers.get(...a);
    },
  };
  const js = new Proxy(log.js, { get: (t, p): unknown => (p === 'consumers' ? consumers : Reflect.get(t, p)) });
  const source = {
    nc: log.nc,
    js,
    jsm: log.jsm,
    space: log.space,
    noteStored: (s: string, q: number) => log.noteStored(s, q),
    deliveries: log.deliveries,
    signatures: log.signatures,
  } as unknown as ConsumerSource;
  return { source, entered: enteredP, open };
}

/** Ends the consumer's stream of messages as the client does on its own (it then consumes again after 1 s). */
const endStream = (c: DurableConsumer) => (c as unknown as { messages: { stop(): void } }).messages.stop();

beforeAll(async () => {
  log = await EventLog.connect({ ...SHARED_NATS, stream: `RPTEST_STOPRACE_${tag}`, prefix: `tsr${tag}`, name: 'consumer-stop-race' });
  await log.append(admitted(`r${tag}-first`), 0);
});
afterAll(async () => {
  await log?.destroyStream();
  await log?.close();
});

describe('a consumer stopped or released while it consumes again', () => {
  it.each(['stop', 'release'] as const)(
    'given %s() during the slow request that starts a new stream, then nothing is pulled or handled afterwards',
    async (how) => {
      const { source, entered, open } = heldSource();
      const handled: string[] = [];
      const consumer = new DurableConsumer(
        source,
        { durable: `race-${how}`, filter: ownerFilter(log.space, 'admission') },
        async (s: StoredEvent) => {
          handled.push(s.event.runId);
        },
        quiet,
      );
      await consumer.start();
      await waitFor('the first message handled', () => handled.length >= 1, 10_000);
      endStream(consumer);
      await entered; // consuming again: its request is under way
      const ending = how === 'stop' ? consumer.stop() : consumer.release();
      open();
      await ending;
      const before = await log.jsm.consumers.info(log.space.stream, consumer.durableName);
      const runId = `r${tag}-after-${how}`;
      await log.append(admitted(runId), 0);
      await new Promise((r) => setTimeout(r, WATCH_MS));
      const after = await log.jsm.consumers.info(log.space.stream, consumer.durableName);
      expect({
        handled: handled.includes(runId),
        deliveries: after.delivered.consumer_seq - before.delivered.consumer_seq,
        pending: after.num_pending,
      }).toEqual({
        handled: false,
        deliveries: 0,
        pending: 1,
      });
      expect(after.num_waiting).toBe(0); // no pull request of this process left on the server
      // what it last saw of its backlog is no longer reported by this process (runplane_consumer_pending)
      expect(deliveryCounts().get(consumer.durableName)?.pending).toBeNull();
    },
  );
});

describe("a consumer stopped while a Run's messages wait behind a slow handler", () => {
  it('given stop() while the first of ten runs, then only the handlers running finish here: the rest are handed back, and the next consumer handles each once', async () => {
    const runId = `r${tag}-slow`;
    const ctx = { runId, conversationId: 'c1', correlationId: 'm1', causationId: null };
    let last = 0;
    for (let turn = 1; turn <= 10; turn++)
      last = (await log.append(makeEvent('model.turn.requested', ctx, turn, { turn, model: 'm' }, new Date()), last)).seq;
    const handled: number[] = [];
    const slow = async (s: StoredEvent) => {
      handled.push(s.seq);
      await new Promise((r) => setTimeout(r, 400));
    };
    const spec = { durable: 'slow-stop', filter: ownerFilter(log.space, 'runtime') };
    const first = new DurableConsumer(log, spec, slow, quiet);
    await first.start();
    await waitFor('the first handler running', () => handled.length >= 1, 10_000);
    const started = Date.now();
    await first.stop();
    const stopMs = Date.now() - started;
    const handledHere = handled.length;
    // ten handlers one after another would take 4 s: the stop waited for the one (or two) already running
    expect([handledHere <= 2, stopMs < 2_000]).toEqual([true, true]);
    const second = new DurableConsumer(log, spec, slow, quiet);
    await second.start();
    try {
      await waitFor('every message handled', () => new Set(handled).size === 10, 20_000);
      await new Promise((r) => setTimeout(r, 500));
      // each once: what the first finished was acknowledged, what it handed back came to the second
      expect([...handled].sort((a, b) => a - b)).toEqual([...new Set(handled)].sort((a, b) => a - b));
    } finally {
      await second.stop();
    }
  });
});
