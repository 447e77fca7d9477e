/**
 * What the design relies on from the NATS server, checked on the release the product starts
 * (docs/event-log.md, "What the design relies on, and from which server version"): each test
 * uses the feature the way Runplane does or will, with the raw JetStream API where the client
 * does not expose it, and fails if the server ignores it (as 2.9.10 ignored several of them).
 */
import { afterAll, beforeAll, expect, it } from '@jest/globals';
import { connect, headers, type NatsConnection } from '@nats-io/transport-node';
import { AckPolicy, JetStreamApiError, jetstream, jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { describeEachNatsServer, natsServersUnderTest, suiteNatsOptions } from '../../../test/support/nats-server.js';

const servers = await natsServersUnderTest();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describeEachNatsServer(servers, (server) => {
  let nc: NatsConnection;
  let jsm: JetStreamManager;
  const stream = `FEAT_${Date.now().toString(36)}`;

  beforeAll(async () => {
    nc = await connect(suiteNatsOptions(server.url));
    jsm = await jetstreamManager(nc);
    await jsm.streams.add({
      name: stream,
      subjects: [`${stream}.>`],
      allow_direct: true,
      // 2.11: per-message TTL; 2.12: atomic batch publish
      allow_msg_ttl: true,
      allow_atomic: true,
    });
  });

  afterAll(async () => {
    await jsm?.streams.delete(stream).catch(() => undefined);
    await nc?.close();
  });

  it('is 2.12 or later (the supported line)', () => {
    const [major, minor] = (nc.info?.version ?? '0.0').split('.').map(Number);
    expect(major! > 2 || (major === 2 && minor! >= 12)).toBe(true);
  });

  it('enforces the exact-subject expectation (K6) and the wildcard one (Nats-Expected-Last-Subject-Sequence-Subject)', async () => {
    const js = jetstream(nc);
    const a = await js.publish(`${stream}.run.r1.runtime`, 'a', { expect: { lastSubjectSequence: 0 } });
    await expect(js.publish(`${stream}.run.r1.runtime`, 'b', { expect: { lastSubjectSequence: 0 } })).rejects.toBeInstanceOf(JetStreamApiError);
    await js.publish(`${stream}.run.r1.tools`, 'c');
    // conditional on every subject of the Run: the last of `run.r1.*` is now the tools message, not
    // `a`, though `a` is still the last on the runtime subject (a server that ignores the wildcard
    // checks the exact subject instead, and stores it)
    const h = headers();
    h.set('Nats-Expected-Last-Subject-Sequence', String(a.seq));
    h.set('Nats-Expected-Last-Subject-Sequence-Subject', `${stream}.run.r1.*`);
    await expect(js.publish(`${stream}.run.r1.runtime`, 'd', { headers: h })).rejects.toThrow(/wrong last sequence/i);
  });

  it('honours a term with a reason: the message is not redelivered', async () => {
    const js = jetstream(nc);
    await jsm.consumers.add(stream, {
      durable_name: 'term',
      ack_policy: AckPolicy.Explicit,
      ack_wait: 1_000_000_000,
      filter_subject: `${stream}.term`,
    });
    await js.publish(`${stream}.term`, 'poison');
    const c = await js.consumers.get(stream, 'term');
    const m = await c.next({ expires: 2_000 });
    m!.term('runplane invalid-message: not JSON');
    await sleep(1_500);
    expect(await c.next({ expires: 1_000 })).toBeNull();
    expect((await c.info()).num_ack_pending).toBe(0);
  });

  it('accepts a consumer with several filters (2.10) and one with a pinned-client priority group (2.11)', async () => {
    const multi = await jsm.consumers.add(stream, {
      durable_name: 'multi',
      ack_policy: AckPolicy.Explicit,
      filter_subjects: [`${stream}.run.*.runtime`, `${stream}.run.*.tools`],
    });
    expect(multi.config.filter_subjects).toHaveLength(2);
    const pinned = await jsm.consumers.add(stream, {
      durable_name: 'pinned',
      ack_policy: AckPolicy.Explicit,
      filter_subject: `${stream}.run.>`,
      priority_groups: ['p0'],
      priority_policy: 'pinned_client',
      priority_timeout: 5_000_000_000,
    });
    expect(pinned.config).toMatchObject({ priority_groups: ['p0'], priority_policy: 'pinned_client' });
  });

  it('returns the last message of every subject of a Run in one batch direct get (multi_last, 2.11)', async () => {
    const reply = await nc.request(`$JS.API.DIRECT.GET.${stream}`, JSON.stringify({ multi_last: [`${stream}.run.r1.*`], batch: 10 }), {
      timeout: 5_000,
    });
    // the first reply of the batch is a message of the Run (the rest follow on the same inbox)
    expect(reply.headers?.get('Nats-Subject')).toMatch(new RegExp(`^${stream}\\.run\\.r1\\.`));
  });

  it('stores an atomic batch (2.12) all together, and nothing of a batch whose commit fails an expectation', async () => {
    const publishBatch = async (id: string, msgs: { subject: string; expectLast?: number }[]) => {
      let last: unknown = null;
      for (const [i, m] of msgs.entries()) {
        const h = headers();
        h.set('Nats-Batch-Id', id);
        h.set('Nats-Batch-Sequence', String(i + 1));
        if (m.expectLast !== undefined) h.set('Nats-Expected-Last-Subject-Sequence', String(m.expectLast));
        if (i === msgs.length - 1) {
          h.set('Nats-Batch-Commit', '1');
          last = (await nc.request(m.subject, 'x', { headers: h, timeout: 5_000 })).json();
        } else nc.publish(m.subject, 'x', { headers: h });
      }
      return last as { count?: number; error?: { err_code: number } };
    };
    const ok = await publishBatch('b1', [{ subject: `${stream}.run.b1.runtime` }, { subject: `${stream}.run.b1.tools` }]);
    expect(ok).toMatchObject({ count: 2 });
    const refused = await publishBatch('b2', [{ subject: `${stream}.run.b2.runtime` }, { subject: `${stream}.run.b1.tools`, expectLast: 1 }]);
    expect(refused.error).toBeDefined();
    await expect(jsm.streams.getMessage(stream, { last_by_subj: `${stream}.run.b2.runtime` })).resolves.toBeNull();
  });

  it('drops a message after its own TTL (Nats-TTL, 2.11)', async () => {
    const js = jetstream(nc);
    const h = headers();
    h.set('Nats-TTL', '1s');
    const { seq } = await js.publish(`${stream}.ttl`, 'short-lived', { headers: h });
    await expect(jsm.streams.getMessage(stream, { seq })).resolves.not.toBeNull();
    const deadline = Date.now() + 10_000;
    while ((await jsm.streams.getMessage(stream, { seq }).catch(() => null)) !== null) {
      if (Date.now() > deadline) throw new Error('the message outlived its TTL by 9 s');
      await sleep(200);
    }
  });
});
