/**
 * Tool effects (K5) against the real processes, NATS JetStream and PostgreSQL, with the faults
 * really injected: two tools processes, one per partition, whose consumers' ack wait is shorter
 * than the tool's run time (redelivery; both processes execute calls), kill -9 of the tools processes during a call, a call outliving its
 * timeout (late observation), a tool burning the CPU past its timeout, and an operator's
 * reconciliation. `record_effect` (granted only here, RUNPLANE_TEST_TOOLS) records each execution
 * as a line in a file, so executions are counted where the effect happens.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kvm } from '@nats-io/kv';
import pg from 'pg';
import { admissionIds, type RunEvent, type StoredEvent } from '@runplane/contracts';
import { durableNamesOf, partitionOf, runSubject } from '@runplane/eventlog';
import type { ManagedProcess } from '@runplane/devstack';
import { eventually, startTestStack, type TestStack } from '../support/stack.js';

const TIMEOUT_MS = 2500;
const CLAIM_TTL_MS = 6000; // renewed every 2 s: nothing in this file needs a short expiry but the kill -9 row, and the whole suite loads 2 cores heavily
const ACK_WAIT_MS = 500;
const dir = mkdtempSync(join(tmpdir(), 'rp-effects-'));
const effectFile = join(dir, 'effects.log');

let t: TestStack;
const toolsProcesses: ManagedProcess[] = [];
beforeAll(async () => {
  t = await startTestStack(
    'effects',
    {
      RUNPLANE_TEST_TOOLS: 'record_effect',
      RUNPLANE_RECORD_EFFECT_FILE: effectFile,
      RUNPLANE_TOOL_TIMEOUT_MS: String(TIMEOUT_MS),
      RUNPLANE_TOOL_CLAIM_TTL_MS: String(CLAIM_TTL_MS),
      RUNPLANE_TOOL_CLAIM_SWEEP_MS: '300',
      RUNPLANE_TOOLS_ACK_WAIT_MS: String(ACK_WAIT_MS),
      RUNPLANE_TOOL_ABANDON_MS: '30000',
      // all four Runs of the first test may hash to partitions one tools replica owns (partitioned ownership):
      // a thread for each of their calls, so none waits past the timeout for a free thread and is
      // refused `not_started` (an honest `failed`, but not what this file is about). The threads are
      // started and loaded before a replica is ready (a start-up took 1-5 s beside CPU hogs)
      RUNPLANE_TOOL_THREADS: '4',
    },
    { audit: 'strict' },
  );
  toolsProcesses.push(t.stack.services.get('tools')!);
  // a second tools process: the two share the partitions, one each. A consumer's heartbeat (every
  // >= 1 s) is slower than the 500 ms ack wait, so every proposal whose tool runs longer is redelivered.
  toolsProcesses.push(await t.stack.startService('tools'));
}, 120_000);
afterAll(async () => {
  await t?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const ofType = <T extends RunEvent['type']>(events: StoredEvent[], type: T) =>
  events.filter((e) => e.event.type === type) as (StoredEvent & { event: Extract<RunEvent, { type: T }> })[];

/** Lines `record_effect` wrote for a Run (one per execution). */
function effectsOf(runId: string): string[] {
  if (!existsSync(effectFile)) return [];
  return readFileSync(effectFile, 'utf8')
    .split('\n')
    .filter((l) => l.startsWith(`${runId} `));
}

/**
 * Runs `check`; when it fails, its message is followed by the Run's tool events in full (sequence,
 * time, writer, payload: a receipt's status, error code and message, duration) and its effect lines,
 * so a mismatch seen once in a loaded CI run says which receipt it was and who recorded it.
 */
function withToolTrace(runId: string, events: StoredEvent[], check: () => void): void {
  try {
    check();
  } catch (e) {
    const toolEvents = events
      .filter((s) => s.event.type.startsWith('tool.'))
      .map((s) => ({ seq: s.seq, type: s.event.type, occurredAt: s.event.occurredAt, writer: s.event.writer, data: s.event.data }));
    if (e instanceof Error) e.message += `\n\nRun ${runId}: ${JSON.stringify({ toolEvents, effects: effectsOf(runId) }, null, 2)}`;
    throw e;
  }
}

/** Binds a scripted scenario to `key` (a tag in the question): one record_effect call, then an answer. */
async function scriptEffect(key: string, args: Record<string, unknown>): Promise<void> {
  const admin = t.stack.modelUrl.replace(/\/v1$/, '/_scripted');
  const scenario = {
    steps: [
      { reply: { content: '', toolCalls: [{ name: 'record_effect', arguments: { tag: key, ...args } }] } },
      { reply: { content: `Recorded the effect for ${key}; its outcome is as the tool reported it.` } },
    ],
    then: 'error',
  };
  const res = await fetch(`${admin}/scenario?key=${encodeURIComponent(key)}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(scenario),
  });
  if (!res.ok) throw new Error(`scenario rejected: ${res.status} ${await res.text()}`);
}

/** The partition consumers a tools process serves now, as its readiness check lists them (`details.consumers.durables`). */
async function consumersServedBy(url: string): Promise<string[]> {
  const res = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(10_000) });
  const body = (await res.json()) as { details?: { consumers?: { durables?: Record<string, unknown> } } };
  return Object.keys(body.details?.consumers?.durables ?? {});
}

async function ask(key: string, args: Record<string, unknown>): Promise<string> {
  await scriptEffect(key, args);
  const admitted = await t.client.postMessage(`conv-${key}`, { clientMessageId: key, content: `[${key}] record the effect` });
  expect(admitted.status).toBe(201);
  return admitted.body.runId;
}

describe('a live executor keeps its claim: redelivery never runs a tool twice nor declares it unknown (K5)', () => {
  it('with two tools processes and an ack wait shorter than the run time, each tool runs once with one dispatch and its real receipt', async () => {
    const keys = ['k5-redeliver-a', 'k5-redeliver-b', 'k5-redeliver-c', 'k5-redeliver-d'];
    // the Runs fall on both partitions, and each process owns one of them before they are asked:
    // both processes execute some of the calls (the second joined after the first took every partition)
    const partitions = Number(t.env.RUNPLANE_PARTITIONS);
    expect(new Set(keys.map((k) => partitionOf(admissionIds(`conv-${k}`, k).runId, partitions))).size).toBe(2);
    await eventually(
      async () => {
        const served = await Promise.all(toolsProcesses.map((p) => consumersServedBy(p.url)));
        return served.every((d) => d.length === 1) && new Set(served.flat()).size === 2 ? true : null;
      },
      30_000,
      'each tools process serving one partition',
    );
    const runIds = await Promise.all(keys.map((k) => ask(k, { sleepMs: 1800 })));
    const executors = new Set<string>();
    for (const runId of runIds) {
      const events = await t.waitForSettlement(runId, 60_000);
      withToolTrace(runId, events, () => {
        expect(ofType(events, 'tool.call.dispatched')).toHaveLength(1);
        const receipts = ofType(events, 'tool.call.receipt');
        expect(receipts).toHaveLength(1);
        expect(receipts[0]!.event.data).toMatchObject({ name: 'record_effect', status: 'succeeded', effect: 'external-effect' });
        expect(effectsOf(runId)).toHaveLength(1);
      });
      expect(ofType(events, 'run.settled')).toHaveLength(1);
      for (const receipt of ofType(events, 'tool.call.receipt')) executors.add(receipt.event.writer?.instance ?? '(none)');
    }
    // both processes executed calls (each receipt names the process that ran the tool)
    expect(executors.size).toBe(2);
    // the fault was really there: every delivery beyond the first of a message is a redelivery
    // (the consumer's delivered sequence counts every delivery; these Runs are the only ones so far)
    // (the tools' partition consumers, together)
    const infos = await Promise.all(durableNamesOf(t.log.space, 'tools').map((d) => t.log.jsm.consumers.info(t.log.space.stream, d)));
    let firstDeliveries = 0;
    for (const runId of runIds) firstDeliveries += (await t.log.readRun(runId)).filter((e) => e.event.owner === 'runtime').length;
    const redeliveries = infos.reduce((n, i) => n + i.delivered.consumer_seq, 0) - firstDeliveries;
    process.stdout.write(`tools consumer: ack wait ${ACK_WAIT_MS} ms, ${redeliveries} redelivery(ies) of ${firstDeliveries} messages\n`);
    for (const info of infos) expect(info.config.ack_wait).toBe(ACK_WAIT_MS * 1_000_000);
    expect(redeliveries).toBeGreaterThan(0);
  }, 90_000);
});

describe('the calls of one turn (K5)', () => {
  it("are all dispatched before the first one's receipt, and run at once: three 1.5 s calls take one call's time, not three", async () => {
    const key = 'k5-one-turn';
    const admin = t.stack.modelUrl.replace(/\/v1$/, '/_scripted');
    const calls = ['a', 'b', 'c'].map((tag) => ({ name: 'record_effect', arguments: { tag: `${key}-${tag}`, sleepMs: 1500 } }));
    const scenario = {
      steps: [{ reply: { content: '', toolCalls: calls } }, { reply: { content: `Recorded the three effects for ${key}.` } }],
      then: 'error',
    };
    const res = await fetch(`${admin}/scenario?key=${key}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(scenario),
    });
    expect(res.ok).toBe(true);
    const admitted = await t.client.postMessage(`conv-${key}`, { clientMessageId: key, content: `[${key}] record three effects` });
    const events = await t.waitForSettlement(admitted.body.runId, 60_000);
    withToolTrace(admitted.body.runId, events, () => {
      const dispatched = ofType(events, 'tool.call.dispatched');
      const receipts = ofType(events, 'tool.call.receipt');
      expect([dispatched.length, receipts.map((r) => r.event.data.status)]).toEqual([3, ['succeeded', 'succeeded', 'succeeded']]);
      // every dispatch before the first receipt (one after another, each would follow the previous receipt)
      expect(Math.max(...dispatched.map((d) => d.seq))).toBeLessThan(Math.min(...receipts.map((r) => r.seq)));
      // and the three ran side by side: the last receipt within two calls' time of the first dispatch
      const first = Math.min(...dispatched.map((d) => Date.parse(d.event.occurredAt)));
      const last = Math.max(...receipts.map((r) => Date.parse(r.event.occurredAt)));
      expect(last - first).toBeLessThan(3_000);
      expect(effectsOf(admitted.body.runId)).toHaveLength(3);
    });
  }, 90_000);
});

describe('kill -9 of the tools processes during a call (K5)', () => {
  it('after the claim expires the call gets unknown, is never re-run, and the Run goes on', async () => {
    const key = 'k5-kill';
    const runId = await ask(key, { sleepMs: 2000 });
    await eventually(async () => (effectsOf(runId).length > 0 ? true : null), 30_000, 'the tool to start');
    const killedAt = Date.now();
    for (const p of toolsProcesses.splice(0)) p.child.kill('SIGKILL');
    toolsProcesses.push(await t.stack.startService('tools'));
    const events = await t.waitForSettlement(runId, 60_000);
    const receipts = ofType(events, 'tool.call.receipt');
    expect(receipts).toHaveLength(1);
    expect(receipts[0]!.event.data).toMatchObject({ status: 'unknown', error: { code: 'executor_lost' }, effect: 'external-effect' });
    // not declared unknown while the claim could still be alive
    const dispatched = ofType(events, 'tool.call.dispatched')[0]!;
    expect(Date.parse(receipts[0]!.event.occurredAt) - Date.parse(dispatched.event.occurredAt)).toBeGreaterThanOrEqual(CLAIM_TTL_MS - 200);
    expect(ofType(events, 'tool.call.dispatched')).toHaveLength(1);
    expect(effectsOf(runId)).toHaveLength(1); // never re-run
    // the Run went on: the model was asked again and the lifecycle settled it once
    expect(ofType(events, 'model.turn.requested')).toHaveLength(2);
    expect(ofType(events, 'run.settled')).toHaveLength(1);
    process.stdout.write(`kill -9: unknown recorded ${Date.parse(receipts[0]!.event.occurredAt) - killedAt} ms after the kill\n`);
  }, 90_000);
});

describe('a result after unknown is a late observation (K5)', () => {
  let lateRunId: string;
  it('a call outliving its timeout gets unknown at the timeout; its real result is recorded as its own event, not a success', async () => {
    const key = 'k5-late';
    lateRunId = await ask(key, { sleepMs: 4500 });
    const events = await t.waitForSettlement(lateRunId, 60_000);
    const receipt = ofType(events, 'tool.call.receipt')[0]!;
    expect(receipt.event.data).toMatchObject({ status: 'unknown', error: { code: 'timeout' } });
    const late = await eventually(
      async () => {
        const all = await t.log.readRun(lateRunId);
        return ofType(all, 'tool.call.late_observed')[0] ?? null;
      },
      30_000,
      'the late observation',
    );
    expect(late.event.data).toMatchObject({
      toolCallId: receipt.event.data.toolCallId,
      status: 'succeeded',
      result: { recorded: expect.any(String) },
    });
    expect(late.subject).toBe(runSubject(t.log.space, lateRunId, 'tools'));
    const all = await t.log.readRun(lateRunId);
    // the receipt is not rewritten, the outcome not changed, the tool not re-run
    expect(ofType(all, 'tool.call.receipt')).toHaveLength(1);
    expect(ofType(all, 'tool.call.receipt')[0]!.event.data.status).toBe('unknown');
    expect(ofType(all, 'run.settled')).toHaveLength(1);
    expect(effectsOf(lateRunId)).toHaveLength(1);
    const settledSeq = ofType(all, 'run.settled')[0]!.seq;
    process.stdout.write(
      `late observation at seq ${late.seq} (${late.seq > settledSeq ? 'after' : 'before'} the settlement at ${settledSeq}) on ${late.subject}\n`,
    );
  }, 90_000);

  describe('an operator reconciles the unknown call (recorded by admission)', () => {
    const reconcile = (runId: string, toolCallId: string, body: unknown, headers: Record<string, string> = {}) =>
      fetch(`${t.stack.endpoints.admission}/v1/runs/${runId}/tool-calls/${toolCallId}/reconcile`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: JSON.stringify(body),
      });

    it('records who, when, outcome and evidence once; the same again is 200 with nothing appended; another is 409', async () => {
      const events = await t.log.readRun(lateRunId);
      const toolCallId = ofType(events, 'tool.call.receipt')[0]!.event.data.toolCallId;
      const body = { outcome: 'succeeded', evidence: 'effects.log has the line for this call', operator: 'ops-ada' };
      const first = await reconcile(lateRunId, toolCallId, body);
      expect(first.status).toBe(201);
      expect(await first.json()).toMatchObject({ outcome: 'succeeded', operator: 'ops-ada', reconciliation: 'recorded' });
      const again = await reconcile(lateRunId, toolCallId, body);
      expect(again.status).toBe(200);
      expect(await again.json()).toMatchObject({ reconciliation: 'existing' });
      const other = await reconcile(lateRunId, toolCallId, { ...body, outcome: 'not_executed' });
      expect(other.status).toBe(409);
      expect(other.headers.get('content-type')).toMatch(/application\/problem\+json/);
      expect(await other.json()).toMatchObject({ code: 'reconcile_conflict', status: 409 });
      const after = await t.log.readRun(lateRunId);
      const recs = ofType(after, 'tool.call.reconciled');
      expect(recs).toHaveLength(1);
      expect(recs[0]!.event.owner).toBe('admission');
      expect(recs[0]!.subject).toBe(runSubject(t.log.space, lateRunId, 'admission'));
      expect(recs[0]!.event.data).toMatchObject({ toolCallId, outcome: 'succeeded', operator: 'ops-ada' });
      // it dispatched nothing and re-ran nothing
      expect(ofType(after, 'tool.call.dispatched')).toHaveLength(1);
      expect(effectsOf(lateRunId)).toHaveLength(1);
      // the projection shows the late observation and the reconciliation beside the receipt, which stays unknown
      const row = await eventually(
        async () => {
          const db = new pg.Client({ connectionString: t.env.DATABASE_URL });
          await db.connect();
          try {
            const r = await db.query(
              'select status, late_status, reconciled_outcome, reconciled_by, reconciled_at from tool_calls where run_id = $1 and tool_call_id = $2',
              [lateRunId, toolCallId],
            );
            const found = r.rows[0] as Record<string, unknown> | undefined;
            return found?.reconciled_outcome ? found : null;
          } finally {
            await db.end();
          }
        },
        20_000,
        'the reconciliation in the tool_calls projection',
      );
      expect(row).toMatchObject({ status: 'unknown', late_status: 'succeeded', reconciled_outcome: 'succeeded', reconciled_by: 'ops-ada' });
      expect(row.reconciled_at).not.toBeNull();
    });

    it('names the operator from the header; refuses bad bodies (400), unknown Runs and calls (404), calls that are not unknown (409)', async () => {
      const events = await t.log.readRun(lateRunId);
      const toolCallId = ofType(events, 'tool.call.receipt')[0]!.event.data.toolCallId;
      expect((await reconcile(lateRunId, toolCallId, { outcome: 'maybe', evidence: 'x', operator: 'o' })).status).toBe(400);
      expect((await reconcile(lateRunId, toolCallId, { outcome: 'failed', evidence: '  ', operator: 'o' })).status).toBe(400);
      const noOperator = await reconcile(lateRunId, toolCallId, { outcome: 'failed', evidence: 'x' });
      expect(noOperator.status).toBe(400);
      expect(await noOperator.json()).toMatchObject({ code: 'invalid_body' });
      expect((await reconcile('no-such-run', toolCallId, { outcome: 'failed', evidence: 'x', operator: 'o' })).status).toBe(404);
      expect((await reconcile(lateRunId, 'no-such-call', { outcome: 'failed', evidence: 'x' }, { 'x-runplane-operator': 'o' })).status).toBe(404);
      // a succeeded call (from the redelivery test) cannot be reconciled
      const okRun = (
        await t.client.postMessage('conv-k5-redeliver-a', { clientMessageId: 'k5-redeliver-a', content: '[k5-redeliver-a] record the effect' })
      ).body.runId;
      const okCall = ofType(await t.log.readRun(okRun), 'tool.call.receipt')[0]!.event.data.toolCallId;
      const notUnknown = await reconcile(okRun, okCall, { outcome: 'failed', evidence: 'x' }, { 'x-runplane-operator': 'o' });
      expect(notUnknown.status).toBe(409);
      expect(ofType(await t.log.readRun(okRun), 'tool.call.reconciled')).toHaveLength(0);
    });
  });
});

describe('timeouts hold while a tool burns the CPU (K5)', () => {
  it('a CPU-bound call gets unknown at its timeout, and its claim keeps being renewed meanwhile', async () => {
    const key = 'k5-burn';
    const runId = await ask(key, { burnMs: 6000 });
    await eventually(async () => (effectsOf(runId).length > 0 ? true : null), 30_000, 'the tool to start');
    const kv = await new Kvm(t.log.nc).open(`${t.env.RUNPLANE_SUBJECT_PREFIX}_claims`);
    // while the tool burns its thread, the worker's loop renews the claim
    const toolCallId = effectsOf(runId)[0]!.split(' ')[1]!;
    const revisions = new Set<number>();
    const until = Date.now() + CLAIM_TTL_MS / 3 + 2500; // spans at least two renewals
    while (Date.now() < until) {
      const e = await kv.get(`${runId}.${toolCallId}`);
      if (e && e.operation === 'PUT') {
        const claim = e.json<{ expiresAt: string }>();
        expect(Date.parse(claim.expiresAt)).toBeGreaterThan(Date.now() - 300);
        revisions.add(e.revision);
      }
      await new Promise((r) => setTimeout(r, 150));
    }
    expect(revisions.size).toBeGreaterThanOrEqual(2);
    const events = await t.waitForSettlement(runId, 60_000);
    const receipt = ofType(events, 'tool.call.receipt')[0]!;
    expect(receipt.event.data).toMatchObject({ status: 'unknown', error: { code: 'timeout' } });
    // recorded at the timeout, not after the 6 s burn
    const dispatched = ofType(events, 'tool.call.dispatched')[0]!;
    expect(Date.parse(receipt.event.occurredAt) - Date.parse(dispatched.event.occurredAt)).toBeLessThan(TIMEOUT_MS + 1500);
    expect(effectsOf(runId)).toHaveLength(1);
  }, 90_000);
});

describe('the model asks again for an effect whose outcome is unknown (K5)', () => {
  it('given a call that outlived its timeout, when the next turn asks for the same call, then it is denied, the effect happens once, and the settlement names the unknown call', async () => {
    const key = 'k5-asked-again';
    const call = { name: 'record_effect', arguments: { tag: key, sleepMs: 4500 } };
    const admin = t.stack.modelUrl.replace(/\/v1$/, '/_scripted');
    const scenario = {
      steps: [
        { reply: { content: '', toolCalls: [call] } },
        // a model that reads "unknown" and tries again, as a trial's misbehaving endpoint did
        { reply: { content: '', toolCalls: [call] } },
        { reply: { content: `Tried to record the effect for ${key}; its outcome is unknown.` } },
      ],
      then: 'error',
    };
    const set = await fetch(`${admin}/scenario?key=${encodeURIComponent(key)}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(scenario),
    });
    expect(set.ok).toBe(true);
    const admitted = await t.client.postMessage(`conv-${key}`, { clientMessageId: key, content: `[${key}] record the effect` });
    expect(admitted.status).toBe(201);
    const runId = admitted.body.runId;
    const events = await t.waitForSettlement(runId, 60_000);
    const receipts = ofType(events, 'tool.call.receipt').map((r) => r.event.data);
    withToolTrace(runId, events, () => {
      expect(receipts.map((r) => [r.status, r.error?.code])).toEqual([
        ['unknown', 'timeout'],
        ['denied', 'unknown_effect_needs_reconciliation'],
      ]);
      expect(ofType(events, 'tool.call.dispatched')).toHaveLength(1);
    });
    // the first call's own late completion is the one execution
    await eventually(
      async () => (ofType(await t.log.readRun(runId), 'tool.call.late_observed').length === 1 ? true : null),
      30_000,
      'the late observation',
    );
    expect(effectsOf(runId)).toHaveLength(1);
    const settled = ofType(events, 'run.settled')[0]!.event.data;
    expect(settled.outcome).toBe('partial');
    expect(settled.reason).toContain(receipts[0]!.toolCallId);
  }, 90_000);
});
