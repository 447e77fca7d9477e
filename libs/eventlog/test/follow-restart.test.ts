/**
 * An observer's live follow of a Run across a nats-server crash (K4: an observer that loses its
 * stream gets every event, in order, without the Run being touched). The follow is an ordered
 * consumer, which the restarted server no longer has: the client must notice and recreate it
 * within seconds, not after the client's default pull expiry (30 s, so 35-43 s after the crash,
 * seen by a new-user trial as an SSE observer stalled after a kill -9 of nats-server).
 *
 * Given a Run followed from its first event on a nats-server of this file's own, when the server is
 * killed (SIGKILL) and started again on the same store and an event is appended after it answers,
 * then the follow delivers it within 20 s, after the ones before, each once.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { subjectTokenOf, type Owner } from '@runplane/contracts';
import { EventLog } from '@runplane/eventlog';
import { History } from '../../../test/support/history.js';
import { currentNatsServerBinary, nextReconnect, SUITE_NATS, TestNatsServer } from '../../../test/support/nats-server.js';
import { waitFor } from '../../../test/support/wait.js';

const tag = randomBytes(4).toString('hex');
let server: TestNatsServer;
let log: EventLog;

beforeAll(async () => {
  server = await TestNatsServer.start({ bin: currentNatsServerBinary().bin });
  log = await EventLog.connect({ natsUrl: server.url, ...SUITE_NATS, stream: `RPTEST_FR_${tag}`, prefix: `tfr${tag}` });
}, 60_000);
afterAll(async () => {
  await log?.close().catch(() => undefined);
  await server?.cleanup();
});

describe("a Run's live follow across a nats-server crash (K4)", () => {
  it('given a followed Run, when nats-server is killed and started again, then an event appended after the restart is delivered within 20 s, in order, each event once', async () => {
    const runId = `fr${tag}`;
    const h = new History(runId, `conv-${runId}`).admitted().turn(1, { content: 'first' }).turn(2, { content: 'second' });
    const lasts: Partial<Record<Owner, number>> = {};
    const append = async (i: number) => {
      const event = h.events[i]!.event;
      const token = subjectTokenOf(event);
      const r = await log.append(event, lasts[token] ?? 0);
      lasts[token] = r.seq;
      return r.seq;
    };
    const before = [await append(0), await append(1)];
    const followed: number[] = [];
    const stop = await log.followRun(runId, 1, (e) => void followed.push(e.seq));
    try {
      await waitFor('the events stored before the crash', () => followed.length >= before.length);
      // FAULT: a crash, nothing flushed or closed; the store stays
      await server.kill();
      const reconnected = nextReconnect(log.nc, 30_000);
      await server.restart();
      await reconnected;
      const rest: number[] = [];
      for (let i = 2; i < h.events.length; i++)
        rest.push(await waitFor('an append after the restart', () => append(i).catch(() => null), 20_000, 200));
      const backAt = Date.now();
      await waitFor('the events appended after the restart, delivered', () => rest.every((s) => followed.includes(s)), 20_000);
      expect(Date.now() - backAt).toBeLessThan(20_000);
      expect(followed).toEqual([...before, ...rest]);
    } finally {
      await stop();
    }
  }, 90_000);
});
