import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { makeEvent, type StoredEvent } from '@runplane/contracts';
import { AppendConflict, DurableConsumer, EventLog, ownerFilter } from '@runplane/eventlog';
import { describeEachNatsServer, natsServersUnderTest } from '../../../test/support/nats-server.js';

// every test runs on the machine's nats-server (2.9.10) and on the cached current release
const servers = await natsServersUnderTest();
const tag = randomBytes(4).toString('hex');

const ctx = (runId: string) => ({ runId, conversationId: 'c1', correlationId: 'm1', causationId: null });
const admitted = (runId: string, content = 'hello') =>
  makeEvent('run.admitted', ctx(runId), 'admission', {
    message: { messageId: 'm1', clientMessageId: 'cm1', content, contentSha256: 'a'.repeat(64) },
    grant: { tools: ['list_funds'], model: 'm' },
    limits: { maxModelRequests: 2, maxToolCalls: 2, deadlineAt: new Date(Date.now() + 60_000).toISOString() },
  });
const turnRequested = (runId: string, turn: number) => makeEvent('model.turn.requested', ctx(runId), turn, { turn, model: 'm' });

describeEachNatsServer(servers, (server) => {
  let natsUrl: string;
  let log: EventLog;
  beforeAll(async () => {
    natsUrl = server.url;
    log = await EventLog.connect({ natsUrl, stream: `RPTEST_EL_${tag}`, prefix: `tel${tag}` });
  });
  afterAll(async () => {
    await log.destroyStream();
    await log.close();
  });

  describe('EventLog', () => {
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

    it('given an appended event, when the same event id is appended again, then it is refused as a conflict and nothing new is stored (K11)', async () => {
      const runId = `r2${tag}`;
      const e = admitted(runId);
      const first = await log.append(e, 0);
      // the same decision, retried with the stale or the current expectation, is refused either
      // way; which check answers first differs: 2.9.10 checks Nats-Msg-Id first ("duplicate"),
      // 2.15.1 the expected last subject sequence first ("wrong last sequence", code 10071)
      await expect(log.append(e, 0)).rejects.toBeInstanceOf(AppendConflict);
      await expect(log.append(e, 0)).rejects.toThrow(/duplicate|wrong last sequence/);
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
      expect(events.map((e) => e.subject)).toEqual([
        `tel${tag}.run.${runId}.admission`,
        `tel${tag}.run.${runId}.runtime`,
        `tel${tag}.run.${runId}.runtime`,
      ]);
      expect((await log.lastOf(runId, 'runtime'))?.seq).toBe(s3.seq);
      expect(await log.readRun(runId, s2.seq + 1)).toHaveLength(1);
      expect(await log.readRun(`nothing${tag}`)).toEqual([]);
    });

    it('skips and reports a stored message that is not a valid event, so one bad message cannot block a Run\'s readers (K11)', async () => {
      const runId = `r5${tag}`;
      await log.append(admitted(runId), 0);
      await log.js.publish(`tel${tag}.run.${runId}.tools`, 'not json at all');
      await log.append(turnRequested(runId, 1), 0);
      const reported: string[] = [];
      const previous = log.onInvalid;
      log.onInvalid = (e) => reported.push(e.message);
      try {
        expect((await log.readRun(runId)).map((e) => e.event.type)).toEqual(['run.admitted', 'model.turn.requested']);
      } finally {
        log.onInvalid = previous;
      }
      expect(reported).toHaveLength(1);
      expect(reported[0]).toMatch(/not JSON/);
    });

    it('refuses to start on a stream that does not capture its subject prefix', async () => {
      await expect(EventLog.connect({ natsUrl, stream: `RPTEST_EL_${tag}`, prefix: `other${tag}` })).rejects.toThrow(/do not belong together/);
    });

    it('redelivers a message whose handler failed, then acknowledges it (at-least-once)', async () => {
      const runId = `r4${tag}`;
      await log.append(admitted(runId), 0);
      const seen: number[] = [];
      let failures = 0;
      const consumer = new DurableConsumer(log, { durable: 'redelivery', filter: ownerFilter(log.space, 'admission') }, async (s: StoredEvent) => {
        if (s.event.runId !== runId) return;
        seen.push(s.seq);
        if (failures++ === 0) throw new Error('transient');
      }, { warn: () => undefined, error: () => undefined });
      await consumer.start();
      const deadline = Date.now() + 10_000;
      while (seen.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      await consumer.stop();
      expect(seen.length).toBe(2);
      expect(seen[0]).toBe(seen[1]);
    });
  });
});
