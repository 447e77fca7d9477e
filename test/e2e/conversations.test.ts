/**
 * Conversations end to end (K1, K2, K3) against the real services, JetStream and PostgreSQL, one
 * stack for every row: the message identity matrix (new, repeat, conflicts naming the field, 50
 * concurrent duplicates, the lost answer read back by id, a duplicate publish and a replayed copy
 * of the admission that execute nothing again, the same decisions after a projections rebuild),
 * the content checks with raw HTTP bytes, the conversation index recorded as each Run's history,
 * explicit Continue with parents produced in every state by scripted model scenarios (eligibility
 * read from the parent's log), clarification answers, and a follow-up after a canceled Run.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';
import { admissionIds, clarificationReplyRunId } from '@runplane/app-admission';
import { clarificationIdOf, makeEvent, sha256Hex, type RunEvent, type RunEventOf, type StoredEvent } from '@runplane/contracts';
import { natsEnvOf, repoRoot } from '@runplane/devstack';
import { natsUserOptions, runSubject } from '@runplane/eventlog';
import { forgedSettlement } from '../support/events.js';
import { waitForType } from '../support/faults.js';
import { eventually, startTestStack, type TestStack } from '../support/stack.js';

const dir = mkdtempSync(join(tmpdir(), 'rp-conv-'));
const effectFile = join(dir, 'effects.log');
let t: TestStack;
beforeAll(async () => {
  t = await startTestStack(
    'conv',
    {
      RUNPLANE_TEST_TOOLS: 'record_effect',
      RUNPLANE_RECORD_EFFECT_FILE: effectFile,
      RUNPLANE_RECOVERY_SWEEP_MS: '100',
      RUNPLANE_LEASE_TTL_MS: '1500',
      // no drain: a SIGTERM mid-turn interrupts the Run (the parent "interrupted by lost execution ownership" below)
      RUNPLANE_DRAIN_SECONDS: '0',
    },
    { audit: 'report', removeOnStop: [dir] },
  ); // forges events on the bus
}, 120_000);
afterAll(async () => {
  await t?.stop();
});

type Json = Record<string, unknown>;
const ofType = <T extends RunEvent['type']>(events: StoredEvent[], type: T) =>
  events.filter((e) => e.event.type === type).map((e) => e.event as RunEventOf<T>);

/** POSTs a message body (an object as JSON, or raw bytes) and returns the status and JSON body. */
async function post(conversationId: string, body: Json | Uint8Array): Promise<{ status: number; body: Json }> {
  const res = await fetch(`${t.stack.endpoints.admission}/v1/conversations/${conversationId}/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: body instanceof Uint8Array ? body : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Json };
}

async function getMessage(conversationId: string, clientMessageId: string): Promise<{ status: number; body: Json }> {
  const res = await fetch(`${t.stack.endpoints.admission}/v1/conversations/${conversationId}/messages/${clientMessageId}`);
  return { status: res.status, body: (await res.json()) as Json };
}

const admittedOf = async (runId: string) => ofType(await t.log.readRun(runId), 'run.admitted')[0]!;

async function waitFor(runId: string, type: RunEvent['type'], timeoutMs = 30_000): Promise<StoredEvent[]> {
  return waitForType(t, runId, type, timeoutMs);
}

async function modelRequestsFor(key: string): Promise<number> {
  const res = await fetch(`${t.stack.modelUrl.replace(/\/v1$/, '/_scripted')}/stats`);
  return ((await res.json()) as { perKey?: Record<string, number> }).perKey?.[key] ?? 0;
}

function effectsOf(runId: string): string[] {
  if (!existsSync(effectFile)) return [];
  return readFileSync(effectFile, 'utf8')
    .split('\n')
    .filter((l) => l.startsWith(`${runId} `));
}

/** Posts `[key] question` in `conv` with a scenario bound to `key`; resolves with the Run id. */
async function ask(conv: string, key: string, steps: unknown[], extra: Json = {}): Promise<string> {
  await t.setScenario({ steps, then: 'error' }, key);
  const res = await post(conv, { clientMessageId: key, content: `[${key}] Compare SPY and QQQ`, ...extra });
  expect(res.status).toBe(201);
  return res.body.runId as string;
}

const GAPS = [{ part: 'holdings of XYZ', reason: 'no holdings file for XYZ in the data' }];
const BLOCK = `\`\`\`json runplane-unanswered\n${JSON.stringify({ unanswered: GAPS })}\n\`\`\``;

describe('K1: message identity', () => {
  const conv = 'conv-k1';
  it('new id 201; same id and text 200 with the same ids and no event; other text or another parent 409 naming the field, changing nothing', async () => {
    const runId = await ask(conv, 'k1-first', [{ reply: { content: 'SPY and QQQ overlap by half.' } }]);
    const before = await t.waitForSettlement(runId);
    const again = await post(conv, { clientMessageId: 'k1-first', content: '[k1-first] Compare SPY and QQQ' });
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ runId, admission: 'existing', link: null });

    const text = await post(conv, { clientMessageId: 'k1-first', content: 'Compare SPY and DIA' });
    expect(text.status).toBe(409);
    expect(text.body).toMatchObject({ code: 'message_conflict', field: 'content' });

    const parent = await post(conv, { clientMessageId: 'k1-first', content: '[k1-first] Compare SPY and QQQ', continuationOfRunId: runId });
    expect(parent.status).toBe(409);
    expect(parent.body).toMatchObject({ code: 'message_conflict', field: 'continuationOfRunId' });

    expect((await t.log.readRun(runId)).map((e) => e.seq)).toEqual(before.map((e) => e.seq));
    // the lost answer, read back by id (never by text)
    const outcome = await getMessage(conv, 'k1-first');
    expect(outcome.status).toBe(200);
    expect(outcome.body).toMatchObject({ runId, messageId: again.body.messageId, status: 'settled', outcome: 'completed', link: null });
    const unknown = await getMessage(conv, 'k1-never-sent');
    expect(unknown.status).toBe(404);
    expect(unknown.body).toMatchObject({ code: 'not_found' });
  }, 90_000);

  it('50 concurrent submissions of one id: one Message, one Run, one admission event; one 201 and 49 x 200 with the same ids', async () => {
    await t.setScenario({ steps: [{ reply: { content: 'The fifty answer.' }, delayMs: 300 }], then: 'error' }, 'k1-fifty');
    const body = { clientMessageId: 'k1-fifty', content: '[k1-fifty] What does DIA hold?' };
    const results = await Promise.all(Array.from({ length: 50 }, () => post(conv, body)));
    expect(results.filter((r) => r.status === 201)).toHaveLength(1);
    expect(results.filter((r) => r.status === 200)).toHaveLength(49);
    expect(new Set(results.map((r) => r.body.runId)).size).toBe(1);
    expect(new Set(results.map((r) => r.body.messageId)).size).toBe(1);
    const runId = results[0]!.body.runId as string;
    const events = await t.waitForSettlement(runId);
    expect(ofType(events, 'run.admitted')).toHaveLength(1);
    expect(ofType(events, 'run.settled')).toHaveLength(1);
    expect(await modelRequestsFor('k1-fifty')).toBe(1);
  }, 90_000);

  it('a duplicate publish of run.admitted (same Nats-Msg-Id) and a replayed copy delivered again to every consumer execute nothing again: the tool ran once', async () => {
    const key = 'k1-dup';
    const runId = await ask(conv, key, [
      { reply: { content: '', toolCalls: [{ name: 'record_effect', arguments: { tag: key } }] } },
      { reply: { content: `Recorded the effect for ${key}.` } },
    ]);
    const before = await t.waitForSettlement(runId);
    expect(effectsOf(runId)).toHaveLength(1);
    const requests = await modelRequestsFor(key);
    const stored = before.find((e) => e.event.type === 'run.admitted')!;
    const nc = await connect({
      servers: t.env.NATS_URL!,
      ...natsUserOptions(t.users.admission.user, t.users.admission.password),
      ...t.tls,
      reconnect: false,
    });
    try {
      const js = jetstream(nc);
      const dup = await js.publish(stored.subject, JSON.stringify(stored.event), { msgID: stored.event.eventId });
      expect(dup.duplicate).toBe(true); // de-duplicated by the log: nothing stored
      // a copy under another message id is stored and delivered to every consumer again (a forced redelivery)
      const copy = await js.publish(stored.subject, JSON.stringify(stored.event), { msgID: `${stored.event.eventId}-again` });
      expect(copy.duplicate).toBe(false);
    } finally {
      await nc.close();
    }
    await new Promise((r) => setTimeout(r, 3_000));
    expect(effectsOf(runId)).toHaveLength(1);
    expect(await modelRequestsFor(key)).toBe(requests);
    const after = await t.log.readRun(runId);
    expect(ofType(after, 'tool.call.dispatched')).toHaveLength(1);
    expect(ofType(after, 'run.settled')).toHaveLength(1);
    expect(ofType(after, 'model.turn.requested')).toHaveLength(ofType(before, 'model.turn.requested').length);
  }, 90_000);
});

describe('content checks: 400 with a reason, nothing appended', () => {
  const conv = 'conv-content';
  it.each([
    ['only zero-width characters', '\u200B\u200C\u200D\u2060\uFEFF'],
    ['only combining marks', '\u0301\u0308\u20DD'],
    ['only Hangul fillers', '\u3164\u115F\u1160 \uFFA0'],
    ['whitespace and zero-width', ' \u200B \u00A0 \u3000 '],
    ['a bidirectional override', 'Compare \u202ESPY\u202C and QQQ'],
    ['a bidirectional isolate', 'Compare \u2066SPY\u2069 and QQQ'],
  ])('%s', async (name, content) => {
    const clientMessageId = `content-${name.replace(/[^a-z]/g, '-')}`;
    const res = await post(conv, { clientMessageId, content });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ code: 'invalid_body' });
    expect((res.body.issues as { path: string }[]).map((i) => i.path)).toContain('content');
    expect(await t.log.readRun(admissionIds(conv, clientMessageId).runId)).toEqual([]);
  });

  it('bytes that are not UTF-8 in the JSON body: 400 bad_request, never read as U+FFFD', async () => {
    const head = Buffer.from('{"clientMessageId":"content-bytes","content":"Compare SPY ', 'utf8');
    const bytes = new Uint8Array(Buffer.concat([head, Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from(' and QQQ"}', 'utf8')]));
    const res = await post(conv, bytes);
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ code: 'bad_request' });
    expect(String(res.body.detail)).toMatch(/UTF-8/);
    expect(await t.log.readRun(admissionIds(conv, 'content-bytes').runId)).toEqual([]);
  });
});

/** Parents of every state, produced by scripted scenarios, in one conversation. */
const CONV = 'conv-k3';
const parents: Record<string, string> = {};

describe('K3: explicit Continue, eligibility read from the parent log', () => {
  beforeAll(async () => {
    parents.completed = await ask(CONV, 'p-completed', [{ reply: { content: 'SPY and QQQ overlap by half.' } }]);
    parents.partial = await ask(CONV, 'p-partial', [{ reply: { content: `SPY and QQQ overlap.\n\nNot answered: XYZ.\n${BLOCK}` } }]);
    parents.failed = await ask(CONV, 'p-failed', [{ error: { status: 400, message: 'the model refused the request' } }]);
    for (const id of [parents.completed, parents.partial, parents.failed]) await t.waitForSettlement(id);

    // canceled mid-turn
    parents.canceled = await ask(CONV, 'p-canceled', [{ reply: { content: 'too late' }, delayMs: 8_000 }]);
    await waitFor(parents.canceled, 'model.turn.requested');
    await t.client.cancelRun(parents.canceled, { reason: 'wrong funds' });
    // interrupted: the runtime stopped mid-turn (lost execution ownership)
    parents.interrupted = await ask(CONV, 'p-interrupted', [{ reply: { content: 'never seen' }, delayMs: 8_000 }]);
    await waitFor(parents.interrupted, 'model.turn.requested');
    await eventually(async () => ((await modelRequestsFor('p-interrupted')) >= 1 ? true : null), 10_000, 'the model request');
    await t.stack.stopService('runtime');
    await t.waitForSettlement(parents.interrupted, 30_000);
    await t.stack.startService('runtime');
    // interrupted: the runtime killed with SIGKILL mid-turn, its lease expired (transport loss)
    parents.lost = await ask(CONV, 'p-lost', [{ reply: { content: 'never seen' }, delayMs: 8_000 }]);
    await waitFor(parents.lost, 'model.turn.requested');
    await eventually(async () => ((await modelRequestsFor('p-lost')) >= 1 ? true : null), 10_000, 'the model request');
    const runtime = t.stack.services.get('runtime')!;
    const exited = new Promise((r) => runtime.child.once('exit', r));
    runtime.child.kill('SIGKILL');
    await exited;
    await t.waitForSettlement(parents.lost, 30_000);
    // settled without any model turn (a synthetic state no producer emits today): forged while no runtime
    // and no lifecycle runs (a lifecycle would settle the forged fences itself, with the same event id)
    await t.stack.stopService('lifecycle');
    parents.noTurn = await forgeSettledWithoutTurn(CONV, 'p-noturn');
    await t.stack.startService('lifecycle');
    await t.stack.startService('runtime');
    await t.waitForSettlement(parents.canceled, 30_000);
    // still running: its model answers only after 20 s
    parents.running = await ask(CONV, 'p-running', [{ reply: { content: 'slow' }, delayMs: 20_000 }]);
    await waitFor(parents.running, 'model.turn.requested');
  }, 120_000);

  afterAll(async () => {
    if (parents.running) await t.client.cancelRun(parents.running).catch(() => undefined);
  });

  const outcome = async (runId: string) => ofType(await t.log.readRun(runId), 'run.settled')[0]?.data.outcome ?? null;

  it('the parents are in the states the rows need, as their logs say', async () => {
    expect(await outcome(parents.completed!)).toBe('completed');
    expect(await outcome(parents.partial!)).toBe('partial');
    expect(await outcome(parents.failed!)).toBe('failed');
    expect(await outcome(parents.canceled!)).toBe('canceled');
    expect(await outcome(parents.interrupted!)).toBe('interrupted');
    expect(await outcome(parents.lost!)).toBe('interrupted');
    expect(ofType(await t.log.readRun(parents.interrupted!), 'run.fenced')[0]!.data.reason).toBe('runtime-stopped');
    expect(ofType(await t.log.readRun(parents.lost!), 'run.fenced')[0]!.data.reason).toBe('lease-expired');
    expect(await outcome(parents.noTurn!)).toBe('completed');
    expect(await outcome(parents.running!)).toBeNull();
  });

  it.each(['completed', 'partial', 'interrupted', 'lost'])(
    'a %s parent: 201, a new Run linked to it with its request hash and a fresh grant and limits; nothing appended to the parent',
    async (state) => {
      const parentId = parents[state]!;
      const parentBefore = await t.log.readRun(parentId);
      const parentAdmitted = ofType(parentBefore, 'run.admitted')[0]!;
      const clientMessageId = `continue-${state}`;
      await t.setScenario({ steps: [{ reply: { content: `Continued ${state}.` } }], then: 'error' }, clientMessageId);
      const res = await post(CONV, { clientMessageId, content: `[${clientMessageId}] Continue that comparison`, continuationOfRunId: parentId });
      expect(res.status).toBe(201);
      expect(res.body).toMatchObject({ admission: 'admitted', link: { parentRunId: parentId, relation: 'continuation' } });
      const child = await admittedOf(res.body.runId as string);
      expect(child.data.link).toEqual({ parentRunId: parentId, relation: 'continuation' });
      expect(child.data.parentRequestSha256).toBe(parentAdmitted.data.message.contentSha256);
      expect(child.data.parentRequestSha256).toBe(sha256Hex(parentAdmitted.data.message.content));
      // its own admission: the grant and limits of the current configuration, a deadline of its own
      expect(child.data.grant).toEqual(parentAdmitted.data.grant);
      expect(child.data.limits.maxModelRequests).toBe(parentAdmitted.data.limits.maxModelRequests);
      expect(Date.parse(child.data.limits.deadlineAt)).toBeGreaterThan(Date.parse(parentAdmitted.data.limits.deadlineAt));
      expect(child.data.conversationHistory?.runIds).toContain(parentId);
      // the same Continue again is the same Run
      const again = await post(CONV, { clientMessageId, content: `[${clientMessageId}] Continue that comparison`, continuationOfRunId: parentId });
      expect(again.status).toBe(200);
      expect(again.body.runId).toBe(res.body.runId);
      await t.waitForSettlement(res.body.runId as string, 60_000);
      expect((await t.log.readRun(parentId)).map((e) => e.seq)).toEqual(parentBefore.map((e) => e.seq));
    },
    90_000,
  );

  it.each([
    ['canceled', 409, 'continuation_not_eligible', 'canceled'],
    ['failed', 409, 'continuation_not_eligible', 'failed'],
    ['running', 409, 'continuation_not_eligible', 'running'],
    ['noTurn', 409, 'continuation_not_eligible', 'no-execution'],
  ])('a %s parent: %i %s (%s); nothing is created', async (state, status, code, reason) => {
    const parentId = parents[state]!;
    const parentBefore = await t.log.readRun(parentId);
    const clientMessageId = `continue-${state}`;
    const res = await post(CONV, { clientMessageId, content: 'Continue that comparison', continuationOfRunId: parentId });
    expect(res.status).toBe(status);
    expect(res.body).toMatchObject({ code, reason });
    expect(await t.log.readRun(admissionIds(CONV, clientMessageId).runId)).toEqual([]);
    expect((await getMessage(CONV, clientMessageId)).status).toBe(404);
    expect((await t.log.readRun(parentId)).map((e) => e.seq)).toEqual(parentBefore.map((e) => e.seq));
  });

  it('an unknown parent, or a parent of another conversation: 404 with the same words, nothing of the parent leaks', async () => {
    const unknown = await post(CONV, { clientMessageId: 'continue-unknown', content: 'Continue', continuationOfRunId: 'no-such-run' });
    expect(unknown.status).toBe(404);
    const other = await post('conv-elsewhere', { clientMessageId: 'continue-other', content: 'Continue', continuationOfRunId: parents.completed! });
    expect(other.status).toBe(404);
    expect(other.body.code).toBe('not_found');
    const text = JSON.stringify(other.body);
    expect(text).not.toContain('Compare SPY and QQQ');
    expect(text).not.toContain('overlap');
    expect(String(other.body.detail).replace(parents.completed!, 'X').replace('conv-elsewhere', 'C')).toBe(
      String(unknown.body.detail).replace('no-such-run', 'X').replace(CONV, 'C'),
    );
    expect(await t.log.readRun(admissionIds('conv-elsewhere', 'continue-other').runId)).toEqual([]);
  });

  it('a follow-up after a canceled Run is an ordinary new Run: 201, no link, its history lists the canceled Run; its own text is the message', async () => {
    await t.setScenario({ steps: [{ reply: { content: 'Only the past year: fine.' } }], then: 'error' }, 'followup');
    const res = await post(CONV, { clientMessageId: 'followup', content: '[followup] What about only the past year?' });
    expect(res.status).toBe(201);
    expect(res.body.link).toBeNull();
    const admitted = await admittedOf(res.body.runId as string);
    expect(admitted.data.link).toBeUndefined();
    expect(admitted.data.message.content).toBe('[followup] What about only the past year?');
    const history = admitted.data.conversationHistory!.runIds;
    expect(history).toContain(parents.canceled);
    // the conversation index: every Run admitted before in this conversation, oldest first, none twice
    for (const id of [parents.completed, parents.partial, parents.failed, parents.canceled, parents.interrupted]) expect(history).toContain(id);
    expect(history.indexOf(parents.completed!)).toBeLessThan(history.indexOf(parents.canceled!));
    expect(new Set(history).size).toBe(history.length);
    expect(history).not.toContain(res.body.runId);
    const canceledAfter = await t.log.readRun(parents.canceled!);
    expect(ofType(canceledAfter, 'run.settled')).toHaveLength(1);
    expect(canceledAfter.every((e) => e.event.runId === parents.canceled)).toBe(true);
  }, 60_000);
});

describe('K2: the conversation index', () => {
  it('a repeat of a message repairs its missing index entry (the crash window between the append and the index update)', async () => {
    const conv = 'conv-repair';
    const first = await ask(conv, 'repair-1', [{ reply: { content: 'First.' } }]);
    const second = await ask(conv, 'repair-2', [{ reply: { content: 'Second.' } }]);
    // as if admission had crashed after each append, before its index update: the entry is gone
    const { Kvm } = await import('@nats-io/kv');
    const kv = await new Kvm(t.log.nc).open(`${t.log.space.prefix}_conversations`);
    await kv.purge(conv);
    const repeat = await post(conv, { clientMessageId: 'repair-1', content: '[repair-1] Compare SPY and QQQ' });
    expect(repeat.status).toBe(200);
    expect(repeat.body.runId).toBe(first);
    const third = await ask(conv, 'repair-3', [{ reply: { content: 'Third.' } }]);
    // repaired by the repeat: listed; never repeated: still missing (the documented window)
    expect((await admittedOf(third)).data.conversationHistory!.runIds).toEqual([first]);
    for (const id of [first, second, third]) await t.waitForSettlement(id, 60_000);
  }, 90_000);
});

describe('K2: clarification answers bind only to a registered clarification', () => {
  const conv = 'conv-k2';
  let asker: string;
  let clarificationId: string;
  beforeAll(async () => {
    asker = await ask(conv, 'asker', [{ reply: { content: 'Cumulative or annualized returns?' } }]);
    await t.waitForSettlement(asker);
    // the runtime's ask_clarification tool records this fact (another part); here it is appended as the runtime would
    clarificationId = clarificationIdOf(asker, 'call-clarify');
    const lastRuntime = await t.log.lastOf(asker, 'runtime');
    const lastAdmitted = await admittedOf(asker);
    const e = makeEvent(
      'clarification.requested',
      { runId: asker, conversationId: conv, correlationId: lastAdmitted.correlationId, causationId: null },
      clarificationId,
      { clarificationId, toolCallId: 'call-clarify', turn: 1, question: 'Cumulative or annualized returns?' },
      new Date(),
    );
    await t.log.append(e, lastRuntime!.seq);
  }, 60_000);

  it('a reply naming it: 201, a new Run linked to the asker carrying the question and the original request; the same reply 200; GET by its id resolves', async () => {
    const body = { clientMessageId: 'reply-1', content: 'Annualized', replyTo: { runId: asker, clarificationId } };
    const res = await post(conv, body);
    expect(res.status).toBe(201);
    expect(res.body.runId).toBe(clarificationReplyRunId(conv, clarificationId));
    expect(res.body.link).toEqual({ parentRunId: asker, relation: 'clarification' });
    const admitted = await admittedOf(res.body.runId as string);
    expect(admitted.data.clarification).toEqual({
      clarificationId,
      question: 'Cumulative or annualized returns?',
      originalRequest: '[asker] Compare SPY and QQQ',
    });
    expect(admitted.data.message.content).toBe('Annualized');
    expect(admitted.data.conversationHistory!.runIds).toEqual([asker]);
    const again = await post(conv, body);
    expect(again.status).toBe(200);
    expect(again.body.runId).toBe(res.body.runId);
    const byId = await getMessage(conv, 'reply-1');
    expect(byId.status).toBe(200);
    expect(byId.body).toMatchObject({ runId: res.body.runId, link: { parentRunId: asker, relation: 'clarification' } });
    // nothing appended to the Run that asked
    expect(ofType(await t.log.readRun(asker), 'run.admitted')).toHaveLength(1);
  }, 60_000);

  it('another reply to the answered clarification: 409 clarification_answered; nothing created', async () => {
    const res = await post(conv, { clientMessageId: 'reply-2', content: 'Cumulative', replyTo: { runId: asker, clarificationId } });
    expect(res.status).toBe(409);
    expect(res.body).toMatchObject({ code: 'clarification_answered' });
    expect((await getMessage(conv, 'reply-2')).status).toBe(404);
  });

  it('an unknown clarification, or one of another conversation: 404; ordinary text is never bound to a clarification', async () => {
    const unknown = await post(conv, { clientMessageId: 'reply-3', content: 'Annualized', replyTo: { runId: asker, clarificationId: 'no-such' } });
    expect(unknown.status).toBe(404);
    const elsewhere = await post('conv-k2-other', { clientMessageId: 'reply-4', content: 'Annualized', replyTo: { runId: asker, clarificationId } });
    expect(elsewhere.status).toBe(404);
    await t.setScenario({ steps: [{ reply: { content: 'An ordinary answer.' } }], then: 'error' }, 'plain');
    const plain = await post(conv, { clientMessageId: 'plain', content: '[plain] Annualized, I meant' });
    expect(plain.status).toBe(201);
    expect(plain.body.link).toBeNull();
    expect((await admittedOf(plain.body.runId as string)).data.clarification).toBeUndefined();
    // an id used for an ordinary message cannot also answer the clarification, and the reverse
    const reuse = await post(conv, { clientMessageId: 'plain', content: '[plain] Annualized, I meant', replyTo: { runId: asker, clarificationId } });
    expect(reuse.status).toBe(409);
    expect(reuse.body).toMatchObject({ code: 'message_conflict', field: 'replyTo' });
    const reverse = await post(conv, { clientMessageId: 'reply-1', content: 'Annualized' });
    expect(reverse.status).toBe(409);
    expect(reverse.body).toMatchObject({ code: 'message_conflict', field: 'replyTo' });
    await t.waitForSettlement(plain.body.runId as string);
  }, 60_000);
});

/** Runs the CLI (apps/cli/dist/main.js) asynchronously; resolves with its exit status and output. */
function cli(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ status: number; out: string }> {
  // asynchronous: a blocked event loop would miss the server closing idle keep-alive sockets
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [join(repoRoot(), 'apps/cli/dist/main.js'), ...args],
      { env: { ...t.env, ...env }, encoding: 'utf8', timeout: 90_000 },
      (error, stdout, stderr) => resolve({ status: error ? Number((error as { code?: unknown }).code ?? 1) : 0, out: `${stdout}${stderr}` }),
    );
  });
}

describe('the CLI: continue and reply, with clear refusals', () => {
  const api = { RUNPLANE_ADMISSION_URL: '', RUNPLANE_PUBLICATION_URL: '' };
  beforeAll(() => {
    api.RUNPLANE_ADMISSION_URL = t.stack.endpoints.admission;
    api.RUNPLANE_PUBLICATION_URL = t.stack.endpoints.publication;
  });

  it('continue of a canceled Run: exit 1 saying why, nothing admitted; of a completed one: admitted and linked', async () => {
    const refused = await cli(
      ['continue', parents.canceled!, 'Go on', '--conversation', CONV, '--message-id', 'cli-continue-canceled', '--no-follow'],
      api,
    );
    expect(refused.status).toBe(1);
    expect(refused.out).toMatch(/cannot continue run .* \(canceled\)/);
    expect(await t.log.readRun(admissionIds(CONV, 'cli-continue-canceled').runId)).toEqual([]);
    const unknown = await cli(['continue', 'no-such-run', 'Go on', '--conversation', CONV, '--no-follow'], api);
    expect(unknown.status).toBe(1);
    expect(unknown.out).toMatch(/cannot continue: run no-such-run not found/);
    const ok = await cli(['continue', parents.completed!, 'Go on', '--conversation', CONV, '--message-id', 'cli-continue-ok', '--no-follow'], api);
    expect(ok.status).toBe(0);
    expect(ok.out).toMatch(/admitted, continuing run/);
    expect((await admittedOf(admissionIds(CONV, 'cli-continue-ok').runId)).data.link).toEqual({
      parentRunId: parents.completed,
      relation: 'continuation',
    });
    await t.waitForSettlement(admissionIds(CONV, 'cli-continue-ok').runId, 60_000);
  }, 120_000);

  it('reply to a clarification that does not exist: exit 1 saying so', async () => {
    const res = await cli(['reply', parents.completed!, 'no-such-clarification', 'Annualized', '--conversation', CONV, '--no-follow'], api);
    expect(res.status).toBe(1);
    expect(res.out).toMatch(/cannot answer: .*no clarification no-such-clarification/);
  }, 60_000);
});

describe('K1 after a projections rebuild: the identity is in the log', () => {
  it('drop and rebuild the projections, then the matrix decides the same', async () => {
    // the live projections are compared with the rebuilt ones: let every Run of this file settle and be projected first
    if (parents.running) await t.waitForSettlement(parents.running, 30_000);
    const rebuild = () => cli(['projections', 'rebuild'], natsEnvOf(t.users, 'ops'));
    let rebuilt = await rebuild();
    for (let attempt = 2; attempt <= 5 && rebuilt.status !== 0; attempt++) {
      await new Promise((r) => setTimeout(r, 1_000)); // the projector may still be applying the last events
      rebuilt = await rebuild();
    }
    if (rebuilt.status !== 0) process.stdout.write(`projections rebuild: exit ${rebuilt.status}\n${rebuilt.out}\n`);
    expect(rebuilt.status).toBe(0);
    const same = await post('conv-k1', { clientMessageId: 'k1-first', content: '[k1-first] Compare SPY and QQQ' });
    expect(same.status).toBe(200);
    expect((await post('conv-k1', { clientMessageId: 'k1-first', content: 'Compare SPY and DIA' })).body).toMatchObject({ field: 'content' });
    expect(
      (
        await post('conv-k1', {
          clientMessageId: 'k1-first',
          content: '[k1-first] Compare SPY and QQQ',
          continuationOfRunId: same.body.runId as string,
        })
      ).body,
    ).toMatchObject({ field: 'continuationOfRunId' });
    expect(
      (await post(CONV, { clientMessageId: 'continue-canceled', content: 'Continue that comparison', continuationOfRunId: parents.canceled! }))
        .status,
    ).toBe(409);
    expect(
      (
        await post(CONV, {
          clientMessageId: 'continue-partial',
          content: '[continue-partial] Continue that comparison',
          continuationOfRunId: parents.partial!,
        })
      ).status,
    ).toBe(200);
    expect((await getMessage('conv-k1', 'k1-first')).body).toMatchObject({ runId: same.body.runId });
  }, 120_000);
});

/** Appends, as the admin, a Run that was admitted and settled `completed` without any model turn, closed to executors first. */
async function forgeSettledWithoutTurn(conversationId: string, clientMessageId: string): Promise<string> {
  const { runId, messageId } = admissionIds(conversationId, clientMessageId);
  const ctx = { runId, conversationId, correlationId: messageId, causationId: null };
  const content = 'A question that was never executed';
  const now = new Date();
  const events = [
    makeEvent(
      'run.admitted',
      ctx,
      'admission',
      {
        message: { messageId, clientMessageId, content, contentSha256: sha256Hex(content) },
        grant: { tools: ['list_funds'], model: 'scripted' },
        limits: { maxModelRequests: 2, maxToolCalls: 2, deadlineAt: new Date(now.getTime() + 60_000).toISOString() },
      },
      now,
    ),
    ...(['tools', 'runtime'] as const).map((fencedSubject) =>
      makeEvent(
        'run.fenced',
        ctx,
        `settling/${fencedSubject}`,
        { fencedSubject, epoch: 0, holder: null, reason: 'settling', detail: 'forged', uncertain: [] },
        now,
      ),
    ),
    forgedSettlement(ctx, now),
  ];
  const lasts: Record<string, number> = {};
  for (const e of events) {
    const subject = runSubject(t.log.space, runId, e.type === 'run.fenced' ? e.data.fencedSubject : e.owner);
    const token = subject.split('.')[3]!;
    const r = await t.log.append(e, lasts[token] ?? 0);
    lasts[token] = r.seq;
  }
  return runId;
}
