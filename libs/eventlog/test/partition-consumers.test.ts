/**
 * Partition consumers on the current nats-server (multi-filter consumers 2.10, pinned priority
 * groups 2.11): replicas of one service share the partitions through the membership bucket, each
 * partition is consumed by one replica, a new replica takes a share, a stopping replica hands its
 * partitions over at once, and a message forged on the wrong partition is terminated as an anomaly.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { makeEvent, type StoredEvent } from '@runplane/contracts';
import { anomalyCounts, deliveryCounts, DurableConsumer, EventLog, PartitionOwnership, partitionOf, runSubject } from '@runplane/eventlog';
import { JetStreamEventTransport } from '@runplane/eventlog/nest';
import { currentNatsServerBinary, SUITE_NATS, TestNatsServer } from '../../../test/support/nats-server.js';
import { waitFor } from '../../../test/support/wait.js';

const current = currentNatsServerBinary();
const d = 'bin' in current ? describe : describe.skip;
const tag = randomBytes(4).toString('hex');
const TTL = 900;

const ctx = (runId: string) => ({ runId, conversationId: 'c1', correlationId: 'm1', causationId: null });
const turn = (runId: string, n: number) => makeEvent('model.turn.requested', ctx(runId), n, { turn: n, model: 'm' }, new Date());

interface Replica {
  log: EventLog;
  ownership: PartitionOwnership;
  transport: JetStreamEventTransport;
  handled: StoredEvent[];
}

async function until(pred: () => boolean, timeoutMs: number, what: string): Promise<number> {
  const start = Date.now();
  while (!pred()) {
    if (Date.now() - start > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
  return Date.now() - start;
}

d(`partition consumers (nats-server ${'version' in current ? current.version : '?'})`, () => {
  let server: TestNatsServer;
  let writer: EventLog;
  const replicas: Replica[] = [];
  const space = { stream: `RPTEST_PC_${tag}`, prefix: `tpc${tag}` };

  async function replica(): Promise<Replica> {
    const log = await EventLog.connect({ ...SUITE_NATS, natsUrl: server.url, ...space, partitions: 8, name: 'tools' });
    // the tools service beats on its main thread (bus.ts HEARTBEAT_PLACEMENT), as here
    const ownership = await PartitionOwnership.start(log, 'tools', 'main-thread', TTL);
    const transport = new JetStreamEventTransport(log, { service: 'tools', ackWaitMs: 2_000, pinTimeoutMs: 2_000 }, ownership);
    const r: Replica = { log, ownership, transport, handled: [] };
    transport.addHandler(
      '*',
      async (stored: StoredEvent) => {
        r.handled.push(stored);
      },
      true,
    );
    await new Promise<void>(
      (resolve, reject) => void transport.listen((e?: unknown) => (e ? reject(e instanceof Error ? e : new Error(JSON.stringify(e))) : resolve())),
    );
    replicas.push(r);
    return r;
  }

  async function publishTurns(runs: string[], n: number): Promise<void> {
    for (const runId of runs) {
      let last = 0;
      for (let i = 1; i <= n; i++) last = (await writer.append(turn(runId, i), last)).seq;
    }
  }

  const handledBy = (runs: string[]) => (r: Replica) => r.handled.filter((s) => runs.includes(s.event.runId));

  beforeAll(async () => {
    server = await TestNatsServer.start({ bin: (current as { bin: string }).bin });
    writer = await EventLog.connect({ ...SUITE_NATS, natsUrl: server.url, ...space, partitions: 8, name: 'runtime' });
  });
  afterAll(async () => {
    for (const r of replicas) {
      await r.transport.close().catch(() => undefined);
      await r.log.close();
    }
    await writer?.destroyStream();
    await writer?.close();
    await server?.cleanup();
  });

  it("maps a Run to the partition NATS's own partition() subject transform gives it (FNV-1a)", async () => {
    await writer.jsm.streams.add({
      name: `RPTEST_PCX_${tag}`,
      subjects: [`x${tag}.*`],
      allow_direct: true,
      subject_transform: { src: `x${tag}.*`, dest: `y${tag}.{{partition(8,1)}}.{{wildcard(1)}}` },
    });
    const ids = Array.from({ length: 40 }, (_, i) => `run-${i}-${tag}`);
    for (const id of ids) await writer.js.publish(`x${tag}.${id}`, '');
    const got = new Map<string, number>();
    for (let seq = 1; seq <= ids.length; seq++) {
      const m = await writer.jsm.direct.getMessage(`RPTEST_PCX_${tag}`, { seq });
      const [, p, id] = m!.subject.split('.');
      got.set(id!, Number(p));
    }
    for (const id of ids) expect(got.get(id)).toBe(partitionOf(id, 8));
    await writer.jsm.streams.delete(`RPTEST_PCX_${tag}`);
  });

  it('stores the partition count in the stream and makes every process use it, whatever it was configured with', async () => {
    const info = await writer.jsm.streams.info(space.stream);
    expect(info.config.metadata?.runplane_partitions).toBe('8');
    const mismatched: number[] = [];
    const other = await EventLog.connect({ ...SUITE_NATS, natsUrl: server.url, ...space, partitions: 3, name: 'other' }).then((l) => {
      mismatched.push(l.space.partitions);
      return l;
    });
    expect(mismatched).toEqual([8]);
    await other.close();
  });

  it('given two replicas, each event is handled once, by the owner of its partition, one Run in order', async () => {
    const [a, b] = [await replica(), await replica()];
    await until(() => a.ownership.members().length === 2 && b.ownership.members().length === 2, 10_000, 'both members');
    expect([...a.ownership.partitions(), ...b.ownership.partitions()].sort()).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(a.ownership.partitions()).toHaveLength(4);
    const runs = Array.from({ length: 24 }, (_, i) => `ra${i}${tag}`);
    await publishTurns(runs, 3);
    await until(() => handledBy(runs)(a).length + handledBy(runs)(b).length >= 72, 20_000, '72 events');
    await new Promise((r) => setTimeout(r, 300));
    for (const r of [a, b]) {
      const mine = handledBy(runs)(r);
      for (const s of mine) expect(r.ownership.owns(s.event.runId)).toBe(true);
      for (const runId of runs) {
        const turns = mine.filter((s) => s.event.runId === runId).map((s) => (s.event.data as { turn: number }).turn);
        if (turns.length) expect(turns).toEqual([1, 2, 3]);
      }
    }
    expect(handledBy(runs)(a).length + handledBy(runs)(b).length).toBe(72);
  });

  it('given a third replica starting, it takes a fair share, and the events of its partitions reach it only', async () => {
    const [a, b] = replicas;
    const c = await replica();
    const ms = await until(
      () => [a!, b!, c].every((r) => r.ownership.members().length === 3) && c.ownership.partitions().length >= 2,
      10_000,
      'three members',
    );
    process.stdout.write(`PARTITIONS | a new replica owns ${c.ownership.partitions().length} of 8 partitions ${ms} ms after it started\n`);
    const owned = [a!, b!, c].map((r) => r.ownership.partitions());
    expect(owned.flat().sort()).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    // the old owners release the partitions that moved (their consumers stop)
    await until(() => [a!, b!].every((r) => r.transport.consuming().join() === r.ownership.partitions().join()), 10_000, 'released');
    const runs = Array.from({ length: 24 }, (_, i) => `rb${i}${tag}`);
    await publishTurns(runs, 2);
    await until(() => [a!, b!, c].reduce((n, r) => n + handledBy(runs)(r).length, 0) >= 48, 20_000, '48 events');
    expect(handledBy(runs)(c).length).toBeGreaterThan(0);
    for (const r of [a!, b!, c]) for (const s of handledBy(runs)(r)) expect(r.ownership.owns(s.event.runId)).toBe(true);
  });

  it('given a replica stopping gracefully, its partitions move to the others at once and nothing is lost', async () => {
    const c = replicas[2]!;
    const rest = replicas.slice(0, 2);
    const runs = Array.from({ length: 24 }, (_, i) => `rc${i}${tag}`);
    const stoppedAt = Date.now();
    await c.transport.close();
    const ms = await until(() => rest.every((r) => r.ownership.members().length === 2), 10_000, 'two members');
    process.stdout.write(`PARTITIONS | a stopping replica's partitions moved ${ms} ms after it stopped\n`);
    expect(Date.now() - stoppedAt).toBeLessThan(TTL * 3);
    await publishTurns(runs, 2);
    const handled = await until(() => rest.reduce((n, r) => n + handledBy(runs)(r).length, 0) >= 48, 20_000, '48 events after the stop');
    process.stdout.write(`PARTITIONS | 48 events after a graceful stop handled within ${handled} ms\n`);
    expect(handledBy(runs)(c)).toHaveLength(0);
  });

  it('lets the server deliver a pinned partition consumer to one client only, and to the next one at once after an unpin', async () => {
    const filter = [`${space.prefix}.run.*.runtime.*`, `${space.prefix}.run.*.lifecycle.*`];
    const pinned = { group: 'owner', timeoutMs: 5_000, pullExpiresMs: 2_000 };
    const got: Record<'x' | 'y', number[]> = { x: [], y: [] };
    const quiet = { warn: () => undefined, error: () => undefined };
    const x = new DurableConsumer(writer, { durable: 'pinned-test', filter, pinned }, async (s) => void got.x.push(s.seq), quiet);
    await x.start();
    const y = new DurableConsumer(writer, { durable: 'pinned-test', filter, pinned }, async (s) => void got.y.push(s.seq), quiet);
    await y.start();
    const runs = Array.from({ length: 10 }, (_, i) => `rx${i}${tag}`);
    await publishTurns(runs, 2);
    const info = await writer.jsm.consumers.info(space.stream, `${space.prefix}-pinned-test`);
    const total = info.num_pending + info.num_ack_pending + info.delivered.consumer_seq;
    await until(() => got.x.length + got.y.length >= 20, 10_000, 'the first 20');
    await new Promise((r) => setTimeout(r, 500));
    // one client got everything, the other nothing
    expect(Math.min(got.x.length, got.y.length)).toBe(0);
    const [first, second] = got.x.length ? (['x', 'y'] as const) : (['y', 'x'] as const);
    const firstConsumer = first === 'x' ? x : y;
    const before = got[second].length;
    const releasedAt = Date.now();
    await firstConsumer.release();
    await publishTurns(
      Array.from({ length: 5 }, (_, i) => `ry${i}${tag}`),
      1,
    );
    const ms = await until(() => got[second].length >= before + 5, 10_000, 'the next client pinned');
    process.stdout.write(`PARTITIONS | after an unpin the next client got new events within ${Date.now() - releasedAt} ms (wait ${ms} ms)\n`);
    expect(Date.now() - releasedAt).toBeLessThan(4_000); // well under the 5 s priority timeout
    expect(total).toBeGreaterThan(0);
    await x.stop();
    await y.stop();
  });

  it('terminates a message forged on the wrong partition, counts it, and leaves it out of reads (K11)', async () => {
    const runId = `rf${tag}`;
    await writer.append(turn(runId, 1), 0);
    const right = partitionOf(runId, 8);
    const wrong = (right + 1) % 8;
    const forged = { ...turn(runId, 2), eventId: '00000000-0000-4000-8000-0000000000f1', prevSeq: 0 };
    const before = anomalyCounts()['wrong-partition'] ?? 0;
    const subject = runSubject(writer.space, runId, 'runtime').replace(/\.\d+$/, `.${wrong}`);
    // with the header a conditional append stores, so only the partition gives it away
    await writer.js.publish(subject, JSON.stringify(forged), { expect: { lastSubjectSequence: 0 } });
    await until(() => (anomalyCounts()['wrong-partition'] ?? 0) > before, 10_000, 'the forgery terminated');
    expect(replicas.some((r) => r.handled.some((s) => s.event.eventId === forged.eventId))).toBe(false);
    const reported: string[] = [];
    writer.onInvalid = (e) => reported.push(e.anomaly);
    const events = await writer.readRun(runId);
    expect(events.map((e) => e.event.eventId)).not.toContain(forged.eventId);
    expect(events).toHaveLength(1);
    // the next append on the Run's own subject is not thrown off by the forgery
    await expect(writer.append(turn(runId, 2), events[0]!.seq)).resolves.toMatchObject({ recovered: false });
    // the consumer that read it acknowledged nothing else: its partition is the wrong one
    const info = await writer.jsm.consumers.info(space.stream, `${space.prefix}-tools-p${wrong}`);
    expect(info.num_ack_pending).toBe(0);
  });
  it("admission's transport (no folds) acknowledges the catalogue's types it does not handle unread, hands it the ones it does, and takes a type outside the catalogue the whole way: terminated, never looked up", async () => {
    // a stream of its own: no earlier Run to deliver first
    const own = { stream: `RPTEST_PCA_${tag}`, prefix: `tpca${tag}` };
    const runtime = await EventLog.connect({ ...SUITE_NATS, natsUrl: server.url, ...own, partitions: 8, name: 'runtime' });
    const log = await EventLog.connect({ ...SUITE_NATS, natsUrl: server.url, ...own, partitions: 8, name: 'admission' });
    const ownership = await PartitionOwnership.start(log, 'admission', 'main-thread', TTL);
    const transport = new JetStreamEventTransport(log, { service: 'admission', ackWaitMs: 2_000, pinTimeoutMs: 2_000 }, ownership);
    const handled: string[] = [];
    transport.addHandler(
      'model.turn.requested',
      async (stored: StoredEvent) => {
        handled.push(stored.event.runId);
      },
      true,
    );
    await new Promise<void>(
      (resolve, reject) => void transport.listen((e?: unknown) => (e ? reject(e instanceof Error ? e : new Error(JSON.stringify(e))) : resolve())),
    );
    try {
      // admission's deliveries in this process (its durables of this stream)
      const mine = () => [...deliveryCounts()].filter(([durable]) => durable.startsWith(`${own.prefix}-admission-`)).map(([, c]) => c);
      const counts = () => ({ delivered: mine().reduce((n, c) => n + c.delivered, 0), ignored: mine().reduce((n, c) => n + c.ignored, 0) });
      const runId = `radm${tag}`;
      const before = counts();
      const invalidBefore = anomalyCounts()['invalid-message'] ?? 0;
      const first = await runtime.append(turn(runId, 1), 0);
      // a catalogue type admission has no handler for here (its real ones: child.run.requested, run.settled)
      await runtime.append(
        makeEvent('run.execution.finished', ctx(runId), 'finished', { reason: 'model-error', detail: 'HTTP 500', answerTurn: null }, new Date()),
        first.seq,
      );
      // a forgery naming a type outside the catalogue (a long one: a lookup kept per type would keep it)
      await runtime.js.publish(runSubject(runtime.space, runId, 'runtime'), JSON.stringify({ ...turn(runId, 3), type: `x${'y'.repeat(10_000)}` }));
      await until(() => counts().delivered - before.delivered >= 3 && handled.length === 1, 10_000, 'the three deliveries');
      expect(handled).toEqual([runId]);
      // of the three, one handled, one acknowledged unread, and the forgery neither: terminated as not a fact
      expect(counts().delivered - before.delivered).toBe(3);
      expect(counts().ignored - before.ignored).toBe(1);
      expect(anomalyCounts()['invalid-message'] ?? 0).toBeGreaterThan(invalidBefore);
      // the acknowledgements travel without a reply: wait until the server has all three
      const durable = `${own.prefix}-admission-p${partitionOf(runId, 8)}`;
      await waitFor('no delivery left pending', async () => (await runtime.jsm.consumers.info(own.stream, durable)).num_ack_pending === 0, 5_000);
      expect((await runtime.jsm.consumers.info(own.stream, durable)).num_redelivered).toBe(0);
    } finally {
      await transport.close().catch(() => undefined);
      await log.close();
      await runtime.destroyStream();
      await runtime.close();
    }
  });
});
