/**
 * The budget ledger (K7) and finalization-only (K9) against the real processes, NATS JetStream,
 * PostgreSQL and the scripted model over HTTP: every Run here has 4 model requests with 1 kept
 * for finalization, and 2 tool calls.
 * - a model that answers 429 forever receives at most 4 requests in total; the Run settles failed
 *   naming the budget;
 * - a 429 with Retry-After for one Run delays another concurrent Run's request (one limiter per
 *   model in the runtime), on the arrival times the scripted server records;
 * - an empty reply is retried as a new, charged turn; a model that keeps replying with nothing
 *   ends `no-progress` and settles failed, reporting that no answer was produced;
 * - research that spends its requests moves one way into finalization: one last request without
 *   tools, told to answer the original question; its answer settles partial with the unfinished
 *   scope listed, though the model's text lists nothing;
 * - a tool that always fails is fed back and the Run goes on, but it is executed at most
 *   `maxToolCalls` times (counted where its effect happens).
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { RunEvent, StoredEvent } from '@runplane/contracts';
import { eventually, startTestStack, type TestStack } from '../support/stack.js';

const dir = mkdtempSync(join(tmpdir(), 'rp-budget-'));
const effectFile = join(dir, 'effects.log');

let t: TestStack;
beforeAll(async () => {
  t = await startTestStack('budget', {
    RUNPLANE_MAX_MODEL_REQUESTS: '4',
    RUNPLANE_FINAL_RESERVE_MODEL_REQUESTS: '1',
    RUNPLANE_MAX_TOOL_CALLS: '2',
    RUNPLANE_TEST_TOOLS: 'record_effect',
    RUNPLANE_RECORD_EFFECT_FILE: effectFile,
    RUNPLANE_RECOVERY_SWEEP_MS: '100',
  });
}, 120_000);
afterAll(async () => {
  await t?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const ofType = <T extends RunEvent['type']>(events: StoredEvent[], type: T) =>
  events.filter((e) => e.event.type === type).map((e) => e.event as Extract<RunEvent, { type: T }>);

interface Stats {
  perKey: Record<string, number>;
  arrivals: { at: number; key: string | null }[];
  bodies: { messages?: { role: string; content: unknown }[]; tools?: unknown[]; max_tokens?: number }[];
}
async function stats(): Promise<Stats> {
  const res = await fetch(`${t.stack.modelUrl.replace(/\/v1$/, '/_scripted')}/stats`);
  return (await res.json()) as Stats;
}
/** The chat request bodies whose user message names `key`, in arrival order. */
const bodiesFor = (s: Stats, key: string) =>
  s.bodies.filter((b) => (b.messages ?? []).some((m) => m.role === 'user' && JSON.stringify(m.content).includes(key)));

async function ask(key: string, question = 'What does SPY hold?'): Promise<string> {
  const { body } = await t.client.postMessage(`conv-${key}`, { clientMessageId: key, content: `[${key}] ${question}` });
  return body.runId;
}

describe('retries draw from the one ledger (K7)', () => {
  it('a model that answers 429 forever (Retry-After: 0) receives at most 4 requests in total and the Run settles failed, naming the budget', async () => {
    const key = `ratelimited-${t.tag}`;
    await t.setScenario({ steps: [{ error: { status: 429, message: 'rate limited', retryAfter: 0 } }], then: 'repeat-last' }, key);
    const runId = await ask(key);
    const events = await t.waitForSettlement(runId, 60_000);
    // nothing more is sent after the settlement either
    await new Promise((r) => setTimeout(r, 500));
    const received = (await stats()).perKey[key] ?? 0;
    expect(received).toBeGreaterThanOrEqual(1);
    expect(received).toBeLessThanOrEqual(4);
    const requested = ofType(events, 'model.turn.requested');
    expect(requested).toHaveLength(received); // every request was charged as a turn of its own
    expect(requested.slice(1).every((r, i) => r.data.retryOf === i + 1)).toBe(true);
    expect(ofType(events, 'model.turn.failed').every((f) => f.data.error.status === 429)).toBe(true);
    expect(ofType(events, 'run.execution.finished')[0]!.data).toMatchObject({ reason: 'model-request-limit' });
    const settled = ofType(events, 'run.settled')[0]!.data;
    expect(settled.outcome).toBe('failed');
    expect(settled.reason).toMatch(/budget/);
    expect(settled.usage).toMatchObject({ modelRequests: received, unknownUsageTurns: received });
  }, 90_000);

  it("a 429 with Retry-After: 1 for one Run delays another concurrent Run's request: one limiter per model", async () => {
    const slow = `limited-a-${t.tag}`;
    const other = `limited-b-${t.tag}`;
    await t.setScenario(
      { steps: [{ error: { status: 429, message: 'slow down', retryAfter: 1 } }, { reply: { content: `Answer for ${slow}.` } }], then: 'error' },
      slow,
    );
    await t.setScenario({ steps: [{ reply: { content: `Answer for ${other}.` } }], then: 'error' }, other);
    const a = await ask(slow);
    const first429 = await eventually(async () => (await stats()).arrivals.find((x) => x.key === slow), 20_000, "the first Run's 429");
    const b = await ask(other);
    const [ea, eb] = await Promise.all([t.waitForSettlement(a, 60_000), t.waitForSettlement(b, 60_000)]);
    const arrivals = (await stats()).arrivals;
    const bAt = arrivals.find((x) => x.key === other)!.at;
    const aRetryAt = arrivals.filter((x) => x.key === slow)[1]!.at;
    // the other Run was admitted after the 429 and still waited out the pause it did not receive itself
    expect(bAt - first429.at).toBeGreaterThanOrEqual(900);
    expect(aRetryAt - first429.at).toBeGreaterThanOrEqual(900);
    expect(ofType(ea, 'model.turn.failed')[0]!.data.error).toMatchObject({ status: 429, retryAfterMs: 1000 });
    expect(ofType(ea, 'run.settled')[0]!.data.outcome).toBe('completed');
    expect(ofType(eb, 'run.settled')[0]!.data.outcome).toBe('completed');
    expect(ofType(eb, 'model.turn.failed')).toHaveLength(0);
  }, 90_000);

  it('an empty reply is retried as a new, charged turn and the retry answers', async () => {
    const key = `empty-once-${t.tag}`;
    await t.setScenario({ steps: [{ reply: { content: '' } }, { reply: { content: `The answer for ${key}.` } }], then: 'error' }, key);
    const events = await t.waitForSettlement(await ask(key), 60_000);
    expect(ofType(events, 'model.turn.requested').map((r) => r.data.retryOf)).toEqual([undefined, 1]);
    expect(ofType(events, 'run.settled')[0]!.data).toMatchObject({ outcome: 'completed', usage: { modelRequests: 2 } });
  }, 90_000);

  it('a model that ignores max_tokens: its reply is cut at the reservation (the request asked for at most N tokens, N x 4 characters are kept), the turn ends length, nothing is measured over the grant, and the retry answers', async () => {
    const key = `over-reservation-${t.tag}`;
    // 200,000 characters (~50,000 tokens by the chars/4 estimate) against a reservation of at most 16,384 tokens
    await t.setScenario(
      {
        steps: [{ reply: { content: 'The fund holds many companies. ', repeatContent: 6_452 } }, { reply: { content: `The answer for ${key}.` } }],
        then: 'error',
      },
      key,
    );
    const events = await t.waitForSettlement(await ask(key), 60_000);
    const requested = ofType(events, 'model.turn.requested');
    const maxTokens = requested[0]!.data.maxTokens!;
    expect(maxTokens).toBeGreaterThan(0);
    // the request said max_tokens, and the scripted model (like a provider that ignores it) streamed more
    expect(bodiesFor(await stats(), key)[0]!.max_tokens).toBe(maxTokens);
    const [first, second] = ofType(events, 'model.turn.completed');
    expect(first!.data.finishReason).toBe('length');
    expect(first!.data.usage).toBeNull();
    // the kept text (or, over the record's size limit, the cut's whole size) is the reservation's characters, not the 200,000 streamed
    const cutEntry = first!.data.cut?.find((x) => x.field === 'content');
    const keptChars = cutEntry ? cutEntry.bytes - 2 : first!.data.content.length; // bytes of its JSON: the text and two quotes (ASCII)
    expect(keptChars).toBeLessThanOrEqual(maxTokens * 4);
    expect(keptChars).toBeGreaterThan(0);
    expect(requested[1]!.data.retryOf).toBe(1);
    expect(second!.data.content).toBe(`The answer for ${key}.`);
    const settled = ofType(events, 'run.settled')[0]!.data;
    expect(settled.outcome).toBe('completed');
  }, 90_000);

  it('a model that keeps replying with nothing ends no-progress, reporting that no answer was produced, and settles failed', async () => {
    const key = `empty-forever-${t.tag}`;
    await t.setScenario({ steps: [{ reply: { content: '' } }], then: 'repeat-last' }, key);
    const events = await t.waitForSettlement(await ask(key), 60_000);
    expect((await stats()).perKey[key]).toBe(3);
    expect(ofType(events, 'run.execution.finished')[0]!.data).toMatchObject({
      reason: 'no-progress',
      detail: expect.stringMatching(/no answer was produced/),
    });
    const settled = ofType(events, 'run.settled')[0]!.data;
    expect(settled).toMatchObject({ outcome: 'failed', reason: expect.stringMatching(/no answer was produced/) });
    expect(ofType(events, 'run.finalization.started')).toHaveLength(0);
  }, 90_000);
});

describe('finalization-only with the reserve (K7, K9)', () => {
  it('research that spends its 3 requests gets one last request without tools, answering the original question; it settles partial listing what is unfinished', async () => {
    const key = `finalize-${t.tag}`;
    const list = { reply: { content: '', toolCalls: [{ name: 'list_funds', arguments: {} }] } };
    await t.setScenario(
      { steps: [list, list, list, { reply: { content: `From what I found, SPY is one of the funds (${key}).` } }], then: 'error' },
      key,
    );
    const runId = await ask(key, 'Compare every fund in the data in depth');
    const events = await t.waitForSettlement(runId, 60_000);
    const s = await stats();
    expect(s.perKey[key]).toBe(4);
    const requested = ofType(events, 'model.turn.requested');
    expect(requested.map((r) => r.data.purpose)).toEqual([undefined, undefined, undefined, 'finalization']);
    const fin = ofType(events, 'run.finalization.started');
    expect(fin).toHaveLength(1);
    expect(fin[0]!.data).toMatchObject({ reason: 'model-request-limit' });
    // the finalization request offered no tools and carried the original question with the instruction
    const bodies = bodiesFor(s, key);
    expect(bodies).toHaveLength(4);
    expect(bodies[0]!.tools?.length).toBeGreaterThan(0);
    expect(bodies[3]!.tools).toBeUndefined();
    const lastUser = bodies[3]!.messages!.filter((m) => m.role === 'user').at(-1)!;
    expect(String(lastUser.content)).toMatch(/Research has stopped/);
    expect(String(lastUser.content)).toContain('Compare every fund in the data in depth');
    // the research turns' tools ran; the reserve was never spent by research
    expect(ofType(events, 'tool.call.receipt').map((r) => r.data.status)).toEqual(['succeeded', 'succeeded', 'denied']);
    const finished = ofType(events, 'run.execution.finished')[0]!.data;
    expect(finished).toMatchObject({ reason: 'answered', answerTurn: 4, unfinished: [{ part: 'research not finished' }] });
    const settled = ofType(events, 'run.settled')[0]!.data;
    expect(settled.outcome).toBe('partial');
    expect(settled.unanswered).toEqual([expect.objectContaining({ part: 'research not finished' })]);
    expect(await t.client.getAnswer(runId)).toMatchObject({ complete: false, outcome: 'partial' });
  }, 90_000);
});

describe('a tool that always fails (K7, K8)', () => {
  it('is fed back to the model and the Run goes on, but it is executed at most maxToolCalls (2) times', async () => {
    const key = `failing-tool-${t.tag}`;
    await t.setScenario(
      { steps: [{ reply: { content: '', toolCalls: [{ name: 'record_effect', arguments: { tag: key, fail: true } }] } }], then: 'repeat-last' },
      key,
    );
    const runId = await ask(key);
    const events = await t.waitForSettlement(runId, 60_000);
    const executions = existsSync(effectFile)
      ? readFileSync(effectFile, 'utf8')
          .split('\n')
          .filter((l) => l.startsWith(`${runId} `))
      : [];
    expect(executions.length).toBeGreaterThanOrEqual(1);
    expect(executions.length).toBeLessThanOrEqual(2);
    const receipts = ofType(events, 'tool.call.receipt').map((r) => r.data);
    expect(receipts.filter((r) => r.status === 'failed')).toHaveLength(executions.length);
    expect(receipts.filter((r) => r.status === 'denied').every((r) => r.error?.code === 'tool_call_limit')).toBe(true);
    // the failures were fed back: every research request after the first carried the earlier failures as tool messages
    expect(ofType(events, 'model.turn.requested').length).toBeGreaterThanOrEqual(3);
    const settled = ofType(events, 'run.settled')[0]!.data;
    expect(settled.outcome).toBe('failed');
    expect(settled.reason).toMatch(/budget/);
  }, 90_000);
});
