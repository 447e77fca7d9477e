/**
 * The broker's role for downstream services (libs/eventlog bus.ts): one user per durable consumer
 * named with DOWNSTREAM_CONSUMER_PREFIX, which reads the Run stream through its own durable and
 * does nothing else; and the ops user's reads, from an account of its own. Against a nats-server
 * started with the Runplane users, as `up` and the deployment run it.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes, randomUUID } from 'node:crypto';
import { connect, type Msg, type NatsConnection } from '@nats-io/transport-node';
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, type Consumer, type JsMsg } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { makeEvent } from '@runplane/contracts';
import { provisionedAdminLog, startSecuredNats, type SecuredNats } from '@runplane/devstack';
import {
  bucketName,
  BUS_BUCKETS,
  type BusBucket,
  DEFAULT_DOWNSTREAM_CONSUMERS,
  DOWNSTREAM_CONSUMER_PREFIX,
  DOWNSTREAM_PRIORITY_GROUP,
  downstreamPermissions,
  durableNameOf,
  EventLog,
  inboxPrefixOf,
  liveDeltaSubject,
  natsTlsOptions,
  natsUserOptions,
  provisionBus,
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
let tls: ReturnType<typeof natsTlsOptions> = {};
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
/** The admin's reset of a downstream durable: deleted, then provisioned again (a pull consumer from the first event). */
async function reset(name: string): Promise<void> {
  await admin.jsm.consumers.delete(S, name);
  await provisionBus(admin, [name]);
}
const turn = makeEvent('model.turn.requested', ctx, 1, { turn: 1, model: 'm' }, new Date());

/** A connection as the user of downstream durable `name`, with its own inbox prefix (docs/consumers.md). */
async function connectAs(name: string): Promise<NatsConnection> {
  const own = nats.users.downstream[name]!;
  return connect({ servers: nats.url, ...natsUserOptions(own.user, own.password), ...tls, reconnect: false });
}

/**
 * The durable `name`'s own user (`nc`) pulls both stored events, each delivered for the first
 * time (nothing took them before), and acknowledges them.
 */
async function expectBothEventsFirstTime(nc: NatsConnection, name: string): Promise<void> {
  const got: JsMsg[] = [];
  const c = await jetstream(nc).consumers.get(S, name);
  for await (const m of await c.fetch({ max_messages: 2, expires: 5_000, group: DOWNSTREAM_PRIORITY_GROUP })) got.push(m);
  expect(got.map((m) => [m.seq, m.info.deliveryCount])).toEqual([
    [1, 1],
    [2, 1],
  ]);
  for (const m of got) expect(await m.ackAck()).toBe(true);
}

/** Messages in the Run stream and in every bucket's stream, as the admin sees them. */
/** The next pull (naming the group) of a durable whose first event was acknowledged gets the second event, not the first again; it is acknowledged. */
async function expectNextIsTheSecond(y: Consumer): Promise<void> {
  const got: JsMsg[] = [];
  for await (const m of await y.fetch({ max_messages: 2, expires: 2_000, group: DOWNSTREAM_PRIORITY_GROUP })) got.push(m);
  expect(got.map((m) => m.seq)).toEqual([2]);
  for (const m of got) expect(await m.ackAck()).toBe(true);
}

async function storedCounts(): Promise<Record<string, number>> {
  const counts: Record<string, number> = { [S]: (await admin.jsm.streams.info(S)).state.messages };
  for (const [bucket, spec] of Object.entries(BUS_BUCKETS)) {
    const name = `${spec.kind === 'kv' ? 'KV' : 'OBJ'}_${bucketName(space, bucket as BusBucket)}`;
    counts[name] = (await admin.jsm.streams.info(name)).state.messages;
  }
  return counts;
}

beforeAll(async () => {
  const downstream = [`${DOWNSTREAM_CONSUMER_PREFIX}x`, `${DOWNSTREAM_CONSUMER_PREFIX}y`];
  nats = await startSecuredNats({ stateDir, space, downstream });
  // the server requires TLS (a private CA made for it): every client of this file verifies it
  tls = natsTlsOptions(nats.url, nats.caFile);
  admin = await provisionedAdminLog(nats, space, downstream);
  await admin.append(admitted, 0);
  await admin.append(turn, 0);
  // as every client of the user must: replies on its own inbox (docs/consumers.md)
  consumer = await connectAs('downstream-x');
}, 60_000);
afterAll(async () => {
  await consumer?.close().catch(() => undefined);
  await admin?.close();
  await nats?.stop();
  rmSync(stateDir, { recursive: true, force: true });
});

describe("a downstream durable's user (downstream services)", () => {
  it('uses its provisioned durable downstream-x (a pull consumer of every Run subject), reads and acknowledges the events the admin appended; neither it nor ops may delete it', async () => {
    const jsm = await jetstreamManager(consumer);
    expect((await jsm.streams.info(S)).state.messages).toBe(2);
    // provisioned by the admin: a pull consumer of every Run subject from the first event
    const provisioned = (await jsm.consumers.info(S, 'downstream-x')).config;
    expect([provisioned.deliver_subject, provisioned.filter_subject, provisioned.deliver_policy]).toEqual([
      undefined,
      `${space.prefix}.run.>`,
      DeliverPolicy.All,
    ]);
    // in the downstream priority group: a pull that does not name it is refused
    expect([provisioned.priority_groups, provisioned.priority_policy]).toEqual([[DOWNSTREAM_PRIORITY_GROUP], 'overflow']);
    await expect(
      consumer
        .request(`$JS.API.CONSUMER.MSG.NEXT.${S}.downstream-x`, JSON.stringify({ batch: 1, no_wait: true }), { timeout: 2_000 })
        .then((m) => m.headers?.description),
    ).resolves.toMatch(/priority group missing/i);
    const c = await jetstream(consumer).consumers.get(S, 'downstream-x');
    const got: JsMsg[] = [];
    for await (const m of await c.fetch({ max_messages: 2, expires: 5_000, group: DOWNSTREAM_PRIORITY_GROUP })) got.push(m);
    // each message checked as the log's readers check it (docs/event-log.md "For downstream consumers")
    const events = got.map((m) => verifyStored(m.seq, m.subject, m.data, m.headers, space.partitions).event);
    expect(events.map((e) => e.eventId)).toEqual([admitted.eventId, turn.eventId]);
    for (const m of got) expect(await m.ackAck()).toBe(true);
    expect((await jsm.consumers.info(S, 'downstream-x')).num_ack_pending).toBe(0);
    // single messages too: a direct get
    expect((await jsm.direct.getMessage(S, { last_by_subj: runSubject(space, runId, 'runtime') }))?.seq).toBe(got[1]!.seq);
    // it may not delete it (nor may ops): the admin may (docs/consumers.md)
    await expect(jsm.consumers.delete(S, 'downstream-x')).rejects.toThrow(/permission/i);
    const ops = await connect({ servers: nats.url, ...natsUserOptions(nats.users.ops.user, nats.users.ops.password), ...tls, reconnect: false });
    try {
      await expect((await jetstreamManager(ops)).consumers.delete(S, 'downstream-x')).rejects.toThrow(/permission/i);
    } finally {
      await ops.close();
    }
    await reset('downstream-x');
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

  it("a pull whose reply subject names a bucket's or a service's subject delivers nothing there: the reply is a subject of the consumer's own account", async () => {
    const jsm = await jetstreamManager(consumer);
    const observer = await connect({ servers: nats.url, ...natsUserOptions(nats.users.publication.user, nats.users.publication.password), ...tls });
    try {
      // a service listening on a subject it might be aimed at (publication's live deltas)
      const heard: Msg[] = [];
      observer.subscribe(liveDeltaSubject(space, runId), { callback: (_e, m) => void heard.push(m) });
      await observer.flush();
      const before = await storedCounts();
      const targets = [
        ...Object.entries(BUS_BUCKETS).map(([b, spec]) =>
          spec.kind === 'kv' ? `$KV.${bucketName(space, b as BusBucket)}.${runId}` : `$O.${bucketName(space, b as BusBucket)}.M.x`,
        ),
        liveDeltaSubject(space, runId),
        runSubject(space, runId, 'lifecycle'),
        `${inboxPrefixOf(nats.users.runtime.user)}.x`,
      ];
      // the hole as it was: with the services' account, the server wrote the two events into KV_<prefix>_conversations
      for (const reply of targets)
        consumer.publish(`$JS.API.CONSUMER.MSG.NEXT.${S}.downstream-x`, JSON.stringify({ batch: 2, group: DOWNSTREAM_PRIORITY_GROUP }), { reply });
      await consumer.flush();
      // then a pull on its own inbox gets both events, delivered for the first time: no pull above took them
      const got: JsMsg[] = [];
      const c = await jetstream(consumer).consumers.get(S, 'downstream-x');
      for await (const m of await c.fetch({ max_messages: 2, expires: 5_000, group: DOWNSTREAM_PRIORITY_GROUP })) got.push(m);
      expect(got.map((m) => [m.seq, m.info.deliveryCount])).toEqual([
        [1, 1],
        [2, 1],
      ]);
      for (const m of got) expect(await m.ackAck()).toBe(true);
      expect((await jsm.consumers.info(S, 'downstream-x')).num_redelivered).toBe(0);
      await observer.flush();
      expect(await storedCounts()).toEqual(before);
      expect(before[S]).toBe(2);
      expect(heard).toEqual([]);
      expect((await admin.readRun(runId)).map((e) => e.event.eventId)).toEqual([admitted.eventId, turn.eventId]);
    } finally {
      await observer.close();
      await reset('downstream-x');
    }
  });

  it('may not create, update or delete a consumer, even under a granted name: no push consumer (a deliver subject), no inactive threshold that would let the server remove it', async () => {
    const before = await storedCounts();
    const jsm = await jetstreamManager(consumer);
    for (const name of ['downstream-x', 'downstream-y', 'downstream-z']) {
      const configs = [
        { durable_name: name, deliver_subject: liveDeltaSubject(space, runId), ack_policy: 'explicit' },
        { durable_name: name, deliver_subject: `$KV.${bucketName(space, 'conversations')}.${runId}`, ack_policy: 'none' },
        { durable_name: name, filter_subject: `${space.prefix}.run.>`, ack_policy: 'explicit', inactive_threshold: 500_000_000 },
      ];
      for (const config of configs) {
        for (const subject of [`$JS.API.CONSUMER.CREATE.${S}.${name}`, `$JS.API.CONSUMER.DURABLE.CREATE.${S}.${name}`])
          await expect(consumer.request(subject, JSON.stringify({ stream_name: S, config }), { timeout: 5_000 })).rejects.toThrow(/permission/i);
        await expect(jsm.consumers.add(S, config as Parameters<typeof jsm.consumers.add>[1])).rejects.toThrow(/permission/i);
      }
      await expect(jsm.consumers.update(S, name, { max_ack_pending: 5 })).rejects.toThrow(/permission/i);
      await expect(jsm.consumers.delete(S, name)).rejects.toThrow(/permission/i);
    }
    for (const name of ['downstream-x', 'downstream-y']) {
      const config = (await admin.jsm.consumers.info(S, name)).config;
      expect([config.deliver_subject, config.inactive_threshold, config.max_ack_pending]).toEqual([undefined, undefined, 1000]);
    }
    await expect(admin.jsm.consumers.info(S, 'downstream-z')).rejects.toThrow(/not found/i);
    expect(await storedCounts()).toEqual(before);
  });

  it("receives replies on its own inbox only: `_INBOX.>` and the services' inboxes are refused, and a service's KV get is answered where it cannot read", async () => {
    const runtime = await connect({
      servers: nats.url,
      ...natsUserOptions(nats.users.runtime.user, nats.users.runtime.password),
      ...tls,
      reconnect: false,
    });
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
      const own = await trySubscribe(consumer, `${inboxPrefixOf('downstream-x')}.>`);
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
    const own = nats.users.downstream['downstream-x']!;
    const plain = await connect({ servers: nats.url, user: own.user, pass: own.password, ...tls, reconnect: false });
    try {
      await expect(jetstreamManager(plain, { timeout: 2_000 })).rejects.toThrow(/permissions violation/i);
    } finally {
      await plain.close();
    }
  });

  it("may not fetch from, acknowledge on or look at another downstream's durable, whose own user reads and acknowledges it (a user per durable)", async () => {
    const other = await connectAs('downstream-y');
    try {
      // downstream-y's own user pulls both events and leaves them unacknowledged for now
      const y = await jetstream(other).consumers.get(S, 'downstream-y');
      const got: JsMsg[] = [];
      for await (const m of await y.fetch({ max_messages: 2, expires: 5_000, group: DOWNSTREAM_PRIORITY_GROUP })) got.push(m);
      expect(got.map((m) => [m.seq, m.info.deliveryCount])).toEqual([
        [1, 1],
        [2, 1],
      ]);
      // downstream-x's user: no info, no pull, no ack, no "working", no termination on downstream-y
      await expect(jetstream(consumer).consumers.get(S, 'downstream-y')).rejects.toThrow(/permission/i);
      await expect(
        consumer.request(`$JS.API.CONSUMER.MSG.NEXT.${S}.downstream-y`, JSON.stringify({ batch: 2, no_wait: true }), { timeout: 2_000 }),
      ).rejects.toThrow(/permission/i);
      // the ack subjects downstream-y's deliveries came with ($JS.ACK.<stream>.downstream-y...; the client's JsMsg keeps it as `reply`)
      const ackSubjects = got.map((m) => (m as unknown as { reply: string }).reply);
      expect(ackSubjects.every((a) => a.startsWith(`$JS.ACK.${S}.downstream-y.`))).toBe(true);
      for (const ack of ackSubjects)
        for (const verb of ['+ACK', '+WPI', '+TERM', '-NAK'])
          await expect(consumer.request(ack, verb, { timeout: 2_000 })).rejects.toThrow(/permission/i);
      // nothing moved: downstream-y still waits for its own acknowledgements of both
      const info = await admin.jsm.consumers.info(S, 'downstream-y');
      expect([info.num_ack_pending, info.delivered.stream_seq, info.ack_floor.stream_seq]).toEqual([2, 2, 0]);
      for (const m of got) expect(await m.ackAck()).toBe(true);
      expect((await admin.jsm.consumers.info(S, 'downstream-y')).ack_floor.stream_seq).toBe(2);
      // and downstream-y's user is refused downstream-x's durable the same way
      await expect(jetstream(other).consumers.get(S, 'downstream-x')).rejects.toThrow(/permission/i);
    } finally {
      await other.close();
      await reset('downstream-y');
    }
  });

  it("a pull whose reply names another downstream's durable plants no pull on it: each downstream user has an account of its own", async () => {
    const other = await connectAs('downstream-y');
    try {
      const waitingOnY = async () => (await admin.jsm.consumers.info(S, 'downstream-y')).num_waiting;
      const before = await waitingOnY();
      // each delivery of downstream-x's own pull, and its closing status, goes to the reply: with both
      // users in one account that reply was downstream-y's next subject, imported, so every delivery
      // became a pull request on downstream-y whose messages then went to downstream-x's ack subjects
      consumer.publish(
        `$JS.API.CONSUMER.MSG.NEXT.${S}.downstream-x`,
        JSON.stringify({ batch: 20, expires: 2_000_000_000, group: DOWNSTREAM_PRIORITY_GROUP }),
        {
          reply: `$JS.API.CONSUMER.MSG.NEXT.${S}.downstream-y`,
        },
      );
      await consumer.flush();
      // no pull appears on downstream-y (with a shared account 2 and more did within milliseconds): watched for 1 s
      for (const until = Date.now() + 1_000; Date.now() < until; await new Promise((r) => setTimeout(r, 100)))
        expect(await waitingOnY()).toBe(before);
      // and downstream-y's own user gets both events, each for the first time
      await expectBothEventsFirstTime(other, 'downstream-y');
    } finally {
      await other.close();
      await reset('downstream-x');
      await reset('downstream-y');
    }
  });

  it('a durable provisioned before the priority group gets it at the next provisioning, its position kept', async () => {
    const other = await connectAs('downstream-y');
    try {
      // as an older Runplane provisioned it: no group; its user read and acknowledged the first event
      await admin.jsm.consumers.delete(S, 'downstream-y');
      await admin.jsm.consumers.add(S, {
        durable_name: 'downstream-y',
        filter_subject: `${space.prefix}.run.>`,
        ack_policy: AckPolicy.Explicit,
        deliver_policy: DeliverPolicy.All,
      });
      const y = await jetstream(other).consumers.get(S, 'downstream-y');
      for await (const m of await y.fetch({ max_messages: 1, expires: 5_000 })) expect(await m.ackAck()).toBe(true);
      await provisionBus(admin, ['downstream-y']);
      const info = await admin.jsm.consumers.info(S, 'downstream-y');
      expect([info.config.priority_groups, info.config.priority_policy, info.ack_floor.stream_seq]).toEqual([
        [DOWNSTREAM_PRIORITY_GROUP],
        'overflow',
        1,
      ]);
      // the next pull (naming the group) gets the second event, not the first again
      await expectNextIsTheSecond(y);
    } finally {
      await other.close();
      await reset('downstream-y');
    }
  });

  it('a durable changed by hand (filtered to nothing, no longer durable, no group, expiring when idle) is put back by the next provisioning from its acknowledged position, and a second provisioning changes nothing', async () => {
    const other = await connectAs('downstream-y');
    try {
      const y = await jetstream(other).consumers.get(S, 'downstream-y');
      for await (const m of await y.fetch({ max_messages: 1, expires: 5_000, group: DOWNSTREAM_PRIORITY_GROUP })) expect(await m.ackAck()).toBe(true);
      // a trial's tamper, as the admin may still do: a create whose body names the durable
      const tampered = await admin.nc.request(
        `$JS.API.CONSUMER.CREATE.${S}`,
        JSON.stringify({
          stream_name: S,
          action: 'update',
          config: {
            name: 'downstream-y',
            ack_policy: 'explicit',
            deliver_policy: 'all',
            filter_subject: `${space.prefix}.run.*.nothing.*`,
            ack_wait: 30e9,
            max_ack_pending: 1000,
            inactive_threshold: 3_600e9,
          },
        }),
      );
      expect(tampered.json<{ config: { filter_subject: string } }>().config.filter_subject).toBe(`${space.prefix}.run.*.nothing.*`);
      const report = await provisionBus(admin, ['downstream-y']);
      expect(report).toEqual({
        created: [],
        // no longer durable, it kept an inactive threshold through the update: made again after its acknowledged first event
        repaired: [
          { name: 'downstream-y', differed: ['durable_name', 'filter', 'inactive_threshold', 'priority_groups', 'made again from sequence 2'] },
        ],
      });
      const info = await admin.jsm.consumers.info(S, 'downstream-y');
      expect([
        info.config.durable_name,
        info.config.filter_subject,
        info.config.inactive_threshold ?? 0,
        info.config.priority_groups,
        info.ack_floor.stream_seq,
      ]).toEqual(['downstream-y', `${space.prefix}.run.>`, 0, [DOWNSTREAM_PRIORITY_GROUP], 1]);
      expect(await provisionBus(admin, ['downstream-y'])).toEqual({ created: [], repaired: [] });
      // the next pull gets the second event, not the first again
      await expectNextIsTheSecond(y);
    } finally {
      await other.close();
      await reset('downstream-y');
    }
  });

  it('is in the deployed configuration with the default names, each its own user', () => {
    for (const name of DEFAULT_DOWNSTREAM_CONSUMERS)
      expect(downstreamPermissions(space, name).publish.allow).toContain(`$JS.API.CONSUMER.MSG.NEXT.${S}.${name}`);
    expect(DEFAULT_DOWNSTREAM_CONSUMERS.every((n) => n.startsWith(DOWNSTREAM_CONSUMER_PREFIX))).toBe(true);
    expect(Object.keys(nats.users.downstream)).toEqual(['downstream-x', 'downstream-y']);
  });
});

describe("a service's user", () => {
  it("may not send a create that names no consumer in its subject: its body could update a downstream's or another service's durable", async () => {
    const lifecycleDurable = durableNameOf(space, 'lifecycle', 0);
    await admin.jsm.consumers.add(S, { durable_name: lifecycleDurable, ack_policy: AckPolicy.Explicit, filter_subject: `${space.prefix}.run.*.*.0` });
    try {
      const configs = async () =>
        (await Promise.all(['downstream-y', lifecycleDurable].map((d) => admin.jsm.consumers.info(S, d)))).map((i) => i.config);
      const before = await configs();
      for (const user of ['admission', 'runtime', 'publication'] as const)
        for (const target of ['downstream-y', lifecycleDurable]) {
          // a trial's update, as a service: filtered to nothing, one message in flight, expiring when idle
          const config = {
            name: target,
            ack_policy: 'explicit',
            filter_subject: `${space.prefix}.run.*.nothing.*`,
            max_ack_pending: 1,
            inactive_threshold: 5e9,
          };
          const nc = await connect({
            servers: nats.url,
            ...natsUserOptions(nats.users[user].user, nats.users[user].password),
            ...tls,
            reconnect: false,
          });
          try {
            await expect(
              nc.request(`$JS.API.CONSUMER.CREATE.${S}`, JSON.stringify({ stream_name: S, action: 'update', config }), { timeout: 5_000 }),
            ).rejects.toThrow(/permission/i);
          } finally {
            await nc.close().catch(() => undefined);
          }
        }
      expect(await configs()).toEqual(before);
    } finally {
      await admin.jsm.consumers.delete(S, lifecycleDurable);
    }
  });
});

describe('the ops user (its own account)', () => {
  const opsConnection = () =>
    connect({ servers: nats.url, ...natsUserOptions(nats.users.ops.user, nats.users.ops.password), ...tls, reconnect: false });

  it("may make no consumer of any kind: a push consumer aimed at a downstream durable's next subject, a pull consumer, a durable are refused, and the durable is untouched", async () => {
    const before = (await admin.jsm.consumers.list(S).next()).map((c) => c.name).sort();
    const other = await connectAs('downstream-y');
    try {
      const push = {
        deliver_subject: `$JS.API.CONSUMER.MSG.NEXT.${S}.downstream-y`,
        ack_policy: 'explicit',
        filter_subject: `${space.prefix}.run.>`,
      };
      const pull = { ack_policy: 'none', filter_subject: `${space.prefix}.run.>`, mem_storage: true };
      const creates: [string, object][] = [
        [`$JS.API.CONSUMER.CREATE.${S}`, push],
        [`$JS.API.CONSUMER.CREATE.${S}`, pull],
        [`$JS.API.CONSUMER.CREATE.${S}.ops-durable`, { ...pull, name: 'ops-durable', durable_name: 'ops-durable' }],
        [`$JS.API.CONSUMER.CREATE.${S}.ops-push.${space.prefix}.run.>`, { ...push, name: 'ops-push' }],
        [`$JS.API.CONSUMER.DURABLE.CREATE.${S}.ops-durable`, { ...pull, durable_name: 'ops-durable' }],
      ];
      for (const [subject, config] of creates) {
        // each on a connection of its own: a permissions violation may close the one it happened on
        const ops = await opsConnection();
        try {
          await expect(ops.request(subject, JSON.stringify({ stream_name: S, config }), { timeout: 5_000 })).rejects.toThrow(/permission/i);
        } finally {
          await ops.close().catch(() => undefined);
        }
      }
      expect((await admin.jsm.consumers.list(S).next()).map((c) => c.name).sort()).toEqual(before);
      // downstream-y was not touched, and its own user gets both events, each for the first time
      const info = await admin.jsm.consumers.info(S, 'downstream-y');
      expect([info.delivered.stream_seq, info.num_ack_pending, info.num_waiting]).toEqual([0, 0, 0]);
      await expectBothEventsFirstTime(other, 'downstream-y');
    } finally {
      await other.close();
      await reset('downstream-y');
    }
  });

  it("reads the Run stream with batched direct gets, and a read whose reply names a bucket's, a Run or a service's subject, or a durable's next subject, stores and plants nothing", async () => {
    const ops = await opsConnection();
    const opsLog = await EventLog.connect({
      natsUrl: nats.url,
      ...space,
      name: 'ops',
      user: nats.users.ops.user,
      pass: nats.users.ops.password,
      caFile: nats.caFile!,
    });
    const observer = await connect({ servers: nats.url, ...natsUserOptions(nats.users.publication.user, nats.users.publication.password), ...tls });
    try {
      // what timeline, audit and projections rebuild do: direct gets, one and batched (no consumer)
      expect((await opsLog.readRun(runId)).map((e) => e.event.eventId)).toEqual([admitted.eventId, turn.eventId]);
      const whole: string[] = [];
      for await (const e of opsLog.readRunWhole(runId)) whole.push(e.event.eventId);
      const all: string[] = [];
      for await (const e of opsLog.readAll()) all.push(e.event.eventId);
      expect([whole, all]).toEqual([
        [admitted.eventId, turn.eventId],
        [admitted.eventId, turn.eventId],
      ]);
      const heard: Msg[] = [];
      observer.subscribe(liveDeltaSubject(space, runId), { callback: (_e, m) => void heard.push(m) });
      await observer.flush();
      const before = await storedCounts();
      const waiting = (await admin.jsm.consumers.info(S, 'downstream-y')).num_waiting;
      const targets = [
        ...Object.entries(BUS_BUCKETS).map(([b, spec]) =>
          spec.kind === 'kv' ? `$KV.${bucketName(space, b as BusBucket)}.x` : `$O.${bucketName(space, b as BusBucket)}.M.x`,
        ),
        liveDeltaSubject(space, runId),
        runSubject(space, runId, 'lifecycle'),
        `${inboxPrefixOf(nats.users.runtime.user)}.x`,
        `$JS.API.CONSUMER.MSG.NEXT.${S}.downstream-y`,
      ];
      // the answers go back into the ops account, where no such subject leads anywhere
      for (const reply of targets)
        ops.publish(`$JS.API.DIRECT.GET.${S}`, JSON.stringify({ seq: 1, batch: 2, next_by_subj: `${space.prefix}.run.>` }), { reply });
      await ops.flush();
      await observer.flush();
      for (const until = Date.now() + 1_000; Date.now() < until; await new Promise((r) => setTimeout(r, 100)))
        expect((await admin.jsm.consumers.info(S, 'downstream-y')).num_waiting).toBe(waiting);
      expect(await storedCounts()).toEqual(before);
      expect(heard).toEqual([]);
      // nor may it reach a bucket or a Run subject itself, nor a downstream's or a service's durable
      const js = jetstream(ops);
      await expect(js.publish(`$KV.${bucketName(space, 'leases')}.x`, 'x')).rejects.toThrow(/permission/i);
      await expect(new Kvm(ops).open(bucketName(space, 'leases')).then((kv) => kv.get('x'))).rejects.toThrow(/permission/i);
      await expect(js.publish(runSubject(space, runId, 'lifecycle'), 'x')).rejects.toThrow(/permission/i);
      await expect(
        ops.request(`$JS.API.CONSUMER.MSG.NEXT.${S}.downstream-x`, JSON.stringify({ batch: 1, no_wait: true }), { timeout: 2_000 }),
      ).rejects.toThrow(/permission/i);
      expect(await storedCounts()).toEqual(before);
    } finally {
      await observer.close();
      await opsLog.close();
      await ops.close();
    }
  });
});
