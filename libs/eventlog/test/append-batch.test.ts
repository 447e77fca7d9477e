/**
 * One decision, one atomic append (docs/event-log.md "One decision, one atomic append"):
 * `EventLog.appendBatch` stores a decision's events with the server's atomic batch publish, all or
 * none, each on its subject with its back-link verified, and a lost acknowledgement is recognised,
 * never stored twice. On the real JetStream the product starts (2.12.1+).
 */
import { afterAll, beforeAll, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { makeEvent, type RunEvent } from '@runplane/contracts';
import { errors as natsErrors, headers } from '@nats-io/transport-node';
import {
  AppendConflict,
  appendCounts,
  BATCH_SEQUENCE,
  EXPECTED_LAST_SUBJECT_SEQUENCE,
  EventLog,
  runSubject,
  runStreamConfig,
  verifyStored,
  type AppendResult,
  type InvalidStoredEvent,
} from '@runplane/eventlog';
import { describeEachNatsServer, natsServersUnderTest } from '../../../test/support/nats-server.js';
import { admittedEvent, testContext } from '../../../test/support/events.js';

const servers = await natsServersUnderTest();
const tag = randomBytes(4).toString('hex');

const ctx = testContext;
const admitted = (runId: string) => admittedEvent(runId, 9);
const turn = (runId: string, n: number) => makeEvent('model.turn.requested', ctx(runId), n, { turn: n, model: 'm' }, new Date());
const fence = (runId: string, fencedSubject: 'tools' | 'runtime') =>
  makeEvent(
    'run.fenced',
    ctx(runId),
    `fence/1/${fencedSubject}`,
    { fencedSubject, epoch: 1, holder: null, reason: 'lease-expired', detail: 'test', uncertain: [] },
    new Date(),
  );

/** The stored message at `seq` of a log's stream, raw (headers as the server keeps them). */
const raw2 = async (log: EventLog, seq: number) => (await log.jsm.direct.getMessage(log.space.stream, { seq }))!;

describeEachNatsServer(servers, (server) => {
  let log: EventLog;
  const stream = `RPTEST_AB_${tag}`;
  const prefix = `tab${tag}`;
  beforeAll(async () => {
    log = await EventLog.connect({ natsUrl: server.url, stream, prefix, appendRetryMs: 5_000, atomicBatches: 'always' });
  });
  afterAll(async () => {
    await log.destroyStream();
    await log.close();
  });

  /** The stored message at `seq`, raw (headers as the server keeps them). */
  const raw = async (seq: number) => (await log.jsm.direct.getMessage(stream, { seq }))!;

  it('creates the stream with atomic batches allowed (2.12.1+), as deploy/nats/stream-RUNPLANE.json says', async () => {
    expect(runStreamConfig(log.space, { replicas: 1, duplicateWindowMs: 1 }).allow_atomic).toBe(true);
    expect((await log.jsm.streams.info(stream)).config.allow_atomic).toBe(true);
    expect(log.atomicBatches).toBe(true);
    // by default only on a replicated stream: on one replica the server stages each batch in a file store of its own (slower)
    const auto = await EventLog.connect({ natsUrl: server.url, stream, prefix, name: 'auto' });
    try {
      expect(auto.atomicBatches).toBe(false);
    } finally {
      await auto.close();
    }
  });

  it('stores the three events of one decision in one batch: consecutive sequences, each back-link verified, read back the same (K11)', async () => {
    const runId = `r1${tag}`;
    await log.append(admitted(runId), 0);
    const t1 = await log.append(turn(runId, 1), 0);
    const reported: AppendResult[] = [];
    const results = await log.appendBatch(
      [{ event: turn(runId, 2), expectedLastSubjectSeq: t1.seq, earlierSeqs: [t1.seq] }, { event: turn(runId, 3) }, { event: turn(runId, 4) }],
      7,
      (r) => reported.push(r),
    );
    expect(reported).toEqual(results);
    const seqs = results.map((r) => r.seq);
    expect(seqs).toEqual([seqs[0], seqs[0]! + 1, seqs[0]! + 2]);
    expect(results.map((r) => r.recovered)).toEqual([false, false, false]);
    // the chain on the subject: t1 <- batch 1 <- batch 2 <- batch 3
    expect(results.map((r) => r.stored.event.prevSeq)).toEqual([t1.seq, seqs[0], seqs[1]]);
    expect(results.every((r) => r.stored.event.writer?.epoch === 7 && r.stored.event.writer.instance === log.writer.instance)).toBe(true);

    // as stored: the first carries the expectation the server checked, the later ones their position in the batch
    const msgs = await Promise.all(seqs.map(raw));
    expect(msgs.map((m) => m.header.get(EXPECTED_LAST_SUBJECT_SEQUENCE))).toEqual([String(t1.seq), '', '']);
    expect(msgs.map((m) => m.header.get(BATCH_SEQUENCE))).toEqual(['1', '2', '3']);
    expect(msgs.map((m) => m.header.get('Nats-Msg-Id'))).toEqual(results.map((r) => r.stored.event.eventId));
    const bodies = msgs.map((m) => m.json<RunEvent & { prevInBatch?: number }>());
    expect(bodies.map((b) => [b.prevSeq, b.prevInBatch])).toEqual([
      [t1.seq, undefined],
      [undefined, 1],
      [undefined, 2],
    ]);
    // every reader's check resolves the same back-links the append returned
    const verified = msgs.map((m) => verifyStored(m.seq, m.subject, m.data, m.header, log.space.partitions));
    expect(verified.map((v) => v.event.prevSeq)).toEqual([t1.seq, seqs[0], seqs[1]]);

    // read by back-links (no fallback scan), whole and from the middle of the batch
    const read = await log.catchUp(runId, {});
    expect(read.full).toBe(false);
    expect(read.events.map((e) => e.seq).slice(-4)).toEqual([t1.seq, ...seqs]);
    expect(read.events.slice(-3)).toEqual(results.map((r) => r.stored));
    const tail = await log.catchUp(runId, { admission: read.lasts.admission, runtime: seqs[0]! });
    expect(tail.full).toBe(false);
    expect(tail.events.map((e) => e.seq)).toEqual([seqs[1], seqs[2]]);

    // and the next decision appends on top of the batch's last event
    const next = await log.append(turn(runId, 5), seqs[2]!, [...seqs].reverse());
    expect(next.stored.event.prevSeq).toBe(seqs[2]);
    expect((await log.catchUp(runId, {})).full).toBe(false);
  });

  it('given a stale expectation on one subject of the batch, then none of its events is stored, on any subject: AppendConflict (K6)', async () => {
    const runId = `r2${tag}`;
    await log.append(admitted(runId), 0);
    const t1 = await log.append(turn(runId, 1), 0);
    const before = await log.readRun(runId);
    // the tools subject is expected empty (right), the runtime subject too (stale: t1 is there)
    const refused = await log
      .appendBatch([
        { event: fence(runId, 'tools'), expectedLastSubjectSeq: 0 },
        { event: fence(runId, 'runtime'), expectedLastSubjectSeq: 0 },
      ])
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(AppendConflict);
    expect(refused).toMatchObject({ kind: 'wrong-last-sequence' });
    expect(await log.readRun(runId)).toEqual(before);
    expect(await log.lastOf(runId, 'tools')).toBeNull();
    // decided again from the current facts, the same decision lands whole
    const ok = await log.appendBatch([
      { event: fence(runId, 'tools'), expectedLastSubjectSeq: 0 },
      { event: fence(runId, 'runtime'), expectedLastSubjectSeq: t1.seq },
    ]);
    expect(ok.map((r) => r.stored.subject)).toEqual([runSubject(log.space, runId, 'tools'), runSubject(log.space, runId, 'runtime')]);
    expect(ok.map((r) => r.stored.event.prevSeq)).toEqual([0, t1.seq]);
  });

  it('counts by owner each event it stores (`ok`, a batch each of its events) and each append refused as a conflict (runplane_appends_total)', async () => {
    const runId = `rc${tag}`;
    const runtime = () => ({ ...(appendCounts().get('runtime') ?? { ok: 0, conflict: 0 }) });
    const before = runtime();
    await log.append(admitted(runId), 0);
    const t1 = await log.append(turn(runId, 1), 0);
    await log.appendBatch([{ event: turn(runId, 2), expectedLastSubjectSeq: t1.seq }, { event: turn(runId, 3) }]);
    await expect(log.append(turn(runId, 4), t1.seq)).rejects.toBeInstanceOf(AppendConflict);
    await expect(log.appendBatch([{ event: turn(runId, 5), expectedLastSubjectSeq: t1.seq }, { event: turn(runId, 6) }])).rejects.toBeInstanceOf(
      AppendConflict,
    );
    const after = runtime();
    expect({ ok: after.ok - before.ok, conflict: after.conflict - before.conflict }).toEqual({ ok: 3, conflict: 2 });
    expect(appendCounts().get('admission')!.ok).toBeGreaterThanOrEqual(1);
  });

  it('stores a decision on two subjects, interleaved, each subject its own chain, one request', async () => {
    const runId = `r3${tag}`;
    await log.append(admitted(runId), 0);
    const requests: string[] = [];
    const request = log.nc.request.bind(log.nc);
    log.nc.request = (...args: Parameters<typeof request>) => {
      requests.push(args[0]);
      return request(...args);
    };
    let results: AppendResult[];
    try {
      results = await log.appendBatch([
        { event: turn(runId, 1), expectedLastSubjectSeq: 0 },
        { event: fence(runId, 'tools'), expectedLastSubjectSeq: 0 },
        { event: turn(runId, 2) },
        { event: fence(runId, 'runtime') },
      ]);
    } finally {
      log.nc.request = request;
    }
    expect(requests).toHaveLength(1); // the commit; the messages before it go without a reply
    const [a, b, c, d] = results.map((r) => r.seq) as [number, number, number, number];
    expect([b, c, d]).toEqual([a + 1, a + 2, a + 3]);
    expect(results.map((r) => r.stored.subject.split('.')[3])).toEqual(['runtime', 'tools', 'runtime', 'runtime']);
    expect(results.map((r) => r.stored.event.prevSeq)).toEqual([0, 0, a, c]);
    const read = await log.catchUp(runId, {});
    expect(read.full).toBe(false);
    expect(read.lasts).toMatchObject({ runtime: d, tools: b });
    expect(read.events.slice(1)).toEqual(results.map((r) => r.stored));
  });

  it('given the acknowledgement of a stored batch lost, when the batch is sent again, then it is recognised as its own (recovered), not stored twice; another call with the same events is a decision made elsewhere', async () => {
    const runId = `r4${tag}`;
    await log.append(admitted(runId), 0);
    const items = [{ event: turn(runId, 1), expectedLastSubjectSeq: 0 }, { event: turn(runId, 2) }, { event: turn(runId, 3) }];
    const request = log.nc.request.bind(log.nc);
    let calls = 0;
    log.nc.request = async (...args: Parameters<typeof request>) => {
      // the commits (the reads that recognise the stored batch are requests too)
      const n = args[0].startsWith(`${prefix}.run.`) ? ++calls : 0;
      const reply = await request(...args);
      if (n === 1) throw new natsErrors.TimeoutError(); // stored, but its acknowledgement is lost
      return reply;
    };
    let results: AppendResult[];
    try {
      results = await log.appendBatch(items);
    } finally {
      log.nc.request = request;
    }
    expect(calls).toBe(2);
    expect(results.map((r) => r.recovered)).toEqual([true, true, true]);
    const read = await log.readRun(runId);
    expect(read).toHaveLength(4);
    expect(read.slice(1)).toEqual(results.map((r) => r.stored));

    // the same decision sent again by a new call (not a retry of this one): refused, nothing stored
    await expect(log.appendBatch(items)).rejects.toMatchObject({ kind: expect.stringMatching(/decided-elsewhere|wrong-last-sequence/) });
    const current = [{ event: turn(runId, 1), expectedLastSubjectSeq: results[2]!.seq }, { event: turn(runId, 2) }, { event: turn(runId, 3) }];
    await expect(log.appendBatch(current)).rejects.toMatchObject({ kind: 'decided-elsewhere' });
    // nor by another process, whose retry would not recognise this one's batch as its own
    const other = await EventLog.connect({ natsUrl: server.url, stream, prefix, name: 'other', atomicBatches: 'always' });
    try {
      await expect(other.appendBatch(current)).rejects.toBeInstanceOf(AppendConflict);
    } finally {
      await other.close();
    }
    expect(await log.readRun(runId)).toHaveLength(4);
  });

  it('given a lost acknowledgement retried past the duplicate window (its expectations stale, not its ids), then the stored batch is still recognised as its own', async () => {
    const shortStream = `RPTEST_ABW_${tag}`;
    const short = await EventLog.connect({
      natsUrl: server.url,
      stream: shortStream,
      prefix: `tabw${tag}`,
      name: 'short-window',
      duplicateWindowMs: 500,
      atomicBatches: 'always',
    });
    try {
      const runId = `r8${tag}`;
      const request = short.nc.request.bind(short.nc);
      let calls = 0;
      const codes: string[] = [];
      short.nc.request = async (...args: Parameters<typeof request>) => {
        const n = args[0].startsWith(`tabw${tag}.run.`) ? ++calls : 0;
        const reply = await request(...args);
        if (n > 1) codes.push(String(reply.json<{ error?: { err_code: number } }>().error?.err_code));
        if (n === 1) {
          await new Promise((r) => setTimeout(r, 2_000)); // the ids leave the window
          throw new natsErrors.TimeoutError();
        }
        return reply;
      };
      let results: AppendResult[];
      try {
        results = await short.appendBatch([{ event: turn(runId, 1), expectedLastSubjectSeq: 0 }, { event: turn(runId, 2) }]);
      } finally {
        short.nc.request = request;
      }
      expect(results.map((r) => r.recovered)).toEqual([true, true]);
      expect(codes).toEqual(['10071']); // refused by its expectation, not as a duplicate
      expect(await short.readRun(runId)).toEqual(results.map((r) => r.stored));
    } finally {
      await short.destroyStream();
      await short.close();
    }
  });

  it('a later event of a batch is a fact only with the batch position the server stored: published around the log, it is unverified', async () => {
    const runId = `r5${tag}`;
    const a = await log.append(admitted(runId), 0);
    const t1 = await log.append(turn(runId, 1), 0);
    const subject = runSubject(log.space, runId, 'runtime');
    // a body that claims to follow the event before it in a batch, published plainly
    const plain = { ...turn(runId, 2), prevInBatch: 1 };
    const p = await log.js.publish(subject, JSON.stringify(plain));
    // the same claim with a forged position header: the server refuses it outright (it is no batch)
    const h = headers();
    h.set(BATCH_SEQUENCE, '2');
    const forgedPosition = { ...turn(runId, 3), prevInBatch: 1 };
    const f = await log.js.publish(subject, JSON.stringify(forgedPosition), { headers: h }).catch((e: unknown) => e);
    // a checked expectation on another subject is no link of this one
    const h2 = headers();
    h2.set('Nats-Expected-Last-Subject-Sequence-Subject', runSubject(log.space, runId, 'admission'));
    const other = { ...turn(runId, 4), prevSeq: a.seq };
    const o = await log.js.publish(subject, JSON.stringify(other), { headers: h2, expect: { lastSubjectSequence: a.seq } });
    const reported: InvalidStoredEvent[] = [];
    const previous = log.onInvalid;
    log.onInvalid = (e) => reported.push(e);
    try {
      const read = await log.catchUp(runId, {});
      expect(read.events.map((e) => e.seq)).toEqual([a.seq, t1.seq]);
    } finally {
      log.onInvalid = previous;
    }
    const unverified = reported.filter((e) => e.anomaly === 'unverified-event').map((e) => e.seq);
    expect(unverified).toEqual(expect.arrayContaining([p.seq, o.seq]));
    if (typeof f === 'object' && f !== null && 'seq' in f) expect(unverified).toContain((f as { seq: number }).seq);
  });

  it('checks the expectations it is given: one on the first event of each subject, none on a later one', async () => {
    const runId = `r6${tag}`;
    await expect(log.appendBatch([{ event: admitted(runId) }, { event: turn(runId, 1), expectedLastSubjectSeq: 0 }])).rejects.toBeInstanceOf(
      RangeError,
    );
    await expect(
      log.appendBatch([
        { event: turn(runId, 1), expectedLastSubjectSeq: 0 },
        { event: turn(runId, 2), expectedLastSubjectSeq: 0 },
      ]),
    ).rejects.toBeInstanceOf(RangeError);
    expect(await log.readRun(runId)).toHaveLength(0);
  });

  it('on a stream without atomic batches it appends one event after another (said once), until the admin allows them', async () => {
    const plainStream = `RPTEST_ABP_${tag}`;
    const plainPrefix = `tabp${tag}`;
    const config = runStreamConfig({ stream: plainStream, prefix: plainPrefix, partitions: 8 }, { replicas: 1, duplicateWindowMs: 120_000 });
    delete (config as { allow_atomic?: boolean }).allow_atomic;
    await log.jsm.streams.add(config);
    const plain = await EventLog.connect({ natsUrl: server.url, stream: plainStream, prefix: plainPrefix, name: 'plain', atomicBatches: 'always' });
    const said: string[] = [];
    plain.onSequentialBatches = (why) => said.push(why);
    try {
      expect(plain.atomicBatches).toBe(false);
      const runId = `r7${tag}`;
      const stored: number[] = [];
      const first = await plain.appendBatch(
        [
          { event: turn(runId, 1), expectedLastSubjectSeq: 0 },
          { event: fence(runId, 'tools'), expectedLastSubjectSeq: 0 },
          { event: turn(runId, 2) },
        ],
        undefined,
        (r) => stored.push(r.seq),
      );
      expect(stored).toEqual(first.map((r) => r.seq));
      expect(first.map((r) => r.stored.event.prevSeq)).toEqual([0, 0, first[0]!.seq]);
      // each one an ordinary conditional append
      expect((await raw2(plain, first[2]!.seq)).header.get(BATCH_SEQUENCE)).toBe('');
      await plain.appendBatch([{ event: turn(runId, 3), expectedLastSubjectSeq: first[2]!.seq }, { event: turn(runId, 4) }]);
      expect(said).toHaveLength(1);
      expect(said[0]).toMatch(/allow_atomic/);

      // the admin's step (provisionBus): then one batch
      await expect(plain.enableAtomicBatches()).resolves.toBe(true);
      expect(plain.atomicBatches).toBe(true);
      const last = (await plain.catchUp(runId, {})).lasts.runtime;
      const batched = await plain.appendBatch([{ event: turn(runId, 5), expectedLastSubjectSeq: last }, { event: turn(runId, 6) }]);
      expect((await raw2(plain, batched[1]!.seq)).header.get(BATCH_SEQUENCE)).toBe('2');
      expect((await plain.catchUp(runId, {})).full).toBe(false);
    } finally {
      await plain.destroyStream();
      await plain.close();
    }
  });
});
