/**
 * Authority enforced by the broker (K9) and broken or hostile messages on Run subjects (K11): the
 * stack runs against a nats-server this file starts with the Runplane users and permissions
 * (libs/eventlog bus.ts, as deployed). Bad messages are published with plain NATS clients.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { spawn, spawnSync } from 'node:child_process';
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect, headers as natsHeaders, type MsgHdrs, type NatsConnection } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { makeEvent, sha256Hex, type RunEvent, type StoredEvent } from '@runplane/contracts';
import type { ObservedEvent } from '@runplane/client';
import { natsEnvOf, repoRoot } from '@runplane/devstack';
import {
  BUS_SERVICES,
  BUS_USERS,
  durableNamesOf,
  inboxPrefixOf,
  keyIdOf,
  LeaseStore,
  natsUserOptions,
  partitionOf,
  readSigningKey,
  runSubject,
  signatureHeaders,
  type BusUser,
  type EventSigner,
} from '@runplane/eventlog';
import { forgedSettlement } from '../support/events.js';
import { waitForType } from '../support/faults.js';
import { trySubscribe } from '../support/nats-server.js';
import { eventually, startTestStack, type TestStack } from '../support/stack.js';

const DUPLICATE_WINDOW_MS = 1_000;
let t: TestStack;
const open: NatsConnection[] = [];

beforeAll(async () => {
  t = await startTestStack(
    'broker',
    {
      RUNPLANE_DUPLICATE_WINDOW_MS: String(DUPLICATE_WINDOW_MS),
      RUNPLANE_ACK_WAIT_MS: '2000',
      // priced, so that a forged money limit is refused for the ceiling, not for a missing price
      RUNPLANE_MODEL_PRICES: JSON.stringify({ 'runplane-scripted-research': { inputPerMTok: 1, outputPerMTok: 1, currency: 'USD' } }),
      RUNPLANE_GRANT_CEILING_COST_MICROS: '1000000',
    },
    { audit: 'report' }, // forges events with service credentials
  );
  t.log.onInvalid = () => undefined; // the test's own polling reads: the services' logs are what is checked
}, 120_000);
afterAll(async () => {
  for (const nc of open) await nc.close().catch(() => undefined);
  await t?.stop();
});

async function connectAs(user: BusUser): Promise<NatsConnection> {
  // with the user's own inbox prefix, as the services connect (libs/eventlog inbox.ts)
  const nc = await connect({ servers: t.env.NATS_URL!, ...natsUserOptions(t.users[user].user, t.users[user].password), ...t.tls, reconnect: false });
  open.push(nc);
  return nc;
}

const ofType = <T extends RunEvent['type']>(events: StoredEvent[], type: T) => events.filter((e) => e.event.type === type);

/**
 * Publishes a forged `run.admitted` as the admission user, as a conditional append stores it (the
 * expectation header the server checks, the back-link in the body), signed by `signer` (none:
 * unsigned). Returns its stream sequence.
 */
async function forgeAdmission(forged: RunEvent, signer: EventSigner | null): Promise<number> {
  const subject = runSubject(t.log.space, forged.runId, 'admission');
  const body = JSON.stringify({ ...forged, prevSeq: 0 });
  let headers: MsgHdrs | undefined;
  if (signer) {
    headers = natsHeaders();
    for (const [name, value] of signatureHeaders(signer, subject, forged.eventId, body)) headers.set(name, value);
  }
  const ack = await jetstream(await connectAs('admission')).publish(subject, body, {
    expect: { lastSubjectSequence: 0 },
    ...(headers ? { headers } : {}),
  });
  return ack.seq;
}

/** Admission's own signing key, as a compromised admission (its NATS password and its key file) would hold it. */
const admissionKey = () => readSigningKey('admission', t.users.signing!.keyFiles.admission);

async function ask(key: string, steps?: unknown[]): Promise<string> {
  if (steps) await t.setScenario({ steps }, key);
  const admitted = await t.client.postMessage(`conv-${key}`, { clientMessageId: key, content: `[${key}] what is in the fund?` });
  expect(admitted.status).toBe(201);
  return admitted.body.runId;
}

/** Every durable consumer of the stack has nothing pending or unacknowledged, and redelivered nothing. */
async function consumersDrained(): Promise<Record<string, { pending: number; ackPending: number; redelivered: number }>> {
  const names = BUS_SERVICES.flatMap((s) => durableNamesOf(t.log.space, s));
  return eventually(
    async () => {
      const state: Record<string, { pending: number; ackPending: number; redelivered: number }> = {};
      for (const name of names) {
        const ci = await t.log.jsm.consumers.info(t.log.space.stream, name);
        state[name] = { pending: ci.num_pending, ackPending: ci.num_ack_pending, redelivered: ci.num_redelivered };
      }
      return Object.values(state).every((s) => s.pending === 0 && s.ackPending === 0) ? state : null;
    },
    60_000,
    'every durable consumer to drain',
  );
}

const serviceLog = () => readFileSync(t.stack.logFile, 'utf8');

describe('authority enforced by the broker (K9)', () => {
  it('refuses a settlement published by the runtime user on a live Run; the Run settles once, by the lifecycle', async () => {
    const key = 'k9-forged-settlement';
    const runId = await ask(key, [{ reply: { content: `The answer of ${key}.` }, delayMs: 2_000 }]);
    const admitted = (await waitForType(t, runId, 'model.turn.requested')).find((e) => e.event.type === 'run.admitted')!.event;
    const ctx = { runId, conversationId: admitted.conversationId, correlationId: admitted.eventId, causationId: admitted.eventId };
    const forged = makeEvent(
      'run.settled',
      ctx,
      'settlement',
      {
        outcome: 'completed',
        reason: 'forged by the runtime user',
        passageIds: [],
        receipts: [],
        usage: { modelRequests: 0, toolCalls: 0, promptTokens: 0, completionTokens: 0 },
      },
      new Date(),
    );
    const runtime = await connectAs('runtime');
    await expect(jetstream(runtime).publish(runSubject(t.log.space, runId, 'lifecycle'), JSON.stringify(forged), { timeout: 2_000 })).rejects.toThrow(
      /permission/i,
    );
    // nor may it skip admission: a run.admitted from the runtime user is refused as well
    const other = randomUUID();
    const fakeAdmission = { ...admitted, runId: other, eventId: randomUUID() };
    await expect(
      jetstream(await connectAs('runtime')).publish(runSubject(t.log.space, other, 'admission'), JSON.stringify(fakeAdmission), { timeout: 2_000 }),
    ).rejects.toThrow(/permission/i);
    const events = await t.waitForSettlement(runId);
    const settlements = ofType(events, 'run.settled');
    expect(settlements).toHaveLength(1);
    expect(settlements[0]!.event.writer?.service).toBe('lifecycle');
    expect((settlements[0]!.event.data as { reason: string }).reason).not.toBe(forged.data.reason);
    expect(events.filter((e) => e.event.writer?.service === 'runtime').every((e) => e.subject === runSubject(t.log.space, runId, 'runtime'))).toBe(
      true,
    );
    expect(await t.log.readRun(other)).toEqual([]);
  }, 60_000);

  it("lets no user but the admin read another user's replies, while the services' own requests are answered and a Run completes", async () => {
    const key = 'inbox-per-user';
    const runId = await ask(key, [{ reply: { content: `The answer of ${key}.` }, delayMs: 1_000 }]);
    await waitForType(t, runId, 'model.turn.requested');
    // while the runtime holds its lease and the services read the log and their buckets
    const seen: unknown[] = [];
    for (const user of BUS_USERS) {
      if (user === 'admin') continue;
      const nc = await connectAs(user);
      const other = user === 'runtime' ? 'tools' : 'runtime';
      for (const subject of ['_INBOX.>', `${inboxPrefixOf(t.users[other].user)}.>`]) {
        const { errors, received } = await trySubscribe(nc, subject);
        expect([user, subject, errors.map((e) => e.message)]).toEqual([user, subject, [expect.stringMatching(/permissions violation/i)]]);
        seen.push(...received);
      }
      // its own inbox is its to read
      expect((await trySubscribe(nc, `${inboxPrefixOf(t.users[user].user)}.>`)).errors).toEqual([]);
    }
    const events = await t.waitForSettlement(runId);
    expect(ofType(events, 'run.settled')[0]!.event.data).toMatchObject({ outcome: 'completed' });
    expect(seen).toEqual([]);
  }, 60_000);

  it('refuses a connection without a user: it can neither read nor write Run subjects', async () => {
    await expect(connect({ servers: t.env.NATS_URL!, ...t.tls, reconnect: false, timeout: 2_000 })).rejects.toThrow(/authorization/i);
    await expect(
      connect({ servers: t.env.NATS_URL!, ...t.tls, reconnect: false, timeout: 2_000, user: 'runplane-runtime', pass: 'wrong' }),
    ).rejects.toThrow(/authorization/i);
  });

  it('is reached over TLS only: a client that cannot verify the server (no CA) is refused before it sends its password', async () => {
    expect(t.env.NATS_CA_FILE).toBeTruthy();
    const own = natsUserOptions(t.users.runtime.user, t.users.runtime.password);
    // the right user and password, but the server's certificate is of the stack's private CA, not a system one
    await expect(connect({ servers: t.env.NATS_URL!, ...own, reconnect: false, timeout: 2_000 })).rejects.toThrow(/certificate/i);
    const nc = await connect({ servers: t.env.NATS_URL!, ...own, ...t.tls, reconnect: false, timeout: 2_000 });
    expect(nc.info?.tls_required).toBe(true);
    await nc.close();
  });

  it('refuses a service user that deletes a settlement message, purges or deletes the stream, or takes over a durable consumer', async () => {
    const key = 'k9-delete-settlement';
    const runId = await ask(key, [{ reply: { content: `The answer of ${key}.` } }]);
    const settled = ofType(await t.waitForSettlement(runId), 'run.settled')[0]!;
    const S = t.log.space.stream;
    for (const user of ['lifecycle', 'runtime', 'projector', 'ops'] as const) {
      const jsm = await jetstreamManager(await connectAs(user));
      await expect(jsm.streams.deleteMessage(S, settled.seq)).rejects.toThrow(/permission/i);
      await expect(jsm.streams.purge(S)).rejects.toThrow(/permission/i);
      await expect(jsm.streams.delete(S)).rejects.toThrow(/permission/i);
      await expect(jsm.consumers.delete(S, `${t.log.space.prefix}-lifecycle-p0`)).rejects.toThrow(/permission/i);
    }
    // the runtime may not pull the lifecycle's messages (it would steal them)
    const runtime = await connectAs('runtime');
    await expect(
      runtime.request(`$JS.API.CONSUMER.MSG.NEXT.${S}.${t.log.space.prefix}-lifecycle-p0`, JSON.stringify({ batch: 1, no_wait: true }), {
        timeout: 2_000,
      }),
    ).rejects.toThrow(/permission/i);
    // and even the admin cannot delete a message: the stream denies deletes and purges
    await expect(t.log.jsm.streams.deleteMessage(S, settled.seq)).rejects.toThrow();
    expect((await t.log.getStored(settled.seq))?.event.eventId).toBe(settled.event.eventId);
  }, 60_000);
});

describe('events signed per service: a NATS password alone cannot write a fact', () => {
  it("a run.admitted forged with admission's NATS password but no signing key (unsigned, or signed with a key not published) is never executed and `runplane audit` flags it; a real Run completes and audits clean", async () => {
    // a real Run first: what admission really admits, copied for the forgeries (the runtime would execute it)
    const key = 'signed-real';
    const realRunId = await ask(key, [{ reply: { content: `The answer of ${key}.` } }]);
    const real = await t.waitForSettlement(realRunId);
    expect(ofType(real, 'run.settled')[0]!.event.data).toMatchObject({ outcome: 'completed' });
    const admitted = ofType(real, 'run.admitted')[0]!.event;
    const requests = await t.modelRequests();

    const stranger = generateKeyPairSync('ed25519').privateKey;
    const wrongKey: EventSigner = { owner: 'admission', keyId: keyIdOf(stranger), key: stranger };
    const forgeries = [
      { label: 'unsigned', signer: null, anomaly: 'unsigned-event' },
      { label: 'wrong-key', signer: wrongKey, anomaly: 'bad-signature' },
    ] as const;
    const forged = forgeries.map((f) => {
      const runId = randomUUID();
      const event = makeEvent(
        'run.admitted',
        { runId, conversationId: `conv-forged-${f.label}-${runId}`, correlationId: runId, causationId: null },
        'admission',
        { ...(admitted.data as object), message: { ...(admitted.data as { message: object }).message, messageId: runId } } as never,
        new Date(),
      );
      return { ...f, runId, event };
    });
    const seqs: number[] = [];
    for (const f of forged) seqs.push(await forgeAdmission(f.event, f.signer));
    await consumersDrained();

    const leases = await LeaseStore.open(t.log);
    for (const [i, f] of forged.entries()) {
      // nothing on any subject of the Run but the forgery itself: no lease granted, no execution, no settlement
      for (const owner of ['runtime', 'recovery', 'lifecycle', 'tools', 'publication'] as const)
        expect([f.label, owner, await t.log.readMessage({ last_by_subj: runSubject(t.log.space, f.runId, owner) })]).toEqual([f.label, owner, null]);
      expect(await leases.get(f.runId)).toBeNull();
      // read as a fact by nobody: the test's reads (which hold the public keys) see no event either
      expect(await t.log.readRun(f.runId)).toEqual([]);
      // each consumer that reads admission's subject terminated it as a forgery, naming the reason
      const lines = serviceLog()
        .split('\n')
        .filter((l) => l.includes(`"anomaly":"${f.anomaly}"`) && l.includes(`"seq":${seqs[i]}`) && l.includes('terminating'));
      expect(lines.length).toBeGreaterThanOrEqual(1);
      expect(lines.some((l) => l.includes('"durable":"' + `${t.log.space.prefix}-runtime-p${partitionOf(f.runId, t.log.space.partitions)}"`))).toBe(
        true,
      );
    }
    expect(await t.modelRequests()).toBe(requests);

    // the audit (as the ops user, with the public keys) flags each forgery and exits 2
    const auditCli = (runId: string) =>
      spawnSync(process.execPath, [join(repoRoot(), 'apps/cli/dist/main.js'), 'audit', '--run', runId], {
        env: { ...t.env, ...natsEnvOf(t.users, 'ops') },
        encoding: 'utf8',
        timeout: 60_000,
      });
    for (const f of forged) {
      const r = auditCli(f.runId);
      process.stdout.write(`audit --run ${f.label}: exit ${r.status}\n${r.stdout}${r.stderr}\n`);
      expect([f.label, r.status]).toEqual([f.label, 2]);
      expect(r.stdout).toMatch(/stored-verified/);
      expect(r.stdout).toContain(f.label === 'unsigned' ? 'carries no signature' : 'has no public key');
    }
    const clean = auditCli(realRunId);
    process.stdout.write(`audit --run real: exit ${clean.status}\n${clean.stdout}${clean.stderr}\n`);
    expect(clean.status).toBe(0);
    expect(clean.stdout).toMatch(/signatures: every event checked against \d+ public key/);
  }, 90_000);
});

describe('broken and hostile messages never stall anything (K11)', () => {
  it('1,200 undecodable messages on Run subjects are each terminated once and logged; new Runs still complete', async () => {
    const admin = await connectAs('admin');
    const owners = ['admission', 'runtime', 'tools', 'publication'] as const;
    for (let i = 0; i < 1_200; i++) admin.publish(runSubject(t.log.space, randomUUID(), owners[i % owners.length]!), `garbage ${i} {not json`);
    await admin.flush();
    const runId = await ask('garbage-flood-after', [{ reply: { content: 'The answer after the flood.' } }]);
    const events = await t.waitForSettlement(runId, 60_000);
    expect(ofType(events, 'run.settled')[0]!.event.data).toMatchObject({ outcome: 'completed' });
    const drained = await consumersDrained();
    process.stdout.write(`after 1,200 garbage messages: ${JSON.stringify(drained)}\n`);
    for (const s of Object.values(drained)) expect(s.redelivered).toBe(0); // terminated once: never redelivered
    const terminated = serviceLog()
      .split('\n')
      .filter((l) => l.includes('terminating a message that is not a fact') && l.includes('garbage'));
    expect(terminated.length).toBeGreaterThanOrEqual(1_200);
  }, 120_000);

  it('a foreign message on a live Run’s runtime subject does not break the runtime: it appends after it and the Run completes', async () => {
    const key = 'foreign-on-runtime';
    const runId = await ask(key, [{ reply: { content: `The answer of ${key}, despite the foreign message.` }, delayMs: 2_000 }]);
    await waitForType(t, runId, 'model.turn.requested');
    const admin = await connectAs('admin');
    await jetstream(admin).publish(runSubject(t.log.space, runId, 'runtime'), 'a foreign message {');
    const events = await t.waitForSettlement(runId, 60_000);
    expect(ofType(events, 'model.turn.completed')).toHaveLength(1);
    expect(ofType(events, 'run.settled')[0]!.event.data).toMatchObject({ outcome: 'completed' });
    expect((await t.client.getAnswer(runId)).text).toContain('despite the foreign message');
  }, 60_000);

  it('the event stream of a Run whose subjects hold invalid messages answers 200 and replays its events', async () => {
    const key = 'sse-invalid';
    const runId = await ask(key, [{ reply: { content: `The answer of ${key}.` } }]);
    await t.waitForSettlement(runId);
    const admin = jetstream(await connectAs('admin'));
    for (const owner of ['admission', 'lifecycle', 'runtime'] as const)
      await admin.publish(runSubject(t.log.space, runId, owner), `not an event on ${owner}`);
    const res = await fetchAgainIfClosed(`${t.stack.endpoints.publication}/v1/runs/${runId}/events`);
    expect(res.status).toBe(200);
    const body = await res.text();
    expect(body).toContain('event: run.admitted');
    expect(body).toContain('event: run.settled');
    expect((await t.client.getAnswer(runId)).outcome).toBe('completed');
  }, 60_000);

  it('a replay of a stored event after the duplicate window is terminated, executes nothing and appends nothing', async () => {
    const key = 'replay-admission';
    const runId = await ask(key, [{ reply: { content: `The answer of ${key}.` } }]);
    const before = await t.waitForSettlement(runId);
    const admitted = before.find((e) => e.event.type === 'run.admitted')!;
    const requests = await t.modelRequests();
    await new Promise((r) => setTimeout(r, DUPLICATE_WINDOW_MS + 500));
    const ack = await jetstream(await connectAs('admin')).publish(admitted.subject, JSON.stringify(admitted.event), {
      msgID: admitted.event.eventId,
    });
    expect(ack.duplicate).toBe(false); // stored again: the window is over
    await consumersDrained();
    expect((await t.log.readRun(runId)).map((e) => e.seq)).toEqual(before.map((e) => e.seq));
    expect(await t.modelRequests()).toBe(requests);
    expect(serviceLog()).toMatch(
      new RegExp(`"anomaly":"unverified-event"[^\\n]*${admitted.event.eventId}|${admitted.event.eventId}[^\\n]*"anomaly":"unverified-event"`),
    );
  }, 60_000);

  it('a run.admitted forged by a compromised admission (its NATS password and its signing key), granting 1,000,000 model requests and a 2099 deadline, is never executed: the runtime stops it grant-refused and it settles failed (the grant ceiling)', async () => {
    const runId = randomUUID();
    const before = await t.modelRequests();
    const forged = makeEvent(
      'run.admitted',
      { runId, conversationId: `conv-forged-${runId}`, correlationId: runId, causationId: null },
      'admission',
      {
        message: { messageId: runId, clientMessageId: 'forged', content: 'What does DIA hold?', contentSha256: sha256Hex('What does DIA hold?') },
        grant: { tools: ['list_funds', 'get_holdings'], model: 'scripted' },
        limits: { maxModelRequests: 1_000_000, maxToolCalls: 1_000_000, deadlineAt: '2099-12-31T00:00:00.000Z' },
      },
      new Date(),
    );
    // as a conditional append stores it, signed with admission's own key: a fact readers attribute to admission
    await forgeAdmission(forged, admissionKey());
    const events = await t.waitForSettlement(runId, 60_000);
    const finished = ofType(events, 'run.execution.finished').map((e) => e.event.data as { reason: string; detail: string });
    expect(finished).toEqual([
      { reason: 'grant-refused', detail: expect.stringMatching(/1000000 model requests \(ceiling \d+\)/), answerTurn: null },
    ]);
    expect(ofType(events, 'model.turn.requested')).toEqual([]);
    expect(ofType(events, 'run.settled').map((e) => (e.event.data as { outcome: string }).outcome)).toEqual(['failed']);
    expect(await t.modelRequests()).toBe(before);
  });

  it("a run.admitted forged by a compromised admission (password and signing key), within every count but with a money limit over the deployment's ceiling, is never executed: grant-refused naming the ceiling, settled failed", async () => {
    const runId = randomUUID();
    const before = await t.modelRequests();
    const forged = makeEvent(
      'run.admitted',
      { runId, conversationId: `conv-forged-cost-${runId}`, correlationId: runId, causationId: null },
      'admission',
      {
        message: {
          messageId: runId,
          clientMessageId: 'forged-cost',
          content: 'What does DIA hold?',
          contentSha256: sha256Hex('What does DIA hold?'),
        },
        grant: { tools: ['list_funds', 'get_holdings'], model: 'runplane-scripted-research' },
        limits: {
          maxModelRequests: 4,
          maxToolCalls: 4,
          deadlineAt: new Date(Date.now() + 600_000).toISOString(),
          maxCost: { micros: 1_000_000_000, currency: 'USD' },
        },
      },
      new Date(),
    );
    await forgeAdmission(forged, admissionKey());
    const events = await t.waitForSettlement(runId, 60_000);
    const finished = ofType(events, 'run.execution.finished').map((e) => e.event.data as { reason: string; detail: string });
    expect(finished).toEqual([
      { reason: 'grant-refused', detail: expect.stringContaining('a money limit of 1000000000 micro-USD (ceiling 1000000)'), answerTurn: null },
    ]);
    expect(ofType(events, 'model.turn.requested')).toEqual([]);
    expect(ofType(events, 'run.settled').map((e) => (e.event.data as { outcome: string }).outcome)).toEqual(['failed']);
    expect(await t.modelRequests()).toBe(before);
  });

  it('a settlement forged on the wrong partition of a live Run (with the header a conditional append stores) is terminated by every consumer, counted, and never read', async () => {
    const key = 'wrong-partition';
    const runId = await ask(key, [{ reply: { content: `The answer of ${key}.` }, delayMs: 2_000 }]);
    await waitForType(t, runId, 'model.turn.requested');
    const admitted = (await t.log.readRun(runId)).find((e) => e.event.type === 'run.admitted')!.event;
    const forged = makeEvent(
      'run.settled',
      { runId, conversationId: admitted.conversationId, correlationId: admitted.eventId, causationId: admitted.eventId },
      'forged-wrong-partition',
      {
        outcome: 'failed',
        reason: 'forged on another partition',
        passageIds: [],
        receipts: [],
        usage: { modelRequests: 0, toolCalls: 0, promptTokens: 0, completionTokens: 0 },
      },
      new Date(),
    );
    const right = runSubject(t.log.space, runId, 'lifecycle');
    const wrongPartition = (partitionOf(runId, t.log.space.partitions) + 1) % t.log.space.partitions;
    const wrong = right.replace(/\.\d+$/, `.${wrongPartition}`);
    const ack = await jetstream(await connectAs('admin')).publish(wrong, JSON.stringify({ ...forged, prevSeq: 0 }), {
      expect: { lastSubjectSequence: 0 },
    });
    const events = await t.waitForSettlement(runId, 60_000);
    expect(ofType(events, 'run.settled').map((s) => (s.event.data as { outcome: string }).outcome)).toEqual(['completed']);
    expect(events.map((e) => e.event.eventId)).not.toContain(forged.eventId);
    const drained = await consumersDrained();
    // the consumers of the wrong partition that read the lifecycle subject (admission, runtime, the projector) each terminated it once
    const readers = ['admission', 'runtime', 'projector'].map((s) => `${t.log.space.prefix}-${s}-p${wrongPartition}`);
    for (const d of readers) expect(drained[d]!.redelivered).toBe(0);
    const lines = serviceLog()
      .split('\n')
      .filter((l) => l.includes('"anomaly":"wrong-partition"') && l.includes(`"seq":${ack.seq}`));
    expect(lines.length).toBeGreaterThanOrEqual(readers.length);
    // an observer replaying the Run is not sent it, and counts it
    const replayed: ObservedEvent[] = [];
    const before = await publicationAnomalies('wrong-partition');
    await t.client.streamEvents(runId, { onEvent: (e) => replayed.push(e) });
    expect(replayed.map((e) => e.seq)).not.toContain(ack.seq);
    expect(await publicationAnomalies('wrong-partition')).toBeGreaterThan(before);
  }, 90_000);

  it('a forged event of a Run that was never admitted: the projector skips it, and projections rebuild reports it and goes on', async () => {
    const runId = randomUUID();
    const forged = forgedSettlement({ runId, conversationId: randomUUID(), correlationId: randomUUID(), causationId: null });
    await jetstream(await connectAs('admin')).publish(runSubject(t.log.space, runId, 'lifecycle'), JSON.stringify({ ...forged, prevSeq: 0 }), {
      expect: { lastSubjectSequence: 0 },
    });
    await consumersDrained();
    const cli = spawnSync(process.execPath, [join(repoRoot(), 'apps/cli/dist/main.js'), 'projections', 'rebuild'], {
      env: { ...t.env, ...natsEnvOf(t.users, 'ops') },
      encoding: 'utf8',
      timeout: 60_000,
    });
    process.stdout.write(`projections rebuild: exit ${cli.status}\n${cli.stdout}${cli.stderr}\n`);
    expect(cli.stdout + cli.stderr).toContain(runId);
    expect(cli.status).toBe(0);
  }, 90_000);
});

/**
 * Publishes, as the admin with a plain NATS client (no conditional append), well-formed
 * `run.settled` events of a live Run with made-up event ids, one with a plausible `prevSeq` and one
 * without it, then a garbage message on the same subject. Returns their stream sequences.
 */
async function forgeSettlement(runId: string, outcome: 'completed' | 'failed', reason: string): Promise<number[]> {
  const admitted = (await t.log.readRun(runId)).find((e) => e.event.type === 'run.admitted')!.event;
  const ctx = { runId, conversationId: admitted.conversationId, correlationId: admitted.eventId, causationId: admitted.eventId };
  const forged = (key: string) =>
    makeEvent(
      'run.settled',
      ctx,
      key,
      { outcome, reason, passageIds: [], receipts: [], usage: { modelRequests: 0, toolCalls: 0, promptTokens: 0, completionTokens: 0 } },
      new Date(),
    );
  const subject = runSubject(t.log.space, runId, 'lifecycle');
  const prevSeq = (await t.log.lastOf(runId, 'lifecycle'))?.seq ?? 0;
  const admin = jetstream(await connectAs('admin'));
  const linked = await admin.publish(subject, JSON.stringify({ ...forged(`forged-${reason}`), prevSeq }));
  const unlinked = await admin.publish(subject, JSON.stringify(forged(`forged-${reason}-unlinked`)));
  const garbage = await admin.publish(subject, 'an undecodable message {');
  return [linked.seq, unlinked.seq, garbage.seq];
}

/**
 * `fetch`, sent again once when the server closed a kept-alive connection just as the request went
 * out (undici `UND_ERR_SOCKET` "other side closed": the connection's idle timeout passed while the
 * suite's load delayed the client; seen once in a CI run). The product's client does the same
 * (libs/client `request`).
 */
async function fetchAgainIfClosed(url: string, init?: RequestInit): Promise<Response> {
  try {
    return await fetch(url, init);
  } catch (e) {
    if ((e as { cause?: { code?: string } }).cause?.code !== 'UND_ERR_SOCKET') throw e;
    return fetch(url, init);
  }
}

/** The publication's count of one anomaly kind on /metrics (0 when the series is absent). */
async function publicationAnomalies(kind: string): Promise<number> {
  const res = await fetchAgainIfClosed(`${t.stack.services.get('publication')!.url}/metrics`);
  expect(res.status).toBe(200);
  const line = (await res.text()).split('\n').find((l) => l.startsWith('runplane_bus_anomalies_total{') && l.includes(`kind="${kind}"`));
  return line ? Number(line.split(' ').at(-1)) : 0;
}

describe('observers (K4)', () => {
  it('an observer of a live Run is sent no forged settlement nor undecodable message: it gets the real settlement', async () => {
    const key = 'sse-forged-settlement';
    const runId = await ask(key, [{ reply: { content: `The answer of ${key}.` }, delayMs: 4_000 }]);
    const seen: ObservedEvent[] = [];
    const observed = t.client.streamEvents(runId, { onEvent: (e) => seen.push(e) });
    await eventually(async () => (seen.some((e) => e.event.type === 'model.turn.requested') ? true : null), 20_000, 'the observer to follow live');
    const unverifiedBefore = await publicationAnomalies('unverified-event');
    const forgedSeqs = await forgeSettlement(runId, 'completed', 'forged-for-observers');
    const forgedSeq = forgedSeqs[0]!;
    const { ended } = await observed;
    expect(ended).toBe('server');
    const real = ofType(await t.log.readRun(runId), 'run.settled');
    expect(real).toHaveLength(1);
    expect(real[0]!.seq).toBeGreaterThan(forgedSeq);
    const settlements = seen.filter((e) => e.event.type === 'run.settled');
    expect(settlements.map((e) => e.seq)).toEqual([real[0]!.seq]);
    expect(settlements[0]!.event.eventId).toBe(real[0]!.event.eventId);
    for (const seq of forgedSeqs) expect(seen.map((e) => e.seq)).not.toContain(seq);
    expect(seen.at(-1)!.event.type).toBe('run.settled');
    // a late observer replaying the whole Run is not sent it either
    const replayed: ObservedEvent[] = [];
    await t.client.streamEvents(runId, { onEvent: (e) => replayed.push(e) });
    expect(replayed.filter((e) => e.event.type === 'run.settled').map((e) => e.seq)).toEqual([real[0]!.seq]);
    // one resuming right after the forgery waits for the real settlement (no 204)
    const resumed: ObservedEvent[] = [];
    expect((await t.client.streamEvents(runId, { lastEventId: forgedSeqs.at(-1)!, onEvent: (e) => resumed.push(e) })).ended).toBe('server');
    expect(resumed.at(-1)!.seq).toBe(real[0]!.seq);
    // skipped loudly: logged and counted
    expect(await publicationAnomalies('unverified-event')).toBeGreaterThanOrEqual(unverifiedBefore + 2);
    for (const seq of forgedSeqs.slice(0, 2)) expect(serviceLog()).toMatch(new RegExp(`"anomaly":"unverified-event"[^\\n]*stream message ${seq} `));
  }, 60_000);

  it('`runplane ask` prints and exits with the real outcome, not a forged settlement', async () => {
    const key = 'cli-forged-settlement';
    await t.setScenario({ steps: [{ reply: { content: `The answer of ${key}.` }, delayMs: 4_000 }] }, key);
    const { admission, publication } = t.stack.endpoints;
    const child = spawn(
      process.execPath,
      [join(repoRoot(), 'apps/cli/dist/main.js'), 'ask', `[${key}] what is in the fund?`, '--admission', admission, '--publication', publication],
      { env: t.env },
    );
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
    child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
    const timer = setTimeout(() => child.kill('SIGKILL'), 50_000);
    try {
      const runId = await eventually(async () => /Run (\S+) admitted/.exec(stdout)?.[1] ?? null, 20_000, 'the CLI to admit its Run');
      await waitForType(t, runId, 'model.turn.requested');
      await forgeSettlement(runId, 'failed', 'forged-for-the-cli');
      const code = await exited;
      process.stdout.write(`runplane ask with a forged settlement: exit ${code}\n${stdout}${stderr}\n`);
      expect(code).toBe(0);
      expect(stdout).not.toContain('forged-for-the-cli');
      expect(stdout).toContain(`The answer of ${key}.`);
      expect(ofType(await t.log.readRun(runId), 'run.settled')[0]!.event.data).toMatchObject({ outcome: 'completed' });
    } finally {
      clearTimeout(timer);
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  }, 60_000);

  it("removes an SSE observer's server-side consumer when the observer leaves, not minutes later", async () => {
    const key = 'sse-leaves';
    const runId = await ask(key, [{ reply: { content: `The answer of ${key}.` }, delayMs: 5_000 }]);
    await waitForType(t, runId, 'model.turn.requested');
    // the consumers whose filter names this Run, by name: the stream's total count also moves with
    // other files' and tests' consumers coming and going (an ordered consumer of an earlier
    // observer removed just then read as 61 against 62 in a full run)
    const runConsumers = async () => {
      const names: string[] = [];
      for await (const c of t.log.jsm.consumers.list(t.log.space.stream)) {
        const filters = [...(c.config.filter_subjects ?? []), ...(c.config.filter_subject ? [c.config.filter_subject] : [])];
        if (filters.some((f) => f.includes(runId))) names.push(c.name);
      }
      return names;
    };
    const before = new Set(await runConsumers());
    const abort = new AbortController();
    const res = await fetch(`${t.stack.endpoints.publication}/v1/runs/${runId}/events`, { signal: abort.signal });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    let seen = '';
    while (!seen.includes('event: run.admitted')) seen += new TextDecoder().decode(((await reader.read()) as { value?: Uint8Array }).value);
    // the observer's events come from a consumer of its own on the Run's subjects
    const observer = (await runConsumers()).filter((n) => !before.has(n));
    expect(observer).toHaveLength(1);
    const leftAt = Date.now();
    abort.abort();
    // gone, and no other consumer of the Run left in its place (an ordered consumer that was reset
    // takes a new name)
    await eventually(async () => ((await runConsumers()).some((n) => !before.has(n)) ? null : true), 5_000, 'the observer consumer to be removed');
    process.stdout.write(`SSE observer consumer removed ${Date.now() - leftAt} ms after the observer left\n`);
    // leaving is not cancelling: the Run completes
    const events = await t.waitForSettlement(runId);
    expect(ofType(events, 'run.settled')[0]!.event.data).toMatchObject({ outcome: 'completed' });
  }, 60_000);
});
