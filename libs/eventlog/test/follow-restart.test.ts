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
 *
 * And on a 3-node cluster, when the node that holds the follow's consumer hangs (SIGSTOP: its
 * connections stay open, so the client only asks it again and again whether the consumer still
 * exists), then an event appended meanwhile is delivered within 20 s while the node is still frozen
 * (a new user's trial saw SSE streams silent until the thaw, 60-90 s).
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { subjectTokenOf, type Owner } from '@runplane/contracts';
import { EventLog } from '@runplane/eventlog';
import { History } from '../../../test/support/history.js';
import { currentNatsServerBinary, nextReconnect, SUITE_NATS, TestNatsCluster, TestNatsServer } from '../../../test/support/nats-server.js';
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

/** The events of the Run {@link appenderOf} appends: run.admitted and two model turns of two events each. */
const RUN_EVENTS = 5;

/**
 * Appends the i-th event of a three-turn Run's history (admitted, two model turns), each on its
 * subject after the one before (the log's conditional append).
 * @returns the stored sequence.
 */
function appenderOf(target: EventLog, runId: string): (i: number) => Promise<number> {
  const h = new History(runId, `conv-${runId}`).admitted().turn(1, { content: 'first' }).turn(2, { content: 'second' });
  const lasts: Partial<Record<Owner, number>> = {};
  return async (i) => {
    const event = h.events[i]!.event;
    const token = subjectTokenOf(event);
    const r = await target.append(event, lasts[token] ?? 0);
    lasts[token] = r.seq;
    return r.seq;
  };
}

describe("a Run's live follow across a nats-server crash (K4)", () => {
  it('given a followed Run, when nats-server is killed and started again, then an event appended after the restart is delivered within 20 s, in order, each event once', async () => {
    const runId = `fr${tag}`;
    const append = appenderOf(log, runId);
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
      for (let i = 2; i < RUN_EVENTS; i++) rest.push(await waitFor('an append after the restart', () => append(i).catch(() => null), 20_000, 200));
      const backAt = Date.now();
      await waitFor('the events appended after the restart, delivered', () => rest.every((s) => followed.includes(s)), 20_000);
      expect(Date.now() - backAt).toBeLessThan(20_000);
      expect(followed).toEqual([...before, ...rest]);
    } finally {
      await stop();
    }
  }, 90_000);

  it('given a followed Run on a 3-node cluster, when the node holding the follow hangs (SIGSTOP), then an event appended meanwhile is delivered within 20 s while it is still frozen, after the ones before, each once', async () => {
    const cluster = await TestNatsCluster.start();
    const clog = await EventLog.connect({ natsUrl: cluster.url, ...SUITE_NATS, stream: `RPTEST_FRC_${tag}`, prefix: `tfrc${tag}`, replicas: 3 });
    const runId = `frc${tag}`;
    const append = appenderOf(clog, runId);
    const followed: number[] = [];
    let stop: (() => Promise<void>) | null = null;
    let frozen: TestNatsServer | null = null;
    try {
      const before = [await append(0), await append(1)];
      stop = await clog.followRun(runId, 1, (e) => void followed.push(e.seq));
      await waitFor('the events stored before the fault', () => followed.length >= before.length);
      // the node the follow's (one-replica) consumer lives on
      const infos = await clog.jsm.consumers.list(clog.space.stream).next();
      const holder = infos.find((i) => (i.config.filter_subjects ?? [i.config.filter_subject]).some((f) => f?.includes(runId)))?.cluster?.leader;
      expect(cluster.names).toContain(holder);
      frozen = cluster.byName(holder!);
      // FAULT: the node hangs with its connections open
      await frozen.freeze();
      const frozenAt = Date.now();
      const rest: number[] = [];
      for (let i = 2; i < RUN_EVENTS; i++) rest.push(await waitFor('an append while the node hangs', () => append(i).catch(() => null), 30_000, 200));
      await waitFor('the events appended while the node hangs, delivered', () => rest.every((s) => followed.includes(s)), 30_000);
      const tookMs = Date.now() - frozenAt;
      process.stdout.write(`FOLLOW | node ${holder} frozen: the events appended meanwhile delivered ${tookMs} ms after the freeze\n`);
      expect(tookMs).toBeLessThan(20_000);
      expect(followed).toEqual([...before, ...rest]);
    } finally {
      frozen?.thaw();
      await stop?.();
      await clog.close().catch(() => undefined);
      await cluster.cleanup();
    }
  }, 120_000);
});
