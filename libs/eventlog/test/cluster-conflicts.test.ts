/**
 * Two writers racing on one Run subject of a replicated stream (a 3-node cluster, R3): the log
 * stores one and refuses the other as an {@link AppendConflict}, whichever way the server words the
 * refusal. With a write still in flight on the subject a clustered server cannot check the
 * expectation yet and answers "wrong last sequence" with its own code (10164), not the single
 * server's 10071; that refusal escaped as a raw JetStreamApiError, and a trial's tools process
 * dropped tool results it held (its receipt's handler failed, the call was later swept `unknown`).
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { subjectTokenOf } from '@runplane/contracts';
import { AppendConflict, EventLog } from '@runplane/eventlog';
import { History } from '../../../test/support/history.js';
import { SUITE_NATS, TestNatsCluster } from '../../../test/support/nats-server.js';

const tag = randomBytes(4).toString('hex');
let cluster: TestNatsCluster;
let log: EventLog;

beforeAll(async () => {
  cluster = await TestNatsCluster.start();
  log = await EventLog.connect({ natsUrl: cluster.url, ...SUITE_NATS, stream: `RPTEST_CC_${tag}`, prefix: `tcc${tag}`, replicas: 3 });
}, 120_000);
afterAll(async () => {
  await log?.destroyStream().catch(() => undefined);
  await log?.close().catch(() => undefined);
  await cluster?.cleanup();
});

describe('conditional appends racing on a replicated stream (K6)', () => {
  it('given two appends with the same expectation on one subject, when both are sent at once, then one is stored and the other is an AppendConflict, every time', async () => {
    const RACES = 40;
    const refusals = new Map<string, number>(); // the server's wording and code of each refusal
    for (let k = 0; k < RACES; k++) {
      const runId = `cc${tag}r${k}`;
      // run.admitted (admission's subject), then two runtime events racing on the runtime subject
      const h = new History(runId, `conv-${runId}`).admitted().turn(1, { content: 'one' });
      const [admitted, first, second] = h.events.map((e) => e.event);
      expect(subjectTokenOf(first!)).toBe(subjectTokenOf(second!));
      await log.append(admitted!, 0);
      const raced = await Promise.allSettled([log.append(first!, 0), log.append(second!, 0)]);
      expect(raced.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
      const refused = raced.find((r): r is PromiseRejectedResult => r.status === 'rejected')!.reason as Error;
      expect(refused).toBeInstanceOf(AppendConflict);
      const code = /\((\d+)\)$/.exec(refused.message)?.[1] ?? 'no code';
      refusals.set(code, (refusals.get(code) ?? 0) + 1);
    }
    process.stdout.write(
      `CLUSTER-CONFLICTS | ${RACES} races on an R3 stream: refusals by server code ${JSON.stringify(Object.fromEntries(refusals))}\n`,
    );
  }, 120_000);
});
