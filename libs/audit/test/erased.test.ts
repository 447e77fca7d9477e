/**
 * Erasures the back-links cannot show (K11): a Run's last or only event on a subject, or a whole
 * Run, deleted from the stream. An auditor's trial deleted a Run's `run.admitted`, another's
 * `run.settled` and a third Run whole from a copy of a stream, and `runplane audit` said "ok" and
 * exited 0. Given a Run stream as the event log creates it except that deletes are allowed (as on
 * such a copy), when messages are deleted, then the audit lists the erased sequences (which make it
 * unclean: checks.test.ts) and a Run left without its admission breaks K1.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes, randomUUID } from 'node:crypto';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { auditRuns, readForAudit } from '@runplane/audit';
import { EventLog, runStreamConfig } from '@runplane/eventlog';
import { admittedEvent, settledEvent } from '../../../test/support/events.js';
import { SHARED_NATS, suiteNatsOptions } from '../../../test/support/nats-server.js';

const tag = randomBytes(4).toString('hex');
const space = { stream: `RPTEST_ERASED_${tag}`, prefix: `terased${tag}`, partitions: 2 };
let nc: NatsConnection;
let jsm: JetStreamManager;
let log: EventLog;
const [a, b, c] = [randomUUID(), randomUUID(), randomUUID()];
const seqOf: Record<string, number> = {};

beforeAll(async () => {
  nc = await connect(suiteNatsOptions());
  jsm = await jetstreamManager(nc);
  // the Run stream as the event log makes it, but deletes allowed: a copy an adversary edited
  await jsm.streams.add({ ...runStreamConfig(space, { replicas: 1, duplicateWindowMs: 120_000 }), deny_delete: false, deny_purge: false });
  log = await EventLog.connect({ ...SHARED_NATS, ...space, name: 'erased-test' });
  for (const runId of [a, b, c]) {
    seqOf[`${runId}/admitted`] = (await log.append(admittedEvent(runId), 0)).seq;
    seqOf[`${runId}/settled`] = (await log.append(settledEvent(runId), 0)).seq;
  }
}, 30_000);
afterAll(async () => {
  await log?.close();
  await jsm?.streams.delete(space.stream).catch(() => undefined);
  await nc?.close();
});

describe('audit: messages erased from the stream (K11)', () => {
  it('given an untouched stream, the audit reports nothing erased', async () => {
    const report = auditRuns(await readForAudit(log, { all: true }));
    expect(report.summary.erased).toEqual({ count: 0, seqs: [] });
    // (these two-event Runs break checks of their own: a settlement with no closure before it)
    expect(report.clean).toBe(report.runs.every((r) => r.clean));
  });

  it("given a Run's settlement, another's admission and a third Run whole deleted, the audit lists every erased sequence and names the Run left without its admission (K1)", async () => {
    const gone = [seqOf[`${a}/settled`]!, seqOf[`${b}/admitted`]!, seqOf[`${c}/admitted`]!, seqOf[`${c}/settled`]!].sort((x, y) => x - y);
    for (const seq of gone) await jsm.streams.deleteMessage(space.stream, seq, false);

    const report = auditRuns(await readForAudit(log, { all: true }));
    expect(report.summary.erased).toEqual({ count: 4, seqs: gone });
    // the Run erased whole is not in the log at all: only the stream's count shows it
    expect(report.runs.map((r) => r.runId).sort()).toEqual([a, b].sort());
    const runB = report.runs.find((r) => r.runId === b)!;
    expect(runB.checks.find((ch) => ch.id === 'admission-once')).toMatchObject({
      status: 'broken',
      violations: [{ seq: seqOf[`${b}/settled`], message: expect.stringContaining('no run.admitted') }],
    });
    // a --since audit cannot date a Run without its admission: it audits it (broken), not skips it
    const since = auditRuns(await readForAudit(log, { all: true, since: new Date(Date.now() + 3_600_000).toISOString() }));
    expect(since.runs.map((r) => r.runId)).toEqual([b]);
    // one Run's audit reports the stream's erasures too: which Run lost them cannot be known
    expect(auditRuns(await readForAudit(log, { run: a })).summary.erased?.count).toBe(4);
    // the Run erased whole, audited by its id: the erasures, not "no events for run" (exit 1)
    const whole = auditRuns(await readForAudit(log, { run: c }));
    expect(whole.runs.map((r) => [r.runId, r.events])).toEqual([[c, 0]]);
    expect(whole.summary.erased?.count).toBe(4);
    expect(whole.clean).toBe(false);
  });
});
