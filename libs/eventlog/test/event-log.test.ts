import { afterAll, beforeAll, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { makeEvent, type StoredEvent } from '@runplane/contracts';
import { errors as natsErrors, headers as natsHeaders } from '@nats-io/transport-node';
import {
  AppendConflict,
  AppendRefused,
  DurableConsumer,
  deliveryCounts,
  EventLog,
  isJetStreamMissing,
  isPermanentAppendError,
  ownerFilter,
  partitionOf,
  payloadTypeOf,
  RetryLater,
  runSubject,
  type InvalidStoredEvent,
} from '@runplane/eventlog';
import { countDirectGets } from '../../../test/support/direct-gets.js';
import { waitFor } from '../../../test/support/wait.js';
import { describeEachNatsServer, natsServersUnderTest, SUITE_NATS } from '../../../test/support/nats-server.js';

// every test runs on the machine's nats-server (2.9.10) and on the cached current release
const servers = await natsServersUnderTest();
const tag = randomBytes(4).toString('hex');

const ctx = (runId: string) => ({ runId, conversationId: 'c1', correlationId: 'm1', causationId: null });
const admitted = (runId: string, content = 'hello') =>
  makeEvent(
    'run.admitted',
    ctx(runId),
    'admission',
    {
      message: { messageId: 'm1', clientMessageId: 'cm1', content, contentSha256: 'a'.repeat(64) },
      grant: { tools: ['list_funds'], model: 'm' },
      limits: { maxModelRequests: 2, maxToolCalls: 2, deadlineAt: new Date(Date.now() + 60_000).toISOString() },
    },
    new Date(),
  );
const turnRequested = (runId: string, turn: number) => makeEvent('model.turn.requested', ctx(runId), turn, { turn, model: 'm' }, new Date());

describeEachNatsServer(servers, (server) => {
  let natsUrl: string;
  let log: EventLog;
  beforeAll(async () => {
    natsUrl = server.url;
    log = await EventLog.connect({ ...SUITE_NATS, natsUrl, stream: `RPTEST_EL_${tag}`, prefix: `tel${tag}` });
  });
  afterAll(async () => {
    await log.destroyStream();
    await log.close();
  });

  it('given an empty subject, when two writers append expecting 0, then exactly one lands (fencing, K6)', async () => {
    const runId = `r1${tag}`;
    const a = admitted(runId, 'one');
    const b = { ...admitted(runId, 'two'), eventId: '00000000-0000-4000-8000-000000000001' };
    const results = await Promise.allSettled([log.append(a, 0), log.append(b as typeof a, 0)]);
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    const rejected = results.find((r) => r.status === 'rejected') as PromiseRejectedResult;
    expect(rejected.reason).toBeInstanceOf(AppendConflict);
    expect(await log.readRun(runId)).toHaveLength(1);
  });

  it('given a delivery this process saw stored on a subject, when a read of that subject answers below it (a copy of the stream behind), then it is read again and never returned: RetryLater (K10, K11)', async () => {
    const runId = `rf${tag}`;
    const first = await log.append(admitted(runId), 0);
    const reader = await EventLog.connect({ ...SUITE_NATS, natsUrl, stream: `RPTEST_EL_${tag}`, prefix: `tel${tag}`, name: 'floor-reader' });
    try {
      const subject = runSubject(reader.space, runId, 'admission');
      // what a consumer delivered (the floor): reads answer at or above it
      reader.noteStored(subject, first.seq);
      expect((await reader.lastOf(runId, 'admission'))?.seq).toBe(first.seq);
      // a later message of the subject was delivered, but the copy answering reads does not hold it:
      // simulated by a floor beyond what is stored; the stale answer is refused, not decided from
      reader.noteStored(subject, first.seq + 1000);
      const started = Date.now();
      await expect(reader.lastOf(runId, 'admission')).rejects.toThrow(RetryLater);
      expect(Date.now() - started).toBeGreaterThanOrEqual(400); // it read again a few times first
      // another subject of the same Run is unaffected
      expect(await reader.lastOf(runId, 'runtime')).toBeNull();
    } finally {
      await reader.close();
    }
  });

  it("given an event over the broker's max_payload, when appended, then it is refused at once as permanent (size), never attempted, nothing stored (K11)", async () => {
    const runId = `rsize${tag}`;
    const max = log.nc.info!.max_payload;
    const big = admitted(runId, 'x'.repeat(max + 1));
    const started = Date.now();
    const refused = await log.append(big, 0).then(
      () => null,
      (e: unknown) => e,
    );
    expect(refused).toBeInstanceOf(AppendRefused);
    expect(refused).toMatchObject({ reason: 'size' });
    expect(isPermanentAppendError(refused)).toBe(true);
    expect(Date.now() - started).toBeLessThan(2_000); // not retried for appendRetryMs
    expect(await log.readRun(runId)).toHaveLength(0);
    // just under the limit it is stored
    const fits = admitted(runId, 'x'.repeat(max - 2_000));
    await expect(log.append(fits, 0)).resolves.toMatchObject({ seq: expect.any(Number) });
  });

  it('given an appended event, when the same event id is appended again, then it is refused as a conflict and nothing new is stored (K11)', async () => {
    const runId = `r2${tag}`;
    const e = admitted(runId);
    const first = await log.append(e, 0);
    // the same decision, retried with the stale or the current expectation, is refused either way
    // (2.9 checks Nats-Msg-Id first: a duplicate; 2.11+ checks a wrong expectation first)
    await expect(log.append(e, 0)).rejects.toBeInstanceOf(AppendConflict);
    await expect(log.append(e, first.seq)).rejects.toMatchObject({ kind: 'decided-elsewhere' });
    await expect(log.append(e, first.seq)).rejects.toBeInstanceOf(AppendConflict);
    expect(await log.readRun(runId)).toHaveLength(1);
  });

  it('reads one Run in order across owners, with a stale writer rejected on its own subject', async () => {
    const runId = `r3${tag}`;
    const s1 = await log.append(admitted(runId), 0);
    const s2 = await log.append(turnRequested(runId, 1), 0);
    await expect(log.append(turnRequested(runId, 2), 0)).rejects.toBeInstanceOf(AppendConflict);
    const s3 = await log.append(turnRequested(runId, 2), s2.seq);
    const events = await log.readRun(runId);
    expect(events.map((e) => e.seq)).toEqual([s1.seq, s2.seq, s3.seq]);
    const p = partitionOf(runId, log.space.partitions);
    expect(events.map((e) => e.subject)).toEqual([
      `tel${tag}.run.${runId}.admission.${p}`,
      `tel${tag}.run.${runId}.runtime.${p}`,
      `tel${tag}.run.${runId}.runtime.${p}`,
    ]);
    expect((await log.lastOf(runId, 'runtime'))?.seq).toBe(s3.seq);
    expect(await log.readRun(runId, s2.seq + 1)).toHaveLength(1);
    expect(await log.readRun(`nothing${tag}`)).toEqual([]);
  });

  /** Runs `read` with the log's invalid messages collected: their messages, in order. */
  const invalidReported = async (read: () => Promise<void>): Promise<string[]> => {
    const reported: string[] = [];
    const previous = log.onInvalid;
    log.onInvalid = (e) => reported.push(e.message);
    try {
      await read();
    } finally {
      log.onInvalid = previous;
    }
    return reported;
  };

  it("skips and reports a stored message that is not a valid event, so one bad message cannot block a Run's readers (K11)", async () => {
    const runId = `r5${tag}`;
    await log.append(admitted(runId), 0);
    await log.js.publish(runSubject(log.space, runId, 'tools'), 'not json at all');
    await log.append(turnRequested(runId, 1), 0);
    const reported = await invalidReported(async () => {
      expect((await log.readRun(runId)).map((e) => e.event.type)).toEqual(['run.admitted', 'model.turn.requested']);
    });
    expect(reported).toHaveLength(1);
    expect(reported[0]).toMatch(/not JSON/);
  });

  it("reads a Run whose foreign message names another sequence and subject in headers of its own: the server's position and subject stand, and the read ends", async () => {
    const runId = `r5h${tag}`;
    const first = await log.append(admitted(runId), 0);
    const tools = runSubject(log.space, runId, 'tools');
    // a trial's message: its own `Nats-Sequence` sent the whole-Run scan back to the start for ever
    const h = natsHeaders();
    h.set('Nats-Sequence', String(first.seq));
    h.set('Nats-Subject', runSubject(log.space, runId, 'lifecycle'));
    const planted = await log.js.publish(tools, 'garbage with headers of the server', { headers: h });
    await log.append(turnRequested(runId, 1), 0);
    const reported = await invalidReported(async () => {
      // the tools subject's last message is not a fact: the Run is scanned whole
      expect((await log.readRun(runId)).map((e) => e.event.type)).toEqual(['run.admitted', 'model.turn.requested']);
      const whole: string[] = [];
      for await (const e of log.readRunWhole(runId)) whole.push(e.event.type);
      expect(whole).toEqual(['run.admitted', 'model.turn.requested']);
    });
    expect(reported).toEqual([
      expect.stringMatching(new RegExp(`^stream message ${planted.seq} on ${tools.replace(/\./g, '\\.')} is not a valid event`)),
      expect.stringMatching(new RegExp(`^stream message ${planted.seq} on ${tools.replace(/\./g, '\\.')} is not a valid event`)),
    ]);
  });

  it("names a stored event that fails the schema by its paths in one short line, keeping the validator's issues in `detail`", async () => {
    const runId = `rschema${tag}`;
    await log.append(admitted(runId), 0);
    const bad = { ...admitted(runId), eventId: 42, data: { nonsense: true } };
    await log.js.publish(runSubject(log.space, runId, 'admission'), JSON.stringify(bad));
    await log.js.publish(runSubject(log.space, runId, 'admission'), JSON.stringify({ type: 'run.nope', eventId: 42 }));
    const reported: InvalidStoredEvent[] = [];
    const previous = log.onInvalid;
    log.onInvalid = (e) => reported.push(e);
    try {
      await log.readRun(runId);
    } finally {
      log.onInvalid = previous;
    }
    expect(reported).toHaveLength(2);
    expect(reported[0]!.message).toMatch(/is not a valid event: eventId: expected string, received number; data\.message: /);
    expect(reported[0]!.message).not.toContain('"code"');
    expect(JSON.parse(reported[0]!.detail)).toEqual(expect.arrayContaining([expect.objectContaining({ path: ['eventId'] })]));
    // an unknown type, and the envelope's own faults with it (a trial saw only the type named)
    expect(reported[1]!.message).toMatch(
      /is not a valid event: type: not one of the \d+ known values; eventId: expected string, received number; runId: .* \(and \d+ more\)$/,
    );
  });

  it('refuses to start on a stream that does not capture its subject prefix', async () => {
    await expect(EventLog.connect({ ...SUITE_NATS, natsUrl, stream: `RPTEST_EL_${tag}`, prefix: `other${tag}` })).rejects.toThrow(
      /do not belong together/,
    );
  });

  it('redelivers a message whose handler failed, then acknowledges it (at-least-once)', async () => {
    const runId = `r4${tag}`;
    await log.append(admitted(runId), 0);
    const seen: number[] = [];
    let failures = 0;
    const consumer = new DurableConsumer(
      log,
      { durable: 'redelivery', filter: ownerFilter(log.space, 'admission') },
      async (s: StoredEvent) => {
        if (s.event.runId !== runId) return;
        seen.push(s.seq);
        if (failures++ === 0) throw new Error('transient');
      },
      { warn: () => undefined, error: () => undefined },
    );
    await consumer.start();
    const deadline = Date.now() + 10_000;
    while (seen.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    await consumer.stop();
    expect(seen.length).toBe(2);
    expect(seen[0]).toBe(seen[1]);
  });

  it('takes a failure to open the log as a server without JetStream only when the JetStream API has no responder or says so, not when a port such as 45503 is in the message', () => {
    expect(isJetStreamMissing("no responders: '$JS.API.INFO'")).toBe(true);
    expect(isJetStreamMissing('jetstream is not enabled')).toBe(true);
    expect(isJetStreamMissing('JetStream not enabled for account')).toBe(true);
    expect(isJetStreamMissing('stream RPT_X does not exist on NATS at nats://127.0.0.1:45503: nothing was created')).toBe(false);
    expect(isJetStreamMissing('TIMEOUT')).toBe(false);
  });

  it("reads a payload's type for handles only when the catalogue has it: any other string, a non-string and garbage name none (they go the whole way)", () => {
    const bytes = (v: unknown) => new TextEncoder().encode(typeof v === 'string' ? v : JSON.stringify(v));
    expect(payloadTypeOf(bytes({ type: 'run.admitted', data: {} }))).toBe('run.admitted');
    expect(payloadTypeOf(bytes({ type: `x${'y'.repeat(1_000)}` }))).toBeNull();
    expect(payloadTypeOf(bytes({ type: 'constructor' }))).toBeNull();
    expect(payloadTypeOf(bytes({ type: 42 }))).toBeNull();
    expect(payloadTypeOf(bytes(['run.admitted']))).toBeNull();
    expect(payloadTypeOf(bytes('not json'))).toBeNull();
  });

  it('given a consumer that keeps no folds and handles only run.admitted, when another type, garbage and a forged run.admitted arrive, then the other type is acknowledged unread, the garbage and the forgery are terminated, and only the genuine event is handled', async () => {
    const runId = `rign${tag}`;
    const genuine = await log.append(admitted(runId), 0);
    await log.append(turnRequested(runId, 1), 0); // a runtime event admission would not act on
    await log.js.publish(runSubject(log.space, runId, 'runtime'), 'not json at all');
    // a copy published around the log: no checked expectation, so not a fact whatever its type
    await log.js.publish(
      runSubject(log.space, runId, 'admission'),
      JSON.stringify({ ...admitted(runId), eventId: '00000000-0000-4000-8000-00000000000a' }),
    );
    const handled: string[] = [];
    const invalid: string[] = [];
    const consumer = new DurableConsumer(
      log,
      {
        durable: 'handles-some',
        filter: [ownerFilter(log.space, 'admission'), ownerFilter(log.space, 'runtime')],
        handles: (type) => type === 'run.admitted',
        // (the stream holds the other tests' messages too: only this Run's count here)
        onInvalid: (e) => {
          if (e.subject.includes(`.${runId}.`)) invalid.push(e.anomaly);
        },
      },
      async (s: StoredEvent) => {
        if (s.event.runId === runId) handled.push(`${s.event.type}#${s.seq}`);
      },
      { warn: () => undefined, error: () => undefined },
    );
    await consumer.start();
    try {
      // every message of the Run acknowledged or terminated: nothing pending, nothing waiting for an ack
      const deadline = Date.now() + 10_000;
      let info = await log.jsm.consumers.info(log.space.stream, consumer.durableName);
      while ((info.num_pending > 0 || info.num_ack_pending > 0 || invalid.length < 2) && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 50));
        info = await log.jsm.consumers.info(log.space.stream, consumer.durableName);
      }
      expect(info.num_pending).toBe(0);
      expect(info.num_ack_pending).toBe(0);
      expect(handled).toEqual([`run.admitted#${genuine.seq}`]);
      expect(invalid.sort()).toEqual(['invalid-message', 'unverified-event']);
      expect(deliveryCounts().get(consumer.durableName)?.ignored).toBeGreaterThanOrEqual(1);
    } finally {
      await consumer.stop();
      await log.jsm.consumers.delete(log.space.stream, consumer.durableName).catch(() => undefined);
    }
  });

  it.each([
    { onArrival: true, second: 'starts while the first still runs', pendingWhileHeld: 1 },
    { onArrival: false, second: 'waits for the first (the default)', pendingWhileHeld: 2 },
  ])(
    "given a Run's first handler held, with onArrival $onArrival, then the second $second, and each message is acknowledged only when its own handler resolves",
    async ({ onArrival, pendingWhileHeld }) => {
      const runId = `rarr${onArrival}${tag}`;
      const first = await log.append(admitted(runId), 0);
      const second = await log.append(turnRequested(runId, 1), 0);
      const started: number[] = [];
      let releaseFirst!: () => void;
      const firstHeld = new Promise<void>((r) => (releaseFirst = r));
      const consumer = new DurableConsumer(
        log,
        { durable: `on-arrival-${onArrival}`, filter: [ownerFilter(log.space, 'admission'), ownerFilter(log.space, 'runtime')], onArrival },
        async (s: StoredEvent) => {
          if (s.event.runId !== runId) return;
          started.push(s.seq);
          if (s.seq === first.seq) await firstHeld;
        },
        { warn: () => undefined, error: () => undefined },
      );
      await consumer.start();
      try {
        const info = () => log.jsm.consumers.info(log.space.stream, consumer.durableName);
        // the stream's other Runs are handled at once: only this Run's two stay unacknowledged while the first is held
        await waitFor('the held Run alone unacknowledged', async () => {
          const i = await info();
          return i.num_pending === 0 && i.num_ack_pending === (onArrival ? 1 : 2) && started.includes(first.seq);
        });
        expect((await info()).num_ack_pending).toBe(pendingWhileHeld);
        expect(started).toEqual(onArrival ? [first.seq, second.seq] : [first.seq]);
        releaseFirst();
        await waitFor('both acknowledged', async () => (await info()).num_ack_pending === 0);
        expect(started).toEqual([first.seq, second.seq]);
        expect((await info()).num_redelivered).toBe(0);
      } finally {
        releaseFirst();
        await consumer.stop();
        await log.jsm.consumers.delete(log.space.stream, consumer.durableName).catch(() => undefined);
      }
    },
  );

  it('stamps every appended event with its back-link (prevSeq) and writer', async () => {
    const runId = `r6${tag}`;
    const a = await log.append(admitted(runId), 0);
    const t1 = await log.append(turnRequested(runId, 1), 0);
    const t2 = await log.append(turnRequested(runId, 2), t1.seq);
    const events = await log.readRun(runId);
    expect(events.map((e) => e.event.prevSeq)).toEqual([0, 0, t1.seq]);
    expect(events.every((e) => e.event.writer?.instance === log.writer.instance)).toBe(true);
    expect(events.map((e) => e.seq)).toEqual([a.seq, t1.seq, t2.seq]);
  });

  it('reads a Run by its back-links, with one direct get per event and per owner subject, whatever else the stream holds', async () => {
    const runId = `r7${tag}`;
    let runtimeSeq = 0;
    await log.append(admitted(runId), 0);
    for (let turn = 1; turn <= 10; turn++) {
      // other Runs' events interleaved within the Run's span
      await Promise.all(Array.from({ length: 50 }, (_, i) => log.js.publish(runSubject(log.space, `other${turn}x${i}${tag}`, 'runtime'), '{}')));
      runtimeSeq = (await log.append(turnRequested(runId, turn), runtimeSeq)).seq;
    }
    const gets = countDirectGets(log);
    try {
      const events = await log.readRun(runId);
      expect(events.map((e) => e.event.type)).toEqual(['run.admitted', ...Array<string>(10).fill('model.turn.requested')]);
      expect(gets.count).toBe(11 - 2 + 6); // 11 events, 2 of them are their subjects' last (found by the 6 last_by_subj gets)
      expect(events.map((e) => e.event.prevSeq)).toEqual([0, 0, ...events.slice(1, 10).map((e) => e.seq)]);
      gets.reset();
      const known = { admission: events[0]!.seq, runtime: events[5]!.seq };
      const more = await log.catchUp(runId, known);
      expect(more.full).toBe(false);
      expect(more.events.map((e) => e.seq)).toEqual(events.slice(6).map((e) => e.seq));
      expect(more.lasts.runtime).toBe(runtimeSeq);
      expect(gets.count).toBe(6 + 4); // 5 new events, the last found by its subject's last_by_subj get
    } finally {
      gets.restore();
    }
  });

  it("tells its own earlier attempt whose acknowledgement was lost (stored, goes on) from another writer's decision (conflict)", async () => {
    const runId = `r8${tag}`;
    const e = admitted(runId);
    const js = log.js;
    const publish = js.publish.bind(js);
    let calls = 0;
    js.publish = async (...args: Parameters<typeof publish>) => {
      const n = ++calls;
      const ack = await publish(...args);
      if (n === 1) throw new natsErrors.TimeoutError(); // the ack of the first attempt is lost
      return ack;
    };
    try {
      const r = await log.append(e, 0);
      expect(r.recovered).toBe(true);
      expect(calls).toBe(2);
    } finally {
      js.publish = publish;
    }
    expect(await log.readRun(runId)).toHaveLength(1);

    const other = await EventLog.connect({ ...SUITE_NATS, natsUrl, stream: `RPTEST_EL_${tag}`, prefix: `tel${tag}`, name: 'other-writer' });
    try {
      const t = turnRequested(runId, 1);
      const stored = await other.append(t, 0);
      // with a stale expectation it is a plain conflict on either server version
      await expect(log.append(t, 0)).rejects.toBeInstanceOf(AppendConflict);
      // with the current one, the duplicate id names the decision as another writer's
      const conflict = await log.append(t, stored.seq).catch((x: unknown) => x);
      expect(conflict).toBeInstanceOf(AppendConflict);
      expect(conflict).toMatchObject({ kind: 'decided-elsewhere' });
      expect((conflict as Error).message).toContain(other.writer.instance);
    } finally {
      await other.close();
    }
    expect(await log.readRun(runId)).toHaveLength(2);
  });

  it('falls back to a full scan when a back-link cannot be followed (an event without prevSeq); an event without the checked expectation is no fact, prevSeq or not', async () => {
    const runId = `r9${tag}`;
    await log.append(admitted(runId), 0);
    // appended before prevSeq existed: conditional all the same (every append always was)
    const legacy = turnRequested(runId, 1);
    await log.js.publish(runSubject(log.space, runId, 'runtime'), JSON.stringify(legacy), {
      msgID: legacy.eventId,
      expect: { lastSubjectSequence: 0 },
    });
    // a forgery that leaves prevSeq out, published plainly
    const forged = await log.js.publish(runSubject(log.space, runId, 'runtime'), JSON.stringify(turnRequested(runId, 2)));
    const reported: InvalidStoredEvent[] = [];
    const previous = log.onInvalid;
    log.onInvalid = (e) => reported.push(e);
    try {
      const read = await log.catchUp(runId, {});
      expect(read.full).toBe(true);
      expect(read.events.map((e) => e.event.type)).toEqual(['run.admitted', 'model.turn.requested']);
      expect(read.events[1]!.event.eventId).toBe(legacy.eventId);
      expect(reported.filter((e) => e.seq === forged.seq).map((e) => e.anomaly)).toEqual(['unverified-event']);
    } finally {
      log.onInvalid = previous;
    }
  });

  it("reads a subject's events in parallel from the earlierSeqs hints, and ignores hints that disagree with the verified links", async () => {
    const runId = `r10${tag}`;
    await log.append(admitted(runId), 0);
    const seqs: number[] = [];
    for (let turn = 1; turn <= 8; turn++) {
      const r = await log.append(turnRequested(runId, turn), seqs[0] ?? 0, seqs);
      seqs.unshift(r.seq);
    }
    const stored = await log.readRun(runId);
    expect(stored[8]!.event.earlierSeqs).toEqual(seqs.slice(2));
    expect(stored.map((e) => e.seq)).toEqual([stored[0]!.seq, ...[...seqs].reverse()]);
    // a forged hint list: the reader must not take it
    const liar = turnRequested(runId, 9);
    await log.append(liar, seqs[0]!, [stored[0]!.seq, 1, 2]);
    const again = await log.catchUp(runId, {});
    expect(again.full).toBe(false);
    expect(again.events.map((e) => e.event.type)).toEqual(['run.admitted', ...Array<string>(9).fill('model.turn.requested')]);
  });

  it('a copy of a genuine event stored again without the conditional append (a replay) breaks the chain: the Run is read whole, and the copy is not a second fact', async () => {
    const runId = `r11${tag}`;
    const a = await log.append(admitted(runId), 0);
    const t1 = await log.append(turnRequested(runId, 1), 0);
    const t2 = await log.append(turnRequested(runId, 2), t1.seq, [t1.seq]);
    // a byte-for-byte copy of turn 1 claiming to be the first on its subject, published plainly
    const replay = { ...t1.stored.event, prevSeq: 0 };
    await log.js.publish(runSubject(log.space, runId, 'runtime'), JSON.stringify(replay));
    const reported: string[] = [];
    const previous = log.onInvalid;
    log.onInvalid = (e) => reported.push(e.message);
    try {
      const read = await log.catchUp(runId, {});
      expect(read.full).toBe(true);
      expect(read.events.map((e) => e.seq)).toEqual([a.seq, t1.seq, t2.seq]);
      expect(read.lasts.runtime).toBeGreaterThan(t2.seq); // the copy still moves the subject on
      // a reader that knew the subject up to turn 2 is not fooled into a shorter chain either
      const again = await log.catchUp(runId, { admission: a.seq, runtime: t2.seq });
      expect(again.full).toBe(true);
    } finally {
      log.onInvalid = previous;
    }
    // the copy was not appended by the log (no verified back-link): it is reported as unverified
    expect(reported.some((m) => /a copy of event|is unverified/.test(m))).toBe(true);
  });

  it('an event whose prevSeq disagrees with the expectation the server checked is not a link, nor a fact', async () => {
    const runId = `r12${tag}`;
    const a = await log.append(admitted(runId), 0);
    const t1 = await log.append(turnRequested(runId, 1), 0);
    // a conditional append whose body claims another predecessor than its header
    const liar = { ...turnRequested(runId, 2), prevSeq: 0 };
    await log.js.publish(runSubject(log.space, runId, 'runtime'), JSON.stringify(liar), {
      msgID: liar.eventId,
      expect: { lastSubjectSequence: t1.seq },
    });
    const read = await log.catchUp(runId, {});
    expect(read.full).toBe(true);
    // published around the log (every append states its checked expectation): skipped
    expect(read.events.map((e) => e.event.type)).toEqual(['run.admitted', 'model.turn.requested']);
    expect(read.events[0]!.seq).toBe(a.seq);
    // and the next append on that subject expects it: it does not break the writer's fencing
    expect(read.lasts.runtime).toBeGreaterThan(t1.seq);
  });

  it('the last event of a subject whose last message is garbage is still found (no error)', async () => {
    const runId = `r13${tag}`;
    const a = await log.append(admitted(runId), 0);
    await log.js.publish(runSubject(log.space, runId, 'admission'), 'not json');
    const previous = log.onInvalid;
    log.onInvalid = () => undefined;
    try {
      expect((await log.lastOf(runId, 'admission'))?.seq).toBe(a.seq);
      const read = await log.catchUp(runId, {});
      expect(read.lasts.admission).toBeGreaterThan(a.seq);
    } finally {
      log.onInvalid = previous;
    }
  });

  it('a forged event published around the log is neither followed live nor taken as the last event of its subject; following goes on to the genuine ones', async () => {
    const runId = `r14${tag}`;
    const a = await log.append(admitted(runId), 0);
    const t1 = await log.append(turnRequested(runId, 1), 0);
    const reported: InvalidStoredEvent[] = [];
    const previous = log.onInvalid;
    log.onInvalid = (e) => reported.push(e);
    const followed: number[] = [];
    const stop = await log.followRun(runId, 1, (e) => void followed.push(e.seq));
    try {
      // well-formed, with a plausible back-link, but published plainly (no checked expectation)
      const forged = await log.js.publish(runSubject(log.space, runId, 'runtime'), JSON.stringify({ ...turnRequested(runId, 7), prevSeq: t1.seq }));
      const garbage = await log.js.publish(runSubject(log.space, runId, 'runtime'), 'not json {');
      expect((await log.lastOf(runId, 'runtime'))?.seq).toBe(t1.seq);
      expect(await log.getStored(forged.seq)).toBeNull();
      const t2 = await log.append(turnRequested(runId, 2), garbage.seq);
      const deadline = Date.now() + 5_000;
      while (!followed.includes(t2.seq) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      expect(followed).toEqual([a.seq, t1.seq, t2.seq]);
      expect(reported.filter((e) => e.seq === forged.seq).map((e) => e.anomaly)).toContain('unverified-event');
      expect(reported.filter((e) => e.seq === garbage.seq).map((e) => e.anomaly)).toContain('invalid-message');
    } finally {
      await stop();
      log.onInvalid = previous;
    }
  });
});
