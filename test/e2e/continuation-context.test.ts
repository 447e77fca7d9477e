/**
 * Conversations in the runtime (K2, K3, K5) against the real processes, NATS JetStream,
 * PostgreSQL and the scripted model, asserting on the requests the model really received
 * (`/_scripted/stats` bodies):
 * - a clarification ends its Run, published as the answer and settled `completed` with the
 *   clarification pending; the reply Run's request carries the original request, the question and
 *   the chosen answer;
 * - a continuation of a parent with many tool calls, under a small context budget, carries the
 *   parent's verified request and material labelled historical, is accepted by a model that
 *   refuses unpaired tool messages, never re-runs the parent's calls, and does not dispatch the
 *   parent's unknown effect again;
 * - a continuation whose parent request does not match its admission hash is refused before any
 *   model request;
 * - a follow-up after a canceled Run sends exactly its own text as the last user message, with
 *   the conversation's history labelled, and nothing of it reaches the canceled Run's stream.
 *
 * Continuation and follow-up Runs are admitted here by appending `run.admitted` with the contract
 * fields (`link`, `parentRequestSha256`, `conversationHistory`, `clarification`) as admission
 * records them; the HTTP side of Continue and replies is admission's.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { admissionIds, makeEvent, sha256Hex, type EventData, type RunEvent, type StoredEvent } from '@runplane/contracts';
import { toolPairingError, type WireMessage } from '@runplane/app-scripted-model';
import { eventually, settledRunOf, startTestStack, type TestStack } from '../support/stack.js';

const MAX_CHARS = 16_000;
const dir = mkdtempSync(join(tmpdir(), 'rp-context-'));
const effectFile = join(dir, 'effects.log');

let t: TestStack;
beforeAll(async () => {
  t = await startTestStack(
    'context',
    {
      RUNPLANE_TEST_TOOLS: 'record_effect',
      RUNPLANE_RECORD_EFFECT_FILE: effectFile,
      RUNPLANE_TOOL_TIMEOUT_MS: '20000',
      RUNPLANE_TOOL_THREADS: '6',
      RUNPLANE_CONTEXT_MAX_CHARS: String(MAX_CHARS),
    },
    { audit: 'report', removeOnStop: [dir] },
  ); // forges events on the bus
}, 120_000);
afterAll(async () => {
  await t?.stop();
});

type Body = { messages: WireMessage[] };
const ofType = <T extends RunEvent['type']>(events: StoredEvent[], type: T) =>
  events.filter((e) => e.event.type === type) as (StoredEvent & { event: Extract<RunEvent, { type: T }> })[];
const textOf = (m: WireMessage): string => (typeof m.content === 'string' ? m.content : JSON.stringify(m.content ?? ''));

/** The chat requests the scripted model received whose user message contains `key`. */
async function requestsWith(key: string): Promise<Body[]> {
  const res = await fetch(`${t.stack.modelUrl.replace(/\/v1$/, '/_scripted')}/stats`);
  const stats = (await res.json()) as { bodies: Body[] };
  return stats.bodies.filter((b) => typeof b === 'object' && b.messages?.some((m) => m.role === 'user' && textOf(m).includes(key)));
}
async function rejectedRequests(): Promise<number> {
  const res = await fetch(`${t.stack.modelUrl.replace(/\/v1$/, '/_scripted')}/stats`);
  return ((await res.json()) as { rejected: number }).rejected;
}

/** Admits a Run as admission records it, with the given relation fields (K2, K3). */
async function admitLinked(
  conversationId: string,
  clientMessageId: string,
  content: string,
  like: EventData<'run.admitted'>,
  extra: Partial<EventData<'run.admitted'>>,
): Promise<string> {
  const { messageId, runId } = admissionIds(conversationId, clientMessageId);
  const now = new Date();
  const event = makeEvent(
    'run.admitted',
    { runId, conversationId, correlationId: messageId, causationId: null },
    'admission',
    {
      message: { messageId, clientMessageId, content, contentSha256: sha256Hex(content) },
      grant: like.grant,
      limits: { ...like.limits, deadlineAt: new Date(now.getTime() + 120_000).toISOString() },
      ...extra,
    },
    now,
  );
  await t.log.append(event, 0);
  return runId;
}

async function admittedOf(runId: string): Promise<EventData<'run.admitted'>> {
  const events = await t.log.readRun(runId);
  return ofType(events, 'run.admitted')[0]!.event.data;
}

function effectsOf(runId: string): string[] {
  if (!existsSync(effectFile)) return [];
  return readFileSync(effectFile, 'utf8')
    .split('\n')
    .filter((l) => l.startsWith(`${runId} `));
}

describe('clarification (K2)', () => {
  it('ask_clarification settles the Run completed with the question published and pending; the reply Run carries the request, the question and the chosen answer', async () => {
    const key = 'ctx-clarify-q';
    const question = 'Do you mean cumulative or annualized returns?';
    await t.setScenario(
      { steps: [{ reply: { content: '', toolCalls: [{ name: 'ask_clarification', arguments: { question } }] } }], then: 'error' },
      key,
    );
    const conv = 'conv-clarify';
    const request = `[${key}] Compare the returns of SPY and QQQ`;
    const posted = await t.client.postMessage(conv, { clientMessageId: key, content: request });
    expect(posted.status).toBe(201);
    const runId = posted.body.runId;
    const events = await t.waitForSettlement(runId);
    const [asked] = ofType(events, 'clarification.requested');
    expect(asked?.event.data.question).toBe(question);
    const settled = ofType(events, 'run.settled')[0]!.event.data;
    expect(settled.outcome).toBe('completed');
    expect(settled.reason).toContain(`clarification pending: ${asked!.event.data.clarificationId}`);
    expect(ofType(events, 'run.execution.finished')[0]!.event.data.reason).toBe('clarification-requested');
    const answer = await t.client.getAnswer(runId);
    expect(answer.passages.map((p) => p.text)).toEqual([question]);
    // the Run view (projection) names the pending clarification
    const view = await eventually(async () => {
      const v = await t.client.getRun(runId);
      return v?.status === 'settled' ? v : null;
    });
    expect(view.clarificationId).toBe(asked!.event.data.clarificationId);
    expect(view.outcome).toBe('completed');
    expect(ofType(events, 'wait.opened')).toHaveLength(0); // not a human wait: nothing parks
    expect(ofType(events, 'tool.call.proposed')).toHaveLength(0);

    // the reply: a new Run linked to the asking one, relation clarification
    const replyKey = 'ctx-clarify-reply';
    await t.setScenario({ steps: [{ reply: { content: 'Annualized: SPY and QQQ compared on annualized returns.' } }], then: 'error' }, replyKey);
    const reply = `[${replyKey}] Annualized`;
    const replyRun = await admitLinked(conv, replyKey, reply, await admittedOf(runId), {
      link: { parentRunId: runId, relation: 'clarification' },
      clarification: { clarificationId: asked!.event.data.clarificationId, question, originalRequest: request },
    });
    const replyEvents = await t.waitForSettlement(replyRun);
    expect(ofType(replyEvents, 'run.settled')[0]!.event.data.outcome).toBe('completed');
    const [first] = await requestsWith(replyKey);
    expect(first).toBeDefined();
    const msgs = first!.messages;
    expect(msgs.at(-1)).toMatchObject({ role: 'user', content: reply });
    expect(msgs.filter((m) => m.role === 'user')).toHaveLength(1);
    const system = msgs.filter((m) => m.role === 'system').map(textOf);
    expect(system).toContain(`[clarification, historical] The original request (quoted): ${JSON.stringify(request)}`);
    expect(system.some((s) => s.includes(question))).toBe(true);
    // the asking Run is never reopened
    expect((await t.log.readRun(runId)).length).toBe(events.length);
  }, 90_000);
});

describe('continuation (K3)', () => {
  const parentKey = 'ctx-parent-many';
  const parentRequest = `[${parentKey}] Compare the holdings of SPY and QQQ and record the comparison`;
  let parentRunId = '';
  let parentEvents: StoredEvent[] = [];

  beforeAll(async () => {
    ({ runId: parentRunId, events: parentEvents } = await settledRunOf(t, 'conv-continue', parentKey, parentRequest, {
      steps: [
        {
          reply: {
            content: '',
            toolCalls: [
              ...[5, 6, 7].flatMap((top) => [
                { name: 'get_holdings', arguments: { fund: 'SPY', top } },
                { name: 'get_holdings', arguments: { fund: 'QQQ', top } },
              ]),
            ],
          },
        },
        // succeeded, but with no provenance: never carried
        { reply: { content: '', toolCalls: [{ name: 'record_effect', arguments: { tag: 'ctx-ok' } }] } },
        // outlives the tool timeout: unknown
        { reply: { content: '', toolCalls: [{ name: 'record_effect', arguments: { tag: 'ctx-effect', sleepMs: 24000 } }] } },
        { reply: { content: 'SPY and QQQ holdings were read.\n\nThe recording outcome is unknown.' } },
      ],
      then: 'error',
    }));
    const receipts = ofType(parentEvents, 'tool.call.receipt').map((e) => [e.event.data.name, e.event.data.status]);
    expect(receipts).toEqual([
      ...Array.from({ length: 6 }, () => ['get_holdings', 'succeeded']),
      ['record_effect', 'succeeded'],
      ['record_effect', 'unknown'],
    ]);
    expect(effectsOf(parentRunId)).toHaveLength(2);
  }, 90_000);

  it('carries the verified request and eligible material labelled historical; under a small budget every request is accepted with whole pairs; nothing of the parent is re-run; its unknown effect is not dispatched again', async () => {
    const key = 'ctx-continue-many';
    const holdings = (top: number) => [
      { name: 'get_holdings', arguments: { fund: 'SPY', top } },
      { name: 'get_holdings', arguments: { fund: 'QQQ', top } },
    ];
    await t.setScenario(
      {
        steps: [
          { reply: { content: '', toolCalls: holdings(20) } },
          { reply: { content: '', toolCalls: holdings(21) } },
          { reply: { content: '', toolCalls: holdings(22) } },
          { reply: { content: '', toolCalls: [{ name: 'record_effect', arguments: { sleepMs: 24000, tag: 'ctx-effect' } }] } },
          { reply: { content: 'Continued: the holdings were compared again; the earlier recording stays unknown.' } },
        ],
        then: 'error',
      },
      key,
    );
    const text = `[${key}] Continue the comparison with the top 20`;
    const parentAdmitted = ofType(parentEvents, 'run.admitted')[0]!.event.data;
    const runId = await admitLinked('conv-continue', key, text, parentAdmitted, {
      link: { parentRunId, relation: 'continuation' },
      parentRequestSha256: sha256Hex(parentRequest),
    });
    const events = await t.waitForSettlement(runId, 90_000);
    // the recording it did not repeat stays unknown: the answer lists nothing, the settlement lists it (K9)
    const settledData = ofType(events, 'run.settled')[0]!.event.data;
    expect(settledData.outcome).toBe('partial');
    expect(settledData.unanswered).toEqual([{ part: expect.stringMatching(/^the result of record_effect\(/), reason: expect.any(String) }]);

    // what was carried is on the Run's own stream, before its first model request
    const carried = ofType(events, 'context.carried')[0]!;
    const firstRequest = ofType(events, 'model.turn.requested')[0]!;
    expect(carried.seq).toBeLessThan(firstRequest.seq);
    const c = carried.event.data;
    expect(c.parentRunId).toBe(parentRunId);
    expect(c.items[0]).toMatchObject({ kind: 'original-request', sourceSha256: sha256Hex(parentRequest) });
    const parentUnknown = ofType(parentEvents, 'tool.call.receipt').find((e) => e.event.data.status === 'unknown')!.event.data.toolCallId;
    expect(c.unknownEffects.map((u) => u.toolCallId)).toEqual([parentUnknown]);
    expect(c.items.some((i) => i.kind === 'tool-result')).toBe(true);
    // at most half the budget is carried: the parent's other results are listed as dropped, never sent
    expect(c.dropped.filter((d) => d.reason === 'budget').length).toBeGreaterThan(0);
    expect(c.items.reduce((n, i) => n + i.text.length, 0)).toBeLessThanOrEqual(MAX_CHARS / 2);
    // a result without provenance is never made readable again
    const okCall = ofType(parentEvents, 'tool.call.receipt').find(
      (e) => e.event.data.status === 'succeeded' && e.event.data.name === 'record_effect',
    )!.event.data.toolCallId;
    expect(c.dropped).toContainEqual({ runId: parentRunId, ref: okCall, reason: 'no_provenance' });
    expect(JSON.stringify(c.items)).not.toContain('ctx-ok');

    // the requests the model received: all accepted, pairs whole, the user's text last, history labelled
    const bodies = await requestsWith(key);
    expect(bodies).toHaveLength(5);
    expect(await rejectedRequests()).toBe(0);
    for (const b of bodies) {
      expect(toolPairingError(b.messages)).toBeNull();
      expect(b.messages.filter((m) => m.role === 'user').map(textOf)).toEqual([text]);
      expect(JSON.stringify(b.messages).length).toBeLessThan(MAX_CHARS + 12_000); // the latest turn is always sent whole
    }
    const firstSystem = bodies[0]!.messages.filter((m) => m.role === 'system').map(textOf);
    expect(firstSystem.some((s) => s.startsWith('[continuation, historical] This Run continues') && s.includes(parentRequest))).toBe(true);
    expect(firstSystem.some((s) => s.includes('UNKNOWN outcome') && s.includes(parentUnknown))).toBe(true);
    expect(bodies.some((b) => b.messages.some((m) => m.role === 'system' && textOf(m).includes('left out to fit the context budget')))).toBe(true);
    // the parent's calls never appear as calls or results the model (or the runtime) could act on
    const parentCallIds = new Set(ofType(parentEvents, 'tool.call.proposed').map((e) => e.event.data.toolCallId));
    for (const b of bodies) {
      for (const m of b.messages) {
        if (m.role === 'tool') expect(parentCallIds.has(m.tool_call_id)).toBe(false);
        if (m.role === 'assistant') for (const call of m.tool_calls ?? []) expect(parentCallIds.has(call.id)).toBe(false);
      }
    }

    // nothing of the parent was re-run; the same external effect was refused, never dispatched
    const receipts = ofType(events, 'tool.call.receipt');
    expect(receipts.every((r) => !parentCallIds.has(r.event.data.toolCallId))).toBe(true);
    const again = receipts.find((r) => r.event.data.name === 'record_effect')!.event.data;
    expect(again).toMatchObject({ status: 'denied', error: { code: 'unknown_effect_needs_reconciliation' } });
    expect(ofType(events, 'tool.call.dispatched').some((d) => d.event.data.name === 'record_effect')).toBe(false);
    expect(effectsOf(runId)).toHaveLength(0);
    expect(effectsOf(parentRunId)).toHaveLength(2);
    // the parent is never reopened: only a late observation of its own unknown call may follow its settlement
    const after = await t.log.readRun(parentRunId);
    expect(after.filter((e) => e.seq > parentEvents.at(-1)!.seq).every((e) => e.event.type === 'tool.call.late_observed')).toBe(true);
  }, 120_000);

  it('refuses a continuation whose parent request does not match the hash stored at admission: no model request, settled failed', async () => {
    const key = 'ctx-continue-mismatch';
    const parentAdmitted = ofType(parentEvents, 'run.admitted')[0]!.event.data;
    const runId = await admitLinked('conv-continue', key, `[${key}] Continue`, parentAdmitted, {
      link: { parentRunId, relation: 'continuation' },
      parentRequestSha256: sha256Hex('a request the parent never had'),
    });
    const events = await t.waitForSettlement(runId, 60_000);
    expect(ofType(events, 'run.execution.finished')[0]!.event.data).toMatchObject({ reason: 'context-refused' });
    expect(ofType(events, 'run.settled')[0]!.event.data.outcome).toBe('failed');
    expect(ofType(events, 'model.turn.requested')).toHaveLength(0);
    expect(await requestsWith(key)).toHaveLength(0);
  }, 60_000);
});

describe('follow-up after a canceled Run (K2, K4)', () => {
  it("sends exactly the new text as the last user message, with the conversation's committed history labelled; the canceled Run's stream is unchanged", async () => {
    const conv = 'conv-followup';
    // an earlier Run that answered (its passages are committed history)
    const doneKey = 'ctx-follow-done';
    await t.setScenario({ steps: [{ reply: { content: 'SPY holds about 500 names.' } }], then: 'error' }, doneKey);
    const done = await t.client.postMessage(conv, { clientMessageId: doneKey, content: `[${doneKey}] How many names does SPY hold?` });
    await t.waitForSettlement(done.body.runId);
    // a Run the user cancels while its model request hangs
    const cancelKey = 'ctx-follow-cancel';
    await t.setScenario({ steps: [{ hang: true }], then: 'error' }, cancelKey);
    const canceledQ = `[${cancelKey}] Compare everything`;
    const canceled = await t.client.postMessage(conv, { clientMessageId: cancelKey, content: canceledQ });
    await eventually(async () => ((await requestsWith(cancelKey)).length > 0 ? true : null), 30_000, 'the hanging request');
    await t.client.cancelRun(canceled.body.runId, { reason: 'changed my mind' });
    const canceledEvents = await t.waitForSettlement(canceled.body.runId);
    expect(ofType(canceledEvents, 'run.settled')[0]!.event.data.outcome).toBe('canceled');

    const key = 'ctx-follow-new';
    await t.setScenario({ steps: [{ reply: { content: 'For last year, SPY held about 500 names as well.' } }], then: 'error' }, key);
    const text = `[${key}] What about last year?`;
    const runId = await admitLinked(conv, key, text, await admittedOf(done.body.runId), {
      conversationHistory: { runIds: [done.body.runId, canceled.body.runId] },
    });
    const events = await t.waitForSettlement(runId);
    expect(ofType(events, 'run.settled')[0]!.event.data.outcome).toBe('completed');
    const [first] = await requestsWith(key);
    const last = first!.messages.at(-1)!;
    expect(last.role).toBe('user');
    expect(last.content).toBe(text);
    expect(first!.messages.filter((m) => m.role === 'user')).toHaveLength(1);
    const system = first!.messages.filter((m) => m.role === 'system').map(textOf);
    expect(system.some((s) => s.startsWith('[history]') && s.includes('SPY holds about 500 names.'))).toBe(true);
    expect(system.some((s) => s.startsWith('[history]') && s.includes(canceledQ))).toBe(true);
    // nothing of the follow-up is folded into the canceled Run
    const canceledAfter = await t.log.readRun(canceled.body.runId);
    expect(canceledAfter.map((e) => e.event.eventId)).toEqual(canceledEvents.map((e) => e.event.eventId));
    // it inherits no grant or budget: its own admission, its own stream
    expect(events.every((e) => e.event.runId === runId)).toBe(true);
  }, 90_000);
});
