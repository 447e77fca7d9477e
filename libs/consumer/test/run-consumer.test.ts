/**
 * The downstream consumer library against the suite's nats-server: events appended by a real
 * event log on a stream of this file, followed by durable consumers named `downstream-...`.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { createDevSigning, repoRoot } from '@runplane/devstack';
import type { RunEventOf } from '@runplane/contracts';
import { headers as natsHeaders } from '@nats-io/transport-node';
import { EventLog, InvalidStoredEvent, readSigningKey, runSubject, signatureHeaders, verifyStored } from '@runplane/eventlog';
import {
  DOWNSTREAM_CONSUMER_PREFIX,
  downstreamConsumerName,
  MemoryProcessedStore,
  processedOnce,
  RunConsumer,
  RunStream,
  RunStreamUnavailable,
  stderrLines,
  type EventMeta,
  type InvalidMessage,
  type NewerEvent,
  type RunStreamOptions,
} from '@runplane/consumer';
import { SHARED_NATS, SHARED_NATS_URL, suiteNatsEnv } from '../../../test/support/nats-server.js';
import { admittedEvent, settledEvent } from '../../../test/support/events.js';

const tag = randomBytes(4).toString('hex');
const space = { stream: `RPTEST_DC_${tag}`, prefix: `tdc${tag}` };
const streamOptions: RunStreamOptions = {
  natsUrl: SHARED_NATS_URL,
  user: SHARED_NATS.user,
  password: SHARED_NATS.password,
  caFile: SHARED_NATS.caFile,
  ...space,
};
const quiet = { warn: () => undefined, error: () => undefined };
let log: EventLog;
let stream: RunStream;
const consumers: RunConsumer[] = [];
const children: ChildProcess[] = [];

const admitted = (runId: string) => admittedEvent(runId);
const settled = (runId: string) => settledEvent(runId, { promptTokens: 10, completionTokens: 5 });

async function until(pred: () => boolean | Promise<boolean>, what: string | (() => string), timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await pred())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${typeof what === 'string' ? what : what()}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** A consumer on the file's stream, deleted from the server after the file. */
function consumer(
  suffix: string,
  opts: { owners?: ('admission' | 'lifecycle')[]; onInvalid?: (m: InvalidMessage) => void; ackWaitMs?: number } = {},
) {
  const c = new RunConsumer(stream, { name: `${DOWNSTREAM_CONSUMER_PREFIX}${suffix}-${tag}`, logger: quiet, ...opts });
  consumers.push(c);
  return c;
}

async function pendingOf(c: RunConsumer): Promise<{ pending: number; ackPending: number }> {
  const info = await stream.jsm.consumers.info(space.stream, c.name);
  return { pending: info.num_pending, ackPending: info.num_ack_pending };
}

beforeAll(async () => {
  log = await EventLog.connect({ ...SHARED_NATS, ...space, name: 'admin' });
  log.onInvalid = () => undefined;
  stream = await RunStream.open(streamOptions);
});
afterAll(async () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  for (const c of consumers) {
    await c.stop();
    await c.deleteDurable();
  }
  await stream?.close();
  await log?.destroyStream();
  await log?.close();
});

describe('the default logger', () => {
  it('writes each problem as one line on stderr: the message, then its fields as JSON (an error as its message)', () => {
    const lines: string[] = [];
    const write = process.stderr.write.bind(process.stderr);
    process.stderr.write = (chunk: string) => lines.push(chunk) > 0;
    try {
      stderrLines.error({ durable: 'downstream-1', seq: 157, err: new Error('boom') }, 'handler failed');
      stderrLines.warn({ seq: 3 }, 'not yet actionable');
    } finally {
      process.stderr.write = write;
    }
    expect(lines).toEqual([
      'runplane-consumer: handler failed {"durable":"downstream-1","seq":157,"err":"boom"}\n',
      'runplane-consumer: not yet actionable {"seq":3}\n',
    ]);
  });
});

describe('names and the stream', () => {
  it('takes only names with the downstream prefix that are one subject token', () => {
    expect(downstreamConsumerName('downstream-webhooks_1')).toBe('downstream-webhooks_1');
    for (const bad of ['webhooks', 'rp-projector-p0', 'downstream-', 'downstream-a.b', 'downstream-*', `downstream-${'x'.repeat(65)}`]) {
      expect(() => downstreamConsumerName(bad)).toThrow(RangeError);
      expect(() => new RunConsumer(stream, { name: bad })).toThrow(RangeError);
    }
  });

  it('opens only an existing stream: a missing one is an error naming it and the server, and is not created', async () => {
    const missing = `RPTEST_DC_MISSING_${tag}`;
    const opened = RunStream.open({ ...streamOptions, stream: missing });
    await expect(opened).rejects.toBeInstanceOf(RunStreamUnavailable);
    await expect(opened).rejects.toThrow(new RegExp(`${missing} does not exist on NATS at ${SHARED_NATS_URL}`));
    await expect(log.jsm.streams.info(missing)).rejects.toThrow(/not found/i);
    await expect(RunStream.open({ ...streamOptions, prefix: `other${tag}` })).rejects.toThrow(/do not belong together/);
  });
});

describe('following Runs', () => {
  it('hands each event to the handler of its type, typed, with its event id and stream sequence; "*" gets the types without one', async () => {
    const runId = `typed${tag}`;
    const a = await log.append(admitted(runId), 0);
    const s = await log.append(settled(runId), 0);
    const got: string[] = [];
    const settlements: { event: RunEventOf<'run.settled'>; meta: EventMeta }[] = [];
    const c = consumer('typed')
      .on('run.settled', (event, meta) => {
        if (event.runId !== runId) return;
        // typed by the catalogue: data.outcome exists on run.settled only
        got.push(`settled:${event.data.outcome}`);
        settlements.push({ event, meta });
      })
      .on('*', (event) => {
        if (event.runId === runId) got.push(event.type);
      });
    await c.start();
    await until(() => got.length === 2, 'both events');
    expect(got).toEqual(['run.admitted', 'settled:completed']);
    expect(settlements[0]!.meta).toEqual({
      eventId: s.stored.event.eventId,
      runId,
      seq: s.seq,
      subject: runSubject(log.space, runId, 'lifecycle'),
      deliveryCount: 1,
      redelivered: false,
    });
    expect(settlements[0]!.event.eventId).toBe(settled(runId).eventId);
    expect(a.seq).toBeLessThan(s.seq);
    expect(() => c.on('run.admitted', () => undefined)).toThrow(/has started/);
  });

  it('with an owners filter, delivers only those owners’ subjects', async () => {
    const runId = `owners${tag}`;
    await log.append(admitted(runId), 0);
    const s = await log.append(settled(runId), 0);
    const seen: string[] = [];
    const c = consumer('owners', { owners: ['lifecycle'] }).on('*', (event) => void (event.runId === runId && seen.push(event.type)));
    await c.start();
    await until(() => seen.length === 1, 'the settlement');
    await until(async () => (await pendingOf(c)).ackPending === 0, 'the acknowledgement');
    expect(seen).toEqual(['run.settled']);
    const info = await stream.jsm.consumers.info(space.stream, c.name);
    expect(info.config.filter_subject).toBe(`${space.prefix}.run.*.lifecycle.*`);
    // every lifecycle event of the stream so far was delivered, the admissions were not
    expect(info.delivered.stream_seq).toBeGreaterThanOrEqual(s.seq);
  });

  it('leaves an event whose handler threw unacknowledged: it comes again (same event id, delivery 2), then is acknowledged', async () => {
    const runId = `retry${tag}`;
    await log.append(settled(runId), 0);
    const deliveries: EventMeta[] = [];
    const c = consumer('retry', { owners: ['lifecycle'] }).on('run.settled', (event, meta) => {
      if (event.runId !== runId) return;
      deliveries.push(meta);
      if (meta.deliveryCount === 1) throw new Error('the downstream store is down');
    });
    await c.start();
    await until(() => deliveries.length === 2, 'the redelivery');
    await until(async () => (await pendingOf(c)).ackPending === 0, 'the acknowledgement');
    expect(deliveries.map((m) => [m.eventId, m.deliveryCount, m.redelivered])).toEqual([
      [settled(runId).eventId, 1, false],
      [settled(runId).eventId, 2, true],
    ]);
  });

  it('given a handler that throws on a Run’s first event, the Run’s later events wait for its retry: they reach the handlers in stream order', async () => {
    const runId = `order${tag}`;
    const a = await log.append(admitted(runId), 0);
    const s = await log.append(settled(runId), 0);
    const handled: [string, number][] = [];
    let failed = false;
    const c = consumer('order').on('*', (event, meta) => {
      if (event.runId !== runId) return;
      handled.push([event.type, meta.deliveryCount]);
      if (event.type === 'run.admitted' && !failed) {
        failed = true;
        throw new Error('the downstream store is down');
      }
    });
    await c.start();
    await until(
      () => handled.length === 3,
      () => `three handler calls (so far ${JSON.stringify(handled)})`,
    );
    await until(async () => (await pendingOf(c)).ackPending === 0, 'the acknowledgements');
    expect(handled).toEqual([
      ['run.admitted', 1],
      ['run.admitted', 2],
      ['run.settled', 1],
    ]);
    expect(a.seq).toBeLessThan(s.seq);
  });

  it('reports and terminates a message the event log did not append; no handler sees it', async () => {
    const runId = `forged${tag}`;
    const subject = runSubject(log.space, runId, 'lifecycle');
    const garbage = await log.js.publish(subject, 'not json {');
    // a well-formed settlement published around the log: no checked expectation stored with it
    const forged = await log.js.publish(subject, JSON.stringify(settled(runId)));
    // a settlement on a partition that is not its Run's
    const other = subject.replace(/\.(\d+)$/, (_, p: string) => `.${(Number(p) + 1) % 8}`);
    const wrong = await log.js.publish(other, JSON.stringify({ ...settled(runId), prevSeq: 0 }), { expect: { lastSubjectSequence: 0 } });
    const genuine = await log.append(settled(`genuine${tag}`), 0);
    const reports: InvalidMessage[] = [];
    const handled: number[] = [];
    const c = consumer('forged', { owners: ['lifecycle'], onInvalid: (m) => reports.push(m) }).on('*', (_e, meta) => void handled.push(meta.seq));
    await c.start();
    await until(() => handled.includes(genuine.seq), 'the genuine settlement after the forgeries');
    await until(async () => (await pendingOf(c)).ackPending === 0, 'nothing left unacknowledged');
    const mine = reports.filter((r) => [garbage.seq, forged.seq, wrong.seq].includes(r.seq));
    expect(mine.map((r) => [r.seq, r.anomaly])).toEqual([
      [garbage.seq, 'invalid-message'],
      [forged.seq, 'unverified-event'],
      [wrong.seq, 'wrong-partition'],
    ]);
    expect(handled).not.toContain(garbage.seq);
    expect(handled).not.toContain(forged.seq);
    expect(handled).not.toContain(wrong.seq);
    const info = await stream.jsm.consumers.info(space.stream, c.name);
    expect(info.num_redelivered).toBe(0);
  });

  it('with the public keys, reports and terminates an unsigned event and one signed by an owner that may not write it; a signed one is handled', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rp-consumer-signing-'));
    const signing = createDevSigning(dir);
    const lifecycle = await EventLog.connect({
      ...SHARED_NATS,
      ...space,
      name: 'lifecycle',
      signingKeyFiles: { lifecycle: signing.keyFiles.lifecycle },
    });
    // the runtime's key: valid, but a settlement is the lifecycle's to write
    const runtimeAsLifecycle = await EventLog.connect({ ...SHARED_NATS, ...space, name: 'runtime-key' });
    const checked = await RunStream.open({ ...streamOptions, publicKeysFile: signing.publicKeysFile });
    let mine: RunConsumer | null = null;
    try {
      const runtimeKey = readSigningKey('runtime', signing.keyFiles.runtime);
      runtimeAsLifecycle.signers.set('lifecycle', { ...runtimeKey, owner: 'runtime' });
      const unsigned = await log.append(settled(`unsigned${tag}`), 0); // the admin's log holds no key
      const wrongSigner = await runtimeAsLifecycle.append(settled(`wrong-signer${tag}`), 0);
      const signed = await lifecycle.append(settled(`signed${tag}`), 0);
      const reports: InvalidMessage[] = [];
      const handled: number[] = [];
      const c = new RunConsumer(checked, {
        name: `${DOWNSTREAM_CONSUMER_PREFIX}signed-${tag}`,
        logger: quiet,
        owners: ['lifecycle'],
        onInvalid: (m) => reports.push(m),
      }).on('*', (_e, meta) => void handled.push(meta.seq));
      mine = c;
      await c.start();
      await until(() => handled.includes(signed.seq), 'the signed settlement');
      await until(async () => (await checked.jsm.consumers.info(space.stream, c.name)).num_ack_pending === 0, 'nothing left unacknowledged');
      expect(reports.filter((r) => [unsigned.seq, wrongSigner.seq].includes(r.seq)).map((r) => [r.seq, r.anomaly])).toEqual([
        [unsigned.seq, 'unsigned-event'],
        [wrongSigner.seq, 'wrong-signer'],
      ]);
      expect(handled).not.toContain(unsigned.seq);
      expect(handled).not.toContain(wrongSigner.seq);
      // a bad key set stops the stream's opening, naming the setting
      writeFileSync(join(dir, 'broken.json'), '{"judge": []}');
      await expect(RunStream.open({ ...streamOptions, publicKeysFile: join(dir, 'broken.json') })).rejects.toThrow(
        /RUNPLANE_SIGNING_PUBLIC_KEYS_FILE=.*broken\.json: "judge" is not an owner/,
      );
    } finally {
      await mine?.stop();
      await mine?.deleteDurable();
      await checked.close();
      await lifecycle.close();
      await runtimeAsLifecycle.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("given authentic events newer than its catalogue (a new enum value, a new event type: additive changes), hands the new value to its handler as stored and passes over the new type, neither an anomaly; the services' reader still refuses both", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rp-consumer-newer-'));
    const signing = createDevSigning(dir);
    const lifecycleKey = readSigningKey('lifecycle', signing.keyFiles.lifecycle);
    const lifecycle = await EventLog.connect({
      ...SHARED_NATS,
      ...space,
      name: 'lifecycle',
      signingKeyFiles: { lifecycle: signing.keyFiles.lifecycle },
    });
    const checked = await RunStream.open({ ...streamOptions, publicKeysFile: signing.publicKeysFile });
    let mine: RunConsumer | null = null;
    try {
      // stored as a newer lifecycle's log stores them: conditional on the subject (its first event), signed by the owner
      const store = async (event: Record<string, unknown> & { runId: string; eventId: string }) => {
        const subject = runSubject(log.space, event.runId, 'lifecycle');
        const payload = JSON.stringify(event);
        const h = natsHeaders();
        for (const [k, v] of signatureHeaders(lifecycleKey, subject, event.eventId, payload)) h.set(k, v);
        return { subject, ack: await log.js.publish(subject, payload, { expect: { lastSubjectSequence: 0 }, headers: h, msgID: event.eventId }) };
      };
      const valueBase = settled(`newer-value${tag}`);
      const newValue = await store({ ...valueBase, data: { ...valueBase.data, outcome: 'expired' } });
      const typeBase = settled(`newer-type${tag}`);
      const newType = await store({ ...typeBase, type: 'run.archived', data: { archivedBy: 'retention' } });
      const after = await lifecycle.append(settled(`newer-after${tag}`), 0);
      const outcomes = new Map<number, string>();
      const others: number[] = [];
      const newer: NewerEvent[] = [];
      const reports: InvalidMessage[] = [];
      const c = new RunConsumer(checked, {
        name: `${DOWNSTREAM_CONSUMER_PREFIX}newer-${tag}`,
        logger: quiet,
        owners: ['lifecycle'],
        onInvalid: (m) => reports.push(m),
        onNewer: (e) => newer.push(e),
      })
        .on('run.settled', (e, meta) => void outcomes.set(meta.seq, e.data.outcome))
        .on('*', (_e, meta) => void others.push(meta.seq));
      mine = c;
      await c.start();
      await until(() => outcomes.has(after.seq), 'the settlement after the newer events');
      await until(async () => (await checked.jsm.consumers.info(space.stream, c.name)).num_ack_pending === 0, 'nothing left unacknowledged');
      expect(outcomes.get(newValue.ack.seq)).toBe('expired');
      expect(others).not.toContain(newType.ack.seq);
      expect(outcomes.has(newType.ack.seq)).toBe(false);
      const mineNewer = newer.filter((e) => [newValue.ack.seq, newType.ack.seq].includes(e.seq));
      expect(mineNewer.map((e) => [e.seq, e.kind, e.type, e.paths])).toEqual([
        [newValue.ack.seq, 'value', 'run.settled', ['data.outcome']],
        [newType.ack.seq, 'type', 'run.archived', []],
      ]);
      expect(reports.filter((r) => [newValue.ack.seq, newType.ack.seq].includes(r.seq))).toEqual([]);
      // the services' reader (no acceptNewer) refuses both as not valid
      for (const { ack } of [newValue, newType]) {
        const msg = await log.jsm.direct.getMessage(space.stream, { seq: ack.seq });
        expect(() => verifyStored(msg!.seq, msg!.subject, msg!.data, msg!.header, log.space.partitions)).toThrow(InvalidStoredEvent);
      }
    } finally {
      await mine?.stop();
      await mine?.deleteDurable();
      await checked.close();
      await lifecycle.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('resumes after a restart from where it acknowledged: the same name gets only what came after', async () => {
    const runIds = Array.from({ length: 5 }, (_, i) => `resume${i}${tag}`);
    for (const r of runIds.slice(0, 3)) await log.append(settled(r), 0);
    const first: string[] = [];
    // a short ack wait: a pull of the stopped consumer still open on the server (it expires after
    // CONSUME_EXPIRES_MS) may take what is appended meanwhile; the server hands it out again after the ack wait
    const a = consumer('resume', { owners: ['lifecycle'], ackWaitMs: 1_000 }).on(
      'run.settled',
      (e) => void (runIds.includes(e.runId) && first.push(e.runId)),
    );
    await a.start();
    await until(() => first.length === 3, 'the first three');
    await until(async () => (await pendingOf(a)).ackPending === 0, 'their acknowledgements');
    await a.stop();
    for (const r of runIds.slice(3)) await log.append(settled(r), 0);
    const second: string[] = [];
    const b = new RunConsumer(stream, { name: a.name, owners: ['lifecycle'], ackWaitMs: 1_000, logger: quiet }).on(
      'run.settled',
      (e) => void (runIds.includes(e.runId) && second.push(e.runId)),
    );
    consumers.push(b);
    await b.start();
    await until(() => second.length === 2, 'the two appended while it was stopped');
    await until(async () => (await pendingOf(b)).pending === 0, 'the end of the stream');
    await b.stop();
    expect(first).toEqual(runIds.slice(0, 3));
    // the two, in any order: one taken by the stopped consumer's last pull comes again after the others
    expect([...second].sort()).toEqual(runIds.slice(3).sort());
  });

  it('processedOnce runs the effect once per event id when a handled event comes again (its acknowledgement lost)', async () => {
    const runId = `once${tag}`;
    await log.append(settled(runId), 0);
    const store = new MemoryProcessedStore();
    const effects: string[] = [];
    const deliveries: number[] = [];
    const effect = processedOnce(store, (event: RunEventOf<'run.settled'>) => void effects.push(event.eventId));
    const c = consumer('once', { owners: ['lifecycle'] }).on('run.settled', async (event, meta) => {
      if (event.runId !== runId) return;
      deliveries.push(meta.deliveryCount);
      await effect(event, meta);
      // as if the process died before its acknowledgement: the event comes again
      if (meta.deliveryCount === 1) throw new Error('acknowledgement lost');
    });
    await c.start();
    await until(() => deliveries.length === 2, 'the redelivery');
    expect(effects).toEqual([settled(runId).eventId]);
    expect(store.has(settled(runId).eventId)).toBe(true);
  });

  it('MemoryProcessedStore forgets the oldest ids beyond its capacity', () => {
    const store = new MemoryProcessedStore(2);
    const ids = [randomUUID(), randomUUID(), randomUUID()];
    for (const id of ids) store.add(id);
    expect(ids.map((id) => store.has(id))).toEqual([false, true, true]);
    expect(store.size).toBe(2);
    expect(() => new MemoryProcessedStore(0)).toThrow(RangeError);
  });
});

describe('the example of docs/consumers.md', () => {
  const file = join(repoRoot(), 'libs/consumer/examples/follow-runs.ts');

  it('is the file the docs show', () => {
    const code = readFileSync(file, 'utf8')
      .split('\n')
      .filter((l) => !l.startsWith('//'))
      .join('\n')
      .trim();
    const docs = readFileSync(join(repoRoot(), 'docs/consumers.md'), 'utf8');
    const shown = /## An example of 20 lines[\s\S]*?```ts\n([\s\S]*?)```/.exec(docs)?.[1]?.trim();
    expect(shown).toBe(code);
    expect(code.split('\n').length).toBeLessThanOrEqual(20);
  });

  it('runs: it prints the admission and the settlement of a Run, skips a forged second settlement (another eventId), and stops on SIGINT', async () => {
    const runId = `example${tag}`;
    await log.append(admitted(runId), 0);
    const first = await log.append(settled(runId), 0);
    // as the admin could: a well-formed second run.settled, appended after the first (K9 allows one)
    await log.append({ ...settled(runId), eventId: randomUUID(), data: { ...settled(runId).data, outcome: 'failed' } }, first.seq);
    const name = `${DOWNSTREAM_CONSUMER_PREFIX}example-${tag}`;
    consumers.push(new RunConsumer(stream, { name }));
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      // the suite's user on the shared server (its CA too): it may read the durable of any name
      ...suiteNatsEnv(),
      RUNPLANE_STREAM: space.stream,
      RUNPLANE_SUBJECT_PREFIX: space.prefix,
      RUNPLANE_CONSUMER_NAME: name,
    };
    const child = spawn(process.execPath, [file], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(child);
    // stdout and stderr are two pipes: each keeps its order, but which is read first is not fixed
    const out: string[] = [];
    const err: string[] = [];
    createInterface({ input: child.stdout }).on('line', (l) => out.push(l));
    createInterface({ input: child.stderr }).on('line', (l) => err.push(l));
    // 'close': the process exited and both pipes were read to their end
    const closed = new Promise<number | null>((r) => child.once('close', (code) => r(code)));
    await until(
      () => err.some((l) => l.startsWith('skipped #') && l.includes(runId)) && out.filter((l) => l.includes(runId)).length >= 2,
      () => `the example's output (so far: ${[...out, ...err.map((l) => `stderr: ${l}`)].join(' | ')})`,
    );
    child.kill('SIGINT');
    expect(await closed).toBe(0);
    expect(out.filter((l) => l.includes(runId))).toEqual([`admitted ${runId}: hello`, `settled ${runId} completed (seq ${first.seq})`]);
    expect(err.filter((l) => l.includes(runId))).toEqual([`skipped #${first.seq + 1} of ${runId}: a copy, or a second settlement (audit it)`]);
  });
});
