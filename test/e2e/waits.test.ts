/**
 * Human waits and child Runs (K7, K10) against the real processes, NATS JetStream and PostgreSQL:
 * a Run parks on a question (`ask_human`) holding no lease, survives kill -9 and restart of every
 * service, is answered once over HTTP (repeats, conflicts, blanks and unknown waits append
 * nothing), and continues at the next lease epoch without re-running the tool of its batch; an
 * unanswered wait expires and settles the Run `failed`; a parent spawns a child Run with a carved
 * grant, is woken exactly once by the child's settlement, and is not re-spawned nor asks the model
 * anything while parked, even when its runtime is killed. `record_effect` counts executions where
 * the effect happens; the scripted model counts requests per scenario key.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kvm } from '@nats-io/kv';
import type { StoredEvent } from '@runplane/contracts';
import { RunplaneHttpError } from '@runplane/client';
import type { ServiceName } from '@runplane/devstack';
import { effectsOf, kill9, modelRequestsFor, ofType, sleep, until, waitForType } from '../support/faults.js';
import { eventually, scriptParentAndChild, startTestStack, type TestStack } from '../support/stack.js';

const LEASE_TTL_MS = 1_500;
const WAIT_TTL_SECONDS = 25;
const dir = mkdtempSync(join(tmpdir(), 'rp-waits-'));
const effectFile = join(dir, 'effects.log');

let t: TestStack;
beforeAll(async () => {
  t = await startTestStack(
    'waits',
    {
      RUNPLANE_LEASE_TTL_MS: String(LEASE_TTL_MS),
      RUNPLANE_RECOVERY_SWEEP_MS: '100',
      RUNPLANE_ACK_WAIT_MS: '2000',
      RUNPLANE_TEST_TOOLS: 'record_effect',
      RUNPLANE_RECORD_EFFECT_FILE: effectFile,
      RUNPLANE_WAIT_TTL_SECONDS: String(WAIT_TTL_SECONDS),
    },
    { audit: 'strict' },
  );
}, 120_000);
afterAll(async () => {
  await t?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** The Run's lease value in the `<prefix>_leases` bucket (null when there is none). */
type LeaseSeen = { state: string; epoch: number; reason?: string; wakeBy?: string };
async function leaseOf(runId: string): Promise<LeaseSeen | null> {
  const kv = await new Kvm(t.log.nc).open(`${t.env.RUNPLANE_SUBJECT_PREFIX}_leases`);
  const e = await kv.get(runId);
  return e && e.operation === 'PUT' ? e.json<LeaseSeen>() : null;
}

/** Chat request bodies the scripted model received whose user message contains `key`. */
async function bodiesFor(key: string): Promise<{ messages: { role: string; content: unknown; tool_call_id?: string }[] }[]> {
  const res = await fetch(`${t.stack.modelUrl.replace(/\/v1$/, '/_scripted')}/stats`);
  const body = (await res.json()) as { bodies: { messages?: { role: string; content: unknown }[] }[] };
  return body.bodies.filter((b) => b.messages?.some((m) => m.role === 'user' && String(m.content).includes(key))) as never;
}

/** The content of the tool message answering `toolCallId` (the runtime prefixes the model's ids with `t<turn>-<index>-`) in the n-th (0-based) chat request for `key`, parsed. */
async function toolResultIn(key: string, n: number, toolCallId: string): Promise<unknown> {
  const bodies = await bodiesFor(key);
  const msg = bodies[n]?.messages.find((m) => m.role === 'tool' && m.tool_call_id?.endsWith(`-${toolCallId}`));
  if (!msg)
    throw new Error(
      `no tool message for ${toolCallId} in request ${n} of ${key}: ${bodies.length} request(s); messages of it: ${JSON.stringify(bodies[n]?.messages.slice(1))}`,
    );
  return JSON.parse(String(msg.content));
}

async function httpError(p: Promise<unknown>): Promise<RunplaneHttpError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof RunplaneHttpError) return e;
    throw e;
  }
  throw new Error('expected an HTTP error');
}

/** A scenario: turn 1 records an effect and asks the human; turn 2 answers with `final`. */
async function scriptQuestion(key: string, question: string, final: string): Promise<void> {
  await t.setScenario(
    {
      steps: [
        {
          reply: {
            content: '',
            toolCalls: [
              { id: `call_fx_${key}`, name: 'record_effect', arguments: { tag: key } },
              { id: `call_ask_${key}`, name: 'ask_human', arguments: { question } },
            ],
          },
        },
        { reply: { content: final } },
      ],
      then: 'error',
    },
    key,
  );
}

async function parked(runId: string): Promise<StoredEvent[]> {
  const events = await waitForType(t, runId, 'wait.opened');
  await eventually(async () => ((await leaseOf(runId))?.reason === 'parked' ? true : null), 15_000, 'the lease released parked');
  return events;
}

const ALL: ServiceName[] = ['runtime', 'tools', 'admission', 'lifecycle', 'recovery', 'publication', 'projector'];

describe('a Run parked on a question for a human (K10)', () => {
  it('a parked Run survives kill -9 and restart of every service, and is answered afterwards', async () => {
    const key = `killall-${t.tag}`;
    await scriptQuestion(key, 'Which year?', 'Answered for the year you named.');
    const { body } = await t.client.postMessage('conv-waits', { clientMessageId: key, content: `[${key}] What changed?` });
    const runId = body.runId;
    const events = await parked(runId);
    const waitId = ofType(events, 'wait.opened')[0]!.data.waitId;
    await until(t, runId, (ev) => ofType(ev, 'tool.call.receipt').length === 1, 20_000, 'the receipt of record_effect');
    const killedAt = Date.now();
    for (const name of ALL) await kill9(t, name);
    // all at once: one after the other, under the suite's load, the restarts outlasted the wait's
    // 25 s life and recovery rightly fenced the Run wait-expired (CI, 2026-12-01)
    await Promise.all(ALL.map((name) => t.stack.startService(name)));
    process.stdout.write(`waits: every service killed and restarted in ${Date.now() - killedAt} ms while the Run was parked\n`);
    await sleep(2 * LEASE_TTL_MS);
    const between = await t.log.readRun(runId);
    expect(ofType(between, 'run.fenced')).toHaveLength(0);
    expect(ofType(between, 'run.settled')).toHaveLength(0);
    expect(await modelRequestsFor(t, key)).toBe(1);
    expect((await t.client.answerWait(runId, waitId, '2024')).status).toBe(202);
    const done = await t.waitForSettlement(runId, 30_000);
    expect(ofType(done, 'run.settled').map((s) => s.data.outcome)).toEqual(['completed']);
    expect(await modelRequestsFor(t, key)).toBe(2);
    expect(effectsOf(effectFile, runId)).toHaveLength(1);
  }, 180_000);

  it('parks holding no lease and asking nothing, is answered once (repeat 200, other answer 409, blank 400, unknown 404), continues at epoch 2 and completes with the answer; the tool of its batch ran once', async () => {
    // the expiry case's Run (last in the file) parks now and expires while this case and the child-Run cases run
    startExpiringRun().catch(() => {}); // its failure, if any, is reported by that case
    const key = `ask-${t.tag}`;
    await scriptQuestion(key, 'Which share class do you mean?', 'Using the class you named: done.');
    const { body } = await t.client.postMessage('conv-waits', { clientMessageId: key, content: `[${key}] Compare the share classes` });
    const runId = body.runId;
    const events = await parked(runId);
    const opened = ofType(events, 'wait.opened');
    expect(opened).toHaveLength(1);
    const waitId = opened[0]!.data.waitId;
    expect(opened[0]!.data.question).toBe('Which share class do you mean?');
    const expiresIn = Date.parse(opened[0]!.data.expiresAt) - Date.parse(opened[0]!.occurredAt);
    expect(expiresIn).toBe(WAIT_TTL_SECONDS * 1000);
    // the ordinary call of the same batch was proposed, executed and has its receipt; the question was never proposed to the tools
    await until(t, runId, (ev) => ofType(ev, 'tool.call.receipt').length === 1, 20_000, 'the receipt of record_effect');
    const proposed = ofType(await t.log.readRun(runId), 'tool.call.proposed');
    expect(proposed.map((p) => p.data.name)).toEqual(['record_effect']);

    // parked: status awaiting_human, the wait listed pending, no lease held, no model request meanwhile
    const view = await eventually(async () => {
      const v = await t.client.getRun(runId);
      return v?.status === 'awaiting_human' ? v : null;
    });
    expect(view.outcome).toBeNull();
    const waits = await t.client.listWaits(runId);
    expect(waits.waits.map((w) => [w.waitId, w.status])).toEqual([[waitId, 'pending']]);
    expect((await leaseOf(runId))?.state).toBe('released');
    await sleep(3 * LEASE_TTL_MS);
    expect(await modelRequestsFor(t, key)).toBe(1);
    expect(ofType(await t.log.readRun(runId), 'run.fenced')).toHaveLength(0);

    // the refusals append nothing
    expect((await httpError(t.client.answerWait(runId, waitId, '   '))).status).toBe(400);
    expect((await httpError(t.client.answerWait(runId, 'no-such-wait', 'Class A'))).status).toBe(404);
    expect((await httpError(t.client.answerWait('no-such-run', waitId, 'Class A'))).status).toBe(404);

    const accepted = await t.client.answerWait(runId, waitId, 'Class A shares', { user: 'ana' });
    expect(accepted.status).toBe(202);
    expect(accepted.body).toMatchObject({ waitId, status: 'answered', answer: 'Class A shares', answeredBy: 'ana', recording: 'recorded' });
    const repeat = await t.client.answerWait(runId, waitId, 'Class A shares');
    expect(repeat.status).toBe(200);
    expect(repeat.body.recording).toBe('existing');
    const other = await httpError(t.client.answerWait(runId, waitId, 'Class B shares'));
    expect(other.status).toBe(409);
    expect(other.problem?.code).toBe('wait_conflict');

    const settledEvents = await t.waitForSettlement(runId, 30_000);
    const settled = ofType(settledEvents, 'run.settled');
    expect(settled).toHaveLength(1);
    expect(settled[0]!.data.outcome).toBe('completed');
    expect(ofType(settledEvents, 'wait.answered')).toHaveLength(1);
    // woken at the next epoch; every runtime event after the wake carries it
    expect(ofType(settledEvents, 'lease.granted').map((l) => l.data.epoch)).toEqual([1, 2]);
    const answeredSeq = settledEvents.find((e) => e.event.type === 'wait.answered')!.seq;
    const afterWake = settledEvents.filter((e) => e.event.owner === 'runtime' && e.seq > answeredSeq);
    expect(afterWake.length).toBeGreaterThan(0);
    expect(afterWake.every((e) => e.event.writer?.epoch === 2)).toBe(true);
    // the answer is the result of the ask_human call in the next model request
    expect(await modelRequestsFor(t, key)).toBe(2);
    expect(await toolResultIn(key, 1, `call_ask_${key}`)).toMatchObject({
      status: 'succeeded',
      result: { answer: 'Class A shares', answeredBy: 'ana' },
    });
    // the tool of the question's batch was executed exactly once, before and after the wake
    expect(effectsOf(effectFile, runId)).toHaveLength(1);
    // a repeat after the settlement still appends nothing; the wait is listed answered
    expect((await t.client.answerWait(runId, waitId, 'Class A shares')).status).toBe(200);
    expect(ofType(await t.log.readRun(runId), 'wait.answered')).toHaveLength(1);
    expect((await t.client.listWaits(runId)).waits[0]!.status).toBe('answered');
    const final = await eventually(async () => {
      const v = await t.client.getRun(runId);
      return v?.status === 'settled' ? v : null;
    });
    expect(final.outcome).toBe('completed');
  }, 120_000);
});

/**
 * The Run of the expiry case, admitted and parked on first use: the answered-question case starts
 * it (after the case that kills every service), and the 25 s of its wait run out while that case
 * and the child-Run cases run (it holds no lease and shares no key, conversation or tool file line
 * with them); the expiry case, last in the file, checks it. Resolves with its key, run id and
 * events up to the park.
 */
let expiring: Promise<{ key: string; runId: string; events: StoredEvent[] }> | null = null;
function startExpiringRun() {
  expiring ??= (async () => {
    const key = `expire-${t.tag}`;
    await scriptQuestion(key, 'Anyone there?', 'unused');
    const { body } = await t.client.postMessage('conv-waits-expire', { clientMessageId: key, content: `[${key}] Ask me something` });
    return { key, runId: body.runId, events: await parked(body.runId) };
  })();
  return expiring;
}

describe('a child Run (K7, K10)', () => {
  it('is admitted once with a grant carved from its parent, settles, and wakes the parent exactly once with its result', async () => {
    const parentKey = `parent-${t.tag}`;
    const childKey = `kid-${t.tag}`;
    await scriptParentAndChild(t, parentKey, childKey, { reply: { content: 'DIA holds the 30 Dow stocks.' } });
    const { body } = await t.client.postMessage('conv-children', { clientMessageId: parentKey, content: `[${parentKey}] Research DIA` });
    const runId = body.runId;
    const requested = ofType(await waitForType(t, runId, 'child.run.requested'), 'child.run.requested')[0]!;
    const childRunId = requested.data.childRunId;
    const childEvents = await t.waitForSettlement(childRunId, 30_000);
    const admitted = ofType(childEvents, 'run.admitted')[0]!;
    expect(admitted.data.link).toEqual({ parentRunId: runId, relation: 'child' });
    expect(admitted.conversationId).toBe(body.conversationId);
    // carved: half of what the parent had left after its turn 1 (8 - 1 -> 3 model requests, 16 -> 8 tool calls), no parking tools
    expect(admitted.data.limits.maxModelRequests).toBe(3);
    expect(admitted.data.limits.maxToolCalls).toBe(8);
    expect(Date.parse(admitted.data.limits.deadlineAt)).toBeLessThan(
      Date.parse(ofType(await t.log.readRun(runId), 'run.admitted')[0]!.data.limits.deadlineAt),
    );
    expect(admitted.data.grant.tools).not.toContain('spawn_subagent');
    expect(admitted.data.grant.tools).not.toContain('ask_human');
    expect(ofType(childEvents, 'run.settled')[0]!.data.outcome).toBe('completed');

    const parentEvents = await t.waitForSettlement(runId, 30_000);
    expect(ofType(parentEvents, 'run.settled').map((s) => s.data.outcome)).toEqual(['completed']);
    const results = ofType(parentEvents, 'child.run.settled');
    expect(results).toHaveLength(1);
    expect(results[0]!.data).toMatchObject({ childRunId, outcome: 'completed', answer: 'DIA holds the 30 Dow stocks.' });
    expect(ofType(parentEvents, 'child.run.requested')).toHaveLength(1);
    expect(ofType(parentEvents, 'lease.granted').map((l) => l.data.epoch)).toEqual([1, 2]);
    expect(await modelRequestsFor(t, parentKey)).toBe(2);
    expect(await modelRequestsFor(t, childKey)).toBe(1);
    expect(await toolResultIn(parentKey, 1, `call_spawn_${parentKey}`)).toMatchObject({
      status: 'succeeded',
      result: { childRunId, answer: 'DIA holds the 30 Dow stocks.' },
    });
    // the projection knows both Runs
    const childView = await eventually(async () => {
      const v = await t.client.getRun(childRunId);
      return v?.status === 'settled' ? v : null;
    });
    expect(childView.outcome).toBe('completed');
  }, 120_000);

  it('kill -9 of the runtime while the child runs: the child is not spawned again, the parent asks the model nothing until its one wake, then completes', async () => {
    const parentKey = `kparent-${t.tag}`;
    const childKey = `kkid-${t.tag}`;
    await scriptParentAndChild(t, parentKey, childKey, { reply: { content: 'never delivered' }, delayMs: 8_000 });
    const { body } = await t.client.postMessage('conv-children', { clientMessageId: parentKey, content: `[${parentKey}] Research DIA` });
    const runId = body.runId;
    const requested = ofType(await waitForType(t, runId, 'child.run.requested'), 'child.run.requested')[0]!;
    const childRunId = requested.data.childRunId;
    await eventually(async () => ((await modelRequestsFor(t, childKey)) >= 1 ? true : null), 20_000, "the child's model request");
    await eventually(async () => ((await leaseOf(runId))?.reason === 'parked' ? true : null), 10_000, 'the parent parked');
    await kill9(t, 'runtime');
    await t.stack.startService('runtime');
    // the child's execution died with the runtime: it is settled interrupted (K10), and that result wakes the parent once
    const childEvents = await t.waitForSettlement(childRunId, 30_000);
    expect(ofType(childEvents, 'run.settled').map((s) => s.data.outcome)).toEqual(['interrupted']);
    const parentEvents = await t.waitForSettlement(runId, 30_000);
    expect(ofType(parentEvents, 'run.settled').map((s) => s.data.outcome)).toEqual(['completed']);
    // never fenced for the lost runtime: only the closing fences of its settlement (reason settling)
    expect(ofType(parentEvents, 'run.fenced').filter((f) => f.data.reason !== 'settling')).toHaveLength(0);
    expect(ofType(parentEvents, 'child.run.requested')).toHaveLength(1);
    expect(ofType(childEvents, 'run.admitted')).toHaveLength(1);
    const results = ofType(parentEvents, 'child.run.settled');
    expect(results.map((r) => r.data.outcome)).toEqual(['interrupted']);
    // no model request of the parent between its park and its wake: its turn 2 was requested after the child's result
    const resultSeq = parentEvents.find((e) => e.event.type === 'child.run.settled')!.seq;
    const turns = parentEvents.filter((e) => e.event.type === 'model.turn.requested');
    expect(turns).toHaveLength(2);
    expect(turns[1]!.seq).toBeGreaterThan(resultSeq);
    expect(await modelRequestsFor(t, parentKey)).toBe(2);
    expect(await modelRequestsFor(t, childKey)).toBe(1);
    expect(await toolResultIn(parentKey, 1, `call_spawn_${parentKey}`)).toMatchObject({ status: 'failed', error: { code: 'child_interrupted' } });
  }, 120_000);

  it('a cancel of the parked parent settles it canceled and cancels the child still running', async () => {
    const parentKey = `cparent-${t.tag}`;
    const childKey = `ckid-${t.tag}`;
    await scriptParentAndChild(t, parentKey, childKey, { reply: { content: 'too slow' }, delayMs: 20_000 });
    const { body } = await t.client.postMessage('conv-children', { clientMessageId: parentKey, content: `[${parentKey}] Research DIA` });
    const runId = body.runId;
    const childRunId = ofType(await waitForType(t, runId, 'child.run.requested'), 'child.run.requested')[0]!.data.childRunId;
    await eventually(async () => ((await modelRequestsFor(t, childKey)) >= 1 ? true : null), 20_000, "the child's model request");
    await t.client.cancelRun(runId, { reason: 'changed my mind' });
    const parentEvents = await t.waitForSettlement(runId, 30_000);
    expect(ofType(parentEvents, 'run.settled').map((s) => s.data.outcome)).toEqual(['canceled']);
    const childEvents = await t.waitForSettlement(childRunId, 30_000);
    expect(ofType(childEvents, 'run.settled').map((s) => s.data.outcome)).toEqual(['canceled']);
    expect(ofType(childEvents, 'run.cancel.requested')[0]!.data.reason).toMatch(/parent Run/);
    expect(await modelRequestsFor(t, parentKey)).toBe(1);
  }, 120_000);
});

// last: its Run was admitted when the answered-question case began, so its wait ran out while the cases above ran
describe('a Run parked on a question for a human (K10)', () => {
  it('an unanswered wait expires: the Run is fenced wait-expired and settled failed once; a late answer is 409', async () => {
    // admitted when the answered-question case began (startExpiringRun): its wait's 25 s ran out while the cases above ran
    const { key, runId, events } = await startExpiringRun();
    const opened = ofType(events, 'wait.opened')[0]!;
    const done = await t.waitForSettlement(runId, (WAIT_TTL_SECONDS + 20) * 1000);
    const settled = ofType(done, 'run.settled');
    expect(settled).toHaveLength(1);
    expect(settled[0]!.data.outcome).toBe('failed');
    expect(settled[0]!.data.reason).toMatch(/wait-expired/);
    expect(ofType(done, 'run.fenced').map((f) => f.data.reason)).toEqual(['wait-expired', 'wait-expired']);
    const settledAfterExpiry = Date.parse(settled[0]!.occurredAt) - Date.parse(opened.data.expiresAt);
    expect(settledAfterExpiry).toBeGreaterThanOrEqual(0);
    process.stdout.write(`waits: expired wait settled ${settledAfterExpiry} ms after its expiry\n`);
    const late = await httpError(t.client.answerWait(runId, opened.data.waitId, 'too late'));
    expect(late.status).toBe(409);
    expect(late.problem?.code).toBe('wait_not_pending');
    expect(ofType(await t.log.readRun(runId), 'wait.answered')).toHaveLength(0);
    expect(await modelRequestsFor(t, key)).toBe(1);
  }, 120_000);
});
