/**
 * The broker's role for downstream services (libs/eventlog bus.ts, user `consumer`): it reads the
 * Run stream through durable consumers named with DOWNSTREAM_CONSUMER_PREFIX and does nothing
 * else. Against a nats-server started with the Runplane users, as `up` and the deployment run it.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes, randomUUID } from 'node:crypto';
import { connect, type Msg, type NatsConnection } from '@nats-io/transport-node';
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, type JsMsg } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { makeEvent } from '@runplane/contracts';
import { provisionAsAdmin, startSecuredNats, type SecuredNats } from '@runplane/devstack';
import {
  bucketName,
  busPermissions,
  DEFAULT_DOWNSTREAM_CONSUMERS,
  DOWNSTREAM_CONSUMER_PREFIX,
  EventLog,
  inboxPrefixOf,
  isPublishedOn,
  liveDeltaSubject,
  natsUserOptions,
  runSubject,
  verifyStored,
  type SubjectSpace,
} from '@runplane/eventlog';
import { trySubscribe } from '../support/nats-server.js';

const tag = randomBytes(3).toString('hex');
const space: SubjectSpace = { stream: `RPT_DC_${tag}`, prefix: `tdc${tag}`, partitions: 8 };
const S = space.stream;
const stateDir = mkdtempSync(join(tmpdir(), 'rp-downstream-'));
let nats: SecuredNats;
let admin: EventLog;
let consumer: NatsConnection;
const runId = randomUUID();

const ctx = { runId, conversationId: 'c1', correlationId: 'm1', causationId: null };
const admitted = makeEvent(
  'run.admitted',
  ctx,
  'admission',
  {
    message: { messageId: 'm1', clientMessageId: 'cm1', content: 'hello', contentSha256: 'a'.repeat(64) },
    grant: { tools: ['list_funds'], model: 'm' },
    limits: { maxModelRequests: 9, maxToolCalls: 2, deadlineAt: new Date(Date.now() + 60_000).toISOString() },
  },
  new Date(),
);
const turn = makeEvent('model.turn.requested', ctx, 1, { turn: 1, model: 'm' }, new Date());

beforeAll(async () => {
  nats = await startSecuredNats({ stateDir, space, downstream: [`${DOWNSTREAM_CONSUMER_PREFIX}x`, `${DOWNSTREAM_CONSUMER_PREFIX}y`] });
  const env = { NATS_URL: nats.url, RUNPLANE_STREAM: S, RUNPLANE_SUBJECT_PREFIX: space.prefix, RUNPLANE_PARTITIONS: String(space.partitions) };
  await provisionAsAdmin(env, nats.users);
  admin = await EventLog.connect({ natsUrl: nats.url, ...space, name: 'admin', user: nats.users.admin.user, pass: nats.users.admin.password });
  await admin.append(admitted, 0);
  await admin.append(turn, 0);
  // as every client of the user must: replies on its own inbox (docs/consumers.md)
  consumer = await connect({ servers: nats.url, ...natsUserOptions(nats.users.consumer.user, nats.users.consumer.password), reconnect: false });
}, 60_000);
afterAll(async () => {
  await consumer?.close().catch(() => undefined);
  await admin?.close();
  await nats?.stop();
  rmSync(stateDir, { recursive: true, force: true });
});

describe('the consumer user (downstream services)', () => {
  it('creates a durable downstream-x on every Run subject, reads and acknowledges the events the admin appended, and deletes it', async () => {
    const jsm = await jetstreamManager(consumer);
    expect((await jsm.streams.info(S)).state.messages).toBe(2);
    await jsm.consumers.add(S, {
      durable_name: 'downstream-x',
      filter_subject: `${space.prefix}.run.>`,
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
    });
    const c = await jetstream(consumer).consumers.get(S, 'downstream-x');
    const got: JsMsg[] = [];
    for await (const m of await c.fetch({ max_messages: 2, expires: 5_000 })) got.push(m);
    // each message checked as the log's readers check it (docs/event-log.md "For downstream consumers")
    const events = got.map((m) => verifyStored(m.seq, m.subject, m.data, m.headers, space.partitions).event);
    expect(events.map((e) => e.eventId)).toEqual([admitted.eventId, turn.eventId]);
    for (const m of got) expect(await m.ackAck()).toBe(true);
    expect((await jsm.consumers.info(S, 'downstream-x')).num_ack_pending).toBe(0);
    // single messages too: a direct get
    expect((await jsm.direct.getMessage(S, { last_by_subj: runSubject(space, runId, 'runtime') }))?.seq).toBe(got[1]!.seq);
    expect(await jsm.consumers.delete(S, 'downstream-x')).toBe(true);
  });

  it('creates a durable with several filters (the client sends CONSUMER.DURABLE.CREATE then)', async () => {
    const jsm = await jetstreamManager(consumer);
    const info = await jsm.consumers.add(S, {
      durable_name: 'downstream-y',
      filter_subjects: [`${space.prefix}.run.*.admission.*`, `${space.prefix}.run.*.lifecycle.*`],
      ack_policy: AckPolicy.Explicit,
    });
    expect(info.num_pending).toBe(1);
    expect(await jsm.consumers.delete(S, 'downstream-y')).toBe(true);
  });

  it('may not create a consumer under another name, nor an ephemeral one, nor use a Runplane service’s durable', async () => {
    const jsm = await jetstreamManager(consumer);
    await expect(
      jsm.consumers.add(S, { durable_name: 'other', filter_subject: `${space.prefix}.run.>`, ack_policy: AckPolicy.Explicit }),
    ).rejects.toThrow(/permission/i);
    await expect(jsm.consumers.add(S, { durable_name: 'other', ack_policy: AckPolicy.Explicit })).rejects.toThrow(/permission/i);
    await expect(jsm.consumers.add(S, { ack_policy: AckPolicy.None, filter_subject: `${space.prefix}.run.>` })).rejects.toThrow(/permission/i);
    await expect(jsm.consumers.info(S, `${space.prefix}-projector-p0`)).rejects.toThrow(/permission/i);
    await expect(
      consumer.request(`$JS.API.CONSUMER.MSG.NEXT.${S}.${space.prefix}-projector-p0`, JSON.stringify({ batch: 1, no_wait: true }), {
        timeout: 2_000,
      }),
    ).rejects.toThrow(/permission/i);
    // a durable of a name outside the list, even with the prefix, is refused too (the broker grants names, not a prefix)
    await expect(jsm.consumers.add(S, { durable_name: 'downstream-z', ack_policy: AckPolicy.Explicit })).rejects.toThrow(/permission/i);
  });

  it('may not publish on a Run subject, touch a KV bucket, or change, purge or delete the stream', async () => {
    const js = jetstream(consumer);
    const forged = makeEvent('model.turn.requested', ctx, 2, { turn: 2, model: 'm' }, new Date());
    await expect(js.publish(runSubject(space, runId, 'runtime'), JSON.stringify(forged), { expect: { lastSubjectSequence: 2 } })).rejects.toThrow(
      /permission/i,
    );
    const kvm = new Kvm(consumer);
    await expect(kvm.open(bucketName(space, 'leases')).then((kv) => kv.get('anything'))).rejects.toThrow(/permission/i);
    await expect(js.publish(`$KV.${bucketName(space, 'leases')}.${runId}`, 'x')).rejects.toThrow(/permission/i);
    const jsm = await jetstreamManager(consumer);
    await expect(jsm.streams.update(S, { max_msgs: 1 })).rejects.toThrow(/permission/i);
    await expect(jsm.streams.purge(S)).rejects.toThrow(/permission/i);
    await expect(jsm.streams.delete(S)).rejects.toThrow(/permission/i);
    await expect(jsm.streams.add({ name: `RPT_DC_OTHER_${tag}`, subjects: [`other${tag}.>`] })).rejects.toThrow(/permission/i);
    // nothing changed: still the admin's two events
    expect((await admin.readRun(runId)).map((e) => e.event.eventId)).toEqual([admitted.eventId, turn.eventId]);
  });

  it('a push consumer aimed at an observer’s live delta subject is told apart from the runtime’s deltas (nats-server does not check a deliver subject)', async () => {
    const delta = liveDeltaSubject(space, runId);
    const observer = await connect({ servers: nats.url, ...natsUserOptions(nats.users.publication.user, nats.users.publication.password) });
    const runtime = await connect({ servers: nats.url, ...natsUserOptions(nats.users.runtime.user, nats.users.runtime.password) });
    try {
      const received: Msg[] = [];
      let arrived: () => void = () => undefined;
      const two = new Promise<void>((r) => (arrived = r));
      observer.subscribe(delta, {
        callback: (_e, m) => {
          received.push(m);
          if (received.length === 2) arrived();
        },
      });
      await observer.flush();
      runtime.publish(delta, JSON.stringify({ turn: 1, text: 'streamed text' }));
      await runtime.flush();
      const jsm = await jetstreamManager(consumer);
      await jsm.consumers.add(S, {
        durable_name: 'downstream-x',
        deliver_subject: delta,
        filter_subject: runSubject(space, runId, 'admission'),
        ack_policy: AckPolicy.None,
      });
      await two;
      const [published, delivered] = received as [Msg, Msg];
      expect(isPublishedOn(published, delta)).toBe(true);
      // the stored admission event arrives with its stored subject and an ack reply: publication does not show it
      expect(delivered.string()).toContain(admitted.eventId);
      expect(isPublishedOn(delivered, delta)).toBe(false);
      expect(await jsm.consumers.delete(S, 'downstream-x')).toBe(true);
    } finally {
      await observer.close();
      await runtime.close();
    }
  });

  it("receives replies on its own inbox only: `_INBOX.>` and the services' inboxes are refused, and a service's KV get is answered where it cannot read (issue 18)", async () => {
    const runtime = await connect({ servers: nats.url, ...natsUserOptions(nats.users.runtime.user, nats.users.runtime.password), reconnect: false });
    try {
      const refused = [];
      for (const subject of [
        '_INBOX.>',
        `${inboxPrefixOf(nats.users.runtime.user)}.>`,
        `${inboxPrefixOf(nats.users.tools.user)}.>`,
        '_INBOX_*.>',
        '>',
      ])
        refused.push({ subject, ...(await trySubscribe(consumer, subject)) });
      for (const r of refused)
        expect([r.subject, r.errors.map((e) => e.message)]).toEqual([r.subject, [expect.stringMatching(/permissions violation/i)]]);
      // the one inbox it may read
      const own = await trySubscribe(consumer, `${inboxPrefixOf(nats.users.consumer.user)}.>`);
      expect(own.errors).toEqual([]);
      // the runtime takes and reads a lease: its request's reply comes on the runtime's inbox
      const leases = await new Kvm(runtime).open(bucketName(space, 'leases'));
      await leases.put(runId, 'lease of the runtime');
      expect((await leases.get(runId))?.string()).toBe('lease of the runtime');
      await leases.delete(runId);
      await consumer.flush();
      expect([...refused.flatMap((r) => r.received), ...own.received]).toEqual([]);
    } finally {
      await runtime.close();
    }
  });

  it('a client of the user that keeps the default inbox prefix gets a permissions violation on its first request (docs/consumers.md)', async () => {
    const plain = await connect({ servers: nats.url, user: nats.users.consumer.user, pass: nats.users.consumer.password, reconnect: false });
    try {
      await expect(jetstreamManager(plain, { timeout: 2_000 })).rejects.toThrow(/permissions violation/i);
    } finally {
      await plain.close();
    }
  });

  it('is in the deployed configuration with the default names', () => {
    const allow = busPermissions(space).consumer.publish.allow;
    for (const name of DEFAULT_DOWNSTREAM_CONSUMERS) expect(allow).toContain(`$JS.API.CONSUMER.CREATE.${S}.${name}.>`);
    expect(DEFAULT_DOWNSTREAM_CONSUMERS.every((n) => n.startsWith(DOWNSTREAM_CONSUMER_PREFIX))).toBe(true);
  });
});
