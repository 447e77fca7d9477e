/**
 * Proves the test NATS harness (test/support/nats-server.ts) on every release under test: a
 * privately started server killed with SIGKILL and restarted on the same store keeps a stream's
 * messages, the same client connection carries on, and a conditional append still fences.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { JetStreamApiError, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { natsServerBinariesUnderTest, nextReconnect, recordServer, suiteNatsOptions, TestNatsServer } from '../../../test/support/nats-server.js';

const WRONG_LAST_SEQUENCE = 10071;

for (const target of natsServerBinariesUnderTest()) {
  (target.skip ? describe.skip : describe)(target.title, () => {
    let server: TestNatsServer | null = null;
    let nc: NatsConnection | null = null;
    beforeAll(() => recordServer(target.title));
    afterAll(async () => {
      await nc?.close().catch(() => undefined);
      await server?.cleanup();
    });

    it('keeps a stream across SIGKILL and restart on the same store, and still fences a wrong expected sequence', async () => {
      server = await TestNatsServer.start({ bin: target.bin });
      expect(server.version).toBe(target.version);
      nc = await connect(suiteNatsOptions(server.url, { maxReconnectAttempts: -1, reconnectTimeWait: 100 }));
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({ name: 'HARNESS', subjects: ['h.>'] });
      const js = jetstream(nc);
      const a1 = await js.publish('h.a', 'one', { expect: { lastSubjectSequence: 0 } });
      const b1 = await js.publish('h.b', 'two');
      const a2 = await js.publish('h.a', 'three', { expect: { lastSubjectSequence: a1.seq } });
      expect([a1.seq, b1.seq, a2.seq]).toEqual([1, 2, 3]);

      const pid = server.pid;
      const reconnected = nextReconnect(nc);
      await server.kill();
      expect(server.running).toBe(false);
      await server.restart();
      expect(server.pid).not.toBe(pid);

      // the same connection reconnects to the restarted server on the same port
      await reconnected;
      const info = await jsm.streams.info('HARNESS');
      expect(info.state.messages).toBe(3);
      expect(info.state.last_seq).toBe(3);
      const last = await jsm.streams.getMessage('HARNESS', { last_by_subj: 'h.a' });
      expect(last?.seq).toBe(3);
      expect(last?.string()).toBe('three');

      const stale = await js.publish('h.a', 'stale', { expect: { lastSubjectSequence: a1.seq } }).then(
        () => null,
        (e: unknown) => e,
      );
      expect(stale).toBeInstanceOf(JetStreamApiError);
      expect((stale as JetStreamApiError).code).toBe(WRONG_LAST_SEQUENCE);
      const a3 = await js.publish('h.a', 'four', { expect: { lastSubjectSequence: a2.seq } });
      expect(a3.seq).toBe(4);
      expect((await jsm.streams.info('HARNESS')).state.messages).toBe(4);
    });

    it('answers nothing while frozen and carries on after thaw', async () => {
      server ??= await TestNatsServer.start({ bin: target.bin });
      nc ??= await connect(suiteNatsOptions(server.url, { maxReconnectAttempts: -1, reconnectTimeWait: 100 }));
      await server.freeze();
      let pending: Promise<void>;
      try {
        pending = nc.flush();
        const early = await Promise.race([pending.then(() => 'answered'), new Promise((r) => setTimeout(() => r('silent'), 500))]);
        expect(early).toBe('silent');
      } finally {
        server.thaw();
      }
      await pending;
      expect(server.running).toBe(true);
    });
  });
}
