/**
 * Per-principal quotas of admission on the real stack (authentication on, one concurrent Run and
 * three Runs per hour per principal): a new Run over a quota is 429 `quota_exceeded` with a
 * truthful `Retry-After` and nothing appended; another principal is unaffected; a settled Run
 * frees its slot; the hour refuses the 4th; a repeat of an admitted message id still answers its
 * Run (K1); refusals are counted by quota. The counts come from the projections, so each step
 * waits until the projector has applied what it counts (a burst may run ahead of them by its lag).
 * Money per day (the scripted model priced 1 micro-USD a token, 1,000,000 micro-USD a day): once
 * carol's Run has cost that much, her next is 429 `cost-per-day` with `Retry-After` until her Run
 * leaves the sliding 24 h, nothing appended, while bob is still admitted.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { admissionIds, conversationKey } from '@runplane/contracts';
import { createDevAuth, type DevAuth } from '@runplane/devstack';
import { costChargesOf, createProjectionOrm, quotaUsageOf, rebuildProjections } from '@runplane/projections';
import { eventually, startTestStack, type TestStack } from '../support/stack.js';

/** micro-USD a principal's Runs of a day may cost; a hanging turn reserves about 20,000 (16,384 output tokens and its input), so alice and bob stay far under it. */
const COST_PER_DAY = 1_000_000;
let t: TestStack;
let auth: DevAuth;
let dir: string;
let alice: string;
let bob: string;
let carol: string;
let dave: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'rp-quota-'));
  auth = await createDevAuth(dir);
  t = await startTestStack('quota', {
    ...auth.env,
    RUNPLANE_QUOTA_CONCURRENT_RUNS: '1',
    RUNPLANE_QUOTA_RUNS_PER_HOUR: '3',
    RUNPLANE_MODEL_PRICES: JSON.stringify({ 'runplane-scripted-research': { inputPerMTok: 1, outputPerMTok: 1, currency: 'USD' } }),
    RUNPLANE_QUOTA_COST_MICROS_PER_DAY: String(COST_PER_DAY),
  });
  [alice, bob, carol, dave] = await Promise.all([auth.mint('alice'), auth.mint('bob'), auth.mint('carol'), auth.mint('dave')]);
}, 120_000);
afterAll(async () => {
  await t?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const admission = (path: string) => `${t.stack.endpoints.admission}${path}`;
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

/**
 * POSTs `body` as the token's principal. A 503 `dependency_unavailable` (seen once for the first
 * message, its append timing out on NATS while `loaded-liveness` loaded the machine) is sent again
 * after its `Retry-After`, at most three times and with a line saying so, as a client should: every
 * POST here repeats safely (a message by its clientMessageId, K1; a cancel). Any other 503
 * (`admission_contended`, say) is returned as it is: the test sees it.
 */
async function post(url: string, token: string, body: unknown) {
  for (let attempt = 1; ; attempt++) {
    const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...bearer(token) }, body: JSON.stringify(body) });
    const answer = { status: res.status, headers: res.headers, body: (await res.json().catch(() => null)) as Record<string, unknown> | null };
    if (answer.status !== 503 || answer.body?.code !== 'dependency_unavailable' || attempt > 3) return answer;
    process.stdout.write(`quota: ${url} answered 503 dependency_unavailable (${String(answer.body.detail)}); sending it again\n`);
    await new Promise((r) => setTimeout(r, Math.min(Number(res.headers.get('retry-after')) || 1, 5) * 1_000));
  }
}
async function getJson(url: string, token: string) {
  const res = await fetch(url, { headers: bearer(token) });
  return { status: res.status, body: (await res.json().catch(() => null)) as Record<string, unknown> | null };
}
/** Resolves once the Run's projection shows `status` (or any status when omitted): what the quota counts. */
const projected = (token: string, runId: string, status?: string) =>
  eventually(
    async () => {
      const r = await getJson(admission(`/v1/runs/${runId}`), token);
      return r.status === 200 && (!status || r.body?.status === status) ? r.body : null;
    },
    30_000,
    `run ${runId} projected${status ? ` ${status}` : ''}`,
  );
async function refusals(quota: string): Promise<number> {
  const text = await (await fetch(admission('/metrics'))).text();
  const line = text.split('\n').find((l) => l.startsWith('runplane_quota_refusals_total{') && l.includes(`quota="${quota}"`));
  return line ? Number(line.split(' ').pop()) : 0;
}

describe('per-principal quotas (RUNPLANE_QUOTA_CONCURRENT_RUNS=1, RUNPLANE_QUOTA_RUNS_PER_HOUR=3, RUNPLANE_QUOTA_COST_MICROS_PER_DAY=1000000)', () => {
  it('refuses a new Run over a quota with 429 + Retry-After and appends nothing; B is unaffected; a settled Run frees the slot; the hour refuses the 4th; a repeat answers its Run', async () => {
    const key = `hold-${t.tag}`;
    await t.setScenario({ steps: [{ hang: true }], then: 'repeat-last' }, key);
    const conversationId = `conv-${t.tag}`;
    const messages = admission(`/v1/conversations/${conversationId}/messages`);
    const message = (id: string) => ({ clientMessageId: id, content: `What does DIA hold? ${key} ${id}` });
    const runOf = (principal: string, id: string) => admissionIds(conversationKey(conversationId, principal), id).runId;
    const cancelAndSettle = async (token: string, runId: string) => {
      expect((await post(admission(`/v1/runs/${runId}/cancel`), token, { reason: 'quota test' })).status).toBe(202);
      await t.waitForSettlement(runId, 30_000);
      await projected(token, runId, 'settled');
    };

    // alice's first Run holds her only concurrent slot (its model never answers)
    const first = await post(messages, alice, message('a1'));
    expect(first.status).toBe(201);
    const run1 = String(first.body!.runId);
    const admittedAt1 = Date.parse(String(first.body!.admittedAt));
    await projected(alice, run1);

    // a new Run at the concurrency limit: 429, the quota named, a short hint, nothing on the stream
    const over = await post(messages, alice, message('a2'));
    expect(over.status).toBe(429);
    expect(over.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(over.headers.get('retry-after')).toBe('5');
    expect(over.body).toMatchObject({ status: 429, code: 'quota_exceeded', quota: 'concurrent-runs', limit: 1, used: 1, retryAfterSeconds: 5 });
    expect(await t.log.readRun(runOf('alice', 'a2'))).toEqual([]);
    expect(await refusals('concurrent-runs')).toBe(1);

    // the repeat of her admitted message answers its Run, not 429 (K1: the quota counts new Runs only)
    const repeat = await post(messages, alice, message('a1'));
    expect([repeat.status, repeat.body?.runId, repeat.body?.admission]).toEqual([200, run1, 'existing']);

    // bob has his own quota: admitted while alice is at hers
    const bobs = await post(messages, bob, message('b1'));
    expect(bobs.status).toBe(201);

    // once alice's Run settles (and the projector has applied it), she is admitted again, under the same id she was refused
    await cancelAndSettle(alice, run1);
    const second = await post(messages, alice, message('a2'));
    expect([second.status, second.body?.runId]).toEqual([201, runOf('alice', 'a2')]);
    const run2 = String(second.body!.runId);
    await projected(alice, run2);
    await cancelAndSettle(alice, run2);
    const third = await post(messages, alice, message('a3'));
    expect(third.status).toBe(201);
    const run3 = String(third.body!.runId);
    await projected(alice, run3);
    await cancelAndSettle(alice, run3);

    // nothing of hers is running, but 3 were admitted within the hour: the 4th waits until the first leaves the window
    const fourth = await post(messages, alice, message('a4'));
    const now = Date.now();
    expect(fourth.status).toBe(429);
    expect(fourth.body).toMatchObject({ code: 'quota_exceeded', quota: 'runs-per-hour', limit: 3, used: 3 });
    const retryAfter = Number(fourth.headers.get('retry-after'));
    expect(fourth.body!.retryAfterSeconds).toBe(retryAfter);
    const expected = Math.ceil((admittedAt1 + 3_600_000 - now) / 1000);
    expect(retryAfter).toBeGreaterThanOrEqual(expected - 2);
    expect(retryAfter).toBeLessThanOrEqual(expected + 2);
    expect(retryAfter).toBeLessThanOrEqual(3600);
    expect(await t.log.readRun(runOf('alice', 'a4'))).toEqual([]);
    expect(await refusals('runs-per-hour')).toBe(1);

    // over the hourly quota, a repeat still answers its Run
    const again = await post(messages, alice, message('a2'));
    expect([again.status, again.body?.runId]).toEqual([200, run2]);

    // bob, with one Run running, is refused for concurrency, not for alice's hour
    await projected(bob, String(bobs.body!.runId));
    const bob2 = await post(messages, bob, message('b2'));
    expect([bob2.status, bob2.body?.quota]).toEqual([429, 'concurrent-runs']);
    await cancelAndSettle(bob, String(bobs.body!.runId));
    // only the Runs really admitted are on the stream: a1..a3 and b1
    const admitted = await Promise.all(
      ['a1', 'a2', 'a3', 'a4'].map(async (id) => (await t.log.readRun(runOf('alice', id))).filter((e) => e.event.type === 'run.admitted').length),
    );
    expect(admitted).toEqual([1, 1, 1, 0]);
    expect(await t.log.readRun(runOf('bob', 'b2'))).toEqual([]);
  }, 180_000);

  it("refuses carol's next Run once her Runs of the day cost 1,000,000 micro-USD: 429 cost-per-day with Retry-After until it leaves the 24 h, nothing appended; bob is still admitted", async () => {
    const key = `costly-${t.tag}`;
    // one turn that reports a million input tokens: 1,000,010 micro-USD measured
    await t.setScenario(
      { steps: [{ reply: { content: 'The answer.', usage: { promptTokens: 1_000_000, completionTokens: 10 } } }], then: 'error' },
      key,
    );
    const conversationId = `conv-cost-${t.tag}`;
    const messages = admission(`/v1/conversations/${conversationId}/messages`);
    const message = (id: string) => ({ clientMessageId: id, content: `What does DIA hold? ${key} ${id}` });

    // under the quota (nothing spent yet): admitted, and it costs the day's money
    const first = await post(messages, carol, message('c1'));
    expect(first.status).toBe(201);
    const run1 = String(first.body!.runId);
    const admittedAt1 = Date.parse(String(first.body!.admittedAt));
    await t.waitForSettlement(run1, 60_000);
    const view = await projected(carol, run1, 'settled');
    expect(view).toMatchObject({ costCurrency: 'USD', costMicros: 1_000_010, costUnknownMaxMicros: 0 });

    const over = await post(messages, carol, message('c2'));
    const now = Date.now();
    expect(over.status).toBe(429);
    expect(over.body).toMatchObject({ code: 'quota_exceeded', quota: 'cost-per-day', limit: COST_PER_DAY, used: 1_000_010, currency: 'USD' });
    expect(String(over.body!.detail)).toContain('1000010 of 1000000 micro-USD');
    const retryAfter = Number(over.headers.get('retry-after'));
    expect(over.body!.retryAfterSeconds).toBe(retryAfter);
    const expected = Math.ceil((admittedAt1 + 86_400_000 - now) / 1000);
    expect(retryAfter).toBeGreaterThanOrEqual(expected - 2);
    expect(retryAfter).toBeLessThanOrEqual(expected + 2);
    const refused = admissionIds(conversationKey(conversationId, 'carol'), 'c2').runId;
    expect(await t.log.readRun(refused)).toEqual([]);
    expect(await refusals('cost-per-day')).toBe(1);

    // the repeat of her admitted message still answers its Run (K1)
    const repeat = await post(messages, carol, message('c1'));
    expect([repeat.status, repeat.body?.runId]).toEqual([200, run1]);

    // bob (nothing running, well under his money) is admitted meanwhile
    await t.setScenario(
      { steps: [{ reply: { content: 'A cheap answer.', usage: { promptTokens: 100, completionTokens: 10 } } }], then: 'error' },
      `cheap-${t.tag}`,
    );
    const bobs = await post(messages, bob, { clientMessageId: 'b-cheap', content: `What does DIA hold? cheap-${t.tag}` });
    expect(bobs.status).toBe(201);
    await t.waitForSettlement(String(bobs.body!.runId), 60_000);
    await projected(bob, String(bobs.body!.runId), 'settled');
    expect(await t.log.readRun(refused)).toEqual([]);
  }, 180_000);

  it('given one concurrent Run allowed, when dave posts 5 new messages at once (faster than the projector follows), then exactly one is admitted and 4 get 429; 4 copies of one message at once are never refused', async () => {
    const key = `burst-${t.tag}`;
    await t.setScenario({ steps: [{ hang: true }], then: 'repeat-last' }, key);
    const conversationId = `conv-burst-${t.tag}`;
    const messages = admission(`/v1/conversations/${conversationId}/messages`);
    const message = (id: string) => ({ clientMessageId: id, content: `What does DIA hold? ${key} ${id}` });
    const runOf = (id: string) => admissionIds(conversationKey(conversationId, 'dave'), id).runId;
    const before = await refusals('concurrent-runs');

    const ids = ['d1', 'd2', 'd3', 'd4', 'd5'];
    const burst = await Promise.all(ids.map((id) => post(messages, dave, message(id))));
    expect(burst.map((r) => r.status).sort()).toEqual([201, 429, 429, 429, 429]);
    for (const r of burst.filter((r) => r.status === 429)) expect(r.body).toMatchObject({ quota: 'concurrent-runs', limit: 1, used: 1 });
    const admittedCounts = await Promise.all(
      ids.map(async (id) => (await t.log.readRun(runOf(id))).filter((e) => e.event.type === 'run.admitted').length),
    );
    expect(admittedCounts.reduce((a, b) => a + b, 0)).toBe(1);
    expect(await refusals('concurrent-runs')).toBe(before + 4);
    const held = ids[burst.findIndex((r) => r.status === 201)]!;
    expect(await t.log.readRun(runOf(held))).not.toEqual([]);

    // the slot frees when that Run settles; then 4 copies of one new message at once: one Run, no 429 (K1)
    expect((await post(admission(`/v1/runs/${runOf(held)}/cancel`), dave, { reason: 'quota test' })).status).toBe(202);
    await t.waitForSettlement(runOf(held), 30_000);
    await projected(dave, runOf(held), 'settled');
    const copies = await Promise.all([1, 2, 3, 4].map(() => post(messages, dave, message('d6'))));
    expect(copies.map((r) => r.status)).not.toContain(429);
    expect(copies.map((r) => r.status)).toContain(201);
    expect((await t.log.readRun(runOf('d6'))).filter((e) => e.event.type === 'run.admitted')).toHaveLength(1);
    expect((await post(admission(`/v1/runs/${runOf('d6')}/cancel`), dave, { reason: 'quota test' })).status).toBe(202);
    await t.waitForSettlement(runOf('d6'), 30_000);
  }, 120_000);

  it('given the Runs above settled and projected, then projections rebuilt from the log give the same counts and charges (K11)', async () => {
    const rebuildDb = `rp_${t.tag}_rebuild`;
    const rebuilt = await rebuildProjections({ log: t.log, databaseUrl: t.env.DATABASE_URL!, targetDatabase: rebuildDb });
    const live = await createProjectionOrm({ databaseUrl: t.env.DATABASE_URL! });
    const copy = await createProjectionOrm({ databaseUrl: t.env.DATABASE_URL!.replace(/\/[^/]+$/, `/${rebuildDb}`) });
    try {
      expect(rebuilt.differences).toEqual([]);
      const since = new Date(Date.now() - 3_600_000);
      const daySince = new Date(Date.now() - 86_400_000);
      for (const principal of ['alice', 'bob', 'carol']) {
        const [a, b] = await Promise.all([quotaUsageOf(live, principal, since), quotaUsageOf(copy, principal, since)]);
        expect(b).toEqual(a);
        const [ca, cb] = await Promise.all([costChargesOf(live, principal, daySince), costChargesOf(copy, principal, daySince)]);
        expect(cb).toEqual(ca);
      }
      expect((await costChargesOf(live, 'carol', daySince)).map((c) => c.upperMicros)).toEqual([1_000_010]);
      expect((await quotaUsageOf(live, 'alice', since)).admittedSince).toHaveLength(3);
    } finally {
      await Promise.all([live.close(), copy.close()]);
      const { dropDatabase } = await import('@runplane/devstack');
      await dropDatabase(t.env.DATABASE_URL!.replace(/\/[^/]+$/, `/${rebuildDb}`));
    }
  }, 60_000);
});
